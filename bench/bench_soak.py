"""The daemon's memory over a long day: VmRSS of a real daemon over ``--marks`` marks (10,000).

Setup (untimed): a private copy of django-10k cut to its first 5,000 files in path order (the
rest deleted, with the directories left empty), a real ``snapd start`` with a fresh SNAPD_HOME
and its default settings (the periodic GC included: its first run comes a tenth of
``gc_interval_s`` after start, 6 minutes, inside a 10,000-mark run), ``snapctl watch`` (the
baseline). Then, back to back, as an agent working all day would: 30 appends (one line each,
to 30 files picked at random among those snapd captures, ``peer.Changes``) and a mark
(``Client.call("mark")`` on one open connection), ``--marks`` times. The daemon is never quiet
for long: its idle heap trim (``snapd.memtrim``) may never run.

Printed: the daemon's VmRSS and VmHWM (``/proc/PID/status``) after the baseline, after the
first 200 marks (the reference), and every ``--every`` marks (500) with the elapsed time and
the load; at the end the ratio of the last VmRSS to the reference. Two verdicts on the whole
curve (issue 33): ``flat``, the largest VmRSS sampled after the reference at most 1.5 times
the reference; and every VmRSS sampled at most 150 MB. RSS is not a timing: one run, no
repetitions, but the load is printed with each sample.

    python bench/bench_soak.py                 # 10,000 marks, ~20 min
    python bench/bench_soak.py --marks 1000    # a short look
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path
from typing import Any

from common import (
    Results,
    capture_pool,
    daemon_run,
    loadavg,
    proc_mem,
    scratch_copy,
    start_watching,
    tree_path,
)
from peer import Changes, count, list_files, warm

MB = 1e6
FILES = 5_000
APPENDS = 30
REFERENCE = 200  # marks: the RSS after these is what "flat" is measured against


def cut(ws: Path, keep: int) -> None:
    """Keep the first ``keep`` files of ``ws`` in path order; delete the others."""
    root = os.fsencode(ws)
    for rel in list_files(ws)[keep:]:
        os.unlink(os.path.join(root, rel))


def sample(res: Results, curve: list[dict[str, Any]], pid: int, marks: int, t0: float) -> int:
    mem = proc_mem(pid)
    load = loadavg()
    curve.append({"marks": marks, "s": round(time.perf_counter() - t0, 1), "load": load, **mem})
    res(f"    {marks:6d} marks {curve[-1]['s']:7.0f} s   VmRSS {mem['VmRSS'] / MB:6.1f} MB   "
        f"VmHWM {mem['VmHWM'] / MB:6.1f} MB   load {load}")
    return mem["VmRSS"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--marks", type=int, default=10_000)
    ap.add_argument("--every", type=int, default=500, help="print VmRSS every this many marks")
    args = ap.parse_args()
    if args.marks < REFERENCE:
        raise SystemExit(f"--marks: the reference is the RSS after {REFERENCE} marks")
    tree = tree_path("django", "10k")
    res = Results("soak", "django", "5k", {
        "marks": args.marks, "appends_per_mark": APPENDS, "files": FILES, "every": args.every,
        "tree": f"django-10k cut to its first {FILES} files", "daemon": "default settings",
        "mark": "Client.call mark on one connection, right after its appends",
    })
    ws, scratch, root = scratch_copy(tree, "soak")
    cut(ws, FILES)
    files, nbytes = count(ws)
    warm(ws)
    pool = capture_pool(Path(root))
    res(f"  tree: {files} files ({len(pool)} captured by snapd's rules), {nbytes / MB:.1f} MB")
    root_b = os.fsencode(root)
    changed = Changes(ws, APPENDS, pool)
    curve: list[dict[str, Any]] = []
    with daemon_run(res, scratch) as d:
        start_watching(d, root)
        from snapd.ipc.client import Client

        t0 = time.perf_counter()
        res.figure("mem_after_watch", proc_mem(d.pid))
        sample(res, curve, d.pid, 0, t0)
        reference = 0
        with Client(d.endpoint, 600) as client:
            for i in range(1, args.marks + 1):
                changed()
                client.call("mark", label="turn", workspace=root_b)
                if i == REFERENCE:
                    reference = sample(res, curve, d.pid, i, t0)
                elif i % args.every == 0 or i == args.marks:
                    sample(res, curve, d.pid, i, t0)
        res.figure("curve", curve)
        last = curve[-1]["VmRSS"]
        after = [c["VmRSS"] for c in curve if c["marks"] >= REFERENCE]
        top = max(after)
        res.figure("rss_reference_MB", round(reference / MB, 1), f"VmRSS after {REFERENCE} marks, MB")
        res.figure("rss_last_MB", round(last / MB, 1), f"VmRSS after {args.marks} marks, MB")
        res.figure("rss_max_MB", round(top / MB, 1), f"largest VmRSS sampled from {REFERENCE} marks on, MB")
        res.figure("ratio_last", round(last / reference, 2), "last VmRSS / the reference")
        res.figure("ratio_max", round(top / reference, 2), "largest VmRSS / the reference")
        res.figure("vmhwm_MB", round(curve[-1]["VmHWM"] / MB, 1), "VmHWM at the end (peak since start), MB")
        span = f"over {args.marks} marks of {APPENDS} appends, {files} files"
        res.verdict("daemon RSS over a long day: flat", "<= 1.5x the RSS after the first 200 marks",
                    f"largest {top / MB:.0f} MB = {top / reference:.2f}x {reference / MB:.0f} MB; "
                    f"last {last / reference:.2f}x ({span})", top <= 1.5 * reference)
        res.verdict("daemon RSS over a long day", "<= 150 MB",
                    f"largest {max(c['VmRSS'] for c in curve) / MB:.0f} MB ({span})",
                    max(c["VmRSS"] for c in curve) <= 150 * MB)


if __name__ == "__main__":
    main()
