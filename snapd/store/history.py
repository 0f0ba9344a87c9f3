"""History between marks: a file's versions, and the workspace as captured at an instant.

**The workspace at instant T** (docs/rollback.md, "Time targets") is what a mark taken at T
would hold. Every commit — a capture between marks, a mark — records a *state* (format 8:
``states``): its head tree, with the uncaptured entries and unlisted directories a mark's tree
has, and the rule inputs outside the tree and the root's mode of that moment. T takes the
newest state recorded at or before it, so the rules, the limits (over the cap, special files,
unreadable paths) and the modes of then judge the rollback, as they would for a mark. A state
is recorded when a capture reads something, and also when only the rules or the root's mode
changed. Between marks, a workspace whose events cannot be trusted (a watch shortfall, a file
system without events) sees only part of the tree, so such a capture's state is *partial* and T
resolves to the newest complete one (a mark's), and says so.

The *base* is the newest mark taken at or before T — not a ``pre-rollback`` mark when another
is there, since such a mark also holds paths that today's rules leave out. It names what T was
built from, and the versions captured after it up to the state give each path's capture time.
A state's time, like its versions', is when the capture that read it began (typing a version's
time back names a state that holds it); a mark's time is taken after every read of its commit,
under the same workspace lock: so "after the base" is exactly "not yet in the base".

History older than format 8 has no states: there T is rebuilt from the base mark and every
version captured after it up to T, replayed oldest first (:func:`replay`):

- a deletion, or a path that became a file or symlink, replaces the path *and everything under
  it*: what was below it in the base, and any version below it replayed before, is gone (a
  directory moved away has one deletion row, not one per file);
- a directory's row sets its mode and keeps its contents.

Such a rebuild is exact only where every version after the base is still there: retention
deletes versions (and states) older than its age window and records where
(``workspaces.pruned_before``), and a time whose base is older than that is refused. It judges
by the base mark's outside rules and root mode, keeps a path dropped by a rule change or skipped
(over the size cap) at its last captured version, and knows nothing of paths never captured
(FIFOs, unreadable files). What no state can know either: changes made while the daemon was
down carry the time of the restart that found them.

**A file's history** (:func:`file_steps`) lists its versions oldest first, without the
re-reads that found it unchanged, with the deletions of a directory above it, and with the
other name its content moved from or to in the same capture (a rename).

Everything here reads the catalog or is pure; the rebuilt tree's nodes are written through a
batch (they are ordinary objects, and GC reclaims them after its grace period).
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from snapd import timeref
from snapd.errors import NotFound, UsageError
from snapd.paths import ancestors, encode_path, strictly_below
from snapd.store import objects, trees
from snapd.store.records import STATE_COLUMNS, Mark, State, Version, state_from_row, version_from_row
from snapd.store.store import Store

FUTURE_SLACK_NS = 2 * timeref.NS  # clocks of client and daemon may differ this much


@dataclass(frozen=True)
class AtTime:
    """The workspace as captured at ``instant`` (ns): its tree, and the rule inputs and root
    mode recorded with it, as a mark taken then would hold them."""

    instant: int
    base: Mark
    tree: str
    used: dict[bytes, int]  # path -> capture time of the version it takes
    replaced: frozenset[bytes]  # replayed paths that replaced all below them (deleted, or not a dir)
    replayed: int  # versions captured after the base that the rebuild holds
    rules: str | None = None
    root_mode: int | None = None
    ignored: str | None = None  # key of the ignored names then (snapd.store.ignored)
    # The captures between the last complete state and the instant saw only part of the tree
    # (a watch shortfall, no events): the instant resolves to that state (a mark's), and says so.
    partial: bool = False


@dataclass(frozen=True)
class Step:
    """One change in a file's history (oldest first in :func:`file_steps`)."""

    time: int
    entry: trees.Entry | None  # None: deleted
    status: str  # created, recreated, modified, mode, type, deleted
    via: bytes | None = None  # deleted with this directory
    moved: bytes | None = None  # renamed: its content came from (created) or went to (deleted) here


# -- the workspace at an instant --------------------------------------------------------------


def replay(
    load: trees.Load, save: trees.Save, base: str, versions: Iterable[Version]
) -> tuple[str, dict[bytes, int], frozenset[bytes]]:
    """``base`` with ``versions`` (oldest first) applied; each replayed path's version time;
    the paths replaced with everything below them (pure)."""
    replaced: dict[bytes, None] = {}
    final: dict[bytes, tuple[int, trees.Change]] = {}
    for v in versions:
        if v.entry is None or v.entry.kind != "dir":
            for p in [p for p in final if strictly_below(p, v.path)]:
                del final[p]
            replaced[v.path] = None
        change: trees.Change = (
            trees.Dir(v.entry.mode) if v.entry is not None and v.entry.kind == "dir" else v.entry
        )
        final[v.path] = (v.time, change)
    tree = base
    if replaced:  # first away with what the base held there, then the state at the instant
        tree = trees.apply_changes(load, save, tree, dict.fromkeys(replaced))
    if final:
        tree = trees.apply_changes(load, save, tree, {p: c for p, (_, c) in final.items()})
    return tree, {p: t for p, (t, _) in final.items()}, frozenset(replaced)


def pruned_before(store: Store, ws: int) -> int | None:
    """The time (ns) before which retention has deleted this workspace's versions, if it has."""
    row = store.catalog.read().execute("SELECT pruned_before FROM workspaces WHERE id=?", (ws,)).fetchone()
    return int(row[0]) if row and row[0] else None


def _versions_between(store: Store, ws: int, after: int, until: int) -> list[Version]:
    rows = store.catalog.read().execute(
        "SELECT path, time, kind, mode, object FROM versions"
        " WHERE workspace=? AND time>? AND time<=? ORDER BY time, id",
        (ws, after, until),
    )
    return [version_from_row(*r) for r in rows]


def base_mark(marks: Sequence[Mark], instant: int) -> Mark | None:
    """The mark a rebuild at ``instant`` starts from (``marks`` newest first; pure)."""
    before = [m for m in marks if m.created <= instant]
    plain = [m for m in before if m.kind != "pre-rollback"]
    chosen = plain or before
    return chosen[0] if chosen else None


def history_start(store: Store, ws: int, marks: Sequence[Mark]) -> Mark | None:
    """The workspace's baseline, which a time before its history resolves to
    (docs/rollback.md): the capture that began its history, when it is still the oldest mark
    and retention evicted none (else what came before the oldest kept mark is unknown)."""
    if marks and marks[-1].kind == "baseline" and not store.evictions(ws):
        return marks[-1]
    return None


def _shown(ns: int) -> str:
    """An instant in a message: the daemon's local time with its offset (timeref.shown)."""
    return timeref.shown(ns, lambda t: time.localtime(t).tm_gmtoff)


def _state_at(store: Store, ws: int, instant: int) -> tuple[State | None, bool]:
    """The newest complete state recorded at or before ``instant``, and whether a partial one
    came after it (format 8 on: older history has none)."""
    db = store.catalog.read()
    row = db.execute(
        f"SELECT {STATE_COLUMNS} FROM states WHERE workspace=? AND time<=? AND partial=0"
        " ORDER BY time DESC, id DESC LIMIT 1",
        (ws, instant),
    ).fetchone()
    if row is None:
        return None, False
    state = state_from_row(row)
    later = db.execute(
        "SELECT 1 FROM states WHERE workspace=? AND time>? AND time<=? AND partial=1 LIMIT 1",
        (ws, state.time, instant),
    ).fetchone()
    return state, later is not None


def _next_state(store: Store, ws: int, after: int) -> int | None:
    """When the first state after ``after`` was recorded (None: none yet)."""
    row = store.catalog.read().execute(
        "SELECT MIN(time) FROM states WHERE workspace=? AND time>?", (ws, after)
    ).fetchone()
    return int(row[0]) if row and row[0] is not None else None


def _times_used(versions: Iterable[Version]) -> tuple[dict[bytes, int], frozenset[bytes]]:
    """Each path's latest version time, and the paths replaced with all below them (pure: what
    :func:`replay` reports, without building the tree)."""
    used: dict[bytes, int] = {}
    replaced: dict[bytes, None] = {}
    for v in versions:
        if v.entry is None or v.entry.kind != "dir":
            for p in [p for p in used if strictly_below(p, v.path)]:
                del used[p]
            replaced[v.path] = None
        used[v.path] = v.time
    return used, frozenset(replaced)


def at_time(store: Store, ws: int, instant: int, now: int | None = None) -> AtTime:
    """The workspace ``ws`` as captured at ``instant`` (its baseline before its history began:
    the result's ``instant`` is then the baseline's); NotFound when history cannot tell."""
    now = time.time_ns() if now is None else now
    when = _shown(instant)
    if instant > now + FUTURE_SLACK_NS:
        raise UsageError(f"{when} is in the future (the daemon's clock reads {_shown(now)})")
    marks = store.marks(ws)
    base = base_mark(marks, instant)
    pruned = pruned_before(store, ws)
    if base is None:
        base = history_start(store, ws, marks)
        if base is None:
            first = (
                f"its oldest kept mark is {marks[-1].id} at {_shown(marks[-1].created)}"
                if marks
                else ("it has no marks")
            )
            evicted = " (older marks were pruned by retention)" if store.evictions(ws) else ""
            raise NotFound(f"nothing was captured in this workspace at or before {when}: {first}{evicted}")
        instant = base.created  # before the workspace's history: its baseline stands in
    state, partial = _state_at(store, ws, instant)
    if state is not None:
        # The state a commit recorded: the tree with its uncaptured entries and unlisted
        # directories, the rules and the root's mode of that moment, exactly as a mark then.
        # A state's time is its capture's start, so its own versions come at or after it,
        # and before the next capture's start.
        until = _next_state(store, ws, state.time)
        versions = _versions_between(store, ws, base.created, now if until is None else until - 1)
        used, replaced = _times_used(versions)
        return AtTime(
            instant, base, state.tree, used, replaced, len(versions), state.rules, state.root_mode,
            state.ignored, partial,
        )
    # History older than format 8 records no states: the base mark with the versions replayed.
    if pruned is not None and base.created < pruned:
        raise NotFound(
            f"the workspace at {when} cannot be rebuilt exactly: retention deleted the versions "
            f"captured before {_shown(pruned)}, and the newest mark before {when} is older "
            f"({base.id} {base.label} at {_shown(base.created)}): roll back to that mark, "
            "or to a later time"
        )
    versions = _versions_between(store, ws, base.created, instant)
    if not versions:
        return AtTime(instant, base, base.tree, {}, frozenset(), 0, base.rules, base.root_mode, base.ignored)
    with store.batch() as batch:
        tree, used, replaced = replay(batch.load_node, batch.save_node, base.tree, versions)
    return AtTime(
        instant, base, tree, used, replaced, len(versions), base.rules, base.root_mode, base.ignored
    )


def as_mark(at: AtTime) -> Mark:
    """A rollback, diff or cat target for the instant: the tree, rules, root mode and ignored
    names recorded then. Its id is the instant's
    wire form, so repeating a rollback to the same instant is recognised as a repeat."""
    b = at.base
    return Mark(
        id=timeref.wire(at.instant),
        workspace=b.workspace,
        seq=b.seq,  # whose turn changed what since: counted from the base (rollback.live)
        label="(as captured)",
        message=None,
        agent=None,
        session=None,
        created=at.instant,
        git_head=None,  # unknown between marks
        tree=at.tree,
        kind="time",
        pinned=False,
        summary={},
        rules=at.rules,
        root_mode=at.root_mode,
        ignored=at.ignored,
    )


def resolve(store: Store, ws: int, ref: str, session: str | None = None) -> tuple[Mark, AtTime | None]:
    """A mark reference, or a time reference as a target (:func:`as_mark`) with its rebuild."""
    if not timeref.is_time(ref):
        return store.resolve(ws, ref, session), None
    at = at_time(store, ws, timeref.parse_wire(ref))
    return as_mark(at), at


def version_used(at: AtTime, path: bytes) -> int | None:
    """When the version of ``path`` in the rebuild was captured (None: as its base mark holds
    it). A path under a directory replayed as deleted or replaced takes that directory's time."""
    if path in at.used:
        return at.used[path]
    for anc in reversed(ancestors(path)):
        if anc in at.replaced:
            return at.used.get(anc)
    return None


def describe(at: AtTime, paths: Iterable[bytes] = ()) -> dict[str, Any]:
    """What a time target was built from: the instant, the base mark, and for ``paths`` the
    capture time of the version each one takes (wire form: docs/protocol.md)."""
    versions = []
    for p in paths:
        t = version_used(at, p)
        versions.append(
            {"path": encode_path(p), "captured": t / 1e9 if t is not None else None, "captured_ns": t}
        )
    return {
        "instant": at.instant / 1e9,
        "instant_ns": at.instant,
        "ref": timeref.wire(at.instant),
        "base": {"id": at.base.id, "label": at.base.label, "created": at.base.created / 1e9},
        "replayed": at.replayed,
        "partial": at.partial,
        "versions": versions,
    }


# -- a file's history ---------------------------------------------------------------------------


def _status(prev: trees.Entry | None, new: trees.Entry | None, seen_deleted: bool) -> str | None:
    """How ``new`` differs from ``prev`` (None: it does not: a re-read that found it unchanged)."""
    if prev == new:
        return None
    if new is None:
        return "deleted"
    if prev is None:
        return "recreated" if seen_deleted else "created"
    if prev.kind != new.kind:
        return "type"
    if prev.key != new.key or prev.size != new.size:
        return "modified"
    return "mode"


def file_steps(store: Store, ws: int, path: bytes) -> list[Step]:
    """Every change of ``path`` still recorded, oldest first (see the module docstring)."""
    db = store.catalog.read()
    rows: list[tuple[int, int, bytes | None, Version]] = []
    for r in db.execute(
        "SELECT id, path, time, kind, mode, object FROM versions WHERE workspace=? AND path=?", (ws, path)
    ):
        rows.append((r[2], r[0], None, version_from_row(*r[1:])))
    for anc in ancestors(path):
        for r in db.execute(
            "SELECT id, time FROM versions WHERE workspace=? AND path=? AND kind IS NULL", (ws, anc)
        ):
            rows.append((r[1], r[0], anc, Version(path, r[1], None)))
    rows.sort(key=lambda r: (r[0], r[1]))
    steps: list[Step] = []
    prev: trees.Entry | None = None
    deleted = False
    for t, _, via, v in rows:
        status = _status(prev, v.entry, deleted)
        if status is None:
            continue
        moved = _moved(store, ws, path, t, prev, v.entry)
        steps.append(Step(t, v.entry, status, via if v.entry is None else None, moved))
        deleted = deleted or v.entry is None
        prev = v.entry
    return steps


def _moved(
    store: Store, ws: int, path: bytes, t: int, prev: trees.Entry | None, new: trees.Entry | None
) -> bytes | None:
    """The other name the content moved from (``path`` created) or to (``path`` deleted) in the
    same capture, if any: a rename, as the versions show it."""
    db = store.catalog.read()
    if new is not None and prev is None and new.kind != "dir":
        for (other,) in db.execute(
            "SELECT d.path FROM versions d WHERE d.workspace=? AND d.time=? AND d.kind IS NULL AND d.path!=?",
            (ws, t, path),
        ):
            if _before(store, ws, other, t, new.key) or _under_deleted(store, ws, other, t, new.key):
                return bytes(other)
        return None
    if new is None and prev is not None and prev.kind != "dir":
        for (other,) in db.execute(
            "SELECT path FROM versions WHERE workspace=? AND time=? AND object=? AND path!=?",
            (ws, t, objects.db_key(prev.key), path),
        ):
            if _before(store, ws, bytes(other), t, None):
                return bytes(other)
    return None


def _before(store: Store, ws: int, path: bytes, t: int, key: str | None) -> bool:
    """Whether ``path`` held the content ``key`` just before ``t`` (None: held nothing)."""
    row = (
        store.catalog.read()
        .execute(
            "SELECT object FROM versions WHERE workspace=? AND path=? AND time<? ORDER BY time DESC, id DESC"
            " LIMIT 1",
            (ws, path, t),
        )
        .fetchone()
    )
    return (objects.py_key(row[0]) if row and row[0] is not None else None) == key


def _under_deleted(store: Store, ws: int, top: bytes, t: int, key: str) -> bool:
    """Whether the directory ``top``, deleted at ``t``, held the content ``key`` just before
    (a file whose directory was renamed: only the directory has a deletion row)."""
    db = store.catalog.read()
    below = (ws, top + b"/", top + b"0", t)  # "/" is 0x2f and "0" the next byte
    for (p,) in db.execute(
        "SELECT DISTINCT path FROM versions WHERE workspace=? AND path>? AND path<? AND time<? AND object=?",
        (*below, objects.db_key(key)),
    ):
        if _before(store, ws, bytes(p), t, key):
            return True
    return False


# -- marks around a time --------------------------------------------------------------------------


def holding_mark(marks_oldest: Sequence[Mark], t: int) -> Mark | None:
    """The first mark taken after a version captured at ``t``: the mark it belongs to (or, if
    the file changed again before that mark, the one it precedes). None: none since."""
    for m in marks_oldest:
        if m.created >= t:
            return m
    return None


def open_turns(marks_oldest: Sequence[Mark], t: int) -> list[tuple[str, str | None]]:
    """The (session, agent) pairs whose turn was open at ``t``: a ``turn-start`` mark before it
    and no ``turn-end`` of that session between (the rule rollback uses to attribute changes)."""
    open_: dict[str, str | None] = {}
    for m in marks_oldest:
        if m.created > t:
            break
        if m.session and m.label == "turn-start":
            open_[m.session] = m.agent
        elif m.session and m.label == "turn-end":
            open_.pop(m.session, None)
    return sorted(open_.items())


def marks_changing(load: trees.Load, marks: Sequence[Mark], path: bytes) -> list[Mark]:
    """The marks (``marks`` newest first, as kept) whose tree differs from the previous kept
    mark's at ``path`` or below it: the turns that changed it (Merkle trees: a directory's
    entry changes with anything under it)."""
    out = []
    for i, m in enumerate(marks):
        prev = marks[i + 1] if i + 1 < len(marks) else None
        now_entry = trees.lookup(load, m.tree, path) if path else None
        was = trees.lookup(load, prev.tree, path) if prev is not None and path else None
        changed = m.tree != (prev.tree if prev else None) if not path else now_entry != was
        if changed:
            out.append(m)
    return out


def entry_in(store: Store, mark: Mark, path: bytes) -> trees.Entry | None:
    """What ``mark`` holds at ``path``."""
    return trees.lookup(store.load_node, mark.tree, path)
