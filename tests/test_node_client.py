"""The Node.js client (clients/node/) against a real daemon: its own `node --test` suite, run here
with SNAPD_HOME naming this test's daemon. It proves docs/protocol.md is enough to write a
client in another language (the client speaks ZeroMQ itself; it never runs snapctl). CI's
install tier runs `npm ci` there; without node or its modules this fails under CI."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
from e2e_helpers import Daemon, describe, unavailable

pytestmark = [pytest.mark.clients, pytest.mark.timeout(180)]

NODE_DIR = Path(__file__).resolve().parent.parent / "clients" / "node"


def test_node_client_suite_passes_against_a_real_daemon(daemon: Daemon, ws: Path) -> None:
    node = shutil.which("node")
    if node is None:
        unavailable("node is not installed (CI's install tier needs nodejs and npm)")
    if not (NODE_DIR / "node_modules" / "zeromq").is_dir():
        unavailable(f"run `npm ci` in {NODE_DIR} first (CI's install tier does)")
    env = daemon.env | {"SNAPD_TEST_WORKSPACE": str(ws)}
    cp = subprocess.run([node, "--test", "test/"], cwd=NODE_DIR, env=env, capture_output=True, timeout=150)
    assert cp.returncode == 0, describe(cp)
    out = cp.stdout.decode()
    assert "# fail 0" in out and "# pass 13" in out, out[-2000:]
    # What the Node client did is really in the daemon's history.
    marks = daemon.ctl_json("log", "-w", ws, "--all")["marks"]
    node_marks = [m for m in marks if m["agent"] == "node"]
    assert len(node_marks) == 22, [m["label"] for m in marks]
    assert (ws / "from-node.txt").read_text() == "written by node\n"
    # Four reverts applied (three turns, two of them by snapd-node, and a run's turn), each
    # behind its pre-rollback mark; the refused ones took none. Three runs, each a turn with
    # the command in its turn-end mark.
    reverts = [m for m in marks if m["kind"] == "pre-rollback"]
    assert [m["message"].startswith("before revert of turn ") for m in reverts] == [True] * 4, reverts
    runs = [m for m in marks if m["agent"] == "run" and m["label"] == "turn-end"]
    ended = sorted((m["summary"]["run"]["argv"][0], m["summary"]["run"]["exit"]) for m in runs)
    assert ended == [("no-such-command-for-node", 127), ("sh", 3), ("sleep", None)], runs


def _node() -> str:
    node = shutil.which("node")
    if node is None:
        unavailable("node is not installed (CI's install tier needs nodejs and npm)")
    if not (NODE_DIR / "node_modules" / "zeromq").is_dir():
        unavailable(f"run `npm ci` in {NODE_DIR} first (CI's install tier does)")
    return node


def test_node_command_help_exits_0_and_created_ns_is_exact(daemon: Daemon, ws: Path) -> None:
    """Issue 31, point 12: `snapd-node --help` exited 2 (usage error), and `created_ns`
    (~1.8e18, past 2^53) came out of JSON.parse rounded: the command printed another instant
    than the daemon's. Now --help is exit 0, and the integer arrives (and prints) exactly."""
    node = _node()
    cli = [node, str(NODE_DIR / "bin" / "snapd-node.js")]
    for ask in (["--help"], ["-h"], ["mark", "--help"]):
        cp = subprocess.run([*cli, *ask], env=daemon.env, capture_output=True, timeout=30)
        assert cp.returncode == 0 and cp.stdout.startswith(b"usage: snapd-node"), describe(cp)
    cp = subprocess.run([*cli, "bogus"], env=daemon.env, capture_output=True, timeout=30)
    assert cp.returncode == 2 and b"usage" in cp.stderr, describe(cp)

    cp = subprocess.run([*cli, "mark", "exact", "--agent", "node"], cwd=ws, env=daemon.env,
                        capture_output=True, timeout=60)
    assert cp.returncode == 0, describe(cp)
    mark = json.loads(cp.stdout)  # Python's json keeps every digit
    truth = next(m for m in daemon.ctl_json("log", "-w", ws)["marks"] if m["id"] == mark["id"])
    assert truth["created_ns"] > 2**53
    assert mark["created_ns"] == truth["created_ns"], (mark["created_ns"], truth["created_ns"])
    listed = json.loads(subprocess.run([*cli, "log", "-w", str(ws)], env=daemon.env, capture_output=True,
                                       timeout=30, check=True).stdout)
    assert next(m for m in listed["marks"] if m["id"] == mark["id"])["created_ns"] == truth["created_ns"]
