"""The retention policy as pure functions (no store): what may be evicted, for what reason.

The retention rules (docs/operations.md, docs/storage.md): eviction drops the oldest unpinned
marks first and never removes the newest mark or a ``pre-rollback`` mark younger than the
retention window, under count *and* budget pressure. Times are fixed numbers, never derived
from the policy under test.
"""

from __future__ import annotations

from snapd.config import DAY_NS, Retention
from snapd.store.records import Mark
from snapd.store.retention import budget_candidates, newest_ids, plan_evictions, protected

NOW = 1_000 * DAY_NS


def mk(seq: int, *, ws: int = 1, age_days: float = 0.0, kind: str = "mark", pinned: bool = False) -> Mark:
    return Mark(
        id=f"m{ws}-{seq}",
        workspace=ws,
        seq=seq,
        label=f"l{seq}",
        message=None,
        agent=None,
        session=None,
        created=NOW - int(age_days * DAY_NS),
        git_head=None,
        tree="t",
        kind=kind,
        pinned=pinned,
        summary={},
    )


def ids(pairs: list[tuple[Mark, str]]) -> list[tuple[str, str]]:
    return [(m.id, reason) for m, reason in pairs]


def test_count_pressure_spares_a_young_pre_rollback_mark_and_evicts_the_oldest_others() -> None:
    # six marks of one workspace, one day apart (oldest first); keep at most two
    marks = [mk(i, age_days=6 - i) for i in range(6)]
    marks[1] = mk(1, age_days=5, kind="pre-rollback")  # young: the window is 14 days
    got = ids(plan_evictions(marks, Retention(max_marks=2), NOW))
    # 5 marks count (the young pre-rollback one does not), 2 allowed: the 3 oldest others go
    assert got == [("m1-0", "count"), ("m1-2", "count"), ("m1-3", "count")]


def test_young_pre_rollback_marks_do_not_count_against_max_marks() -> None:
    """Issue 31, point 11: with max_marks=4, three young pre-rollback marks and six user marks
    leave the four newest user marks (and the three pre-rollback ones), not one user mark."""
    marks = [mk(i, age_days=9 - i) for i in range(6)]
    marks += [mk(6 + i, age_days=2 - i / 2, kind="pre-rollback") for i in range(3)]
    got = ids(plan_evictions(marks, Retention(max_marks=4), NOW))
    assert got == [("m1-0", "count"), ("m1-1", "count")]
    pinned = [mk(0, age_days=5, pinned=True), mk(1, age_days=4), mk(2, age_days=3)]
    assert ids(plan_evictions(pinned, Retention(max_marks=2), NOW)) == [("m1-1", "count")]  # pinned counts


def test_an_old_pre_rollback_mark_counts_and_goes_for_its_age() -> None:
    marks = [mk(0, age_days=20, kind="pre-rollback"), mk(1, age_days=3), mk(2, age_days=2), mk(3)]
    assert ids(plan_evictions(marks, Retention(max_marks=3), NOW)) == [("m1-0", "age")]


def test_an_old_pre_rollback_mark_is_not_protected() -> None:
    marks = [mk(0, age_days=20, kind="pre-rollback"), mk(1, age_days=1), mk(2)]
    assert ids(plan_evictions(marks, Retention(max_marks=2), NOW)) == [("m1-0", "age")]
    assert not protected(marks[0], newest_ids(marks), Retention(), NOW)
    young = mk(3, age_days=13.9, kind="pre-rollback")
    assert protected(young, newest_ids(marks), Retention(), NOW)


def test_age_evicts_only_what_is_past_the_window_and_never_the_newest_or_pinned() -> None:
    marks = [mk(0, age_days=30, pinned=True), mk(1, age_days=15), mk(2, age_days=13), mk(3, age_days=40)]
    # m1-3 is the newest by seq although oldest by time: kept
    assert ids(plan_evictions(marks, Retention(), NOW)) == [("m1-1", "age")]


def test_count_is_per_workspace_and_the_result_is_oldest_first() -> None:
    marks = [mk(i, ws=1, age_days=10 - i) for i in range(3)]
    marks += [mk(i, ws=2, age_days=9.5 - i) for i in range(3)]
    got = ids(plan_evictions(marks, Retention(max_marks=2), NOW))
    assert got == [("m1-0", "count"), ("m2-0", "count")]
    assert ids(plan_evictions(marks, Retention(max_marks=3), NOW)) == []


def test_budget_pressure_offers_only_unprotected_marks_oldest_first() -> None:
    marks = [
        mk(0, age_days=3),
        mk(1, age_days=4, kind="pre-rollback"),  # young pre-rollback: never a candidate
        mk(2, age_days=5, pinned=True),
        mk(3, age_days=2),
        mk(4, age_days=1),  # newest of workspace 1
        mk(0, ws=2, age_days=6),  # the only, so newest, mark of workspace 2
    ]
    got = [m.id for m in budget_candidates(marks, Retention(budget_bytes=1), NOW)]
    assert got == ["m1-0", "m1-3"]
    old_pre = mk(5, age_days=15, kind="pre-rollback")
    got = [m.id for m in budget_candidates([*marks, mk(6), old_pre], Retention(), NOW)]
    assert got == ["m1-5", "m1-0", "m1-3", "m1-4"]


def test_newest_is_by_sequence_per_workspace() -> None:
    marks = [mk(2, age_days=5), mk(7, age_days=9), mk(1, ws=3)]
    assert newest_ids(marks) == {1: "m1-7", 3: "m3-1"}


# Written to kill the mutants mutmut found surviving here (docs/reliability.md).


def test_the_age_window_edge_is_neither_older_nor_younger() -> None:
    """Evicted for age: older than the window; protected pre-rollback: younger than it. A mark
    exactly the window's age is neither: kept for its age, unprotected under count pressure."""
    marks = [mk(0, age_days=14), mk(1, age_days=14, kind="pre-rollback"), mk(2, age_days=1), mk(3)]
    assert ids(plan_evictions(marks, Retention(), NOW)) == []
    assert not protected(marks[1], newest_ids(marks), Retention(), NOW)
    assert ids(plan_evictions(marks, Retention(max_marks=3), NOW)) == [("m1-0", "count")]
    assert ids(plan_evictions(marks, Retention(max_marks=2), NOW)) == [("m1-0", "count"), ("m1-1", "count")]


def test_each_age_eviction_counts_once_against_the_excess() -> None:
    marks = [mk(0, age_days=20), *(mk(i, age_days=6 - i) for i in range(1, 6))]
    # six marks, three allowed: one goes for its age, two more for the count
    assert ids(plan_evictions(marks, Retention(max_marks=3), NOW)) == [
        ("m1-0", "age"),
        ("m1-1", "count"),
        ("m1-2", "count"),
    ]
