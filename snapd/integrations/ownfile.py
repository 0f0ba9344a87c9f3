"""Integrations that are a whole file of snapd's own (OpenCode's plugin, Aider's wrapper).

Integrating writes the file, removing deletes it. The file carries a marker line, and a file
at that path without it is someone else's: it is refused, never overwritten or deleted.
"""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import ClassVar

from snapd.errors import IntegrationRefused
from snapd.integrations.base import Agent, Change, Context, Finding, Scope
from snapd.integrations.jsonhooks import command_findings


class OwnFileAgent(Agent):
    marker: ClassVar[str]  # a line only snapd's file holds
    what: ClassVar[str]  # "snapd's plugin"
    mode: ClassVar[int | None] = None  # the file's mode (None: 0644)

    def path(self, scope: Scope, ctx: Context) -> Path:
        raise NotImplementedError

    def text(self, scope: Scope, ctx: Context) -> str:
        raise NotImplementedError

    def files(self, scope: Scope, ctx: Context) -> list[Path]:
        return [self.path(scope, ctx)]

    def current(self, path: Path) -> str | None:
        """The file's text when it is snapd's, None when there is none; refused otherwise."""
        try:
            text = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return None
        except (OSError, UnicodeDecodeError) as exc:
            raise IntegrationRefused(f"{path} cannot be read: {exc}", path=str(path)) from None
        if self.marker not in text:
            raise IntegrationRefused(f"{path} is not {self.what}; move it away first", path=str(path))
        return text

    def install(self, scope: Scope, ctx: Context) -> list[Change]:
        path = self.path(scope, ctx)
        current = self.current(path)
        wanted = self.text(scope, ctx)
        if current == wanted:
            return [Change(path, "unchanged", self.what)]
        ctx.originals().write(path, wanted, clean=current is None, mode=self.mode)
        return [Change(path, "updated" if current is not None else "added", self.what)]

    def remove(self, scope: Scope, ctx: Context) -> list[Change]:
        path = self.path(scope, ctx)
        if self.current(path) is None:
            return [Change(path, "absent", self.what)]
        path.unlink()
        ctx.originals().gone(path)  # and the directories integrate made for it, when empty
        return [Change(path, "removed", self.what)]

    def check(self, scope: Scope, ctx: Context) -> list[Finding]:
        path = self.path(scope, ctx)
        current = self.current(path)
        if current is None:
            return [Finding(False, f"no {self.what} at {path}")]
        out = [Finding(True, f"{self.what} at {path}")]
        try:
            stale = current != self.text(scope, ctx)
        except IntegrationRefused as exc:
            return out + [Finding(False, exc.message)]
        if stale:
            out.append(Finding(False, f"{path} was written by another snapd or changed: re-run integrate"))
        return out + command_findings(self.command(scope, ctx))

    def holds_hooks(self, data: bytes) -> bool:
        return self.marker.encode("utf-8") in data

    def has_hooks(self, scope: Scope, ctx: Context) -> bool:
        try:
            return self.current(self.path(scope, ctx)) is not None
        except IntegrationRefused:
            return False

    def argv(self, scope: Scope, ctx: Context) -> list[str]:
        """The hook command as a list (the file runs it without a shell)."""
        return shlex.split(self.command(scope, ctx))
