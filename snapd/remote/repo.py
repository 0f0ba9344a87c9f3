"""A remote repository opened with its password: its keys, its view, reads and writes.

What the repository holds is known through its :class:`snapd.remote.view.View` (the listings
of ``index/``, ``doomed/`` and ``marks/``, kept between operations: the daemon keeps one
Repository per remote open). A push lists again only when the view is older than
:attr:`Repository.refresh_s`, so an incremental push costs its own writes (a pack, an index,
a record) and nothing more. Every object read is authenticated and checked against its key.

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
from collections.abc import Callable, Collection, Mapping, Sequence
from pathlib import Path

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
from snapd.paths import encode_path
from snapd.remote import crypto, keys, packs, records
from snapd.remote.backend import Backend
from snapd.remote.packs import Blob, Doomed, IndexFile, pack_name
from snapd.remote.records import MarkRecord
from snapd.remote.view import THREADS as THREADS  # verify and prune use them from here
from snapd.remote.view import View, cache_write
from snapd.remote.view import parallel as parallel
from snapd.store import fan, nodes, objects, trees
from snapd.store.lru import BoundedLru
from snapd.store.refs import OWN_LABELS, parse_ref

log = structlog.get_logger("snapd.remote")

GRACE_S = 24 * 3600.0
"""How long prune leaves a doomed pack, or a pack no index names, before deleting it: longer
than any push takes. Prune's default ``--grace``."""
REFRESH_S = GRACE_S / 4
"""How old a view may be before a push lists the repository again. A pusher must see a
prune's doomed list well within the grace: it then sends again what those packs held."""
NODE_CACHE = 4096


class Repository:
    """One repository, opened: its master keys, id, and the view of what it holds (push and
    fetch use it from several threads)."""

    def __init__(
        self, backend: Backend, master: crypto.MasterKey, repo_id: str, cache_dir: Path, refresh_s: float
    ) -> None:
        self.backend = backend
        self.master = master
        self.id = repo_id
        self.cache = cache_dir / repo_id
        self.refresh_s = refresh_s
        self.view = View(backend, master, self.cache)
        self._lock = threading.Lock()  # the node cache
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
        opened = [n for n, data in found if _try_key_file(self.backend, n, data, old, []) is not None]
        if not opened:
            raise WrongPassword(f"{self.backend.url}: the old password opens none of its key files")
        key_file = keys.make_key_file(self.master, new, host=socket.gethostname(), user=_user(), cost=cost)
        name = keys.key_file_name(key_file)
        self.backend.put(name, key_file)
        for old_name in opened:
            if old_name != name:
                self.backend.delete(old_name)

    # -- the view -----------------------------------------------------------------------------

    @property
    def refreshed(self) -> float | None:
        """time.monotonic() of the last refresh (None: never)."""
        return self.view.refreshed

    @property
    def damaged(self) -> Mapping[str, str]:
        """Mark records listed that do not open (left out of the view), name -> why."""
        return self.view.damaged

    def refuse_damaged_indexes(self, doing: str) -> None:
        """RemoteCorrupt naming the first index file of the view that does not open, if any.
        Reads go on without it; a push or a prune may not: it may be a superseding index
        whose old ones, left by a prune cut short, name packs deleted since."""
        for name, why in sorted(self.view.damaged_indexes.items()):
            raise RemoteCorrupt(
                f"{why}; {doing} while it is listed (`snapctl verify --remote` names every problem; "
                f"if it is junk, delete {name})",
                object=name,
            )

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
        """List ``index/``, ``doomed/`` and ``marks/`` and read what is new; drop what is no
        longer listed (prune deleted it)."""
        self.view.refresh()

    def has(self, key: str) -> bool:
        """Whether an index of the view names ``key`` in a pack no doomed list names."""
        return self.view.has(key)

    def locate(self, key: str) -> Blob:
        """Where ``key``'s blob lies (``Blob.key`` is the pack's id); RemoteMissing when no
        index of the view names it."""
        return self.view.locate(key)

    def pack_end(self, pack: str) -> int:
        """Where the last blob an index names in ``pack`` ends (its header follows): how far a
        ranged read of it may go."""
        return self.view.pack_end(pack)

    def index_files(self) -> dict[str, IndexFile]:
        """Every index file of the view by id, superseded ones included (prune, verify)."""
        return self.view.index_files()

    def doomed_lists(self) -> dict[str, Doomed]:
        """Every doomed list of the view by id (prune)."""
        return self.view.doomed_lists()

    def packs(self) -> dict[str, list[Blob]]:
        """Each pack the indexes of the view name (superseded ones left out), with its blobs."""
        return self.view.packs()

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
        return sorted(self.view.records().values(), key=lambda r: (r.mark.created, r.mark.seq), reverse=True)

    def mark_names(self) -> Collection[str]:
        """The object names of the mark records in the view (``marks/<mac>``; no refresh)."""
        return self.view.record_names()

    def record_name(self, store_id: str, mark_id: str) -> str:
        """The object name of the record of mark ``mark_id`` of store ``store_id``."""
        return records.mark_name(self.master, store_id, mark_id)

    def find(self, ref: str, host: str | None = None, workspace: bytes | None = None) -> MarkRecord:
        """The mark ``ref`` names among the records (of ``host``, of ``workspace``, when
        given): a full id, a unique id prefix, or a label (the newest mark with it of one
        store's workspace: Ambiguous, listing them, when marks of several carry it), then
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
            self._one_place(r.base, found)
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
            for rec in self.view.records().values()
            if rec.store == base.store and rec.workspace == base.workspace and rec.mark.seq < base.mark.seq
        ]
        before.sort(key=lambda rec: rec.mark.seq, reverse=True)
        if len(before) < r.back:
            raise NotFound(f"{ref}: {self.backend.url} holds fewer than {r.back} marks before {base.mark.id}")
        return before[r.back - 1]

    def _one_place(self, label: str, found: Sequence[MarkRecord]) -> None:
        """Refuse a label that marks of more than one (store, workspace) carry: on a machine
        with no history of its own, the newest of them could be another project's tree.
        Within one store's workspace a label names its newest mark."""
        newest: dict[tuple[str, bytes], MarkRecord] = {}
        for rec in found:  # newest first
            newest.setdefault((rec.store, rec.workspace), rec)
        if len(newest) < 2:
            return
        listed = "; ".join(
            f"{rec.mark.id} of {rec.host}:{shown(rec.workspace)} (store {rec.store[:8]}, "
            f"{_when(rec.mark.created)})"
            for rec in list(newest.values())[:10]
        )
        raise Ambiguous(
            f"label {shown(label)} names marks of {len(newest)} workspaces in {self.backend.url}: {listed}. "
            "Say which: --host HOST, -w PATH (the workspace's path on the machine that pushed it), "
            "or the mark id",
            candidates=[rec.mark.id for rec in newest.values()],
            marks=[
                {"id": rec.mark.id, "host": rec.host, "store": rec.store,
                 "workspace": encode_path(rec.workspace), "created": rec.mark.created / 1e9}
                for rec in newest.values()
            ],
        )  # fmt: skip

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

    def decode_node(self, key: str, data: bytes, part: Callable[[str], bytes] | None = None) -> trees.Node:
        """Node ``key`` from its verified content; cached for :meth:`load_node`. A wide
        directory's parts are read with ``part`` (verified content of a key; :meth:`get`)."""
        part = part or self.get
        try:
            if fan.is_fan(data):  # a wide directory: its parts read (each verified) and joined
                node: trees.Node = fan.assemble(data, {p.key: part(p.key) for p in fan.decode(data)})
            else:
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
        cache_write(self.cache / name, data)
        self.view.add_index(name, index)
        return index_id

    def write_doomed(self, packs_: Collection[str]) -> str:
        """Seal and upload a doomed list of ``packs_`` (prune's first phase); return its id."""
        doomed = Doomed(frozenset(packs_), time.time_ns())
        data = packs.encode_doomed(self.master, doomed)
        name = packs.doomed_name(data)
        self.backend.put(name, data)
        cache_write(self.cache / name, data)
        self.view.add_doomed(name, doomed)
        return name.removeprefix("doomed/")

    def write_mark(self, record: MarkRecord) -> bool:
        """Upload a mark record, unless the view lists it (its name is fixed by its store and
        mark: never rewritten). Only once every object its tree needs is in an index. True
        when it was written."""
        if record.name in self.view.record_names():
            return False
        data = records.encode_mark(self.master, record)
        self.backend.put(record.name, data)
        cache_write(self.cache / record.name, data)
        self.view.add_record(record)
        return True


def _when(ns: int) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(ns / 1e9))


def _user() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return str(os.getuid())


def _key_files(backend: Backend) -> list[tuple[str, bytes]]:
    """Each key file listed, with its bytes; one listed larger than a key file can be is not
    fetched (its bytes left empty: it reads as damaged), so a server cannot make an open hold
    gigabytes."""
    listed = [(item.name, item.size) for item in backend.list(keys.DIR)]

    def fetch(item: tuple[str, int]) -> bytes:
        return backend.get(item[0]) if item[1] <= keys.MAX_FILE_BYTES else b""

    return list(zip((name for name, _ in listed), parallel(fetch, listed), strict=True))


def _unlock(backend: Backend, password: str) -> crypto.MasterKey:
    found = _key_files(backend)
    if not found:
        raise RemoteMissing(f"{backend.url} holds no repository (no key files): `remote add` makes one")
    damaged: list[RemoteCorrupt] = []
    for name, data in found:
        master = _try_key_file(backend, name, data, password, damaged)
        if master is not None:
            return master
    if len(damaged) == len(found):
        raise damaged[0]
    many = f"any of its {len(found)} key files" if len(found) > 1 else "its key file"
    also = f"; {len(damaged)} more could not be read: {damaged[0].message}" if damaged else ""
    raise WrongPassword(f"the password does not open {backend.url} (it opens none of {many}){also}")


def _try_key_file(
    backend: Backend, name: str, data: bytes, password: str, damaged: list[RemoteCorrupt]
) -> crypto.MasterKey | None:
    """The master keys key file ``name`` gives with ``password``; None when it does not open
    with it, or cannot be read (noted in ``damaged``): one damaged or foreign key file must not
    refuse every password the others open."""
    try:
        return keys.open_key_file(data, password, name=name)
    except RemoteCorrupt as exc:
        log.warning("remote.damaged", remote=backend.url, object=name, error=exc.message)
        damaged.append(exc)
        return None
