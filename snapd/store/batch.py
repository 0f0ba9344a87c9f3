"""Write batches: objects and catalog rows that become durable together.

A batch's objects go through its :class:`~snapd.store.objwrite.ObjectWriter` (collision
checks by SHA-256 fingerprint, large objects' files, GC holds, early flushes); the batch adds
the tree nodes it builds, version rows, marks, heads and stat-cache rows. ``commit`` fsyncs
each object directory once and writes everything in one catalog transaction: object bytes are
durable before any row refers to them, and a 100k-file baseline costs a handful of fsyncs. A
put may name a delta *base* (:mod:`snapd.store.deltas`).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Protocol

from snapd.store import deltas, fan, nodes, objects, trees
from snapd.store.objects import fingerprint
from snapd.store.objwrite import Destination, ObjectWriter
from snapd.store.records import MARK_COLUMNS, STATE_COLUMNS, Mark, State, mark_row, state_row
from snapd.store.refs import new_mark_id, validate_label


def _row(e: trees.Entry) -> tuple[str, int, bytes | str | None]:
    """A version row's (kind, mode, object): a directory's entry has no key (NULL)."""
    return e.kind, e.mode, objects.db_key(e.key) if e.key else None


class ObjectStore(Destination, Protocol):
    """What a batch needs of the store it writes to (:class:`snapd.store.store.Store`): what
    its object writer needs, and more."""

    hasher: objects.Hasher

    def load_node(self, key: str) -> trees.Node: ...
    def load_nodes(self, keys: Iterable[str]) -> None: ...
    def cached_node(self, key: str) -> trees.Node | None: ...
    def cache_node(self, key: str, node: trees.Node, records: nodes.Records | None = None) -> None: ...
    def node_records(self, key: str) -> nodes.Records | None: ...
    def last_objects(self, ws: int, paths: list[bytes]) -> dict[bytes, str]: ...  # and deltas.Chooser's


_NO_ENTRY = (None, None, None)  # a deletion's kind, mode, object
_Put = Callable[[bytes, str, str | None], str]  # a node's object stored (bytes, digest, base): its key


class StatChanges(Protocol):
    """Stat-cache rows to write (``StatCache.take_changes``): the paths dropped with all below
    them, then the rows set, made as SQLite takes them (never 10^5 tuples at once)."""

    def removed(self) -> list[bytes]: ...
    def rows(self) -> Iterable[tuple[bytes, bytes]]: ...  # path, entry packed (snapd.statrow.ROW)


class Batch(deltas.Chooser):
    """A group of object and catalog writes that become durable together in ``commit``."""

    store: ObjectStore  # (deltas.Chooser types it loosely)

    def __init__(self, store: ObjectStore) -> None:
        self.store = store
        self._writer = ObjectWriter(store)  # the objects put, their files, flushes and GC holds
        self._pending = self._writer.pending  # the same dict: deltas.Chooser reads it
        self._nodes: dict[str, trees.Node] = {}
        self._encoded: dict[str, bytes] = {}  # each node's bytes, as hashed for its key
        self._records: dict[str, nodes.Records] = {}  # a mark's nodes' records (see nodes.splice)
        self._links: dict[str, tuple[str | None, int]] = {}  # see deltas.Chooser.prefetch_links
        # (workspace, time, paths, entries): one run per capture, rows made at commit (a
        # baseline's 10^5 rows as tuples would be ~15 MB more at the commit's peak)
        self._versions: list[tuple[int, int, list[bytes], list[trees.Entry | None]]] = []
        self._marks: list[Mark] = []
        self._heads: dict[int, str] = {}
        self._ignored: dict[int, str] = {}  # workspace -> its current ignored names' key
        self._states: list[State] = []
        self._stats: list[tuple[int, StatChanges]] = []  # written in order at commit
        self._keys: dict[str, str] = {}  # each key put, once

    def __enter__(self) -> Batch:
        return self

    def __exit__(self, exc_type: object, *rest: object) -> None:
        if exc_type is None and not self._writer.ended:
            self.commit()
        self.close()

    def close(self) -> None:
        """Release GC protection (after commit or abort)."""
        self._writer.close()

    def _hold(self, key: str) -> None:
        """Protect ``key`` from GC (caller holds ``store.holds.lock``)."""
        self._writer.hold(key)

    # -- objects -----------------------------------------------------------------------------

    def prefetch(self, keys: Iterable[str]) -> None:
        """Look up many keys at once, so ``put`` skips a query for each missing one; those found
        are held against GC (:meth:`ObjectWriter.prefetch`)."""
        self._writer.prefetch(keys)

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
        key = self._writer.put(digest, size, sha, lambda k: self._encode(k, encode, base, data, lazy))
        return self._keys.setdefault(key, key)

    def load_node(self, key: str) -> trees.Node:
        node = self._nodes.get(key)
        if node is not None:
            return node
        pending = self._pending.get(key)
        if pending is not None and pending.base is None and not pending.external:
            # a node of a tree built from nothing, not kept (:meth:`_save_built`): decoded again
            data = objects.decode(key, pending.codec, pending.payload, self.store.hasher)
            return nodes.decode_records(data)[0]
        return self.store.load_node(key)

    def _records_of(
        self, node: trees.Node, base: str | None, changed: Iterable[bytes] | None
    ) -> nodes.Records:
        """``node``'s records: spliced from its ``base``'s at the ``changed`` names when both are
        given (:func:`nodes.splice`), else encoded whole."""
        if base is None or changed is None:
            return nodes.encode_records(node)
        was = self._records.get(base) or self.store.node_records(base)
        if was is None:  # the base is cached as a node only: encoded once, for its delta too
            was = self._records[base] = nodes.encode_records(self.load_node(base))
        return nodes.splice(was, node, changed)

    def save_node(
        self, node: trees.Node, base: str | None = None, changed: Iterable[bytes] | None = None
    ) -> str:
        """Store a node as made: a baseline's (built bottom-up: ``changed`` None), or a mark's
        again after a collision or a replay's (its records kept, as :meth:`apply` keeps them;
        spliced from its base's when those are known, as :meth:`apply` splices)."""
        records = self._records_of(node, base, changed)
        key, packed, data = self._node_objects(records, base, changed, self.put)
        # For this batch's reads and deltas:
        self._nodes[key], self._encoded[key] = packed, data
        if changed is not None:
            self._records[key] = records
        return key

    def _save_built(
        self, node: trees.Node, base: str | None = None, changed: Iterable[bytes] | None = None
    ) -> str:
        """:meth:`save_node` for a tree built from nothing (a baseline): the node is stored but
        not kept decoded until the commit (every name and entry record of the tree: most of a
        500k-file baseline's heap, left fragmented when freed); :meth:`load_node` decodes it
        from its payload if asked. A directory in parts is kept (its parts are objects apart)."""
        records = self._records_of(node, base, changed)
        key, packed, data = self._node_objects(records, base, changed, self.put)
        if isinstance(packed, fan.FanNode):
            self._nodes[key], self._encoded[key] = packed, data
        return key

    def _node_objects(
        self, records: nodes.Records, base: str | None, changed: Iterable[bytes] | None, put: _Put
    ) -> tuple[str, trees.Node, bytes]:
        """Have ``put`` store the node ``records`` encode, which replaces node ``base``: one
        object, or for a directory of more than :data:`fan.FLAT_MAX` names its parts (only those
        the edit at ``changed`` made new: :func:`fan.plan`) and then its fan. Return its key, the
        node as read back, and its encoding."""
        names, recs = records
        if len(names) <= fan.FLAT_MAX:
            data = nodes.joined(records)
            return put(data, self.store.hasher(data), base), nodes.PackedNode(names, recs), data
        was = self._fan_at(base)
        planned = fan.plan(names, was, changed if was is not None else None)
        made: list[fan.PartRecord] = []
        for p in planned:
            key = p.key
            if key is None:
                data = nodes.joined((names[p.start : p.end], recs[p.start : p.end]))
                if was is not None and p.base is not None and p.base not in self._encoded:
                    # the part it replaces, as its delta base: bytes at hand (checked against
                    # the key where used, as every base's are), not a catalog read
                    self._encoded[p.base] = nodes.joined(was.part_records(was.parts.index(p.base)))
                key = put(data, self.store.hasher(data), p.base)
            made.append(fan.PartRecord(names[p.start], p.end - p.start, key))
        data = fan.encode(made)
        key = put(data, self.store.hasher(data), base if was is not None else None)
        parts, ends = tuple(m.key for m in made), tuple(p.end for p in planned)
        return key, fan.FanNode(names, recs, parts, ends, data), data

    def _fan_at(self, base: str | None) -> fan.FanNode | None:
        """Node ``base`` if it is a directory stored in parts (it was read for the edit)."""
        if base is None:
            return None
        node = self._nodes.get(base) or self.store.cached_node(base)
        return node if isinstance(node, fan.FanNode) else None

    def apply(self, root: str | None, changes: Mapping[bytes, trees.Change]) -> str:
        """A new tree: ``root`` with ``changes`` applied (only the changed paths are touched).

        The nodes it reads are read a tree level at a time; those it writes (~50 for a mark of
        10 files at 100k), new contents almost always, are encoded first, their keys and their
        bases' links looked up in one query each, then stored. Should one be taken by other
        bytes (a collision: a variant key), the tree is built again, each node stored as made.
        A tree built from nothing (a baseline) is stored as built."""
        if root is None:
            return trees.apply_changes(self.load_node, self._save_built, root, changes)
        objs: list[tuple[str, str, bytes, str | None]] = []  # key, digest, bytes, base: in order
        staged: list[tuple[str, trees.Node, bytes, nodes.Records]] = []

        def later(data: bytes, digest: str, base: str | None) -> str:
            key = objects.base_key(digest, len(data))
            objs.append((key, digest, data, base))
            return key

        def stage(node: trees.Node, base: str | None = None, changed: Iterable[bytes] | None = None) -> str:
            records = self._records_of(node, base, changed)
            key, packed, data = self._node_objects(records, base, changed, later)
            # Recorded as key's records only once the put gives key (below): a key taken by other
            # bytes (a collision, perhaps with this node's own base) must not name these.
            staged.append((key, packed, data, records))
            return key

        trees.load_levels(self.store.load_nodes, self.store.cached_node, root, changes)
        tree = trees.apply_changes(self.load_node, stage, root, changes)
        self.prefetch(key for key, *_ in objs)
        self.prefetch_links(base for *_, base in objs if base is not None)
        for key, digest, data, base in objs:
            if self.put(data, digest, base) != key:
                return trees.apply_changes(self.load_node, self.save_node, root, changes)
        for key, node, data, records in staged:
            self._nodes[key], self._encoded[key], self._records[key] = node, data, records
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

    def set_ignored(self, ws: int, key: str) -> None:
        """Record ``key`` as the workspace's current ignored names (snapd.store.ignored) when
        the batch commits: what a restart starts from."""
        self._ignored[ws] = key

    def add_state(self, state: State) -> None:
        """Record what the workspace held at ``state.time`` (the head tree and what a mark
        would record beside it), so a time target is rebuilt as a mark taken then."""
        self._states.append(state)

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
        ignored: str | None = None,
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
            ignored,
        )
        self._marks.append(mark)
        self._heads[ws] = tree
        return mark

    # -- durability --------------------------------------------------------------------------

    def _write_stats(self, c: Any) -> None:
        for ws, changes in self._stats:
            for path in changes.removed():
                # The path and everything below it ("/" is 0x2f, "0" the next byte).
                # Two statements: with an OR, SQLite scans the whole workspace for each one.
                c.execute("DELETE FROM stats WHERE workspace=? AND path=?", (ws, path))
                below = (ws, path + b"/", path + b"0")
                c.execute("DELETE FROM stats WHERE workspace=? AND path>? AND path<?", below)
            upserts = ((ws, *row) for row in changes.rows())
            c.executemany("INSERT OR REPLACE INTO stats VALUES (?,?,?)", upserts)
        self._stats.clear()

    def commit(self) -> list[Mark]:
        """Objects, versions and marks durable in one catalog transaction; return the marks.

        Only once: a commit that fails ends the batch, which is never committed again. (An
        fsync that failed must not be retried: a second fsync can succeed although the data
        the first one covered was dropped. The caller starts over with a new batch, which
        writes its object files afresh.)"""
        self._writer.ensure_open()
        self._writer.ended = True
        self._writer.sync()
        committed: list[Mark] = []
        with self.store.catalog.write() as c:
            written = self._writer.write(c, remember=False)
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
                    f"INSERT INTO marks ({MARK_COLUMNS}) VALUES ({','.join('?' * 17)})", mark_row(m, seq)
                )
                committed.append(dataclasses.replace(m, seq=seq))
            for ws, tree in self._heads.items():
                c.execute("UPDATE workspaces SET head=? WHERE id=?", (tree, ws))
            for ws, key in self._ignored.items():
                c.execute("UPDATE workspaces SET ignored=? WHERE id=?", (key, ws))
            c.executemany(
                f"INSERT INTO states ({STATE_COLUMNS}) VALUES (?,?,?,?,?,?,?)", map(state_row, self._states)
            )
            self._write_stats(c)
        self.store.recent.add_all(written)
        for key, node in self._nodes.items():
            self.store.cache_node(key, node, self._records.get(key))
        self._nodes.clear()
        self._encoded.clear()
        self._records.clear()
        self._versions.clear()
        self._marks.clear()
        self._heads.clear()
        self._ignored.clear()
        self._states.clear()
        return committed
