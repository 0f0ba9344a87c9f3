"""Where a store's bytes are: an in-process probe (no daemon, no peer, no verdict).

A private copy of the corpus, a baseline through ``Workspace.start`` (the product's capture,
in process), optionally ``gc.run`` with the default retention (``--gc``: it repacks) and a
full ``VACUUM`` (``--vacuum``: what GC does not do), then ``--versions`` marks of 10 changed
files (``peer.Changes``, as ``bench_disk.py``). After each step the store is closed (SQLite
checkpoints its WAL) and the catalog's pages per table and index are printed (SQLite's
``dbstat``), with the objects' payload per codec, row counts and ``du`` of the store. For
comparing formats and storage changes between commits; the verdicts are ``bench_disk.py``'s
and ``bench_baseline.py``'s.

    python bench/disk_probe.py --corpus django --size 100k --versions 214 [--gc [--vacuum]]

``--pairs`` prints instead what pairing by file name would give on the corpus itself: each
distinct content, in walk order, whole (zstd) or as a delta against the two earlier contents
of the same base name closest in size (kept at <= 1/2 and depth <= 8, as GC's repack does).
"""

from __future__ import annotations

import argparse
import os
import sqlite3
import time
from pathlib import Path

from common import capture_pool, tree_path
from peer import Changes, copy_tree, du_bytes, remove

from snapd.capture.workspace import Workspace
from snapd.config import CaptureSettings, Retention
from snapd.store import gc, objects
from snapd.store.store import Store


def breakdown(store_dir: Path) -> dict[str, int]:
    db = sqlite3.connect(f"file:{store_dir / 'catalog.sqlite'}?mode=ro", uri=True)
    try:
        out = {str(n): int(s) for n, s in db.execute("SELECT name, SUM(pgsize) FROM dbstat GROUP BY name")}
        for codec, n, stored in db.execute("SELECT codec, COUNT(*), SUM(stored) FROM objects GROUP BY codec"):
            out[f"objects codec {codec}: count"] = int(n)
            out[f"objects codec {codec}: payload"] = int(stored)
        for table in ("objects", "versions", "stats", "marks"):
            out[f"rows {table}"] = int(db.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0])
        # what a mark's row holds, column by column (its text as stored)
        for col in ("summary", "tree", "rules", "absent", "message", "label", "id"):
            sql = f"SELECT TOTAL(length(CAST({col} AS BLOB))) FROM marks"
            out[f"marks {col}: bytes"] = int(db.execute(sql).fetchone()[0])
    finally:
        db.close()
    out["du store"] = du_bytes(store_dir)
    return out


def pairs(tree: Path) -> None:
    """The payload of the corpus's distinct contents whole, and paired by base name."""
    seen: set[bytes] = set()
    by_name: dict[str, list[tuple[bytes, int]]] = {}
    whole_total = paired_total = deltas = 0
    for dirpath, dirs, files in os.walk(tree):
        dirs.sort()
        for name in sorted(files):
            p = Path(dirpath, name)
            if p.is_symlink() or not p.is_file():
                continue
            data = p.read_bytes()
            fp = objects.fingerprint(data)
            if fp in seen:
                continue
            seen.add(fp)
            whole = len(objects.encode(data)[1])
            cands = sorted(by_name.get(name, []), key=lambda c: abs(len(c[0]) - len(data)))[:2]
            best, depth = whole, 0
            for base, base_depth in cands:
                delta = len(objects.encode_delta(base, data))
                if base_depth < objects.MAX_DEPTH and delta * objects.DELTA_GAIN <= whole and delta < best:
                    best, depth = delta, base_depth + 1
            deltas += best < whole
            whole_total, paired_total = whole_total + whole, paired_total + best
            by_name.setdefault(name, []).append((data, depth))
    print(
        f"{len(seen)} distinct contents: {whole_total:,} bytes whole, {paired_total:,} paired by "
        f"base name ({deltas} deltas)"
    )


def show(title: str, before: dict[str, int], after: dict[str, int]) -> None:
    print(f"\n{title}\n{'':44s} {'before':>12s} {'after':>12s} {'change':>12s}")
    for k in sorted(set(before) | set(after)):
        b, a = before.get(k, 0), after.get(k, 0)
        print(f"{k:44s} {b:>12,} {a:>12,} {a - b:>+12,}")


def opened(store_dir: Path, root: Path) -> tuple[Store, Workspace]:
    store = Store.open(store_dir)
    return store, Workspace(store, store.add_workspace(os.fsencode(root)), root, CaptureSettings())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--corpus", default="django", choices=["django", "npm"])
    ap.add_argument("--size", default="100k", choices=["1k", "10k", "100k"])
    ap.add_argument("--versions", type=int, default=214)
    ap.add_argument("--gc", action="store_true", help="gc.run after the baseline")
    ap.add_argument("--vacuum", action="store_true", help="and a full VACUUM after it")
    ap.add_argument("--pairs", action="store_true", help="only the payload paired by base name")
    args = ap.parse_args()
    if args.pairs:
        pairs(tree_path(args.corpus, args.size))
        return
    root = copy_tree(tree_path(args.corpus, args.size), f"probe-{args.corpus}-{args.size}")
    store_dir = root.parent / "store"
    try:
        store, ws = opened(store_dir, root)
        t = time.perf_counter()
        ws.start()
        ws.stop()
        store.close()
        print(f"baseline {time.perf_counter() - t:.1f} s")
        base = breakdown(store_dir)
        if args.gc:
            store = Store.open(store_dir)
            rep = gc.run(store, Retention())
            store.close()
            print(f"gc: {rep.repacked} objects repacked, {rep.repack_saved:,} payload bytes saved")
            if args.vacuum:
                db = sqlite3.connect(store_dir / "catalog.sqlite")
                db.execute("VACUUM")
                db.close()
            show("the baseline's store, before and after GC", base, after_gc := breakdown(store_dir))
            base = after_gc
        else:
            show("the baseline's store", {}, base)
        pool = capture_pool(root)
        store, ws = opened(store_dir, root)
        ws.start()
        changes = Changes(root, 10, pool)
        for _ in range(args.versions):
            changes()
            ws.mark("turn")
        ws.stop()
        store.close()
        show(f"growth over {args.versions} marks of 10 changed files", base, breakdown(store_dir))
    finally:
        remove(root.parent)


if __name__ == "__main__":
    main()
