"""Wiring each agent's own hook mechanism to ``hook_recorder.py``: the real event payloads, captured.

What ``snapctl hook`` must parse is whatever the agents really send, so the agents tier records it:
each agent's hooks are configured, by hand and the way its documentation says, to run the recorder
(OpenCode's plugin writes its records itself), one turn runs, and the records land in a directory.
``tests/agents/events/`` holds one committed record per agent and event; the test compares the
shapes of fresh records with them, and ``SNAPD_RECORD_EVENTS=1`` rewrites them.

The mechanisms:

- Claude Code: ``hooks`` in ``$CLAUDE_CONFIG_DIR/settings.json`` (command hooks, stdin JSON);
- Codex: ``notify`` in ``config.toml`` (argv JSON) and ``hooks.json`` next to it (stdin JSON), run
  without persisted trust by ``--dangerously-bypass-hook-trust``;
- Gemini CLI: ``hooks`` in ``~/.gemini/settings.json`` (stdin JSON, stdout JSON only, timeouts in ms);
- OpenCode: a plugin ``.opencode/plugin/recorder.js`` (``chat.message`` and every ``event``);
- Aider: ``--notifications-command`` (a shell command, no payload).
"""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path
from typing import Any

from agent_harness import HERE, Sandbox
from hook_recorder import CONTEXT

RECORDER = HERE / "hook_recorder.py"
EVENTS_DIR = HERE / "events"
CLAUDE_EVENTS = ("SessionStart", "UserPromptSubmit", "Stop", "SessionEnd")
CODEX_EVENTS = ("SessionStart", "UserPromptSubmit", "Stop")
GEMINI_EVENTS = ("SessionStart", "BeforeAgent", "AfterAgent", "SessionEnd")


def recorder_command(out: Path, agent: str, event: str) -> list[str]:
    return [sys.executable, str(RECORDER), str(out), agent, event]


def _command_hooks(out: Path, agent: str, events: tuple[str, ...], timeout: int) -> dict[str, Any]:
    """The hooks table Claude Code, Codex and Gemini share: event → matcher groups → commands."""
    return {
        event: [
            {
                "hooks": [
                    {
                        "type": "command",
                        "command": shlex.join(recorder_command(out, agent, event)),
                        "timeout": timeout,
                    }
                ]
            }
        ]
        for event in events
    }


def _merge_json(path: Path, extra: dict[str, Any]) -> None:
    data = json.loads(path.read_text()) if path.exists() else {}
    data.update(extra)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2) + "\n")


OPENCODE_PLUGIN = """\
// Records what OpenCode hands a plugin: chat.message's input and output, and every event.
import { appendFileSync, mkdirSync } from "node:fs";

const OUT = %(out)s;
const CONTEXT = %(context)s;

function record(name, value) {
  mkdirSync(OUT, { recursive: true });
  const seen = new WeakSet();
  const text = JSON.stringify(value, (k, v) => {
    if (typeof v === "object" && v !== null) { if (seen.has(v)) return "[circular]"; seen.add(v); }
    return typeof v === "function" ? "[function]" : v;
  });
  appendFileSync(`${OUT}/opencode-${name}.jsonl`, text + "\\n");
}

export const Recorder = async ({ directory, worktree }) => {
  record("plugin-init", { directory, worktree });
  return {
    "chat.message": async (input, output) => {
      record("chat.message", { input, output });
      const first = output.parts[0];
      output.parts.push({ ...first, id: `${first.id}z`, text: CONTEXT, synthetic: true });
    },
    event: async ({ event }) => { record(`event-${event.type}`, event); },
  };
};
"""


def install_recorders(box: Sandbox, agent: str, out: Path) -> None:
    """Configure ``agent``'s hooks in ``box`` to record into ``out``."""
    if agent == "claude-code":
        _merge_json(
            box.home / ".claude" / "settings.json", {"hooks": _command_hooks(out, agent, CLAUDE_EVENTS, 30)}
        )
    elif agent == "codex":
        config = box.home / ".codex" / "config.toml"
        notify = json.dumps(recorder_command(out, agent, "notify"))  # a JSON array is a TOML array
        config.write_text(f"notify = {notify}\n" + config.read_text())
        _merge_json(
            box.home / ".codex" / "hooks.json", {"hooks": _command_hooks(out, agent, CODEX_EVENTS, 30)}
        )
        box.extra_args.append("--dangerously-bypass-hook-trust")
    elif agent == "gemini":
        _merge_json(
            box.home / ".gemini" / "settings.json",
            {"hooks": _command_hooks(out, agent, GEMINI_EVENTS, 30_000)},
        )
    elif agent == "opencode":
        plugin = box.ws / ".opencode" / "plugin" / "recorder.js"
        plugin.parent.mkdir(parents=True, exist_ok=True)
        plugin.write_text(OPENCODE_PLUGIN % {"out": json.dumps(str(out)), "context": json.dumps(CONTEXT)})
    elif agent == "aider":
        box.extra_args += [
            "--notifications",
            "--notifications-command",
            shlex.join(recorder_command(out, agent, "notify")),
        ]
    else:
        raise ValueError(f"no hook mechanism known for {agent}")
