"""Disk after successive micro-releases: the store at rest against the peer after ``git gc``.

Setup (untimed): a private copy of the corpus tree, a real ``snapd start`` with a fresh
SNAPD_HOME, ``snapctl watch`` (the baseline), the peer's first snap. Then ``--versions``
rounds, alternating which side goes first (peer, snapd, then snapd, peer…): 10 files changed
(``peer.Changes``), a snapd mark (``Client.call("mark")``) and a peer snap of the same state,
so both hold every version.

The store is measured after ``snapctl gc`` and **at rest** (``common.gc_at_rest``: GC repacks,
as the peer gets ``git gc``; then the daemon is stopped: SQLite checkpoints its WAL into the
catalog and deletes it on close), then ``du`` of SNAPD_HOME; before the series and after it.
A running daemon's WAL keeps the length of its largest transaction (the baseline's), which is
what made ``bench_mark.py``'s growth figure void. The peer: ``du`` of its gitdir after ``git
gc``, before and after. The ratio is the two growths.

    python bench/bench_disk.py --corpus django --size 100k --versions 214
"""

from __future__ import annotations

import argparse
import os
import sqlite3
import time
from pathlib import Path

from common import (
    Results,
    common_args,
    daemon_run,
    gc_at_rest,
    peer_baseline,
    scratch_copy,
    start_watching,
    tree_path,
)
from peer import Changes, du_bytes, peer_gc, peer_snap

MB = 1e6


def breakdown(home: Path) -> dict[str, int]:
    """Where the bytes of a stopped daemon's SNAPD_HOME are: ``du`` of each entry of it and of
    the store, and the catalog's pages per table and index (SQLite's ``dbstat``)."""
    out = {str(p.relative_to(home)): du_bytes(p) for p in [*home.iterdir(), *(home / "store").iterdir()]}
    db = sqlite3.connect(f"file:{home / 'store' / 'catalog.sqlite'}?mode=ro", uri=True)
    try:
        for name, size in db.execute("SELECT name, SUM(pgsize) FROM dbstat GROUP BY name"):
            out[f"catalog:{name}"] = int(size)
        for codec, n, stored in db.execute("SELECT codec, COUNT(*), SUM(stored) FROM objects GROUP BY codec"):
            out[f"objects codec {codec}: count"] = int(n)
            out[f"objects codec {codec}: payload bytes"] = int(stored)
    finally:
        db.close()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    common_args(ap)
    ap.add_argument("--versions", type=int, default=214, help="marks of 10 changed files")
    ap.add_argument("--changed", type=int, default=10)
    args = ap.parse_args()
    tree = tree_path(args.corpus, args.size)
    res = Results("disk", args.corpus, args.size, {
        "versions": args.versions, "changed_per_mark": args.changed,
        "snapd": "Client.call mark; SNAPD_HOME measured after snapctl gc, with the daemon stopped (no WAL)",
        "peer": "sidegit snap; gitdir measured after git gc",
    })
    ws, scratch, root = scratch_copy(tree, f"disk-{args.corpus}-{args.size}")
    from common import capture_pool

    pool = capture_pool(ws)
    changed = Changes(ws, args.changed, pool)
    with daemon_run(res, scratch) as d:
        start_watching(d, root)
        gitdir = peer_baseline(ws, scratch)
        before = {"snapd": gc_at_rest(d), "peer_gc": peer_gc(gitdir)}
        res.figure("snapd_before", breakdown(d.home), "SNAPD_HOME before, at rest")
        d.start()
        from snapd.ipc.client import Client

        client = Client(d.endpoint, timeout_s=600)
        root_b = os.fsencode(root)
        t0 = time.perf_counter()
        for i in range(args.versions):
            changed()
            for side in ("snapd", "peer") if i % 2 else ("peer", "snapd"):
                if side == "snapd":
                    client.call("mark", label="turn", workspace=root_b)
                else:
                    peer_snap(ws, gitdir, f"turn-{i}")
            if (i + 1) % 50 == 0:
                print(f"    {i + 1}/{args.versions} versions, {time.perf_counter() - t0:.0f} s", flush=True)
        client.close()
        after = {"snapd": gc_at_rest(d), "peer_gc": peer_gc(gitdir)}
        res.figure("snapd_after", breakdown(d.home), "SNAPD_HOME after, at rest")
        b0, b1 = res.data["figures"]["snapd_before"], res.data["figures"]["snapd_after"]
        res.figure("snapd_growth", {k: v - b0.get(k, 0) for k, v in b1.items() if v != b0.get(k, 0)},
                   "SNAPD_HOME growth, by entry")
        growth_s, growth_p = after["snapd"] - before["snapd"], after["peer_gc"] - before["peer_gc"]
        res.figure("disk", {"before": before, "after": after}, "disk bytes before/after (snapd at rest)")
        growth = {"snapd": growth_s, "peer_gc": growth_p, "versions": args.versions}
        res.figure("micro_release_growth", growth,
                   "growth over the micro-releases (snapd at rest; peer after git gc)")
        res.verdict("store on disk vs the peer after git gc, successive micro-releases", "<= 1x",
                    f"{growth_s / max(growth_p, 1):.2f}x ({args.versions} versions of {args.changed} changed "
                    f"files: snapd +{growth_s / MB:.2f} MB, peer after gc +{growth_p / MB:.2f} MB)",
                    growth_s <= growth_p)


if __name__ == "__main__":
    main()
