"""Rollback of a live workspace (the guarantees: docs/rollback.md): plan, confirm, then apply safely.

``propose`` captures everything changed so far and returns the plan from that state to mark M
— nothing is touched. ``execute`` does it for real, holding the workspace's lock so no capture
interleaves:

1. capture and re-plan; if the plan differs from the one the user confirmed (its ``token``),
   stop with :class:`PlanChanged` carrying the new plan — the client shows the difference and
   asks again (a re-plan that is identical goes on silently);
2. take a barrier'd ``pre-rollback`` mark, so ``undo`` returns to exactly this state — unless
   the plan changes nothing (no mark at all), or this repeats the last rollback to the same
   mark with nothing captured since (it shares that rollback's mark, so undo still returns to
   the work the first one replaced);
3. apply the plan with its write-ahead journal (:mod:`snapd.rollback.apply`): every path re-checked
   right before it changes, conflicts left alone and reported, nothing outside the root;
4. capture the result. The rollback's own writes arrive as ordinary events and are captured
   like any other change — recognised by content, never by silencing paths or time windows —
   so a concurrent writer's change is captured too.

Every path is judged under M's own ignore rules (its ``.gitignore`` files from its tree, the
rest from the inputs it recorded): what they ignore is never touched. What today's rules leave
out but M's capture (a ``.gitignore`` changed since) is read into the plan's current state and
held by the pre-rollback mark before anything is written or deleted (:mod:`snapd.rollback.rules`,
:mod:`snapd.rollback.prepare`). What the replies and the pre-rollback mark say:
:mod:`snapd.rollback.report`; other sessions' work the plan reverts: :mod:`snapd.rollback.owners`.

``undo`` is a rollback to the newest ``pre-rollback`` mark, which itself takes a new
``pre-rollback`` mark first: an undo can be undone (a second undo redoes).

A revert is a rollback to a target made from the captured tree (:data:`Target`: a callable
instead of a mark, :mod:`snapd.rollback.revert_target`): it is made again from each tree the
rollback captures, so the plan at apply is made to the target as it is then. Its pre-rollback
mark says ``before revert of ...`` and records the spans; a revert never shares an earlier
rollback's pre-rollback mark (each is undone on its own).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import structlog

from snapd.capture.workspace import Workspace
from snapd.errors import Conflict, NotFound, PlanChanged, SnapdError
from snapd.rollback import apply, report
from snapd.rollback.ops import MKDIR_MODE, Plan, check_token
from snapd.rollback.plan import plan as plan_of
from snapd.rollback.prepare import Prepared, prepare, root_mode
from snapd.rollback.running import Tracker
from snapd.store.records import Mark

log = structlog.get_logger(__name__)
_MARK_ATTEMPTS = 3  # pre-rollback marks taken while concurrent writes keep changing the plan

Target = Mark | Callable[[str], Mark]
"""What a rollback goes to: a mark, or how to make one from the tree just captured (a revert's)."""


def _prepared(ws: Workspace, target: Target, only: Sequence[bytes], force: bool) -> Prepared:
    """Capture (the caller holds the lock), make the target from what was captured, and plan."""
    current = ws.capture_to_now_under_lock(rescan=True)
    goal = target if isinstance(target, Mark) else target(current)
    return prepare(ws, goal, only, force, current)


def undo_target(ws: Workspace) -> Mark:
    """The state before the last rollback (or undo) of ``ws`` that changed something."""
    for m in ws.store.marks(ws.id):
        if m.kind == "pre-rollback":
            return m
    raise NotFound(f"nothing to undo in {ws.root}: it has never been rolled back")


def propose(ws: Workspace, target: Target, only: Sequence[bytes] = (), force: bool = False) -> dict[str, Any]:
    with ws.lock:
        prep = _prepared(ws, target, only, force)
    return report.describe(ws, prep.target, prep.plan, prep.held)


def propose_missing(
    ws: Workspace, target: Mark, only: Sequence[bytes] = (), force: bool = False
) -> dict[str, Any]:
    """The plan for a workspace whose root is gone: everything ``target`` holds is recreated.
    Nothing is captured or touched: the apply makes the root again (0700 while filled), adopts
    it and plans again from there, which gives this very plan (an empty directory of that
    mode), so the token the user confirms is the one applied."""
    planned = plan_of(
        ws.store.load_node,
        None,
        target.tree,
        only=only,
        force=force,
        root_modes=(MKDIR_MODE, target.root_mode),
        absent=target.absent,
    )
    return report.describe(ws, target, planned)


def execute(
    ws: Workspace,
    target: Target,
    only: Sequence[bytes],
    force: bool,
    token: str | None,
    tracker: Tracker | None = None,
) -> dict[str, Any]:
    """Apply the rollback; ``token`` is the confirmed plan's (None: apply the fresh plan).
    ``tracker`` is told each phase and the apply's progress (``status``, a terminal's bar)."""
    check_token(token)
    tell = tracker.phase if tracker is not None else (lambda what: None)
    tell("capturing the workspace")
    with ws.lock:
        prep = _prepared(ws, target, only, force)
        if ws.unfinished:  # an earlier rollback stopped part-way and still cannot be finished
            raise Conflict(f"{ws.unfinished}; retry once that is fixed")
        plan = prep.plan
        _check(ws, prep.target, plan, prep.held, token)
        if not plan.ops:  # nothing to change: no pre-rollback mark, so undo keeps its meaning
            return report.result(ws, prep.target, plan, prep.held, None, None)
        pre = _shared_pre(ws, prep)
        if pre is None:
            tell("taking the pre-rollback mark")
            pre, prep = _mark_before(ws, target, prep, token)
            plan = prep.plan
        goal = prep.target
        log.info(
            "rollback.applying", workspace=str(ws.root), target=goal.id, token=plan.token, ops=len(plan.ops)
        )
        try:
            result = apply.apply(
                ws.root, plan, ws.store.get, ws.store.hasher, ws.journal, force=force, progress=tracker
            )
        except SnapdError as exc:
            ws.rollback_stopped(exc)
            raise type(exc)(
                f"{exc.message}. Undo returns to the state before this rollback (mark {pre.id})",
                pre_rollback=pre.id,
                **exc.details,
            ) from exc
    tell("capturing the result")
    after = ws.capture_to_now()
    # A repeat may share this rollback's pre-rollback mark only if that mark holds everything
    # the repeat could overwrite: not after a conflict (a concurrent writer's content is in
    # ``after`` but in no pre-rollback mark), and only for the same paths.
    record = {
        "target": goal.id,
        "after": after,
        "root_mode": root_mode(ws),  # not in the tree: a change of it alone is a change too
        "pre": pre.id,
        "paths": [p.hex() for p in only],
    }
    ws.store.set_last_rollback(ws.id, None if result.conflicts else record)
    log.info(
        "rollback.applied",
        workspace=str(ws.root),
        target=goal.id,
        pre_rollback=pre.id,
        applied=len(result.applied),
        conflicts=len(result.conflicts),
        kept=len(result.kept),
    )
    return report.result(ws, goal, plan, pre.tree, pre, result)


def _mark_before(ws: Workspace, target: Target, prep: Prepared, token: str | None) -> tuple[Mark, Prepared]:
    """The pre-rollback mark: everything captured, plus the extras the plan touches (held
    whatever today's rules) and the paths it creates (absent before). When the mark captured a
    change the plan was not made from, plan again (and check the token) and mark again."""
    for _ in range(_MARK_ATTEMPTS):
        pre = ws.mark_under_lock(
            "pre-rollback",
            kind="pre-rollback",
            message=report.pre_message(prep.target),
            hold=prep.touched_extras,
            absent=prep.created,
            note=report.pre_note(prep.target, prep.plan),
        )
        if ws.tree == prep.current:
            return pre, prep
        prep = _prepared(ws, target, prep.only, prep.force)
        _check(ws, prep.target, prep.plan, prep.held, token)
    raise Conflict("the workspace kept changing while the rollback was prepared; nothing was changed")


def _shared_pre(ws: Workspace, prep: Prepared) -> Mark | None:
    """The last rollback's pre-rollback mark, when this one repeats it (same mark, nothing
    captured since, nothing held beyond the captured state): undo must still return to the
    work that rollback replaced, not to its own result. Never a revert's: its target is made
    from the state it starts from, so two reverts in a row are two steps to undo."""
    last = ws.store.last_rollback(ws.id)
    target = prep.target
    if last is None or prep.touched_extras or report.is_made(target) or last.get("target") != target.id:
        return None
    if last.get("after") != prep.current:
        return None
    if last.get("paths", []) != [p.hex() for p in prep.only] or last.get("root_mode") != root_mode(ws):
        return None
    try:
        pre = ws.store.mark(str(last["pre"]))
    except NotFound:
        return None  # evicted meanwhile: take a new one
    return pre if pre.workspace == ws.id else None


def _check(ws: Workspace, target: Mark, plan: Plan, current: str, token: str | None) -> None:
    if token is None or plan.token == token:
        return
    raise PlanChanged(
        "the plan is not the one confirmed: the workspace changed since that plan was made (or the "
        "token is of another rollback's plan); review the new plan",
        **report.describe(ws, target, plan, current),
    )
