"""Reading a store: its objects (each verified against its key) and its marks.

:class:`snapd.store.store.Store` is a reader that also writes, caches nodes and resolves
references. A process that only reads a store the daemon is writing (the GC's mark phase,
:mod:`snapd.store.gcmark`) opens a :class:`StoreReader` of its own on a
:class:`snapd.store.catalog.CatalogReader`: one query-only connection, no schema set-up, no
checkpoints, nothing written.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, Protocol

from snapd.errors import MissingObject
from snapd.store import deltas, fan, nodes, objects, safeio, trees
from snapd.store.catalog import CatalogReader
from snapd.store.records import (
    MARK_COLUMNS,
    MARK_HEAD_COLUMNS,
    Mark,
    MarkHead,
    mark_from_row,
    mark_head_from_row,
)


class Reads(Protocol):
    """A catalog as a reader needs it: this thread's read connection."""

    def read(self) -> sqlite3.Connection: ...

    def close(self) -> None: ...


class StoreReader:
    """Objects and marks of the store in ``directory``, read through ``catalog``."""

    def __init__(self, directory: Path, catalog: Reads, hasher: objects.Hasher = objects.xxh3_hex) -> None:
        self.dir = directory
        self.catalog = catalog
        self.hasher = hasher

    @classmethod
    def reading(cls, directory: Path) -> StoreReader:
        """The store in ``directory``, opened to read alone (it must exist)."""
        return cls(Path(directory), CatalogReader(Path(directory) / "catalog.sqlite"))

    def close(self) -> None:
        self.catalog.close()

    def object_path(self, key: str) -> Path:
        objects.parse_key(key)
        return self.dir / "objects" / key[:2] / key

    def _payload(self, key: str, external: int, data: bytes | None) -> bytes:
        """An object's stored bytes, from its row or, for an external one, its file."""
        if not external:
            assert data is not None
            return data
        path = self.object_path(key)
        try:
            return path.read_bytes()
        except FileNotFoundError as exc:
            raise MissingObject(f"object file for {key} is missing", key=key) from exc
        except OSError as exc:
            raise safeio.os_error(exc, "read", path) from exc

    def get(self, key: str) -> bytes:
        """The content named ``key``, verified against it (CorruptObject otherwise).

        A delta needs its base first (verified the same way), at most ``MAX_DEPTH`` links down:
        the chain's rows come in one query."""
        chains = dict(deltas.read_chains(self.catalog.read(), [key]))
        return deltas.decode_chain(key, chains.get(key, []), self._payload, self.hasher)

    def get_many(self, keys: Iterable[str], chunk: int = 64) -> Iterator[tuple[str, bytes]]:
        """(key, :meth:`get`) for each of ``keys``: the chains of ``chunk`` keys read with one
        query (a chunk's rows are in memory at once: 64 keeps that small even for nodes of
        megabytes). Raises as :meth:`get` does for a key that cannot be read."""
        for key, chain in self._chains(keys, chunk):
            yield key, deltas.decode_chain(key, chain, self._payload, self.hasher)

    def decode_node(self, data: bytes) -> tuple[trees.Node, nodes.Records | None]:
        """A node from its verified encoding (:func:`nodes.decode_records`); a wide directory
        stored in parts (:mod:`snapd.store.fan`) with its parts read, each verified, and joined."""
        if fan.is_fan(data):
            return fan.assemble(data, dict(self.get_many(part.key for part in fan.decode(data)))), None
        return nodes.decode_records(data)

    def _chains(self, keys: Iterable[str], chunk: int) -> Iterator[tuple[str, list[deltas.Row]]]:
        """Each of ``keys`` once, with its chain's rows (none for a key not stored)."""
        wanted = sorted(set(keys))
        for i in range(0, len(wanted), chunk):
            part = wanted[i : i + chunk]
            chains = dict(deltas.read_chains(self.catalog.read(), part))
            for key in part:
                yield key, chains.get(key, [])

    def marks(self, ws: int | None = None, limit: int | None = None) -> list[Mark]:
        """Marks, newest first (all workspaces when ``ws`` is None)."""
        sql = f"SELECT {MARK_COLUMNS} FROM marks"
        args: list[Any] = []
        if ws is not None:
            sql += " WHERE workspace=?"
            args.append(ws)
        sql += " ORDER BY created DESC, seq DESC"
        if limit is not None:
            sql += " LIMIT ?"
            args.append(limit)
        return [mark_from_row(r) for r in self.catalog.read().execute(sql, args)]

    def mark_heads(self) -> list[MarkHead]:
        """Every mark as retention judges it (:class:`MarkHead`), newest first (as :meth:`marks`)."""
        db = self.catalog.read()
        sql = f"SELECT {MARK_HEAD_COLUMNS} FROM marks ORDER BY created DESC, seq DESC"
        return [mark_head_from_row(r) for r in db.execute(sql)]
