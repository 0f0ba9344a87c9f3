"""The timeline ``snapctl ui`` shows, built from marks alone (pure: no daemon, no Textual).

Marks come as ``log`` returns them, newest first. A turn — a session's ``turn-start`` up to
its next ``turn-end`` — becomes one :class:`Row`, with the session's marks in between; a
``turn-start`` followed by another ``turn-start`` of its session is an interrupted turn, and
one with nothing after it yet is open. Every other mark is a row of its own. Rows are newest
first by their newest mark, so the turn that ended last is on top.

What a row stands for when acted on: :attr:`Row.mark` is the state the row shows (a turn's
end; an open or interrupted turn's start, the only mark it has), what ``r`` rolls back to;
:attr:`Row.span` the two references whose diff is what the row changed.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from snapd.cli.output import path_text

Mark = dict[str, Any]
State = Literal["mark", "ended", "open", "interrupted"]

TURN_START = "turn-start"
TURN_END = "turn-end"


@dataclass(frozen=True)
class Row:
    """One line of the timeline: a turn (``state`` ended, open or interrupted) or one mark."""

    marks: tuple[Mark, ...]  # oldest first; a turn's start is the first, its end the last
    state: State

    @property
    def first(self) -> Mark:
        return self.marks[0]

    @property
    def last(self) -> Mark:
        return self.marks[-1]

    @property
    def is_turn(self) -> bool:
        return self.state != "mark"

    @property
    def mark(self) -> Mark:
        """The mark the row stands for: what ``r`` rolls back to (the state after the row)."""
        return self.last if self.state in ("ended", "mark") else self.first

    @property
    def span(self) -> tuple[str, str | None]:
        """``(from, to)`` references of what the row changed; ``to`` None: up to now (an open
        turn). A lone mark: from the mark before it (``ID~1``)."""
        if self.state == "mark":
            return f"{self.first['id']}~1", self.first["id"]
        if self.state == "ended":
            return self.first["id"], self.last["id"]
        return self.first["id"], None

    @property
    def created(self) -> float:
        return float(self.first["created"])

    @property
    def label(self) -> str:
        if not self.is_turn:
            return str(self.first["label"])
        return "turn" if self.state == "ended" else f"turn ({self.state})"

    @property
    def agent(self) -> str:
        return str(self.first.get("agent") or "")

    @property
    def session(self) -> str:
        return str(self.first.get("session") or "")

    @property
    def changed(self) -> int:
        """Paths changed, as the marks' summaries count them (each since the mark before it):
        a turn adds its marks after the start; a path changed twice counts twice."""
        counted = self.marks[1:] if self.is_turn else self.marks
        return sum(int((m.get("summary") or {}).get("changed", 0)) for m in counted)

    @property
    def run(self) -> str:
        """The command line a ``snapctl run`` turn ran and how it ended; "" for others."""
        run = (self.last.get("summary") or {}).get("run")
        if not run:
            return ""
        line = str(self.last.get("message") or " ".join(run.get("argv") or []))
        if run.get("signal"):
            return f"{line} (killed by {run['signal']})"
        return line if run.get("exit") is None else f"{line} (exit {run['exit']})"

    @property
    def messages(self) -> list[str]:
        return [str(m["message"]) for m in self.marks if m.get("message")]

    def paths(self) -> list[str]:
        """The example paths the marks' summaries name (what ``/`` searches)."""
        out: list[str] = []
        for m in self.marks:
            for names in ((m.get("summary") or {}).get("examples") or {}).values():
                out += [path_text(p) for p in names]
        return out

    @property
    def key(self) -> str:
        """Stable across reloads: the id of the row's first mark."""
        return str(self.first["id"])


def group(marks: Sequence[Mark]) -> list[Row]:
    """``marks`` (newest first, as ``log`` lists them) as rows, newest first."""
    done: list[Row] = []
    open_turns: dict[str, list[Mark]] = {}
    for m in reversed(marks):
        session = m.get("session")
        label = m.get("label")
        if session and label == TURN_START:
            if session in open_turns:  # a start with no end before the next: interrupted
                done.append(Row(tuple(open_turns.pop(session)), "interrupted"))
            open_turns[session] = [m]
        elif session and session in open_turns:
            open_turns[session].append(m)
            if label == TURN_END:
                done.append(Row(tuple(open_turns.pop(session)), "ended"))
        else:
            done.append(Row((m,), "mark"))
    done += [Row(tuple(ms), "open") for ms in open_turns.values()]
    done.sort(key=lambda r: (float(r.last["created"]), int(r.last.get("seq") or 0)), reverse=True)
    return done


def matches(row: Row, text: str) -> bool:
    """``/``: ``text`` (case-insensitive) in the row's labels, agent, session, messages, run
    or changed paths. Empty text matches every row."""
    needle = text.strip().lower()
    if not needle:
        return True
    hay: list[str] = [row.label, row.agent, row.session, row.run, *row.messages, *row.paths()]
    hay += [str(m["label"]) for m in row.marks] + [str(m["id"]) for m in row.marks]
    return any(needle in h.lower() for h in hay)


def filtered(rows: Iterable[Row], text: str) -> list[Row]:
    return [r for r in rows if matches(r, text)]
