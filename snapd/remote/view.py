"""A repository's view: what a reader may trust of it, as last listed, kept between operations.

An object exists only through an index file naming its pack (in a pack no doomed list names,
for a pusher), a mark only through its record; a pack that landed without an index naming it
is never read as anything (docs/remote.md, "Repository format"). The view is the listing of
``index/``, ``doomed/`` and ``marks/`` at the last :meth:`View.refresh`, with what those files
say; :class:`snapd.remote.repo.Repository` decides when to list again.

What a refresh fetched is kept as the server holds it (sealed) in the repository's cache
directory, so the next process fetches only what is new. A cached file is checked like the
server's copy (its name is its hash or MAC, it must authenticate): the cache is safe to delete,
and a damaged one costs a fetch.

Push and fetch read the view from several threads: its dicts are replaced whole under a lock
(or, for the objects a push adds, only added to), so a reader never meets a half-made one.
"""

from __future__ import annotations

import os
import secrets
import threading
import time
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TypeVar

import structlog

from snapd.errors import RemoteCorrupt, RemoteMissing
from snapd.remote import crypto, packs, records
from snapd.remote.backend import Backend
from snapd.remote.packs import Blob, Doomed, IndexFile
from snapd.remote.records import MarkRecord

log = structlog.get_logger("snapd.remote")

THREADS = 8
"""Requests in flight at once (uploads, ranged reads, the fetches of a refresh)."""

MAX_BYTES = {"index/": packs.MAX_INDEX_JSON, "doomed/": 1 << 30, "marks/": 16 << 20}
"""The most a file of each folder may weigh to be fetched by a refresh (an index: its JSON's
bound; a mark record is a few KiB): a larger one is damaged, never held in memory."""

T = TypeVar("T")
R = TypeVar("R")


def parallel(fn: Callable[[T], R], items: Iterable[T], threads: int = THREADS) -> Iterator[R]:
    """``fn`` of each item, ``threads`` at a time, results in the items' order. The backends'
    clients wait without the GIL, so the requests overlap."""
    todo = list(items)
    if len(todo) <= 1:
        yield from map(fn, todo)
        return
    with ThreadPoolExecutor(min(threads, len(todo))) as pool:
        yield from pool.map(fn, todo)


class View:
    """The index files, doomed lists and mark records of one repository, and where each
    object lies, as of the last refresh (plus what this process wrote since)."""

    def __init__(self, backend: Backend, master: crypto.MasterKey, cache: Path) -> None:
        self.backend, self.master, self.cache = backend, master, cache
        self.refreshed: float | None = None  # time.monotonic() of the last refresh
        self.damaged: dict[str, str] = {}  # mark records listed that do not open -> why
        self.damaged_indexes: dict[str, str] = {}  # index files listed that do not open -> why
        self._lock = threading.Lock()
        self._indexes: dict[str, IndexFile] = {}  # by object name, index/<id>
        self._doomed: dict[str, Doomed] = {}  # by object name, doomed/<id>
        self._records: dict[str, MarkRecord] = {}  # by object name, marks/<mac>
        self._where: dict[str, Blob] = {}  # object key -> its blob (Blob.key: the pack's id)
        self._doomed_packs: frozenset[str] = frozenset()
        self._pack_ends: dict[str, int] = {}  # pack -> where its last indexed blob ends

    def refresh(self) -> None:
        """List ``index/``, ``doomed/`` and ``marks/``; read what the view lacks (from the
        cache directory when it holds it, else from the server, several at once); drop from
        the view and the cache what is no longer listed (prune deleted it)."""
        started = time.monotonic()
        master = self.master
        # An index file that does not open is left out and noted (verify names it): anyone who
        # may push may write one, and a reader is only more cautious without it (an object it
        # alone names is missing). Push and prune refuse while one is listed
        # (Repository.refuse_damaged_indexes): it may supersede indexes naming deleted packs.
        indexes = self._fetch_all(
            "index/", self._indexes, lambda n, d: packs.decode_index(master, d, n), self.damaged_indexes
        )
        # A doomed list that does not open fails the refresh: without it, a push could count
        # on a pack prune is about to delete.
        doomed = self._fetch_all("doomed/", self._doomed, lambda n, d: packs.decode_doomed(master, d, n))
        # A mark record that does not open is left out (verify names it): one damaged record
        # must not make the rest of the history unreachable.
        marks = self._fetch_all(
            "marks/", self._records, lambda n, d: records.decode_mark(master, d, n), self.damaged
        )
        with self._lock:
            self._indexes, self._doomed, self._records = indexes, doomed, marks
            self._doomed_packs = frozenset(p for d in doomed.values() for p in d.packs)
            self._where = self._locate_all(indexes)
            self._pack_ends = _pack_ends(indexes.values())
            self.refreshed = started

    def _locate_all(self, indexes: Mapping[str, IndexFile]) -> dict[str, Blob]:
        """Where each object of the indexes no other supersedes lies (a pack no doomed list
        names, when there is a choice)."""
        superseded = {packs.index_name(old) for index in indexes.values() for old in index.supersedes}
        where: dict[str, Blob] = {}
        for name, index in indexes.items():
            if name not in superseded:
                self._add_blobs(where, index)
        return where

    def _add_blobs(self, where: dict[str, Blob], index: IndexFile) -> None:
        doomed = self._doomed_packs
        for pack, blobs in index.packs.items():
            for blob in blobs:
                had = where.get(blob.key)
                if had is None or (had.key in doomed and pack not in doomed):
                    where[blob.key] = Blob(pack, blob.offset, blob.length)

    def _fetch_all(
        self,
        folder: str,
        known: Mapping[str, T],
        open_: Callable[[str, bytes], T],
        damaged: dict[str, str] | None = None,
    ) -> dict[str, T]:
        """The objects listed under ``folder``, opened. With ``damaged``, one that does not
        open is left out and noted there (not fetched again while it is listed) instead of
        failing the whole refresh."""
        sizes = {item.name: item.size for item in self.backend.list(folder) if item.name.count("/") == 1}
        listed = list(sizes)
        out = {name: known[name] for name in listed if name in known}
        if damaged is not None:
            for gone in set(damaged) - set(listed):
                del damaged[gone]
        for name in listed:  # the listing's size is the server's: anyone who may push sets it
            if name not in out and sizes[name] > MAX_BYTES[folder]:
                error = crypto.corrupt(name, f"it is {sizes[name]} bytes, past the {MAX_BYTES[folder]} "
                                       "such a file may weigh: not read")  # fmt: skip
                if damaged is None:
                    raise error
                damaged[name] = error.message

        def fetch(name: str) -> tuple[str, T | None]:
            path = self.cache / name
            try:
                return name, open_(name, path.read_bytes())
            except (OSError, RemoteCorrupt):
                pass  # not cached, or the cached copy is damaged: the server's
            data = self.backend.get(name)
            try:
                opened = open_(name, data)
            except RemoteCorrupt as exc:
                if damaged is None:
                    raise
                damaged[name] = exc.message
                log.warning("remote.damaged", remote=self.backend.url, object=name, error=exc.message)
                return name, None
            cache_write(path, data)
            return name, opened

        todo = [name for name in listed if name not in out and name not in (damaged or {})]
        out.update((name, opened) for name, opened in parallel(fetch, todo) if opened is not None)
        cached = self.cache / folder
        if cached.is_dir():
            for gone in {folder + n for n in os.listdir(cached) if not n.startswith(".")} - set(listed):
                (self.cache / gone).unlink(missing_ok=True)
        return out

    # -- what it says -------------------------------------------------------------------------

    def has(self, key: str) -> bool:
        found = self._where.get(key)
        return found is not None and found.key not in self._doomed_packs

    def locate(self, key: str) -> Blob:
        found = self._where.get(key)
        if found is None:
            raise RemoteMissing(f"{self.backend.url}: object {key} is in no index of the repository", key=key)
        return found

    def pack_end(self, pack: str) -> int:
        return self._pack_ends.get(pack, 0)

    def index_files(self) -> dict[str, IndexFile]:
        return {name.removeprefix("index/"): index for name, index in self._indexes.items()}

    def doomed_lists(self) -> dict[str, Doomed]:
        return {name.removeprefix("doomed/"): doomed for name, doomed in self._doomed.items()}

    def packs(self) -> dict[str, list[Blob]]:
        superseded = {packs.index_name(old) for index in self._indexes.values() for old in index.supersedes}
        out: dict[str, list[Blob]] = {}
        for name, index in self._indexes.items():
            if name not in superseded:
                for pack, blobs in index.packs.items():
                    out.setdefault(pack, []).extend(blobs)
        return out

    def records(self) -> Mapping[str, MarkRecord]:
        return self._records

    def record_names(self) -> Collection[str]:
        return self._records.keys()

    # -- what this process wrote --------------------------------------------------------------

    def add_index(self, name: str, index: IndexFile) -> None:
        with self._lock:
            self._indexes = {**self._indexes, name: index}
            self._pack_ends.update(_pack_ends([index]))
            if index.supersedes:
                self._where = self._locate_all(self._indexes)
            else:  # a push's: its objects only added (dict.get from other threads stays safe)
                self._add_blobs(self._where, index)

    def add_doomed(self, name: str, doomed: Doomed) -> None:
        with self._lock:
            self._doomed = {**self._doomed, name: doomed}
            self._doomed_packs = self._doomed_packs | doomed.packs

    def add_record(self, record: MarkRecord) -> None:
        with self._lock:
            self._records = {**self._records, record.name: record}


def _pack_ends(indexes: Iterable[IndexFile]) -> dict[str, int]:
    ends: dict[str, int] = {}
    for index in indexes:
        for pack, blobs in index.packs.items():
            if blobs:
                ends[pack] = max(ends.get(pack, 0), max(b.offset + b.length for b in blobs))
    return ends


def cache_write(path: Path, data: bytes) -> None:
    """Keep an object read or written in the cache: a temp file renamed, no fsync (a cache
    lost or damaged is read again from the server)."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        temp = path.with_name(f".{path.name}.{secrets.token_hex(4)}")
        temp.write_bytes(data)
        os.replace(temp, path)
    except OSError:
        pass  # a cache that cannot be written costs a fetch next time, nothing else
