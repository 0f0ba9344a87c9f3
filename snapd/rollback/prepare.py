"""Preparing a rollback: the captured state, the paths today's rules leave out that the mark
captures (held as they are on disk), and the plan from that state to the mark, under the
mark's own rules (:mod:`snapd.rollback.rules`). Nothing is changed here but the store
(``Workspace.hold`` stores the extras' content).
"""

from __future__ import annotations

import os
import stat
from collections.abc import Sequence
from dataclasses import dataclass

from snapd.capture import ignore
from snapd.capture.workspace import Workspace
from snapd.errors import CorruptObject, MissingObject
from snapd.paths import at_or_below
from snapd.rollback import plan, report, rules
from snapd.rollback.ops import Plan
from snapd.store import damage, ignored
from snapd.store.records import Mark


@dataclass(frozen=True)
class Prepared:
    target: Mark  # what the plan goes to (a revert's: made from ``current``)
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


def prepare(
    ws: Workspace, target: Mark, only: Sequence[bytes], force: bool, current: str
) -> Prepared:
    """The plan from ``current`` to ``target``. A tree node or rule file of either that the
    store cannot read stops it before anything is written, naming the directory or file."""
    try:
        return _prepare(ws, target, only, force, current)
    except (CorruptObject, MissingObject) as exc:
        read = {f"mark {target.id} ({target.label})": target.tree, "the workspace now": current}
        raise damage.explain(ws.store, exc, read, "cannot plan the rollback; nothing was changed") from exc


def _prepare(ws: Workspace, target: Mark, only: Sequence[bytes], force: bool, current: str) -> Prepared:
    # A revert's made-up target is judged by today's rules, its rule files too: what is
    # ignored now is never touched, whatever .gitignore the revert puts back.
    m_rules = ws.rules if report.is_made(target) else rules.rules_at(ws, target)
    extras = rules.left_out(ws, current, target, m_rules)
    if only:
        extras = [p for p in extras if any(at_or_below(p, t) for t in only)]
    held, unreadable = ws.hold(current, extras)
    planned = _plan(ws, held, target, m_rules, only, force, unreadable)
    return Prepared(target, tuple(only), current, tuple(extras), held, planned, force)


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

    root_now = root_mode(ws)
    return plan.plan(
        ws.store.load_node,
        current,
        target.tree,
        only=only,
        uncapturable={**rules.still_there(ws.rootb, ws.skipped), **(unreadable or {})},
        force=force,
        target_ignores=target_ignores,
        ignored_below=rules.ignored_below(ws, current, m_rules),
        root_modes=(root_now, target.root_mode),
        absent=target.absent,
        names=ignored.at_mark(ws.store, target),
        precious=m_rules.is_precious,
    )


def root_mode(ws: Workspace) -> int | None:
    try:
        return stat.S_IMODE(os.stat(ws.rootb).st_mode)
    except OSError:
        return None
