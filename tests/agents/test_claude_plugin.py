"""snapd's hooks as a Claude Code plugin: written by snapctl, installed by Claude Code's own commands.

``snapctl integrate claude-code --plugin`` writes a plugin directory with a one-plugin marketplace
(:mod:`snapd.integrations.claude_plugin`); the real ``claude plugin marketplace add`` and ``claude
plugin install`` take it, offline, in a loopback-only namespace; then a real turn is marked by the
plugin's hooks alone (the settings file has none of snapd's), and ``--check`` sees it enabled.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from agent_fixtures import ready
from agent_harness import NODE_BIN, new_sandbox, run_turn, turn_script
from e2e_helpers import Daemon, describe, run_ctl
from test_agent_e2e import agent_marks, agents_session, ctl_env

pytestmark = [pytest.mark.agents, pytest.mark.timeout(300)]


def claude(box_env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    """Claude Code's own command, in a namespace with only loopback: nothing can leave."""
    script = 'ip link set lo up && exec "$@"'
    return subprocess.run(
        ["unshare", "-n", "sh", "-c", script, "sh", str(NODE_BIN / "claude"), *args],
        env=box_env, capture_output=True, text=True, timeout=120,
    )


def test_claude_code_installs_snapds_plugin_and_its_hooks_mark_the_turn(
    tmp_path: Path, daemon: Daemon
) -> None:
    agent = ready("claude-code")
    box = new_sandbox(tmp_path / "agent", agent)
    ws = box.ws.resolve()
    (ws / "edit.txt").write_text("line one\nline two\n")
    (ws / "gone.txt").write_text("bye\n")
    assert daemon.ctl_json("watch", ws)["workspace"] == str(ws)
    env = ctl_env(daemon, box)
    cp = run_ctl(env, "integrate", "claude-code", "--plugin", "--json", cwd=ws)
    assert cp.returncode == 0, describe(cp)
    plugin = json.loads(cp.stdout)["plugin"]
    assert plugin.startswith(str(box.home)), plugin  # under the user's XDG data directory
    box.extra_env["SNAPD_HOME"] = env["SNAPD_HOME"]
    box.extra_env["PATH"] = env["PATH"]
    for args in (("plugin", "marketplace", "add", plugin), ("plugin", "install", "snapd@snapd-local")):
        done = claude(box.env(), *args)
        assert done.returncode == 0, (args, done.stdout, done.stderr)
    cp = run_ctl(env, "integrate", "claude-code", "--plugin", "--check", cwd=ws)
    assert cp.returncode == 0 and b"enabled" in cp.stdout, describe(cp)
    settings = json.loads((box.home / ".claude" / "settings.json").read_text())
    assert "hooks" not in settings, settings  # the plugin is the only integration

    prompt = "Please make the changes of TURN-ONE."
    turn = run_turn(box, agent, prompt, turn_script(agent, ws, "TURN-ONE"))
    assert turn.returncode == 0 and not turn.timed_out, turn.describe()
    marks = agent_marks(daemon, ws, "claude-code")
    assert [m["label"] for m in marks[:2]] == ["turn-end", "turn-start"], marks
    assert {m["session"] for m in marks} == {agents_session(agent, turn)}, marks
