"""Which base a new object is stored against, for a write batch (docs/storage.md, "Objects").

A put names a likely base (the path's previous version; the directory's previous node). The
new content is stored as a delta against it when that costs at most 1/``objects.DELTA_GAIN``
of the whole encoding. Chains stay at most ``objects.MAX_DEPTH`` deltas long: when the named
base is at that depth, the delta is made against the chain's first object (stored whole)
instead, so a file edited a thousand times is still read with at most ``MAX_DEPTH`` extra
object reads, and is stored whole again only once it has drifted too far from that object.

Invariants: a base is an object already stored, or pending in the same batch (its row
commits in the same transaction); the batch holds every stored base it uses against GC until
it ends, and once committed, GC keeps a base as long as any object stored against it.
"""

from __future__ import annotations

from typing import NamedTuple, Protocol

from snapd.store import objects


class Pending(NamedTuple):
    """An object a batch has encoded and not yet committed."""

    codec: int
    payload: bytes  # empty for an external object (its payload is in its file)
    raw: bytes
    external: bool
    base: str | None = None  # a delta's base key
    depth: int = 0


class Host(Protocol):
    """What choosing a base needs of the batch (:class:`snapd.store.batch.Batch`)."""

    def link(self, key: str) -> tuple[str | None, int] | None:
        """(base, depth) of a pending or stored object (a stored one is held from here on);
        None when there is no such object."""
        ...

    def content(self, key: str) -> bytes:
        """The verified content of a pending or stored object."""
        ...


def against(host: Host, base: str, data: bytes, whole: bytes) -> tuple[bytes, str, int] | None:
    """(payload, base used, depth) of ``data`` as a delta near ``base``; None when storing it
    whole is better (no such base, or the delta saves too little over ``whole``)."""
    link = host.link(base)
    if link is None:
        return None
    depth = link[1]
    if depth >= objects.MAX_DEPTH:
        for _ in range(objects.MAX_DEPTH):  # to the chain's first object
            if link[0] is None:
                break
            base = link[0]
            link = host.link(base)
            if link is None:
                return None
        if link[1] != 0:
            return None
        depth = 0
    delta = objects.encode_delta(host.content(base), data)
    return (delta, base, depth + 1) if objects.worth_delta(delta, whole) else None
