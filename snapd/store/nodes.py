"""Tree nodes as bytes: the encoding a node's key is the hash of, and GC's walk over it.

A node is stored as :data:`MAGIC` then one record per entry, names in byte order (the format
is docs/storage.md, "Trees"). The encoding must be canonical — one node, one byte string —
because the key is the hash of these bytes: two encodings of one directory would be two keys,
and identical directories would stop being shared between snapshots. So :func:`splice`, which
edits an encoding record by record for speed, must give exactly :func:`encode_records`'s
bytes, and an encoding this module would not write (the old text-key format, names out of
order) yields no records and is never spliced.

Nodes written by formats 1-5 (:data:`MAGIC_TEXT_KEYS`, keys as text) are still read, never
written. Decoding trusts no byte: every damage is a :class:`CorruptObject`, and a name that is
empty, ``.``, ``..`` or holds a ``/`` is refused, since a rollback would write outside its
directory.

:func:`node_keys` and :func:`reachable` (GC's walk) live here, not in GC: they read keys
straight out of the records without building entries, so they change whenever the layout
does.
"""

from __future__ import annotations

import re
import struct
from bisect import bisect_left
from collections.abc import Callable, ItemsView, Iterable, Iterator, Mapping, ValuesView
from functools import lru_cache
from itertools import compress
from operator import ne
from typing import Any

from snapd.errors import CorruptObject
from snapd.store import objects
from snapd.store.trees import Entry, Kind, Node, holds_object

KIND_CODES: dict[str, int] = {"file": 1, "symlink": 2, "dir": 3, "uncaptured": 4}
CODE_KINDS: dict[int, Kind] = {1: "file", 2: "symlink", 3: "dir", 4: "uncaptured"}
MAGIC = b"snapd-tree-2\n"  # store format 6: object keys as objects.db_key blobs
MAGIC_TEXT_KEYS = b"snapd-tree-1\n"  # formats 1-5: every key as ASCII text; still read
# Format 10: a directory of many names stored in parts (snapd.store.fan): its records are the
# parts', in the layout of a node's, of kind PART.
FAN_MAGIC = b"snapd-fan-1\n"
PART = 5
TEXT_KEY = 0x80  # in a snapd-tree-2 entry's kind code: its key is text, not a key blob
HEAD = struct.Struct(">BIQHB")  # kind, mode, size, name length, key length

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
        return HEAD.pack(KIND_CODES[e.kind], e.mode, e.size, len(name), len(key)) + name + key
    text = key.encode("ascii")
    return HEAD.pack(KIND_CODES[e.kind] | TEXT_KEY, e.mode, e.size, len(name), len(text)) + name + text


def _entry(record: bytes) -> Entry:
    """The entry a record (checked when its node was decoded, or made by :func:`_record`)
    encodes."""
    code, mode, size, nlen, klen = HEAD.unpack_from(record)
    raw = record[HEAD.size + nlen :]
    key = raw.decode("ascii") if code & TEXT_KEY else _node_key(raw)
    return Entry(CODE_KINDS[code & ~TEXT_KEY], mode, size, key)


def index_of(names: list[bytes], name: bytes) -> int:
    """Where ``name`` is in the sorted ``names``; -1: absent."""
    i = bisect_left(names, name)
    return i if i < len(names) and names[i] == name else -1


class PackedNode(Mapping[bytes, Entry]):
    """A node held as its records (:data:`Records`): each entry decoded only when asked for.

    The node cache holds nodes so. Decoded into a dict of entries, a node takes about twice
    the memory of its records again, and both used to be cached: at npm-100k, whose marks
    rewrite directories of up to 21,231 names, that was tens of MB of the daemon (the A/B in
    docs/benchmarks.md, session 12). A lookup is a bisection of
    the sorted names; two packed nodes are compared record by record (:meth:`changed_names`),
    never entry by entry. Immutable: an edit makes a new node (:func:`splice`)."""

    __slots__ = ("names", "records")

    def __init__(self, names: list[bytes], records: list[bytes]) -> None:
        self.names, self.records = names, records

    def _at(self, name: object) -> int:
        if not isinstance(name, bytes):
            return -1  # as a dict of bytes names answers: absent
        return index_of(self.names, name)

    def record(self, name: bytes) -> bytes | None:
        """The stored record of ``name``, or None."""
        i = self._at(name)
        return None if i < 0 else self.records[i]

    def __getitem__(self, name: bytes) -> Entry:
        i = self._at(name)
        if i < 0:
            raise KeyError(name)
        return _entry(self.records[i])

    def get(self, name: object, default: Any = None) -> Any:
        i = self._at(name)
        return default if i < 0 else _entry(self.records[i])

    def __contains__(self, name: object) -> bool:
        return self._at(name) >= 0

    def __iter__(self) -> Iterator[bytes]:
        return iter(self.names)  # in byte order

    def __len__(self) -> int:
        return len(self.names)

    def items(self) -> ItemsView[bytes, Entry]:
        return _PackedItems(self)

    def values(self) -> ValuesView[Entry]:
        return _PackedValues(self)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, PackedNode):
            return self.names == other.names and self.records == other.records
        return Mapping.__eq__(self, other)

    def changed_names(self, other: PackedNode) -> list[bytes]:
        """The names whose record differs between the two nodes (or that only one holds), in
        byte order: one merge of the sorted names, records compared as bytes (an edited node
        shares its unchanged records with its base, so most compare by identity)."""
        an, ar, bn, br = self.names, self.records, other.names, other.records
        if an == bn:  # the same names (a rollback's, a summary's usual case): compared in C
            return list(compress(an, map(ne, ar, br)))
        out: list[bytes] = []
        i = j = 0
        while i < len(an) and j < len(bn):
            x, y = an[i], bn[j]
            if x == y:
                if ar[i] != br[j]:
                    out.append(x)
                i += 1
                j += 1
            elif x < y:
                out.append(x)
                i += 1
            else:
                out.append(y)
                j += 1
        out.extend(an[i:])
        out.extend(bn[j:])
        return out


class _PackedItems(ItemsView[bytes, Entry]):
    """A packed node's items in one pass over its records, not a bisection per name."""

    _mapping: PackedNode

    def __iter__(self) -> Iterator[tuple[bytes, Entry]]:
        node = self._mapping
        return zip(node.names, map(_entry, node.records), strict=True)


class _PackedValues(ValuesView[Entry]):
    """A packed node's entries in one pass over its records."""

    _mapping: PackedNode

    def __iter__(self) -> Iterator[Entry]:
        return map(_entry, self._mapping.records)


def records_of(node: Mapping[bytes, Entry] | None) -> Records | None:
    """The records a packed node is held as (None for any other mapping)."""
    return (node.names, node.records) if isinstance(node, PackedNode) else None


def encode_records(node: Mapping[bytes, Entry]) -> Records:
    """A node's records; a packed node's own lists (never edit them in place: :func:`splice`
    copies)."""
    if isinstance(node, PackedNode):
        return node.names, node.records
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


# The tail of a key blob after its 16 digest bytes, as :func:`objects.py_key` accepts it: the
# size as a LEB128 varint, then perhaps a variant, which is never 0.
_KEY_TAIL = re.compile(
    rb"[\x80-\xff]*[\x00-\x7f]"  # the size
    rb"(?:[\x80-\xff]*[\x01-\x7f]|[\x80-\xff]*[\x81-\xff][\x80-\xff]*[\x00-\x7f])?"  # a variant, not 0
)
_NAMELESS = (b".", b"..")


def ordered_records(data: bytes) -> Records | None:
    """The records of a ``snapd-tree-2`` encoding :func:`encode_node` writes (names in byte
    order, every record sound), checked as :func:`_decode_any` checks them but without a key
    converted or an entry built: a directory of 21,231 names decoded in 13 ms, not 44
    (a mark's summary and a rollback's plan read such nodes; issue 33). None for anything
    else (out of order, damaged, truncated), which :func:`_decode_any` decodes or refuses."""
    names: list[bytes] = []
    records: list[bytes] = []
    unpack, head, tail = HEAD.unpack_from, HEAD.size, _KEY_TAIL.fullmatch
    pos, end, last = len(MAGIC), len(data), b""
    try:
        while pos < end:
            start = pos
            code, _, _, nlen, klen = unpack(data, pos)
            pos += head + nlen
            name = data[start + head : pos]
            key_at, pos = pos, pos + klen
            if pos > end or name <= last:
                return None  # (the empty name sorts before any other, and is refused so)
            if code & TEXT_KEY:
                if code & ~TEXT_KEY not in CODE_KINDS or not data[key_at:pos].isascii():
                    return None
            elif code not in CODE_KINDS or klen < 17 or tail(data, key_at + 16, pos) is None:
                return None
            names.append(name)
            records.append(data[start:pos])
            last = name
    except struct.error:
        return None
    if b"/" in b"".join(names) or any(index_of(names, n) >= 0 for n in _NAMELESS):
        return None
    return names, records


def decode_records(data: bytes) -> tuple[Node, Records | None]:
    """:func:`decode_node`, and the encoding's records: None for a node :func:`encode_node`
    would not write so (the text-key format, or names out of order), which is never spliced."""
    if data.startswith(MAGIC):
        records = ordered_records(data)
        if records is not None:
            return PackedNode(*records), records
    return _decode_any(data)


def _decode_any(data: bytes) -> tuple[Node, Records | None]:
    """:func:`decode_records` of any encoding, an entry at a time: every damage refused."""
    if data.startswith(MAGIC):
        text_keys = False
    elif data.startswith(MAGIC_TEXT_KEYS):
        text_keys = True
    else:
        raise CorruptObject("tree node has an unknown format")
    node: dict[bytes, Entry] = {}
    names: list[bytes] = []
    records: list[bytes] = []
    ordered = not text_keys
    pos = len(MAGIC)
    try:
        while pos < len(data):
            start = pos
            code, mode, size, nlen, klen = HEAD.unpack_from(data, pos)
            pos += HEAD.size
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
            kind = CODE_KINDS[code]
            if ordered:
                ordered = not names or names[-1] < name
                names.append(name)
                records.append(data[start:pos])
                if not ordered:  # the entries so far, decoded after all
                    node = {n: _entry(r) for n, r in zip(names, records, strict=True)}
            if not ordered:
                node[name] = Entry(kind, mode, size, key)
    except (struct.error, KeyError, UnicodeDecodeError) as exc:
        raise CorruptObject("tree node is truncated or malformed") from exc
    if ordered:
        return PackedNode(names, records), (names, records)
    return node, None


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
    parted = data.startswith(FAN_MAGIC)  # a wide directory: its parts are walked as nodes are
    if not parted and not data.startswith(MAGIC):
        raise CorruptObject("tree node has an unknown format")
    contents: list[bytes | str] = []
    dirs: list[bytes | str] = []
    unpack, head = HEAD.unpack_from, HEAD.size
    pos, end = len(FAN_MAGIC if parted else MAGIC), len(data)
    try:
        while pos < end:
            code, _, _, nlen, klen = unpack(data, pos)
            pos += head + nlen
            raw = data[pos : pos + klen]
            pos += klen
            if parted:
                if code != PART:
                    raise CorruptObject("tree node holds an invalid part")
                dirs.append(raw)
            elif code == 1 or code == 2:
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
