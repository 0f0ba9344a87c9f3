"""Gemini CLI: ``BeforeAgent`` marks ``turn-start``, ``AfterAgent`` marks ``turn-end``.

Hooks live under ``hooks`` in ``~/.gemini/settings.json`` (``--project DIR``:
``DIR/.gemini/settings.json``), in Claude Code's layout, but their timeouts count
milliseconds. Gemini CLI parses a hook's whole stdout as JSON, so this hook always prints one
JSON object (``{}`` when there is nothing to say); the rollback notice goes in
``hookSpecificOutput.additionalContext`` of ``BeforeAgent``, which Gemini appends to the
prompt of that turn.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, ClassVar

from snapd.integrations.base import Context, Event, EventKind, Scope, context_reply
from snapd.integrations.jsonhooks import JsonHooksAgent


class Gemini(JsonHooksAgent):
    name = "gemini"
    title = "Gemini CLI"
    events: ClassVar[dict[str, EventKind]] = {"BeforeAgent": "start", "AfterAgent": "end"}

    def settings(self, scope: Scope, ctx: Context) -> Path:
        base = scope.project if scope.project is not None else ctx.home
        return base / ".gemini" / "settings.json"

    def entry(self, scope: Scope, ctx: Context, event: str) -> dict[str, Any]:
        return {
            "name": "snapd", "type": "command", "command": self.command(scope, ctx),
            "timeout": int(self.timeout_s(event) * 1000),
            "description": "snapd: mark the turn so it can be rolled back",
        }

    def reply(self, event: Event, notice: str) -> str:
        if event.kind == "start" and notice:
            return context_reply(event.name, notice)
        return json.dumps({})


AGENT = Gemini()
