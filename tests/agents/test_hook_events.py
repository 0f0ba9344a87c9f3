"""The real hook events of each agent: what they carry, and that the context channel reaches the model.

``snapctl hook AGENT`` parses what the agents send; these are the shapes it must parse, captured
from the real programs (recording.py). Per agent the test checks that:

- every event snapd uses fires once in a one-turn run, through the documented channel (stdin JSON;
  argv JSON for Codex ``notify``; the plugin's arguments for OpenCode; nothing but the working
  directory for Aider's notification command);
- the session id is the same in every event of the run, the working directory is the workspace
  and the prompt event carries the prompt;
- what a prompt hook prints (``hookSpecificOutput.additionalContext``; a synthetic text part for
  OpenCode) reaches the model in that turn's requests: the channel of snapd's rollback notice;
- the committed record ``events/AGENT-EVENT.json`` still has every field the fresh one has
  (``SNAPD_RECORD_EVENTS=1`` rewrites them from this run).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from agent_fixtures import agent_fixture, box_fixture  # noqa: F401 - the fixtures agent and box
from agent_harness import EDIT_BEFORE, HERE, Agent, Sandbox, run_turn, turn_script
from hook_recorder import CONTEXT
from recording import EVENTS_DIR, install_recorders

pytestmark = [pytest.mark.agents, pytest.mark.timeout(300)]

# agent → event → (where the payload is, session id key, cwd key, prompt key); keys are dotted
# paths into the payload. The payload is stdin for command hooks, argv[0] for Codex's notify, the
# plugin's record for OpenCode; Aider's notification has none (its record's cwd is the workspace).
EVENTS: dict[str, dict[str, tuple[str, str | None, str | None, str | None]]] = {
    "claude-code": {
        "SessionStart": ("stdin", "session_id", "cwd", None),
        "UserPromptSubmit": ("stdin", "session_id", "cwd", "prompt"),
        "Stop": ("stdin", "session_id", "cwd", None),
        "SessionEnd": ("stdin", "session_id", "cwd", None),
    },
    "codex": {
        "SessionStart": ("stdin", "session_id", "cwd", None),
        "UserPromptSubmit": ("stdin", "session_id", "cwd", "prompt"),
        "Stop": ("stdin", "session_id", "cwd", None),
        "notify": ("argv", "thread-id", "cwd", "input-messages.0"),
    },
    "gemini": {
        "SessionStart": ("stdin", "session_id", "cwd", None),
        "BeforeAgent": ("stdin", "session_id", "cwd", "prompt"),
        "AfterAgent": ("stdin", "session_id", "cwd", "prompt"),
        "SessionEnd": ("stdin", "session_id", "cwd", None),
    },
    "opencode": {
        "chat.message": ("plugin", "input.sessionID", None, "output.parts.0.text"),
        "event-session.idle": ("plugin", "properties.sessionID", None, None),
    },
    "aider": {"notify": ("record", None, "cwd", None)},
}
PROMPT = "Please make the changes of TURN-ONE."


def read_records(out: Path, agent: str, event: str) -> list[dict[str, Any]]:
    """The records of one event: a file per call (command hooks), or lines of one file (OpenCode)."""
    lines = out / f"{agent}-{event}.jsonl"
    if lines.exists():
        return [json.loads(line) for line in lines.read_text().splitlines() if line]
    return [json.loads(p.read_text()) for p in sorted(out.glob(f"{agent}-{event}-*.json"))]


def payload_of(record: dict[str, Any], where: str) -> Any:
    if where == "stdin":
        return record["stdin"]
    if where == "argv":
        return record["argv"][0]
    return record


def lookup(value: Any, dotted: str) -> Any:
    for key in dotted.split("."):
        value = value[int(key)] if isinstance(value, list) else value[key]
    return value


def scrubbed(record: Any, box: Sandbox) -> Any:
    """The record with this run's directories replaced by fixed names, for a stable committed file."""
    text = (
        json.dumps(record, indent=2)
        .replace(str(box.top), "/SANDBOX")
        .replace(str(HERE), "/REPO/tests/agents")
    )
    return json.loads(text)


def test_hook_events_carry_session_cwd_prompt_and_context(agent: Agent, box: Sandbox, tmp_path: Path) -> None:
    out = tmp_path / "events"
    install_recorders(box, agent.name, out)
    (box.ws / "edit.txt").write_text(EDIT_BEFORE)
    (box.ws / "gone.txt").write_text("bye\n")
    turn = run_turn(box, agent, PROMPT, turn_script(agent, box.ws, "TURN-ONE"))
    assert turn.returncode == 0 and not turn.timed_out, turn.describe()

    sessions = set()
    for event, (where, session_key, cwd_key, prompt_key) in EVENTS[agent.name].items():
        records = read_records(out, agent.name, event)
        assert len(records) == 1, f"{agent.name} {event}: {len(records)} records in {sorted(os.listdir(out))}"
        payload = payload_of(records[0], where)
        if session_key:
            sessions.add(lookup(payload, session_key))
        if cwd_key:
            assert lookup(payload, cwd_key) == str(box.ws), payload
        if prompt_key:
            assert PROMPT in lookup(payload, prompt_key), payload
        committed = EVENTS_DIR / f"{agent.name}-{event}.json"
        if os.environ.get("SNAPD_RECORD_EVENTS"):
            committed.parent.mkdir(exist_ok=True)
            committed.write_text(json.dumps(scrubbed(records[0], box), indent=2) + "\n")
        known = json.loads(committed.read_text())
        missing = set(payload_of(known, where)) - set(payload)
        assert not missing, f"{agent.name} {event} no longer sends {sorted(missing)}: {payload}"
    assert len(sessions) <= 1, f"{agent.name}: several session ids in one run: {sessions}"
    assert len(sessions) == 1 or agent.name == "aider"

    # The prompt hook's context reached the model in this very turn (Aider has no prompt hook).
    reached = [r["n"] for r in turn.requests if CONTEXT in json.dumps(r["body"])]
    assert bool(reached) == (agent.name != "aider"), turn.describe()
