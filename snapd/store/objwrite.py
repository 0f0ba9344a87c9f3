"""The object writer: a write batch's new objects, until the catalog has them.

A batch puts each content with its digest, size and SHA-256 fingerprint (a batch holds no raw
bytes: contents read by reader processes never reach it), and a way to encode it that is asked
only when the content is new. A key that already exists (pending here, flushed by this batch,
or stored) is trusted only after its fingerprint compares equal; a different content with the
same xxh3 digest gets the next collision key. So does a content whose stored object cannot be
read (corrupt or missing: bit rot): it cannot be compared, and a new capture must not fail on
an old object's damage nor refer to it; the old marks that need it stay damaged
(:mod:`snapd.store.damage` names them). A payload of :data:`LARGE_OBJECT` or more is
written to its own file at once, the others wait in memory; :meth:`ObjectWriter.sync` fsyncs
each object directory once, then :meth:`ObjectWriter.write` inserts the rows in the caller's
transaction (the batch's commit, or an early :meth:`~ObjectWriter.flush` past the store's
``flush_bytes``): object bytes are durable before any row refers to them.

Every key the batch relies on (found present, written, or chosen as a delta base) is held
against GC until the batch ends (:meth:`ObjectWriter.close`), so a capture in flight never
loses its objects.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, Protocol

from snapd.errors import CorruptObject, MissingObject, StoreError
from snapd.store import deltas, objects, safeio
from snapd.store.catalog import Catalog, objects_by_key
from snapd.store.holds import GcHolds
from snapd.store.objects import fingerprint

LARGE_OBJECT = 1 << 20
FLUSH_BYTES = 32 << 20  # new content held in memory before it is flushed (bounds RSS)


class Destination(Protocol):
    """What the writer needs of the store it writes to (:class:`snapd.store.store.Store`)."""

    catalog: Catalog
    recent: deltas.Recent  # links of objects committed lately, for the next deltas
    holds: GcHolds
    flush_bytes: int  # new content held in memory before a flush (FLUSH_BYTES unless a test lowers it)

    def object_path(self, key: str) -> Path: ...
    def get(self, key: str) -> bytes: ...
    def has(self, key: str) -> bool: ...


class ObjectWriter:
    """One batch's pending objects, the keys it holds against GC, and their writing."""

    def __init__(self, store: Destination) -> None:
        self.store = store
        self.pending: dict[str, deltas.Pending] = {}  # cleared, never rebound: the batch reads it
        self.ended = False  # closed, committed or failed: its objects are never written again
        self._pending_bytes = 0
        self._held: set[str] = set()
        self._shards: set[Path] = set()
        self._absent: set[str] = set()  # keys a prefetch found missing (see prefetch)
        # Objects this batch already flushed: key -> SHA-256 of the bytes we read. A repeat of
        # such a content is compared by this cryptographic fingerprint instead of reading the
        # object back (a baseline repeats most contents many times).
        self._flushed: dict[str, bytes] = {}

    def ensure_open(self) -> None:
        """Refuse a batch that ended: closed, committed, or failed (a flush that failed: what
        its fsync covered may be lost, and a second fsync may pass all the same)."""
        if self.ended:
            raise StoreError("this batch was committed, or failed, already: start a new one")

    def close(self) -> None:
        """Release GC protection (after commit or abort)."""
        if self._held:
            self.store.holds.release(self._held)
            self._held.clear()
        self.ended = True

    def hold(self, key: str) -> None:
        """Protect ``key`` from GC until :meth:`close` (caller holds ``store.holds.lock``)."""
        again = key in self._held
        self._held.add(key)
        self.store.holds.hold(key, again=again)

    def prefetch(self, keys: Iterable[str]) -> None:
        """Look up many keys at once, so ``put`` skips a query for each missing one. Keys found
        present are held against GC right away, as ``put`` would hold them."""
        wanted = [k for k in set(keys) if k not in self.pending and k not in self._held]
        if not wanted:
            return
        with self.store.holds.lock:
            found = {k for k, _ in objects_by_key(self.store.catalog.read(), "1", wanted)}
            for k in found:
                self.hold(k)
        self._absent.update(k for k in wanted if k not in found)

    def put(self, digest: str, size: int, sha: bytes, encode: Callable[[str], deltas.Encoded]) -> str:
        """The key of the content with ``digest``, ``size`` and fingerprint ``sha``: one already
        pending, flushed or stored whose fingerprint agrees, else the first free variant key,
        under which ``encode(key)`` is stored. Refused once the batch ended (a put after a
        failed flush would flush again, retrying the fsync that failed)."""
        self.ensure_open()
        base = objects.base_key(digest, size)
        n = 0
        while True:
            key = objects.variant_key(base, n)
            pending = self.pending.get(key)
            if pending is not None:
                if pending[2] == sha:
                    return key
                n += 1
                continue
            seen = self._flushed.get(key)
            if seen is not None:
                if seen == sha:
                    return key
                n += 1
                continue
            if n == 0 and key in self._absent:
                # Missing at prefetch; if another batch stores it meanwhile, commit compares.
                self._absent.discard(key)
                break
            with self.store.holds.lock:
                exists = key in self._held or self.store.has(key)
                if exists:
                    self.hold(key)
            if not exists:
                break
            try:
                same = fingerprint(self.store.get(key)) == sha
            except (CorruptObject, MissingObject):
                same = False  # damaged: stored again under the next collision key
            if same:
                return key
            n += 1
        self._add(key, size, sha, encode(key))
        return key

    def _add(self, key: str, size: int, sha: bytes, encoded: deltas.Encoded) -> None:
        codec, payload, base, depth = encoded
        external = len(payload) >= LARGE_OBJECT
        with self.store.holds.lock:  # before its file exists: a sweep never deletes it
            self.hold(key)
        if external:
            path = self.store.object_path(key)
            safeio.ensure_dir(path.parent)
            safeio.write_atomic(path, payload, sync_dir=False)
            self._shards.add(path.parent)
            self.pending[key] = deltas.Pending(codec, b"", sha, size, True, base, depth)
        else:
            self.pending[key] = deltas.Pending(codec, payload, sha, size, False, base, depth)
        self._pending_bytes += size
        if self._pending_bytes >= self.store.flush_bytes:
            self.flush()

    def sync(self) -> None:
        """fsync each directory that received object files since the last sync, once."""
        for d in sorted(self._shards):
            safeio.fsync_dir(d)
        self._shards.clear()

    def write(self, c: Any, *, remember: bool) -> list[tuple[str, tuple[str | None, int]]]:
        """Insert the pending objects in transaction ``c`` (after :meth:`sync`); return their
        chain links, for ``store.recent`` once ``c`` has committed. ``remember``: the batch goes
        on (a flush), so keep each one's fingerprint for the puts that may repeat it (a commit
        ends the batch: none)."""
        now = time.time_ns()
        rows = []
        keys = list(self.pending)
        present = {r[0]: r[1:] for r in objects_by_key(c, "codec, external, data", keys)}
        for key, (codec, payload, sha, size, external, base, depth) in self.pending.items():
            row = present.get(key)
            if row is not None:
                # Another batch stored this key meanwhile: equal bytes, or a collision raced.
                if fingerprint(self.store.get(key)) != sha:
                    raise StoreError(f"object key {key} collided with a concurrent write; retry")
                continue
            stored_len = self._file_size(key) if external else len(payload)
            data = None if external else payload
            rows.append((key, size, codec, stored_len, int(external), now, data, base, depth))
            if remember:
                self._flushed[key] = sha
        as_stored = (
            (objects.db_key(k), *rest, None if b is None else objects.db_key(b), d) for k, *rest, b, d in rows
        )
        c.executemany(
            "INSERT INTO objects (key, size, codec, stored, external, created, data, base, depth)"
            " VALUES (?,?,?,?,?,?,?,?,?)",
            as_stored,
        )
        self.store.catalog.stored_changed(sum(r[3] for r in rows))
        self.pending.clear()
        self._pending_bytes = 0
        return [(r[0], (r[7], r[8])) for r in rows]

    def _file_size(self, key: str) -> int:
        path = self.store.object_path(key)
        try:
            return path.stat().st_size
        except OSError as exc:
            raise safeio.os_error(exc, "stat", path) from exc

    def flush(self) -> None:
        """Make the objects put so far durable, in a transaction of their own (they stay held
        until the batch ends). A failure ends the batch: it is never committed (see
        :meth:`snapd.store.batch.Batch.commit`)."""
        try:
            self.sync()
            with self.store.catalog.write() as c:
                written = self.write(c, remember=True)
        except BaseException:
            self.ended = True
            raise
        self.store.recent.add_all(written)
