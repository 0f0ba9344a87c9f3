"""Profile the running daemon with py-spy (a sampling profiler: it attaches to the process from
outside, so the daemon runs its real code, threads included) and summarise where the time goes.

A benchmark wraps the operation that missed its target in ``Sampler(pid)``: py-spy records
the daemon's stacks (``--format raw``: one collapsed stack and its sample count per line, all
threads, idle ones left out) until the block ends. ``summary`` gives the functions with the
most samples on the CPU themselves (self) and on the stack at all (inclusive), as shares of
the samples taken: what limits the operation, by measurement.
"""

from __future__ import annotations

import shutil
import signal
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from types import TracebackType
from typing import Any

PY_SPY = shutil.which("py-spy") or str(Path(sys.prefix) / "bin" / "py-spy")


class Sampler:
    def __init__(self, pid: int, out: Path, rate: int = 200) -> None:
        self.cmd = [PY_SPY, "record", "--pid", str(pid), "--format", "raw", "--output", str(out),
                    "--rate", str(rate), "--threads"]
        self.out = out
        self.proc: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> Sampler:
        self.proc = subprocess.Popen(self.cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        return self

    def __exit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGINT)  # py-spy writes its output on SIGINT
        try:
            self.proc.wait(60)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def _frame(text: str) -> str:
    # "func (path/to/module.py:123)" -> "func (module.py)"; line numbers split one function apart
    name, _, where = text.partition(" (")
    return f"{name} ({Path(where.rstrip(')').rsplit(':', 1)[0]).name})" if where else name


def _ours(frame: str) -> bool:
    """A function of snapd's own package (py-spy prints paths relative to sys.path)."""
    where = frame.partition(" (")[2]
    return "<module>" not in frame and (where.startswith("snapd/") or "/snapd/" in where)


def _stacks(path: Path) -> Iterator[tuple[list[str], int]]:
    """Each recorded stack of a ``--format raw`` file (its frames, outermost first, threads'
    and processes' names dropped) with its sample count."""
    for line in path.read_text(errors="replace").splitlines():
        stack, _, n = line.rpartition(" ")
        if not n.isdigit() or not stack:
            continue
        raw = [f for f in stack.split(";") if not f.startswith(("thread ", "process "))]
        if raw:
            yield raw, int(n)


def _serves_request(raw: list[str]) -> bool:
    """A sample of a request's own thread."""
    return any(f.startswith("ControlServer._run ") for f in raw)


def summary(path: Path, top: int = 12) -> dict[str, list[tuple[str, float]]]:
    """Top functions by self and inclusive share of the samples (threads' names dropped);
    ``snapd``: inclusive shares of snapd's own functions only; ``imports``: the share of
    samples spent importing modules."""
    own: Counter[str] = Counter()
    incl: Counter[str] = Counter()
    ours: Counter[str] = Counter()
    req_own: Counter[str] = Counter()
    req_ours: Counter[str] = Counter()
    importing = req_total = 0
    total = 0
    for raw, count in _stacks(path):
        frames = [_frame(f) for f in raw]
        total += count
        own[frames[-1]] += count
        for f in set(frames):
            incl[f] += count
        for f in {_frame(f) for f in raw if _ours(f)}:
            ours[f] += count
        if any("_find_and_load" in f for f in raw):
            importing += count
        if _serves_request(raw):
            req_total += count
            req_own[frames[-1]] += count
            for f in {_frame(f) for f in raw if _ours(f)}:
                req_ours[f] += count
    if total == 0:
        return {"self": [], "inclusive": [], "samples": [], "snapd": []}
    return {
        "samples": [("total", float(total)), ("importing %", round(100 * importing / total, 1))],
        "snapd": [(f, round(100 * c / total, 1)) for f, c in ours.most_common(top)],
        # Only the threads serving requests, as shares of their own samples: where a request's
        # time goes (the other threads' samples include blocked waits py-spy cannot tell idle).
        "request_samples": [("total", float(req_total))],
        "request_self": [(f, round(100 * c / max(req_total, 1), 1)) for f, c in req_own.most_common(top)],
        "request_snapd": [(f, round(100 * c / max(req_total, 1), 1)) for f, c in req_ours.most_common(top)],
        "self": [(f, round(100 * c / total, 1)) for f, c in own.most_common(top)],
        "inclusive": [(f, round(100 * c / total, 1)) for f, c in incl.most_common(top)],
    }


def per_operation(
    path: Path, ops: int, parents: tuple[str, ...], leaf: str, rate: int = 200, top: int = 8
) -> dict[str, Any]:
    """Where one operation's time goes on the threads serving requests, in ms per operation
    (samples x 1/``rate`` s, over ``ops`` operations): each of ``parents``' direct callees,
    and the samples inside ``leaf`` grouped by the nearest snapd function outside ``leaf``'s
    module that called it (for ``_Cursor._guard``: which statements a mark waits on)."""
    ms = 1000.0 / rate / max(ops, 1)
    total = 0
    callees: dict[str, Counter[str]] = {p: Counter() for p in parents}
    sites: Counter[str] = Counter()
    for raw, count in _stacks(path):
        if not _serves_request(raw):
            continue
        total += count
        names = [f.partition(" (")[0] for f in raw]
        for parent in parents:
            if parent in names:
                i = names.index(parent)
                callees[parent][_frame(raw[i + 1]) if i + 1 < len(raw) else "(itself)"] += count
        if leaf in names:
            i = names.index(leaf)
            module = raw[i].partition(" (")[2].rsplit(":", 1)[0]
            callers = [f for f in raw[:i] if _ours(f) and module not in f]
            sites[_frame(callers[-1]) if callers else "(no snapd caller)"] += count
    return {
        "ms_per_op": round(total * ms, 1),
        "callees": {
            p: {"ms": round(sum(c.values()) * ms, 1),
                "top": [(f, round(v * ms, 2)) for f, v in c.most_common(top)]}
            for p, c in callees.items()
        },
        "leaf": leaf,
        "leaf_ms": round(sum(sites.values()) * ms, 2),
        "sites": [(f, round(c * ms, 2)) for f, c in sites.most_common(top)],
    }


def per_operation_lines(b: dict[str, Any]) -> list[str]:
    out = [f"request threads: {b['ms_per_op']} ms of samples per operation"]
    for parent, c in b["callees"].items():
        out.append(f"{parent}: {c['ms']} ms, of which its callees:")
        out += [f"  {v:6.2f} ms  {f}" for f, v in c["top"]]
    out.append(f"{b['leaf']}: {b['leaf_ms']} ms, by the snapd function that called it:")
    out += [f"  {v:6.2f} ms  {f}" for f, v in b["sites"]]
    return out


def lines(s: dict[str, list[tuple[str, float]]]) -> list[str]:
    if not s["samples"]:
        return ["(no samples)"]
    out = [f"{int(s['samples'][0][1])} samples (all threads), {s['samples'][1][1]}% importing modules",
           "self:"]
    out += [f"  {pct:5.1f}%  {f}" for f, pct in s["self"]]
    out.append("inclusive, snapd's own functions:")
    out += [f"  {pct:5.1f}%  {f}" for f, pct in s["snapd"]]
    out.append(f"request threads only ({int(s['request_samples'][0][1])} samples), self:")
    out += [f"  {pct:5.1f}%  {f}" for f, pct in s["request_self"]]
    out.append("request threads only, snapd's own functions, inclusive:")
    out += [f"  {pct:5.1f}%  {f}" for f, pct in s["request_snapd"]]
    return out
