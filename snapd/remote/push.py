"""Pushing marks: the objects their trees need that the repository lacks, packed and sealed,
then an index naming the packs, then one record per mark (docs/remote.md, "Push").

The write order is what makes an interrupted push harmless: a reader trusts an object only
through an index and a mark only through its record, and a record is written only once every
object its tree needs is in an index. Packs are uploaded a few at a time (the S3 client waits
without the GIL); each one that lands is appended to a journal in the repository's cache
directory (fsync'd JSON lines), so a push cut short (the server gone, the network cut, the
machine killed) resumes by indexing what landed instead of sending it again. A journal entry
older than half the prune grace is dropped (prune may delete a pack no index names once the
grace has passed) and its objects are sent again.

Which objects: a mark's tree is walked against the tree of a mark of the same workspace whose
record the repository holds (or that this push sends first): a subtree whose key is equal on
both sides is complete in the repository already and is not walked, so an incremental push
reads only the directories that changed (not while the view names a doomed pack: the base's
record may count on it, so then every object is checked). Every object found is then checked against the
repository's index view (:meth:`Repository.has`, which counts an object of a doomed pack as
absent). Nothing is ever deleted or overwritten.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import NamedTuple

from snapd.errors import CorruptObject, MissingObject, RemoteError, RemoteMissing
from snapd.remote import packs, records, unreadable
from snapd.remote.packs import Blob
from snapd.remote.repo import Repository
from snapd.remote.unreadable import ReadError, Skipped
from snapd.remote.view import THREADS, parallel
from snapd.store import fan, nodes, objects, safeio, trees
from snapd.store.records import Mark
from snapd.store.store import Store

Progress = Callable[[int, int], None]
INDEX_EVERY = 256
"""Packs after which a long push writes an index (so a push cut short loses no more)."""
READ_CHUNK = 256
READ_CHUNK_BYTES = 32 << 20
"""Objects (and content bytes) read from the store at once (``Store.get_many`` reads them in
key order; they are packed in walk order, so a pack holds neighbouring paths, the nodes
together, and a restore reads each pack about once)."""


class PushResult(NamedTuple):
    marks: int  # records written
    present: int  # marks whose records the repository held already
    objects: int  # objects uploaded
    bytes: int  # their contents' bytes
    packs: int  # packs uploaded
    resumed: int  # packs an interrupted push had sent, indexed now without sending them again
    requests: int  # requests this push made
    landed: tuple[str, ...]  # ids of the marks the repository holds records of now
    skipped: tuple[Skipped, ...] = ()  # marks not pushed: the local store cannot read what they need


class Journal:
    """Packs that landed and are not yet in an index written by this machine, one JSON line
    each (``{"pack", "blobs", "time"}``: ``time`` when it landed), fsync'd as each lands;
    rewritten without them once an index names them. A torn last line (a crash while
    appending) is ignored, and the next line starts on a line of its own."""

    def __init__(self, path: Path, max_age_s: float) -> None:
        self.path = path
        self.max_age_ns = int(max_age_s * 1e9)
        self._lock = threading.Lock()

    def landed(self) -> dict[str, list[Blob]]:
        """Packs journaled within the age limit, with their blobs."""
        return {pack: blobs for pack, (blobs, _) in self._entries().items()}

    def _entries(self) -> dict[str, tuple[list[Blob], int]]:
        try:
            lines = self.path.read_bytes().splitlines()
        except FileNotFoundError:
            return {}
        out: dict[str, tuple[list[Blob], int]] = {}
        oldest = time.time_ns() - self.max_age_ns
        for line in lines:
            try:
                entry = json.loads(line)
                if entry["time"] >= oldest:
                    blobs = [Blob(str(k), int(o), int(n)) for k, o, n in entry["blobs"]]
                    out[str(entry["pack"])] = (blobs, int(entry["time"]))
            except (ValueError, KeyError, TypeError):
                continue  # torn by a crash while it was appended
        return out

    def add(self, pack: str, blobs: Sequence[Blob]) -> None:
        line = _line(pack, blobs, time.time_ns())
        with self._lock:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o600)
            try:
                size = os.fstat(fd).st_size
                if size and os.pread(fd, 1, size - 1) != b"\n":
                    line = b"\n" + line  # after a torn line
                os.write(fd, line)
                safeio.fsync(fd)
            finally:
                os.close(fd)

    def indexed(self, packs_: set[str]) -> None:
        """Forget ``packs_``: an index the repository holds names them now. The others keep
        the time they landed (their age is what says whether prune may have deleted them)."""
        with self._lock:
            left = {p: e for p, e in self._entries().items() if p not in packs_}
            if not left:
                safeio.unlink(self.path)
                return
            safeio.write_atomic(self.path, b"".join(_line(p, b, t) for p, (b, t) in left.items()))


def _line(pack: str, blobs: Sequence[Blob], landed: int) -> bytes:
    return json.dumps({"pack": pack, "blobs": list(blobs), "time": landed}).encode() + b"\n"


def objects_of(load: trees.Load, tree: str, base: str | None) -> Iterator[tuple[str, bool]]:
    """The keys of ``tree``'s nodes and contents that ``base`` (a tree complete in the
    repository; None: nothing) does not hold at the same path, parents before children, each
    with whether it is a node. A subtree with the same key on both sides is skipped unread."""
    yield tree, True
    if tree == base:
        return
    new = load(tree)
    old = load(base) if base is not None else {}
    if isinstance(new, fan.FanNode):  # a wide directory: the parts the base does not hold too
        held = set(old.parts) if isinstance(old, fan.FanNode) else set()
        yield from ((part, True) for part in new.parts if part not in held)
    if isinstance(new, nodes.PackedNode) and isinstance(old, nodes.PackedNode):
        names = new.changed_names(old)
    else:
        names = sorted(n for n in new if new.get(n) != old.get(n))
    for name in names:
        entry = new.get(name)
        if entry is None:
            continue
        if entry.kind == "dir":
            was = old.get(name)
            yield from objects_of(load, entry.key, was.key if was is not None and was.kind == "dir" else None)
        elif entry.kind in ("file", "symlink"):
            yield entry.key, False


class _Pusher:
    """One push's sending: what it sent, the journal, the counts."""

    def __init__(self, store: Store, repo: Repository, progress: Progress | None, pack_target: int) -> None:
        self.store, self.repo, self.progress = store, repo, progress
        self.pack_target = pack_target
        # Prune deletes a pack no index names once the grace has passed: older journal
        # entries are not trusted to be there (their objects are sent again).
        self.journal = Journal(repo.cache / "journal.jsonl", repo.refresh_s * 2)
        self.sent: dict[str, list[Blob]] = {}  # packs landed, not in an index yet
        self.queued: set[str] = set()  # keys this push sent or is sending
        self.bad: dict[str, ReadError] = {}  # keys the store could not read: not sent
        self.objects = self.bytes = self.packs = self.resumed = 0
        self.done = self.total = 0
        self._lock = threading.Lock()

    def resume(self) -> None:
        """Take the packs an interrupted push left in the journal as sent by this one (the
        index this push writes names them); forget those an index names already."""
        landed = self.journal.landed()
        wanted = [p for p, blobs in landed.items() if not all(self.repo.has(b.key) for b in blobs)]
        # The journal is the cache directory's, and a copy of the repository elsewhere (its id
        # and keys) shares it: a pack is taken as landed only where the server has it.
        for pack, there in zip(wanted, parallel(self._there, wanted), strict=True):
            if there:
                self.sent[pack] = landed[pack]
                self.queued.update(b.key for b in landed[pack])
                self.resumed += 1
        if len(self.sent) < len(landed):
            self.journal.indexed(set(landed) - set(self.sent))

    def _there(self, pack: str) -> bool:
        try:
            self.repo.backend.get(packs.pack_name(pack), 0, 1)
        except RemoteMissing:
            return False
        return True

    def send(self, keys: Sequence[str]) -> None:
        """Read ``keys`` from the store (in their order, :data:`READ_CHUNK` at a time), pack,
        seal and upload them, :data:`THREADS` packs in flight; an index every
        :data:`INDEX_EVERY` packs."""
        self.total += len(keys)
        in_flight: list[Future[None]] = []
        with ThreadPoolExecutor(THREADS) as pool:
            writer = packs.PackWriter(self.repo.master, self.pack_target)

            def flush(full: packs.PackWriter) -> None:
                while len(in_flight) >= THREADS:
                    in_flight.pop(0).result()
                in_flight.append(pool.submit(self._upload, full))

            for chunk in _chunks(keys):
                read = unreadable.read(self.store, chunk, self.bad)  # in key order: packed in walk order
                for key in chunk:
                    data = read.pop(key, None)
                    if data is None:  # damaged here: the marks needing it are skipped
                        self._count(1)
                        continue
                    self.bytes += len(data)
                    codec, payload = objects.encode(data)
                    encoding = bytes((codec,)) + payload
                    if not writer.fits(len(encoding)):  # a big object gets a pack of its own
                        flush(writer)
                        writer = packs.PackWriter(self.repo.master, self.pack_target)
                    if writer.add(key, encoding):
                        flush(writer)
                        writer = packs.PackWriter(self.repo.master, self.pack_target)
                if len(self.sent) >= INDEX_EVERY:
                    self.write_index()
            if len(writer):
                flush(writer)
            for future in in_flight:
                future.result()

    def _upload(self, writer: packs.PackWriter) -> None:
        data, blobs = writer.finish()
        pack = self.repo.write_pack(data)
        self.journal.add(pack, blobs)
        with self._lock:
            self.sent[pack] = blobs
            self.packs += 1
            self.objects += len(blobs)
        self._count(len(blobs))

    def _count(self, n: int) -> None:
        """Progress: ``n`` more objects uploaded, or left out (the store could not read them)."""
        with self._lock:  # reported in order, from whichever thread uploaded
            self.done += n
            if self.progress is not None:
                self.progress(self.done, self.total)

    def write_index(self) -> None:
        """An index naming every pack sent and not yet indexed; then the journal forgets them."""
        with self._lock:
            sent, self.sent = self.sent, {}
        if sent:
            self.repo.write_index(sent)
            self.journal.indexed(set(sent))


def _chunks(keys: Sequence[str]) -> Iterator[Sequence[str]]:
    """``keys`` in runs of at most :data:`READ_CHUNK` objects and :data:`READ_CHUNK_BYTES`
    (a larger object alone)."""
    start = size = 0
    for i, key in enumerate(keys):
        n = objects.parse_key(key)[1]
        if i > start and (i - start >= READ_CHUNK or size + n > READ_CHUNK_BYTES):
            yield keys[start:i]
            start, size = i, 0
        size += n
    if start < len(keys):
        yield keys[start:]


class _Needs(NamedTuple):
    """What the marks of a push need: keys to send (walk order), keys the repository's view
    holds (counted on, not sent), the records of the marks walked against, and per mark the
    objects and bytes it brought."""

    send: list[str]
    relied: list[str]
    bases: set[str]
    brought: dict[str, tuple[int, int]]
    unwalked: dict[str, ReadError]  # mark id -> why its tree could not be walked (skipped)


def needs(store: Store, repo: Repository, sid: str, todo: Sequence[Mark], queued: set[str]) -> _Needs:
    """Walk each mark of ``todo`` (oldest first) against the closest mark of its workspace
    whose tree is complete in the repository (its record is there, or it comes earlier in
    this push): the keys neither there nor in ``queued`` (which this adds them to)."""
    out = _Needs([], [], set(), {}, {})
    contents: list[str] = []  # sent after every node: a restore reads the nodes as one region
    complete: dict[int, list[Mark]] = {}
    pushing = {m.id for m in todo}
    # A record may count on a doomed pack (its pusher's view predated the list: phase 2 keeps
    # the pack only while that record is listed). Walked against such a base, a subtree equal
    # on both sides would be counted on unchecked, and the base may be dropped before this
    # push's records land: while the view names a doomed pack, every object is checked.
    trust_bases = not any(d.packs for d in repo.doomed_lists().values())
    for mark in todo:
        done = complete.get(mark.workspace)
        if done is None:
            names = repo.mark_names()
            done = complete[mark.workspace] = [
                m for m in store.marks(mark.workspace) if repo.record_name(sid, m.id) in names
            ]
        base = min(done, key=lambda m: abs(m.seq - mark.seq), default=None) if trust_bases else None
        try:
            found = list(objects_of(store.load_node, mark.tree, base.tree if base is not None else None))
        except (CorruptObject, MissingObject) as exc:
            try:  # the base's node, perhaps: the whole tree, then
                base, found = None, list(objects_of(store.load_node, mark.tree, None))
            except (CorruptObject, MissingObject):
                out.unwalked[mark.id] = exc  # never a base: it is not complete anywhere
                continue
        if base is not None and base.id not in pushing:
            out.bases.add(repo.record_name(sid, base.id))
        found += [(k, False) for k in (mark.rules, mark.ignored) if k]
        count = size = 0
        for key, is_node in found:
            if key in queued:
                continue
            if repo.has(key):
                out.relied.append(key)
                continue
            queued.add(key)
            (out.send if is_node else contents).append(key)
            count, size = count + 1, size + objects.parse_key(key)[1]
        out.brought[mark.id] = (count, size)
        done.append(mark)
    out.send.extend(contents)
    return out


def push(
    store: Store,
    repo: Repository,
    marks: Sequence[tuple[Mark, bytes]],
    host: str,
    progress: Progress | None = None,
    *,
    pack_target: int = packs.PACK_TARGET,
) -> PushResult:
    """Send the marks of ``marks`` (each with its workspace's root) the repository lacks:
    the objects, an index, then their records. A mark needing an object the local store cannot
    read gets no record: it is in the result's ``skipped``, the others are pushed.
    ``progress(done, total)`` counts objects; ``pack_target``: the pack size (tests lower it to
    make many packs of little data)."""
    before = repo.backend.requests
    repo.ensure_fresh()
    repo.refuse_damaged_indexes("nothing is pushed")
    sid = store.store_id()
    pusher = _Pusher(store, repo, progress, pack_target)
    pusher.resume()
    roots = {m.id: root for m, root in marks}
    skipped: dict[str, Skipped] = {}
    for _attempt in range(3):
        names = repo.mark_names()
        todo = [m for m, _ in marks if repo.record_name(sid, m.id) not in names and m.id not in skipped]
        todo.sort(key=lambda m: (m.created, m.seq))
        need = needs(store, repo, sid, todo, pusher.queued)
        pusher.send(need.send)
        pusher.write_index()
        bad = {**{unreadable.failed_key(e): e for e in need.unwalked.values()}, **pusher.bad}
        skipped.update((s.mark, s) for s in unreadable.skipped(store, todo, bad, roots, need.unwalked))
        todo = [m for m in todo if m.id not in skipped]
        # A prune may have doomed packs (or dropped a mark walked against) while the view
        # aged: past half the grace, look again before a record says the objects are there.
        age = repo.age()
        if age is not None and age <= repo.refresh_s * 2:
            break
        repo.refresh()
        repo.refuse_damaged_indexes("no record is written")
        # what this push sent counts too: a prune may have doomed (or, past the grace,
        # deleted) a pack of it that no record referenced yet
        sent_and_relied = [k for k in (*need.relied, *need.send) if k not in pusher.bad]
        if all(repo.has(k) for k in sent_and_relied) and need.bases <= set(repo.mark_names()):
            break
        pusher.queued.difference_update(k for k in sent_and_relied if not repo.has(k))
    else:
        raise RemoteError(
            f"{repo.backend.url}: the objects of the marks pushed were doomed again each time they "
            "were sent (a prune with a grace shorter than the push?); nothing was recorded: push again"
        )

    def record(mark: Mark) -> bool:
        count, size = need.brought.get(mark.id, (0, 0))
        return repo.write_mark(records.mark_record(
            repo.master, mark, host=host, store=sid, workspace=roots[mark.id],
            objects=count, nbytes=size, pushed=time.time_ns(),
        ))  # fmt: skip

    written = sum(parallel(record, todo))  # every object is indexed: the records in any order
    names = repo.mark_names()
    return PushResult(
        marks=written,
        present=len(marks) - len(todo) - len(skipped),
        objects=pusher.objects,
        bytes=pusher.bytes,
        packs=pusher.packs,
        resumed=pusher.resumed,
        requests=repo.backend.requests - before,
        landed=tuple(m.id for m, _ in marks if repo.record_name(sid, m.id) in names),
        skipped=tuple(skipped.values()),
    )
