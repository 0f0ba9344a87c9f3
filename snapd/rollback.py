"""Rollback of a live workspace (DESIGN.md semantics 4): plan, confirm, then apply safely.

``propose`` captures everything changed so far and returns the plan from that state to mark M
— nothing is touched. ``execute`` does it for real, holding the workspace's lock so no capture
interleaves:

1. capture and re-plan; if the plan differs from the one the user confirmed (its ``token``),
   stop with :class:`PlanChanged` carrying the new plan — the client shows the difference and
   asks again (a re-plan that is identical goes on silently);
2. take a barrier'd ``pre-rollback`` mark, so ``undo`` returns to exactly this state;
3. apply the plan with its write-ahead journal (:mod:`snapd.apply`): every path re-checked
   right before it changes, conflicts left alone and reported, nothing outside the root;
4. capture the result. The rollback's own writes arrive as ordinary events and are captured
   like any other change — recognised by content, never by silencing paths or time windows —
   so a concurrent writer's change is captured too.

``undo`` is a rollback to the newest ``pre-rollback`` mark, which itself takes a new
``pre-rollback`` mark first: an undo can be undone.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import structlog

from snapd import apply, restore
from snapd.errors import NotFound, PlanChanged
from snapd.protocol import encode_path
from snapd.records import Mark
from snapd.restore import Plan
from snapd.workspace import Workspace

log = structlog.get_logger(__name__)


def undo_target(ws: Workspace) -> Mark:
    """The state before the last rollback (or undo) of ``ws``."""
    for m in ws.store.marks(ws.id):
        if m.kind == "pre-rollback":
            return m
    raise NotFound(f"nothing to undo in {ws.root}: it has never been rolled back")


def _plan(ws: Workspace, current: str, target: Mark, only: Sequence[bytes], force: bool) -> Plan:
    return restore.plan(
        ws.store.load_node, current, target.tree, only=only, uncapturable=ws.skipped, force=force
    )


def describe(ws: Workspace, target: Mark, plan: Plan) -> dict[str, Any]:
    head_now = ws.git_head()
    out = {
        "workspace": str(ws.root),
        "target": {
            "id": target.id,
            "label": target.label,
            "created": target.created / 1e9,
            "kind": target.kind,
        },
        "plan": plan.to_json(),
        "lines": [op.describe() for op in plan.ops],
        "git_head_mark": target.git_head,
        "git_head_now": head_now,
    }
    if target.git_head and head_now and target.git_head != head_now:
        out["warnings"] = [
            f"git HEAD is {head_now[:12]} now but was {target.git_head[:12]} at the mark: the rollback "
            "restores files, not git's state (.git is never touched)"
        ]
    return out


def propose(ws: Workspace, target: Mark, only: Sequence[bytes] = (), force: bool = False) -> dict[str, Any]:
    current = ws.sync()
    return describe(ws, target, _plan(ws, current, target, only, force))


def execute(
    ws: Workspace, target: Mark, only: Sequence[bytes], force: bool, token: str | None
) -> dict[str, Any]:
    """Apply the rollback; ``token`` is the confirmed plan's (None: apply the fresh plan)."""
    with ws.lock:
        current = ws.sync_locked()
        plan = _plan(ws, current, target, only, force)
        _check(ws, target, plan, token)
        pre = ws.mark(
            "pre-rollback",
            locked=True,
            kind="pre-rollback",
            message=f"before rollback to {target.id} ({target.label})",
        )
        if pre.tree != current:  # something changed between the check and the mark
            plan = _plan(ws, pre.tree, target, only, force)
            _check(ws, target, plan, token)
        result = apply.apply(ws.root, plan, ws.store.get, ws.store.hasher, ws.journal, force=force)
    ws.sync()
    log.info(
        "rollback.applied",
        workspace=str(ws.root),
        target=target.id,
        pre_rollback=pre.id,
        applied=len(result.applied),
        conflicts=len(result.conflicts),
        kept=len(result.kept),
    )
    return {
        **describe(ws, target, plan),
        "pre_rollback": pre.id,
        "applied": len(result.applied),
        "conflicts": [{"path": encode_path(p), "reason": why} for p, why in result.conflicts],
        "kept": [{"path": encode_path(p), "reason": why} for p, why in result.kept],
        "replaced_symlinks": [encode_path(p) for p in result.replaced],
        "temps_removed": result.temps_removed,
        "ok": result.ok,
    }


def _check(ws: Workspace, target: Mark, plan: Plan, token: str | None) -> None:
    if token is None or plan.token == token:
        return
    raise PlanChanged(
        "the workspace changed since you confirmed the plan; review the new plan",
        **describe(ws, target, plan),
    )
