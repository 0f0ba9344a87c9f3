"""Store benchmark: snapd's ingest against the side-git peer, in one run, on the same tree.

For each size: the corpus tree is copied to a private workspace under bench/data/work (same
file system, never tmpfs), read once (warm page cache), then
  1. baseline: snapd ``ingest_tree`` into a fresh store  vs  the peer's first ``snap`` into a
     fresh gitdir — seconds, files/s, MB/s, allocated bytes of the store / gitdir;
  2. incremental: ``change_files`` (10 files, a line appended) then snapd ``capture_paths`` of
     exactly those paths, --runs times (median, p99)  vs  the peer's ``snap`` --peer-runs times.
Both sides see the same bytes; neither writes into the workspace. Ratios: peer_time/snapd_time
(> 1: snapd faster) and snapd_du/peer_du (< 1: snapd smaller).

    python bench/make_tree.py --size all
    python bench/bench_store.py --sizes 10k,100k
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from peer import (  # noqa: E402
    DATA,
    cache_note,
    change_files,
    copy_tree,
    count,
    du_bytes,
    list_files,
    peer_init,
    peer_snap,
    warm,
)


def load_snapd() -> tuple[Any, Any, Any]:
    """snapd's Store, ingest_tree and capture_paths, or exit with what is missing."""
    top = Path(__file__).resolve().parent.parent
    sys.path[:0] = [str(top), str(top / "tests")]  # ingest_helpers: whole-tree capture without a daemon
    try:
        from ingest_helpers import capture_paths, ingest_tree

        from snapd.store.store import Store
    except ImportError as e:
        sys.exit(
            f"bench_store: snapd's store API is not there yet ({e}); it needs "
            "snapd.store.store.Store and tests/ingest_helpers.py"
        )
    return Store, ingest_tree, capture_paths


def p99(xs: list[float]) -> float:
    """Nearest-rank 99th percentile (the maximum for fewer than 100 runs)."""
    s = sorted(xs)
    return s[min(len(s) - 1, max(0, -(-99 * len(s) // 100) - 1))]


def bench_size(size: str, runs: int, peer_runs: int, changed: int) -> dict[str, Any]:
    Store, ingest_tree, capture_paths = load_snapd()
    tree = DATA / f"tree-{size}"
    if not tree.is_dir():
        sys.exit(f"{tree} missing: run python bench/make_tree.py --size {size}")
    ws = copy_tree(tree, f"bench-{size}")
    scratch = ws.parent
    try:
        root = os.path.realpath(ws)
        root_b = os.fsencode(root)
        files, nbytes = count(ws)
        warm(ws)
        r: dict[str, Any] = {"size": size, "files": files, "bytes": nbytes}

        # 1. baseline, snapd
        store_dir = Path(tempfile.mkdtemp(prefix="store-", dir=scratch))
        os.sync()  # no writeback of the copy during the timing
        t0 = time.perf_counter()
        store = Store.open(store_dir)
        wsid = store.add_workspace(root_b)
        t1 = time.perf_counter()
        res = ingest_tree(store, wsid, root_b)
        t2 = time.perf_counter()
        r["snapd_open_s"] = t1 - t0
        r["snapd_s"] = t2 - t1
        r["snapd_files"], r["snapd_bytes"] = res.files, res.bytes
        store.close()
        r["snapd_du_base"] = du_bytes(store_dir)

        # 1. baseline, peer — the same bytes, still warm
        gitdir = scratch / "sidegit"
        peer_init(ws, gitdir)
        os.sync()  # nor of snapd's store
        r["peer_s"], _ = peer_snap(ws, gitdir, "baseline")
        r["peer_du_first"] = du_bytes(gitdir)

        # 2. incremental, snapd (store reopened once, then stays open, as in the daemon)
        store = Store.open(store_dir)
        pool = list_files(ws)
        inc: list[float] = []
        for i in range(runs):
            paths = change_files(ws, changed, seed=i, files=pool)
            t0 = time.perf_counter()
            capture_paths(store, wsid, root_b, paths, label="turn")
            inc.append(time.perf_counter() - t0)
        store.close()
        r["snapd_inc"] = inc
        r["snapd_du"] = du_bytes(store_dir)  # after baseline + the incremental marks

        # 2. incremental, peer: first absorb snapd's changes untimed, then changed-files runs
        peer_snap(ws, gitdir, "catch-up")
        pinc: list[float] = []
        for i in range(peer_runs):
            change_files(ws, changed, seed=10_000 + i, files=pool)
            pinc.append(peer_snap(ws, gitdir, f"turn-{i}")[0])
        r["peer_inc"] = pinc
        r["peer_du"] = du_bytes(gitdir)
        return r
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def report(rs: list[dict[str, Any]], runs: int, peer_runs: int, changed: int) -> str:
    mb = 1e6
    out = [
        f"{'tree':>6} {'who':>5} {'files':>7} {'MB':>7} {'seconds':>8} {'files/s':>9} "
        f"{'MB/s':>7} {'du bytes':>12}"
    ]
    for r in rs:
        f, b = r["files"], r["bytes"]
        for who, s, du in (
            ("snapd", r["snapd_s"], r["snapd_du_base"]),
            ("peer", r["peer_s"], r["peer_du_first"]),
        ):
            out.append(
                f"{r['size']:>6} {who:>5} {f:7d} {b / mb:7.1f} {s:8.3f} {f / s:9.0f} "
                f"{b / mb / s:7.1f} {du:12d}"
            )
        out.append(
            f"{'':>6} ratio peer_time/snapd_time {r['peer_s'] / r['snapd_s']:.2f}   "
            f"snapd_du/peer_du {r['snapd_du_base'] / r['peer_du_first']:.2f}   "
            f"(snapd ingested {r['snapd_files']} files, {r['snapd_bytes']} bytes; "
            f"open+add_workspace {r['snapd_open_s'] * 1e3:.1f} ms)"
        )
    out.append("")
    out.append(
        f"incremental snapshot of {changed} changed files "
        f"(snapd {runs} runs, peer {peer_runs} runs), milliseconds"
    )
    out.append(
        f"{'tree':>6} {'snapd med':>10} {'snapd p99':>10} {'peer med':>10} "
        f"{'peer/snapd':>10} {'snapd du':>12} {'peer du':>12}"
    )
    for r in rs:
        sm, sp = statistics.median(r["snapd_inc"]), p99(r["snapd_inc"])
        pm = statistics.median(r["peer_inc"])
        out.append(
            f"{r['size']:>6} {sm * 1e3:10.2f} {sp * 1e3:10.2f} {pm * 1e3:10.1f} "
            f"{pm / sm:10.1f} {r['snapd_du']:12d} {r['peer_du']:12d}"
        )
    out.append(
        f"(du after the increments: snapd baseline + {runs} marks; peer baseline + one untimed "
        f"catch-up snap of snapd's {runs * changed} changes + {peer_runs} snaps)"
    )
    return "\n".join(out)


def main() -> None:
    ap = argparse.ArgumentParser(description="snapd store ingest vs the side-git peer")
    ap.add_argument("--sizes", default="10k,100k", help="comma list of 1k, 10k, 100k")
    ap.add_argument("--runs", type=int, default=30, help="snapd incremental runs")
    ap.add_argument("--peer-runs", type=int, default=5, help="peer incremental runs")
    ap.add_argument("--changed", type=int, default=10, help="files changed per increment")
    ap.add_argument("--out", type=Path, help="also write the table to this file")
    ap.add_argument("--drop-caches", action="store_true", help="drop the page cache at start")
    args = ap.parse_args()
    load_snapd()  # fail fast, before copying trees
    print(
        f"# {cache_note(args.drop_caches)}; timings are warm-cache; load average "
        f"{os.getloadavg()[0]:.2f} (other sessions share the machine)",
        flush=True,
    )
    rs = []
    for size in args.sizes.split(","):
        r = bench_size(size.strip(), args.runs, args.peer_runs, args.changed)
        rs.append(r)
        print(f"# {size}: done", flush=True)
    text = report(rs, args.runs, args.peer_runs, args.changed)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")


if __name__ == "__main__":
    main()
