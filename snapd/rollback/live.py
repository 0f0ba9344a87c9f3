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
held by the pre-rollback mark before anything is written or deleted.

``undo`` is a rollback to the newest ``pre-rollback`` mark, which itself takes a new
``pre-rollback`` mark first: an undo can be undone (a second undo redoes).
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import structlog

from snapd.capture import ignore, reader
from snapd.capture.workspace import Workspace
from snapd.errors import Conflict, NotFound, PlanChanged, SnapdError
from snapd.paths import at_or_below, encode_path, is_integration_file
from snapd.rollback import apply, plan
from snapd.rollback.plan import Plan
from snapd.store import trees
from snapd.store.records import Mark

log = structlog.get_logger(__name__)
_MARK_ATTEMPTS = 3  # pre-rollback marks taken while concurrent writes keep changing the plan


def undo_target(ws: Workspace) -> Mark:
    """The state before the last rollback (or undo) of ``ws`` that changed something."""
    for m in ws.store.marks(ws.id):
        if m.kind == "pre-rollback":
            return m
    raise NotFound(f"nothing to undo in {ws.root}: it has never been rolled back")


# -- the mark's rules ------------------------------------------------------------------------


def rules_at(ws: Workspace, mark: Mark) -> ignore.IgnoreRules:
    """The ignore rules ``mark`` was captured with: rule files from its tree, the rest from the
    inputs it recorded (a mark from before they were recorded: today's outside inputs)."""
    load = ws.store.load_node
    inputs = ignore.RuleInputs.decode(ws.store.get(mark.rules)) if mark.rules else ws.rules.inputs

    def file_at(rel: bytes) -> bytes | None:
        e = trees.lookup(load, mark.tree, rel)
        return ws.store.get(e.key) if e is not None and e.kind == "file" else None

    def gitignore(rel_dir: bytes) -> bytes | None:
        return file_at(rel_dir + b"/.gitignore" if rel_dir else b".gitignore")

    return ignore.IgnoreRules.from_inputs(inputs, gitignore, file_at(ignore.SNAPDIGNORE) or b"")


def _left_out(ws: Workspace, current: str, target: Mark, m_rules: ignore.IgnoreRules) -> list[bytes]:
    """Paths on disk that today's rules leave out of ``current`` but the plan may write or
    delete: the plan must see them, and the pre-rollback mark must hold them, first.

    Two kinds. Paths in M's tree that exist on disk but not in ``current`` (a path ignored now
    that M holds — perhaps a pre-rollback mark's own extra). And paths absent at M that M's
    rules capture while today's ignore them: none when the rules are equal; among the paths
    whose tracked status changed when only git's index did; found by a walk judged by M's
    rules otherwise."""
    now = ws.rules
    load = ws.store.load_node
    found: dict[bytes, None] = {}
    rule_files_differ = False
    for d in trees.diff(load, current, target.tree):  # one pass: held paths and changed rule files
        rule_files_differ = rule_files_differ or now.is_rule_file(d.path)
        if d.old is None and d.new is not None and _on_disk(ws.rootb, d.path):
            found[d.path] = None
    for a in target.absent:  # created by the rollback after it: deleted whatever the rules
        if _on_disk(ws.rootb, a) and trees.lookup(load, current, a) is None:
            found[a] = None
            if _is_dir(ws.rootb, a):
                found.update((rel, None) for rel, _ in reader.walk(ws.rootb, lambda r, d: False, a))
    if now.same_outside(m_rules.inputs) and not rule_files_differ:
        if now.inputs.tracked == m_rules.inputs.tracked:
            return list(found)
        candidates: Iterable[tuple[bytes, bool]] = (
            (p, _is_dir(ws.rootb, p)) for p in now.inputs.tracked ^ m_rules.inputs.tracked
        )
    else:
        candidates = reader.walk(ws.rootb, m_rules.is_ignored, descend=m_rules.dir_may_contain_captured)
    for rel, is_dir in candidates:
        if not os.path.lexists(ws.rootb + b"/" + rel) or m_rules.is_ignored(rel, is_dir):
            continue
        if now.is_ignored(rel, is_dir) and trees.lookup(load, current, rel) is None:
            found[rel] = None
    return list(found)


def _on_disk(root: bytes, rel: bytes) -> bool:
    return reader.parents_real(root, rel) and os.path.lexists(root + b"/" + rel)


def _still_there(root: bytes, skipped: dict[bytes, str]) -> dict[bytes, str]:
    """``skipped`` without the paths known to be gone (one that cannot be looked at stays)."""
    out = {}
    for rel, why in skipped.items():
        try:
            os.lstat(root + b"/" + rel)
        except (FileNotFoundError, NotADirectoryError):
            continue
        except OSError:
            pass
        out[rel] = why
    return out


def _is_dir(root: bytes, rel: bytes) -> bool:
    try:
        return stat.S_ISDIR(os.lstat(root + b"/" + rel).st_mode)
    except OSError:
        return False


def _ignored_below(
    ws: Workspace, current: str, m_rules: ignore.IgnoreRules
) -> plan.IgnoredBelow:
    load = ws.store.load_node

    def below(rel_dir: bytes) -> list[tuple[bytes, str]]:
        """Entries on disk in ``rel_dir`` that ``current`` lacks and M's rules ignore."""
        if not reader.parents_real(ws.rootb, rel_dir + b"/x"):
            return []
        try:
            names = os.listdir(ws.rootb + b"/" + rel_dir)
        except OSError:
            return []
        out = []
        for name in names:
            rel = rel_dir + b"/" + name
            if trees.lookup(load, current, rel) is not None:
                continue
            why = m_rules.reason(rel, _is_dir(ws.rootb, rel))
            if is_integration_file(rel):  # the agent's hooks: kept like an ignored file, never removed
                out.append((rel, "snapd's agent integration (a rollback leaves it)"))
            elif why is not None and why != "snapd":
                out.append((rel, f"ignored at the mark ({why})"))
        return out

    return below


# -- planning --------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Prepared:
    only: tuple[bytes, ...]  # the paths the rollback is limited to (none: everything)
    current: str  # the captured tree (today's rules)
    extras: tuple[bytes, ...]  # left out by today's rules, captured by M's
    held: str  # ``current`` plus the extras as they are on disk
    plan: Plan
    force: bool

    @property
    def touched_extras(self) -> tuple[bytes, ...]:
        """The extras the plan writes or deletes: the pre-rollback mark holds these (and only
        these: an extra the plan leaves alone stays outside it, ignored as before)."""
        paths = {op.path for op in self.plan.ops}
        return tuple(e for e in self.extras if e in paths)

    @property
    def created(self) -> tuple[bytes, ...]:
        """The paths the plan creates where nothing was (tops only): absent in the pre-rollback
        state whatever its rules, so an undo deletes them."""
        ops = self.plan.ops
        made = {op.path for op in ops if op.kind in ("write", "symlink", "mkdir") and op.expect is None}
        made -= {op.path for op in ops if op.kind in ("remove", "rmdir")}
        tops: list[bytes] = []
        for p in sorted(made, key=lambda p: p.split(b"/")):
            if not any(at_or_below(p, t) for t in tops):
                tops.append(p)
        return tuple(tops)


def _prepare(
    ws: Workspace, target: Mark, only: Sequence[bytes], force: bool, current: str
) -> _Prepared:
    m_rules = rules_at(ws, target)
    extras = _left_out(ws, current, target, m_rules)
    if only:
        extras = [p for p in extras if any(at_or_below(p, t) for t in only)]
    held, unreadable = ws.hold(current, extras)
    planned = _plan(ws, held, target, m_rules, only, force, unreadable)
    return _Prepared(tuple(only), current, tuple(extras), held, planned, force)


def _plan(
    ws: Workspace,
    current: str,
    target: Mark,
    m_rules: ignore.IgnoreRules,
    only: Sequence[bytes],
    force: bool,
    unreadable: dict[bytes, str] | None = None,
) -> Plan:
    def target_ignores(path: bytes, is_dir: bool) -> str | None:
        return m_rules.reason(path, is_dir)

    root_now = _root_mode(ws)
    return plan.plan(
        ws.store.load_node,
        current,
        target.tree,
        only=only,
        uncapturable={**_still_there(ws.rootb, ws.skipped), **(unreadable or {})},
        force=force,
        target_ignores=target_ignores,
        ignored_below=_ignored_below(ws, current, m_rules),
        root_modes=(root_now, target.root_mode),
        absent=target.absent,
    )


# -- who else changed what the plan reverts --------------------------------------------------

Owner = tuple[str, str | None]  # (session, agent)


def _owners(ws: Workspace, target: Mark, current: str, paths: set[bytes]) -> dict[Owner, set[bytes]]:
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
        for d in trees.diff(load, old, new):
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


def _others(ws: Workspace, target: Mark, current: str, plan: Plan) -> list[dict[str, Any]]:
    paths = {op.path for op in plan.ops if op.path}
    if not paths:
        return []
    out = []
    for (session, agent), changed in sorted(_owners(ws, target, current, paths).items()):
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


# -- the operations --------------------------------------------------------------------------


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
    others = _others(ws, target, current, plan) if current is not None else []
    out["other_sessions"] = others
    for o in others:
        who = f"session {o['session']}" + (f" (agent {o['agent']})" if o["agent"] else "")
        n = o["paths"]
        warnings.append(f"also reverts {n} path{'s' if n != 1 else ''} changed by {who}")
    if warnings:
        out["warnings"] = warnings
    return out


def propose(ws: Workspace, target: Mark, only: Sequence[bytes] = (), force: bool = False) -> dict[str, Any]:
    with ws.lock:
        prep = _prepare(ws, target, only, force, ws.capture_to_now_under_lock(rescan=True))
    return describe(ws, target, prep.plan, prep.held)


def execute(
    ws: Workspace, target: Mark, only: Sequence[bytes], force: bool, token: str | None
) -> dict[str, Any]:
    """Apply the rollback; ``token`` is the confirmed plan's (None: apply the fresh plan)."""
    with ws.lock:
        prep = _prepare(ws, target, only, force, ws.capture_to_now_under_lock(rescan=True))
        if ws.unfinished:  # an earlier rollback stopped part-way and still cannot be finished
            raise Conflict(f"{ws.unfinished}; retry once that is fixed")
        plan = prep.plan
        _check(ws, target, plan, prep.held, token)
        if not plan.ops:  # nothing to change: no pre-rollback mark, so undo keeps its meaning
            return _result(ws, target, plan, prep.held, None, None)
        pre = _shared_pre(ws, target, prep)
        if pre is None:
            pre, prep = _mark_before(ws, target, prep, token)
            plan = prep.plan
        try:
            result = apply.apply(ws.root, plan, ws.store.get, ws.store.hasher, ws.journal, force=force)
        except SnapdError as exc:
            ws.rollback_stopped(exc)
            raise type(exc)(
                f"{exc.message}. Undo returns to the state before this rollback (mark {pre.id})",
                pre_rollback=pre.id,
                **exc.details,
            ) from exc
    after = ws.capture_to_now()
    # A repeat may share this rollback's pre-rollback mark only if that mark holds everything
    # the repeat could overwrite: not after a conflict (a concurrent writer's content is in
    # ``after`` but in no pre-rollback mark), and only for the same paths.
    record = {
        "target": target.id,
        "after": after,
        "root_mode": _root_mode(ws),  # not in the tree: a change of it alone is a change too
        "pre": pre.id,
        "paths": [p.hex() for p in only],
    }
    ws.store.set_last_rollback(ws.id, None if result.conflicts else record)
    log.info(
        "rollback.applied",
        workspace=str(ws.root),
        target=target.id,
        pre_rollback=pre.id,
        applied=len(result.applied),
        conflicts=len(result.conflicts),
        kept=len(result.kept),
    )
    return _result(ws, target, plan, pre.tree, pre, result)


def _mark_before(ws: Workspace, target: Mark, prep: _Prepared, token: str | None) -> tuple[Mark, _Prepared]:
    """The pre-rollback mark: everything captured, plus the extras the plan touches (held
    whatever today's rules) and the paths it creates (absent before). When the mark captured a
    change the plan was not made from, plan again (and check the token) and mark again."""
    for _ in range(_MARK_ATTEMPTS):
        pre = ws.mark_under_lock(
            "pre-rollback",
            kind="pre-rollback",
            message=f"before rollback to {target.id} ({target.label})",
            hold=prep.touched_extras,
            absent=prep.created,
            note={"rollback": effect(target, prep.plan)},
        )
        if ws.tree == prep.current:
            return pre, prep
        prep = _prepare(ws, target, prep.only, prep.force, ws.capture_to_now_under_lock(rescan=True))
        _check(ws, target, prep.plan, prep.held, token)
    raise Conflict("the workspace kept changing while the rollback was prepared; nothing was changed")


EFFECT_EXAMPLES = 20  # paths per kind a pre-rollback mark names (the counts are exact)


def effect(target: Mark, plan: Plan) -> dict[str, Any]:
    """What a rollback to ``target`` changes, for people and agents who were not watching: the
    paths it restores (they existed and change back), recreates (they were gone) and deletes
    (they did not exist at ``target``). Recorded in its pre-rollback mark, so an agent's next
    turn can be told (``daemon.turns``)."""
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
    out.update({k: [os.fsdecode(p) for p in sorted(v)[:EFFECT_EXAMPLES]] for k, v in kinds.items()})
    return out


def _root_mode(ws: Workspace) -> int | None:
    try:
        return stat.S_IMODE(os.stat(ws.rootb).st_mode)
    except OSError:
        return None


def _shared_pre(ws: Workspace, target: Mark, prep: _Prepared) -> Mark | None:
    """The last rollback's pre-rollback mark, when this one repeats it (same mark, nothing
    captured since, nothing held beyond the captured state): undo must still return to the
    work that rollback replaced, not to its own result."""
    last = ws.store.last_rollback(ws.id)
    if last is None or prep.touched_extras or last.get("target") != target.id:
        return None
    if last.get("after") != prep.current:
        return None
    if last.get("paths", []) != [p.hex() for p in prep.only] or last.get("root_mode") != _root_mode(ws):
        return None
    try:
        pre = ws.store.mark(str(last["pre"]))
    except NotFound:
        return None  # evicted meanwhile: take a new one
    return pre if pre.workspace == ws.id else None


def _result(
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
    return {
        **out,
        "pre_rollback": pre.id if pre is not None else None,
        "applied": len(result.applied) if result is not None else 0,
        "conflicts": [{"path": encode_path(p), "reason": why} for p, why in conflicts],
        "kept": [{"path": encode_path(p), "reason": why} for p, why in kept],
        "left": [{"path": encode_path(p), "reason": why} for p, why in plan.left],
        "replaced_symlinks": [encode_path(p) for p in result.replaced] if result is not None else [],
        "temps_removed": result.temps_removed if result is not None else 0,
        "ok": not conflicts and not kept,
    }


def _check(ws: Workspace, target: Mark, plan: Plan, current: str, token: str | None) -> None:
    if token is None or plan.token == token:
        return
    raise PlanChanged(
        "the workspace changed since you confirmed the plan; review the new plan",
        **describe(ws, target, plan, current),
    )
