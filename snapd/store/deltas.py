"""Which base a new object is stored against, for a write batch (docs/storage.md, "Objects").

A put names a likely base (the path's previous version; the directory's previous node). The
new content is stored as a delta against it when that costs at most 1/``objects.DELTA_GAIN``
of the whole encoding. Chains stay at most ``objects.MAX_DEPTH`` deltas long: when the named
base is at that depth, the delta is made against the chain's first object (stored whole)
instead, so a file edited a thousand times is still read with at most ``MAX_DEPTH`` extra
object reads, and is stored whole again only once it has drifted too far from that object.

The store keeps the objects batches committed last (:class:`Recent`: their bytes and chain
links, a few MiB), so the next mark's deltas against them need no catalog read: a mark's
directory nodes are the previous mark's nodes edited.

Invariants: a base is an object already stored, or pending in the same batch (its row
commits in the same transaction); the batch holds every stored base it uses against GC until
it ends, and once committed, GC keeps a base as long as any object stored against it.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import NamedTuple, Protocol

from snapd.errors import CorruptObject, MissingObject
from snapd.store import objects, trees


class Pending(NamedTuple):
    """An object a batch has encoded and not yet committed."""

    codec: int
    payload: bytes  # empty for an external object (its payload is in its file)
    raw: bytes
    external: bool
    base: str | None = None  # a delta's base key
    depth: int = 0


RECENT_BYTES = 4 << 20


class Recent:
    """Objects committed lately: key -> (content, base, depth), least recently used dropped
    past :data:`RECENT_BYTES`. Only committed objects enter; the GC sweep removes each object
    it deletes in the same locked section (``GcHolds.lock``), so an entry found under that lock
    names an object that exists (one process opens a store: the daemon, under its lock)."""

    def __init__(self, limit: int = RECENT_BYTES) -> None:
        self._items: OrderedDict[str, Pending] = OrderedDict()
        self._bytes = 0
        self._limit = limit
        self._lock = threading.Lock()

    def add(self, key: str, item: Pending) -> None:
        with self._lock:
            if key in self._items or len(item.raw) > self._limit // 16:
                return
            self._items[key] = item
            self._bytes += len(item.raw)
            while self._bytes > self._limit:
                self._bytes -= len(self._items.popitem(last=False)[1].raw)

    def add_all(self, items: list[tuple[str, Pending]]) -> None:
        """What a transaction inserted, once it committed (never before)."""
        for key, item in items:
            self.add(key, item)

    def get(self, key: str) -> Pending | None:
        with self._lock:
            item = self._items.get(key)
            if item is not None:
                self._items.move_to_end(key)
            return item

    def forget(self, key: str) -> None:
        with self._lock:
            item = self._items.pop(key, None)
            if item is not None:
                self._bytes -= len(item.raw)


class Host(Protocol):
    """What choosing a base needs of the batch (:class:`snapd.store.batch.Batch`)."""

    def link(self, key: str) -> tuple[str | None, int] | None:
        """(base, depth) of a pending or stored object (a stored one is held from here on);
        None when there is no such object."""
        ...

    def content(self, key: str) -> bytes:
        """The verified content of a pending or stored object."""
        ...


def node_bytes(key: str, node: trees.Node | None, hasher: objects.Hasher) -> bytes | None:
    """A cached tree node's content without a read: its encoding is canonical, and the digest
    check proves it is ``key``'s (None if not, or no node)."""
    if node is None:
        return None
    data = trees.encode_node(node)
    return data if objects.matches(key, data, hasher) else None


def against(
    host: Host, base: str, data: bytes, whole: tuple[int, bytes] | None
) -> tuple[int, bytes, str | None, int]:
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
