"""A turn the user interrupts is a mark of its own, and ``log`` says so: Codex's ``Interrupt`` hook.

When the user stops a Codex turn (Ctrl-C on ``codex exec``, Esc in its TUI), Codex runs its
``Interrupt`` hooks and neither ``Stop`` nor ``notify``. ``snapctl integrate codex`` writes an
``Interrupt`` hook; ``snapctl hook codex`` marks ``turn-end`` flagged ``interrupted``. Without it the
interrupted turn would have no end: its edits would be folded into the next turn, and ``log`` would
learn of the interrupt only when (if) another turn starts.

The real program, offline: the scripted model has Codex create a file, then run a long command
that first touches a flag file; the harness sends SIGINT once the flag exists (~10 s here).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from agent_fixtures import ready
from agent_harness import new_sandbox, run_turn
from e2e_helpers import Daemon, base_env, describe, run_ctl
from model_server import Call, Script
from test_agent_e2e import agent_marks, ctl_env

pytestmark = [pytest.mark.agents, pytest.mark.timeout(300)]


def test_codex_interrupt_ends_the_turn_as_interrupted(tmp_path: Path, daemon: Daemon) -> None:
    agent = ready("codex")
    box = new_sandbox(tmp_path / "agent", agent)
    ws = box.ws.resolve()
    (ws / "kept.txt").write_text("before the turn\n")
    assert daemon.ctl_json("watch", ws)["workspace"] == str(ws)
    env = ctl_env(daemon, box)
    cp = run_ctl(env, "integrate", "codex", "--user", cwd=ws)
    assert cp.returncode == 0, describe(cp)
    box.extra_env["SNAPD_HOME"] = env["SNAPD_HOME"]
    box.extra_env["PATH"] = env["PATH"]
    box.extra_args.append("--dangerously-bypass-hook-trust")
    flag = box.top / "tmp" / "long-command-started"
    script = Script(
        token="TURN-STOPPED",
        calls=(
            Call("exec_command", {"cmd": "printf 'made before the interrupt\\n' > made.txt"}),
            Call("exec_command", {"cmd": f"touch '{flag}' && sleep 120"}),
        ),
        final="Finished TURN-STOPPED.",
    )
    turn = run_turn(box, agent, "Please do TURN-STOPPED.", script, timeout=150, interrupt_when=flag)
    assert flag.exists() and not turn.timed_out, turn.describe()
    assert "Finished TURN-STOPPED" not in turn.stdout, turn.describe()  # it was stopped
    # the harness keeps Codex's sandbox off /tmp (agent_harness.CODEX_CONFIG): an empty /tmp/.git
    # left behind would put every later test's tmp_path "in a git work tree"
    assert not Path("/tmp/.git").exists()

    marks = agent_marks(daemon, ws, "codex")
    assert [m["label"] for m in marks[:2]] == ["turn-end", "turn-start"], marks  # newest first
    end, start = marks[0], marks[1]
    assert end["session"] == start["session"] and end["session"], marks
    assert end["summary"].get("interrupted") == start["id"], end
    # the tree as the interrupt left it (Codex also writes a .codex directory of its own there)
    changed = daemon.ctl("diff", start["id"], end["id"], cwd=ws).stdout.decode()
    assert "made.txt (added)" in changed and "made before the interrupt" in changed, changed
    lines = daemon.ctl("log", cwd=ws).stdout.decode().splitlines()
    start_line = next(line for line in lines if start["id"] in line)
    assert "[interrupted]" in start_line, lines


def test_codex_check_asks_codex_whether_it_trusts_the_hooks(tmp_path: Path) -> None:
    """``integrate codex --check`` asks the real Codex (``codex app-server``, ``hooks/list``): a hook
    trusted and then changed is reported untrusted, which ``config.toml`` alone cannot tell."""
    from snapd.integrations.base import Context
    from snapd.integrations.codex_trust import listed

    agent = ready("codex")
    box = new_sandbox(tmp_path / "agent", agent)
    env = {**base_env(tmp_path / "snapd-home"), **box.env()}  # codex on PATH, the box's CODEX_HOME
    cp = run_ctl(env, "integrate", "codex")
    # (issue 31, point 4) integrate no longer claims the turns are marked while Codex will not run
    # the hooks: it says they will not all run yet, with Codex's own answer, and what to do
    out = cp.stdout
    assert cp.returncode == 0 and b"will not all run yet" in out, describe(cp)
    assert b"Codex reports it untrusted" in out and b"marks its turns" not in out, describe(cp)
    hooks_json = box.home / ".codex" / "hooks.json"
    # what Codex's /hooks records when the user trusts them: the hash Codex computes
    found = listed(Context(env, ()), box.ws)
    assert isinstance(found, list), found
    ours = [h for h in found if str(h.get("command", "")).endswith(" hook codex")]
    assert {h["eventName"] for h in ours} == {"userPromptSubmit", "interrupt"}, found
    with open(box.home / ".codex" / "config.toml", "a") as f:
        for h in ours:
            key, digest = json.dumps(h["key"]), json.dumps(h["currentHash"])
            f.write(f"\n[hooks.state.{key}]\ntrusted_hash = {digest}\n")
    cp = run_ctl(env, "integrate", "codex", "--check")
    assert cp.returncode == 0 and cp.stdout.count(b"Codex reports it trusted") == 2, describe(cp)
    # someone changes snapd's hook after it was trusted: Codex would skip it now
    doc = json.loads(hooks_json.read_text())
    doc["hooks"]["UserPromptSubmit"][0]["hooks"][0]["timeout"] = 31
    hooks_json.write_text(json.dumps(doc))
    cp = run_ctl(env, "integrate", "codex", "--check")
    assert cp.returncode == 1, describe(cp)
    line = next(t for t in cp.stdout.decode().splitlines() if "UserPromptSubmit hook" in t)
    assert line.startswith("NOT OK"), line
    assert "Codex reports it modified: changed since it was trusted" in line, line
