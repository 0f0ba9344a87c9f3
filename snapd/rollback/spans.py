"""What a revert takes back, found from the marks: one turn (``revert --turn M``) or every turn
of a session (``revert --session S``), as spans of the history (docs/rollback.md, "Revert").

A turn runs from its ``turn-start`` mark to the session's next ``turn-end`` — or to its next
``turn-start`` when the turn never ended (interrupted). What changed between two marks belongs
to whichever turns were open then: when another session's turn was open during part of a
turn too, that part's changes cannot be told apart by time, so the turn is cut at the marks
where the set of other open turns changes, and each :class:`Part` names the other sessions
open in it (the revert refuses to take back a path changed in such a part). Turns that follow
one another (S, T, S, T) are exact: no part of one has another open.

Pure functions over :class:`Mark` lists, newest first as the store returns them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from snapd.errors import UsageError
from snapd.store.records import Mark

TURN_START = "turn-start"
TURN_END = "turn-end"


@dataclass(frozen=True)
class Part:
    """The changes from ``start`` to ``end`` (None: to the workspace now). ``session``: the
    session whose turn it is part of (None: a span between two marks); ``others``: the other
    sessions whose turn was open during it (their changes and these cannot be told apart)."""

    start: Mark
    end: Mark | None
    others: tuple[str, ...] = ()
    session: str | None = None


def _oldest_first(marks: Sequence[Mark]) -> list[Mark]:
    return sorted(marks, key=lambda m: m.seq)


def turn_end(marks: Sequence[Mark], m: Mark) -> Mark:
    """The mark turn ``m`` ended with: its session's next ``turn-end``, or its next
    ``turn-start`` (the turn was interrupted). Refused for a mark that starts no turn and for
    a turn that has not ended."""
    if m.label != TURN_START or not m.session:
        raise UsageError(
            f"mark {m.id} ({m.label}) does not start a turn: --turn takes a session's "
            f"{TURN_START} mark (`snapctl log` shows them)"
        )
    for later in _oldest_first(marks):
        if later.seq > m.seq and later.session == m.session and later.label in (TURN_START, TURN_END):
            return later
    raise UsageError(f"turn {m.id} has not ended: use `snapctl rollback --to {m.id}`")


def turn_span(marks: Sequence[Mark], m: Mark) -> tuple[Mark, Mark]:
    """Turn ``m`` as (its start, its end)."""
    return m, turn_end(marks, m)


def turn_parts(marks: Sequence[Mark], m: Mark) -> list[Part]:
    """Turn ``m`` cut where the other sessions' open turns change, oldest part first."""
    start, end = turn_span(marks, m)
    return _cut(_oldest_first(marks), start, end)


def session_spans(marks: Sequence[Mark], session: str, since: Mark | None = None) -> list[Part]:
    """Every turn of ``session`` that started after ``since`` (all of them when None), each cut
    as :func:`turn_parts` cuts it: the parts newest first, the order a revert applies them."""
    ordered = _oldest_first(marks)
    starts = [m for m in ordered if m.session == session and m.label == TURN_START and _after(m, since)]
    if not starts:
        after = f" after {since.id} ({since.label})" if since is not None else ""
        raise UsageError(
            f"session {session} has no turn{after} in this workspace (`snapctl log` lists turns)"
        )
    parts: list[Part] = []
    for s in starts:
        parts.extend(_cut(ordered, s, turn_end(ordered, s)))
    return parts[::-1]


def later_sessions(marks: Sequence[Mark], parts: Sequence[Part]) -> list[tuple[str, str | None]]:
    """The (session, agent) pairs, other than the reverted ones, with a mark after the oldest
    part's start: the sessions whose later work a revert of ``parts`` keeps (oldest first)."""
    if not parts:
        return []
    first = min(p.start.seq for p in parts)
    reverted = {p.session for p in parts}
    found: dict[str, str | None] = {}
    for m in _oldest_first(marks):
        if m.seq > first and m.session and m.session not in reverted:
            found.setdefault(m.session, m.agent)
    return list(found.items())


def _after(m: Mark, since: Mark | None) -> bool:
    """Whether ``m`` was taken after ``since`` (a time reference: after its instant)."""
    if since is None:
        return True
    return m.created > since.created if since.kind == "time" else m.seq > since.seq


def _open_at(ordered: Sequence[Mark], upto: Mark) -> set[str]:
    """The sessions whose turn is open just after mark ``upto``."""
    open_: set[str] = set()
    for m in ordered:
        if m.seq > upto.seq:
            break
        _turn(open_, m)
    return open_


def _turn(open_: set[str], m: Mark) -> None:
    if m.session and m.label == TURN_START:
        open_.add(m.session)
    elif m.session and m.label == TURN_END:
        open_.discard(m.session)


def _cut(ordered: Sequence[Mark], start: Mark, end: Mark) -> list[Part]:
    """``start``..``end`` cut at the marks where the other sessions open change."""
    session = start.session
    open_ = _open_at(ordered, start)
    others = tuple(sorted(open_ - {session}))
    parts: list[Part] = []
    begin = start
    for m in ordered:
        if not start.seq < m.seq < end.seq or m.session == session:
            continue
        _turn(open_, m)
        now = tuple(sorted(open_ - {session}))
        if now != others:
            parts.append(Part(begin, m, others, session))
            begin, others = m, now
    parts.append(Part(begin, end, others, session))
    return parts
