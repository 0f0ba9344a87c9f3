"""Write batches: objects and catalog rows that become durable together.

A batch encodes objects as they are put (large ones are written and fsynced at once), then
``commit`` fsyncs each object directory once and writes everything else in one catalog
transaction: object bytes are durable before any row refers to them, and a 100k-file
baseline costs a handful of fsyncs. A key that already exists is trusted only after its
content's SHA-256 fingerprint compares equal (a batch holds no raw bytes: contents read by
reader processes never reach it); a different content with the same xxh3 digest gets the
next collision key. Keys a batch relies on are held against GC until it ends, so a capture in
flight never loses its objects. A put may name a delta *base* (:mod:`snapd.store.deltas`).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any, Protocol

from snapd.errors import StoreError
from snapd.store import deltas, objects, safeio, trees
from snapd.store.catalog import Catalog, objects_by_key
from snapd.store.holds import GcHolds
from snapd.store.objects import fingerprint
from snapd.store.records import MARK_COLUMNS, Mark, mark_row
from snapd.store.refs import new_mark_id, validate_label


def _row(e: trees.Entry) -> tuple[str, int, bytes | str | None]:
    """A version row's (kind, mode, object): a directory's entry has no key (NULL)."""
    return e.kind, e.mode, objects.db_key(e.key) if e.key else None


class ObjectStore(Protocol):
    """What a batch needs of the store it writes to (:class:`snapd.store.store.Store`)."""

    catalog: Catalog
    recent: deltas.Recent  # links of objects committed lately, for the next deltas
    hasher: objects.Hasher
    holds: GcHolds
    flush_bytes: int  # new content held in memory before a flush (FLUSH_BYTES unless a test lowers it)

    def object_path(self, key: str) -> Path: ...
    def get(self, key: str) -> bytes: ...
    def has(self, key: str) -> bool: ...
    def load_node(self, key: str) -> trees.Node: ...
    def load_nodes(self, keys: Iterable[str]) -> None: ...
    def cached_node(self, key: str) -> trees.Node | None: ...
    def cache_node(self, key: str, node: trees.Node, data: bytes | None = None) -> None: ...
    def last_objects(self, ws: int, paths: list[bytes]) -> dict[bytes, str]: ...  # and deltas.Chooser's


LARGE_OBJECT = 1 << 20
FLUSH_BYTES = 32 << 20  # new content held in memory before it is flushed (bounds RSS)
_NO_ENTRY = (None, None, None)  # a deletion's kind, mode, object


class StatChanges(Protocol):
    """Stat-cache rows to write (``StatCache.take_changes``): the paths dropped with all below
    them, then the rows set, made as SQLite takes them (never 10^5 tuples at once)."""

    def removed(self) -> list[bytes]: ...
    def rows(self) -> Iterable[tuple[bytes, int, int, int, int, int, int]]: ...  # path, stat, read ns


class Batch(deltas.Chooser):
    """A group of object and catalog writes that become durable together in ``commit``."""

    store: ObjectStore  # (deltas.Chooser types it loosely)

    def __init__(self, store: ObjectStore) -> None:
        self.store = store
        self._pending: dict[str, deltas.Pending] = {}  # no raw bytes: see put_digested
        self._pending_bytes = 0
        self._nodes: dict[str, trees.Node] = {}
        self._encoded: dict[str, bytes] = {}  # each node's bytes, as hashed for its key
        self._links: dict[str, tuple[str | None, int]] = {}  # see deltas.Chooser.prefetch_links
        self._held: set[str] = set()
        self._shards: set[Path] = set()
        # (workspace, time, paths, entries): one run per capture, rows made at commit (a
        # baseline's 10^5 rows as tuples would be ~15 MB more at the commit's peak)
        self._versions: list[tuple[int, int, list[bytes], list[trees.Entry | None]]] = []
        self._marks: list[Mark] = []
        self._heads: dict[int, str] = {}
        self._absent: set[str] = set()  # keys a prefetch found missing (see prefetch)
        self._stats: list[tuple[int, StatChanges]] = []  # written in order at commit
        # Objects this batch already flushed: key -> SHA-256 of the bytes we read. A repeat of
        # such a content is compared by this cryptographic fingerprint instead of reading the
        # object back (a baseline repeats most contents many times).
        self._flushed: dict[str, bytes] = {}
        self._keys: dict[str, str] = {}  # each key put, once
        self._done = False

    def __enter__(self) -> Batch:
        return self

    def __exit__(self, exc_type: object, *rest: object) -> None:
        if exc_type is None and not self._done:
            self.commit()
        self.close()

    def close(self) -> None:
        """Release GC protection (after commit or abort)."""
        if self._held:
            self.store.holds.release(self._held)
            self._held.clear()
        self._done = True

    def _hold(self, key: str) -> None:
        """Protect ``key`` from GC (caller holds ``store.holds.lock``)."""
        again = key in self._held
        self._held.add(key)
        self.store.holds.hold(key, again=again)

    # -- objects -----------------------------------------------------------------------------

    def prefetch(self, keys: Iterable[str]) -> None:
        """Look up many keys at once, so ``put`` skips a query for each missing one. Keys found
        present are held against GC right away, as ``put`` would hold them."""
        wanted = [k for k in set(keys) if k not in self._pending and k not in self._held]
        if not wanted:
            return
        with self.store.holds.lock:
            found = {k for k, _ in objects_by_key(self.store.catalog.read(), "1", wanted)}
            for k in found:
                self._hold(k)
        self._absent.update(k for k in wanted if k not in found)

    def put(self, data: bytes, digest: str | None = None, base: str | None = None) -> str:
        """Store ``data`` (deduplicated, collision-checked); return its key."""
        sha, encode = fingerprint(data), lambda: objects.encode(data)
        digest = digest or self.store.hasher(data)
        return self.put_digested(digest, len(data), sha, encode, base, data, lazy=True)

    def put_digested(
        self,
        digest: str,
        size: int,
        sha: bytes,
        encode: Callable[[], tuple[int, bytes]],
        base: str | None = None,
        data: bytes | None = None,
        lazy: bool = False,
    ) -> str:
        """Store a content known by its digest, size and :func:`fingerprint`, without its bytes
        (a reader process read them); ``encode`` gives its payload, asked only when it is new.
        A key already pending, flushed or stored is trusted only when the fingerprints agree.
        Every put of one content returns the same ``str`` (10^5 tree entries share ~10^4).
        With ``base`` and ``data`` (a mark's few contents): maybe a delta near ``base``."""
        key = self._put(digest, size, sha, lambda k: self._encode(k, encode, base, data, lazy))
        return self._keys.setdefault(key, key)

    def _put(self, digest: str, size: int, sha: bytes, encode: Callable[[str], deltas.Encoded]) -> str:
        base = objects.base_key(digest, size)
        n = 0
        while True:
            key = objects.variant_key(base, n)
            pending = self._pending.get(key)
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
                    self._hold(key)
            if not exists:
                break
            if fingerprint(self.store.get(key)) == sha:
                return key
            n += 1
        self._add(key, size, sha, encode(key))
        return key

    def _add(self, key: str, size: int, sha: bytes, encoded: deltas.Encoded) -> None:
        codec, payload, base, depth = encoded
        external = len(payload) >= LARGE_OBJECT
        if external:
            path = self.store.object_path(key)
            safeio.ensure_dir(path.parent)
            safeio.write_atomic(path, payload, sync_dir=False)
            self._shards.add(path.parent)
            self._pending[key] = deltas.Pending(codec, b"", sha, size, True, base, depth)
        else:
            self._pending[key] = deltas.Pending(codec, payload, sha, size, False, base, depth)
        with self.store.holds.lock:
            self._hold(key)
        self._pending_bytes += size
        if self._pending_bytes >= self.store.flush_bytes:
            self.flush()

    def load_node(self, key: str) -> trees.Node:
        node = self._nodes.get(key)
        return node if node is not None else self.store.load_node(key)

    def save_node(self, node: trees.Node, base: str | None = None) -> str:
        data = trees.encode_node(node)
        key = self.put(data, base=base)
        self._nodes[key], self._encoded[key] = node, data  # for this batch's reads and deltas
        return key

    def apply(self, root: str | None, changes: Mapping[bytes, trees.Change]) -> str:
        """A new tree: ``root`` with ``changes`` applied (only the changed paths are touched).

        The nodes it reads are read a tree level at a time; those it writes (~50 for a mark of
        10 files at 100k), new contents almost always, are encoded first, their keys and their
        bases' links looked up in one query each, then stored. Should one be taken by other
        bytes (a collision: a variant key), the tree is built again, each node stored as made.
        A tree built from nothing (a baseline) is stored as built."""
        if root is None:
            return trees.apply_changes(self.load_node, self.save_node, root, changes)
        staged: list[tuple[str, str, trees.Node, bytes, str | None]] = []

        def stage(node: trees.Node, base: str | None = None) -> str:
            data = trees.encode_node(node)
            digest = self.store.hasher(data)
            key = objects.base_key(digest, len(data))
            staged.append((key, digest, node, data, base))
            return key

        trees.load_levels(self.store.load_nodes, self.store.cached_node, root, changes)
        tree = trees.apply_changes(self.load_node, stage, root, changes)
        self.prefetch(key for key, _, _, _, _ in staged)
        self.prefetch_links(base for _, _, _, _, base in staged if base is not None)
        for key, digest, node, data, base in staged:
            if self.put(data, digest, base) != key:
                return trees.apply_changes(self.load_node, self.save_node, root, changes)
            self._nodes[key], self._encoded[key] = node, data
        return tree

    # -- catalog rows ------------------------------------------------------------------------

    def add_version(self, ws: int, path: bytes, when: int, entry: trees.Entry | None) -> None:
        if not self._versions or self._versions[-1][:2] != (ws, when):
            self._versions.append((ws, when, [], []))
        self._versions[-1][2].append(path)
        self._versions[-1][3].append(entry)

    def set_stats(self, ws: int, changes: StatChanges) -> None:
        """Record stat-cache rows at commit, after those recorded before. The batch takes
        ``changes`` over (a baseline's 10^5 rows are not copied)."""
        self._stats.append((ws, changes))

    def set_head(self, ws: int, tree: str) -> None:
        """Record ``tree`` as the workspace's captured state when the batch commits."""
        self._heads[ws] = tree

    def add_mark(
        self,
        ws: int,
        label: str,
        tree: str,
        *,
        kind: str = "user",
        message: str | None = None,
        agent: str | None = None,
        session: str | None = None,
        git_head: str | None = None,
        summary: dict[str, Any] | None = None,
        created: int | None = None,
        rules: str | None = None,
        root_mode: int | None = None,
        absent: tuple[bytes, ...] = (),
    ) -> Mark:
        """Queue a mark; its id is final, its ``seq`` is assigned at commit."""
        if kind == "user":
            validate_label(label)
        mark = Mark(
            new_mark_id(),
            ws,
            0,
            label,
            message,
            agent,
            session,
            created or time.time_ns(),
            git_head,
            tree,
            kind,
            False,
            summary or {},
            rules,
            root_mode,
            absent,
        )
        self._marks.append(mark)
        self._heads[ws] = tree
        return mark

    # -- durability --------------------------------------------------------------------------

    def _sync_files(self) -> None:
        for d in sorted(self._shards):
            safeio.fsync_dir(d)
        self._shards.clear()

    def _write_objects(self, c: Any, *, remember: bool) -> list[tuple[str, tuple[str | None, int]]]:
        """Insert the pending objects; ``remember``: the batch goes on (a flush), so keep each
        one's fingerprint for the puts that may repeat it (a commit ends the batch: none)."""
        now = time.time_ns()
        rows = []
        keys = list(self._pending)
        present = {r[0]: r[1:] for r in objects_by_key(c, "codec, external, data", keys)}
        for key, (codec, payload, sha, size, external, base, depth) in self._pending.items():
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
        self._pending.clear()
        self._pending_bytes = 0
        return [(r[0], (r[7], r[8])) for r in rows]  # chain links, for Store.recent once committed

    def _write_stats(self, c: Any) -> None:
        for ws, changes in self._stats:
            for path in changes.removed():
                # The path and everything below it ("/" is 0x2f, "0" the next byte).
                # Two statements: with an OR, SQLite scans the whole workspace for each one.
                c.execute("DELETE FROM stats WHERE workspace=? AND path=?", (ws, path))
                below = (ws, path + b"/", path + b"0")
                c.execute("DELETE FROM stats WHERE workspace=? AND path>? AND path<?", below)
            upserts = ((ws, *row) for row in changes.rows())
            c.executemany("INSERT OR REPLACE INTO stats VALUES (?,?,?,?,?,?,?,?)", upserts)
        self._stats.clear()

    def _file_size(self, key: str) -> int:
        path = self.store.object_path(key)
        try:
            return path.stat().st_size
        except OSError as exc:
            raise safeio.os_error(exc, "stat", path) from exc

    def flush(self) -> None:
        """Make the objects put so far durable (they stay protected until the batch ends).

        A failure ends the batch (see :meth:`commit`)."""
        try:
            self._sync_files()
            with self.store.catalog.write() as c:
                written = self._write_objects(c, remember=True)
        except BaseException:
            self._done = True
            raise
        self.store.recent.add_all(written)

    def commit(self) -> list[Mark]:
        """Objects, versions and marks durable in one catalog transaction; return the marks.

        Only once: a commit that fails ends the batch, which is never committed again. (An
        fsync that failed must not be retried: a second fsync can succeed although the data
        the first one covered was dropped. The caller starts over with a new batch, which
        writes its object files afresh.)"""
        if self._done:
            raise StoreError("this batch was committed, or failed, already: start a new one")
        self._done = True
        self._sync_files()
        committed: list[Mark] = []
        with self.store.catalog.write() as c:
            written = self._write_objects(c, remember=False)
            # In the index's order (workspace, path, time): SQLite appends, no random page splits
            rows = (
                (ws, paths[i], when, *(_row(e) if (e := entries[i]) else _NO_ENTRY))
                for ws, when, paths, entries in self._versions
                for i in sorted(range(len(paths)), key=paths.__getitem__)
            )
            c.executemany(
                "INSERT INTO versions (workspace, path, time, kind, mode, object) VALUES (?,?,?,?,?,?)", rows
            )
            for m in self._marks:
                seq = c.execute(
                    "SELECT COALESCE(MAX(seq), 0) + 1 FROM marks WHERE workspace=?", (m.workspace,)
                ).fetchone()[0]
                c.execute(
                    f"INSERT INTO marks ({MARK_COLUMNS}) VALUES ({','.join('?' * 16)})", mark_row(m, seq)
                )
                committed.append(dataclasses.replace(m, seq=seq))
            for ws, tree in self._heads.items():
                c.execute("UPDATE workspaces SET head=? WHERE id=?", (tree, ws))
            self._write_stats(c)
        self.store.recent.add_all(written)
        for key, node in self._nodes.items():
            self.store.cache_node(key, node, self._encoded.get(key))
        self._nodes.clear()
        self._encoded.clear()
        self._versions.clear()
        self._marks.clear()
        self._heads.clear()
        return committed
