"""The store: objects, snapshot trees, workspaces, marks and versions in one directory.

Layout (see docs/storage.md)::

    STORE/catalog.sqlite          SQLite catalog (WAL), inline objects under 1 MiB
    STORE/objects/ab/<key>        larger objects, one file each (zstd or raw payload)

This module reads (every object verified against its key, tree nodes cached), resolves mark
references, and keeps small catalog records (workspaces, pins). Writes of objects, versions
and marks go through :class:`snapd.store.batch.Batch` (``Store.batch()``), which makes them durable
together. The store's GC lock and its table of keys held by batches in flight are what keep
GC from deleting an object a capture is about to reference.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

from snapd.errors import Ambiguous, CorruptObject, MissingObject, NotFound
from snapd.store import deltas, fan, nodes, objects, pushed, safeio, trees
from snapd.store.batch import Batch
from snapd.store.catalog import Catalog
from snapd.store.holds import GcHolds
from snapd.store.lru import BoundedLru
from snapd.store.objwrite import FLUSH_BYTES
from snapd.store.reading import StoreReader
from snapd.store.records import MARK_COLUMNS, Mark, Version, WorkspaceRecord, mark_from_row, version_from_row
from snapd.store.refs import FULL_ID, OWN_LABELS, parse_ref

NODE_CACHE = 4096
# The node cache is also bounded by the entries it holds: a directory of 21,231 entries (the
# npm corpus) is megabytes, and a mark rewrites it, so 4,096 of its versions held the daemon
# at 848 MB after 214 marks (bench_mark.py, npm-100k); with 2^18 entries it was 200 MB, and
# less with the nodes held packed (nodes.PackedNode) instead of decoded beside their records.
# Not fewer: npm-100k has several such directories (one per release side by side), and marks
# of files spread over the tree need each one's newest version and the one before; with 2^16
# they evicted each other and a mark took 533 ms instead of 36 (ab_commits.py, the same run).
NODE_ENTRIES = 1 << 18


def _node_cache() -> BoundedLru[trees.Node]:
    """The node cache, bounded by count and by entries: nodes read or written lately, packed
    (their records verified against their keys: the next deltas' bases too)."""
    return BoundedLru(NODE_CACHE, NODE_ENTRIES, len)


class Store(StoreReader):
    catalog: Catalog

    def __init__(
        self, directory: Path, hasher: objects.Hasher = objects.xxh3_hex, flush_bytes: int = FLUSH_BYTES
    ) -> None:
        self.flush_bytes = flush_bytes  # a batch flushes its new content past this (tests lower it)
        safeio.ensure_dir(directory)
        safeio.ensure_dir(directory / "objects")
        super().__init__(directory, Catalog(directory / "catalog.sqlite"), hasher)
        self._nodes = _node_cache()
        self._nodes_lock = threading.Lock()
        self.holds = GcHolds()  # keys write batches rely on, spared by the GC sweep
        self.recent = deltas.Recent()  # objects batches committed lately (the next deltas' bases)

    @classmethod
    def open(
        cls, directory: Path, hasher: objects.Hasher = objects.xxh3_hex, flush_bytes: int = FLUSH_BYTES
    ) -> Store:
        return cls(Path(directory), hasher, flush_bytes)

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- objects -----------------------------------------------------------------------------

    def load_nodes(self, keys: Iterable[str]) -> None:
        """Cache the nodes among ``keys`` that the cache lacks, their chains read with one query
        (per 500 nodes); one that cannot be read is left for :meth:`load_node` to report."""
        fans: list[tuple[str, bytes]] = []  # wide directories: their parts read next, together
        for key, data in self._readable(k for k in keys if self.cached_node(k) is None):
            if fan.is_fan(data):
                fans.append((key, data))
                continue
            try:
                self.cache_node(key, *nodes.decode_records(data))
            except CorruptObject:
                continue
        if not fans:
            return
        wanted = []
        for _, data in fans:
            try:
                wanted += [part.key for part in fan.decode(data)]
            except CorruptObject:
                continue
        parts = dict(self._readable(wanted))
        for key, data in fans:
            try:
                self.cache_node(key, fan.assemble(data, parts))
            except (CorruptObject, KeyError):  # a part damaged or missing: load_node reports it
                continue

    def _readable(self, keys: Iterable[str]) -> Iterator[tuple[str, bytes]]:
        """(key, verified content) of each of ``keys`` that can be read, their chains read with
        one query per 500; one that cannot is left out (:meth:`load_node` reports it)."""
        for key, chain in self._chains(keys, 500):
            try:
                yield key, deltas.decode_chain(key, chain, self._payload, self.hasher)
            except (CorruptObject, MissingObject):
                continue

    def delta_link(self, key: str) -> tuple[str | None, int] | None:
        """(delta base, depth) of ``key``: (None, 0) for an object stored whole; None if absent."""
        db = self.catalog.read()
        row = db.execute("SELECT base, depth FROM objects WHERE key=?", (objects.db_key(key),)).fetchone()
        return None if row is None else (None if row[0] is None else objects.py_key(row[0]), int(row[1]))

    def cached_node(self, key: str) -> trees.Node | None:
        with self._nodes_lock:
            return self._nodes.get(key)

    def node_bytes(self, key: str) -> bytes | None:
        """The encoding of node ``key`` if read or written lately (checked against the key
        when it was cached: a read verified it, a batch hashed it to make the key)."""
        with self._nodes_lock:
            node = self._nodes.get(key)
        if isinstance(node, fan.FanNode):  # its own bytes, not its parts' records joined
            return node.encoding
        records = nodes.records_of(node)
        return None if records is None else nodes.joined(records)

    def node_records(self, key: str) -> nodes.Records | None:
        """:meth:`node_bytes` as :data:`nodes.Records`, for a batch to splice an edit into."""
        with self._nodes_lock:
            return nodes.records_of(self._nodes.get(key))

    def has(self, key: str) -> bool:
        db = self.catalog.read()
        return db.execute("SELECT 1 FROM objects WHERE key=?", (objects.db_key(key),)).fetchone() is not None

    def load_node(self, key: str) -> trees.Node:
        with self._nodes_lock:
            node = self._nodes.touch(key)
            if node is not None:
                return node
        node, records = self.decode_node(self.get(key))
        self.cache_node(key, node, records)
        return node

    def cache_node(self, key: str, node: trees.Node, records: nodes.Records | None = None) -> None:
        """Cache ``node``; with ``records``, its encoding, which must make up ``key``'s content,
        it is held as them (packed)."""
        if records is not None and not isinstance(node, nodes.PackedNode):
            node = nodes.PackedNode(*records)
        with self._nodes_lock:
            self._nodes.put(key, node)

    @property
    def cached_nodes(self) -> int:
        """How many tree nodes the cache holds now."""
        return len(self._nodes)

    def forget_caches(self) -> None:
        """Empty the tree-node cache and the chain links of recent objects. After a baseline
        they hold the last of 10^4-10^5 nodes written and a link for each of its 10^4 objects
        (5 MB at django-100k), scattered through a heap the baseline's short-lived objects
        fragmented: kept, they pin that heap (~15 MB at 100k files); marks reload the few
        nodes and links they need (a link: one indexed query)."""
        with self._nodes_lock:
            self._nodes = _node_cache()
        self.recent.clear()

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
            ws = int(cur.lastrowid or 0)
            # Ids are reused once the highest is forgotten: a journal under this id is another
            # workspace's (left by a version that kept it at forget), never this new one's.
            safeio.remove_durably(self.journal_path(ws))
            return ws

    def journal_path(self, ws: int) -> Path:
        """Where a rollback of workspace ``ws`` keeps its write-ahead journal (snapd.rollback)."""
        return self.dir / "journal" / f"workspace-{ws}.json"

    def workspaces(self) -> list[WorkspaceRecord]:
        rows = (
            self.catalog.read()
            .execute("SELECT id, root, created, watching FROM workspaces ORDER BY id")
            .fetchall()
        )
        return [WorkspaceRecord(r[0], bytes(r[1]), r[2], bool(r[3])) for r in rows]

    def head(self, ws: int) -> str | None:
        """The tree of everything captured in ``ws``, marks or not (None before a baseline)."""
        row = self.catalog.read().execute("SELECT head FROM workspaces WHERE id=?", (ws,)).fetchone()
        return row[0] if row else None

    def live_ignored(self, ws: int) -> str | None:
        """The key of ``ws``'s ignored names as of its last commit (snapd.store.ignored; None:
        never recorded, a store from before format 8)."""
        row = self.catalog.read().execute("SELECT ignored FROM workspaces WHERE id=?", (ws,)).fetchone()
        return row[0] if row else None

    def live_rules(self, ws: int) -> str | None:
        """The key of the rule inputs ``ws``'s last commit recorded (None: none recorded)."""
        sql = "SELECT rules FROM states WHERE workspace=? ORDER BY time DESC, id DESC LIMIT 1"
        row = self.catalog.read().execute(sql, (ws,)).fetchone()
        if row is None:
            mark = self.latest_mark(ws)
            return mark.rules if mark is not None else None
        return row[0] if row else None

    def load_stats(self, ws: int) -> Iterator[tuple[bytes, bytes]]:
        """The stat cache of ``ws``: rows of (path, entry packed as :data:`snapd.statrow.ROW`),
        in path order (the primary key's: free), which the reconcile scan visits. Fetched
        4,096 rows per call: the whole result at once (~30 MB at 10^5, for a moment) left the
        daemon's RSS that much higher for good (freed memory the allocator keeps).

        It holds every captured path and is committed with the head tree it describes.
        """
        sql = "SELECT path, sig FROM stats WHERE workspace=? ORDER BY path"
        cur = self.catalog.read().execute(sql, (ws,))
        while rows := cur.fetchmany(4096):
            yield from rows  # BLOBs come back as bytes

    def root_id(self, ws: int) -> str | None:
        """Identity (``dev:inode``) of the directory the workspace was created on."""
        row = self.catalog.read().execute("SELECT root_id FROM workspaces WHERE id=?", (ws,)).fetchone()
        return row[0] if row else None

    def set_root_id(self, ws: int, root_id: str) -> None:
        with self.catalog.write() as c:
            c.execute("UPDATE workspaces SET root_id=? WHERE id=?", (root_id, ws))

    def last_rollback(self, ws: int) -> dict[str, Any] | None:
        """What the workspace's last rollback that changed something did: ``target`` (mark id),
        ``after`` (the tree it left), ``pre`` (its pre-rollback mark id)."""
        row = self.catalog.read().execute("SELECT last_rollback FROM workspaces WHERE id=?", (ws,)).fetchone()
        return json.loads(row[0]) if row and row[0] else None

    def set_last_rollback(self, ws: int, value: dict[str, Any] | None) -> None:
        text = json.dumps(value) if value is not None else None
        with self.catalog.write() as c:
            c.execute("UPDATE workspaces SET last_rollback=? WHERE id=?", (text, ws))

    def set_watching(self, ws: int, watching: bool) -> None:
        with self.catalog.write() as c:
            c.execute("UPDATE workspaces SET watching=? WHERE id=?", (int(watching), ws))

    def footprint(self, ws: int) -> dict[str, int]:
        """What forgetting ``ws`` deletes: its marks, its file versions, and the bytes of
        content they name (some may be shared with other workspaces; GC frees the rest)."""
        db = self.catalog.read()
        marks = db.execute("SELECT COUNT(*) FROM marks WHERE workspace=?", (ws,)).fetchone()[0]
        versions, size = db.execute(
            "SELECT COUNT(*), (SELECT COALESCE(SUM(o.size), 0) FROM objects o WHERE o.key IN"
            " (SELECT object FROM versions WHERE workspace=?)) FROM versions WHERE workspace=?",
            (ws, ws),
        ).fetchone()
        return {
            "marks": int(marks),
            "versions": int(versions),
            "bytes": int(size),
            "unfinished_rollback": safeio.exists(self.journal_path(ws)),
        }

    def forget_workspace(self, ws: int) -> int:
        """Delete a workspace's marks, versions, states and eviction records (GC reclaims the objects),
        and first the journal of a rollback of it that never finished: the id is reused, and
        the next workspace given it would find the journal and roll it forward."""
        safeio.remove_durably(self.journal_path(ws))
        with self.catalog.write() as c:
            n = c.execute("DELETE FROM marks WHERE workspace=?", (ws,)).rowcount
            c.execute("DELETE FROM versions WHERE workspace=?", (ws,))
            c.execute("DELETE FROM states WHERE workspace=?", (ws,))
            c.execute("DELETE FROM evictions WHERE workspace=?", (ws,))
            c.execute("DELETE FROM stats WHERE workspace=?", (ws,))
            c.execute("DELETE FROM workspaces WHERE id=?", (ws,))
        return int(n)

    # -- marks -------------------------------------------------------------------------------

    def mark(self, mark_id: str) -> Mark:
        sql = f"SELECT {MARK_COLUMNS} FROM marks WHERE id=?"
        row = self.catalog.read().execute(sql, (mark_id,)).fetchone()
        if row is None:
            raise NotFound(f"no mark {mark_id}")
        return mark_from_row(row)

    def latest_mark(self, ws: int) -> Mark | None:
        row = (
            self.catalog.read()
            .execute(f"SELECT {MARK_COLUMNS} FROM marks WHERE workspace=? ORDER BY seq DESC LIMIT 1", (ws,))
            .fetchone()
        )
        return mark_from_row(row) if row else None

    def resolve(self, ws: int, ref: str, session: str | None = None) -> Mark:
        """Find the mark a user means (see :mod:`snapd.store.refs`) in workspace ``ws``."""
        r = parse_ref(ref)
        db = self.catalog.read()
        if r.is_id:
            rows = db.execute(
                f"SELECT {MARK_COLUMNS} FROM marks WHERE workspace=? AND id LIKE ? ORDER BY seq DESC",
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
            base = mark_from_row(rows[0])
        else:
            sql = f"SELECT {MARK_COLUMNS} FROM marks WHERE workspace=? AND label=?"
            args: list[Any] = [ws, r.base]
            if r.base in OWN_LABELS:  # snapd's own marks only: a user's (older store) by id
                sql += " AND kind=?"
                args.append(OWN_LABELS[r.base])
            if session is not None:
                sql += " AND session=?"
                args.append(session)
            row = db.execute(sql + " ORDER BY seq DESC LIMIT 1", args).fetchone()
            if row is None:
                scope = f" in session {session}" if session else ""
                evicted = db.execute(
                    "SELECT mark FROM evictions WHERE workspace=? AND label=? ORDER BY created DESC LIMIT 1",
                    (ws, r.base),
                ).fetchone()
                why = f" (mark {evicted[0]}, labelled {r.base!r}, was pruned by retention)" if evicted else ""
                raise NotFound(f"no mark labelled {r.base!r}{scope} in this workspace{why}")
            base = mark_from_row(row)
        if r.back == 0:
            return base
        row = db.execute(
            f"SELECT {MARK_COLUMNS} FROM marks WHERE workspace=? AND seq<?"
            " ORDER BY seq DESC LIMIT 1 OFFSET ?",
            (ws, base.seq, r.back - 1),
        ).fetchone()
        if row is None:
            raise NotFound(f"{ref}: there are fewer than {r.back} marks before {base.id}")
        return mark_from_row(row)

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
        return [version_from_row(path, t, kind, mode, key) for t, kind, mode, key in rows]

    def last_objects(self, ws: int, paths: list[bytes]) -> dict[bytes, str]:
        """The object of each path's newest recorded version, for the paths whose newest
        version holds a content (a file or symlink), in one query (per 400 paths)."""
        out: dict[bytes, str] = {}
        for i in range(0, len(paths), 400):
            chunk = paths[i : i + 400]
            sql = (
                f"WITH p(path) AS (VALUES {','.join(['(?)'] * len(chunk))})"
                " SELECT p.path, v.object, v.kind FROM p JOIN versions v ON v.id = (SELECT id FROM versions"
                " WHERE workspace=? AND path=p.path ORDER BY time DESC, id DESC LIMIT 1)"
            )
            for path, key, kind in self.catalog.read().execute(sql, (*chunk, ws)):
                if kind in ("file", "symlink"):
                    out[bytes(path)] = objects.py_key(key)
        return out

    def stored_bytes(self) -> int:
        return self.catalog.stored_bytes()

    # -- remote repositories (snapd.store.pushed) --------------------------------------------

    def store_id(self) -> str:
        """This store's id (32 hex digits), made at the first call."""
        return pushed.store_id(self.catalog)

    def pushed(self, repo: str) -> set[str]:
        """The ids of the marks recorded as landed in remote repository ``repo``."""
        return pushed.pushed(self.catalog, repo)

    def record_pushed(self, repo: str, marks: Iterable[str]) -> None:
        pushed.record_pushed(self.catalog, repo, marks)

    def unpushed(self, repo: str, workspaces: Sequence[int]) -> list[Mark]:
        """The marks of ``workspaces`` that ``repo`` does not hold yet, oldest first."""
        return pushed.unpushed(self.catalog, repo, workspaces)
