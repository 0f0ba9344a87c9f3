"""``snapctl hook AGENT``: the one command every agent's hooks run.

It reads the agent's event (stdin JSON, or a JSON argument for Codex's ``notify``), marks
``turn-start`` on the prompt event and ``turn-end`` on the stop/idle event (flagged
``interrupted`` on Codex's ``Interrupt``), tagged with the agent and its session id, and
prints what the agent's protocol expects: the rollback notice (:mod:`.notice`) on a prompt
event, nothing otherwise — Gemini CLI: always a JSON object.

Promises:

- It never exits non-zero: for most agents a failing hook blocks the prompt or retries it.
  Problems are warnings on stderr and are recorded for ``snapctl status`` (:mod:`.health`).
- It keeps inside the agent's hook timeout: the whole run has a budget (the timeout snapd
  wrote into the agent's configuration for that event less :data:`MARGIN_S` — a third of it
  when that is less, as for Codex's 3 s ``Interrupt`` hooks — or ``client_timeout_s`` when
  that is smaller), shared by its phases — connect, start the daemon, mark. A mark that cannot
  finish in time (a new workspace's first mark is its whole baseline) is left to the daemon,
  which records it when the baseline completes, flagged ``late``; the hook returns.
- With no daemon running it starts one (:mod:`.autostart`) unless ``auto_start = false``,
  and watches the process it started: one that exits without a daemon is reported at once,
  with its own error, not after the whole wait; a wait that runs out says how long it was.
- Where the directory's workspace would overlap watched workspaces below it (``snapctl watch
  src``, the agent at the repository's top), it marks those, and says once how to mark the
  whole repository instead; with none below, the refusal names the ways forward.
- Where a project has its own integration (``--project``), the user-wide hook stands down: the
  agent runs both, and each turn must be marked once.
- A user-wide integration marks only a git work tree or a directory already watched: an agent
  started in ``/tmp`` or ``~/Downloads`` must not make snapd capture it. It warns once per
  directory, saying how to watch it. (``--project`` hooks were written for their directory.)
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, BinaryIO

from snapd.config import Config, load_config, resolve_endpoint
from snapd.display import shown
from snapd.errors import DaemonUnavailable, NotFound, SnapdError, Timeout, WorkspaceRefused
from snapd.integrations import agent as find_agent
from snapd.integrations import health, notice
from snapd.integrations.base import Agent, BadEvent, Context, Event, Scope
from snapd.ipc.client import Client, probe_listener

MARGIN_S = 5.0  # the hook is done this long before the agent's own timeout (a third of a short one)
START_WAIT_S = 10.0  # at most this long (within the budget) for a daemon being started
LABELS = {"start": "turn-start", "end": "turn-end", "interrupt": "turn-end"}
USAGE = """usage: snapctl hook AGENT [--project] [EVENT-JSON]

What an agent's hooks run (`snapctl integrate AGENT` writes them): reads the agent's event
(JSON on stdin, or a JSON argument for Codex's notify), marks turn-start / turn-end, prints what
the agent's protocol expects, and always exits 0. AGENT: {agents}."""


class Run:
    """One hook call: its budget, its warnings, and what it did (for the health record)."""

    def __init__(self, integration: Agent, scope: Scope, config: Config, env: Mapping[str, str]) -> None:
        self.agent, self.scope, self.config, self.env = integration, scope, config, env
        self.started = time.monotonic()
        self.deadline = self.started
        self.limit(integration.hook_timeout_s)
        self.warnings: list[str] = []
        self.failure: str | None = None
        self.outcome = "nothing to mark"

    def limit(self, timeout_s: float) -> None:
        """Keep the call inside the agent's ``timeout_s`` for its hook (and ``client_timeout_s``)."""
        budget = timeout_s - min(MARGIN_S, timeout_s / 3)
        if self.config.client_timeout_s is not None:
            budget = min(budget, self.config.client_timeout_s)
        self.deadline = self.started + max(budget, 0.5)

    def remaining(self) -> float:
        return self.deadline - time.monotonic()

    def warn(self, text: str, *, failure: bool = True) -> None:
        self.warnings.append(text)
        if failure:
            self.failure = text

    def connect(self) -> str:
        """The endpoint of a daemon that listens, started first if need be."""
        endpoint = resolve_endpoint(self.config)
        if probe_listener(endpoint) is not False:
            return endpoint
        if not self.config.auto_start:
            raise DaemonUnavailable(
                f"no snapd daemon is running at {endpoint} and auto_start is off: start it with `snapd start`"
            )
        from snapd.integrations import autostart  # deferred: subprocess, only without a daemon

        launch = autostart.start(self.env, min(START_WAIT_S, max(self.remaining(), 0.1)))
        self.warn(f"no daemon was running: started one ({launch.how})", failure=False)
        began = time.monotonic()
        wait_until = min(self.deadline, began + START_WAIT_S)
        while True:
            endpoint = resolve_endpoint(self.config)
            if probe_listener(endpoint):
                return endpoint
            failure = launch.failure()
            if failure is not None:  # it exited without a daemon: say why now, not at the deadline
                if probe_listener(endpoint):  # another hook's start won the race ("already running")
                    return endpoint
                raise DaemonUnavailable(f"started a daemon ({launch.how}) but it could not start: {failure}")
            if time.monotonic() >= wait_until:
                break
            time.sleep(0.05)
        raise DaemonUnavailable(
            f"started a daemon ({launch.how}) but it did not answer within {time.monotonic() - began:.1f} s"
        )

    def mark(self, event: Event) -> list[dict[str, Any]]:
        """Mark the turn: in the workspace holding the event's directory, registered when need
        be; or, when that directory's would-be workspace overlaps watched ones below it (``snapctl
        watch src`` in a repository whose agent runs at its top), in those. The daemon's
        replies, one per workspace marked."""
        label = LABELS[event.kind]
        cwd = event.cwd or os.getcwd()
        if self.scope.user and self.agent.project_hooked(Path(cwd), Context(self.env, ())):
            self.outcome = "left to the project's own integration"
            return []
        register = not self.scope.user or in_git_work_tree(Path(cwd))
        endpoint = self.connect()
        timeout = max(self.remaining(), 0.2)
        fields: dict[str, Any] = {"agent": self.agent.name, "cwd": os.fsencode(cwd), "register": register}
        if event.session:
            fields["session"] = event.session
        if event.kind == "interrupt":
            fields["interrupted"] = True
        with Client(endpoint, timeout, self.config.request_max_bytes) as client:
            try:
                reply = client.call("mark", label=label, late_after_s=max(timeout - 1.5, 0.1), **fields)
            except Timeout:
                self.late(label, cwd, timeout)
                return []
            except NotFound:
                if register:
                    raise
                self.outcome = "not a git work tree or watched: nothing marked"
                if health.first_warning(self.config.locations.hooks_dir, self.agent.name, cwd):
                    self.warn(
                        f"not marking {cwd}: it is neither a git work tree nor watched, and a user-wide "
                        f"integration marks only those. To keep its history: snapctl watch {cwd}",
                        failure=False,
                    )
                return []
            except WorkspaceRefused as exc:
                return self.mark_below(client, label, cwd, fields, exc)
        self.outcome = f"{label} {reply.get('id')}"
        return [reply]

    def late(self, label: str, where: str, timeout: float) -> None:
        self.warn(
            f"{label} in {where} did not finish within the hook's {timeout:.0f} s (a new workspace's "
            "first capture); snapd records it when that completes, flagged late"
        )
        self.outcome = f"{label} late"

    def mark_below(
        self, client: Client, label: str, cwd: str, fields: dict[str, Any], refused: WorkspaceRefused
    ) -> list[dict[str, Any]]:
        """``cwd``'s workspace was refused: mark the watched workspaces below ``cwd`` instead
        (the user chose to keep those; the agent's edits there are theirs), and name the way
        to mark the whole repository. None below: the refusal, with the way forward."""
        here = Path(cwd).resolve()
        top = git_top(here) or here
        spaces = client.call("status", timeout_s=max(self.remaining(), 0.2)).get("workspaces", [])
        known = [(Path(w["root"]), bool(w.get("watching"))) for w in spaces if isinstance(w.get("root"), str)]
        inside = sorted(r for r, _ in known if r != top and top in r.parents)
        below = sorted(r for r, watching in known if watching and r in inside and here in r.parents)
        # The home directory (a dotfiles repository) or / is refused for itself, not for what is
        # below: an agent started there must not mark every project the user watches.
        never = top == Path("/") or top == Context(self.env, ()).home.resolve()
        forward = "" if never or not inside else (
            f"to mark all of {top} instead: `snapctl forget {' '.join(map(str, inside))}` (their history "
            f"goes) and the next turn registers {top}"
        )
        if never or not below:
            where = f"start the agent inside {_some(inside)}" + (f", or {forward}" if forward else "")
            raise WorkspaceRefused(f"not marking {cwd}: {refused.message}" + (f"; {where}" if inside else ""))
        replies, ids = [], []
        for root in below:
            ask = {**fields, "workspace": os.fsencode(root), "register": False}
            ask.pop("cwd")
            try:
                reply = client.call("mark", label=label, timeout_s=max(self.remaining(), 0.2),
                                    late_after_s=max(self.remaining() - 1.5, 0.1), **ask)
            except Timeout:
                self.late(label, str(root), max(self.remaining(), 0.2))
                continue
            replies.append(reply)
            ids.append(str(reply.get("id")))
        self.outcome = f"{label} {' '.join(ids)} in the watched workspaces below {cwd}"
        if health.first_warning(self.config.locations.hooks_dir, self.agent.name, cwd):
            self.warn(
                f"{cwd} is not a workspace of its own ({refused.message}): marking the watched "
                f"workspace{'s' if len(below) > 1 else ''} below it, {', '.join(map(str, below))}; {forward}",
                failure=False,
            )
        return replies


def _some(paths: Sequence[Path], most: int = 3) -> str:
    shown_paths = " or ".join(map(str, paths[:most]))
    return shown_paths + (f" (or {len(paths) - most} more)" if len(paths) > most else "")


def git_top(where: Path) -> Path | None:
    """The directory holding the ``.git`` nearest above real path ``where`` (its work tree's
    top, found by looking, as :func:`in_git_work_tree`)."""
    return next((p for p in (where, *where.parents) if (p / ".git").exists()), None)


def in_git_work_tree(where: Path) -> bool:
    """Whether ``where`` is inside a git work tree (a ``.git`` directory or file above it).
    Found by looking, not by running git: this runs on every prompt."""
    try:
        here = where.resolve()
    except OSError:
        return False
    return git_top(here) is not None


def _payload(args: Sequence[str], stdin: BinaryIO) -> bytes:
    """The event: a JSON argument (Codex's notify), else stdin (never a terminal's)."""
    for a in reversed(args):
        if a.lstrip().startswith("{"):
            return a.encode("utf-8", "surrogateescape")
    try:
        if os.isatty(stdin.fileno()):
            return b""
    except (OSError, ValueError):
        pass
    return stdin.read()


def run(args: Sequence[str], env: Mapping[str, str], stdin: BinaryIO) -> tuple[str, list[str]]:
    """Handle one hook call: (what to print on stdout, warnings for stderr). Never raises."""
    name = args[0] if args else ""
    try:
        integration = find_agent(name)
    except SnapdError as exc:
        return "", [exc.message]
    scope = Scope(Path.cwd()) if "--project" in args[1:] else Scope()
    event = Event("other", "")
    warnings: list[str] = []
    text = ""
    try:
        config = load_config(env, lenient=True)
    except SnapdError as exc:
        return integration.reply(event, ""), [exc.message]
    state = Run(integration, scope, config, env)
    for warning in config.warnings:  # a broken setting or a misspelled SNAPD_* name: said, not fatal
        state.warn(warning, failure=False)
    try:
        event = integration.parse(_payload(args[1:], stdin), args[1:])
        state.limit(integration.timeout_s(event.name))
        if event.kind in LABELS:
            replies = state.mark(event)
            if event.kind == "start":
                text = "\n".join(t for t in map(notice.render, replies) if t)
    except BadEvent as exc:
        state.warn(str(exc))
    except SnapdError as exc:
        state.warn(exc.message)
    except Exception as exc:  # a bug: still never fail the agent's turn
        import traceback

        state.warn(f"internal error: {exc!r}")
        warnings.append(traceback.format_exc().rstrip())
    try:
        call = {"event": event.name or event.kind, "session": event.session, "cwd": event.cwd,
                "outcome": state.outcome if state.failure is None else "failed"}
        health.record(config.locations.hooks_dir, integration.name, call, state.failure)
    except (OSError, SnapdError) as exc:
        warnings.append(f"cannot record this call for `snapctl status`: {exc}")
    return integration.reply(event, text), state.warnings + warnings


def main(args: Sequence[str], env: Mapping[str, str]) -> int:
    """``snapctl hook AGENT [--project] [EVENT-JSON]``; always exits 0."""
    if not args or args[0] in ("-h", "--help"):
        from snapd.integrations import AGENTS

        print(USAGE.format(agents=", ".join(AGENTS)))
        return 0
    out, warnings = run(args, env, sys.stdin.buffer)
    for w in warnings:
        for line in w.splitlines():
            print(f"snapd: {shown(line)}", file=sys.stderr)
    if out:
        sys.stdout.write(out if out.endswith("\n") else out + "\n")
        sys.stdout.flush()
    return 0
