"""What every agent integration provides, and the helpers they share.

An :class:`Agent` answers five questions: which files hold its hooks (per scope), how to put
snapd's entries in and take exactly them out again, whether they are there and will run, what
a user would paste by hand (``--print``), and — at hook time — what event arrived and what the
agent expects on stdout in return.

snapd's own entries are recognised by their command, ``<snapctl> hook AGENT``, whatever the
path of the snapctl that wrote them: a reinstalled snapd updates its entries instead of adding
a second set, and ``--remove`` takes out entries an older installation wrote.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Literal, NamedTuple

from snapd.errors import SnapdError, UsageError

if TYPE_CHECKING:
    from snapd.integrations.originals import Originals

EventKind = Literal["start", "end", "interrupt", "other"]


class Scope(NamedTuple):
    """Where an integration applies: every project of the user (``project is None``) or one."""

    project: Path | None = None

    @property
    def user(self) -> bool:
        return self.project is None

    def describe(self) -> str:
        return "user-wide" if self.project is None else f"for {self.project}"


class Context(NamedTuple):
    """What integrate and check need from outside: the environment (HOME, the agents' own
    variables such as CODEX_HOME, PATH) and the snapctl command hooks run."""

    env: Mapping[str, str]
    snapctl: tuple[str, ...]

    @property
    def home(self) -> Path:
        return Path(self.env.get("HOME") or os.path.expanduser("~"))

    def originals(self) -> Originals:
        """Where integrate records the files it found (:mod:`.originals`): the state directory."""
        from snapd.config import load_config
        from snapd.integrations.originals import Originals

        try:
            return Originals(load_config(self.env, lenient=True).locations.state_dir / "integrations")
        except SnapdError:
            return Originals(None)

    def config_home(self) -> Path:
        value = self.env.get("XDG_CONFIG_HOME", "")
        return Path(value) if os.path.isabs(value) else self.home / ".config"


class Change(NamedTuple):
    """One thing ``integrate`` did (or found already done) to one file."""

    path: Path
    action: str  # added, updated, removed, unchanged or absent
    what: str

    def line(self) -> str:
        return f"{self.action} {self.what} in {self.path}"


class Finding(NamedTuple):
    """One line of ``integrate --check``: ``ok`` False means the hooks will not (all) run; a
    ``warning`` (``ok`` True) is worth fixing but does not stop them."""

    ok: bool
    text: str
    warning: bool = False

    def label(self) -> str:
        return "warning" if self.warning else ("ok" if self.ok else "NOT OK")


class Event(NamedTuple):
    """An agent's event as the hook sees it: a turn starts, ends, or something else."""

    kind: EventKind
    name: str  # the agent's own name for it (UserPromptSubmit, session.idle...)
    session: str | None = None
    cwd: str | None = None
    raw: Mapping[str, Any] | None = None  # the whole event as the agent sent it


class BadEvent(ValueError):
    """The event the agent passed cannot be read (the hook warns and marks nothing)."""


class Agent:
    """Base of every integration; subclasses fill in the class attributes and methods."""

    name: ClassVar[str]
    title: ClassVar[str]
    #: The per-hook timeout snapd writes into the agent's configuration (seconds); the hook
    #: keeps its own work inside it (:data:`snapd.integrations.hook.MARGIN_S`).
    hook_timeout_s: ClassVar[float] = 30.0
    supports_project: ClassVar[bool] = True

    def timeout_s(self, event: str) -> float:
        """The timeout snapd writes for the hook of ``event`` (the agent's own name for it), and
        so the budget of a hook call for it: :attr:`hook_timeout_s` unless the agent caps it."""
        return self.hook_timeout_s

    def files(self, scope: Scope, ctx: Context) -> list[Path]:
        raise NotImplementedError

    def install(self, scope: Scope, ctx: Context) -> list[Change]:
        raise NotImplementedError

    def remove(self, scope: Scope, ctx: Context) -> list[Change]:
        raise NotImplementedError

    def check(self, scope: Scope, ctx: Context) -> list[Finding]:
        raise NotImplementedError

    def findings(self, scope: Scope, ctx: Context) -> list[Finding]:
        """What ``--check`` reports: the agent's own :meth:`check`, then the rules every agent
        shares (:meth:`twice`)."""
        return self.check(scope, ctx) + self.twice(scope, ctx)

    def twice(self, scope: Scope, ctx: Context) -> list[Finding]:
        """A project integrated while the user-wide hooks are there too: the agent runs both,
        and the user-wide hook stands down there (:meth:`project_hooked`), so every turn is
        marked once and both run — but one of the two is redundant: a warning, for every agent
        alike, never a failure."""
        if scope.project is None or not self.supports_project or not self.has_hooks(Scope(), ctx):
            return []
        user = self.files(Scope(), ctx)[0]
        return [Finding(True, f"snapd's hooks are also in {user} (user-wide): the agent runs both, and the "
                              "user-wide one stands down here so that no turn is marked twice; keep one "
                              f"(`snapctl integrate {self.name} --remove`)", warning=True)]

    def show(self, scope: Scope, ctx: Context) -> str:
        raise NotImplementedError

    def parse(self, stdin: bytes, argv: Sequence[str]) -> Event:
        raise NotImplementedError

    def reply(self, event: Event, notice: str) -> str:
        """What to print on stdout for ``event`` ("" for nothing); ``notice`` may be ""."""
        return ""

    def command(self, scope: Scope, ctx: Context) -> str:
        """The hook command written into the agent's configuration, as one shell string."""
        extra = ["--project"] if scope.project is not None else []
        return shlex.join([*ctx.snapctl, "hook", self.name, *extra])

    def is_ours(self, command: object) -> bool:
        """Whether a configured command is one of snapd's hooks for this agent."""
        return isinstance(command, str) and ours_pattern(self.name).search(command) is not None

    def project_hooked(self, where: Path, ctx: Context) -> bool:
        """Whether a ``--project`` integration covers ``where``: snapd's hooks in the project
        settings of ``where`` or of a directory above it, up to its git work tree's top (or the
        home directory). The user-wide hook then stands down, or the agent, running both, would
        mark each turn twice (and every second ``turn-start`` would look like an interrupt)."""
        if not self.supports_project:
            return False
        user = self.files(Scope(), ctx)
        for d in (where, *where.parents):
            found = [p for p in self.files(Scope(d), ctx) if p not in user and p.is_file()]
            if found and self.has_hooks(Scope(d), ctx):
                return True
            if d == ctx.home or (d / ".git").exists():
                return False
        return False

    def has_hooks(self, scope: Scope, ctx: Context) -> bool:
        """Whether snapd's hooks are in ``scope``'s configuration (cheap: runs on every prompt)."""
        return False

    def holds_hooks(self, data: bytes) -> bool:
        """Whether a project settings file holding ``data`` holds snapd's hooks (an earlier
        version of it: :mod:`.remerge`)."""
        return False

    def scope_check(self, scope: Scope) -> None:
        if scope.project is not None and not self.supports_project:
            raise UsageError(f"{self.title} has no per-project hook configuration: integrate it with --user")


def ours_pattern(agent: str) -> re.Pattern[str]:
    quote = "['\"]"
    return re.compile(rf"(?:^|[/\s'\"])(?:snapctl|-m snapd){quote}? hook {re.escape(agent)}(?:\s|$|{quote})")


def snapctl_argv() -> tuple[str, ...]:
    """This installation's snapctl, by absolute path: the console script beside the running
    interpreter, else the interpreter running ``-m snapd`` (never a ``snapctl`` found on PATH,
    which may be Ubuntu's snap helper)."""
    script = Path(sys.executable).parent / "snapctl"
    if script.is_file() and os.access(script, os.X_OK):
        return (str(script),)
    return (sys.executable, "-m", "snapd")


def json_event(stdin: bytes) -> dict[str, Any]:
    """The JSON object an agent wrote on the hook's stdin."""
    try:
        obj = json.loads(stdin.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise BadEvent(f"the event on stdin is not JSON: {exc}") from None
    if not isinstance(obj, dict):
        raise BadEvent("the event on stdin is not a JSON object")
    return obj


def text_field(obj: Mapping[str, Any], *names: str) -> str | None:
    """The first of ``names`` that holds a non-empty string."""
    for name in names:
        value = obj.get(name)
        if isinstance(value, str) and value:
            return value
    return None


def id_field(obj: Mapping[str, Any], *names: str) -> str | None:
    """The first of ``names`` that holds an id: a non-empty string, or an integer as its decimal
    string (an agent, or a wrapper around one, may number its sessions)."""
    for name in names:
        value = obj.get(name)
        if isinstance(value, int) and not isinstance(value, bool):
            return str(value)
        if isinstance(value, str) and value:
            return value
    return None


def named_event(stdin: bytes, events: Mapping[str, EventKind]) -> Event:
    """The event in a stdin JSON object that names itself in ``hook_event_name`` (Claude Code's
    shape, which Codex, Gemini CLI and snapd's own OpenCode plugin and Aider wrapper share)."""
    obj = json_event(stdin)
    name = text_field(obj, "hook_event_name") or ""
    return Event(events.get(name, "other"), name, id_field(obj, "session_id"), text_field(obj, "cwd"), obj)


def context_reply(event_name: str, notice: str) -> str:
    """The ``hookSpecificOutput.additionalContext`` reply Claude Code, Codex and Gemini CLI
    read from a prompt hook ("" when there is nothing to tell)."""
    if not notice:
        return ""
    return json.dumps({"hookSpecificOutput": {"hookEventName": event_name, "additionalContext": notice}})
