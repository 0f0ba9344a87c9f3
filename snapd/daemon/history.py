"""The daemon's side of history: the ``history`` op's reply, time targets in replies, and the
marks of ``log --path``. The rules themselves live in :mod:`snapd.store.history`; this module
turns them into the wire form docs/protocol.md specifies ("history", "Time references").

Invariant: every time in a reply is given twice, as seconds (``time``, a float, for people
and scripts) and as nanoseconds (``time_ns``, exact: what a client turns back into a time
reference with ``@…Z`` to name that very version).
"""

from __future__ import annotations

from typing import Any

from snapd import timeref
from snapd.config import Retention
from snapd.paths import decode_path, encode_path
from snapd.store import history
from snapd.store.history import AtTime
from snapd.store.records import Mark
from snapd.store.store import Store


def _mark_ref(m: Mark | None) -> dict[str, Any] | None:
    if m is None:
        return None
    return {"id": m.id, "label": m.label, "kind": m.kind, "created": m.created / 1e9}


def _first_status(
    store: Store, marks_oldest: list[Mark], rel: bytes, step: history.Step, pruned: int | None
) -> str:
    """The oldest version's status: ``created`` only when that is known — no version was
    pruned, or a mark taken since the pruning point and before it lacks the path; else it is
    ``oldest_kept`` (the path may well have existed before, in versions retention deleted)."""
    if step.status != "created" or pruned is None:
        return step.status
    for m in marks_oldest:
        if pruned <= m.created <= step.time and history.entry_in(store, m, rel) is None:
            return "created"
    return "oldest_kept"


def history_reply(store: Store, ws: int, root: str, rel: bytes, policy: Retention) -> dict[str, Any]:
    """Every recorded change of ``rel``, newest first, with the marks around each."""
    marks_oldest = list(reversed(store.marks(ws)))
    pruned = history.pruned_before(store, ws)
    versions = []
    steps = history.file_steps(store, ws, rel)
    first = _first_status(store, marks_oldest, rel, steps[0], pruned) if steps else None
    for k, step in reversed(list(enumerate(steps))):
        holder = history.holding_mark(marks_oldest, step.time)
        in_mark = holder is not None and history.entry_in(store, holder, rel) == step.entry
        after = next((m for m in reversed(marks_oldest) if m.created < step.time), None)
        owners = history.open_turns(marks_oldest, step.time)
        if not owners and holder is not None and holder.session:
            owners = [(holder.session, holder.agent)]
        e = step.entry
        versions.append(
            {
                "time": step.time / 1e9,
                "time_ns": step.time,
                "ref": timeref.wire(step.time),
                "status": first if k == 0 and first is not None else step.status,
                "kind": e.kind if e else None,
                "mode": e.mode if e else None,
                "size": e.size if e and e.kind != "dir" else None,
                "mark": _mark_ref(holder),
                "in_mark": in_mark,
                "after": _mark_ref(after),
                "sessions": [{"session": s, "agent": a} for s, a in owners],
                "via": encode_path(step.via) if step.via is not None else None,
                "renamed_from": encode_path(step.moved) if step.moved is not None and e else None,
                "renamed_to": encode_path(step.moved) if step.moved is not None and not e else None,
            }
        )
    return {
        "workspace": root,
        "path": encode_path(rel),
        "versions": versions,
        "pruned_before": pruned / 1e9 if pruned is not None else None,
        "pruned_before_ns": pruned,
        "retention_days": policy.max_age_days,
        "marks_pruned": len(store.evictions(ws)),
    }


def time_fields(at: AtTime | None, reply: dict[str, Any]) -> dict[str, Any]:
    """``reply`` of a rollback plan or result, with ``time`` (what the time target was built
    from, and the version each planned path takes) when the target is a time."""
    if at is None:
        return reply
    paths = [decode_path(op["path"]) for op in reply["plan"]["ops"] if op["path"]]
    return {**reply, "time": history.describe(at, paths)}
