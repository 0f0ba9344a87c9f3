"""Claude Code: ``UserPromptSubmit`` marks ``turn-start``, ``Stop`` marks ``turn-end``.

User-wide hooks go in ``~/.claude/settings.json`` (``$CLAUDE_CONFIG_DIR/settings.json`` when
that is set); ``--project DIR`` writes ``DIR/.claude/settings.local.json``, the personal
settings file Claude Code keeps out of git, never the team's ``settings.json``. Each hook gets
Claude Code's event as JSON on stdin (``session_id``, ``cwd``, ``hook_event_name``,
``prompt``...). Whatever a ``UserPromptSubmit`` hook prints reaches the model, so the hook
prints only the rollback notice, as ``hookSpecificOutput.additionalContext``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

from snapd.integrations.base import Context, Event, EventKind, Finding, Scope, context_reply
from snapd.integrations.jsonhooks import JsonHooksAgent


class ClaudeCode(JsonHooksAgent):
    name = "claude-code"
    title = "Claude Code"
    events: ClassVar[dict[str, EventKind]] = {"UserPromptSubmit": "start", "Stop": "end"}

    def settings(self, scope: Scope, ctx: Context) -> Path:
        if scope.project is not None:
            return scope.project / ".claude" / "settings.local.json"
        configured = ctx.env.get("CLAUDE_CONFIG_DIR")
        return (Path(configured) if configured else ctx.home / ".claude") / "settings.json"

    def runs(self, doc: dict[str, Any], path: Path) -> list[Finding]:
        if doc.get("disableAllHooks") is True:
            return [Finding(False, f"{path} sets disableAllHooks: Claude Code runs no hook at all")]
        return []

    def reply(self, event: Event, notice: str) -> str:
        return context_reply(event.name, notice) if event.kind == "start" else ""


AGENT = ClaudeCode()
