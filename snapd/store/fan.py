"""Wide directories stored in parts: a mark that changes one name rewrites one part, not the
whole directory (store format 10; docs/storage.md, "Wide directories").

A directory of more than :data:`FLAT_MAX` names is stored as a *fan*: :data:`MAGIC`, then one
record per part in the layout of a node's records (:mod:`snapd.store.nodes`), kind
:data:`PART`, its size the part's count of names, its name the part's first name, its key the
part's. Each part is an ordinary node (``snapd-tree-2``) holding a run of the directory's
names in byte order. Where a part ends is decided by the names alone (a name whose hash has
its low :data:`PART_BITS` bits zero ends its part; the last name ends the last part), so one
directory has one fan, one key, however it was edited: the encoding stays canonical, and
an edit moves no boundary but at the names it adds or removes.

Read, a fan is its parts' records joined (:class:`FanNode`, a :class:`nodes.PackedNode`
that knows its parts); a mark edits those records as any node's (:func:`nodes.splice`), and
:func:`plan` says which parts the edit leaves as they were (kept by key, not encoded again)
and which are new. A directory of 21,231 names, edited at one: one part of ~256 records and
a fan of ~80 are encoded, hashed and compressed, not 21,231 records.

Decoding trusts no byte: a fan whose parts do not join into one node (names out of order, a
part that is not the first name and count its record says) is a :class:`CorruptObject`.
"""

from __future__ import annotations

import struct
from bisect import bisect_left, bisect_right
from collections.abc import Iterable, Mapping
from typing import NamedTuple

import xxhash

from snapd.errors import CorruptObject
from snapd.store import nodes, objects

MAGIC = nodes.FAN_MAGIC
PART = nodes.PART  # a fan record's kind code: a part of the directory, not an entry
FLAT_MAX = 1024  # a directory of more names is stored in parts
PART_BITS = 8  # a part holds 2^8 names on average
_MASK = (1 << PART_BITS) - 1


def ends_part(name: bytes) -> bool:
    """Whether ``name`` is the last of its part (unless the directory is stored flat)."""
    return xxhash.xxh3_64_intdigest(name) & _MASK == 0


def is_fan(data: bytes) -> bool:
    return data.startswith(MAGIC)


class PartRecord(NamedTuple):
    first: bytes  # the part's first name
    size: int  # its count of names
    key: str  # its node's key


def decode(data: bytes) -> list[PartRecord]:
    """A fan's part records, checked: first names strictly in byte order, counts of one or
    more, keys that are object keys."""
    if not is_fan(data):
        raise CorruptObject("tree node has an unknown format")
    out: list[PartRecord] = []
    head, pos, end = nodes.HEAD.size, len(MAGIC), len(data)
    try:
        while pos < end:
            code, mode, count, nlen, klen = nodes.HEAD.unpack_from(data, pos)
            pos += head
            first, raw = data[pos : pos + nlen], data[pos + nlen : pos + nlen + klen]
            pos += nlen + klen
            if code != PART or mode != 0 or count < 1 or pos > end or (out and first <= out[-1].first):
                raise CorruptObject("tree node holds an invalid part")
            out.append(PartRecord(first, count, objects.py_key(raw)))
    except struct.error as exc:
        raise CorruptObject("tree node is truncated or malformed") from exc
    if not out:
        raise CorruptObject("tree node holds an invalid part")
    return out


def encode(parts: Iterable[PartRecord]) -> bytes:
    out = [MAGIC]
    for first, count, key in parts:
        raw = objects.db_key(key)
        if not isinstance(raw, bytes):
            raise ValueError(f"a part's key is no object key: {key}")
        out.append(nodes.HEAD.pack(PART, 0, count, len(first), len(raw)) + first + raw)
    return b"".join(out)


class FanNode(nodes.PackedNode):
    """A directory stored in parts, read: its parts' records joined (a :class:`PackedNode`
    to everything that reads it), with the parts' keys, where each ends among the names, and
    the fan's own encoding (what its key is the hash of; its records' joined bytes are not)."""

    __slots__ = ("parts", "ends", "encoding")

    def __init__(
        self,
        names: list[bytes],
        records: list[bytes],
        parts: tuple[str, ...],
        ends: tuple[int, ...],
        encoding: bytes,
    ) -> None:
        super().__init__(names, records)
        self.parts, self.ends, self.encoding = parts, ends, encoding

    def part_records(self, i: int) -> nodes.Records:
        start = self.ends[i - 1] if i else 0
        return self.names[start : self.ends[i]], self.records[start : self.ends[i]]


def assemble(data: bytes, read: Mapping[str, bytes]) -> FanNode:
    """The fan ``data`` read, its parts' encodings in ``read`` (each verified against its key
    by the reader); a part missing from ``read`` is a :class:`snapd.errors.MissingObject` the
    caller raises first (:func:`decode` names the keys)."""
    records = decode(data)
    names: list[bytes] = []
    recs: list[bytes] = []
    ends: list[int] = []
    for part in records:
        got = nodes.ordered_records(read[part.key])
        if (
            got is None
            or len(got[0]) != part.size
            or got[0][0] != part.first
            or (names and got[0][0] <= names[-1])
        ):
            raise CorruptObject("tree node's parts do not make up one directory")
        names += got[0]
        recs += got[1]
        ends.append(len(names))
    return FanNode(names, recs, tuple(p.key for p in records), tuple(ends), data)


def split(names: list[bytes], lo: int = 0, hi: int | None = None) -> list[int]:
    """Where the parts of ``names[lo:hi]`` end (indexes into ``names``, the last ``hi``): after
    each name that :func:`ends_part`."""
    hi = len(names) if hi is None else hi
    out = [i + 1 for i in range(lo, hi - 1) if ends_part(names[i])]
    if hi > lo:
        out.append(hi)
    return out


class Planned(NamedTuple):
    start: int
    end: int
    key: str | None  # a part kept as it was; None: a new part, to be encoded
    base: str | None  # a new part's delta base: the old part it replaces (None: none)


def plan(names: list[bytes], base: FanNode | None, changed: Iterable[bytes] | None) -> list[Planned]:
    """The parts of a directory of ``names`` (more than :data:`FLAT_MAX`), edited from ``base``
    at most at the names ``changed`` (None: unknown, or no fan before): a part no changed name
    falls in is kept by key; the runs of parts that changed are split again. The same parts as
    :func:`split` of the whole, in O(changed) parts."""
    if base is None or changed is None:
        return [Planned(s, e, None, None) for s, e in _spans(split(names))]
    bnames, bends = base.names, base.ends
    touched: set[int] = set()
    for name in changed:
        at = bisect_left(bnames, name)
        i = min(bisect_right(bends, at), len(bends) - 1)  # the part ``name`` is, or would be, in
        touched.add(i)
        if at < len(bnames) and bnames[at] == name and at == bends[i] - 1 and nodes.index_of(names, name) < 0:
            touched.add(i + 1)  # the name that ended part i is gone: i runs on into i + 1
    out: list[Planned] = []
    i = j = 0
    while i < len(bends):
        start = bends[i - 1] if i else 0
        if i not in touched:
            n = bends[i] - start
            out.append(Planned(j, j + n, base.parts[i], None))
            j, i = j + n, i + 1
            continue
        k = i
        while k + 1 < len(bends) and k + 1 in touched:
            k += 1
        # The run of changed parts i..k ends where part k + 1 (unchanged) begins.
        run_end = len(names) if k + 1 == len(bends) else bisect_left(names, bnames[bends[k]], j)
        for s, e in _spans(split(names, j, run_end), j):
            was = min(bisect_right(bends, max(bisect_right(bnames, names[s]) - 1, 0)), len(bends) - 1)
            out.append(Planned(s, e, None, base.parts[was]))
        j, i = run_end, k + 1
    return out


def _spans(ends: list[int], start: int = 0) -> list[tuple[int, int]]:
    out = []
    for e in ends:
        out.append((start, e))
        start = e
    return out
