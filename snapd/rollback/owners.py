"""Who else changed what a rollback reverts: the agent sessions whose changes since the mark
touch the plan's paths, so the plan can warn before it reverts another session's work.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from snapd.capture.workspace import Workspace
from snapd.paths import encode_path
from snapd.rollback.ops import Plan
from snapd.store import treediff
from snapd.store.records import Mark

Owner = tuple[str, str | None]  # (session, agent)


def owners(ws: Workspace, target: Mark, current: str, paths: set[bytes]) -> dict[Owner, set[bytes]]:
    """For each agent session, the plan's paths it changed since ``target``.

    A change between two marks belongs to the sessions whose turn was open then (opened by a
    ``turn-start`` mark, closed by a ``turn-end``), or else to the sessions of the two marks
    around it; changes since the newest mark, to the turns still open."""
    marks = list(reversed(ws.store.marks(ws.id)))  # oldest first
    open_: dict[str, str | None] = {}
    before = True
    found: dict[Owner, set[bytes]] = {}
    prev: Mark | None = None
    load = ws.store.load_node

    def attribute(old: str, new: str, owners: Iterable[Owner]) -> None:
        owners = list(owners)
        if not owners or old == new:
            return
        for d in treediff.diff(load, old, new):
            if d.path in paths:
                for o in owners:
                    found.setdefault(o, set()).add(d.path)

    for m in marks:
        if not before and prev is not None:
            owners = set(open_.items())
            if not owners:
                owners = {(x.session, x.agent) for x in (prev, m) if x.session}
            if m.session and m.label == "turn-end":
                owners.add((m.session, m.agent))
            attribute(prev.tree, m.tree, owners)
        if m.session and m.label == "turn-start":
            open_[m.session] = m.agent
        elif m.session and m.label == "turn-end":
            open_.pop(m.session, None)
        if m.seq == target.seq:  # a time target counts from its base mark (store.history)
            before = False
        if not before:
            prev = m
    if prev is not None:
        attribute(prev.tree, current, set(open_.items()))
    return found


def others(ws: Workspace, target: Mark, current: str, plan: Plan) -> list[dict[str, Any]]:
    paths = {op.path for op in plan.ops if op.path}
    if not paths:
        return []
    out = []
    for (session, agent), changed in sorted(owners(ws, target, current, paths).items()):
        if session == target.session:
            continue
        examples = sorted(changed)[:5]
        out.append(
            {
                "session": session,
                "agent": agent,
                "paths": len(changed),
                "examples": [encode_path(p) for p in examples],
            }
        )
    return out
