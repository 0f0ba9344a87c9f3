"""Agents whose hooks live in a JSON settings file (Claude Code, Gemini CLI, Codex's
``hooks.json``): one prompt event marks ``turn-start``, one stop event marks ``turn-end`` (and
Codex's ``Interrupt`` marks ``turn-end`` flagged interrupted).

A subclass names the file per scope, the two events, and the entry's extra fields (timeout
units differ: Claude Code and Codex count seconds, Gemini CLI milliseconds).
"""

from __future__ import annotations

import json
import os
import shlex
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, ClassVar

from snapd.errors import IntegrationRefused
from snapd.integrations import jsonfile
from snapd.integrations.base import (
    Agent,
    Change,
    Context,
    Event,
    EventKind,
    Finding,
    Scope,
    named_event,
)


class JsonHooksAgent(Agent):
    #: the agent's event name -> what it means for the turn
    events: ClassVar[dict[str, EventKind]]

    def settings(self, scope: Scope, ctx: Context) -> Path:
        raise NotImplementedError

    def entry(self, scope: Scope, ctx: Context, event: str) -> dict[str, Any]:
        return {"type": "command", "command": self.command(scope, ctx), "timeout": int(self.timeout_s(event))}

    def files(self, scope: Scope, ctx: Context) -> list[Path]:
        return [self.settings(scope, ctx)]

    def install(self, scope: Scope, ctx: Context) -> list[Change]:
        path = self.settings(scope, ctx)
        doc, text = jsonfile.read(path, self.name)
        clean = not self.holds_ours(doc)
        actions = {
            ev: jsonfile.put_hook(doc, ev, self.entry(scope, ctx, ev), self.is_ours, path)
            for ev in self.events
        }
        if any(a != "unchanged" for a in actions.values()):
            ctx.originals().write(path, jsonfile.dumps(doc, text), clean)
        return [Change(path, a, f"snapd's {ev} hook") for ev, a in actions.items()]

    def holds_ours(self, doc: dict[str, Any]) -> bool:
        return any(jsonfile.our_hooks(doc, ev, self.is_ours) for ev in self.events)

    def holds_hooks(self, data: bytes) -> bool:
        try:
            doc = json.loads(data)
        except ValueError:
            return False
        return isinstance(doc, dict) and self.holds_ours(doc)

    def remove(self, scope: Scope, ctx: Context) -> list[Change]:
        path = self.settings(scope, ctx)
        if not path.exists():
            return [Change(path, "absent", "no settings file")]
        doc, text = jsonfile.read(path, self.name)
        counts = {ev: len(jsonfile.our_hooks(doc, ev, self.is_ours)) for ev in self.events}
        if any(counts.values()):
            remove_from(ctx, path, doc, text, lambda before: [
                jsonfile.drop_hooks(doc, ev, self.is_ours, before) for ev in self.events])
        return [
            Change(path, "removed" if n else "absent", f"snapd's {ev} hook") for ev, n in counts.items()
        ]

    def check(self, scope: Scope, ctx: Context) -> list[Finding]:
        path = self.settings(scope, ctx)
        doc = jsonfile.load(path, self.name)
        return self.hook_findings(doc, path) + self.runs(doc, path)

    def hook_findings(self, doc: dict[str, Any], path: Path) -> list[Finding]:
        """Whether ``doc`` (read from ``path``) holds snapd's hook for each event, and whether
        each hook's program can run."""
        out = []
        for ev in self.events:
            found = jsonfile.our_hooks(doc, ev, self.is_ours)
            if not found:
                out.append(Finding(False, f"no snapd {ev} hook in {path}"))
                continue
            command = str(found[0].get("command"))
            out.append(Finding(True, f"{ev} hook in {path}: {command}"))
            out += command_findings(command)
        return out

    def has_hooks(self, scope: Scope, ctx: Context) -> bool:
        try:
            doc = jsonfile.load(self.settings(scope, ctx), self.name)
        except IntegrationRefused:
            return False
        return any(jsonfile.our_hooks(doc, ev, self.is_ours) for ev in self.events)

    def runs(self, doc: dict[str, Any], path: Path) -> list[Finding]:
        """Agent-specific reasons the hooks would not run (a switch that disables them)."""
        return []

    def show(self, scope: Scope, ctx: Context) -> str:
        doc: dict[str, Any] = {}
        for ev in self.events:
            jsonfile.put_hook(doc, ev, self.entry(scope, ctx, ev), self.is_ours, Path("-"))
        return f"# merge into {self.settings(scope, ctx)}\n" + json.dumps(doc, indent=2) + "\n"

    def parse(self, stdin: bytes, argv: Sequence[str]) -> Event:
        return named_event(stdin, self.events)


def remove_from(
    ctx: Context, path: Path, doc: dict[str, Any], text: str, drop: Callable[[dict[str, Any] | None], object]
) -> None:
    """Take snapd's entries out of the JSON settings file ``path`` (read as ``doc`` from
    ``text``): the bytes integrate found, when the file holds exactly what it wrote
    (:mod:`.originals`); else ``drop(before)`` edits ``doc`` — ``before``: the document integrate
    found, when known, whose own empty containers stay — and it is written back in its own
    formatting, or deleted (with the directories integrate made) when nothing is left in it
    and integrate found no file there."""
    originals = ctx.originals()
    if originals.give_back(path):
        return
    known, found = originals.before(path)
    before: dict[str, Any] | None = None
    if found:
        try:
            parsed = json.loads(found)
            before = parsed if isinstance(parsed, dict) else None
        except ValueError:
            before = None
    drop(before)
    if doc or (known and found is not None):
        jsonfile.save(path, doc, text)
        originals.forget(path)
    else:  # nothing but snapd's hooks was in it: the file goes too
        path.unlink()
        originals.gone(path)


def command_findings(command: str) -> list[Finding]:
    """Whether the program a hook command names exists and can run."""
    try:
        program = shlex.split(command)[0]
    except (ValueError, IndexError):
        return [Finding(False, f"the hook command cannot be parsed: {command!r}")]
    if not os.path.isabs(program):
        return [Finding(False, f"the hook runs {program!r} by name, not by absolute path")]
    if not os.access(program, os.X_OK):
        return [Finding(False, f"{program} does not exist or cannot run: re-run `snapctl integrate`")]
    return []
