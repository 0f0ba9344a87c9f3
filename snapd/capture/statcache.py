"""The stat cache: what the daemon last saw of every captured path in one workspace.

Each captured path (file, symlink, directory) maps to the signature its ``lstat``/``fstat``
gave when it was read — (st_mode, size, mtime_ns, ctime_ns, inode) — and the time it was
read. A scan compares the disk with it and re-reads only what differs (cost: O(changes)
reconciliation). A file whose mtime is within ``RACY_NS`` of the time it was read is not
trusted: a second write in the same timestamp tick would leave the signature unchanged (git's
"racy" rule), so such files are read again by the next scan.

The cache is persisted with the head tree it describes (same transaction), so a restart
starts from exactly what was captured. Changes since the last :meth:`take_changes` are
tracked so each capture batch writes only its own rows.

Hard links: inotify reports only the name a file was written through, yet every name of it
must be captured (a rollback holds every name it touches). Files seen with ``st_nlink > 1``
are recorded in
memory with their (device, inode, nlink) — by every read and every scan, so a restart's
reconcile scan rebuilds them; :meth:`linked` finds the other captured names of a file (by inode
number, over an index built only once a workspace has links), and :meth:`loose_links` the names
whose file has more links than names known here (another name outside the root, or ignored):
those are re-checked at each mark, since nothing inside the root reports their changes.

Memory: one entry is a path and 44 packed bytes (:data:`snapd.statrow.ROW`), not a tuple of
six ints — about a third of the size, which at 10^5 paths is tens of MB of the daemon's
resident set. The catalog stores the same bytes, so loading an entry builds nothing else. An
entry with a value past that row's range (a file dated 2400, an inode number past 2^63) is 84
bytes (:data:`snapd.statrow.WIDE`); the scan's byte comparison holds only for 44-byte rows.
The regular-file count is kept as entries change, so ``status`` does not walk the cache.

What ``status`` lists of the cache (its precious files) is judged again only at the paths
set or removed since it last looked (:meth:`take_touched`): judged whole after each commit,
it cost ``status`` 0.45 s at 500,000 files after every mark.
"""

from __future__ import annotations

import os
import stat
import struct
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from typing import Final, NamedTuple, Protocol

from snapd import statrow

Inode = tuple[int, int]  # (st_dev, st_ino)

Sig = tuple[int, int, int, int, int]
Entry = tuple[Sig, int]  # (signature, read time ns)
Row = tuple[bytes, bytes]  # path, its entry packed (statrow.ROW), as the catalog stores it


class Lstat(Protocol):
    """``os.lstat`` as :meth:`StatCache.files_changed` calls it: a name relative to a directory."""

    def __call__(self, path: bytes, *, dir_fd: int) -> os.stat_result: ...


Found = set[bytes]  # (a StatCache method is named ``set``)
ByIno = dict[int, set[bytes]]  # st_ino -> regular file paths

RACY_NS = 2_000_000_000

_ROW: Final = statrow.ROW  # st_mode, size, mtime_ns, ctime_ns, inode, read ns (or statrow.WIDE)
_SIG: Final = struct.Struct("<I4q")  # its first part: the signature
_READ: Final = struct.Struct("<q")  # its last: the read time
_NO_SIG: Final = b"\xff" * (_ROW.size + 1)  # the prefix of no row (longer than a narrow one)
# What :meth:`StatCache.seen` tells a scan: whether the path is unchanged, and (a directory)
# whether its cached children may stand in for a listing.
CHANGED: Final = (False, False)
SAME: Final = (True, False)
SAME_LISTING: Final = (True, True)
_SHORT: Final = 32  # children kept in a list up to this many, in a set beyond
_FILE_BYTE: Final = stat.S_IFREG >> 8  # a regular file's type, in a packed entry's second byte
_ROOT_OPEN: Final = os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC  # a root names are stat'ed from
TOUCHED_MAX: Final = 1 << 16  # paths :meth:`StatCache.take_touched` lists; past it, "everything"


def _type(packed: bytes) -> int:
    """The file type bits (``S_IFMT``) of a packed entry's st_mode, without unpacking it."""
    return (packed[1] << 8) & 0o170000  # S_IFMT: the high nibble of the low two bytes


def _pack(sig: Sig, read_ns: int) -> bytes:
    return statrow.pack(*sig, read_ns)


def _unpack(packed: bytes) -> Entry:
    mode, size, mtime, ctime, ino, read = statrow.unpack(packed)
    return (mode, size, mtime, ctime, ino), read


def judge(packed: bytes, st: os.stat_result, now_ns: int) -> tuple[bool, bool]:
    """:meth:`StatCache.seen`'s verdict on an entry and what ``lstat`` says now: whether the
    path is unchanged, and (a directory) whether its cached children may stand in for a
    listing."""
    mode = st.st_mode
    mtime = st.st_mtime_ns
    if len(packed) == _ROW.size:
        # Packed and compared as bytes: a tenth of a second less per 10^5 paths than unpacking.
        try:
            sig = _SIG.pack(mode, st.st_size, mtime, st.st_ctime_ns, st.st_ino)
        except struct.error:  # a value past the row's range now: not what a 44-byte row holds
            return CHANGED
        if sig != packed[: _SIG.size]:
            return CHANGED
        (read_ns,) = _READ.unpack_from(packed, _SIG.size)
    else:  # a wide row (statrow.WIDE): rare, compared unpacked
        was, read_ns = _unpack(packed)
        if was != (mode, st.st_size, mtime, st.st_ctime_ns, st.st_ino):
            return CHANGED
    if stat.S_ISREG(mode):
        return CHANGED if _racy(mtime, read_ns, now_ns) else SAME
    if stat.S_ISDIR(mode) and not _racy(max(mtime, st.st_ctime_ns), read_ns, now_ns):
        return SAME_LISTING
    return SAME


class Restated(NamedTuple):
    """A row :func:`restat` reports: its path's ``lstat`` (``mode`` None: it failed) and
    :func:`judge`'s verdict; ``dev``, ``ino`` and ``nlink`` of a regular file."""

    path: bytes
    mode: int | None
    same: bool = False
    same_listing: bool = False
    dev: int = 0
    ino: int = 0
    nlink: int = 1


def restat(root: bytes, rows: list[Row], now_ns: int) -> list[Restated]:
    """``lstat`` each row's path below ``root`` and judge it against its entry: the rows a
    catch-up must look at again (:func:`snapd.capture.scan.catch_up`), in their order — the
    path is gone or not as cached, a directory's listing is not to be trusted, or a regular
    file has more than one link (its links are noted). Rows simply unchanged are not
    reported: at 10^5 paths, after a restart with nothing changed, none are. Nothing below a
    path reported gone or no longer a directory is stat'ed or reported (in this chunk; the
    caller leaves out what a later chunk reports below it). Runs in a reader process (no
    cache here, only its rows) or, for a small cache, in the daemon.

    Each name is stat'ed relative to the root, opened once (``O_PATH``: the kernel walks
    only the name's own components); the root not openable, by whole paths (each then fails
    as the root's absence says)."""
    out: list[Restated] = []
    # Paths below one reported gone or no longer a directory are not stat'ed (nor through a
    # symlink now there: it may lead anywhere, a hung mount too): (lo, hi) of each such
    # subtree in sorted order, the latest on top (a later one ends before an earlier begins).
    skip: list[tuple[bytes, bytes]] = []
    with root_opened(root) as top:
        for path, packed in rows:
            if skip:
                while skip and path >= skip[-1][1]:
                    skip.pop()
                if skip and path >= skip[-1][0]:
                    continue  # the caller judges what lies below (catch_up: _cut_above)
            try:
                st = os.lstat(path, dir_fd=top) if top is not None else os.lstat(root + b"/" + path)
            except OSError:
                out.append(Restated(path, None))
                skip.append((path + b"/", path + b"0"))
                continue
            same, same_listing = judge(packed, st, now_ns)
            mode = st.st_mode
            if not same and not stat.S_ISDIR(mode):
                skip.append((path + b"/", path + b"0"))
            if stat.S_ISREG(mode):
                if not same or st.st_nlink > 1:
                    out.append(Restated(path, mode, same, False, st.st_dev, st.st_ino, st.st_nlink))
            elif not same or (stat.S_ISDIR(mode) and not same_listing):
                out.append(Restated(path, mode, same, same_listing))
    return out


@contextmanager
def root_opened(root: bytes) -> Iterator[int | None]:
    """``root`` opened to stat names relative to it (``O_PATH``: the kernel then walks only
    each name's own components), closed after; None when it cannot be opened."""
    try:
        top = os.open(root, _ROOT_OPEN)
    except OSError:
        yield None
        return
    try:
        yield top
    finally:
        os.close(top)


class StatCache:
    def __init__(self, entries: Mapping[bytes, Entry] | None = None) -> None:
        self._entries: dict[bytes, bytes] = {}
        self._files = 0  # regular files among the entries
        # dir -> child paths, built on demand: a list while short (a directory holds a few
        # entries on average, and a set costs 216 bytes at least: 10 MB at 10^5 paths), a set
        # past _SHORT (removing names one by one from a big directory stays O(1) each).
        self._kids: dict[bytes, list[bytes] | set[bytes]] | None = None
        # Paths set or removed since take_changes(); None: every entry, none of them stored
        # yet (a new workspace's cache: its baseline's 10^5 paths are not listed again here).
        self._changed: set[bytes] | None = None
        self._edits = 0  # puts and removals so far: a Changes over the entries checks it
        self._links: dict[bytes, tuple[Inode, int]] = {}  # path -> (inode, st_nlink), nlink > 1
        self._by_ino: dict[int, set[bytes]] | None = None  # st_ino -> file paths, built on demand
        # Paths set or removed since take_touched() (another thread's: status); None is
        # "everything": not taken yet (a baseline's 10^5 puts record nothing), or too many.
        self._touched: set[bytes] | None = None
        self._touched_lock = threading.Lock()
        if entries:
            self._load({p: _pack(sig, read) for p, (sig, read) in entries.items()})

    @classmethod
    def from_rows(cls, rows: Iterable[Row]) -> StatCache:
        """A cache of stored rows (:meth:`Store.load_stats`): each entry as the catalog keeps
        it, already packed."""
        cache = cls()
        cache._load(dict(rows))
        return cache

    def _load(self, packed: dict[bytes, bytes]) -> None:
        self._entries = packed
        self._changed = set()
        self._files = sum(1 for v in packed.values() if _type(v) == stat.S_IFREG)

    @property
    def _children(self) -> dict[bytes, list[bytes] | set[bytes]]:
        if self._kids is None:
            # Directories first: their keys are the entries' own bytes, not a copy per parent.
            lists: dict[bytes, list[bytes]] = {p: [] for p in self.directories()}
            for path in self._entries:
                lists.setdefault(path.rpartition(b"/")[0], []).append(path)
            kids: dict[bytes, list[bytes] | set[bytes]] = dict(lists)
            for parent, names in lists.items():
                if len(names) > _SHORT:
                    kids[parent] = set(names)
            self._kids = kids
        return self._kids

    def _add_child(self, path: bytes) -> None:
        assert self._kids is not None
        parent = path.rpartition(b"/")[0]
        group = self._kids.get(parent)
        if group is None:
            self._kids[parent] = [path]
        elif isinstance(group, set):
            group.add(path)
        else:
            group.append(path)
            if len(group) > _SHORT:
                self._kids[parent] = set(group)

    def _drop_child(self, path: bytes) -> None:
        group = self._children.get(path.rpartition(b"/")[0])
        if isinstance(group, set):
            group.discard(path)
        elif group is not None and path in group:
            group.remove(path)

    def children(self, path: bytes) -> set[bytes]:
        """Cached paths directly below ``path`` (b"" for the root)."""
        return set(self._children.get(path, ()))

    def get(self, path: bytes) -> Entry | None:
        packed = self._entries.get(path)
        return None if packed is None else _unpack(packed)

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, path: bytes) -> bool:
        return path in self._entries

    def paths(self) -> Iterator[bytes]:
        return iter(list(self._entries))

    def under(self, top: bytes) -> Iterator[bytes]:
        """``top`` and every cached path below it (everything for ``b""``)."""
        if not top:
            yield from list(self._entries)
            return
        stack = [top]
        while stack:
            p = stack.pop()
            if p in self._entries:
                yield p
            stack.extend(self._children.get(p, ()))

    def regular_files(self) -> list[bytes]:
        """Every cached regular file. Safe beside the capture thread (``status`` asks from a
        request thread): the walk is over a copy, made in one step the GIL is never let go
        in; over the dict itself, a path the capture added meanwhile made it raise."""
        return [p for p, v in self._entries.copy().items() if _type(v) == stat.S_IFREG]

    def file_rows(self) -> list[Row]:
        """(path, packed entry) of every cached regular file: what
        :func:`snapd.capture.scan.recheck_files` stats and hands to :meth:`files_changed`. The
        type is read from the byte itself (:func:`_type` without the call: a third of this list's
        cost at 10^5 paths)."""
        return [(p, v) for p, v in self._entries.items() if v[1] & 0xF0 == _FILE_BYTE]

    def is_directory(self, path: bytes) -> bool:
        """``path`` is cached as a directory."""
        packed = self._entries.get(path)
        return packed is not None and _type(packed) == stat.S_IFDIR

    def directories(self) -> list[bytes]:
        return [p for p, v in self._entries.items() if _type(v) == stat.S_IFDIR]

    def files(self) -> int:
        """How many regular files are cached (kept as entries come and go: status asks)."""
        return self._files

    def is_file(self, path: bytes) -> bool:
        """``path`` is cached as a regular file."""
        packed = self._entries.get(path)
        return packed is not None and _type(packed) == stat.S_IFREG

    def take_touched(self) -> set[bytes] | None:
        """The paths set or removed since the last call (a removed directory: its own path
        only, everything below it went with it), or None for "anything may have changed":
        the first call, or more than :data:`TOUCHED_MAX` paths since the last. Safe beside
        the capture thread that changes the cache."""
        with self._touched_lock:
            touched, self._touched = self._touched, set()
        return touched

    def _touch(self, path: bytes) -> None:
        if self._touched is None:
            return  # "everything" already: nothing to add (and no lock in a baseline's puts)
        with self._touched_lock:
            touched = self._touched
            if touched is not None:
                if len(touched) < TOUCHED_MAX:
                    touched.add(path)
                else:
                    self._touched = None

    def _put(self, path: bytes, entry: Entry) -> None:
        sig = entry[0]
        old = self._entries.get(path)
        if old is None:
            if self._kids is not None:
                self._add_child(path)
        elif _type(old) == stat.S_IFREG:
            self._files -= 1
        if stat.S_ISREG(sig[0]):
            self._files += 1
        else:
            self._links.pop(path, None)
        if self._by_ino is not None:
            if old is not None:
                self._unindex(path, old)
            if stat.S_ISREG(sig[0]):
                self._by_ino.setdefault(sig[4], set()).add(path)
        self._entries[path] = _pack(sig, entry[1])
        self._edits += 1
        if self._changed is not None:
            self._changed.add(path)
        self._touch(path)

    def set(self, path: bytes, sig: Sig, read_ns: int) -> None:
        self._put(path, (sig, read_ns))

    def remove(self, path: bytes) -> None:
        """Forget ``path`` and, for a directory, everything below it."""
        stack = [path]
        while stack:
            p = stack.pop()
            packed = self._entries.pop(p, None)
            if packed is not None:
                self._drop_child(p)
                if _type(packed) == stat.S_IFREG:
                    self._files -= 1
                self._unindex(p, packed)
            self._links.pop(p, None)
            stack.extend(self._children.pop(p, ()))
        self._edits += 1
        if self._changed is not None:
            self._changed.add(path)
        self._touch(path)

    # -- hard links ---------------------------------------------------------------------------

    def note_links(self, path: bytes, inode: Inode, nlink: int) -> None:
        """What a read or a scan saw of regular file ``path``: its inode and link count."""
        if nlink > 1 and path in self._entries:
            self._links[path] = (inode, nlink)
        else:
            self._links.pop(path, None)

    def linked(self, path: bytes) -> frozenset[bytes]:
        """Other captured files with ``path``'s inode number: its other names (a file on
        another device with the same number may be among them; reading it again is harmless).
        Only asked about files seen with more than one link."""
        packed = self._entries.get(path)
        if path not in self._links or packed is None:
            return frozenset()
        return frozenset(self._index().get(_unpack(packed)[0][4], ())) - {path}

    def names_of(self, inos: Iterable[int]) -> frozenset[bytes]:
        """Captured files with any of these inode numbers (a new name seen as a hard link:
        :mod:`snapd.capture.births`; another device's file with the same number may be among
        them, and reading it again is harmless)."""
        wanted = list(inos)
        if not wanted:
            return frozenset()
        index = self._index()
        return frozenset(p for ino in wanted for p in index.get(ino, ()))

    def _index(self) -> ByIno:
        """st_ino -> regular file paths, built on first use and kept up to date after."""
        if self._by_ino is None:
            index: ByIno = {}
            for p, v in self._entries.items():
                if _type(v) == stat.S_IFREG:
                    index.setdefault(_unpack(v)[0][4], set()).add(p)
            self._by_ino = index
        return self._by_ino

    def loose_links(self) -> list[bytes]:
        """Names of files with more links than names captured here: some name is outside the
        root or ignored, and a write through it reaches no watch of ours."""
        links = list(self._links.items())  # one step: status asks from another thread
        names: dict[Inode, int] = {}
        for _, (inode, _) in links:
            names[inode] = names.get(inode, 0) + 1
        return sorted(p for p, (inode, nlink) in links if nlink > names[inode])

    def _unindex(self, path: bytes, packed: bytes) -> None:
        if self._by_ino is not None and _type(packed) == stat.S_IFREG:
            ino = _unpack(packed)[0][4]
            same = self._by_ino.get(ino)
            if same is not None:
                same.discard(path)
                if not same:
                    del self._by_ino[ino]

    def is_clean(self, path: bytes, sig: Sig, now_ns: int) -> bool:
        """True when ``path`` certainly has not changed since it was read.

        A directory counts as clean when its signature is unchanged; whether its *listing*
        can be trusted is :meth:`listing_trusted`.
        """
        packed = self._entries.get(path)
        if packed is None:
            return False
        was, read_ns = _unpack(packed)
        if was != sig:
            return False
        if stat.S_ISREG(sig[0]):
            return not _racy(sig[2], read_ns, now_ns)
        return True

    def listing_trusted(self, path: bytes, sig: Sig, now_ns: int) -> bool:
        """True when directory ``path`` gained or lost no entry since it was captured.

        Adding, removing or renaming an entry changes a directory's mtime and ctime; an
        unchanged signature, outside the racy window, means its captured children are still
        exactly its entries (the scanner then skips listing it and re-judging ignore rules).
        """
        packed = self._entries.get(path)
        if packed is None:
            return False
        was, read_ns = _unpack(packed)
        return was == sig and stat.S_ISDIR(sig[0]) and not _racy(max(sig[2], sig[3]), read_ns, now_ns)

    def seen(self, path: bytes, st: os.stat_result, now_ns: int) -> tuple[bool, bool]:
        """What a scan found at ``path`` (its ``lstat``), in one step — the reconcile scan
        of 10^5 paths at start-up is what a restarted daemon's first mark waits for:
        (:meth:`is_clean`, :meth:`listing_trusted`), and for a regular file its links noted
        (:meth:`note_links`)."""
        if stat.S_ISREG(st.st_mode) and (self._links or st.st_nlink > 1):
            self.note_links(path, (st.st_dev, st.st_ino), st.st_nlink)
        packed = self._entries.get(path)
        return CHANGED if packed is None else judge(packed, st, now_ns)

    def rows(self, paths: list[bytes]) -> list[Row]:
        """(path, packed entry) of each of ``paths`` (cached: what :func:`restat` judges)."""
        entries = self._entries
        return [(p, entries[p]) for p in paths]

    def files_changed(self, rows: list[Row], lstat: Lstat, top: int, now_ns: int) -> Found:
        """The paths of ``rows`` (:meth:`file_rows`) whose ``lstat(path, dir_fd=top)`` differs
        from their row, as :meth:`seen` judges it (links noted the same way), or that cannot
        be stat'ed: a rollback's re-check of every captured file (docs/rollback.md, "Hard
        links"). A row as nearly every file's is (the narrow layout, a signature equal to the
        stat's, one link and none noted anywhere, read well after its mtime) is judged in the
        loop by one pack and one byte comparison, no call made: 7% of the re-check of
        npm-100k (issue 33). Every other row is :meth:`seen`'s to judge."""
        found: Found = set()
        pack, row_size, sig_size, read_at = _SIG.pack, _ROW.size, _SIG.size, _READ.unpack_from
        settled = now_ns - RACY_NS  # an mtime before this is out of the racy window of now
        for path, packed in rows:
            try:
                st = lstat(path, dir_fd=top)
            except OSError:
                found.add(path)
                continue
            mtime = st.st_mtime_ns
            try:
                sig = pack(st.st_mode, st.st_size, mtime, st.st_ctime_ns, st.st_ino)
            except struct.error:  # a value past the narrow row's range: no row begins so
                sig = _NO_SIG
            if (
                mtime < settled
                and st.st_nlink == 1
                and not self._links
                and len(packed) == row_size
                and packed.startswith(sig)
                and mtime < read_at(packed, sig_size)[0] - RACY_NS
            ):
                continue
            if not self.seen(path, st, now_ns)[0]:
                found.add(path)
        return found

    def take_changes(self) -> Changes:
        """Each path set or removed since the last call: its entry now, None when removed (a
        removed directory's row goes with everything below it). Only paths are remembered
        until then, and the entries stay packed until read: a baseline sets 10^5 entries, and
        a second copy of each (as tuples: ~50 MB at django-100k) is felt.

        A new workspace's first call (its baseline's commit): nothing is stored, so the
        changes are every entry and no removal, and they are the entries themselves, not a
        copy (a dict of 739,095 paths at django-500k, the baseline's peak); the cache must
        not change until they are written (they refuse to be read after it has)."""
        changed, self._changed = self._changed, set()
        entries = self._entries
        if changed is None:
            return Changes(entries, lambda: self._edits)
        return Changes({p: entries.get(p) for p in changed})


class Changes(Mapping[bytes, "Entry | None"]):
    """Paths -> entry or None (removed), each entry unpacked only as it is read; a batch
    writes them as :meth:`removed` and :meth:`rows`, still packed (``store.batch.StatChanges``)."""

    def __init__(self, packed: Mapping[bytes, bytes | None], edits: Callable[[], int] | None = None) -> None:
        """``edits``: the cache's edit count, when ``packed`` is its own entries (not a copy),
        which must not have changed since."""
        self._packed = packed
        self._edits, self._at = edits, edits() if edits is not None else 0

    def _current(self) -> Mapping[bytes, bytes | None]:
        if self._edits is not None and self._edits() != self._at:
            raise RuntimeError("the stat cache changed before its changes were written")
        return self._packed

    def removed(self) -> list[bytes]:
        return [p for p, v in self._current().items() if v is None]

    def rows(self) -> Iterator[Row]:
        """(path, packed entry) of each path set, in path order (the table's key: SQLite
        appends to its pages instead of splitting them)."""
        packed = self._current()
        return ((p, v) for p in sorted(packed) if (v := packed[p]) is not None)

    def __getitem__(self, path: bytes) -> Entry | None:
        packed = self._current()[path]
        return None if packed is None else _unpack(packed)

    def __iter__(self) -> Iterator[bytes]:
        return iter(self._current())

    def __len__(self) -> int:
        return len(self._current())


def _racy(mtime_ns: int, read_ns: int, now_ns: int) -> bool:
    return mtime_ns >= read_ns - RACY_NS or mtime_ns >= now_ns - RACY_NS
