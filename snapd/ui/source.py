"""The daemon as the timeline app sees it: the requests it makes and the events it follows.

Only the protocol (docs/protocol.md): every call opens its own :class:`Client` (a ZeroMQ socket
belongs to one thread, and the app makes its calls from worker threads, never from its event
loop), with the deadline ``snapctl`` gives the same command. The workspace is named once, as
every command names it (``-w PATH``, else the current directory); the first ``log`` reply
gives its root, and every later request names that root.

Changing the workspace is an :class:`Action`: a plan op and an apply op with the same fields.
The app shows the plan and applies with that plan's ``token`` only (a changed workspace is
``plan_changed``, whose details are the new plan to show again).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from snapd.cli.output import wire_bytes
from snapd.cli.request import DEADLINES, Env
from snapd.config import load_config
from snapd.ipc.client import Client
from snapd.ipc.events import Sequencer, Subscriber
from snapd.ipc.protocol import Op

LOG_LIMIT = 500  # marks the timeline loads (the newest); the rest: `snapctl log --all`
#: The events after which the timeline is read again.
LIVE = frozenset({"mark.created", "rollback.applied", "undo.applied", "revert.applied", "workspace.watched"})


@dataclass(frozen=True)
class Action:
    """A change of the workspace the app asks about: ``plan_op`` shows it, ``apply_op`` with
    the plan's token makes it; ``fields`` go with both."""

    what: str  # "rollback", "undo", "revert", "restore": the modal's title
    plan_op: Op
    apply_op: Op
    fields: dict[str, Any] = field(default_factory=dict)


class Source:
    """One daemon and one workspace of it. ``workspace``: a path inside it (None: the current
    directory's workspace); ``timeout_s`` replaces every request's own deadline (``--timeout``)."""

    def __init__(self, env: Env, workspace: str | None = None, timeout_s: float | None = None) -> None:
        self.env = env
        self.timeout_s = timeout_s
        self.where: dict[str, Any] = {}
        if workspace is not None:
            self.where["workspace"] = os.fsencode(os.path.abspath(workspace))
        else:
            self.where["cwd"] = os.fsencode(os.getcwd())
        self.root: bytes | None = None
        self._stop = threading.Event()

    def call(self, op: Op, deadline: str, **fields: Any) -> dict[str, Any]:
        """One request in the workspace (``status``, about the daemon, names none)."""
        config = load_config(self.env, lenient=True)
        with Client.from_config(config, DEADLINES[deadline]) as c:
            if self.timeout_s is not None:
                c.timeout_s = self.timeout_s
            return c.call(op, **fields, **({} if op == "status" else self.where))

    # -- reading -----------------------------------------------------------------------------

    def log(self, limit: int = LOG_LIMIT) -> dict[str, Any]:
        """The newest marks; the first call learns the workspace's root (:attr:`root`)."""
        reply = self.call("log", "log", limit=limit)
        if self.root is None:
            self.root = wire_bytes(reply["workspace"])
            self.where = {"workspace": self.root}
        return reply

    def files(self, span: tuple[str, str | None]) -> dict[str, Any]:
        """What changed between ``span``'s ends: the paths and their status, no contents."""
        return self.call("diff", "diff", stat=True, **_span_fields(span))

    def diff(self, span: tuple[str, str | None], path: str | dict[str, str]) -> dict[str, Any]:
        """One path's diff between ``span``'s ends (text, or the binary sizes)."""
        return self.call("diff", "diff", paths=[wire_bytes(path)], **_span_fields(span))

    def history(self, path: str | dict[str, str]) -> dict[str, Any]:
        return self.call("history", "history", path=wire_bytes(path))

    # -- changing ----------------------------------------------------------------------------

    def plan(self, action: Action) -> dict[str, Any]:
        return self.call(action.plan_op, action.what, **action.fields)

    def apply(self, action: Action, token: str) -> dict[str, Any]:
        return self.call(action.apply_op, action.what, token=token, **action.fields)

    # -- live --------------------------------------------------------------------------------

    def follow(self, tell: Callable[[dict[str, Any]], None], ready: threading.Event | None = None) -> None:
        """Call ``tell`` with each event that changes the timeline (``{"event": "gap"}`` when
        some were lost or the daemon restarted, ``{"event": "subscribed"}`` once subscribed: read
        it all again) until :meth:`stop`.
        Runs in a thread of its own; ``ready`` is set once the subscription is on its way."""
        status = self.call("status", "status")
        info = status.get("events") or {}
        if not info.get("endpoint"):
            return
        sequencer = Sequencer(info.get("instance"))
        topics = None if self.root is None else [self.root]
        with Subscriber(info["endpoint"], topics) as sub:
            sub.connect()
            # What happened between the first read and the subscription reaches no subscriber
            # (the protocol's late joiner): read again now that events are on their way.
            tell({"event": "subscribed"})
            if ready is not None:
                ready.set()
            while not self._stop.is_set():
                event = sub.receive(0.25)
                if event is None:
                    continue
                if sequencer.check(event):
                    tell({"event": "gap"})
                if event.get("event") in LIVE:
                    tell(event)

    def stop(self) -> None:
        self._stop.set()


def rollback(to: str, paths: list[str | dict[str, str]] | None = None) -> Action:
    fields: dict[str, Any] = {"to": to}
    if paths:
        fields["paths"] = [wire_bytes(p) for p in paths]
        return Action("restore", "rollback_plan", "rollback_apply", fields)
    return Action("rollback", "rollback_plan", "rollback_apply", fields)


def undo() -> Action:
    return Action("undo", "rollback_plan", "rollback_apply", {"undo": True})


def revert(turn: str) -> Action:
    return Action("revert", "revert_plan", "revert_apply", {"turn": turn})


def _span_fields(span: tuple[str, str | None]) -> dict[str, Any]:
    start, end = span
    return {"from": start} if end is None else {"from": start, "to": end}
