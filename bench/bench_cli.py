"""The CLI's cost above the floor, measured with hyperfine, and where it goes (``-X importtime``).

The floor is the same interpreter (the venv's python) running ``import zmq`` and nothing else:
what any CLI that speaks ZeroMQ pays before it does anything. Against it: ``snapctl
--version``, ``snapctl status`` and ``snapctl mark turn -w WS``, and when the measured commit
has it ``snapctl hook``: ``hook claude-code`` with no event (start-up only) and ``hook codex
EVENT`` (Codex's notify: a whole hook call that marks turn-end), on a real daemon watching the
corpus tree.

hyperfine runs every command ``--runs-per-round`` times (after one warm-up) in each of
``--rounds`` rounds, the floor first in each: the rounds interleave the commands, so load
falls on the floor and the commands alike. Reported: min / median / max over all runs, and
median(command) - median(floor). ``-X importtime`` (5 runs, median per module) shows which
imports the ``status`` command pays for.

    python bench/bench_cli.py --corpus django --size 100k
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import subprocess
from pathlib import Path
from typing import Any

from common import (
    PYTHON,
    SNAPCTL,
    Results,
    common_args,
    compile_bytecode,
    daemon_run,
    scratch_copy,
    spread,
    start_watching,
    tree_path,
)
from peer import warm

from snapd.ipc.timing import difference, quantile_bound


def hyperfine(cmds: dict[str, str], runs: int, env: dict[str, str], out: Path) -> dict[str, list[float]]:
    subprocess.run(["hyperfine", "-N", "--warmup", "1", "--runs", str(runs), "--export-json", str(out),
                    "--style", "none", *[a for name, c in cmds.items() for a in ("-n", name, c)]],
                   env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    data = json.loads(out.read_text())
    return {r["command"]: r["times"] for r in data["results"]}


def importtime(argv: list[str], env: dict[str, str], runs: int = 5) -> dict[str, Any]:
    """Median self and cumulative microseconds per imported module when running ``argv``."""
    selfs: dict[str, list[int]] = {}
    cums: dict[str, list[int]] = {}
    code = f"import sys; sys.argv = {argv!r}; from snapd.cli import main; main()"
    for _ in range(runs):
        p = subprocess.run([str(PYTHON), "-X", "importtime", "-c", code], env=env,
                           stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        for own, cum, name in re.findall(r"^import time:\s+(\d+) \|\s+(\d+) \| (.+)$", p.stderr, re.M):
            if name.strip() == name:  # top level only for the cumulative view
                cums.setdefault(name, []).append(int(cum))
            selfs.setdefault(name.strip(), []).append(int(own))
    top_self = sorted(((statistics.median(v), k) for k, v in selfs.items()), reverse=True)[:12]
    top_cum = sorted(((statistics.median(v), k) for k, v in cums.items()), reverse=True)[:12]
    total = sum(statistics.median(v) for v in cums.values())
    return {"total_ms": round(total / 1000, 1),
            "top_level_cumulative_ms": [(k, round(v / 1000, 1)) for v, k in top_cum],
            "self_ms": [(k, round(v / 1000, 1)) for v, k in top_self]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    common_args(ap)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--runs-per-round", type=int, default=5)
    args = ap.parse_args()
    tree = tree_path(args.corpus, args.size)
    res = Results("cli", args.corpus, args.size, {
        "rounds": args.rounds, "runs_per_round": args.runs_per_round, "tool": "hyperfine -N (no shell)",
        "floor": f"{PYTHON} -c 'import zmq'",
    })
    compile_bytecode()
    ws, scratch, root = scratch_copy(tree, f"cli-{args.corpus}-{args.size}")
    warm(ws)
    with daemon_run(res, scratch) as d:
        start_watching(d, root)
        cmds = {
            "floor": f"{PYTHON} -c 'import zmq'",
            "version": f"{SNAPCTL} --version",
            "status": f"{SNAPCTL} status",
            "mark": f"{SNAPCTL} mark turn -w {root}",
        }
        has_hook = subprocess.run([str(SNAPCTL), "hook", "--help"], env=d.env,
                                  capture_output=True).returncode == 0
        if has_hook:
            # no event on stdin: start-up, config and parsing only (the hook marks nothing)
            cmds["hook claude-code"] = f"{SNAPCTL} hook claude-code"
            # a whole hook call that marks: Codex's notify passes its event as an argument
            # (hyperfine cannot feed stdin), the same path as every agent's hook
            notify = json.dumps({"type": "agent-turn-complete", "thread-id": "bench", "cwd": root},
                                separators=(",", ":"))
            cmds["hook codex"] = f"{SNAPCTL} hook codex '{notify}'"
        else:
            res.note("`snapctl hook` does not exist at the measured commit: not measured")
        before = d.call("status")["requests"]
        times: dict[str, list[float]] = {k: [] for k in cmds}
        for r in range(args.rounds):
            got = hyperfine(cmds, args.runs_per_round, d.env, scratch / f"round-{r}.json")
            for k, v in got.items():
                times[k] += v
            print(f"    round {r + 1}/{args.rounds}: " + ", ".join(
                f"{k} {statistics.median(v) * 1e3:.0f} ms" for k, v in got.items()), flush=True)
        after = d.call("status")["requests"]
        for op in ("status", "mark"):  # the daemon's own share of the CLI calls just timed
            window = difference(after, before, op)
            res.figure(f"daemon_{op}_p50_ms", quantile_bound(window, 0.5),
                       f"daemon's share of `{op}` p50 (bucket bound, {sum(window)} requests), ms")
        floor = statistics.median(times["floor"])
        for k, v in times.items():
            res.figure(f"{k}_s", spread(v), f"{k}", unit="ms")
        above = {k: (statistics.median(v) - floor) for k, v in times.items() if k != "floor"}
        res.figure("above_floor_ms", {k: round(v * 1e3, 1) for k, v in above.items()},
                   "median above the floor, ms")
        it = importtime(["snapctl", "status"], d.env)
        res.figure("importtime_status", it)
        res(f"  -X importtime of `snapctl status`: all top-level imports {it['total_ms']} ms; largest "
            "(cumulative): " + ", ".join(f"{k} {v}" for k, v in it["top_level_cumulative_ms"][:6]))
        res("  largest self times: " + ", ".join(f"{k} {v}" for k, v in it["self_ms"][:8]))
        floor_it = importtime(["snapctl", "--version"], d.env)
        res.figure("importtime_version", floor_it)
        if args.size == "100k":
            names = [k for k in ("mark", "hook codex", "hook claude-code", "status") if k in above]
            worst = max(names, key=lambda k: above[k])
            res.verdict("snapctl mark / hook claude-code / status wall time above the floor", "<= 20 ms",
                        ", ".join(f"{k} {above[k] * 1e3:.0f} ms" for k in names)
                        + f" (floor {floor * 1e3:.0f} ms, medians of {len(times['floor'])})"
                        + ("" if has_hook else "; hook not at this commit"),
                        above[worst] <= 0.020)


if __name__ == "__main__":
    main()
