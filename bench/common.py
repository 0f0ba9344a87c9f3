"""What every benchmark shares: the method, so that no script can bend it.

- Sides are run **interleaved** (peer, snapd, peer, snapd, ...) by ``interleave``, so the load
  of this shared machine falls on both alike; every figure is reported as min / median / max
  of at least ``MIN_REPS`` repetitions (``spread``).
- A target is checked by ``Results.verdict`` with the target's text exactly as issue 12
  states it: ``MET`` or ``NOT MET`` and the figure. No script computes a target of its own.
- ``Results.write`` puts every figure, the verdicts, the measured commit (``git rev-parse
  HEAD`` and whether the tree was dirty), the load average at start and end, and the machine
  into ``docs/bench-results/<script>-<corpus>-<size>.json`` (one file per script and tree, the
  latest run: git history keeps the older ones).
- ``Daemon`` is a real ``snapd start`` with its own SNAPD_HOME beside the workspace (same
  disk); the workspace is kept out of this repository's git work tree with
  GIT_CEILING_DIRECTORIES, or snapd would apply the repo's .gitignore to it.
- The setup every script shares, one way: ``scratch_copy`` (the tree copied for the run),
  ``daemon_run`` (a daemon whose stop, the results file and the scratch clean-up happen
  whatever the body does), ``start_watching`` (start, then ``snapctl watch``), ``started`` (a
  daemon of its own home, stopped after the body) and ``peer_baseline`` (the peer's repository
  with its first snapshot).
"""

from __future__ import annotations

import json
import os
import platform
import signal
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from peer import copy_tree, du_bytes, peer_init, peer_snap, remove

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
DATA = BENCH / "data"
RESULTS = REPO / "docs" / "bench-results"
_HERE_BIN = Path(sys.prefix) / "bin"
VENV_BIN = _HERE_BIN if (_HERE_BIN / "snapctl").exists() else REPO / ".venv" / "bin"
SNAPCTL = VENV_BIN / "snapctl"
SNAPD = VENV_BIN / "snapd"
PYTHON = VENV_BIN / "python"
MIN_REPS = 7

sys.path.insert(0, str(REPO))


def loadavg() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def cpu_times() -> list[int]:
    """The machine's CPU time so far, in clock ticks: user nice system idle iowait irq softirq
    steal (``/proc/stat``)."""
    with open("/proc/stat") as f:
        return [int(x) for x in f.readline().split()[1:9]]


def cpu_shares(start: list[int], end: list[int]) -> dict[str, float]:
    """Each kind's share of the machine's CPU time between two :func:`cpu_times`, in percent.
    ``steal`` is time the hypervisor gave this virtual machine's CPUs to someone else: on a
    shared host it slows both sides of a run alike, but makes runs of different days
    incomparable."""
    d = [b - a for a, b in zip(start, end, strict=True)]
    total = sum(d) or 1
    names = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal")
    return {n: round(100 * x / total, 1) for n, x in zip(names, d, strict=True)}


def spread(xs: list[float]) -> dict[str, float | int]:
    """n, min, median, max: what every figure reports."""
    return {"n": len(xs), "min": min(xs), "median": statistics.median(xs), "max": max(xs)}


def show(s: dict[str, Any], unit: str = "s") -> str:
    """'median 1.23 s (min 1.10, max 1.50, n 7)'; unit ms multiplies seconds by 1000."""
    k = 1000.0 if unit == "ms" else 1.0
    nd = 1 if unit == "ms" else 3
    return (f"median {s['median'] * k:.{nd}f} {unit} (min {s['min'] * k:.{nd}f}, "
            f"max {s['max'] * k:.{nd}f}, n {s['n']})")


def git_out(*args: str) -> str:
    env = {**os.environ, "GIT_OPTIONAL_LOCKS": "0"}  # never refresh the repository's index
    return subprocess.run(["git", "-C", str(REPO), *args], env=env, capture_output=True,
                          text=True).stdout.strip()


def source_state() -> dict[str, Any]:
    """The commit measured and whether the tree differed from it (docs/bench-results excepted:
    results of the run being written are not the code measured)."""
    dirty = [ln for ln in git_out("status", "--porcelain").splitlines()
             if "docs/bench-results/" not in ln and "docs/benchmarks.md" not in ln]
    return {"commit": git_out("rev-parse", "HEAD"), "dirty": bool(dirty), "dirty_files": dirty[:20]}


def machine() -> dict[str, Any]:
    model = ""
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    with open("/proc/meminfo") as f:
        mem_kb = int(f.readline().split()[1])
    fs = subprocess.run(["stat", "-f", "-c", "%T", str(DATA if DATA.exists() else BENCH)],
                        capture_output=True, text=True).stdout.strip()
    git = subprocess.run(["git", "--version"], capture_output=True, text=True).stdout.strip()
    return {"nproc": os.cpu_count(), "cpu": model, "mem_bytes": mem_kb * 1024,
            "kernel": platform.release(), "python": platform.python_version(), "git": git,
            "data_fs": fs}


class Results:
    """Prints every line it is given and keeps it; collects figures and verdicts; writes JSON."""

    def __init__(self, script: str, corpus: str, size: str, method: dict[str, Any]) -> None:
        self.data: dict[str, Any] = {
            "script": script, "corpus": corpus, "size": size,
            "started_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "source": source_state(), "machine": machine(), "load_start": loadavg(),
            "method": method, "figures": {}, "verdicts": [], "notes": [],
        }
        self._cpu_start = cpu_times()
        self.lines: list[str] = []
        src = self.data["source"]
        self(f"# {script} on {corpus}-{size}; commit {src['commit'][:12]}"
             f"{' (DIRTY tree)' if src['dirty'] else ''}; load {self.data['load_start']}; "
             f"{self.data['machine']['nproc']} cpus, {self.data['machine']['git']}")

    def __call__(self, text: str) -> None:
        print(text, flush=True)
        self.lines.append(text)

    def figure(self, key: str, value: Any, label: str | None = None, unit: str = "s") -> None:
        """Keep a figure; print it when given a label (a spread prints as min/median/max)."""
        self.data["figures"][key] = value
        if label is not None:
            text = show(value, unit) if isinstance(value, dict) and "median" in value else str(value)
            self(f"  {label:<58} {text}")

    def note(self, text: str) -> None:
        self.data["notes"].append(text)
        self(f"  note: {text}")

    def verdict(self, target: str, wanted: str, figure: str, met: bool) -> None:
        """One target of issue 12, its wanted value as the issue states it, the measured figure."""
        self.data["verdicts"].append({"target": target, "wanted": wanted, "figure": figure,
                                      "verdict": "MET" if met else "NOT MET"})
        self(f"VERDICT {target}: {'MET' if met else 'NOT MET'} - {figure} (target {wanted})")

    def write(self) -> Path:
        self.data["load_end"] = loadavg()
        self.data["cpu_shares"] = shares = cpu_shares(self._cpu_start, cpu_times())
        self(f"# cpu over the run: {shares['user']}% user, {shares['system']}% system, "
             f"{shares['iowait']}% iowait, {shares['idle']}% idle, {shares['steal']}% stolen by the host")
        self.data["finished_utc"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        self.data["printed"] = self.lines
        RESULTS.mkdir(parents=True, exist_ok=True)
        path = RESULTS / f"{self.data['script']}-{self.data['corpus']}-{self.data['size']}.json"
        path.write_text(json.dumps(self.data, indent=1, default=str) + "\n")
        print(f"wrote {path.relative_to(REPO)}", flush=True)
        return path


def interleave(reps: int, sides: dict[str, Callable[[int], float]]) -> dict[str, list[float]]:
    """Run each side once per repetition, in the given order (peer first), ``reps`` times;
    the seconds each returned, per side."""
    if reps < MIN_REPS:
        sys.exit(f"{reps} repetitions: the method asks for at least {MIN_REPS}")
    times: dict[str, list[float]] = {name: [] for name in sides}
    for i in range(reps):
        for name, fn in sides.items():
            times[name].append(fn(i))
        print(f"    rep {i + 1}/{reps}: " + ", ".join(f"{n} {t[-1]:.3f} s" for n, t in times.items()),
              flush=True)
    return times


def proc_mem(pid: int) -> dict[str, int]:
    """VmRSS (now) and VmHWM (peak since start) of pid, bytes."""
    out: dict[str, int] = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            key, _, val = line.partition(":")
            if key in ("VmRSS", "VmHWM"):
                out[key] = int(val.split()[0]) * 1024
    return out


def _rss_kb(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def _children(pid: int) -> list[int]:
    kids: list[int] = []
    try:
        for task in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{task}/children") as f:
                kids.extend(int(k) for k in f.read().split())
    except OSError:
        pass
    return kids


@contextmanager
def tree_peak(pid: int, every_s: float = 0.05) -> Iterator[list[int]]:
    """Sample, while the block runs, the summed VmRSS of ``pid`` and its descendants (the
    daemon and its reader processes); yields a list whose one item is the peak seen, bytes.
    Sampling can miss a short spike: it is a lower bound of the process tree's peak."""
    peak = [0]
    stop = threading.Event()

    def sample() -> None:
        while not stop.is_set():
            todo, total = [pid], 0
            while todo:
                p = todo.pop()
                total += _rss_kb(p)
                todo.extend(_children(p))
            peak[0] = max(peak[0], total * 1024)
            stop.wait(every_s)

    t = threading.Thread(target=sample, daemon=True)
    t.start()
    try:
        yield peak
    finally:
        stop.set()
        t.join()


def run_timed(cmd: list[str], env: dict[str, str] | None = None, timeout: float = 3600) -> tuple[float, str]:
    t0 = time.perf_counter()
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
    dt = time.perf_counter() - t0
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited {p.returncode}: {p.stderr.strip()[-2000:]}")
    return dt, p.stdout


def compile_bytecode() -> None:
    """Compile snapd's modules, as pip does when it installs snapd. snapd is installed editable
    here, and this machine sets PYTHONDONTWRITEBYTECODE: without this every process start would
    compile snapd from source (~0.3 s of CPU for the daemon), which an installed snapd never
    does. zmq and the other dependencies have their bytecode from pip already."""
    subprocess.run([str(PYTHON), "-m", "compileall", "-q", str(REPO / "snapd")], check=True)


def snapd_env(home: Path, ceiling: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SNAPD_")}
    env["SNAPD_HOME"] = str(home)
    env["GIT_CEILING_DIRECTORIES"] = str(ceiling)
    return env


class Daemon:
    """A real ``snapd start`` with its own SNAPD_HOME; its output goes to a log file."""

    def __init__(self, home: Path, ceiling: Path) -> None:
        self.home = home
        self.env = snapd_env(home, ceiling)
        self.gc_s: list[float] = []  # wall time of each `snapctl gc` of gc_at_rest
        self.log_path = home.parent / f"{home.name}-daemon.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self.endpoint = ""

    def spawn(self, wrap: list[str] | None = None) -> float:
        """Start the process (under ``wrap``, e.g. a profiler, if given); its perf_counter start
        time. Under a wrapper ``pid`` is the wrapper's: use ``status`` for the daemon's."""
        self.home.mkdir(mode=0o700, exist_ok=True)
        log = open(self.log_path, "ab")
        t0 = time.perf_counter()
        self.proc = subprocess.Popen([*(wrap or []), str(SNAPD), "start"], env=self.env,
                                     stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, cwd="/")
        log.close()
        return t0

    def endpoint_now(self) -> str:
        from snapd.config import load_config, resolve_endpoint

        return resolve_endpoint(load_config(self.env))

    def start(self) -> float:
        """Spawn and wait until it answers ``status``; seconds from spawn."""
        from snapd.errors import SnapdError
        from snapd.ipc.client import Client

        t0 = self.spawn()
        self.endpoint = self.endpoint_now()
        deadline = time.monotonic() + 120
        while True:
            assert self.proc is not None
            if self.proc.poll() is not None:
                raise RuntimeError(f"snapd start exited {self.proc.returncode}: {self.log()[-2000:]}")
            try:
                with Client(self.endpoint, 1.0) as c:
                    st = c.call("status")
                if st["pid"] == self.proc.pid:
                    return time.perf_counter() - t0
            except SnapdError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError("snapd did not answer status within 120 s")
            time.sleep(0.01)

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def call(self, op: str, timeout_s: float = 3600, **args: Any) -> dict[str, Any]:
        from snapd.ipc.client import Client

        with Client(self.endpoint, timeout_s) as c:
            return c.call(op, **args)  # type: ignore[arg-type]

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def stop(self) -> str:
        if self.proc is None or self.proc.poll() is not None:
            return "not running"
        try:
            self.call("stop", timeout_s=30)
            self.proc.wait(timeout=60)
            how = "snapctl stop"
        except Exception:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=10)
            how = "SIGKILL"
        return f"{how}, exit {self.proc.returncode}"


def scratch_copy(tree: Path, label: str) -> tuple[Path, Path, str]:
    """(ws, scratch, root): ``tree`` copied for one run into a scratch directory of its own
    (where the daemon's home and the peer's repository go too), and the copy's real path."""
    ws = copy_tree(tree, label)
    return ws, ws.parent, os.path.realpath(ws)


@contextmanager
def daemon_run(res: Results, scratch: Path) -> Iterator[Daemon]:
    """A Daemon with SNAPD_HOME ``scratch/home``, not started yet. After the body, whatever
    happened in it: the daemon's stop is recorded (``daemon_stop``), the results are written
    and the scratch directory is removed."""
    d = Daemon(scratch / "home", scratch)
    try:
        yield d
    finally:
        res.figure("daemon_stop", d.stop())
        res.write()
        remove(scratch)


@contextmanager
def started(home: Path, scratch: Path) -> Iterator[Daemon]:
    """A daemon with SNAPD_HOME ``home``, started; stopped after the body."""
    d = Daemon(home, scratch)
    d.start()
    try:
        yield d
    finally:
        d.stop()


def age_tree(ws: Path) -> None:
    """Every mtime under ``ws`` an hour back: nothing in the racy window, so a restart has
    nothing to re-read."""
    old = time.time() - 3600
    for dirpath, dirnames, filenames in os.walk(ws):
        for name in filenames + dirnames:
            os.utime(os.path.join(dirpath, name), (old, old), follow_symlinks=False)


def start_watching(d: Daemon, root: str) -> None:
    """Start ``d`` and watch ``root``: returns once the baseline mark exists."""
    d.start()
    run_timed([str(SNAPCTL), "watch", root, "--json"], d.env)


def gc_at_rest(d: Daemon) -> int:
    """``du`` of running ``d``'s SNAPD_HOME after ``snapctl gc`` and at rest (``d`` stopped).

    ``snapctl gc`` with the default retention evicts nothing young, and repacks (whole objects
    become deltas against contents of the same file name, docs/storage.md): the peer's figure
    is after ``git gc``, and the daemon's own periodic GC (its first one a tenth of the
    interval after start) would otherwise repack the baseline in the middle of a series and
    count that as the series' doing. Stopped, the daemon's SQLite checkpoints its WAL into the
    catalog and deletes it as it closes, so no log is counted: a running daemon's keeps a
    length of its own between checkpoints (a transaction's, or the length kept for reuse),
    which made a growth measured across two running moments meaningless (``bench_mark.py``
    once printed a negative one)."""
    d.gc_s.append(run_timed([str(SNAPCTL), "gc"], d.env)[0])
    d.stop()
    return du_bytes(d.home)


def store_at_rest(d: Daemon, root: str) -> int:
    """:func:`gc_at_rest`, then ``d`` serving again with ``root`` ready (``snapctl watch`` of
    the live workspace returns once its reconcile is done)."""
    size = gc_at_rest(d)
    start_watching(d, root)
    return size


def peer_baseline(ws: Path, scratch: Path) -> Path:
    """The peer's repository (``scratch/sidegit``), with the whole workspace snapped as "baseline"."""
    gitdir = scratch / "sidegit"
    peer_init(ws, gitdir)
    peer_snap(ws, gitdir, "baseline")
    return gitdir


def workspace_of(status: dict[str, Any], root: str) -> dict[str, Any]:
    return next((w for w in status["workspaces"] if w["root"] == root), {})


def counters(w: dict[str, Any]) -> dict[str, int]:
    """The workspace's numeric status fields and its ``counters`` (full scans, lstats, files
    read, where the measured commit has them)."""
    flat = {**w, **{f"counters.{k}": v for k, v in (w.get("counters") or {}).items()}}
    return {k: v for k, v in flat.items() if isinstance(v, int) and not isinstance(v, bool)}


def counters_per(before: dict[str, Any], after: dict[str, Any], n: int) -> dict[str, float]:
    """The workspace counters that moved between two ``status`` snapshots, per operation."""
    a = counters(after)
    return {k: round((a.get(k, 0) - v) / n, 3) for k, v in counters(before).items() if a.get(k, 0) != v}


def tree_path(corpus: str, size: str) -> Path:
    tree = DATA / f"{corpus}-{size}"
    if not (tree.is_dir() and tree.with_suffix(".json").exists()):
        sys.exit(f"{tree} missing: run python bench/make_tree.py --corpus {corpus} --size {size}")
    # One inotify watch per directory (two copies may be watched at once: a scratch copy and
    # another run's): short of that, snapd scans the rest at every mark, and what a benchmark
    # measured would be that, not the daemon (django-500k has 239,171 directories).
    dirs = int(json.loads(tree.with_suffix(".json").read_text())["dirs"])
    limit = int(Path("/proc/sys/fs/inotify/max_user_watches").read_text())
    if dirs + 10_000 > limit:
        sys.exit(f"{tree} has {dirs} directories and fs.inotify.max_user_watches is {limit}: "
                 f"raise it first (sudo sysctl fs.inotify.max_user_watches={max(524288, 2 * dirs)})")
    return tree


def tree_info(corpus: str, size: str) -> dict[str, Any]:
    info: dict[str, Any] = json.loads(tree_path(corpus, size).with_suffix(".json").read_text())
    return info


def common_args(ap: Any) -> None:
    ap.add_argument("--corpus", default="django", choices=["django", "npm"])
    ap.add_argument("--size", default="100k", choices=["1k", "10k", "100k", "500k"])
    ap.add_argument("--reps", type=int, default=MIN_REPS, help=f"repetitions per side (>= {MIN_REPS})")


def capture_pool(ws: Path) -> list[bytes]:
    """The files snapd captures (its own ignore rules say so); changes are made among them."""
    from peer import list_files

    from snapd.capture.ignore import IgnoreRules

    rules = IgnoreRules.load(ws)
    return [p for p in list_files(ws) if rules.reason(p, False) is None]
