"""Mark benchmark: a real ``snapd`` daemon's marks against the side-git peer, per tree size.

For each size, in one run: the corpus tree is copied to a private workspace under
bench/data/work (same file system, never tmpfs) and read once (warm page cache); a real
``snapd start`` is launched with a fresh ``SNAPD_HOME`` beside it (same disk), the workspace is
``snapctl watch``-ed (the baseline is timed), and the peer's gitdir gets its first snapshot
(timed). Then --runs times, each measurement after its own ``change_files`` of 10 files:

  cli    ``.venv/bin/snapctl mark turn -w WS --json`` as a subprocess (what an agent hook pays)
  lib    ``Client.call("mark", ...)`` on one open connection: the daemon's share of a mark
  pym    ``python -m snapd mark ...`` as a subprocess (--pym-runs times)
  peer   ``sidegit snap`` (--peer-runs times) after exactly the same 10 changes that the cli
         mark just recorded (the peer is caught up, untimed, after the other change sets)

Every mark's summary must hold exactly the 10 modified files (counts, examples, nothing
unstable or skipped); a mark that missed a change is reported and the run exits 1. The
daemon's VmRSS/VmHWM (/proc/PID/status) are read after the watch and after the runs; its
stderr log is scanned for warnings and errors. CLI start-up floors (``python -c pass``,
``snapctl --version``, ``python -X importtime`` of snapd.cli) are measured once.

    python bench/make_tree.py --size all
    python bench/bench_mark.py --sizes 1k,10k,100k --out bench/data/mark.txt
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
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
    list_files,
    peer_init,
    peer_snap,
    warm,
)

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
_HERE_BIN = Path(sys.prefix) / "bin"
VENV_BIN = _HERE_BIN if (_HERE_BIN / "snapctl").exists() else REPO / ".venv" / "bin"
SNAPCTL = VENV_BIN / "snapctl"
SNAPD = VENV_BIN / "snapd"
PYTHON = VENV_BIN / "python"


class Out:
    """Print and keep every line, so --out gets exactly what was printed."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    def __call__(self, *parts: str) -> None:
        text = " ".join(parts)
        print(text, flush=True)
        self.lines.extend(text.split("\n"))


def p99(xs: list[float]) -> float:
    """Nearest-rank 99th percentile (the maximum for fewer than 100 runs)."""
    s = sorted(xs)
    return s[min(len(s) - 1, max(0, -(-99 * len(s) // 100) - 1))]


def med(xs: list[float]) -> float:
    return statistics.median(xs) if xs else float("nan")


def loadavg() -> str:
    a, b, c = os.getloadavg()
    return f"{a:.2f} {b:.2f} {c:.2f}"


def proc_mem(pid: int) -> dict[str, int]:
    """VmRSS and VmHWM of pid, bytes."""
    out: dict[str, int] = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            key, _, val = line.partition(":")
            if key in ("VmRSS", "VmHWM"):
                out[key] = int(val.split()[0]) * 1024
    return out


def proc_cpu_s(pid: int) -> float:
    """utime + stime of pid (all its threads), seconds."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def snapd_env(home: Path, ceiling: Path | None) -> dict[str, str]:
    """The daemon's and snapctl's environment. ``ceiling``: GIT_CEILING_DIRECTORIES, so a
    workspace under bench/data/work is not taken for a subdirectory of the snapd repository's
    own git work tree (whose .gitignore has ``*.egg-info/`` and whose index other sessions
    touch, each touch making the daemon rescan the whole workspace)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SNAPD_")}
    env["SNAPD_HOME"] = str(home)
    if ceiling is not None:
        env["GIT_CEILING_DIRECTORIES"] = str(ceiling)
    return env


def run_timed(cmd: list[str], env: dict[str, str] | None = None, timeout: float = 300) -> tuple[float, str]:
    t0 = time.perf_counter()
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
    dt = time.perf_counter() - t0
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited {p.returncode}: {p.stderr.strip()}")
    return dt, p.stdout


def check_mark(summary: dict[str, Any], picked: list[bytes]) -> str | None:
    """None when the mark holds exactly the 10 modified files; else what is wrong."""
    want = sorted(os.fsdecode(p) for p in picked)
    problems = []
    if summary.get("counts") != {"modified": len(picked)} or summary.get("changed") != len(picked):
        problems.append(f"counts {summary.get('counts')} changed {summary.get('changed')}")
    ex = summary.get("examples", {}).get("modified", [])
    if not set(ex) <= set(want) or len(ex) != min(len(want), 10):
        problems.append(f"examples {sorted(ex)} vs changed {want}")
    if summary.get("unstable") or summary.get("skipped_count"):
        problems.append(f"unstable {summary.get('unstable')} skipped {summary.get('skipped_count')}")
    return "; ".join(problems) or None


class Daemon:
    """A real ``snapd start`` with its own SNAPD_HOME; stderr captured to a file."""

    def __init__(self, home: Path, ceiling: Path | None) -> None:
        self.home = home
        self.env = snapd_env(home, ceiling)
        self.log_path = home.parent / "snapd-stderr.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self.endpoint = ""

    def start(self) -> float:
        self.home.mkdir(mode=0o700)
        self._log = open(self.log_path, "wb")
        t0 = time.perf_counter()
        self.proc = subprocess.Popen(
            [str(SNAPD), "start"], env=self.env, stdin=subprocess.DEVNULL,
            stdout=self._log, stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + 60
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"snapd start exited {self.proc.returncode}: {self.log_text()[-2000:]}")
            p = subprocess.run([str(SNAPCTL), "--timeout", "2", "status", "--json"], env=self.env,
                               stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
            if p.returncode == 0:
                st = json.loads(p.stdout)
                self.endpoint = st["endpoint"]
                if st["pid"] != self.proc.pid:
                    raise RuntimeError(f"status answered by pid {st['pid']}, not ours ({self.proc.pid})")
                return time.perf_counter() - t0
            if time.monotonic() > deadline:
                raise RuntimeError("snapd did not answer status within 60 s")
            time.sleep(0.05)

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def status(self) -> dict[str, Any]:
        return json.loads(run_timed([str(SNAPCTL), "status", "--json"], self.env)[1])

    def log_text(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def stop(self) -> str:
        """``snapctl stop``, wait; SIGKILL (this pid only) as a fallback. How it ended."""
        if self.proc is None or self.proc.poll() is not None:
            return "not running"
        how = "snapctl stop"
        try:
            subprocess.run([str(SNAPCTL), "--timeout", "10", "stop"], env=self.env, timeout=30,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            how = "SIGKILL after snapctl stop timed out"
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=10)
        self._log.close()
        return f"{how}, exit {self.proc.returncode}"


def scan_log(text: str) -> tuple[dict[str, int], list[str]]:
    """Count log lines by level; the non-info ones (first few) verbatim."""
    levels: dict[str, int] = {}
    odd: list[str] = []
    for line in text.splitlines():
        try:
            level = str(json.loads(line).get("level", "?"))
        except ValueError:
            level = "non-json"
        levels[level] = levels.get(level, 0) + 1
        if level not in ("info", "debug"):
            odd.append(line[:400])
    return levels, odd


def source_state() -> str:
    """HEAD and a digest of uncommitted changes under snapd/ (other sessions edit the tree)."""
    env = {**os.environ, "GIT_OPTIONAL_LOCKS": "0"}  # never refresh the repository's index

    def git(*a: str) -> str:
        return subprocess.run(["git", "-C", str(REPO), *a], env=env, capture_output=True,
                              text=True).stdout

    import hashlib

    head = git("rev-parse", "--short", "HEAD").strip() or "?"
    dirty = git("status", "--porcelain", "--", "snapd")
    if not dirty:
        return f"HEAD {head}, snapd/ clean"
    digest = hashlib.sha1(git("diff", "HEAD", "--", "snapd").encode()).hexdigest()[:10]
    return f"HEAD {head} + uncommitted changes in {len(dirty.splitlines())} snapd/ files (diff sha1 {digest})"


def cli_floor(runs: int) -> dict[str, Any]:
    """Start-up cost without the daemon: interpreter, snapctl --version, import of snapd.cli."""
    r: dict[str, Any] = {}
    for key, cmd in (
        ("python -c pass", [str(PYTHON), "-c", "pass"]),
        ("snapctl --version", [str(SNAPCTL), "--version"]),
        ("python -m snapd --version", [str(PYTHON), "-m", "snapd", "--version"]),
    ):
        run_timed(cmd)  # warm
        r[key] = [run_timed(cmd)[0] for _ in range(runs)]
    imports: list[float] = []
    selfs: dict[str, list[int]] = {}
    for _ in range(5):
        p = subprocess.run([str(PYTHON), "-X", "importtime", "-c", "import snapd.cli"],
                           stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, check=True)
        m = re.search(r"^import time:\s+\d+ \|\s+(\d+) \| snapd\.cli$", p.stderr, re.M)
        if m:
            imports.append(int(m.group(1)) / 1e6)
        for own, name in re.findall(r"^import time:\s+(\d+) \|\s+\d+ \| (.+)$", p.stderr, re.M):
            selfs.setdefault(name.strip(), []).append(int(own))
    r["import snapd.cli (cumulative, -X importtime)"] = imports
    top = sorted(((statistics.median(v), k) for k, v in selfs.items()), reverse=True)[:8]
    r["slowest imports (self, median us)"] = ", ".join(f"{k} {v:.0f}" for v, k in top)
    p = subprocess.run([str(PYTHON), "-X", "importtime", "-c", "import snapd.cli, sys; "
                        "print(sorted(m for m in sys.modules if m.split('.')[0] in "
                        "('zmq','watchdog','zstandard','xxhash','sqlite3','structlog')))"],
                       stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, check=True)
    r["heavy modules imported by snapd.cli"] = p.stdout.strip()
    return r


def bench_size(size: str, args: argparse.Namespace, out: Out) -> dict[str, Any]:
    from snapd.ipc.client import Client

    tree = DATA / f"tree-{size}"
    if not tree.is_dir():
        sys.exit(f"{tree} missing: run python bench/make_tree.py --size {size}")
    r: dict[str, Any] = {"size": size, "misses": [], "load_start": loadavg()}
    ws = copy_tree(tree, f"bench-mark-{size}")
    scratch = ws.parent
    daemon = Daemon(scratch / "home", None if args.in_git_tree else scratch)
    client: Client | None = None
    try:
        root = os.path.realpath(ws)
        root_b = os.fsencode(root)
        r["files"], r["bytes"] = count(ws)
        warm(ws)
        # Change only files snapd is meant to capture: the workspace lies inside this repo's
        # work tree, whose .gitignore (``*.egg-info/``) snapd applies, and editor backups
        # (``*~``) are never captured. The peer (explicit --work-tree) still snapshots them.
        from snapd.capture.ignore import IgnoreRules

        rules = IgnoreRules.load(Path(root))
        pool = []
        ignored: dict[str, list[bytes]] = {}
        for p in list_files(ws):
            why = rules.reason(p, False)
            if why is None:
                pool.append(p)
            else:
                ignored.setdefault(why, []).append(p)
        r["pool"] = len(pool)
        r["ignored"] = {k: (len(v), os.fsdecode(v[0])) for k, v in ignored.items()}
        os.sync()  # no writeback of the copy during the timings

        r["start_s"] = daemon.start()
        r["watch_s"], text = run_timed([str(SNAPCTL), "watch", root, "--json"], daemon.env, timeout=3600)
        watch = json.loads(text)
        r["watch_files"] = watch.get("files")
        r["watches"] = watch.get("watches")
        r["watch_warnings"] = watch.get("warnings", [])
        r["mem_watch"] = proc_mem(daemon.pid)
        if watch.get("files") != len(pool):
            r["misses"].append(f"watch: daemon counts {watch.get('files')} files, expected {len(pool)} "
                               f"({r['files']} in the tree, ignored {r['ignored']})")

        gitdir = scratch / "sidegit"
        peer_init(ws, gitdir)
        os.sync()  # nor of snapd's store
        r["peer_first_s"], _ = peer_snap(ws, gitdir, "baseline")

        client = Client(daemon.endpoint, timeout_s=60)
        client.call("ping")  # connect once; the timed calls reuse the connection
        cli: list[float] = []
        lib: list[float] = []
        pym: list[float] = []
        peer: list[float] = []
        seed = 0
        lib_cpu: list[float] = []

        def changed() -> list[bytes]:
            nonlocal seed
            seed += 1
            return change_files(ws, args.changed, seed=seed, files=pool)

        def check(kind: str, i: int, reply: dict[str, Any], picked: list[bytes]) -> None:
            bad = check_mark(reply["summary"], picked)
            if bad:
                r["misses"].append(f"{kind} run {i} mark {reply.get('id')}: {bad}")

        for i in range(args.runs):
            # cli: snapctl mark as a subprocess; the peer snaps the very same change set
            picked = changed()
            dt, text = run_timed([str(SNAPCTL), "mark", "turn", "-w", root, "--json"], daemon.env)
            cli.append(dt)
            check("cli", i, json.loads(text), picked)
            if i < args.peer_runs:
                peer.append(peer_snap(ws, gitdir, f"turn-{i}")[0])
            # lib: the client library on an open connection
            picked = changed()
            cpu0 = proc_cpu_s(daemon.pid)
            t0 = time.perf_counter()
            reply = client.call("mark", label="turn", workspace=root_b)
            lib.append(time.perf_counter() - t0)
            lib_cpu.append(proc_cpu_s(daemon.pid) - cpu0)  # clock ticks: only the mean means much
            check("lib", i, reply, picked)
            # pym: python -m snapd mark
            if i < args.pym_runs:
                picked = changed()
                dt, text = run_timed([str(PYTHON), "-m", "snapd", "mark", "turn", "-w", root, "--json"],
                                     daemon.env)
                pym.append(dt)
                check("pym", i, json.loads(text), picked)
            if i < args.peer_runs:
                peer_snap(ws, gitdir, f"catch-up-{i}")  # untimed: the next timed snap sees 10 files
        r.update(cli=cli, lib=lib, pym=pym, peer=peer, lib_cpu=lib_cpu)
        r["mem_end"] = proc_mem(daemon.pid)
        st = daemon.status()
        w = next((x for x in st["workspaces"] if x["root"] == root), {})
        r["status"] = {k: w.get(k) for k in ("files", "skipped", "pending", "watches", "watch_failures",
                                              "overflows", "scan_every_mark", "state")}
        r["status_warnings"] = st.get("warnings", [])
        r["load_end"] = loadavg()
        return r
    except Exception as e:
        e.partial = r  # type: ignore[attr-defined]  # the finally below adds the daemon's log
        raise
    finally:
        if client is not None:
            client.close()
        r["stop"] = daemon.stop()
        r["log_levels"], r["log_odd"] = scan_log(daemon.log_text())
        if args.keep_log:
            shutil.copy(daemon.log_path, args.keep_log.with_name(f"{args.keep_log.name}-{size}.log"))
        shutil.rmtree(scratch, ignore_errors=True)


def ms(x: float) -> str:
    return f"{x * 1e3:9.1f}"


def report_size(r: dict[str, Any], args: argparse.Namespace, out: Out) -> None:
    mb = 1e6
    out(f"\n== tree-{r['size']}: {r['files']} files, {r['bytes'] / mb:.1f} MB; "
        f"load average {r['load_start']} -> {r.get('load_end', '?')}")
    out(f"  files snapd should capture {r['pool']} (not captured by its rules: "
        + (", ".join(f"{k} {n}, e.g. {ex}" for k, (n, ex) in r["ignored"].items()) or "none") + ")")
    out(f"  daemon start (spawn -> status answers)  {r['start_s']:8.3f} s")
    out(f"  snapctl watch (baseline)                {r['watch_s']:8.3f} s   "
        f"{r['files'] / r['watch_s']:8.0f} files/s  ({r['watch_files']} files, "
        f"{r['watches']} inotify watches)")
    out(f"  peer first snap                         {r['peer_first_s']:8.3f} s   "
        f"{r['files'] / r['peer_first_s']:8.0f} files/s")
    out(f"  daemon memory after watch  VmRSS {r['mem_watch']['VmRSS'] / mb:7.1f} MB  "
        f"VmHWM {r['mem_watch']['VmHWM'] / mb:7.1f} MB")
    if "mem_end" in r:
        out(f"  daemon memory after marks  VmRSS {r['mem_end']['VmRSS'] / mb:7.1f} MB  "
            f"VmHWM {r['mem_end']['VmHWM'] / mb:7.1f} MB")
    out(f"  mark after {args.changed} changed files, ms:   {'runs':>5} {'median':>9} {'p99/max':>9} "
        f"{'min':>9}")
    for key, name in (("cli", "snapctl mark (subprocess)"), ("lib", "Client.call mark (in-proc)"),
                      ("pym", "python -m snapd mark"), ("peer", "peer sidegit snap")):
        xs = r.get(key) or []
        if xs:
            out(f"    {name:<28}{len(xs):>5} {ms(med(xs))} {ms(p99(xs))} {ms(min(xs))}")
    if r.get("lib_cpu"):
        out(f"    daemon CPU per in-proc mark (utime+stime, {os.sysconf('SC_CLK_TCK')} Hz ticks) mean "
            f"{statistics.fmean(r['lib_cpu']) * 1e3:.1f} ms")
    if r.get("peer"):
        pm = med(r["peer"])
        out(f"    peer/cli {pm / med(r['cli']):.1f}x   peer/in-proc {pm / med(r['lib']):.1f}x")
    if "status" in r:
        out(f"  status after: {r['status']}")
    for w in r.get("watch_warnings", []) + r.get("status_warnings", []):
        out(f"  WARNING from daemon: {w}")
    out(f"  daemon stop: {r['stop']}; log lines by level {r['log_levels']}")
    for line in r["log_odd"][:10]:
        out(f"    log: {line}")
    if len(r["log_odd"]) > 10:
        out(f"    ... {len(r['log_odd']) - 10} more non-info log lines")
    for m in r["misses"]:
        out(f"  MARK CHECK FAILED: {m}")
    if not r["misses"]:
        n = len(r.get("cli", [])) + len(r.get("lib", [])) + len(r.get("pym", []))
        out(f"  all {n} marks held exactly the {args.changed} modified files")


def verdict(ok: bool) -> str:
    return "PASS" if ok else "FAIL"


def summary(rs: list[dict[str, Any]], floor: dict[str, Any], args: argparse.Namespace, out: Out) -> None:
    mb = 1e6
    out(f"\n== summary (milliseconds; with {args.runs} runs p99 is the maximum)")
    out(f"{'tree':>6} {'files':>7} {'watch s':>8} {'cli med':>8} {'cli p99':>8} {'lib med':>8} "
        f"{'lib p99':>8} {'pym med':>8} {'peer med':>9} {'peer/cli':>8} {'peer/lib':>8} "
        f"{'RSS MB':>7} {'HWM MB':>7}")
    for r in rs:
        pm = med(r["peer"])
        mem = r.get("mem_end", r["mem_watch"])
        out(f"{r['size']:>6} {r['files']:7d} {r['watch_s']:8.2f} {med(r['cli']) * 1e3:8.1f} "
            f"{p99(r['cli']) * 1e3:8.1f} {med(r['lib']) * 1e3:8.1f} {p99(r['lib']) * 1e3:8.1f} "
            f"{med(r['pym']) * 1e3:8.1f} {pm * 1e3:9.1f} {pm / med(r['cli']):8.1f} "
            f"{pm / med(r['lib']):8.1f} {mem['VmRSS'] / mb:7.1f} {mem['VmHWM'] / mb:7.1f}")
    by = {r["size"]: r for r in rs}
    out("")
    out("start-up floors (no daemon), ms: " + "; ".join(
        f"{k} median {med(v) * 1e3:.1f}" for k, v in floor.items() if isinstance(v, list)))
    out(f"  {floor['heavy modules imported by snapd.cli']} = heavy modules loaded by `import snapd.cli`")
    out(f"  slowest imports of `import snapd.cli` (self time, median of 5, us): "
        f"{floor['slowest imports (self, median us)']}")
    if "1k" in by:
        r = by["1k"]
        out(f"  snapctl mark on the 1k workspace: median {med(r['cli']) * 1e3:.1f} ms, of which the daemon's "
            f"share (in-proc) {med(r['lib']) * 1e3:.1f} ms -> CLI overhead ~"
            f"{(med(r['cli']) - med(r['lib'])) * 1e3:.1f} ms")
    out("targets:")
    if "100k" in by:
        r = by["100k"]
        pm, cm, lm, lp = med(r["peer"]), med(r["cli"]), med(r["lib"]), p99(r["lib"])
        mem = max(r["mem_watch"]["VmRSS"], r.get("mem_end", {}).get("VmRSS", 0))
        hwm = max(r["mem_watch"]["VmHWM"], r.get("mem_end", {}).get("VmHWM", 0))
        out(f"  100k CLI median {cm * 1e3:.1f} ms <= peer/5 = {pm / 5 * 1e3:.1f} ms: {verdict(cm <= pm / 5)}")
        out(f"  100k in-proc median {lm * 1e3:.1f} ms <= peer/50 = {pm / 50 * 1e3:.1f} ms: "
            f"{verdict(lm <= pm / 50)}")
        out(f"  100k in-proc p99 {lp * 1e3:.1f} ms <= 20 ms: {verdict(lp <= 0.020)}")
        out(f"  100k daemon VmRSS {mem / mb:.1f} MB <= 300 MB: {verdict(mem <= 300e6)} "
            f"(VmHWM {hwm / mb:.1f} MB: {verdict(hwm <= 300e6)})")
    else:
        out("  (100k not run: the 100k targets are not checked)")
    for r in rs:
        if r["size"] != "100k" and r.get("peer"):
            out(f"  {r['size']}: in-proc median {med(r['lib']) * 1e3:.1f} ms vs peer/50 "
                f"{med(r['peer']) / 50 * 1e3:.1f} ms; p99 {p99(r['lib']) * 1e3:.1f} ms")
    if len(rs) > 1:
        a, b = rs[0], rs[-1]
        out(f"flatness {a['size']} -> {b['size']} ({b['files'] / a['files']:.0f}x files): in-proc median "
            f"x{med(b['lib']) / med(a['lib']):.2f}, CLI median x{med(b['cli']) / med(a['cli']):.2f}, "
            f"peer median x{med(b['peer']) / med(a['peer']):.2f}")
    misses = sum(len(r["misses"]) for r in rs)
    out(f"mark checks: {'all marks held exactly the changed files' if not misses else f'{misses} FAILED'}")


def main() -> None:
    ap = argparse.ArgumentParser(description="snapd marks (real daemon) vs the side-git peer")
    ap.add_argument("--sizes", default="1k,10k,100k", help="comma list of 1k, 10k, 100k")
    ap.add_argument("--runs", type=int, default=30, help="snapctl and in-process marks per size")
    ap.add_argument("--peer-runs", type=int, default=5, help="peer snaps per size")
    ap.add_argument("--pym-runs", type=int, default=10, help="`python -m snapd mark` runs per size")
    ap.add_argument("--floor-runs", type=int, default=20, help="runs of each start-up floor command")
    ap.add_argument("--changed", type=int, default=10, help="files changed before each mark")
    ap.add_argument("--out", type=Path, help="also write the printed results to this file")
    ap.add_argument("--keep-log", type=Path, help="copy each daemon's log to PREFIX-SIZE.log")
    ap.add_argument("--in-git-tree", action="store_true",
                    help="no GIT_CEILING_DIRECTORIES: the workspace counts as part of the repo's work tree")
    ap.add_argument("--drop-caches", action="store_true", help="drop the page cache at start")
    args = ap.parse_args()
    if args.changed > 10:
        sys.exit("--changed > 10: the summary keeps 10 examples, so the check would be weaker")
    for exe in (SNAPCTL, SNAPD, PYTHON):
        if not exe.exists():
            sys.exit(f"{exe} missing: install snapd into the venv (pip install -e .)")
    out = Out()
    git = subprocess.run(["git", "--version"], check=True, stdout=subprocess.PIPE, text=True).stdout.strip()
    out(f"# bench_mark {time.strftime('%Y-%m-%d %H:%M:%S')}; snapctl {SNAPCTL}; peer {git}; "
        f"nproc {os.cpu_count()}; {cache_note(args.drop_caches)}; warm-cache timings")
    out(f"# load average at start {loadavg()} (the machine is shared with other sessions)")
    out(f"# snapd source: {source_state()}")
    out(f"# runs {args.runs} (cli, in-proc), python -m {args.pym_runs}, peer {args.peer_runs}; "
        f"{args.changed} files changed (a line appended) before every mark")
    out("# workspaces under bench/data/work, SNAPD_HOME beside each; "
        + ("inside the repository's git work tree (--in-git-tree)" if args.in_git_tree else
           "GIT_CEILING_DIRECTORIES keeps them out of the repository's git work tree"))
    try:
        floor = cli_floor(args.floor_runs)
    except (RuntimeError, subprocess.CalledProcessError) as e:
        out(f"# start-up floors FAILED: {e}")
        floor = {"heavy modules imported by snapd.cli": "?", "slowest imports (self, median us)": "?"}
    rs = []
    failed = False
    for size in args.sizes.split(","):
        try:
            r = bench_size(size.strip(), args, out)
        except Exception as e:  # report, then carry on with the next size
            out(f"\n== tree-{size}: FAILED: {type(e).__name__}: {e}")
            for line in getattr(e, "partial", {}).get("log_odd", [])[:10]:
                out(f"    log: {line}")
            failed = True
            continue
        rs.append(r)
        report_size(r, args, out)
        failed |= bool(r["misses"])
    if rs:
        summary(rs, floor, args, out)
    out(f"# load average at end {loadavg()}")
    if args.out:
        args.out.write_text("\n".join(out.lines) + "\n")
        print(f"wrote {args.out}")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
