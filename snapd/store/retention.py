"""Retention, the pure policy: which marks to evict (docs/operations.md, retention).

Marks older than the age window, or beyond the per-workspace count, are evicted oldest first;
when the store exceeds its disk budget, further marks are evicted oldest first across
workspaces until it fits (:func:`budget_candidates` lists them; :mod:`snapd.store.gc` decides
how many). Never evicted: pinned marks, a workspace's newest mark, a ``pre-rollback`` mark
younger than the age window.

The count is fair: a young ``pre-rollback`` mark, which retention may never evict, does not
count against ``max_marks``. Counting it without evicting it made every rollback cost a mark
of the user's: with ``max_marks=4`` and three young pre-rollback marks, one user mark was
left. Once past the age window it counts (and goes for its age anyway). Pinned marks count:
pinning is the user's own choice of what to keep within the count. The settings are
:class:`snapd.config.Retention`; the sweep that carries out these decisions and reclaims space
is :mod:`snapd.store.gc`.

Pure: marks in, decisions out; no store, no clock (``now`` is given).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol, TypeVar

from snapd.config import Retention


class Evictable(Protocol):
    """A mark as retention judges it (:class:`snapd.store.records.Mark`, or the lighter
    :class:`~snapd.store.records.MarkHead` GC reads)."""

    @property
    def id(self) -> str: ...
    @property
    def workspace(self) -> int: ...
    @property
    def seq(self) -> int: ...
    @property
    def created(self) -> int: ...
    @property
    def kind(self) -> str: ...
    @property
    def pinned(self) -> bool: ...


M = TypeVar("M", bound=Evictable)


def young_pre_rollback(mark: Evictable, policy: Retention, now: int) -> bool:
    """A ``pre-rollback`` mark younger than the window: never evicted, not counted."""
    return mark.kind == "pre-rollback" and now - mark.created < policy.max_age_ns


def protected(mark: Evictable, newest: dict[int, str], policy: Retention, now: int) -> bool:
    return mark.pinned or newest.get(mark.workspace) == mark.id or young_pre_rollback(mark, policy, now)


def plan_evictions(marks: Iterable[M], policy: Retention, now: int) -> list[tuple[M, str]]:
    """Marks to evict for age and count (pure). Oldest first."""
    by_ws: dict[int, list[M]] = {}
    for m in marks:
        by_ws.setdefault(m.workspace, []).append(m)
    out: list[tuple[M, str]] = []
    for ms in by_ws.values():
        ms.sort(key=lambda m: m.seq)
        newest = {ms[-1].workspace: ms[-1].id}
        excess = sum(not young_pre_rollback(m, policy, now) for m in ms) - policy.max_marks
        for m in ms:
            if protected(m, newest, policy, now):
                continue
            if now - m.created > policy.max_age_ns:
                out.append((m, "age"))
                excess -= 1
            elif excess > 0:
                out.append((m, "count"))
                excess -= 1
    out.sort(key=lambda p: p[0].created)
    return out


def newest_ids(marks: Iterable[Evictable]) -> dict[int, str]:
    """Each workspace's newest mark id (never evicted)."""
    newest: dict[int, Evictable] = {}
    for m in marks:
        if m.workspace not in newest or m.seq > newest[m.workspace].seq:
            newest[m.workspace] = m
    return {ws: m.id for ws, m in newest.items()}


def budget_candidates(marks: Iterable[M], policy: Retention, now: int) -> list[M]:
    """Marks that may go for the disk budget, oldest first (pure)."""
    ms = list(marks)
    ids = newest_ids(ms)
    return sorted((m for m in ms if not protected(m, ids, policy, now)), key=lambda m: m.created)
