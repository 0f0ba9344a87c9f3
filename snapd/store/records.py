"""The catalog's records as plain frozen values: workspaces, marks, versions.

Everything above the store works with these, never with SQLite rows; ``MARK_COLUMNS`` and
``mark_from_row`` are the one place a mark row's layout is spelled out.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, NamedTuple

from snapd.store import objects, trees


@dataclass(frozen=True)
class WorkspaceRecord:
    """A workspace as the catalog holds it (the live one is ``capture.workspace.Workspace``)."""

    id: int
    root: bytes
    created: int
    watching: bool


@dataclass(frozen=True)
class Mark:
    id: str
    workspace: int
    seq: int
    label: str
    message: str | None
    agent: str | None
    session: str | None
    created: int  # ns since the epoch
    git_head: str | None
    tree: str
    kind: str
    pinned: bool
    summary: dict[str, Any]
    rules: str | None = None  # object key of the rule inputs outside the tree (ignore.RuleInputs)
    root_mode: int | None = None  # the workspace root's own permission bits
    # A pre-rollback mark: the paths its rollback created, absent before it whatever the rules
    # said (an undo deletes them even where the mark's rules ignore them)
    absent: tuple[bytes, ...] = ()
    # object key of the names of the top-most ignored entries present (snapd.store.ignored);
    # None: not recorded (a mark from before store format 8)
    ignored: str | None = None


class MarkHead(NamedTuple):
    """What retention judges a mark by, and what an eviction records: the whole :class:`Mark`
    of every mark (its summary parsed) was 30 MB of transient objects in the daemon's GC at
    8,800 marks (issue 33)."""

    id: str
    workspace: int
    seq: int
    label: str
    created: int
    kind: str
    pinned: bool


MARK_HEAD_COLUMNS = "id, workspace, seq, label, created, kind, pinned"


def mark_head_from_row(row: tuple[Any, ...]) -> MarkHead:
    return MarkHead(row[0], row[1], row[2], row[3], row[4], row[5], bool(row[6]))


@dataclass(frozen=True)
class Version:
    path: bytes
    time: int
    entry: trees.Entry | None  # None: the path was deleted


@dataclass(frozen=True)
class State:
    """What a commit captured (``states``, format 8): the workspace's head tree at ``time`` and
    what a mark taken then records beside its tree. ``partial``: a capture between marks that
    saw only part of the tree (events could not be trusted: only marks scan everything)."""

    workspace: int
    time: int  # ns since the epoch: when its capture began, as its versions' time
    tree: str
    rules: str | None
    root_mode: int | None
    ignored: str | None = None  # key of the ignored names then (snapd.store.ignored)
    partial: bool = False


STATE_COLUMNS = "workspace, time, tree, rules, root_mode, ignored, partial"


def state_row(s: State) -> tuple[Any, ...]:
    return (s.workspace, s.time, s.tree, s.rules, s.root_mode, s.ignored, int(s.partial))


def state_from_row(row: tuple[Any, ...]) -> State:
    return State(row[0], row[1], row[2], row[3], row[4], row[5], bool(row[6]))


MARK_COLUMNS = (
    "id, workspace, seq, label, message, agent, session, created, git_head, tree, kind, pinned, summary,"
    " rules, root_mode, absent, ignored"
)


def encode_absent(paths: tuple[bytes, ...]) -> bytes | None:
    return b"\0".join(paths) if paths else None


def decode_absent(raw: bytes | None) -> tuple[bytes, ...]:
    return tuple(raw.split(b"\0")) if raw else ()


def mark_from_row(row: tuple[Any, ...]) -> Mark:
    return Mark(
        id=row[0],
        workspace=row[1],
        seq=row[2],
        label=row[3],
        message=row[4],
        agent=row[5],
        session=row[6],
        created=row[7],
        git_head=row[8],
        tree=row[9],
        kind=row[10],
        pinned=bool(row[11]),
        summary=json.loads(row[12]) if row[12] else {},
        rules=row[13],
        root_mode=row[14],
        absent=decode_absent(row[15]),
        ignored=row[16],
    )


def mark_row(m: Mark, seq: int) -> tuple[Any, ...]:
    """The row of a new mark (``MARK_COLUMNS``), numbered ``seq``; :func:`mark_from_row` reads it."""
    return (
        m.id,
        m.workspace,
        seq,
        m.label,
        m.message,
        m.agent,
        m.session,
        m.created,
        m.git_head,
        m.tree,
        m.kind,
        0,
        json.dumps(m.summary),
        m.rules,
        m.root_mode,
        encode_absent(m.absent),
        m.ignored,
    )


def version_from_row(
    path: bytes, time: int, kind: str | None, mode: int | None, value: bytes | str | None
) -> Version:
    """A version from its row (``path, time, kind, mode, object``): all NULL is a deletion."""
    if kind is None:
        return Version(bytes(path), time, None)
    key = None if value is None else objects.py_key(value)
    size = objects.parse_key(key)[1] if kind != "dir" and key else 0
    return Version(bytes(path), time, trees.Entry(kind, mode or 0, size, key or ""))  # type: ignore[arg-type]
