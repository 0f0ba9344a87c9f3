"""Where a watching daemon's memory goes, and where a restart's start-up time goes, in-process.

Memory: a fresh store, a copy of the corpus tree, and the workspace started in this process
(the baseline, as ``snapctl watch`` runs it). Printed after it: VmRSS and VmHWM; Python's
small-object allocator (pymalloc: objects up to 512 bytes live in 1 MiB arenas, and an arena
goes back to the system only when every object in it is freed) — the arenas held, the bytes
of live objects in them and the empty 16 KiB pools among them; and the heaviest allocation
sites still alive (tracemalloc, with ``--tracemalloc``: several times slower).

``--marks N``: then N marks of 10 changed files sent right after their changes (as
``bench_mark.py``'s, in process), VmRSS, what the node cache holds, and one heap trim
(``snapd.memtrim``) timed, with VmRSS after it: what the daemon's idle trim gives back.

Restart: the workspace stopped and started again on the same store, nothing changed on disk,
three times; each start split into its phases (loading the stat cache, starting the watcher,
the reconcile scan) by timing those calls; then the stat cache's load alone, three times,
with no watcher placing watches beside it. The page cache is warm; the process is this one
(the baseline's heap included), so only the times are read from this part.

    python bench/profile_memory.py --corpus django --size 100k
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

from common import Results, capture_pool, proc_mem, scratch_copy, spread, tree_path
from peer import Changes, remove, warm

MB = 1e6


def pymalloc() -> dict[str, int]:
    """Arenas held, bytes in live blocks, bytes of empty pools: sys._debugmallocstats, parsed
    (it writes to the C stderr)."""
    with tempfile.TemporaryFile("w+") as f:
        saved = os.dup(2)
        os.dup2(f.fileno(), 2)
        try:
            sys._debugmallocstats()
        finally:
            os.dup2(saved, 2)
            os.close(saved)
        f.seek(0)
        text = f.read()
    out = {}
    for line in text.splitlines():
        value = line.rpartition("=")[2].strip().replace(",", "")
        if "arenas allocated current" in line:
            out["arenas"] = int(value)
        elif "bytes in allocated blocks" in line:
            out["live_bytes"] = int(value)
        elif "unused pools *" in line:
            out["empty_pool_bytes"] = int(value)
    return out


def timed(owner: Any, name: str, phases: dict[str, float], label: str) -> None:
    """Wrap ``owner.name`` so each call adds its duration to ``phases[label]``."""
    inner: Callable[..., Any] = getattr(owner, name)

    def call(*args: Any, **kwargs: Any) -> Any:
        t = time.perf_counter()
        try:
            return inner(*args, **kwargs)
        finally:
            phases[label] = phases.get(label, 0.0) + time.perf_counter() - t

    setattr(owner, name, call)


def after_marks(res: Results, ws: Any, store: Any, root: str, n: int) -> None:
    """``n`` marks of 10 changed files (``peer.Changes``), sent right after their changes, in
    process; then VmRSS, what the node cache holds, and one ``memtrim.trim`` timed with the
    VmRSS after it (what the daemon's idle trim gives back)."""
    from snapd import memtrim

    pool = capture_pool(Path(root))
    changes = Changes(root, 10, pool)
    times = []
    for _ in range(n):
        changes()
        t = time.perf_counter()
        ws.mark("turn")
        times.append(time.perf_counter() - t)
    res.figure("marks_inproc_s", spread(times), f"{n} marks of 10 changed files, in process", unit="ms")
    busy = proc_mem(os.getpid())["VmRSS"]
    res.figure("rss_after_marks_MB", round(busy / MB, 1), "VmRSS right after the marks", unit="MB")
    res.figure("node_cache", {"nodes": store.cached_nodes, "entries": store._nodes._held},
               "node cache: nodes and entries held")
    t = time.perf_counter()
    memtrim.trim()
    res.figure("trim_ms", round((time.perf_counter() - t) * 1000, 2), "malloc_trim, ms")
    trimmed = proc_mem(os.getpid())["VmRSS"]
    res.figure("rss_after_trim_MB", round(trimmed / MB, 1), "VmRSS after it", unit="MB")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--corpus", default="django")
    ap.add_argument("--size", default="1k")
    ap.add_argument("--tracemalloc", action="store_true", help="allocation sites (slow)")
    ap.add_argument("--marks", type=int, default=0,
                    help="after the baseline: this many marks of 10 changed files, then the heap trim")
    args = ap.parse_args()
    tree = tree_path(args.corpus, args.size)
    res = Results("memory", args.corpus, args.size, {
        "what": "in-process: baseline of a fresh store, then 3 restarts of the workspace",
        "page_cache": "warm", "tracemalloc": args.tracemalloc})
    if args.tracemalloc:
        tracemalloc.start(4)
    from snapd.capture import scan as scan_module
    from snapd.capture.statcache import StatCache
    from snapd.capture.watcher import Watcher
    from snapd.capture.workspace import Workspace
    from snapd.config import CaptureSettings
    from snapd.store.store import Store

    ws_dir, scratch, root = scratch_copy(tree, f"memory-{args.corpus}-{args.size}")
    try:
        warm(ws_dir)
        store = Store.open(scratch / "store")
        ws_id = store.add_workspace(os.fsencode(root))
        ws = Workspace(store, ws_id, Path(root), CaptureSettings())
        t = time.perf_counter()
        ws.start()
        res.figure("baseline_s", time.perf_counter() - t, "baseline, in-process")
        mem = proc_mem(os.getpid())
        heap = pymalloc()
        res.figure("rss_after_baseline_MB", round(mem["VmRSS"] / MB, 1), "VmRSS after the baseline",
                   unit="MB")
        res.figure("hwm_MB", round(mem["VmHWM"] / MB, 1), "VmHWM (peak)", unit="MB")
        if {"arenas", "live_bytes", "empty_pool_bytes"} <= heap.keys():
            res.figure("pymalloc_arenas_MB", round(heap["arenas"] * 1.048576, 1),
                       "pymalloc arenas held (1 MiB each)", unit="MB")
            res.figure("pymalloc_live_MB", round(heap["live_bytes"] / MB, 1), "bytes of live objects in them",
                       unit="MB")
            res.figure("pymalloc_empty_pools_MB", round(heap["empty_pool_bytes"] / MB, 1),
                       "empty pools inside held arenas (fragmentation)", unit="MB")
        else:  # seen once, at django-500k under --tracemalloc: the stats' text came back without them
            res.note(f"pymalloc's statistics could not be read (found {sorted(heap)})")
        res.figure("paths", len(ws.capturer.stats), "stat cache entries")
        if args.tracemalloc:
            snap = tracemalloc.take_snapshot()
            res("  live allocations by site (tracemalloc), largest first:")
            for s in snap.statistics("lineno")[:15]:
                frame = s.traceback[0]
                where = f"{Path(frame.filename).name}:{frame.lineno}"
                res(f"    {s.size / MB:7.1f} MB {s.count:8d} objects  {where}")
            tracemalloc.stop()
        if args.marks:
            after_marks(res, ws, store, root, args.marks)
        ws.stop()

        phases: dict[str, float] = {}
        timed(StatCache, "from_rows", phases, "load_stats")  # Store.load_stats's rows, as they come
        timed(Watcher, "start", phases, "watches")
        timed(scan_module, "scan", phases, "scan")
        timed(scan_module, "catch_up", phases, "catch_up")  # a restart's reconcile scan
        runs = []
        for _ in range(3):
            phases.clear()
            again = Workspace(store, ws_id, Path(root), CaptureSettings())
            t = time.perf_counter()
            again.start()
            runs.append({"total": time.perf_counter() - t, **phases})
            again.stop()
        for key in runs[0]:
            values = sorted(r[key] for r in runs)
            res.figure(f"restart_{key}_s", values[1], f"restart in-process, {key} (median of 3)")
        alone = []
        for _ in range(3):  # the same load with no watcher placing watches beside it
            phases.clear()
            StatCache.from_rows(store.load_stats(ws_id))
            alone.append(phases["load_stats"])
        res.figure("stat_cache_load_alone_s", sorted(alone)[1],
                   "stat cache load alone, no placement beside it (median of 3)")
        store.close()
    finally:
        remove(scratch)
    res.write()


if __name__ == "__main__":
    main()
