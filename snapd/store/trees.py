"""Merkle directory trees: one node per directory, a snapshot is the key of its root node.

A node is the sorted list of a directory's entries (name bytes, kind, permission bits, size,
object key; a directory's key is its own node's key). Nodes are stored as ordinary objects,
so identical directories are stored once and shared between snapshots, and every node read is
verified like any other object. How a node becomes bytes is :mod:`snapd.store.nodes`; how two
trees are compared is :mod:`snapd.store.treediff`.

Everything here is pure: reading and writing nodes goes through the ``load``/``save``
callables the store passes in. Editing a tree touches only the nodes on the paths that
changed — O(changed paths x depth) — and leaves a directory with no change as the same key,
so unchanged subtrees stay shared and a diff can skip them by key.

Names are raw bytes (Linux file names need not be UTF-8); paths are ``b"/"``-joined relative
paths without a leading slash.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Literal, Protocol, TypeGuard

Kind = Literal["file", "symlink", "dir", "uncaptured"]


@dataclass(frozen=True, slots=True)
class Entry:
    """One captured path. For a symlink the object holds the link's target text.

    Kind ``uncaptured``: a path that was there but whose content could not be captured (over
    the size cap, unreadable, a special file). Its key is no object: it names the reason and
    what a stat said (see :func:`uncaptured`), so an unchanged path gives an equal entry.
    """

    kind: Kind
    mode: int
    size: int
    key: str


@dataclass(frozen=True, slots=True)
class Dir:
    """A change that makes a path a directory with ``mode``, keeping its contents if it was one.

    ``listed=False``: the directory could not be listed, so what else it holds is unknown: the
    entry is flagged :data:`UNLISTED` and holds only the children captured by name (as last
    seen: they stay in the stat cache and are checked by name).
    """

    mode: int
    listed: bool = True

    @property
    def flags(self) -> int:
        """Its entry's ``size``: :data:`UNLISTED` when it could not be listed, else 0."""
        return 0 if self.listed else UNLISTED


UNLISTED = 1
"""A directory entry's ``size``: its contents are unknown (it could not be listed). Directory
entries otherwise have size 0; a rollback leaves what lies under an unlisted directory."""


def unlisted(e: Entry | None) -> bool:
    return e is not None and e.kind == "dir" and e.size == UNLISTED


_UNCAPTURED = "!"  # the first character of an uncaptured entry's key (object keys are hex)


def uncaptured(reason: str, mode: int, size: int, stamp: tuple[int, int] | None) -> Entry:
    """The entry of a path whose content could not be captured, for ``reason``. ``stamp``:
    (inode, mtime_ns) as a stat saw them (None: unknown), in decimal: any value a stat gives.

    ``size`` is what the stat said, which a node holds as a u64: a negative one (a FUSE
    mount's size past 2^63 reads so) is recorded as 0 with the real value in the stamp."""
    seen = "?" if stamp is None else f"{stamp[0]}.{stamp[1]}"
    if not 0 <= size < 1 << 64:
        seen, size = f"{seen}.{size}", 0
    text = reason.encode("ascii", "replace").decode("ascii")
    return Entry("uncaptured", mode, size, f"{_UNCAPTURED}{seen}!{text}"[:255])


def is_uncaptured(e: Entry | None) -> TypeGuard[Entry]:
    return e is not None and e.kind == "uncaptured"


def uncaptured_reason(e: Entry) -> str:
    """Why ``e`` (an ``uncaptured`` entry) holds no content."""
    return e.key.split("!", 2)[2] if e.key.count("!") >= 2 else "not captured"


def holds_object(e: Entry) -> bool:
    """Whether ``e.key`` names a stored object (a file's or symlink's content, a node)."""
    return e.kind != "uncaptured"


Change = Entry | Dir | None  # None removes the path (and everything under it)
Node = Mapping[bytes, Entry]
"""A directory's entries by name. Read-only: the store's nodes are packed
(:class:`snapd.store.nodes.PackedNode`), decoded an entry at a time; an edit is a new node."""
Load = Callable[[str], Node]


class Save(Protocol):
    """Store a node; return its key. ``base``: the node it replaces (the same directory's
    previous node), which the store may encode it against; ``changed``: the only names at
    which ``node`` may differ from ``base`` (None: unknown), so its encoding can be spliced
    from the base's (:func:`nodes.splice`)."""

    def __call__(self, node: Node, base: str | None = None, changed: Iterable[bytes] | None = None, /) -> str:
        ...


DEFAULT_DIR_MODE = 0o755
_BAD_NAMES = (b"", b".", b"..")  # no name in a relative path


def split_path(path: bytes) -> list[bytes]:
    parts = path.split(b"/")
    if any(part in _BAD_NAMES for part in parts):
        raise ValueError(f"invalid relative path {path!r}")
    return parts


class _Pending:
    __slots__ = ("change", "has_change", "children", "adds_below")

    def __init__(self) -> None:
        self.change: Change = None
        self.has_change = False
        self.children: dict[bytes, _Pending] = {}
        self.adds_below = False  # some change below this path creates or sets something


def _nest(changes: Mapping[bytes, Change]) -> _Pending:
    top = _Pending()
    for path, change in changes.items():
        node = top
        for part in split_path(path):
            if change is not None:
                node.adds_below = True
            node = node.children.setdefault(part, _Pending())
        node.change = change
        node.has_change = True
    return top


def apply_changes(load: Load, save: Save, root: str | None, changes: Mapping[bytes, Change]) -> str:
    """Return the key of ``root`` with ``changes`` applied (``root=None``: the empty tree).

    A removal applies before additions below the same path, so ``{a: None, a/b: ...}``
    replaces ``a``. Missing parent directories are created with mode 0755 unless the changes
    give them a ``Dir``.
    """
    if root is None:
        built = _build(save, changes)
        if built is not None:
            return built
    return _apply(load, save, root, _nest(changes))


def _build(save: Save, changes: Mapping[bytes, Change]) -> str | None:
    """``apply_changes`` from the empty tree, bottom-up, in the order a walk gives the
    changes: the baseline of a big workspace.

    A walk (:func:`snapd.capture.reader.walk`) gives each directory before what it holds, and
    everything below a directory together; so each directory is saved as soon as the changes
    leave it, and only the directories from the root down to the current path are held (the
    whole tree at once was a 500k-file baseline's largest transient). None, for the general
    algorithm, when the changes come in another order (a directory needed again after it was
    saved, or given after a path below it) or a path is given both as a file and as a
    directory's ancestor; a walk of a real tree gives neither.
    """
    # The directories open, from the root down: (path, path + b"/", entries, mode, flags).
    # In its parent's entries, a directory not opened yet is its Dir change, an open one _OPEN.
    open_dirs: list[tuple[bytes, bytes, dict[bytes, Any], int, int]] = [(b"", b"", {}, 0, 0)]
    empty: list[str] = []  # the empty node's key, once saved

    def saved(entries: dict[bytes, Any]) -> str:
        for name, e in entries.items():
            if isinstance(e, Dir):  # never opened: it holds nothing
                if not empty:
                    empty.append(save({}))
                entries[name] = Entry("dir", e.mode, e.flags, empty[0])
        return save(entries)

    def close() -> None:
        path, _, entries, mode, flags = open_dirs.pop()
        open_dirs[-1][2][path.rpartition(b"/")[2]] = Entry("dir", mode, flags, saved(entries))

    for path, change in changes.items():
        if change is None:
            continue
        parent, slash, name = path.rpartition(b"/")
        if name in _BAD_NAMES or (slash and not parent):
            raise ValueError(f"invalid relative path {path!r}")
        while open_dirs[-1][0] != parent and len(open_dirs) > 1 and not parent.startswith(open_dirs[-1][1]):
            close()
        top = open_dirs[-1][0]
        if top != parent:  # open the directories from the top one down to the parent
            for part in (parent[len(top) + 1 :] if top else parent).split(b"/"):
                if part in _BAD_NAMES:
                    raise ValueError(f"invalid relative path {path!r}")
                above = open_dirs[-1]
                was = above[2].get(part)
                if was is None:  # only mentioned by what it holds: made with the default mode
                    mode, flags = DEFAULT_DIR_MODE, 0
                elif isinstance(was, Dir):
                    mode, flags = was.mode, was.flags
                else:  # saved already, or a file: not a walk's order
                    return None
                above[2][part] = _OPEN
                sub = above[1] + part
                open_dirs.append((sub, sub + b"/", {}, mode, flags))
        entries = open_dirs[-1][2]
        was = entries.get(name)
        if was is not None and not (isinstance(change, Dir) and isinstance(was, Dir)):
            return None  # a directory given after a path below it, or a file given twice
        entries[name] = change
    while len(open_dirs) > 1:
        close()
    return saved(open_dirs[0][2])


_OPEN = object()  # _build: a directory being built


class _Edited(Mapping[bytes, Entry]):
    """A node with a few names set or removed (None), over the node it edits: what
    :func:`_apply` saves. A node of 20,000 names edited at one is not copied; the store
    encodes it from its base's records at the edited names (:func:`snapd.store.nodes.splice`)."""

    def __init__(self, base: Node, edits: dict[bytes, Entry | None]) -> None:
        self._base, self._edits = base, edits

    def __getitem__(self, name: bytes) -> Entry:
        if name in self._edits:
            entry = self._edits[name]
            if entry is None:
                raise KeyError(name)
            return entry
        return self._base[name]

    def __iter__(self) -> Iterator[bytes]:
        edits = self._edits
        kept = (n for n in self._base if n not in edits)
        return iter(sorted([*kept, *(n for n, e in edits.items() if e is not None)]))

    def __len__(self) -> int:
        base = self._base
        added = sum(1 for n, e in self._edits.items() if e is not None and n not in base)
        removed = sum(1 for n, e in self._edits.items() if e is None and n in base)
        return len(base) + added - removed


def _apply(load: Load, save: Save, key: str | None, pending: _Pending) -> str:
    original: Node = load(key) if key is not None else {}
    edits: dict[bytes, Entry | None] = {}
    for name, sub in pending.children.items():
        was: Entry | None = original.get(name)
        entry = was
        if sub.has_change:
            ch = sub.change
            if ch is None:
                entry = None
            elif isinstance(ch, Dir):
                keep = entry.key if entry is not None and entry.kind == "dir" else None
                entry = Entry("dir", ch.mode, ch.flags, keep or "")
            else:
                entry = ch
        if sub.children and (sub.adds_below or (entry is not None and entry.kind == "dir")):
            if entry is None or entry.kind != "dir":
                entry = Entry("dir", DEFAULT_DIR_MODE, 0, "")
            entry = Entry("dir", entry.mode, entry.size, _apply(load, save, entry.key or None, sub))
        elif entry is not None and entry.kind == "dir" and not entry.key:
            entry = Entry("dir", entry.mode, entry.size, save({}))
        if entry != was:
            edits[name] = entry
    if key is not None and not edits:
        return key  # nothing changed here: no node to write (scans re-assert every directory)
    return save(_Edited(original, edits), key, edits.keys())


def load_levels(
    load_many: Callable[[list[str]], None],
    cached: Callable[[str], Node | None],
    root: str,
    paths: Iterable[bytes],
) -> None:
    """Have ``load_many`` read the nodes of the directories above ``paths`` under ``root``
    (those :func:`apply_changes` loads), one call per level of the tree instead of one read
    per node; ``cached`` gives a node it read (or None)."""
    split = [split_path(p) for p in paths]
    depth = 0
    level: dict[tuple[bytes, ...], str] = {(): root}
    while level:
        load_many(list(level.values()))
        below: dict[tuple[bytes, ...], str] = {}
        for parts in split:
            above = level.get(tuple(parts[:depth])) if len(parts) > depth + 1 else None
            node = cached(above) if above is not None else None
            entry = node.get(parts[depth]) if node is not None else None
            if entry is not None and entry.kind == "dir" and entry.key:
                below[tuple(parts[: depth + 1])] = entry.key
        depth, level = depth + 1, below


def lookup(load: Load, root: str, path: bytes) -> Entry | None:
    key = root
    parts = split_path(path)
    for i, part in enumerate(parts):
        entry = load(key).get(part)
        if entry is None:
            return None
        if i == len(parts) - 1:
            return entry
        if entry.kind != "dir":
            return None
        key = entry.key
    return None


def _by_name(item: tuple[bytes, Entry]) -> bytes:
    return item[0]


def walk(load: Load, root: str, prefix: bytes = b"") -> Iterator[tuple[bytes, Entry]]:
    """Every (path, entry) under ``root``, parents before children, names in byte order."""
    for name, entry in sorted(load(root).items(), key=_by_name):
        path = prefix + name
        yield path, entry
        if entry.kind == "dir":
            yield from walk(load, entry.key, path + b"/")
