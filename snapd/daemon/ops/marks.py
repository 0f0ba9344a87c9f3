"""Ops on marks: take one (mark), list them (log), show one, pin and unpin."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from snapd.daemon import turns
from snapd.daemon.registry import Registry, relative_path
from snapd.daemon.wire import mark_json, wire_paths
from snapd.errors import CorruptObject, MissingObject, UsageError
from snapd.paths import encode_path
from snapd.store import damage, history, treediff
from snapd.store.refs import validate_label
from snapd.store.store import Store

LOG_LIMIT = 20  # marks in one page of `log` when the request gives no limit


class MarkOps:
    def __init__(self, store: Store, registry: Registry, marked: Callable[[], None] = lambda: None) -> None:
        """``marked``: told after each mark is committed (the on-mark pusher's wake: it must
        not block, the reply waits for it)."""
        self.store, self.registry, self.marked = store, registry, marked

    def op_mark(
        self,
        label: str,
        workspace: bytes | None = None,
        cwd: bytes | None = None,
        message: str | None = None,
        agent: str | None = None,
        session: str | None = None,
        register: bool = True,
        late_after_s: float | None = None,
        interrupted: bool = False,
        run: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        """A mark; ``register=False``: only in a workspace already watched. With a ``session``,
        the reply also says what happened since the session's previous mark (:mod:`.turns`).
        ``late_after_s``: the caller stops waiting after this long; a mark taken later (behind
        a baseline) is flagged ``late``. ``interrupted``: a ``turn-end`` the user's interrupt
        ended (the session's open turn is recorded as interrupted). ``run``: the command
        ``snapctl run`` wraps in a turn (``argv``; ``exit`` and ``signal`` once it ended), kept
        in the summary for ``log`` and ``show``."""
        validate_label(label)
        started = time.monotonic()
        ws, _ = self.registry.find(workspace, cwd, register=register)
        before = self.store.marks(ws.id) if session else []
        previous = turns.session_last(before, session) if session else None
        note = turns.interrupted_note(label, previous, interrupted)
        if late_after_s is not None and time.monotonic() - started > late_after_s:
            note["late"] = True
        if run is not None:
            note["run"] = run
        mark = ws.mark(label, message=message, agent=agent, session=session, note=note)
        self.marked()
        out = mark_json(mark, ws.root)
        if session:
            marks = [mark, *before]
            out["rollbacks"] = wire_paths(turns.rollbacks_between(marks, previous, mark))
            out["late_marks"] = turns.late_in_last_turn(marks, session, mark)
        return out

    def op_log(
        self,
        workspace: bytes | None = None,
        cwd: bytes | None = None,
        limit: int | None = None,
        agent: str | None = None,
        session: str | None = None,
        all: bool = False,
        before: str | None = None,
        path: bytes | None = None,
    ) -> dict[str, Any]:
        """One page of marks, newest first: ``limit`` of them (default ``LOG_LIMIT``; ``all``:
        no limit) older than the mark ``before`` names; ``more`` says how many follow. With
        ``path``, only the marks whose turn changed it (or anything under it)."""
        if limit is not None and limit < 1:
            raise UsageError(f"log: a limit must be at least 1, got {limit} (`all` lists every mark)")
        ws_id, root = self.registry.stored(workspace, cwd)
        # The evictions before the marks: a GC that commits between the two reads then shows
        # as a mark listed and not yet counted pruned, never as one both listed and counted
        # (the order it commits them in: the eviction rows and the marks' deletion together)
        evictions = self.store.evictions(ws_id)
        marks = self.store.marks(ws_id)
        changing = None
        if path is not None:
            rel = relative_path(root, path, cwd)
            changing = {m.id for m in history.marks_changing(self.store.load_node, marks, rel)}
        if before is not None:
            start = self.store.resolve(ws_id, before, session)
            marks = marks[next(i for i, m in enumerate(marks) if m.id == start.id) + 1 :]
        if agent is not None:
            marks = [m for m in marks if m.agent == agent]
        if session is not None:
            marks = [m for m in marks if m.session == session]
        if changing is not None:
            marks = [m for m in marks if m.id in changing]
        page = marks if all else marks[: limit or LOG_LIMIT]
        return {
            "workspace": str(root),
            "marks": [mark_json(m) for m in page],
            "more": len(marks) - len(page),
            "pruned": len(evictions),
            "pruned_newest": evictions[0]["created"] / 1e9 if evictions else None,
        }

    def op_show(
        self, mark: str, workspace: bytes | None = None, cwd: bytes | None = None, session: str | None = None
    ) -> dict[str, Any]:
        ws_id, root = self.registry.stored(workspace, cwd)
        m = self.store.resolve(ws_id, mark, session)
        prev = self.store.marks(ws_id)
        older = [p for p in prev if p.seq < m.seq]
        base = older[0].tree if older else None
        try:
            changes = [
                {"path": encode_path(d.path), "status": d.status}
                for d in treediff.diff(self.store.load_node, base, m.tree)
            ]
        except (CorruptObject, MissingObject) as exc:
            read = {f"mark {p.id} ({p.label})": p.tree for p in [m, *older[:1]]}
            raise damage.explain(self.store, exc, read, f"cannot list the changes of {m.id}") from exc
        return {**mark_json(m, root), "changes": changes[:1000], "changes_total": len(changes)}

    def op_pin(
        self, mark: str, workspace: bytes | None = None, cwd: bytes | None = None, session: str | None = None
    ) -> dict[str, Any]:
        return self._set_pin(mark, workspace, cwd, session, True)

    def op_unpin(
        self, mark: str, workspace: bytes | None = None, cwd: bytes | None = None, session: str | None = None
    ) -> dict[str, Any]:
        return self._set_pin(mark, workspace, cwd, session, False)

    def _set_pin(
        self, ref: str, workspace: bytes | None, cwd: bytes | None, session: str | None, pinned: bool
    ) -> dict[str, Any]:
        ws_id, root = self.registry.stored(workspace, cwd)
        m = self.store.resolve(ws_id, ref, session)
        self.store.set_pinned(m.id, pinned)
        return {"id": m.id, "label": m.label, "pinned": pinned, "workspace": str(root)}
