"""Which base a new object is stored against, for a write batch (docs/storage.md, "Objects").

A put names a likely base (the path's previous version; the directory's previous node). The
new content is stored as a delta against it when that costs at most 1/``objects.DELTA_GAIN``
of the whole encoding. Chains stay at most ``objects.MAX_DEPTH`` deltas long: when the named
base is at that depth, the delta is made against the chain's first object (stored whole)
instead, so a file edited a thousand times is still read with at most ``MAX_DEPTH`` extra
object reads, and is stored whole again only once it has drifted too far from that object.

The store keeps the chain links of the objects batches committed last (:class:`Recent`), and
its node cache their nodes, so the next mark's deltas against them need no catalog read: a
mark's directory nodes are the previous mark's nodes edited.

Invariants: a base is an object already stored, or pending in the same batch (its row
commits in the same transaction); the batch holds every stored base it uses against GC until
it ends, and once committed, GC keeps a base as long as any object stored against it.
"""

from __future__ import annotations

import itertools
import sqlite3
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator
from typing import Any, NamedTuple, Protocol

from snapd.errors import CorruptObject, MissingObject
from snapd.store import nodes, objects, trees
from snapd.store.catalog import objects_by_key


class Pending(NamedTuple):
    """An object a batch has encoded and not yet committed (no raw bytes: see ``objwrite``)."""

    codec: int
    payload: bytes  # empty for an external object (its payload is in its file)
    sha: bytes  # objects.fingerprint of the content
    size: int
    external: bool
    base: str | None = None  # a delta's base key
    depth: int = 0


Encoded = tuple[int, bytes, str | None, int]
"""(codec, payload, delta base or None, depth) of a new object."""

RECENT = 1 << 16


class Recent:
    """Chain links (base, depth) of the objects committed lately, the least recently used
    dropped past :data:`RECENT` entries. Only committed objects enter; the GC sweep removes
    each object it deletes in the same locked section (``GcHolds.lock``), so an entry found
    under that lock names an object that exists (one process opens a store: the daemon)."""

    def __init__(self, limit: int = RECENT) -> None:
        self._items: OrderedDict[str, tuple[str | None, int]] = OrderedDict()
        self._limit = limit
        self._lock = threading.Lock()

    def add_all(self, items: list[tuple[str, tuple[str | None, int]]]) -> None:
        """What a transaction inserted, once it committed (never before)."""
        with self._lock:
            for key, link in items:
                self._items[key] = link
            while len(self._items) > self._limit:
                self._items.popitem(last=False)

    def get(self, key: str) -> tuple[str | None, int] | None:
        with self._lock:
            link = self._items.get(key)
            if link is not None:
                self._items.move_to_end(key)
            return link

    def __contains__(self, key: object) -> bool:
        with self._lock:
            return key in self._items

    def __len__(self) -> int:
        with self._lock:
            return len(self._items)

    def forget(self, key: str) -> None:
        with self._lock:
            self._items.pop(key, None)

    def clear(self) -> None:
        """Forget every link (a new, empty dict: a cleared one keeps its size)."""
        with self._lock:
            self._items = OrderedDict()


class Chooser:
    """The batch's side of choosing a base (:class:`snapd.store.batch.Batch` is one)."""

    store: Any  # batch.ObjectStore
    _pending: dict[str, Pending]
    _nodes: dict[str, trees.Node]
    _encoded: dict[str, bytes]  # the bytes of the nodes in _nodes
    _records: dict[str, nodes.Records]  # the encodings of the nodes a mark edits, and of its new ones
    _links: dict[str, tuple[str | None, int]]  # stored objects' links found by prefetch_links

    def _hold(self, key: str) -> None:
        raise NotImplementedError

    def _encode(
        self,
        key: str,
        encode: Callable[[], tuple[int, bytes]],
        base: str | None,
        data: bytes | None,
        lazy: bool = False,
    ) -> Encoded:
        """How to store a new content: whole (``encode``), or as a delta near ``base``.

        ``lazy`` (a tree node: ``encode`` only compresses ``data``): the whole encoding is
        computed only if the delta is not small enough to win without it, so a mark's
        rewritten nodes are compressed once. A file's whole encoding was computed by its
        reader, and is compared with its delta (repetitive contents compress beyond 16-fold)."""
        if base is None or data is None or base == key:
            return (*encode(), None, 0)
        encoded = against(self, base, data, None if lazy else encode())
        # The new object is its chain's newest now, and the next version bases on it: the
        # offered base's link leaves the recent links whatever base was used (a rebased or
        # whole object leaves it behind too). Kept, every version of a long day would fill
        # their bound (issue 33's soak: 65,536 links, 12 MB, for 5,000 files); asked for
        # again, it is one catalog row (:meth:`link`).
        self.store.recent.forget(base)
        return encoded

    def link(self, key: str) -> tuple[str | None, int] | None:
        """:meth:`Host.link`; a stored object is held against GC, like any key a put meets."""
        pending = self._pending.get(key)
        if pending is not None:
            return pending.base, pending.depth
        known = self._links.get(key)
        if known is not None:  # looked up (and held) by prefetch_links
            return known
        with self.store.holds.lock:
            found: tuple[str | None, int] | None = self.store.recent.get(key) or self.store.delta_link(key)
            if found is not None:
                self._hold(key)
        return found

    def prefetch_links(self, keys: Iterable[str]) -> None:
        """Look up the chain links of many likely bases at once, holding each one found
        against GC, so :meth:`link` asks the catalog nothing for them. A base as deep as a
        chain goes is rebased on the chain's first object (:func:`against` walks down to it),
        and the recent links hold only the newest of each chain: the links below such bases
        come in one more query, not one per link."""
        wanted = [k for k in set(keys) if k not in self._pending and k not in self._links]
        deep: list[str] = []  # the bases of the bases at full depth: where the walks go on
        with self.store.holds.lock:
            missing = []
            for key in wanted:
                link = self.store.recent.get(key)
                if link is None:
                    missing.append(key)
                elif link[0] is not None and link[1] >= objects.MAX_DEPTH:
                    deep.append(link[0])
            conn = self.store.catalog.read()
            for key, base, depth in objects_by_key(conn, "base, depth", missing):
                self._links[key] = link = (None if base is None else objects.py_key(base), int(depth))
                self._hold(key)
                if link[0] is not None and link[1] >= objects.MAX_DEPTH:
                    deep.append(link[0])
            # Not filtered by what _links knows: a deep key found above as a base itself has
            # its own link there, not the ones below it (a chain fetched twice is harmless)
            for key, link in chain_links(conn, sorted(set(deep))):
                self._links[key] = link
                self._hold(key)

    def content(self, key: str) -> bytes:
        """:meth:`Host.content`: a node's bytes as a cache holds them (checked against the
        key), or a verified read."""
        data = self._encoded.get(key)  # a fan's own bytes, not its parts' records joined
        if data is None:
            records = self._records.get(key)
            data = nodes.joined(records) if records else self.store.node_bytes(key)
        if data is None:
            node = self._nodes.get(key) or self.store.cached_node(key)
            data = None if node is None else nodes.encode_node(node)
        if data is not None and objects.matches(key, data, self.store.hasher):
            return data
        stored: bytes = self.store.get(key)
        return stored


class Host(Protocol):
    """What choosing a base needs of the batch (:class:`snapd.store.batch.Batch`)."""

    def link(self, key: str) -> tuple[str | None, int] | None:
        """(base, depth) of a pending or stored object (a stored one is held from here on);
        None when there is no such object."""
        ...

    def content(self, key: str) -> bytes:
        """The verified content of a pending or stored object."""
        ...


def against(host: Host, base: str, data: bytes, whole: tuple[int, bytes] | None) -> Encoded:
    """(codec, payload, base used, depth) to store ``data`` with: a delta near ``base``, or
    the whole encoding (``whole`` if given) when there is no such base or the delta saves too
    little (then base None, depth 0)."""
    link = host.link(base)
    if link is None:
        return stored_whole(data, whole)
    depth = link[1]
    if depth >= objects.MAX_DEPTH:
        for _ in range(objects.MAX_DEPTH):  # to the chain's first object
            if link[0] is None:
                break
            base = link[0]
            link = host.link(base)
            if link is None:
                return stored_whole(data, whole)
        if link[1] != 0:
            return stored_whole(data, whole)
        depth = 0
    try:
        content = host.content(base)
    except (CorruptObject, MissingObject):  # a damaged old version must not stop a new one
        return stored_whole(data, whole)
    delta = objects.encode_delta(content, data)
    instead = objects.worth_delta(delta, data, whole)
    return (objects.CODEC_DELTA, delta, base, depth + 1) if instead is None else stored_whole(data, instead)


def stored_whole(data: bytes, whole: tuple[int, bytes] | None) -> tuple[int, bytes, None, int]:
    codec, payload = whole or objects.encode(data)
    return codec, payload, None, 0


def chains_sql(count: int) -> str:
    """The rows (top key, key, codec, external, data, base) of ``count`` objects and, for each
    delta, of its base, down its chain to an object stored whole: one query for them all,
    ordered by top key, then link."""
    return f"""WITH RECURSIVE chain(top, n, key, codec, external, data, base) AS (
    SELECT key, 0, key, codec, external, data, base FROM objects WHERE key IN ({",".join("?" * count)})
    UNION ALL
    SELECT c.top, c.n + 1, o.key, o.codec, o.external, o.data, o.base FROM chain c
    JOIN objects o ON o.key = c.base WHERE c.codec = {objects.CODEC_DELTA} AND c.n < {objects.MAX_DEPTH})
SELECT top, key, codec, external, data, base FROM chain ORDER BY top, n"""


def chain_links(conn: sqlite3.Connection, keys: list[str]) -> Iterator[tuple[str, tuple[str | None, int]]]:
    """(key, (base, depth)) of each of ``keys`` found and of every object down its chain to
    the one stored whole: one recursive query per 500 keys (SQLite caps the parameters)."""
    for i in range(0, len(keys), 500):
        chunk = [objects.db_key(k) for k in keys[i : i + 500]]
        sql = f"""WITH RECURSIVE chain(n, key, base, depth) AS (
    SELECT 0, key, base, depth FROM objects WHERE key IN ({",".join("?" * len(chunk))})
    UNION ALL
    SELECT c.n + 1, o.key, o.base, o.depth FROM chain c JOIN objects o ON o.key = c.base
    WHERE c.n < {objects.MAX_DEPTH})
SELECT key, base, depth FROM chain"""
        for key, base, depth in conn.execute(sql, chunk):
            yield objects.py_key(key), (None if base is None else objects.py_key(base), int(depth))


Row = tuple[str, int, int, bytes | None, str | None]
"""An object's (key, codec, external, data, base) row."""


def read_chains(conn: sqlite3.Connection, keys: list[str]) -> Iterator[tuple[str, list[Row]]]:
    """Each of ``keys`` found, with its chain's rows (:func:`chains_sql`, keys as Python's),
    in the order of the keys as stored."""
    rows = conn.execute(chains_sql(len(keys)), [objects.db_key(k) for k in keys]).fetchall()
    for top, group in itertools.groupby(rows, key=lambda r: r[0]):
        chain: list[Row] = [
            (objects.py_key(k), codec, external, data, None if base is None else objects.py_key(base))
            for _, k, codec, external, data, base in group
        ]
        yield objects.py_key(top), chain


def decode_chain(
    key: str, rows: list[Row], payload: Callable[[str, int, bytes | None], bytes], hasher: objects.Hasher
) -> bytes:
    """The verified content of ``key`` from its chain's ``rows`` (``key``'s own first, then
    each base's, each verified in turn: a damaged base is found by every read through it,
    never masked by a cache). ``payload`` gives a row's stored bytes (an external object's
    from its file). An error names the damaged link (``key``) and ``key`` itself (``object``)."""
    try:
        return _decode_chain(key, rows, payload, hasher)
    except (CorruptObject, MissingObject) as exc:
        exc.details.setdefault("object", key)
        raise


def _decode_chain(
    key: str, rows: list[Row], payload: Callable[[str, int, bytes | None], bytes], hasher: objects.Hasher
) -> bytes:
    if not rows:
        raise MissingObject(f"object {key} is missing from the store", key=key)
    content: bytes | None = None
    depth = 0

    def missing(gone: str | None) -> MissingObject:  # ``key``: the link that is gone
        via = "" if gone == rows[0][4] else f" (through its chain: {gone})"
        return MissingObject(f"object {key} is a delta against {rows[0][4]}{via}, which is missing", key=gone)

    for depth, (k, codec, _, _, base) in enumerate(rows):
        if codec != objects.CODEC_DELTA:
            break
        if base is None or depth >= objects.MAX_DEPTH:
            raise CorruptObject(f"object {k} is a delta with no base, or a chain too long", key=k)
        if depth + 1 == len(rows):
            raise missing(base)
    for i in range(depth, -1, -1):
        k, codec, external, data, _ = rows[i]
        try:
            stored = payload(k, external, data)
        except MissingObject as exc:
            if i == 0:
                raise
            raise missing(k) from exc
        base_content = content if codec == objects.CODEC_DELTA else None
        content = objects.decode(k, codec, stored, hasher, base_content)
    assert content is not None
    return content
