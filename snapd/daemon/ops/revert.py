"""Ops that revert changes, keeping what came after them: plan and apply (the rules:
docs/rollback.md, "Revert").

What is reverted is one of: the changes between two marks or times (``from``, ``to``; no
``to``: up to now), one turn (``turn``: its ``turn-start`` mark), or every turn of a session
(``session``, ``since``) — found by :mod:`snapd.rollback.spans`. The revert is a rollback to a
target made from the workspace as captured (:mod:`snapd.rollback.revert_target`), so it goes
through the rollback's own plan, token, pre-rollback mark and journal
(:mod:`snapd.rollback.live`). Each applied revert is announced as ``revert.applied``.
"""

from __future__ import annotations

from typing import Any

from snapd.capture.workspace import Workspace
from snapd.daemon.events import EventSink, emit, rollback_fields
from snapd.daemon.registry import Registry, relative_path
from snapd.daemon.wire import mark_json, wire_paths
from snapd.errors import PlanChanged, UsageError
from snapd.rollback import live, spans
from snapd.rollback.revert_target import RevertTarget
from snapd.rollback.running import Running
from snapd.store import history
from snapd.store.history import AtTime
from snapd.store.records import Mark
from snapd.store.store import Store

CONFLICTS = ("refuse", "markers")


class RevertOps:
    def __init__(self, store: Store, registry: Registry, events: EventSink, running: Running) -> None:
        """``running``: the table of long operations ``status`` shows (a revert is one)."""
        self.store, self.registry, self.events, self.running = store, registry, events, running

    def _target(
        self,
        ws: Workspace,
        cwd: bytes | None,
        refs: dict[str, str | None],
        turn: str | None,
        session: str | None,
        since: str | None,
        paths: list[bytes] | None,
        conflicts: str | None,
    ) -> tuple[RevertTarget, list[bytes]]:
        """The target of the revert the arguments ask for, and the paths it is limited to."""
        frm, to = refs.get("from"), refs.get("to")
        asked = [n for n, v in (("from", frm), ("turn", turn), ("session", session)) if v is not None]
        if len(asked) != 1:
            raise UsageError(
                "say what to revert: from (and to), turn, or session — one of them"
                + (f", not {' and '.join(asked)}" if asked else "")
            )
        if to is not None and frm is None:
            raise UsageError("to goes with from (a revert of the changes from one mark to another)")
        if since is not None and session is None:
            raise UsageError("since goes with session (the session's turns started after it)")
        if conflicts not in (None, *CONFLICTS):
            raise UsageError(f"conflicts must be one of {', '.join(CONFLICTS)}, not {conflicts!r}")
        only = [relative_path(ws.root, p, cwd) for p in paths or []]
        marks = self.store.marks(ws.id)
        times: dict[str, AtTime] = {}  # the spans' ends that are times, by their made-up mark's id
        if frm is not None:
            start, at = history.resolve(self.store, ws.id, frm)
            end, end_at = history.resolve(self.store, ws.id, to) if to is not None else (None, None)
            ends = ((start, at), (end, end_at))
            times.update((m.id, t) for m, t in ends if m is not None and t is not None)
            if end is not None and (start.created, start.seq) > (end.created, end.seq):
                raise UsageError(f"{frm} is newer than {to}: a revert goes from the older to the newer")
            parts = [spans.Part(start, end)]
            name = f"{start.id}..{end.id if end is not None else 'now'}"
        elif turn is not None:
            m = self.store.resolve(ws.id, turn)
            parts, name = spans.turn_parts(marks, m)[::-1], f"turn {m.id}"
        else:
            assert session is not None
            first = history.resolve(self.store, ws.id, since)[0] if since is not None else None
            parts = spans.session_spans(marks, session, first)
            name = f"session {session}" + (f" since {first.id}" if first is not None else "")
        target = RevertTarget(
            ws,
            parts,
            name=name,
            spans=[_span_json(p, times) for p in parts],
            markers=conflicts == "markers",
            only=only,
            sessions=spans.later_sessions(marks, parts),
        )
        return target, only

    def op_revert_plan(
        self,
        workspace: bytes | None = None,
        cwd: bytes | None = None,
        turn: str | None = None,
        session: str | None = None,
        since: str | None = None,
        paths: list[bytes] | None = None,
        conflicts: str | None = None,
        force: bool = False,
        **refs: str | None,
    ) -> dict[str, Any]:
        """``refs``: ``from`` and ``to``, ``from`` being a Python keyword."""
        ws, _ = self.registry.find(workspace, cwd)
        target, only = self._target(ws, cwd, refs, turn, session, since, paths, conflicts)
        with target:
            out: dict[str, Any] = wire_paths(target.reply(live.propose(ws, target, only, force)))
        return out

    def op_revert_apply(
        self,
        workspace: bytes | None = None,
        cwd: bytes | None = None,
        turn: str | None = None,
        session: str | None = None,
        since: str | None = None,
        paths: list[bytes] | None = None,
        conflicts: str | None = None,
        force: bool = False,
        token: str | None = None,
        **refs: str | None,
    ) -> dict[str, Any]:
        ws, _ = self.registry.find(workspace, cwd)
        target, only = self._target(ws, cwd, refs, turn, session, since, paths, conflicts)
        with target, self.running.one("revert", ws.root, ws.root) as tracker:
            try:
                done = live.execute(ws, target, only, force, token, tracker)
            except PlanChanged as exc:  # the new plan, as a revert's
                raise PlanChanged(exc.message, **wire_paths(target.reply(exc.details))) from exc
            result: dict[str, Any] = wire_paths(target.reply(done))
        fields = {**rollback_fields(result), "revert": result["revert"]["spans"]}
        emit(self.events, "revert.applied", ws.root, fields)
        return result


def _span_json(p: spans.Part, times: dict[str, AtTime]) -> dict[str, Any]:
    """A span on the wire: its ends as mark objects, or time objects (``to`` null: now), and
    the other sessions whose turns were open in it."""

    def end(m: Mark) -> dict[str, Any]:
        at = times.get(m.id) if m.kind == "time" else None
        return history.describe(at) if at is not None else mark_json(m)

    return {"from": end(p.start), "to": end(p.end) if p.end is not None else None, "others": list(p.others)}
