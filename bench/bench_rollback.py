"""Rollback benchmark: a real ``snapd`` daemon's rollback against the side-git peer's reset.

For each size, in one run: the corpus tree is copied to a private workspace under
bench/data/work (same file system, never tmpfs) and read once (warm page cache); a real
``snapd start`` is launched with a fresh ``SNAPD_HOME`` beside it (stderr captured to a file),
the workspace is ``snapctl watch``-ed (the baseline), and the peer's gitdir gets its first
snapshot. A snapd mark ``base`` and a peer snap ``base`` are taken. Then --runs times, each
rollback after its own ``change_files`` of 10 files (a fresh seed each time) and an untimed
snapd mark ``turn`` / peer snap:

  cli    ``.venv/bin/snapctl rollback --to base --yes -w WS --json`` as a subprocess (what an
         agent hook pays: start-up, ``rollback_plan`` and ``rollback_apply``)
  lib    ``Client.call("rollback_apply", to="base", workspace=WS, token=None)`` on one open
         connection: the daemon's share of a rollback (one call, no plan round trip)
  peer   ``sidegit reset WS GITDIR <base commit>`` (``git read-tree --reset -u``)

Every rollback is verified: the 10 changed files must again hold exactly the bytes of the
corpus tree (the untouched original), and for snapd the reply must be ``ok`` with a plan of
exactly those 10 ``write`` ops, all applied, no conflicts, nothing kept. After the first cli and
the first lib rollback, and at the end of every size, the whole workspace is compared with the
corpus tree (``diff -r``). A failed verification is reported and the run exits 1. The daemon's
stderr log is scanned for warnings and errors.

    python bench/make_tree.py --size all
    python bench/bench_rollback.py --sizes 1k,10k,100k --out bench/data/rollback.txt
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_mark import (  # noqa: E402
    PYTHON,
    REPO,
    SNAPCTL,
    SNAPD,
    Daemon,
    Out,
    loadavg,
    med,
    p99,
    proc_cpu_s,
    proc_mem,
    run_timed,
    scan_log,
    source_state,
)
from peer import (  # noqa: E402
    DATA,
    cache_note,
    change_files,
    copy_tree,
    count,
    list_files,
    peer_init,
    peer_reset,
    peer_snap,
    warm,
)

sys.path.insert(0, str(REPO))


def restored(ws: Path, tree: Path, picked: list[bytes]) -> list[str]:
    """The picked files whose bytes differ from the original corpus tree (empty: all restored)."""
    bad = []
    for rel in picked:
        with open(os.path.join(os.fsencode(tree), rel), "rb") as f:
            want = f.read()
        try:
            with open(os.path.join(os.fsencode(ws), rel), "rb") as f:
                got = f.read()
        except OSError as e:
            bad.append(f"{os.fsdecode(rel)} ({e.strerror})")
            continue
        if got != want:
            bad.append(f"{os.fsdecode(rel)} ({len(got)} bytes, original {len(want)})")
    return bad


def full_diff(ws: Path, tree: Path) -> str | None:
    """None when the whole workspace equals the corpus tree (``diff -r``); else the first lines."""
    p = subprocess.run(["diff", "-rq", "--no-dereference", str(tree), str(ws)],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if p.returncode == 0:
        return None
    lines = p.stdout.splitlines()
    return f"{len(lines)} differences, e.g. " + "; ".join(lines[:3])


def check_reply(reply: dict[str, Any], picked: list[bytes]) -> str | None:
    """None when snapd's rollback reply is exactly the 10 restores, all applied; else what is off."""
    from snapd.ipc.protocol import decode_path

    problems = []
    ops = reply.get("plan", {}).get("ops", [])
    paths = sorted(decode_path(op["path"]) for op in ops)
    kinds = {op["kind"] for op in ops}
    if paths != sorted(picked) or kinds != {"write"}:
        problems.append(f"plan ops {sorted(kinds)} on {[os.fsdecode(p) for p in paths][:12]} "
                        f"vs changed {[os.fsdecode(p) for p in picked]}")
    if reply.get("applied") != len(picked):
        problems.append(f"applied {reply.get('applied')}")
    if not reply.get("ok") or reply.get("conflicts") or reply.get("kept") or reply["plan"].get("kept"):
        problems.append(f"ok {reply.get('ok')} conflicts {reply.get('conflicts')} kept {reply.get('kept')}")
    if reply.get("target", {}).get("label") != "base":
        problems.append(f"target {reply.get('target')}")
    return "; ".join(problems) or None


def bench_size(size: str, args: argparse.Namespace, out: Out) -> dict[str, Any]:
    from snapd.capture.ignore import IgnoreRules
    from snapd.ipc.client import Client

    tree = DATA / f"tree-{size}"
    if not tree.is_dir():
        sys.exit(f"{tree} missing: run python bench/make_tree.py --size {size}")
    r: dict[str, Any] = {"size": size, "misses": [], "load_start": loadavg()}
    t_size = time.perf_counter()
    ws = copy_tree(tree, f"bench-rollback-{size}")
    scratch = ws.parent
    # GIT_CEILING_DIRECTORIES: the workspace is not part of the snapd repository's work tree
    daemon = Daemon(scratch / "home", None if args.in_git_tree else scratch)
    client: Client | None = None
    try:
        root = os.path.realpath(ws)
        root_b = os.fsencode(root)
        r["files"], r["bytes"] = count(ws)
        warm(ws)
        warm(tree)  # the originals are read by every verification
        # Change only files snapd is meant to capture (see bench_mark: the workspace lies inside
        # this repository's work tree, whose .gitignore snapd applies; ``*~`` is never captured).
        rules = IgnoreRules.load(Path(root))
        pool = []
        ignored: dict[str, int] = {}
        for p in list_files(ws):
            why = rules.reason(p, False)
            if why is None:
                pool.append(p)
            else:
                ignored[why] = ignored.get(why, 0) + 1
        r["pool"], r["ignored"] = len(pool), ignored
        os.sync()  # no writeback of the copy during the timings

        r["start_s"] = daemon.start()
        r["watch_s"], text = run_timed([str(SNAPCTL), "watch", root, "--json"], daemon.env, timeout=3600)
        watch = json.loads(text)
        r["watch_files"] = watch.get("files")
        r["watch_warnings"] = watch.get("warnings", [])
        if watch.get("files") != len(pool):
            r["misses"].append(f"watch: daemon counts {watch.get('files')} files, expected {len(pool)}")

        gitdir = scratch / "sidegit"
        peer_init(ws, gitdir)
        r["peer_first_s"], _ = peer_snap(ws, gitdir, "baseline")
        os.sync()  # nor of the stores

        client = Client(daemon.endpoint, timeout_s=300)
        client.call("ping")  # connect once; the timed calls reuse the connection
        base = client.call("mark", label="base", workspace=root_b)
        _, base_commit = peer_snap(ws, gitdir, "base")
        r["base_mark"] = base.get("id")

        cli: list[float] = []
        lib: list[float] = []
        peer: list[float] = []
        lib_cpu: list[float] = []
        seed = 0

        def changed() -> list[bytes]:
            nonlocal seed
            seed += 1
            return change_files(ws, args.changed, seed=seed, files=pool)

        def verify(kind: str, i: int, picked: list[bytes], reply: dict[str, Any] | None, full: bool) -> None:
            bad = restored(ws, tree, picked)
            if bad:
                r["misses"].append(f"{kind} run {i}: not restored: {bad}")
            if reply is not None:
                why = check_reply(reply, picked)
                if why:
                    r["misses"].append(f"{kind} run {i}: reply: {why}")
            if full:
                why = full_diff(ws, tree)
                if why:
                    r["misses"].append(f"{kind} run {i}: workspace differs from the original: {why}")
                r.setdefault("full_checks", []).append(f"{kind} run {i}")

        for i in range(args.runs):
            # cli: snapctl rollback as a subprocess
            picked = changed()
            client.call("mark", label="turn", workspace=root_b)  # untimed
            peer_snap(ws, gitdir, f"turn-cli-{i}")  # untimed; keeps the peer's history alike
            dt, text = run_timed([str(SNAPCTL), "rollback", "--to", "base", "--yes", "-w", root, "--json"],
                                 daemon.env)
            cli.append(dt)
            verify("cli", i, picked, json.loads(text), full=i == 0)

            # lib: the daemon's share, one rollback_apply on the open connection
            picked = changed()
            client.call("mark", label="turn", workspace=root_b)  # untimed
            cpu0 = proc_cpu_s(daemon.pid)
            t0 = time.perf_counter()
            reply = client.call("rollback_apply", to="base", workspace=root_b, token=None)
            lib.append(time.perf_counter() - t0)
            lib_cpu.append(proc_cpu_s(daemon.pid) - cpu0)  # clock ticks: only the mean means much
            verify("lib", i, picked, reply, full=i == 0)

            # peer: sidegit reset to the base commit, right after its snap of the 10 changes
            picked = changed()
            peer_snap(ws, gitdir, f"turn-{i}")  # untimed
            client.call("mark", label="turn", workspace=root_b)  # untimed: snapd idle, as for the others
            peer.append(peer_reset(ws, gitdir, base_commit))
            verify("peer", i, picked, None, full=i == args.runs - 1)

        r.update(cli=cli, lib=lib, peer=peer, lib_cpu=lib_cpu)
        r["mem_end"] = proc_mem(daemon.pid)
        st = daemon.status()
        w = next((x for x in st["workspaces"] if x["root"] == root), {})
        r["status"] = {k: w.get(k) for k in ("files", "skipped", "pending", "watches", "watch_failures",
                                              "overflows", "scan_every_mark", "state")}
        r["status_warnings"] = st.get("warnings", [])
        r["load_end"] = loadavg()
        return r
    except Exception as e:
        e.partial = r  # type: ignore[attr-defined]
        raise
    finally:
        if client is not None:
            client.close()
        r["stop"] = daemon.stop()
        r["log_levels"], r["log_odd"] = scan_log(daemon.log_text())
        if args.keep_log:
            shutil.copy(daemon.log_path, args.keep_log.with_name(f"{args.keep_log.name}-{size}.log"))
        shutil.rmtree(scratch, ignore_errors=True)
        r["wall_s"] = time.perf_counter() - t_size


def ms(x: float) -> str:
    return f"{x * 1e3:9.1f}"


def report_size(r: dict[str, Any], args: argparse.Namespace, out: Out) -> None:
    mb = 1e6
    out(f"\n== tree-{r['size']}: {r['files']} files, {r['bytes'] / mb:.1f} MB; "
        f"load average {r['load_start']} -> {r.get('load_end', '?')}; {r['wall_s']:.0f} s wall")
    out(f"  files snapd captures {r['pool']} (not captured by its rules: "
        + (", ".join(f"{k} {n}" for k, n in r["ignored"].items()) or "none") + ")")
    out(f"  daemon start {r['start_s']:.3f} s; snapctl watch (baseline) {r['watch_s']:.3f} s "
        f"({r['watch_files']} files); peer first snap {r['peer_first_s']:.3f} s")
    out(f"  daemon memory after the runs  VmRSS {r['mem_end']['VmRSS'] / mb:.1f} MB  "
        f"VmHWM {r['mem_end']['VmHWM'] / mb:.1f} MB")
    out(f"  rollback of {args.changed} changed files to base, ms: {'runs':>5} {'median':>9} "
        f"{'p99/max':>9} {'min':>9}")
    for key, name in (("cli", "snapctl rollback (subprocess)"), ("lib", "rollback_apply (in-proc)"),
                      ("peer", "peer sidegit reset")):
        xs = r.get(key) or []
        if xs:
            out(f"    {name:<30}{len(xs):>5} {ms(med(xs))} {ms(p99(xs))} {ms(min(xs))}")
    if r.get("lib_cpu"):
        out(f"    daemon CPU per in-proc rollback (utime+stime, {os.sysconf('SC_CLK_TCK')} Hz ticks) mean "
            f"{statistics.fmean(r['lib_cpu']) * 1e3:.1f} ms")
    pm = med(r["peer"])
    out(f"    peer/cli {pm / med(r['cli']):.1f}x   peer/in-proc {pm / med(r['lib']):.1f}x")
    out(f"  status after: {r['status']}")
    for w in r.get("watch_warnings", []) + r.get("status_warnings", []):
        out(f"  WARNING from daemon: {w}")
    out(f"  daemon stop: {r['stop']}; log lines by level {r['log_levels']}")
    for line in r["log_odd"][:10]:
        out(f"    log: {line}")
    if len(r["log_odd"]) > 10:
        out(f"    ... {len(r['log_odd']) - 10} more non-info log lines")
    for m in r["misses"]:
        out(f"  VERIFICATION FAILED: {m}")
    if not r["misses"]:
        n = len(r["cli"]) + len(r["lib"]) + len(r["peer"])
        out(f"  all {n} rollbacks verified: the {args.changed} changed files hold the original bytes again "
            f"(snapd: exactly {args.changed} restores applied); whole workspace == original after "
            + ", ".join(r.get("full_checks", [])))


def verdict(ok: bool) -> str:
    return "PASS" if ok else "FAIL"


def summary(rs: list[dict[str, Any]], args: argparse.Namespace, out: Out) -> None:
    out(f"\n== summary: rollback of {args.changed} changed files, milliseconds "
        f"(with {args.runs} runs p99 is the maximum)")
    out(f"{'tree':>6} {'files':>7} {'cli med':>8} {'cli p99':>8} {'lib med':>8} {'lib p99':>8} "
        f"{'lib cpu':>8} {'peer med':>9} {'peer p99':>9} {'peer/cli':>8} {'peer/lib':>8}")
    for r in rs:
        pm = med(r["peer"])
        out(f"{r['size']:>6} {r['files']:7d} {med(r['cli']) * 1e3:8.1f} {p99(r['cli']) * 1e3:8.1f} "
            f"{med(r['lib']) * 1e3:8.1f} {p99(r['lib']) * 1e3:8.1f} "
            f"{statistics.fmean(r['lib_cpu']) * 1e3:8.1f} {pm * 1e3:9.1f} {p99(r['peer']) * 1e3:9.1f} "
            f"{pm / med(r['cli']):8.1f} {pm / med(r['lib']):8.1f}")
    by = {r["size"]: r for r in rs}
    out("targets:")
    if "100k" in by:
        r = by["100k"]
        pm, cm, lm = med(r["peer"]), med(r["cli"]), med(r["lib"])
        out(f"  100k CLI median {cm * 1e3:.1f} ms <= peer reset/3 = {pm / 3 * 1e3:.1f} ms: "
            f"{verdict(cm <= pm / 3)}")
        out(f"  100k in-proc median {lm * 1e3:.1f} ms <= peer reset/10 = {pm / 10 * 1e3:.1f} ms: "
            f"{verdict(lm <= pm / 10)}")
    else:
        out("  (100k not run: the 100k targets are not checked)")
    for r in rs:
        if r["size"] != "100k":
            pm = med(r["peer"])
            out(f"  {r['size']}: CLI median {med(r['cli']) * 1e3:.1f} ms vs peer/3 {pm / 3 * 1e3:.1f} ms; "
                f"in-proc median {med(r['lib']) * 1e3:.1f} ms vs peer/10 {pm / 10 * 1e3:.1f} ms")
    if len(rs) > 1:
        a = rs[0]
        for b in rs[1:]:
            out(f"scaling {a['size']} -> {b['size']} ({b['files'] / a['files']:.0f}x files, same "
                f"{args.changed} changed): in-proc median x{med(b['lib']) / med(a['lib']):.2f}, "
                f"CLI median x{med(b['cli']) / med(a['cli']):.2f}, "
                f"peer median x{med(b['peer']) / med(a['peer']):.2f}")
    misses = sum(len(r["misses"]) for r in rs)
    out(f"verification: {'every rollback restored the changed files' if not misses else f'{misses} FAILED'}")


def main() -> None:
    ap = argparse.ArgumentParser(description="snapd rollback (real daemon) vs the side-git peer's reset")
    ap.add_argument("--sizes", default="1k,10k,100k", help="comma list of 1k, 10k, 100k")
    ap.add_argument("--runs", type=int, default=15, help="rollbacks of each kind per size")
    ap.add_argument("--changed", type=int, default=10, help="files changed before each rollback")
    ap.add_argument("--out", type=Path, help="also write the printed results to this file")
    ap.add_argument("--keep-log", type=Path, help="copy each daemon's log to PREFIX-SIZE.log")
    ap.add_argument("--in-git-tree", action="store_true",
                    help="no GIT_CEILING_DIRECTORIES: the workspace counts as part of the repo's work tree")
    ap.add_argument("--drop-caches", action="store_true", help="drop the page cache at start")
    args = ap.parse_args()
    for exe in (SNAPCTL, SNAPD, PYTHON):
        if not exe.exists():
            sys.exit(f"{exe} missing: install snapd into the venv (pip install -e .)")
    out = Out()
    git = subprocess.run(["git", "--version"], check=True, stdout=subprocess.PIPE, text=True).stdout.strip()
    out(f"# bench_rollback {time.strftime('%Y-%m-%d %H:%M:%S')}; snapctl {SNAPCTL}; peer {git}; "
        f"nproc {os.cpu_count()}; {cache_note(args.drop_caches)}; warm-cache timings")
    out(f"# load average at start {loadavg()} (the machine is shared with other sessions)")
    out(f"# snapd source: {source_state()}")
    out(f"# runs {args.runs} of each kind; before each rollback {args.changed} files changed "
        "(a line appended, fresh seed) and, untimed, a snapd mark 'turn' and a peer snap")
    out("# cli = snapctl rollback --to base --yes -w WS --json (plan + apply round trips); "
        "in-proc = Client.call('rollback_apply', to='base', token=None); peer = sidegit reset WS GITDIR BASE")
    out("# workspaces under bench/data/work, SNAPD_HOME beside each; "
        + ("inside the repository's git work tree (--in-git-tree)" if args.in_git_tree else
           "GIT_CEILING_DIRECTORIES keeps them out of the repository's git work tree"))
    rs = []
    failed = False
    for size in args.sizes.split(","):
        try:
            r = bench_size(size.strip(), args, out)
        except Exception as e:  # report, then carry on with the next size
            out(f"\n== tree-{size}: FAILED: {type(e).__name__}: {e}")
            partial = getattr(e, "partial", {})
            for m in partial.get("misses", []):
                out(f"    VERIFICATION FAILED: {m}")
            out(f"    daemon log lines by level {partial.get('log_levels')}")
            for line in partial.get("log_odd", [])[:10]:
                out(f"    log: {line}")
            failed = True
            continue
        rs.append(r)
        report_size(r, args, out)
        failed |= bool(r["misses"]) or bool(r["log_odd"])
    if rs:
        summary(rs, args, out)
    out(f"# load average at end {loadavg()}")
    if args.out:
        args.out.write_text("\n".join(out.lines) + "\n")
        print(f"wrote {args.out}")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
