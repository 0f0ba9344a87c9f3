"""Restart with nothing changed: process start -> answers ``status``; -> first mark done.

Setup (untimed): snapd's bytecode compiled (as an installed snapd has it), a private copy of
the corpus tree with every mtime set an hour back (outside the racy window, so nothing needs
re-reading), a real ``snapd start``, ``snapctl watch`` (the
baseline), a clean stop. Then ``--reps`` times: spawn ``snapd start`` (t0); poll ``status``
every 10 ms on an in-process client until the new pid answers (t1); call ``mark`` on the
workspace at once (it waits for the workspace to be ready) and take its reply (t2); read the
workspace's ``reads`` counter (files re-read: should be 0) and the daemon's VmRSS/VmHWM;
stop cleanly. ``--profile``: one more restart launched under py-spy (all threads, from the
first instruction), through its first mark; the summary is printed.

The floors, after each restart with the daemon stopped (same rounds, so the same load): what a
restart cannot skip, each timed alone in a fresh process (``--floor KIND``): the interpreter
with the daemon's imports (``snapd.daemon.main``, wall time from spawn to exit); loading the
stat cache from the catalog (``StatCache.from_rows(Store.load_stats)``, as a start does); one
``inotify_add_watch`` per cached directory on a fresh instance (``snapd.capture.inotify``, as
the placement does); one ``lstat`` per cached path (the reconcile scan's floor: it compares
each with its entry too). The first mark waits for all four, one after another (the order of
``7938ed3``: run side by side they took longer, the GIL passed at every system call); their
medians' sum is printed beside the target.

    python bench/bench_restart.py --corpus django --size 100k
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from common import (
    RESULTS,
    Daemon,
    Results,
    age_tree,
    common_args,
    compile_bytecode,
    daemon_run,
    proc_mem,
    scratch_copy,
    spread,
    start_watching,
    tree_path,
    workspace_of,
)
from peer import warm

from snapd.errors import SnapdError


def restart_once(d: Daemon, root: str, wrap: list[str] | None = None) -> dict[str, Any]:
    from snapd.ipc.client import Client

    t0 = d.spawn(wrap)
    deadline = time.monotonic() + 600
    with Client(d.endpoint, timeout_s=600) as c:
        while True:
            try:
                st = c.call("status", timeout_s=1.0)
                if wrap or st["pid"] == d.pid:
                    break
            except SnapdError:
                pass
            if time.monotonic() > deadline:
                raise SystemExit("restarted daemon never answered status")
            time.sleep(0.01)
        t1 = time.perf_counter()
        c.call("mark", label="after-restart", workspace=os.fsencode(root))
        t2 = time.perf_counter()
        w = workspace_of(c.call("status"), root)
        mem = proc_mem(st["pid"])
    d.stop()
    reads = w.get("reads", (w.get("counters") or {}).get("files_read"))
    return {"status_s": t1 - t0, "mark_s": t2 - t0, "reads": reads, "files": w.get("files"), **mem}


FLOORS = ("imports", "load", "watches", "lstat")


def floor_child(kind: str, home: str, root: str) -> float:
    """One floor, timed in this (fresh) process; the daemon is stopped."""
    from snapd.capture import inotify
    from snapd.capture.statcache import StatCache
    from snapd.store.store import Store

    rootb = os.fsencode(root)
    with Store.open(Path(home) / "store") as store:
        (ws,) = [w.id for w in store.workspaces() if w.root == rootb]
        t = time.perf_counter()
        cache = StatCache.from_rows(store.load_stats(ws))
        if kind == "load":
            return time.perf_counter() - t
    if kind == "watches":
        dirs = [rootb + b"/" + p if p else rootb for p in cache.directories()]
        fd = inotify.open_instance(Path(root))
        t = time.perf_counter()
        failed = sum(inotify.add_watch(fd, d)[0] < 0 for d in dirs)
        elapsed = time.perf_counter() - t
        os.close(fd)
        if failed:
            raise SystemExit(f"{failed} of {len(dirs)} watches failed")
        return elapsed
    assert kind == "lstat"
    paths = [rootb + b"/" + p if p else rootb for p in cache.paths()]
    t = time.perf_counter()
    for p in paths:
        os.lstat(p)
    return time.perf_counter() - t


def floors(d: Daemon, root: str) -> dict[str, float]:
    """Each floor once, in a process of its own (the daemon stopped)."""
    out: dict[str, float] = {}
    env = d.env
    for kind in FLOORS:
        if kind == "imports":
            t = time.perf_counter()
            subprocess.run([sys.executable, "-c", "import snapd.daemon.main"], env=env, check=True)
            out[kind] = time.perf_counter() - t
            continue
        cmd = [sys.executable, __file__, "--floor", kind, "--home", str(d.home), "--root", root]
        done = subprocess.run(cmd, env=env, check=True, capture_output=True, text=True)
        out[kind] = float(json.loads(done.stdout.strip().splitlines()[-1]))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    common_args(ap)
    ap.add_argument("--profile", action="store_true")
    ap.add_argument("--floor", choices=FLOORS[1:], help=argparse.SUPPRESS)  # a floor's own process
    ap.add_argument("--home", help=argparse.SUPPRESS)
    ap.add_argument("--root", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.floor:
        print(json.dumps(floor_child(args.floor, args.home, args.root)))
        return
    tree = tree_path(args.corpus, args.size)
    res = Results("restart", args.corpus, args.size, {
        "reps": args.reps, "what": "spawn snapd start -> status answers -> first mark reply; "
                                   "nothing changed while stopped", "page_cache": "warm",
        "bytecode": "compiled, as pip installs it"})
    compile_bytecode()  # a restart is timed from process start: its imports are in it
    ws, scratch, root = scratch_copy(tree, f"restart-{args.corpus}-{args.size}")
    age_tree(ws)
    warm(ws)
    with daemon_run(res, scratch) as d:
        start_watching(d, root)
        d.stop()
        runs, floor_runs = [], []
        for i in range(args.reps):
            runs.append(restart_once(d, root))
            floor_runs.append(floors(d, root))
            r, f = runs[-1], floor_runs[-1]
            print(f"    rep {i + 1}/{args.reps}: status {r['status_s']:.3f} s, "
                  f"first mark {r['mark_s']:.3f} s, reads {r['reads']}; floors "
                  + ", ".join(f"{k} {v:.3f} s" for k, v in f.items()), flush=True)
        st = spread([r["status_s"] for r in runs])
        mk = spread([r["mark_s"] for r in runs])
        res.figure("status_s", st, "process start -> answers status")
        res.figure("first_mark_s", mk, "process start -> first mark done")
        res.figure("reads", [r["reads"] for r in runs], "files re-read by each restart")
        res.figure("files", runs[0]["files"], "files watched")
        res.figure("rss_MB", spread([r["VmRSS"] / 1e6 for r in runs]), "VmRSS after the first mark, MB",
                   unit="MB")
        res.figure("hwm_MB", spread([r["VmHWM"] / 1e6 for r in runs]), "VmHWM after the first mark, MB",
                   unit="MB")
        fl = {k: spread([f[k] for f in floor_runs]) for k in FLOORS}
        for k in FLOORS:
            res.figure(f"floor_{k}_s", fl[k], f"floor: {k}, alone in a process of its own")
        floor_sum = sum(fl[k]["median"] for k in FLOORS)
        res.figure("floor_sum_s", round(floor_sum, 3), "floors: the four medians summed, s")
        if args.size == "100k":
            res.verdict("restart, nothing changed: process start -> answers status", "<= 0.5 s",
                        f"{st['median']:.2f} s (min {st['min']:.2f}, max {st['max']:.2f})",
                        st["median"] <= 0.5)
            res.verdict("restart, nothing changed: process start -> first mark done", "<= 1 s",
                        f"{mk['median']:.2f} s (min {mk['min']:.2f}, max {mk['max']:.2f}); "
                        f"its floors alone sum to {floor_sum:.2f} s", mk["median"] <= 1.0)
        if args.size == "500k":  # issue 33's 500k row
            res.verdict("500k: restart, nothing changed: process start -> first mark done", "<= 2 s",
                        f"{mk['median']:.2f} s (min {mk['min']:.2f}, max {mk['max']:.2f}); "
                        f"its floors alone sum to {floor_sum:.2f} s", mk["median"] <= 2.0)
        if args.profile:
            from pyspy import PY_SPY, lines, summary

            out = RESULTS / f"restart-{args.corpus}-{args.size}.pyspy.txt"
            restart_once(d, root, wrap=[PY_SPY, "record", "--format", "raw", "--output", str(out),
                                        "--rate", "200", "--threads", "--"])
            s = summary(out)
            res.figure("profile_restart", s)
            res("  py-spy profile of one restart through its first mark (whole process life):")
            for line in lines(s):
                res(f"    {line}")


if __name__ == "__main__":
    main()
