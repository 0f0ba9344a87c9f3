"""Agent turns over the mark history: what a session's new mark says about its past.

An agent's hook marks ``turn-start`` when a prompt is submitted and ``turn-end`` when the turn
is over, tagged with its session. Three facts follow from the marks alone, so the daemon keeps
no per-session state of its own:

- a ``turn-start`` whose session's previous mark is also a ``turn-start`` means the turn in
  between never ended (interrupted, or the agent crashed): the new mark records the old one's
  id under ``summary.interrupted``, and ``log`` shows that turn as interrupted; so does a
  ``turn-end`` the agent reports as interrupted (Codex's ``Interrupt`` hook), at once;
- the rollbacks and undos applied in the workspace since the session's previous mark are the
  ``pre-rollback`` marks taken in between (each records what its rollback changed, under
  ``summary.rollback``): the reply lists them, so the hook can tell the model its edits are gone;
- a mark the hook gave up waiting for (a new workspace's first mark is a whole baseline) is
  flagged ``summary.late``; the session's next ``turn-start`` reply names it.

Pure functions over :class:`Mark` lists (newest first, as the store returns them).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from snapd.store.records import Mark

TURN_START = "turn-start"
TURN_END = "turn-end"


def session_last(marks: Sequence[Mark], session: str) -> Mark | None:
    """The session's newest mark in ``marks`` (newest first), or None for a new session."""
    return next((m for m in marks if m.session == session), None)


def interrupted_note(label: str, previous: Mark | None, interrupted: bool = False) -> dict[str, Any]:
    """``{"interrupted": ID}`` when a turn starts while the session's last turn (ID) never ended,
    or ends by the user's interrupt (``interrupted``) while turn ID is open."""
    if previous is None or previous.label != TURN_START:
        return {}
    if label == TURN_START or (interrupted and label == TURN_END):
        return {"interrupted": previous.id}
    return {}


def rollbacks_between(marks: Sequence[Mark], previous: Mark | None, mark: Mark) -> list[dict[str, Any]]:
    """The rollbacks (and undos) applied after ``previous`` and before ``mark``, oldest first;
    none when there is no previous mark (a new session has nothing to be told)."""
    if previous is None:
        return []
    out = []
    for m in reversed(marks):
        if m.kind == "pre-rollback" and previous.seq < m.seq < mark.seq:
            record = m.summary.get("rollback")
            if isinstance(record, dict):
                out.append({"pre_rollback": m.id, "created": m.created / 1e9, **record})
    return out


def late_in_last_turn(marks: Sequence[Mark], session: str, mark: Mark) -> list[dict[str, Any]]:
    """This session's marks flagged ``late`` from its previous ``turn-start`` on (the new
    ``mark`` excluded): what the notice of the next turn must own up to."""
    out = []
    for m in marks:
        if m.session != session or m.id == mark.id or m.seq > mark.seq:
            continue
        if m.summary.get("late"):
            out.append({"id": m.id, "label": m.label})
        if m.label == TURN_START:
            break
    return out
