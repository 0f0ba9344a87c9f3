"""Baseline through the product against the peer's first snapshot; memory; disk after ``git gc``.

One private copy of the corpus tree under bench/data/work (same file system, never tmpfs).
Then, interleaved, ``--reps`` times each, in this order:

  peer        ``sidegit init`` into a fresh gitdir, then ``sidegit snap`` timed (git never fsyncs)
  peer-fsync  the same with ``git -c core.fsync=all`` (objects, index and refs fsynced)
  snapd       a real ``snapd start`` with a fresh SNAPD_HOME (start untimed, then idle), then
              ``snapctl watch WS --json`` timed: it returns once the baseline mark exists
              (checked: the reply carries a mark of kind ``baseline`` holding every file)

Warm (default): the tree is read once before the first repetition. ``--cold``: before every
timed run, ``sync`` and ``echo 3 > /proc/sys/vm/drop_caches`` (root), and nothing reads the
tree before the timing starts.

Per snapd repetition: the daemon's VmHWM after the watch (its peak during the baseline, start
included), the peak of the daemon with its reader processes (their summed VmRSS sampled every
50 ms during the watch; the verdict uses it), and VmRSS (watching, idle). Disk (the last
repetition of each side): snapd's whole SNAPD_HOME (objects, catalog, WAL) as the baseline
wrote it and after ``snapctl gc`` (which repacks), against the peer's gitdir as written (loose)
and after ``git gc``; the verdict compares the two after their gc (``common.gc_at_rest``).
``--profile``: one more snapd baseline, untimed, under py-spy; its summary is printed.

    python bench/bench_baseline.py --corpus django --size 100k
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import tempfile
from pathlib import Path
from typing import Any

from common import (
    DATA,
    RESULTS,
    SNAPCTL,
    Results,
    capture_pool,
    common_args,
    gc_at_rest,
    interleave,
    proc_mem,
    run_timed,
    scratch_copy,
    spread,
    started,
    tree_path,
    tree_peak,
)
from peer import (
    count,
    drop_caches,
    du_bytes,
    peer_gc,
    peer_init,
    peer_snap,
    remove,
    sidegit_argv,
    sidegit_env,
    warm,
)

MB = 1e6


def fsync_calls(fsync: bool) -> int:
    """fsync/fdatasync calls of one peer snap of a 3-file workspace (strace -f)."""
    with tempfile.TemporaryDirectory(dir=DATA) as d:
        ws = Path(d, "ws")
        ws.mkdir()
        for i in range(3):
            (ws / f"f{i}").write_text(f"{i}\n")
        peer_init(ws, Path(d, "git"))
        trace = Path(d, "trace")
        subprocess.run(["strace", "-f", "-qq", "-e", "trace=fsync,fdatasync", "-o", str(trace),
                        *sidegit_argv("snap", ws, d + "/git", "x")],
                       env=sidegit_env(fsync), check=True, stdout=subprocess.DEVNULL)
        return sum(1 for ln in trace.read_text().splitlines() if "sync(" in ln)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    common_args(ap)
    ap.add_argument("--cold", action="store_true", help="drop caches before every timed run (root)")
    ap.add_argument("--profile", action="store_true", help="one more snapd baseline under py-spy")
    ap.add_argument("--no-fsync-peer", action="store_true",
                    help="leave out peer-fsync (on 100k trees one rep takes minutes on a loaded disk)")
    args = ap.parse_args()
    tree = tree_path(args.corpus, args.size)
    cache = "cold (caches dropped before each timed run, tree not read after)" if args.cold else \
        "warm (tree read once before the runs)"
    res = Results("baseline" + ("-cold" if args.cold else ""), args.corpus, args.size, {
        "reps": args.reps,
        "order": ["peer", "snapd"] if args.no_fsync_peer else ["peer", "peer-fsync", "snapd"],
        "page_cache": cache,
        "snapd": "snapctl watch on a running daemon (fresh SNAPD_HOME each rep), timed until it "
                 "returns with the baseline mark",
        "peer": "sidegit snap into a fresh gitdir (git add -A, write-tree, commit-tree, update-ref)",
    })
    res.figure("peer_fsync_calls_one_snap", fsync_calls(False), "peer: fsync calls in one snap (strace)")
    res.figure("peer_fsync_all_calls_one_snap", fsync_calls(True),
               "peer with core.fsync=all: fsync calls in one snap of 3 files (strace)")
    ws, scratch, root = scratch_copy(tree, f"baseline-{args.corpus}-{args.size}")
    files, nbytes = count(ws)
    captured = len(capture_pool(Path(root)))
    res(f"  tree {tree.name}: {files} files ({captured} captured by snapd's rules), {nbytes / MB:.1f} MB; "
        f"page cache {cache}")
    if not args.cold:
        warm(ws)
    os.sync()
    mem: list[dict[str, int]] = []
    last: dict[str, Path] = {}

    def peer_side(fsync: bool) -> Any:
        def run(i: int) -> float:
            gitdir = scratch / f"peer{'-fsync' if fsync else ''}-{i}"
            peer_init(ws, gitdir)
            os.sync()
            if args.cold:
                drop_caches()
            t = peer_snap(ws, gitdir, "baseline", fsync=fsync)[0]
            key = "peer-fsync" if fsync else "peer"
            if key in last:
                remove(last[key])
            last[key] = gitdir
            return t
        return run

    def snapd_gc(home: Path) -> int:
        """``snapctl gc`` on a baseline's store (default retention: it repacks, docs/storage.md),
        as the peer gets ``git gc``; the du of SNAPD_HOME with the daemon stopped again."""
        with started(home, scratch) as d:
            return gc_at_rest(d)

    def snapd_side(i: int) -> float:
        home = scratch / f"home-{i}"
        with started(home, scratch) as d:
            os.sync()
            if args.cold:
                drop_caches()
            with tree_peak(d.pid) as peak:
                t, text = run_timed([str(SNAPCTL), "watch", root, "--json"], d.env)
            reply = json.loads(text)
            base = reply.get("baseline") or {}
            if base.get("kind") != "baseline" or reply.get("files") != captured:
                raise SystemExit(f"watch reply without a full baseline: files {reply.get('files')} "
                                 f"of {captured}, baseline {base}")
            mem.append({**proc_mem(d.pid), "tree_peak": peak[0]})
        if "snapd" in last:
            remove(last["snapd"])
        last["snapd"] = home
        return t

    try:
        sides = {"peer": peer_side(False), "peer-fsync": peer_side(True), "snapd": snapd_side}
        if args.no_fsync_peer:
            del sides["peer-fsync"]
            res.note("peer with core.fsync=all left out of this run (--no-fsync-peer)")
        times = interleave(args.reps, sides)
        for side, xs in times.items():
            res.figure(f"{side}_s", spread(xs), f"{side} baseline")
        ratio = res.data["figures"]["peer_s"]["median"] / res.data["figures"]["snapd_s"]["median"]
        fig = res.data["figures"]
        ratio_f = fig["peer-fsync_s"]["median"] / fig["snapd_s"]["median"] if "peer-fsync_s" in fig else None
        res.figure("ratio_peer_over_snapd", round(ratio, 2), "peer / snapd (medians)")
        if ratio_f is not None:
            res.figure("ratio_peer_fsync_over_snapd", round(ratio_f, 2), "peer-fsync / snapd (medians)")
        res.figure("snapd_files_per_s", round(files / res.data["figures"]["snapd_s"]["median"]),
                   "snapd files/s (median)")
        hwm = spread([m["VmHWM"] / MB for m in mem])
        rss = spread([m["VmRSS"] / MB for m in mem])
        res.figure("snapd_peak_MB", hwm, "snapd VmHWM after the baseline (peak), MB", unit="MB")
        # The daemon with its reader processes: the larger of its own peak and the sampled sum.
        tree = spread([max(m["VmHWM"], m["tree_peak"]) / MB for m in mem])
        res.figure("snapd_tree_peak_MB", tree, "snapd and its reader processes, peak (sampled sum of "
                   "VmRSS every 50 ms, or the daemon's VmHWM if larger), MB", unit="MB")
        res.figure("snapd_rss_after_MB", rss, "snapd VmRSS after the baseline, MB", unit="MB")
        du_written = du_bytes(last["snapd"])
        du_snapd = snapd_gc(last["snapd"])
        du_peer = du_bytes(last["peer"])
        du_peer_gc = peer_gc(last["peer"])
        res.figure("disk", {"snapd_home": du_snapd, "snapd_home_before_gc": du_written, "peer_loose": du_peer,
                            "peer_after_gc": du_peer_gc},
                   "disk bytes (snapd SNAPD_HOME after snapctl gc, and as the baseline wrote it; peer "
                   "loose; peer after git gc)")
        res.figure("disk_ratio_vs_gc", round(du_snapd / du_peer_gc, 2), "snapd / peer after git gc")
        res.figure("disk_ratio_vs_loose", round(du_snapd / du_peer, 2), "snapd / peer loose")
        if args.size == "100k" and not args.cold:
            res.verdict("baseline through snapctl watch vs the peer's first snapshot", ">= 2x",
                        f"{ratio:.2f}x (snapd {res.data['figures']['snapd_s']['median']:.2f} s, peer "
                        f"{res.data['figures']['peer_s']['median']:.2f} s, medians of {args.reps}"
                        + (f"; vs peer with core.fsync=all {ratio_f:.2f}x)" if ratio_f else ")"), ratio >= 2)
            res.verdict("daemon peak RSS during the baseline", "<= 250 MB",
                        f"{tree['median']:.0f} MB with its reader processes (max {tree['max']:.0f}); "
                        f"the daemon alone {hwm['median']:.0f} MB (max {hwm['max']:.0f})", tree["max"] <= 250)
            res.verdict("store on disk vs the peer after git gc, multi-release corpus", "<= 1x",
                        f"{du_snapd / du_peer_gc:.2f}x ({du_snapd / MB:.1f} MB after snapctl gc, "
                        f"{du_written / MB:.1f} MB before, vs {du_peer_gc / MB:.1f} MB; "
                        f"peer loose {du_peer / MB:.1f} MB)", du_snapd <= du_peer_gc)
        if args.size == "500k" and not args.cold:  # issue 33's 500k row
            res.verdict("500k: baseline time vs the peer's first snapshot", "<= 0.5x the peer's",
                        f"{1 / ratio:.2f}x (snapd {fig['snapd_s']['median']:.1f} s, peer "
                        f"{fig['peer_s']['median']:.1f} s, medians of {args.reps})", ratio >= 2)
            res.verdict("500k: daemon peak RSS during the baseline", "<= 500 MB",
                        f"{tree['median']:.0f} MB with its reader processes (max {tree['max']:.0f}); "
                        f"the daemon alone {hwm['median']:.0f} MB (max {hwm['max']:.0f})", tree["max"] <= 500)
            res.verdict("500k: daemon RSS watching, after the baseline", "<= 300 MB",
                        f"{rss['median']:.0f} MB (max {rss['max']:.0f})", rss["max"] <= 300)
        if args.profile:
            from pyspy import Sampler, lines, summary

            out = RESULTS / f"baseline-{args.corpus}-{args.size}.pyspy.txt"
            with started(scratch / "home-profile", scratch) as d, Sampler(d.pid, out):
                run_timed([str(SNAPCTL), "watch", root, "--json"], d.env)
            s = summary(out)
            res.figure("profile_snapd_baseline", s)
            res("  py-spy profile of one snapd baseline (untimed run):")
            for line in lines(s):
                res(f"    {line}")
    finally:
        res.write()
        remove(scratch)


if __name__ == "__main__":
    main()
