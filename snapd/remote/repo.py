"""A remote repository opened with its password: its keys, and a view of what it holds.

The view is what a reader may trust (docs/remote.md, "Repository format"): an object exists
only through an index file naming its pack, a mark only through its record; a pack that
landed without an index naming it is never read as anything. The view is the listing of
``index/``, ``doomed/`` and ``marks/`` at the last :meth:`Repository.refresh`, kept between
operations (the daemon keeps one Repository per remote open): a push lists again only when
the view is older than :attr:`Repository.refresh_s`, so an incremental push costs its own
writes (a pack, an index, a record) and nothing more.

What a refresh fetched is kept as the server holds it (sealed) in the cache directory
``<cache_dir>/<repo id>/``, so the next process fetches only what is new. A cached file is
checked like the server's copy (its name is its hash or MAC, it must authenticate): the cache
is safe to delete, and a damaged one costs a fetch.

Writes never overwrite or delete: every name is the hash of its bytes or, for a mark record,
a keyed hash of (store, mark) whose record says the same whoever writes it.
"""

from __future__ import annotations

import getpass
import os
import secrets
import socket
import threading
import time
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TypeVar

import structlog

from snapd.display import shown
from snapd.errors import (
    Ambiguous,
    CorruptObject,
    NotFound,
    RemoteCorrupt,
    RemoteError,
    RemoteMissing,
    WrongPassword,
)
from snapd.remote import crypto, keys, packs, records
from snapd.remote.backend import Backend
from snapd.remote.packs import Blob, Doomed, IndexFile, pack_name
from snapd.remote.records import MarkRecord
from snapd.store import nodes, objects, trees
from snapd.store.lru import BoundedLru
from snapd.store.refs import OWN_LABELS, parse_ref

log = structlog.get_logger("snapd.remote")

GRACE_S = 24 * 3600.0
"""How long prune leaves a doomed pack, or a pack no index names, before deleting it: longer
than any push takes. Prune's default ``--grace``."""
REFRESH_S = GRACE_S / 4
"""How old a view may be before a push lists the repository again. A pusher must see a
prune's doomed list well within the grace: it then sends again what those packs held."""
THREADS = 8
"""Requests in flight at once (uploads, ranged reads, the fetches of a refresh)."""
NODE_CACHE = 4096

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


class Repository:
    """One repository, opened: its master keys, id, and the view of what it holds.

    Push and fetch use it from several threads: the view's dicts are replaced whole under a
    lock, never changed in place, so a reader holds a consistent one."""

    def __init__(
        self, backend: Backend, master: crypto.MasterKey, repo_id: str, cache_dir: Path, refresh_s: float
    ) -> None:
        self.backend = backend
        self.master = master
        self.id = repo_id
        self.cache = cache_dir / repo_id
        self.refresh_s = refresh_s
        self.refreshed: float | None = None  # time.monotonic() of the last refresh
        self._lock = threading.Lock()
        self._indexes: dict[str, IndexFile] = {}  # by object name, index/<id>
        self._doomed: dict[str, Doomed] = {}  # by object name, doomed/<id>
        self._records: dict[str, MarkRecord] = {}  # by object name, marks/<mac>
        self._where: dict[str, Blob] = {}  # object key -> its blob (Blob.key: the pack's id)
        self._doomed_packs: frozenset[str] = frozenset()
        self._pack_ends: dict[str, int] = {}  # pack -> where its last indexed blob ends
        self.damaged: dict[str, str] = {}  # mark records listed that do not open -> why
        self._nodes: BoundedLru[trees.Node] = BoundedLru(NODE_CACHE, 1 << 18, len)

    # -- opening ------------------------------------------------------------------------------

    @classmethod
    def init(
        cls,
        backend: Backend,
        password: str,
        cache_dir: Path,
        *,
        cost: crypto.KdfCost = crypto.DEFAULT_COST,
        refresh_s: float = REFRESH_S,
    ) -> Repository:
        """Make a repository at ``backend``'s prefix: new master keys, a key file opening them
        with ``password``, the config. Refused, nothing written, where anything is there.
        ``cost``: the KDF's (tests lower it)."""
        there = next(iter(backend.list("")), None)
        if there is not None:
            raise RemoteError(
                f"{backend.url} is not empty (it holds {there.name}): a repository is made only on "
                "an empty prefix; nothing was written"
            )
        master = crypto.new_master()
        config = records.RepoConfig(secrets.token_hex(16), time.time_ns())
        key_file = keys.make_key_file(master, password, host=socket.gethostname(), user=_user(), cost=cost)
        backend.put(keys.key_file_name(key_file), key_file)
        backend.put(records.CONFIG_NAME, records.encode_config(master, config))
        return cls(backend, master, config.id, cache_dir, refresh_s)

    @classmethod
    def open(
        cls, backend: Backend, password: str, cache_dir: Path, *, refresh_s: float = REFRESH_S
    ) -> Repository:
        """The repository at ``backend``'s prefix opened with ``password``: WrongPassword when
        no key file opens with it, RemoteMissing where there is no repository."""
        master = _unlock(backend, password)
        try:
            sealed = backend.get(records.CONFIG_NAME)
        except RemoteMissing:
            raise RemoteMissing(
                f"{backend.url} has key files but no config: a `remote add` cut short? Add the "
                "remote again on an empty prefix"
            ) from None
        config = records.decode_config(master, sealed)
        return cls(backend, master, config.id, cache_dir, refresh_s)

    def change_password(self, old: str, new: str, *, cost: crypto.KdfCost = crypto.DEFAULT_COST) -> None:
        """Seal the master keys with ``new`` in a key file of its own, then delete the key files
        ``old`` opens (WrongPassword, nothing written, when none does). The new file is written
        first: a change cut short leaves both passwords working, never neither."""
        found = _key_files(self.backend)
        opened = [name for name, data in found if keys.open_key_file(data, old, name=name) is not None]
        if not opened:
            raise WrongPassword(f"{self.backend.url}: the old password opens none of its key files")
        key_file = keys.make_key_file(self.master, new, host=socket.gethostname(), user=_user(), cost=cost)
        name = keys.key_file_name(key_file)
        self.backend.put(name, key_file)
        for old_name in opened:
            if old_name != name:
                self.backend.delete(old_name)

    # -- the view -----------------------------------------------------------------------------

    def age(self) -> float | None:
        """Seconds since the last refresh (None: never refreshed)."""
        return None if self.refreshed is None else time.monotonic() - self.refreshed

    def ensure_fresh(self, max_age: float | None = None) -> None:
        """Refresh the view if it was never read or is older than ``max_age`` seconds
        (default :attr:`refresh_s`)."""
        age = self.age()
        if age is None or age > (self.refresh_s if max_age is None else max_age):
            self.refresh()

    def refresh(self) -> None:
        """List ``index/``, ``doomed/`` and ``marks/``; read what the view lacks (from the
        cache directory when it holds it, else from the server, several at once); drop from
        the view and the cache what is no longer listed (prune deleted it)."""
        started = time.monotonic()
        master = self.master
        indexes = self._fetch_all("index/", self._indexes, lambda n, d: packs.decode_index(master, d, n))
        doomed = self._fetch_all("doomed/", self._doomed, lambda n, d: packs.decode_doomed(master, d, n))
        # A mark record that does not open is left out (verify names it): one damaged record
        # must not make the rest of the history unreachable. An index or doomed list that does
        # not open fails the refresh: without it, a push or a prune could count wrongly on
        # what the packs hold.
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
        doomed = self._doomed_packs
        for name, index in indexes.items():
            if name in superseded:
                continue
            for pack, blobs in index.packs.items():
                for blob in blobs:
                    had = where.get(blob.key)
                    if had is None or (had.key in doomed and pack not in doomed):
                        where[blob.key] = Blob(pack, blob.offset, blob.length)
        return where

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
        listed = [item.name for item in self.backend.list(folder) if item.name.count("/") == 1]
        out = {name: known[name] for name in listed if name in known}
        if damaged is not None:
            for gone in set(damaged) - set(listed):
                del damaged[gone]

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
            _cache_write(path, data)
            return name, opened

        todo = [name for name in listed if name not in out and name not in (damaged or {})]
        out.update((name, opened) for name, opened in parallel(fetch, todo) if opened is not None)
        cached = self.cache / folder
        if cached.is_dir():
            for gone in {folder + n for n in os.listdir(cached) if not n.startswith(".")} - set(listed):
                (self.cache / gone).unlink(missing_ok=True)
        return out

    def has(self, key: str) -> bool:
        """Whether an index of the view names ``key`` in a pack no doomed list names."""
        found = self._where.get(key)
        return found is not None and found.key not in self._doomed_packs

    def locate(self, key: str) -> Blob:
        """Where ``key``'s blob lies (``Blob.key`` is the pack's id); RemoteMissing when no
        index of the view names it."""
        found = self._where.get(key)
        if found is None:
            raise RemoteMissing(f"{self.backend.url}: object {key} is in no index of the repository", key=key)
        return found

    def pack_end(self, pack: str) -> int:
        """Where the last blob an index names in ``pack`` ends (its header follows): how far a
        ranged read of it may go."""
        return self._pack_ends.get(pack, 0)

    def index_files(self) -> dict[str, IndexFile]:
        """Every index file of the view by id, superseded ones included (prune, verify)."""
        return {name.removeprefix("index/"): index for name, index in self._indexes.items()}

    def doomed_lists(self) -> dict[str, Doomed]:
        """Every doomed list of the view by id (prune)."""
        return {name.removeprefix("doomed/"): doomed for name, doomed in self._doomed.items()}

    def packs(self) -> dict[str, list[Blob]]:
        """Each pack the indexes of the view name (superseded ones left out), with its blobs."""
        superseded = {packs.index_name(old) for index in self._indexes.values() for old in index.supersedes}
        out: dict[str, list[Blob]] = {}
        for name, index in self._indexes.items():
            if name not in superseded:
                for pack, blobs in index.packs.items():
                    out.setdefault(pack, []).extend(blobs)
        return out

    def read_header(self, pack: str, size: int) -> list[Blob]:
        """The blobs pack ``pack`` (``size`` bytes, as listed) lists in its own header, each
        checked to lie where the format says: its tail read with one ranged GET (two for a
        header past 64 KiB)."""
        name = pack_name(pack)
        tail = self.backend.get(name, max(0, size - (64 << 10)), size)
        if len(tail) >= packs.LENGTH.size:
            need = packs.header_length(tail) + packs.LENGTH.size
            if len(tail) < need <= size:
                tail = self.backend.get(name, size - need, size)
        return packs.parse_header(self.master, tail, name, size)

    # -- marks --------------------------------------------------------------------------------

    def marks(self) -> list[MarkRecord]:
        """Every mark record, newest first (the view refreshed when stale)."""
        self.ensure_fresh()
        return sorted(self._records.values(), key=lambda r: (r.mark.created, r.mark.seq), reverse=True)

    def mark_names(self) -> Collection[str]:
        """The object names of the mark records in the view (``marks/<mac>``; no refresh)."""
        return self._records.keys()

    def record_name(self, store_id: str, mark_id: str) -> str:
        """The object name of the record of mark ``mark_id`` of store ``store_id``."""
        return records.mark_name(self.master, store_id, mark_id)

    def find(self, ref: str, host: str | None = None, workspace: bytes | None = None) -> MarkRecord:
        """The mark ``ref`` names among the records (of ``host``, of ``workspace``, when
        given): a full id, a unique id prefix, or a label (the newest mark with it), then
        ``~N``: N marks before it in the same store's workspace. NotFound or Ambiguous."""
        r = parse_ref(ref)
        found = [
            rec
            for rec in self.marks()
            if (host is None or rec.host == host) and (workspace is None or rec.workspace == workspace)
        ]
        if r.is_id:
            found = [rec for rec in found if rec.mark.id.startswith(r.base)]
            if len({rec.mark.id for rec in found}) > 1:
                listed = ", ".join(f"{r.mark.id} ({shown(r.mark.label)}, {r.host})" for r in found[:10])
                raise Ambiguous(
                    f"mark id prefix {r.base} is ambiguous in {self.backend.url}: {listed}",
                    candidates=[rec.mark.id for rec in found],
                )
        else:
            found = [rec for rec in found if rec.mark.label == r.base]
            if r.base in OWN_LABELS:
                found = [rec for rec in found if rec.mark.kind == OWN_LABELS[r.base]]
        if not found:
            what = f"with id {r.base}" if r.is_id else f"labelled {shown(r.base)}"
            scope = f" of host {shown(host)}" if host else ""
            scope += f" in workspace {shown(workspace)}" if workspace is not None else ""
            raise NotFound(f"no mark {what}{scope} in {self.backend.url}")
        base = found[0]  # newest first
        if r.back == 0:
            return base
        before = [
            rec
            for rec in self._records.values()
            if rec.store == base.store and rec.workspace == base.workspace and rec.mark.seq < base.mark.seq
        ]
        before.sort(key=lambda rec: rec.mark.seq, reverse=True)
        if len(before) < r.back:
            raise NotFound(f"{ref}: {self.backend.url} holds fewer than {r.back} marks before {base.mark.id}")
        return before[r.back - 1]

    # -- reading ------------------------------------------------------------------------------

    def read_blob(self, key: str, sealed: bytes) -> bytes:
        """``key``'s content from its sealed blob: authenticated, decoded and checked against
        the key, or RemoteCorrupt naming the object and its pack."""
        name = pack_name(self.locate(key).key)
        codec, payload = packs.read_blob(self.master, sealed, key, name)
        try:
            return objects.decode(key, codec, payload)
        except CorruptObject as exc:
            raise crypto.corrupt(f"object {key} in {name}", exc.message) from None

    def get(self, key: str) -> bytes:
        """``key``'s content (one ranged GET), verified."""
        where = self.locate(key)
        sealed = self.backend.get(pack_name(where.key), where.offset, where.offset + where.length)
        return self.read_blob(key, sealed)

    def load_node(self, key: str) -> trees.Node:
        """The tree node ``key`` (cached), verified."""
        with self._lock:
            node = self._nodes.touch(key)
        return node if node is not None else self.decode_node(key, self.get(key))

    def decode_node(self, key: str, data: bytes) -> trees.Node:
        """Node ``key`` from its verified content; cached for :meth:`load_node`."""
        try:
            node = nodes.decode_node(data)
        except CorruptObject as exc:
            raise crypto.corrupt(f"object {key}", f"it is not a tree node ({exc.message})") from None
        with self._lock:
            self._nodes.put(key, node)
        return node

    # -- writing ------------------------------------------------------------------------------

    def write_pack(self, data: bytes) -> str:
        """Upload a finished pack; return its id (the SHA-256 of its bytes). Nothing reads it
        until an index names it."""
        pack = crypto.sha256_hex(data)
        self.backend.put(pack_name(pack), data)
        return pack

    def write_index(self, packs_: Mapping[str, Sequence[Blob]], supersedes: Sequence[str] = ()) -> str:
        """Seal and upload an index naming ``packs_`` (pack id -> its blobs) and superseding
        the index files ``supersedes`` (ids; prune's); return its id. In the view at once."""
        listed = {pack: [Blob(*b) for b in blobs] for pack, blobs in packs_.items()}
        index = IndexFile(listed, list(supersedes))
        data = packs.encode_index(self.master, index)
        index_id = crypto.sha256_hex(data)
        name = packs.index_name(index_id)
        self.backend.put(name, data)
        _cache_write(self.cache / name, data)
        with self._lock:
            self._indexes = {**self._indexes, name: index}
            self._pack_ends.update(_pack_ends([index]))
            if supersedes:
                self._where = self._locate_all(self._indexes)
            else:  # a push's: its objects added (dict.get from other threads stays safe)
                where, doomed = self._where, self._doomed_packs
                for pack, blobs in index.packs.items():
                    for blob in blobs:
                        had = where.get(blob.key)
                        if had is None or (had.key in doomed and pack not in doomed):
                            where[blob.key] = Blob(pack, blob.offset, blob.length)
        return index_id

    def write_doomed(self, packs_: Collection[str]) -> str:
        """Seal and upload a doomed list of ``packs_`` (prune's first phase); return its id."""
        doomed = Doomed(frozenset(packs_), time.time_ns())
        data = packs.encode_doomed(self.master, doomed)
        name = packs.doomed_name(data)
        self.backend.put(name, data)
        _cache_write(self.cache / name, data)
        with self._lock:
            self._doomed = {**self._doomed, name: doomed}
            self._doomed_packs = self._doomed_packs | doomed.packs
        return name.removeprefix("doomed/")

    def write_mark(self, record: MarkRecord) -> bool:
        """Upload a mark record, unless the view lists it (its name is fixed by its store and
        mark: never rewritten). Only once every object its tree needs is in an index. True
        when it was written."""
        if record.name in self._records:
            return False
        data = records.encode_mark(self.master, record)
        self.backend.put(record.name, data)
        _cache_write(self.cache / record.name, data)
        with self._lock:
            self._records = {**self._records, record.name: record}
        return True


def _pack_ends(indexes: Iterable[IndexFile]) -> dict[str, int]:
    ends: dict[str, int] = {}
    for index in indexes:
        for pack, blobs in index.packs.items():
            if blobs:
                ends[pack] = max(ends.get(pack, 0), max(b.offset + b.length for b in blobs))
    return ends


def _user() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return str(os.getuid())


def _key_files(backend: Backend) -> list[tuple[str, bytes]]:
    names = [item.name for item in backend.list(keys.DIR)]
    return list(zip(names, parallel(backend.get, names), strict=True))


def _unlock(backend: Backend, password: str) -> crypto.MasterKey:
    found = _key_files(backend)
    if not found:
        raise RemoteMissing(f"{backend.url} holds no repository (no key files): `remote add` makes one")
    for name, data in found:
        master = keys.open_key_file(data, password, name=name)
        if master is not None:
            return master
    many = f"any of its {len(found)} key files" if len(found) > 1 else "its key file"
    raise WrongPassword(f"the password does not open {backend.url} (it opens none of {many})")


def _cache_write(path: Path, data: bytes) -> None:
    """Keep a fetched object in the cache: a temp file renamed, no fsync (a cache lost or
    damaged is read again from the server)."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        temp = path.with_name(f".{path.name}.{secrets.token_hex(4)}")
        temp.write_bytes(data)
        os.replace(temp, path)
    except OSError:
        pass  # a cache that cannot be written costs a fetch next time, nothing else
