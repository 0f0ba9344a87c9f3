"""Codex CLI: a ``UserPromptSubmit`` hook marks ``turn-start``; ``notify`` marks ``turn-end``;
an ``Interrupt`` hook (the user stopped the turn: Ctrl-C, Esc) marks ``turn-end`` flagged
interrupted, so ``log`` shows the turn as interrupted at once and the tree at that moment is a mark.

Codex keeps its settings in ``$CODEX_HOME/config.toml`` (default ``~/.codex``) and its hooks in
``hooks.json`` beside it, in Claude Code's layout. Two facts shape the integration:

- Hooks run only once the user trusted them (Codex records a hash per hook under
  ``[hooks.state."<hooks.json>:<event>:<group>:<index>"]`` in ``config.toml``) and are
  skipped without a word otherwise; ``--check`` detects that and says how to trust them.
- ``notify = [argv...]`` needs no trust: Codex runs it after every turn with the event as the
  last argument, ``{"type": "agent-turn-complete", "thread-id": ..., "cwd": ...}``. It is one
  program, so when the user already has a ``notify`` of their own snapd leaves it and marks
  ``turn-end`` from a ``Stop`` hook instead.

``config.toml`` is edited with tomlkit, which keeps the user's comments and layout.
``--project DIR`` writes ``DIR/.codex/hooks.json`` (``UserPromptSubmit`` and ``Stop``): Codex
reads a project's hooks only when the project is trusted too.
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from pathlib import Path
from typing import Any, ClassVar

from snapd.errors import IntegrationRefused
from snapd.integrations import jsonfile
from snapd.integrations.base import (
    BadEvent,
    Change,
    Context,
    Event,
    EventKind,
    Finding,
    Scope,
    context_reply,
    id_field,
    json_event,
    text_field,
)
from snapd.integrations.jsonhooks import JsonHooksAgent, command_findings

PROMPT, STOP, INTERRUPT = "UserPromptSubmit", "Stop", "Interrupt"
STATE_NAMES = {PROMPT: "user_prompt_submit", STOP: "stop", INTERRUPT: "interrupt"}
#: Codex caps an Interrupt hook's timeout at 3 s (and warns on every run about a longer one).
INTERRUPT_TIMEOUT_S = 3.0


class Codex(JsonHooksAgent):
    name = "codex"
    title = "Codex CLI"
    events: ClassVar[dict[str, EventKind]] = {PROMPT: "start", STOP: "end", INTERRUPT: "interrupt"}

    def timeout_s(self, event: str) -> float:
        return INTERRUPT_TIMEOUT_S if event == INTERRUPT else self.hook_timeout_s

    def home(self, ctx: Context) -> Path:
        configured = ctx.env.get("CODEX_HOME")
        return Path(configured) if configured else ctx.home / ".codex"

    def settings(self, scope: Scope, ctx: Context) -> Path:
        base = scope.project / ".codex" if scope.project is not None else self.home(ctx)
        return base / "hooks.json"

    def config_toml(self, ctx: Context) -> Path:
        return self.home(ctx) / "config.toml"

    def files(self, scope: Scope, ctx: Context) -> list[Path]:
        extra = [self.config_toml(ctx)] if scope.user else []
        return [self.settings(scope, ctx), *extra]

    def notify_argv(self, ctx: Context) -> list[str]:
        return [*ctx.snapctl, "hook", self.name]

    # -- config.toml ----------------------------------------------------------------------------

    def _load_toml(self, ctx: Context) -> Any:
        import tomlkit  # deferred: only integrate needs it, never the hook

        path = self.config_toml(ctx)
        try:
            text = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            text = ""
        except (OSError, UnicodeDecodeError) as exc:
            raise IntegrationRefused(f"{path} cannot be read: {exc}", path=str(path)) from None
        try:
            return tomlkit.parse(text)
        except tomlkit.exceptions.ParseError as exc:
            raise IntegrationRefused(
                f"{path} is not valid TOML ({exc}); fix it first", path=str(path)
            ) from None

    def _save_toml(self, ctx: Context, doc: Any, clean: bool) -> None:
        import tomlkit

        ctx.originals().write(self.config_toml(ctx), tomlkit.dumps(doc), clean)

    def _notify_owner(self, doc: Any) -> str:
        """"ours", "none" or "foreign": who holds ``notify``."""
        value = doc.get("notify")
        if value is None:
            return "none"
        if isinstance(value, list) and all(isinstance(v, str) for v in value):
            return "ours" if self.is_ours(shlex.join(str(v) for v in value)) else "foreign"
        return "foreign"

    # -- integrate ------------------------------------------------------------------------------

    def install(self, scope: Scope, ctx: Context) -> list[Change]:
        if scope.project is not None:
            return super().install(scope, ctx)
        toml = self._load_toml(ctx)
        owner = self._notify_owner(toml)
        cfg = self.config_toml(ctx)
        changes: list[Change] = []
        events = [PROMPT, INTERRUPT]
        if owner == "foreign":
            events.append(STOP)
            changes.append(
                Change(cfg, "unchanged", "your own notify program (turn-end comes from a Stop hook)")
            )
        else:
            wanted = self.notify_argv(ctx)
            current = toml.get("notify")
            if current is not None and list(current) == wanted:
                changes.append(Change(cfg, "unchanged", "snapd's notify (turn-end)"))
            else:
                toml["notify"] = wanted
                self._save_toml(ctx, toml, clean=owner == "none")
                action = "updated" if owner == "ours" else "added"
                changes.append(Change(cfg, action, "snapd's notify (turn-end)"))
        path = self.settings(scope, ctx)
        doc, text = jsonfile.read(path, self.name)
        clean = not self.holds_ours(doc)
        actions = {
            ev: jsonfile.put_hook(doc, ev, self.entry(scope, ctx, ev), self.is_ours, path) for ev in events
        }
        if STOP not in events and jsonfile.drop_hooks(doc, STOP, self.is_ours):
            actions[STOP] = "removed"
        if any(a != "unchanged" for a in actions.values()):
            ctx.originals().write(path, jsonfile.dumps(doc, text), clean)
        changes += [Change(path, a, f"snapd's {ev} hook") for ev, a in actions.items()]
        return changes

    def remove(self, scope: Scope, ctx: Context) -> list[Change]:
        changes = super().remove(scope, ctx)
        if scope.project is not None:
            return changes
        cfg = self.config_toml(ctx)
        if not cfg.exists():
            return changes
        toml = self._load_toml(ctx)
        if self._notify_owner(toml) == "ours":
            changes.append(Change(cfg, "removed", "snapd's notify"))
            originals = ctx.originals()
            if originals.give_back(cfg):  # as integrate found it, byte for byte
                return changes
            import tomlkit

            del toml["notify"]  # tomlkit keeps every other line as it was
            text = tomlkit.dumps(toml)
            if text.strip() or originals.before(cfg)[1] is not None:
                jsonfile.write_text(cfg, text)
                originals.forget(cfg)
            else:  # nothing but snapd's notify was in it: it goes
                cfg.unlink()
                originals.gone(cfg)
        else:
            changes.append(Change(cfg, "absent", "snapd's notify"))
        return changes

    def check(self, scope: Scope, ctx: Context) -> list[Finding]:
        path = self.settings(scope, ctx)
        doc = jsonfile.load(path, self.name)
        out: list[Finding] = []
        toml = self._load_toml(ctx)
        owner = self._notify_owner(toml) if scope.user else "foreign"
        if owner == "ours":
            command = shlex.join(str(v) for v in toml["notify"])
            out.append(Finding(True, f"notify in {self.config_toml(ctx)} marks turn-end: {command}"))
            out += command_findings(command)
        events = [PROMPT, INTERRUPT] if owner == "ours" else [PROMPT, STOP, INTERRUPT]
        features = toml.get("features")
        if isinstance(features, dict) and features.get("codex_hooks") is False:
            out.append(
                Finding(False, f"{self.config_toml(ctx)} sets features.codex_hooks = false: no hook runs")
            )
        states = _hook_states(toml)
        from snapd.integrations import codex_trust  # deferred: runs codex, only for --check

        asked = codex_trust.statuses(ctx, scope.project or ctx.home)
        if isinstance(asked, str):
            out.append(Finding(True, f"trust read from {self.config_toml(ctx)} ({asked}), which cannot tell "
                                     "a hook changed since it was trusted"))
        for ev in events:
            where = _position(doc, ev, self)
            if where is None:
                out.append(Finding(False, f"no snapd {ev} hook in {path}"))
                continue
            key = f"{path}:{STATE_NAMES[ev]}:{where[0]}:{where[1]}"
            if isinstance(asked, dict) and key in asked:
                trusted = asked[key] in codex_trust.TRUSTED
                source = f"Codex reports it {asked[key]}" + codex_trust.MEANING.get(asked[key], "")
            else:
                state = states.get(key)
                trusted = isinstance(state, dict) and bool(state.get("trusted_hash")) and (
                    state.get("enabled", True) is not False)
                source = "config.toml"
            if trusted:
                out.append(Finding(True, f"{ev} hook in {path} is trusted ({source})"))
            else:
                out.append(Finding(False,
                    f"{ev} hook in {path} is not trusted ({source}), so "
                    "Codex skips it without a word: start `codex`, open /hooks and trust it "
                    "(tests: codex --dangerously-bypass-hook-trust)"))
        return out

    def show(self, scope: Scope, ctx: Context) -> str:
        """What to add by hand. User-wide, ``turn-end`` comes from ``notify`` *or* a ``Stop``
        hook, never both (copied together, every turn would end twice): the Stop hook is shown
        apart, as the alternative for a user whose ``notify`` is their own."""
        if scope.project is not None:
            return super().show(scope, ctx)
        import json

        import tomlkit

        hooks_json = self.settings(scope, ctx)

        def block(events: list[str]) -> str:
            doc: dict[str, Any] = {}
            for ev in events:
                jsonfile.put_hook(doc, ev, self.entry(scope, ctx, ev), self.is_ours, Path("-"))
            return json.dumps(doc, indent=2) + "\n"

        return (
            f"# merge into {hooks_json}\n" + block([PROMPT, INTERRUPT])
            + f"# and in {self.config_toml(ctx)} (turn-end; needs no trust):\n"
            + tomlkit.dumps({"notify": self.notify_argv(ctx)})
            + "# only if notify is already a program of your own: leave it, skip the notify line above,\n"
            f"# and merge this Stop hook into {hooks_json} instead\n"
            "# (one of the two, never both: each ends the turn)\n"
            + "".join(f"# {line}\n" for line in block([STOP]).splitlines())
        )

    # -- the hook -------------------------------------------------------------------------------

    def parse(self, stdin: bytes, argv: Sequence[str]) -> Event:
        payload = next((a for a in reversed(argv) if a.lstrip().startswith("{")), None)
        if payload is None:
            return super().parse(stdin, argv)
        obj = json_event(payload.encode("utf-8", "surrogateescape"))
        kind = obj.get("type")
        if not isinstance(kind, str):
            raise BadEvent("the notify event has no 'type'")
        return Event(
            "end" if kind == "agent-turn-complete" else "other", kind,
            id_field(obj, "thread-id", "thread_id", "session_id"), text_field(obj, "cwd"), obj,
        )

    def reply(self, event: Event, notice: str) -> str:
        return context_reply(event.name, notice) if event.kind == "start" else ""


def _hook_states(toml: Any) -> dict[str, Any]:
    hooks = toml.get("hooks")
    state = hooks.get("state") if isinstance(hooks, dict) else None
    return dict(state) if isinstance(state, dict) else {}


def _position(doc: dict[str, Any], event: str, agent: Codex) -> tuple[int, int] | None:
    """(group, index) of snapd's hook under ``event``: how Codex keys its trust record."""
    hooks = doc.get("hooks")
    groups = hooks.get(event) if isinstance(hooks, dict) else None
    for g, group in enumerate(groups if isinstance(groups, list) else []):
        entries = group.get("hooks") if isinstance(group, dict) else None
        for i, h in enumerate(entries if isinstance(entries, list) else []):
            if isinstance(h, dict) and agent.is_ours(h.get("command")):
                return g, i
    return None


AGENT = Codex()
