"""Every agent marks its turns out of the box: the promise of issue 10, proven with the real programs.

Turn 1 / turn 2 seconds measured here: Claude Code 6/4, Codex 8/6, Gemini CLI 15/10, OpenCode
24/19, Aider 16/-. The test fails when the hook's notice is emptied.

Per agent, against a real daemon: ``snapctl integrate AGENT`` (``--project`` where the agent has a
per-project form, ``--user`` for Codex and Aider) in the test's private HOME; one real turn through
the scripted model creates, edits and deletes files; then

- ``turn-start`` and ``turn-end`` marks exist, tagged with the agent and one session id (the
  agent's own, where it prints it);
- ``snapctl rollback --to`` the turn-start restores the tree exactly as it was before the turn;
- the next turn of the same session (the agent's own resume) carries snapd's rollback notice to
  the model: the scripted model server *receives* it. Aider has no context channel: no notice.

The workspace is watched first (``snapctl watch``): a user-wide hook only marks a git work tree or a
watched directory, and the baseline is not part of any turn. What an agent writes at start-up,
before its turn begins (Aider's histories, OpenCode's ``.gitignore`` in its config dir), is kept
out of the workspace or written beforehand by the harness: a rollback to the turn's start rightly
keeps it, and "exactly the tree before the turn" is then the same tree as the turn-start mark.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from agent_fixtures import agent_fixture, box_fixture  # noqa: F401 - the fixtures agent and box
from agent_harness import (
    AIDER_VENV,
    EDIT_AFTER,
    EDIT_BEFORE,
    NEW_TEXT,
    Agent,
    Sandbox,
    Turn,
    resume_argv,
    run_turn,
    turn_script,
)
from e2e_helpers import Daemon, cli_rollback, describe, run_ctl, snap_diff, snapshot
from model_server import Script

pytestmark = [pytest.mark.agents, pytest.mark.timeout(420)]

SCOPE = {
    "claude-code": ["--project"],
    "codex": ["--user"],
    "gemini": ["--project"],
    "opencode": ["--project"],
    "aider": ["--user"],
}
NOTICE = "rolled back since your previous turn"


def ctl_env(daemon: Daemon, box: Sandbox) -> dict[str, str]:
    """snapctl as the agent's user: the daemon's SNAPD_HOME, the sandbox's HOME and agent config dirs."""
    env = dict(daemon.env)
    env.update(box.env())
    env["PATH"] = f"{AIDER_VENV / 'bin'}:{env['PATH']}"  # aider's wrapper finds aider's interpreter here
    return env


def agent_marks(daemon: Daemon, ws: Path, agent: str) -> list[dict[str, Any]]:
    return [m for m in daemon.ctl_json("log", "--all", cwd=ws)["marks"] if m.get("agent") == agent]


def agents_session(agent: Agent, turn: Turn) -> str | None:
    """The session id the agent itself reports, where it prints one."""
    if agent.name == "claude-code":
        return str(json.loads(turn.stdout)["session_id"])
    if agent.name == "codex":
        found = re.search(r"session id: (\S+)", turn.stdout + turn.stderr)
        return found.group(1) if found else None
    return None


def test_real_agent_marks_its_turn_rolls_back_and_hears_of_it(
    agent: Agent, box: Sandbox, daemon: Daemon
) -> None:
    ws = box.ws.resolve()
    (ws / "edit.txt").write_text(EDIT_BEFORE)
    (ws / "gone.txt").write_text("bye\n")
    assert daemon.ctl_json("watch", ws)["workspace"] == str(ws)
    env = ctl_env(daemon, box)
    scope = SCOPE[agent.name] + ([str(ws)] if SCOPE[agent.name] == ["--project"] else [])
    cp = run_ctl(env, "integrate", agent.name, *scope, cwd=ws)
    assert cp.returncode == 0, describe(cp)
    box.extra_env["SNAPD_HOME"] = env["SNAPD_HOME"]
    box.extra_env["PATH"] = env["PATH"]
    if agent.name == "codex":
        box.extra_args.append("--dangerously-bypass-hook-trust")  # a test cannot trust hooks in Codex's UI
    argv = None
    if agent.name == "aider":  # aider runs through snapd's wrapper, with aider's own arguments
        argv = [str(box.home / ".local" / "bin" / "snapd-aider"), *agent.argv(box, "")[1:]]
    before = snapshot(ws)

    prompt = "Please make the changes of TURN-ONE."
    if argv:
        argv[-2] = prompt  # --message PROMPT edit.txt
    turn = run_turn(box, agent, prompt, turn_script(agent, ws, "TURN-ONE"), argv=argv)
    assert turn.returncode == 0 and not turn.timed_out, turn.describe()
    assert (ws / "new.txt").read_text() == NEW_TEXT and (ws / "edit.txt").read_text() == EDIT_AFTER
    assert not any(NOTICE in json.dumps(r["body"]) for r in turn.requests), (
        "a new session has nothing to be told"
    )

    marks = agent_marks(daemon, ws, agent.name)
    assert [m["label"] for m in marks[:2]] == ["turn-end", "turn-start"], marks  # newest first
    sessions = {m["session"] for m in marks}
    assert len(sessions) == 1 and all(sessions), marks
    own = agents_session(agent, turn)
    assert own is None or sessions == {own}, (own, marks)
    start = marks[1]

    code, reply = cli_rollback(daemon, ws, "--to", start["id"])
    assert code == 0, reply
    after = snapshot(ws)
    assert after == before, snap_diff(after, before)

    if agent.name == "aider":
        return  # no context channel: aider gets no notice (docs/integrations.md)
    turn2 = run_turn(
        box,
        agent,
        "TURN-TWO: go on.",
        Script("TURN-TWO", final="Finished TURN-TWO."),
        argv=resume_argv(agent, box, "TURN-TWO: go on."),
    )
    assert turn2.returncode == 0 and not turn2.timed_out, turn2.describe()
    told = [r for r in turn2.requests if NOTICE in json.dumps(r["body"])]
    assert told, turn2.describe()
    text = json.dumps(told[0]["body"])
    assert start["id"] in text and "new.txt" in text, text[-3000:]
    marks2 = agent_marks(daemon, ws, agent.name)
    assert {m["session"] for m in marks2} == sessions, marks2  # the same session went on
