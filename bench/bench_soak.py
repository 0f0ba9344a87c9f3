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

``--in-process``: what holds the memory, no verdict. The same workspace and marks in this
process (as ``profile_memory.py`` runs one: no daemon, no periodic GC), each sample adding
Python's small-object arenas and the bytes live in them (``profile_memory.pymalloc``), glibc's
free heap (``mallinfo2``) and the weak references alive (the catalog's connections kept one per
statement, issue 33); with ``--gc-at N``, after mark N one ``snapd.store.gc.run`` with the
default retention (the daemon's periodic run), its Python peak (tracemalloc, on for that call
only) and duration, then samples after it and after one heap trim (``snapd.memtrim``);
``--gc-beside``: that GC in a thread of its own while the marks go on, as the daemon's runs
(no tracemalloc then: it would count the marks too); ``--gc-child``: its mark phase in a
process of its own, as the daemon's (``snapd.daemon.gcchild``; the process's peak printed).

    python bench/bench_soak.py                 # 10,000 marks, ~20 min
    python bench/bench_soak.py --marks 1000    # a short look
    python bench/bench_soak.py --in-process --marks 2500 --gc-at 2500
"""

from __future__ import annotations

import argparse
import ctypes
import gc
import os
import threading
import time
import tracemalloc
import weakref
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
from peer import Changes, count, list_files, remove, warm

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


class _Mallinfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in
                ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks",
                 "fordblks", "keepcost")]


def heap(res: Results, curve: list[dict[str, Any]], marks: int, t0: float, what: str = "") -> None:
    """One in-process sample: VmRSS, pymalloc's arenas and live bytes, glibc's free heap, the
    weak references alive."""
    from profile_memory import pymalloc

    libc = ctypes.CDLL("libc.so.6")
    libc.mallinfo2.restype = _Mallinfo2
    mem, py, mi = proc_mem(os.getpid()), pymalloc(), libc.mallinfo2()
    refs = sum(1 for o in gc.get_objects() if type(o) is weakref.ReferenceType)
    row = {"marks": marks, "what": what, "s": round(time.perf_counter() - t0, 1), **mem,
           "pymalloc_arenas": py["arenas"] << 20, "pymalloc_live": py["live_bytes"],
           "malloc_free": mi.fordblks, "weakrefs": refs}
    curve.append(row)
    res(f"    {marks:6d} marks {what:<10} VmRSS {mem['VmRSS'] / MB:6.1f} MB   pymalloc arenas "
        f"{row['pymalloc_arenas'] / MB:6.1f} MB, live {py['live_bytes'] / MB:6.1f} MB   glibc free "
        f"{mi.fordblks / MB:5.1f} MB   weakrefs {refs:7d}")


def in_process(res: Results, ws_dir: Path, root: str, scratch: Path, marks: int, every: int,
               gc_at: int, beside: bool, child: bool) -> None:
    """:func:`heap` every ``every`` marks of a workspace run in this process; the GC at ``gc_at``
    (``beside``: in a thread of its own while the marks go on, as the daemon runs it;
    ``child``: its mark phase in a process of its own, as the daemon runs it since session 23)."""
    from snapd import memtrim
    from snapd.capture.workspace import Workspace
    from snapd.config import CaptureSettings, Retention
    from snapd.daemon.gcchild import ChildMarkPhase
    from snapd.store import gc as store_gc
    from snapd.store.store import Store

    store = Store.open(scratch / "store")
    ws = Workspace(store, store.add_workspace(os.fsencode(root)), Path(root), CaptureSettings())
    ws.start()
    changed = Changes(ws_dir, APPENDS, capture_pool(Path(root)))
    curve: list[dict[str, Any]] = []
    t0 = time.perf_counter()
    gc_thread: threading.Thread | None = None
    gc_run: dict[str, Any] = {}

    def collect(traced: bool) -> None:
        """One GC with the daemon's default retention; traced: its Python peak (tracemalloc)."""
        if traced:
            tracemalloc.start()
        t = time.perf_counter()
        if child:
            with ChildMarkPhase(store) as phase:
                rep = store_gc.run(store, Retention(), mark=phase)
            rep.mark_phase = phase.summary()
        else:
            rep = store_gc.run(store, Retention())
        gc_run.update({"s": round(time.perf_counter() - t, 1), "evicted": len(rep.evicted),
                       "objects_deleted": rep.objects_deleted, "beside_marks": not traced,
                       "mark_phase": rep.mark_phase})
        if traced:
            gc_run["python_peak"] = tracemalloc.get_traced_memory()[1]
            tracemalloc.stop()

    def report(i: int) -> None:
        res.figure("gc", dict(gc_run))
        traced = gc_run.get("python_peak")
        peak = "" if traced is None else f", Python peak {traced / MB:.1f} MB (tracemalloc)"
        phase = gc_run["mark_phase"]
        where = (f", mark phase in process {phase['pid']} (peak {phase['max_rss'] / MB:.1f} MB, "
                 f"fallback {phase['fallback']})") if phase else ", mark phase in this process"
        res(f"    gc.run from mark {gc_at} {'beside the marks ' if beside else ''}done after mark {i}: "
            f"{gc_run['s']:.0f} s{peak}, {gc_run['evicted']} marks evicted, "
            f"{gc_run['objects_deleted']} objects deleted{where}")
        heap(res, curve, i, t0, "after gc")
        memtrim.trim()
        heap(res, curve, i, t0, "after trim")

    heap(res, curve, 0, t0)
    for i in range(1, marks + 1):
        changed()
        ws.mark("turn")
        if i % every == 0 or i in (REFERENCE, marks):
            heap(res, curve, i, t0)
        if i == gc_at and beside:
            gc_thread = threading.Thread(target=collect, args=(False,), name="soak-gc")
            gc_thread.start()
        elif i == gc_at:
            collect(True)
            report(i)
        if gc_thread is not None and not gc_thread.is_alive():
            gc_thread = None
            report(i)
    if gc_thread is not None:  # the marks ended first
        gc_thread.join()
        report(marks)
    res.figure("heap_curve", curve)
    ws.stop()
    store.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--marks", type=int, default=10_000)
    ap.add_argument("--every", type=int, default=500, help="print VmRSS every this many marks")
    ap.add_argument("--in-process", action="store_true", help="what holds the memory (no verdict)")
    ap.add_argument("--gc-at", type=int, default=0, help="with --in-process: one GC after this mark")
    ap.add_argument("--gc-beside", action="store_true", help="that GC in a thread, beside the marks")
    ap.add_argument("--gc-child", action="store_true",
                    help="that GC's mark phase in a process of its own (as the daemon runs it)")
    args = ap.parse_args()
    if args.marks < REFERENCE:
        raise SystemExit(f"--marks: the reference is the RSS after {REFERENCE} marks")
    tree = tree_path("django", "10k")
    res = Results("soak-in-process" if args.in_process else "soak", "django", "5k", {
        "marks": args.marks, "appends_per_mark": APPENDS, "files": FILES, "every": args.every,
        "tree": f"django-10k cut to its first {FILES} files", "daemon": "default settings",
        "mark": "Client.call mark on one connection, right after its appends",
        "in_process": args.in_process, "gc_at": args.gc_at, "gc_beside": args.gc_beside,
        "gc_child": args.gc_child,
    })
    ws, scratch, root = scratch_copy(tree, "soak")
    cut(ws, FILES)
    files, nbytes = count(ws)
    warm(ws)
    pool = capture_pool(Path(root))
    res(f"  tree: {files} files ({len(pool)} captured by snapd's rules), {nbytes / MB:.1f} MB")
    if args.in_process:
        try:
            in_process(res, ws, root, scratch, args.marks, args.every, args.gc_at, args.gc_beside,
                       args.gc_child)
        finally:
            res.write()
            remove(scratch)
        return
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
