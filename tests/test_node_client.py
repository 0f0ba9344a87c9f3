"""The Node.js client (clients/node/) against a real daemon: its own `node --test` suite, run here
with SNAPD_HOME naming this test's daemon. It proves docs/protocol.md is enough to write a
client in another language (the client speaks ZeroMQ itself; it never runs snapctl). CI's
install tier runs `npm ci` there; without node or its modules this fails under CI."""

from __future__ import annotations

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
    assert "# fail 0" in out and "# pass 7" in out, out[-2000:]
    # What the Node client did is really in the daemon's history.
    marks = daemon.ctl_json("log", "-w", ws, "--all")["marks"]
    node_marks = [m for m in marks if m["agent"] == "node"]
    assert len(node_marks) == 21, [m["label"] for m in marks]
    assert (ws / "from-node.txt").read_text() == "written by node\n"
