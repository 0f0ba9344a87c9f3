"""What a rollback says: the plan as the client shows it (:func:`describe`, with warnings about
git's HEAD and other sessions' work), the reply of an apply (:func:`result`), and the effect a
pre-rollback mark records for people and agents who were not watching (:func:`effect`).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from snapd.capture.workspace import Workspace
from snapd.paths import encode_path
from snapd.rollback import apply, owners
from snapd.rollback.ops import Plan
from snapd.store import damage
from snapd.store.records import Mark


def describe(ws: Workspace, target: Mark, plan: Plan, current: str | None = None) -> dict[str, Any]:
    head_now = ws.git_head()
    out: dict[str, Any] = {
        "workspace": str(ws.root),
        "target": {
            "id": target.id,
            "label": target.label,
            "created": target.created / 1e9,
            "kind": target.kind,
            "session": target.session,
            "agent": target.agent,
        },
        "plan": plan.to_json(),
        "lines": [op.describe() for op in plan.ops],
        "git_head_mark": target.git_head,
        "git_head_now": head_now,
    }
    warnings = []
    if target.git_head and head_now and target.git_head != head_now:
        warnings.append(
            f"git HEAD is {head_now[:12]} now but was {target.git_head[:12]} at the mark: the rollback "
            "restores files, not git's state (.git is never touched)"
        )
    others = owners.others(ws, target, current, plan) if current is not None else []
    out["other_sessions"] = others
    for o in others:
        who = f"session {o['session']}" + (f" (agent {o['agent']})" if o["agent"] else "")
        n = o["paths"]
        warnings.append(f"also reverts {n} path{'s' if n != 1 else ''} changed by {who}")
    if warnings:
        out["warnings"] = warnings
    return out


ROOT_NOTES = {
    "missing": "{root} does not exist: the rollback makes it again and restores it as at the mark "
    "(`snapctl undo` leaves it empty)",
    "new": "{root} is a new directory (the one captured was deleted or moved away): its history "
    "goes on here, and what it holds now is kept by the pre-rollback mark (`snapctl undo` returns it)",
    "new, unchanged": "{root} is a new directory (the one captured was deleted or moved away): its "
    "history goes on here; it already matches the mark, so nothing is changed (nor is there an undo)",
}


def root_fields(root: Path, state: str | None, reply: dict[str, Any]) -> dict[str, Any]:
    """``reply`` saying what became of the root, when it is not the directory captured: the
    plan must say so before anything is confirmed (``root``: ``missing`` or ``new``, and a
    ``root_note`` for people)."""
    if state is None:
        return reply
    unchanged = state == "new" and not reply.get("plan", {}).get("ops")
    note = ROOT_NOTES["new, unchanged" if unchanged else state]  # no undo to promise then
    return {**reply, "root": state, "root_note": note.format(root=root)}


EFFECT_EXAMPLES = 20  # paths per kind a pre-rollback mark names (the counts are exact)


def effect(target: Mark, plan: Plan) -> dict[str, Any]:
    """What a rollback to ``target`` changes, for people and agents who were not watching: the
    paths it restores (they existed and change back), recreates (they were gone) and deletes
    (they did not exist at ``target``). Recorded in its pre-rollback mark, so an agent's next
    turn can be told (``daemon.turns``); a revert's says what it took back (``revert``)."""
    kinds: dict[str, list[bytes]] = {"restored": [], "recreated": [], "deleted": []}
    for op in plan.ops:
        if op.kind in ("write", "symlink"):
            kinds["restored" if op.expect is not None else "recreated"].append(op.path)
        elif op.kind in ("remove", "rmdir"):
            kinds["deleted"].append(op.path)
    out: dict[str, Any] = {
        "to": target.id,
        "label": target.label,
        "undo": target.kind == "pre-rollback",
        "counts": {k: len(v) for k, v in kinds.items()},
    }
    if target.kind == REVERT:  # no mark of that id: what it took back ("revert of turn M")
        out[REVERT] = target.message
    out.update({k: [os.fsdecode(p) for p in sorted(v)[:EFFECT_EXAMPLES]] for k, v in kinds.items()})
    return out


REVERT = "revert"  # the id, label and kind of a revert's made-up target (snapd.rollback.revert_target)


def is_made(target: Mark) -> bool:
    """Whether ``target`` is made up from the workspace now (a revert's), not a mark."""
    return target.kind == REVERT


def pre_message(target: Mark) -> str:
    """The message of the pre-rollback mark of a rollback to ``target``."""
    if is_made(target):
        return f"before {target.message}"  # "before revert of A..B"
    return f"before rollback to {target.id} ({target.label})"


def pre_note(target: Mark, plan: Plan) -> dict[str, Any]:
    """What the pre-rollback mark records: the rollback's :func:`effect`, and a revert's spans."""
    note: dict[str, Any] = {"rollback": effect(target, plan)}
    if is_made(target):
        note[REVERT] = target.summary.get(REVERT)
    return note


def result(
    ws: Workspace,
    target: Mark,
    plan: Plan,
    current: str,
    pre: Mark | None,
    result: apply.ApplyResult | None,
) -> dict[str, Any]:
    out = describe(ws, target, plan, current)
    kept = result.kept if result is not None else plan.kept
    conflicts = result.conflicts if result is not None else ()
    damaged = result.damaged if result is not None else ()
    return {
        **out,
        "pre_rollback": pre.id if pre is not None else None,
        "applied": len(result.applied) if result is not None else 0,
        "conflicts": [{"path": encode_path(p), "reason": why} for p, why in conflicts],
        "kept": [{"path": encode_path(p), "reason": why} for p, why in kept],
        "left": [{"path": encode_path(p), "reason": why} for p, why in plan.left],
        "damaged": damaged_paths(ws, damaged),
        "replaced_symlinks": [encode_path(p) for p in result.replaced] if result is not None else [],
        "temps_removed": result.temps_removed if result is not None else 0,
        "ok": not conflicts and not kept and not damaged,
    }


def damaged_paths(
    ws: Workspace, damaged: tuple[tuple[bytes, damage.Unreadable], ...]
) -> list[dict[str, Any]]:
    """The paths an apply left as they were because their content cannot be read from the
    store, each with the marks of this workspace that hold it as such a content (read from
    the whole history: only when there are any)."""
    if not damaged:
        return []
    refs = damage.locate(ws.store, damage.spread(ws.store, {u.damaged for _, u in damaged}), ws.id)
    marks: dict[bytes, dict[str, None]] = {}
    for ref in refs:
        marks.setdefault(ref.path, {}).update(dict.fromkeys(ref.marks))
    return [{**u.to_wire(p), "marks": list(marks.get(p, ()))} for p, u in damaged]
