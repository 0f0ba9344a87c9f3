"""Merkle directory trees: one node per directory, a snapshot is the key of its root node.

A node is the sorted list of a directory's entries (name bytes, kind, permission bits, size,
object key; a directory's key is its own node's key). Nodes are stored as ordinary objects,
so identical directories are stored once and shared between snapshots, and every node read is
verified like any other object.

Everything here is pure: reading and writing nodes goes through the ``load``/``save``
callables the store passes in. Editing a tree touches only the nodes on the paths that
changed — O(changed paths x depth) — and diffing skips every subtree whose key is equal.

Names are raw bytes (Linux file names need not be UTF-8); paths are ``b"/"``-joined relative
paths without a leading slash.
"""

from __future__ import annotations

import struct
from bisect import bisect_left
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import Literal, Protocol, TypeGuard

from snapd.errors import CorruptObject
from snapd.store import objects

Kind = Literal["file", "symlink", "dir", "uncaptured"]
KIND_CODES: dict[str, int] = {"file": 1, "symlink": 2, "dir": 3, "uncaptured": 4}
CODE_KINDS: dict[int, Kind] = {1: "file", 2: "symlink", 3: "dir", 4: "uncaptured"}
MAGIC = b"snapd-tree-2\n"  # store format 6: object keys as objects.db_key blobs
MAGIC_TEXT_KEYS = b"snapd-tree-1\n"  # formats 1-5: every key as ASCII text; still read
TEXT_KEY = 0x80  # in a snapd-tree-2 entry's kind code: its key is text, not a key blob
_HEAD = struct.Struct(">BIQHB")  # kind, mode, size, name length, key length


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


UNLISTED = 1
"""A directory entry's ``size``: its contents are unknown (it could not be listed). Directory
entries otherwise have size 0; a rollback leaves what lies under an unlisted directory."""


def unlisted(e: Entry | None) -> bool:
    return e is not None and e.kind == "dir" and e.size == UNLISTED


_UNCAPTURED = "!"  # the first character of an uncaptured entry's key (object keys are hex)


def uncaptured(reason: str, mode: int, size: int, stamp: tuple[int, int] | None) -> Entry:
    """The entry of a path whose content could not be captured, for ``reason``. ``stamp``:
    (inode, mtime_ns) as a stat saw them (None: unknown)."""
    seen = "?" if stamp is None else f"{stamp[0]}.{stamp[1]}"
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
Node = dict[bytes, Entry]
Load = Callable[[str], Node]


class Save(Protocol):
    """Store a node; return its key. ``base``: the node it replaces (the same directory's
    previous node), which the store may encode it against; ``changed``: the only names at
    which ``node`` may differ from ``base`` (None: unknown), so its encoding can be spliced
    from the base's (:func:`splice`)."""

    def __call__(self, node: Node, base: str | None = None, changed: Iterable[bytes] | None = None, /) -> str:
        ...


DEFAULT_DIR_MODE = 0o755


# A mark decodes and encodes the nodes above each changed path (~2,100 entries at
# django-100k), mostly of unchanged siblings: their keys' conversions are remembered. 2^13 of
# each hold ~3 MB; 2^16 held ~25 MB once a restart's reconcile had filled them, for good.
_key_bytes = lru_cache(maxsize=1 << 13)(objects.db_key)
_key_text = lru_cache(maxsize=1 << 13)(objects.py_key)


def _node_key(raw: bytes) -> str:
    try:
        return _key_text(raw)
    except CorruptObject as exc:
        raise CorruptObject("tree node is truncated or malformed") from exc


Records = tuple[list[bytes], list[bytes]]
"""A node's encoding split up: its names in byte order, and each one's encoded entry (the
encoding is :data:`MAGIC` then the entries, joined). A node edited at a few names (a mark's
nodes) is encoded from its previous version's records by :func:`splice`: a copy of two lists
and a record per changed name, not a record per entry (~2,000 entries a mark at 100k files)."""


def _record(name: bytes, e: Entry) -> bytes:
    """One entry as stored: an object key as its 17-21 byte blob; a key that is no object key
    (an uncaptured entry's text) as ASCII, its kind code with :data:`TEXT_KEY` set."""
    key = _key_bytes(e.key)
    if isinstance(key, bytes):
        return _HEAD.pack(KIND_CODES[e.kind], e.mode, e.size, len(name), len(key)) + name + key
    text = key.encode("ascii")
    return _HEAD.pack(KIND_CODES[e.kind] | TEXT_KEY, e.mode, e.size, len(name), len(text)) + name + text


def encode_records(node: Mapping[bytes, Entry]) -> Records:
    names = sorted(node)
    return names, [_record(name, node[name]) for name in names]


def joined(records: Records) -> bytes:
    """The encoding the records make up."""
    return MAGIC + b"".join(records[1])


def encode_node(node: Mapping[bytes, Entry]) -> bytes:
    """A node as stored (docs/storage.md, "Trees"). A key changed by an edit costs a delta its
    16 digest bytes, not 32 hex digits (measured: node deltas a third smaller)."""
    return joined(encode_records(node))


def splice(base: Records, node: Mapping[bytes, Entry], changed: Iterable[bytes]) -> Records:
    """The records of ``node``, which differs from the node ``base`` encodes at most at the
    names in ``changed``: equal to :func:`encode_records` of ``node``, in O(changed) records."""
    names, records = list(base[0]), list(base[1])
    for name in sorted(set(changed)):
        i = bisect_left(names, name)
        present = i < len(names) and names[i] == name
        entry = node.get(name)
        if entry is None:
            if present:
                del names[i], records[i]
        elif present:
            records[i] = _record(name, entry)
        else:
            names.insert(i, name)
            records.insert(i, _record(name, entry))
    return names, records


def decode_node(data: bytes) -> Node:
    """A node of either format: keys as blobs (``snapd-tree-2``) or as text (``snapd-tree-1``)."""
    return decode_records(data)[0]


def decode_records(data: bytes) -> tuple[Node, Records | None]:
    """:func:`decode_node`, and the encoding's records: None for a node :func:`encode_node`
    would not write so (the text-key format, or names out of order), which is never spliced."""
    if data.startswith(MAGIC):
        text_keys = False
    elif data.startswith(MAGIC_TEXT_KEYS):
        text_keys = True
    else:
        raise CorruptObject("tree node has an unknown format")
    node: Node = {}
    names: list[bytes] = []
    records: list[bytes] = []
    ordered = not text_keys
    pos = len(MAGIC)
    try:
        while pos < len(data):
            start = pos
            code, mode, size, nlen, klen = _HEAD.unpack_from(data, pos)
            pos += _HEAD.size
            name = data[pos : pos + nlen]
            pos += nlen
            raw = data[pos : pos + klen]
            if text_keys or code & TEXT_KEY:
                code, key = code & ~TEXT_KEY, raw.decode("ascii")
            else:
                key = _node_key(raw)
            pos += klen
            if not name or b"/" in name or name in (b".", b"..") or len(raw) != klen:
                raise CorruptObject("tree node holds an invalid entry")
            node[name] = Entry(CODE_KINDS[code], mode, size, key)
            if ordered:
                ordered = not names or names[-1] < name
                names.append(name)
                records.append(data[start:pos])
    except (struct.error, KeyError, UnicodeDecodeError) as exc:
        raise CorruptObject("tree node is truncated or malformed") from exc
    return node, (names, records) if ordered else None


def split_path(path: bytes) -> list[bytes]:
    parts = path.split(b"/")
    if b"" in parts or b"." in parts or b".." in parts:
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
    """``apply_changes`` from the empty tree, bottom-up: the baseline of a big workspace.

    None when a path is given both as a file and as a directory's ancestor (the general
    algorithm resolves that); a walk of a real tree never produces it.
    """
    dirs: dict[bytes, Node] = {b"": {}}
    modes: dict[bytes, int] = {}
    flags: dict[bytes, int] = {}
    for path, change in changes.items():
        if change is None:
            continue
        split_path(path)
        if isinstance(change, Dir):
            modes[path] = change.mode
            if not change.listed:
                flags[path] = UNLISTED
            dirs.setdefault(path, {})
            node = None
        else:
            node = change
        parent, _, name = path.rpartition(b"/")
        while True:
            siblings = dirs.get(parent)
            fresh = siblings is None
            if siblings is None:
                siblings = dirs[parent] = {}
            if node is not None:
                siblings[name] = node
            if not fresh or parent == b"":
                break
            node = None  # a parent directory only mentioned implicitly: make it exist
            parent, _, name = parent.rpartition(b"/")
    for path, change in changes.items():
        if isinstance(change, Entry) and path in dirs:
            return None
    keys: dict[bytes, str] = {}
    for path in sorted(dirs, key=lambda p: -p.count(b"/") if p else 1):
        if path == b"":
            continue
        keys[path] = save(dirs[path])
        parent, _, name = path.rpartition(b"/")
        mode = modes.get(path, DEFAULT_DIR_MODE)
        dirs.setdefault(parent, {})[name] = Entry("dir", mode, flags.get(path, 0), keys[path])
    return save(dirs[b""])


def _apply(load: Load, save: Save, key: str | None, pending: _Pending) -> str:
    original = load(key) if key is not None else None
    node = dict(original) if original is not None else {}
    for name, sub in pending.children.items():
        entry: Entry | None = node.get(name)
        if sub.has_change:
            ch = sub.change
            if ch is None:
                entry = None
            elif isinstance(ch, Dir):
                keep = entry.key if entry is not None and entry.kind == "dir" else None
                entry = Entry("dir", ch.mode, 0 if ch.listed else UNLISTED, keep or "")
            else:
                entry = ch
        if sub.children and (sub.adds_below or (entry is not None and entry.kind == "dir")):
            if entry is None or entry.kind != "dir":
                entry = Entry("dir", DEFAULT_DIR_MODE, 0, "")
            entry = Entry("dir", entry.mode, entry.size, _apply(load, save, entry.key or None, sub))
        elif entry is not None and entry.kind == "dir" and not entry.key:
            entry = Entry("dir", entry.mode, entry.size, save({}))
        if entry is None:
            node.pop(name, None)
        else:
            node[name] = entry
    if key is not None and node == original:
        return key  # nothing changed here: no node to write (scans re-assert every directory)
    return save(node, key, pending.children.keys())


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


def walk(load: Load, root: str, prefix: bytes = b"") -> Iterator[tuple[bytes, Entry]]:
    """Every (path, entry) under ``root``, parents before children, names in byte order."""
    node = load(root)
    for name in sorted(node):
        entry = node[name]
        path = prefix + name
        yield path, entry
        if entry.kind == "dir":
            yield from walk(load, entry.key, path + b"/")


Status = Literal["added", "removed", "modified", "mode", "type"]


@dataclass(frozen=True, slots=True)
class Difference:
    path: bytes
    status: Status
    old: Entry | None
    new: Entry | None


Only = dict[bytes, "Only | None"]
"""Where a diff looks (:func:`only`): the names to compare in a directory, each with where to
look below it; None: everything below."""


def only(paths: Iterable[bytes]) -> Only:
    """The :data:`Only` of ``paths``: a diff that looks there sees every difference between
    two trees that differ at most at those paths (and, implied, at their parents: a change
    may create or drop the directories above it)."""
    top: Only = {}
    for path in paths:
        level = top
        parts = split_path(path)
        for part in parts[:-1]:
            below = level.setdefault(part, {})
            if below is None:
                break  # everything under an ancestor is looked at already
            level = below
        else:
            level[parts[-1]] = None
    return top


def diff(
    load: Load, old: str | None, new: str | None, prefix: bytes = b"", where: Only | None = None
) -> Iterator[Difference]:
    """Differences from ``old`` to ``new``, parents before children.

    A directory added or removed yields itself and every path under it; a path that changed
    kind yields ``type`` and, for a directory side, its contents as added or removed.
    ``where``: look only there (:func:`only`), for trees known to differ nowhere else: the same
    differences, for the cost of the paths instead of every name of each directory on them
    (a mark's summary, where a directory may hold 20,000 names).
    """
    if old == new:
        return
    a = load(old) if old is not None else {}
    b = load(new) if new is not None else {}
    # An edited node is a copy of its old one (apply_changes), so unchanged entries are the
    # same objects: the identity test skips them without comparing fields.
    names = a.keys() | b.keys() if where is None else where.keys()
    for name in sorted(n for n in names if a.get(n) is not b.get(n)):
        ea, eb = a.get(name), b.get(name)
        path = prefix + name
        if ea == eb:
            continue
        if ea is None:
            yield Difference(path, "added", None, eb)
        elif eb is None:
            yield Difference(path, "removed", ea, None)
        elif ea.kind != eb.kind:
            yield Difference(path, "type", ea, eb)
        elif ea.kind != "dir" and (ea.key != eb.key or ea.size != eb.size):
            yield Difference(path, "modified", ea, eb)
        elif ea.mode != eb.mode:
            yield Difference(path, "mode", ea, eb)
        sub_old = ea.key if ea is not None and ea.kind == "dir" else None
        sub_new = eb.key if eb is not None and eb.kind == "dir" else None
        if sub_old is not None or sub_new is not None:
            below = where.get(name) if where is not None else None
            yield from diff(load, sub_old, sub_new, path + b"/", below)


Read = Callable[[list[str]], Iterable[tuple[str, bytes]]]
"""Reads the encodings of the nodes named (each verified against its key), in any order."""


def node_keys(data: bytes) -> tuple[list[bytes | str], list[bytes | str]]:
    """The keys node encoding ``data`` names, as the catalog stores them (:func:`objects.db_key`):
    its contents' objects, and its subdirectories' nodes. Read straight out of the records, no
    entry built and no key converted: GC reads every node of every mark, and building entries
    was most of its walk (docs/benchmarks.md, session 10)."""
    if data.startswith(MAGIC_TEXT_KEYS):
        node = decode_node(data)
        keys = [(e.kind, objects.db_key(e.key)) for e in node.values() if holds_object(e)]
        return [k for kind, k in keys if kind != "dir"], [k for kind, k in keys if kind == "dir"]
    if not data.startswith(MAGIC):
        raise CorruptObject("tree node has an unknown format")
    contents: list[bytes | str] = []
    dirs: list[bytes | str] = []
    unpack, head = _HEAD.unpack_from, _HEAD.size
    pos, end = len(MAGIC), len(data)
    try:
        while pos < end:
            code, _, _, nlen, klen = unpack(data, pos)
            pos += head + nlen
            raw = data[pos : pos + klen]
            pos += klen
            if code == 1 or code == 2:
                contents.append(raw)
            elif code == 3:
                dirs.append(raw)
            elif code & ~TEXT_KEY not in CODE_KINDS:
                raise CorruptObject("tree node holds an invalid entry")
            elif code & ~TEXT_KEY != KIND_CODES["uncaptured"]:  # a text key: stored as text
                (dirs if code & ~TEXT_KEY == KIND_CODES["dir"] else contents).append(raw.decode("ascii"))
    except (struct.error, UnicodeDecodeError) as exc:
        raise CorruptObject("tree node is truncated or malformed") from exc
    if pos != end:
        raise CorruptObject("tree node is truncated or malformed")
    return contents, dirs


def reachable(read: Read, roots: Iterable[str], seen: set[bytes | str]) -> None:
    """Add every key reachable from ``roots`` (nodes and contents), as the catalog stores it,
    to ``seen``: one ``read`` per level of the trees, each node read once however many roots
    share it. A node is walked even if ``seen`` holds its key already as a file's content (a
    file may hold a node's exact bytes): its children are what matter."""
    walked: set[bytes | str] = set()
    level: list[str] = []
    for root in roots:
        key = objects.db_key(root)
        if key not in walked:
            walked.add(key)
            level.append(root)
    while level:
        below: list[str] = []
        for _, data in read(level):
            contents, dirs = node_keys(data)
            seen.update(contents)
            for key in dirs:
                if key not in walked:
                    walked.add(key)
                    below.append(objects.py_key(key))
        level = below
    seen.update(walked)
