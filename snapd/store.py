"""The store: objects, snapshot trees, workspaces, marks and versions in one directory.

Layout (see docs/storage.md)::

    STORE/catalog.sqlite          SQLite catalog (WAL), inline objects under 1 MiB
    STORE/objects/ab/<key>        larger objects, one file each (zstd or raw payload)

Writes happen in a :class:`Batch`: objects are encoded as they are put, large ones written and
fsynced at once, and ``commit`` makes everything durable with one directory fsync per shard
and one catalog transaction, so object bytes are durable before any row refers to them and a
100k-file baseline costs a handful of fsyncs, not 100k.

A key that already exists is trusted only after its bytes compare equal; a different content
with the same digest gets the next collision key. Keys a batch relies on are protected from
GC until the batch ends, so a capture in flight never loses its objects.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import threading
import time
from collections import Counter, OrderedDict
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from snapd import objects, safeio, trees
from snapd.catalog import Catalog
from snapd.errors import Ambiguous, CorruptObject, MissingObject, NotFound, StoreError
from snapd.refs import FULL_ID, new_mark_id, parse_ref, validate_label

LARGE_OBJECT = 1 << 20
StatRow = tuple[tuple[int, int, int, int, int], int]  # (st_mode, size, mtime, ctime, ino), read ns
FLUSH_BYTES = 32 << 20  # new content held in memory before it is flushed (bounds RSS)
NODE_CACHE = 4096


@dataclass(frozen=True)
class Workspace:
    id: int
    root: bytes
    created: int
    watching: bool


@dataclass(frozen=True)
class Mark:
    id: str
    workspace: int
    seq: int
    label: str
    message: str | None
    agent: str | None
    session: str | None
    created: int  # ns since the epoch
    git_head: str | None
    tree: str
    kind: str
    pinned: bool
    summary: dict[str, Any]


@dataclass(frozen=True)
class Version:
    path: bytes
    time: int
    entry: trees.Entry | None  # None: the path was deleted


_MARK_COLS = (
    "id, workspace, seq, label, message, agent, session, created, git_head, tree, kind, pinned, summary"
)


def _mark(row: tuple[Any, ...]) -> Mark:
    return Mark(
        id=row[0],
        workspace=row[1],
        seq=row[2],
        label=row[3],
        message=row[4],
        agent=row[5],
        session=row[6],
        created=row[7],
        git_head=row[8],
        tree=row[9],
        kind=row[10],
        pinned=bool(row[11]),
        summary=json.loads(row[12]) if row[12] else {},
    )


class Store:
    def __init__(self, directory: Path, hasher: objects.Hasher = objects.xxh3_hex) -> None:
        self.dir = directory
        self.hasher = hasher
        safeio.ensure_dir(directory)
        safeio.ensure_dir(directory / "objects")
        self.catalog = Catalog(directory / "catalog.sqlite")
        self._nodes: OrderedDict[str, trees.Node] = OrderedDict()
        self._nodes_lock = threading.Lock()
        self._gc_lock = threading.Lock()  # object lookups vs. GC deletions
        self._inuse: Counter[str] = Counter()

    @classmethod
    def open(cls, directory: Path, hasher: objects.Hasher = objects.xxh3_hex) -> Store:
        return cls(Path(directory), hasher)

    def close(self) -> None:
        self.catalog.close()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- objects -----------------------------------------------------------------------------

    def object_path(self, key: str) -> Path:
        objects.parse_key(key)
        return self.dir / "objects" / key[:2] / key

    def _raw_payload(self, key: str) -> tuple[int, bytes]:
        row = (
            self.catalog.read()
            .execute("SELECT codec, external, data FROM objects WHERE key=?", (key,))
            .fetchone()
        )
        if row is None:
            raise MissingObject(f"object {key} is missing from the store", key=key)
        codec, external, data = row
        if external:
            try:
                data = self.object_path(key).read_bytes()
            except FileNotFoundError as exc:
                raise MissingObject(f"object file for {key} is missing", key=key) from exc
        return codec, data

    def get(self, key: str) -> bytes:
        """The content named ``key``, verified against it (CorruptObject otherwise)."""
        codec, payload = self._raw_payload(key)
        return objects.decode(key, codec, payload, self.hasher)

    def has(self, key: str) -> bool:
        row = self.catalog.read().execute("SELECT 1 FROM objects WHERE key=?", (key,)).fetchone()
        return row is not None

    def load_node(self, key: str) -> trees.Node:
        with self._nodes_lock:
            node = self._nodes.get(key)
            if node is not None:
                self._nodes.move_to_end(key)
                return node
        node = trees.decode_node(self.get(key))
        self._cache_node(key, node)
        return node

    def _cache_node(self, key: str, node: trees.Node) -> None:
        with self._nodes_lock:
            self._nodes[key] = node
            while len(self._nodes) > NODE_CACHE:
                self._nodes.popitem(last=False)

    def batch(self) -> Batch:
        return Batch(self)

    # -- workspaces --------------------------------------------------------------------------

    def add_workspace(self, root: bytes) -> int:
        with self.catalog.write() as c:
            row = c.execute("SELECT id FROM workspaces WHERE root=?", (root,)).fetchone()
            if row is not None:
                c.execute("UPDATE workspaces SET watching=1 WHERE id=?", (row[0],))
                return int(row[0])
            cur = c.execute("INSERT INTO workspaces (root, created) VALUES (?, ?)", (root, time.time_ns()))
            return int(cur.lastrowid or 0)

    def workspaces(self) -> list[Workspace]:
        rows = (
            self.catalog.read()
            .execute("SELECT id, root, created, watching FROM workspaces ORDER BY id")
            .fetchall()
        )
        return [Workspace(r[0], bytes(r[1]), r[2], bool(r[3])) for r in rows]

    def workspace(self, ws: int) -> Workspace:
        for w in self.workspaces():
            if w.id == ws:
                return w
        raise NotFound(f"no workspace with id {ws}")

    def head(self, ws: int) -> str | None:
        """The tree of everything captured in ``ws``, marks or not (None before a baseline)."""
        row = self.catalog.read().execute("SELECT head FROM workspaces WHERE id=?", (ws,)).fetchone()
        return row[0] if row else None

    def load_stats(self, ws: int) -> dict[bytes, StatRow]:
        """The stat cache of ``ws``: path -> ((st_mode, size, mtime_ns, ctime_ns, ino), read ns).

        It holds every captured path and is committed with the head tree it describes.
        """
        rows = self.catalog.read().execute(
            "SELECT path, mode, size, mtime, ctime, ino, read FROM stats WHERE workspace=?", (ws,)
        )
        return {bytes(r[0]): ((r[1], r[2], r[3], r[4], r[5]), r[6]) for r in rows}

    def root_id(self, ws: int) -> str | None:
        """Identity (``dev:inode``) of the directory the workspace was created on."""
        row = self.catalog.read().execute("SELECT root_id FROM workspaces WHERE id=?", (ws,)).fetchone()
        return row[0] if row else None

    def set_root_id(self, ws: int, root_id: str) -> None:
        with self.catalog.write() as c:
            c.execute("UPDATE workspaces SET root_id=? WHERE id=?", (root_id, ws))

    def set_watching(self, ws: int, watching: bool) -> None:
        with self.catalog.write() as c:
            c.execute("UPDATE workspaces SET watching=? WHERE id=?", (int(watching), ws))

    def forget_workspace(self, ws: int) -> int:
        """Delete a workspace's marks, versions and eviction records; GC reclaims the objects."""
        with self.catalog.write() as c:
            n = c.execute("DELETE FROM marks WHERE workspace=?", (ws,)).rowcount
            c.execute("DELETE FROM versions WHERE workspace=?", (ws,))
            c.execute("DELETE FROM evictions WHERE workspace=?", (ws,))
            c.execute("DELETE FROM stats WHERE workspace=?", (ws,))
            c.execute("DELETE FROM workspaces WHERE id=?", (ws,))
        return int(n)

    # -- marks -------------------------------------------------------------------------------

    def marks(self, ws: int | None = None, limit: int | None = None) -> list[Mark]:
        """Marks, newest first (all workspaces when ``ws`` is None)."""
        sql = f"SELECT {_MARK_COLS} FROM marks"
        args: list[Any] = []
        if ws is not None:
            sql += " WHERE workspace=?"
            args.append(ws)
        sql += " ORDER BY created DESC, seq DESC"
        if limit is not None:
            sql += " LIMIT ?"
            args.append(limit)
        return [_mark(r) for r in self.catalog.read().execute(sql, args)]

    def mark(self, mark_id: str) -> Mark:
        row = self.catalog.read().execute(f"SELECT {_MARK_COLS} FROM marks WHERE id=?", (mark_id,)).fetchone()
        if row is None:
            raise NotFound(f"no mark {mark_id}")
        return _mark(row)

    def latest_mark(self, ws: int) -> Mark | None:
        row = (
            self.catalog.read()
            .execute(f"SELECT {_MARK_COLS} FROM marks WHERE workspace=? ORDER BY seq DESC LIMIT 1", (ws,))
            .fetchone()
        )
        return _mark(row) if row else None

    def resolve(self, ws: int, ref: str, session: str | None = None) -> Mark:
        """Find the mark a user means (see :mod:`snapd.refs`) in workspace ``ws``."""
        r = parse_ref(ref)
        db = self.catalog.read()
        if r.is_id:
            rows = db.execute(
                f"SELECT {_MARK_COLS} FROM marks WHERE workspace=? AND id LIKE ? ORDER BY seq DESC",
                (ws, r.base + "%"),
            ).fetchall()
            if not rows:
                evicted = db.execute(
                    "SELECT mark FROM evictions WHERE workspace=? AND mark LIKE ?", (ws, r.base + "%")
                ).fetchone()
                why = f" (mark {evicted[0]} was pruned by retention)" if evicted else ""
                raise NotFound(f"no mark with id {r.base} in this workspace{why}")
            if len(rows) > 1 and not FULL_ID.match(r.base):
                ids = ", ".join(f"{row[0]} ({row[3]})" for row in rows[:10])
                raise Ambiguous(
                    f"mark id prefix {r.base} is ambiguous: {ids}", candidates=[row[0] for row in rows]
                )
            base = _mark(rows[0])
        else:
            sql = f"SELECT {_MARK_COLS} FROM marks WHERE workspace=? AND label=?"
            args: list[Any] = [ws, r.base]
            if session is not None:
                sql += " AND session=?"
                args.append(session)
            row = db.execute(sql + " ORDER BY seq DESC LIMIT 1", args).fetchone()
            if row is None:
                scope = f" in session {session}" if session else ""
                raise NotFound(f"no mark labelled {r.base!r}{scope} in this workspace")
            base = _mark(row)
        if r.back == 0:
            return base
        row = db.execute(
            f"SELECT {_MARK_COLS} FROM marks WHERE workspace=? AND seq<? ORDER BY seq DESC LIMIT 1 OFFSET ?",
            (ws, base.seq, r.back - 1),
        ).fetchone()
        if row is None:
            raise NotFound(f"{ref}: there are fewer than {r.back} marks before {base.id}")
        return _mark(row)

    def set_pinned(self, mark_id: str, pinned: bool) -> None:
        with self.catalog.write() as c:
            if c.execute("UPDATE marks SET pinned=? WHERE id=?", (int(pinned), mark_id)).rowcount == 0:
                raise NotFound(f"no mark {mark_id}")

    def evictions(self, ws: int) -> list[dict[str, Any]]:
        rows = (
            self.catalog.read()
            .execute(
                "SELECT mark, label, created, evicted, reason FROM evictions"
                " WHERE workspace=? ORDER BY created DESC",
                (ws,),
            )
            .fetchall()
        )
        return [dict(zip(("mark", "label", "created", "evicted", "reason"), r, strict=True)) for r in rows]

    def versions(self, ws: int, path: bytes) -> list[Version]:
        """Every recorded version of ``path``, oldest first."""
        rows = (
            self.catalog.read()
            .execute(
                "SELECT time, kind, mode, object FROM versions"
                " WHERE workspace=? AND path=? ORDER BY time, id",
                (ws, path),
            )
            .fetchall()
        )
        out = []
        for t, kind, mode, key in rows:
            entry = None
            if kind is not None:
                size = objects.parse_key(key)[1] if kind != "dir" else 0
                entry = trees.Entry(kind, mode, size, key or "")
            out.append(Version(path, t, entry))
        return out

    def stored_bytes(self) -> int:
        row = self.catalog.read().execute("SELECT COALESCE(SUM(stored), 0) FROM objects").fetchone()
        return int(row[0])

    def disk_bytes(self) -> int:
        """Allocated bytes of the whole store directory, as ``du`` counts them."""
        total = 0
        for p in self.dir.rglob("*"):
            try:
                total += p.lstat().st_blocks * 512
            except FileNotFoundError:
                continue
        return total


def fingerprint(data: bytes) -> bytes:
    """A cryptographic digest standing in for the bytes when a batch re-meets a content it has
    already flushed (SHA-256: collision-resistant, unlike xxh3, and the fastest here)."""
    return hashlib.sha256(data).digest()


class Batch:
    """A group of object and catalog writes that become durable together in ``commit``."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self._pending: dict[str, tuple[int, bytes, bytes, bool]] = {}  # key -> codec, payload, raw, external
        self._pending_bytes = 0
        self._nodes: dict[str, trees.Node] = {}
        self._held: set[str] = set()
        self._shards: set[Path] = set()
        self._versions: list[tuple[int, bytes, int, str | None, int | None, str | None]] = []
        self._marks: list[Mark] = []
        self._heads: dict[int, str] = {}
        self._absent: set[str] = set()  # keys a prefetch found missing (see prefetch)
        self._stats: dict[tuple[int, bytes], StatRow | None] = {}
        # Objects this batch already flushed: key -> SHA-256 of the bytes we read. A repeat of
        # such a content is compared by this cryptographic fingerprint instead of reading the
        # object back (a baseline repeats most contents many times).
        self._flushed: dict[str, bytes] = {}
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
            with self.store._gc_lock:
                self.store._inuse.subtract(self._held)
                self.store._inuse += Counter()  # drop zero counts
            self._held.clear()
        self._done = True

    def _hold(self, key: str) -> None:
        if key not in self._held:
            self._held.add(key)
            self.store._inuse[key] += 1

    # -- objects -----------------------------------------------------------------------------

    def prefetch(self, keys: Iterable[str]) -> None:
        """Look up many keys in one query, so ``put`` skips a query for each missing one.

        Keys found present are held against GC right away, as ``put`` would hold them.
        """
        wanted = [k for k in set(keys) if k not in self._pending and k not in self._held]
        if not wanted:
            return
        marks = ",".join("?" * len(wanted))
        with self.store._gc_lock:
            found = {
                k
                for (k,) in self.store.catalog.read().execute(
                    f"SELECT key FROM objects WHERE key IN ({marks})", wanted
                )
            }
            for k in found:
                self._hold(k)
        self._absent.update(k for k in wanted if k not in found)

    def put(
        self,
        data: bytes,
        digest: str | None = None,
        encoded: tuple[int, bytes] | None = None,
        sha: bytes | None = None,
    ) -> str:
        """Store ``data`` (deduplicated, collision-checked); return its key.

        ``digest``, ``encoded`` and ``sha`` (:func:`fingerprint`) may be precomputed by a
        worker thread (see ingest).
        """
        base = objects.base_key(digest or self.store.hasher(data), len(data))
        n = 0
        while True:
            key = objects.variant_key(base, n)
            pending = self._pending.get(key)
            if pending is not None:
                if pending[2] == data:
                    return key
                n += 1
                continue
            seen = self._flushed.get(key)
            if seen is not None:
                if seen == (sha or fingerprint(data)):
                    return key
                n += 1
                continue
            if n == 0 and key in self._absent:
                # Missing at prefetch; if another batch stores it meanwhile, commit compares.
                self._absent.discard(key)
                break
            with self.store._gc_lock:
                exists = key in self._held or self.store.has(key)
                if exists:
                    self._hold(key)
            if not exists:
                break
            if self.store.get(key) == data:
                return key
            n += 1
        self._add(key, data, encoded)
        return key

    def _add(self, key: str, data: bytes, encoded: tuple[int, bytes] | None) -> None:
        codec, payload = encoded or objects.encode(data)
        external = len(payload) >= LARGE_OBJECT
        if external:
            path = self.store.object_path(key)
            safeio.ensure_dir(path.parent)
            safeio.write_atomic(path, payload, sync_dir=False)
            self._shards.add(path.parent)
            self._pending[key] = (codec, b"", data, True)
        else:
            self._pending[key] = (codec, payload, data, False)
        with self.store._gc_lock:
            self._hold(key)
        self._pending_bytes += len(data)
        if self._pending_bytes >= FLUSH_BYTES:
            self.flush()

    def load_node(self, key: str) -> trees.Node:
        node = self._nodes.get(key)
        return node if node is not None else self.store.load_node(key)

    def save_node(self, node: trees.Node) -> str:
        key = self.put(trees.encode_node(node))
        self._nodes[key] = node
        return key

    def apply(self, root: str | None, changes: Mapping[bytes, trees.Change]) -> str:
        """A new tree: ``root`` with ``changes`` applied (only the changed paths are touched)."""
        return trees.apply_changes(self.load_node, self.save_node, root, changes)

    # -- catalog rows ------------------------------------------------------------------------

    def add_version(self, ws: int, path: bytes, when: int, entry: trees.Entry | None) -> None:
        if entry is None:
            self._versions.append((ws, path, when, None, None, None))
        else:
            self._versions.append((ws, path, when, entry.kind, entry.mode, entry.key or None))

    def set_stat(self, ws: int, path: bytes, value: StatRow | None) -> None:
        """Record (or with None drop, subtree included) a stat-cache entry at commit."""
        self._stats[(ws, path)] = value

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
        )
        self._marks.append(mark)
        self._heads[ws] = tree
        return mark

    # -- durability --------------------------------------------------------------------------

    def _sync_files(self) -> None:
        for d in sorted(self._shards):
            safeio.fsync_dir(d)
        self._shards.clear()

    def _write_objects(self, c: Any) -> None:
        now = time.time_ns()
        rows = []
        keys = list(self._pending)
        present: dict[str, tuple[int, int, bytes | None]] = {}
        for i in range(0, len(keys), 500):  # one query per 500 keys, not one per key
            chunk = keys[i : i + 500]
            marks = ",".join("?" * len(chunk))
            sql = f"SELECT key, codec, external, data FROM objects WHERE key IN ({marks})"
            present.update((r[0], (r[1], r[2], r[3])) for r in c.execute(sql, chunk))
        for key, (codec, payload, raw, external) in self._pending.items():
            row = present.get(key)
            if row is not None:
                # Another batch stored this key meanwhile: equal bytes, or a collision raced.
                stored = self.store.object_path(key).read_bytes() if row[1] else (row[2] or b"")
                if objects.decode(key, row[0], stored, self.store.hasher) != raw:
                    raise StoreError(f"object key {key} collided with a concurrent write; retry")
                continue
            size = len(raw)
            stored_len = self.store.object_path(key).stat().st_size if external else len(payload)
            rows.append((key, size, codec, stored_len, int(external), now, None if external else payload))
            self._flushed[key] = fingerprint(raw)
        c.executemany(
            "INSERT INTO objects (key, size, codec, stored, external, created, data) VALUES (?,?,?,?,?,?,?)",
            rows,
        )
        self._pending.clear()
        self._pending_bytes = 0

    def _write_stats(self, c: Any) -> None:
        upserts = []
        for (ws, path), value in self._stats.items():
            if value is None:
                # The path and everything below it ("/" is 0x2f, "0" the next byte).
                # Two statements: with an OR, SQLite scans the whole workspace for each one.
                c.execute("DELETE FROM stats WHERE workspace=? AND path=?", (ws, path))
                below = (ws, path + b"/", path + b"0")
                c.execute("DELETE FROM stats WHERE workspace=? AND path>? AND path<?", below)
            else:
                (mode, size, mtime, ctime, ino), read = value
                upserts.append((ws, path, mode, size, mtime, ctime, ino, read))
        c.executemany("INSERT OR REPLACE INTO stats VALUES (?,?,?,?,?,?,?,?)", upserts)
        self._stats.clear()

    def flush(self) -> None:
        """Make the objects put so far durable (they stay protected until the batch ends)."""
        self._sync_files()
        with self.store.catalog.write() as c:
            self._write_objects(c)

    def commit(self) -> list[Mark]:
        """Objects, versions and marks durable in one catalog transaction; return the marks."""
        if self._done:
            raise StoreError("batch already committed")
        self._sync_files()
        committed: list[Mark] = []
        with self.store.catalog.write() as c:
            self._write_objects(c)
            c.executemany(
                "INSERT INTO versions (workspace, path, time, kind, mode, object) VALUES (?,?,?,?,?,?)",
                self._versions,
            )
            for m in self._marks:
                seq = c.execute(
                    "SELECT COALESCE(MAX(seq), 0) + 1 FROM marks WHERE workspace=?", (m.workspace,)
                ).fetchone()[0]
                c.execute(
                    f"INSERT INTO marks ({_MARK_COLS}) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)",
                    (
                        m.id,
                        m.workspace,
                        seq,
                        m.label,
                        m.message,
                        m.agent,
                        m.session,
                        m.created,
                        m.git_head,
                        m.tree,
                        m.kind,
                        0,
                        json.dumps(m.summary),
                    ),
                )
                committed.append(dataclasses.replace(m, seq=seq))
            for ws, tree in self._heads.items():
                c.execute("UPDATE workspaces SET head=? WHERE id=?", (tree, ws))
            self._write_stats(c)
        for key, node in self._nodes.items():
            self.store._cache_node(key, node)
        self._nodes.clear()
        self._versions.clear()
        self._marks.clear()
        self._heads.clear()
        self._done = True
        return committed


def iter_reachable(store: Store, roots: Iterable[str], seen: set[str] | None = None) -> Iterator[str]:
    """Keys reachable from the tree ``roots`` (nodes included); a bad node raises."""
    seen = set() if seen is None else seen
    for root in roots:
        before = set(seen)
        trees.reachable(store.load_node, root, seen)
        yield from seen - before


__all__ = ["Store", "Batch", "Mark", "Workspace", "Version", "CorruptObject", "iter_reachable"]
