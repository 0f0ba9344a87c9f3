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
"""

from __future__ import annotations

import stat
from collections.abc import Iterator

Inode = tuple[int, int]  # (st_dev, st_ino)

Sig = tuple[int, int, int, int, int]
Entry = tuple[Sig, int]  # (signature, read time ns)

RACY_NS = 2_000_000_000


class StatCache:
    def __init__(self, entries: dict[bytes, Entry] | None = None) -> None:
        self._entries: dict[bytes, Entry] = entries if entries is not None else {}
        self._kids: dict[bytes, set[bytes]] | None = None  # dir -> child paths, built on demand
        self._changed: dict[bytes, Entry | None] = {}
        self._links: dict[bytes, tuple[Inode, int]] = {}  # path -> (inode, st_nlink), nlink > 1
        self._by_ino: dict[int, set[bytes]] | None = None  # st_ino -> file paths, built on demand
        # Kept as entries come and go: status asks for it (from another thread), and counting
        # 100k entries took most of its time.
        self._files = sum(1 for sig, _ in self._entries.values() if stat.S_ISREG(sig[0]))

    @property
    def _children(self) -> dict[bytes, set[bytes]]:
        if self._kids is None:
            kids: dict[bytes, set[bytes]] = {}
            for path in self._entries:
                kids.setdefault(path.rpartition(b"/")[0], set()).add(path)
            self._kids = kids
        return self._kids

    def children(self, path: bytes) -> set[bytes]:
        """Cached paths directly below ``path`` (b"" for the root)."""
        return set(self._children.get(path, ()))

    def get(self, path: bytes) -> Entry | None:
        return self._entries.get(path)

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

    def directories(self) -> list[bytes]:
        return [p for p, (sig, _) in self._entries.items() if stat.S_ISDIR(sig[0])]

    def files(self) -> int:
        """How many regular files are cached."""
        return self._files

    def _put(self, path: bytes, entry: Entry) -> None:
        old = self._entries.get(path)
        self._files += stat.S_ISREG(entry[0][0]) - (old is not None and stat.S_ISREG(old[0][0]))
        if old is None and self._kids is not None:
            self._kids.setdefault(path.rpartition(b"/")[0], set()).add(path)
        if not stat.S_ISREG(entry[0][0]):
            self._links.pop(path, None)
        if self._by_ino is not None:
            if old is not None:
                self._unindex(path, old[0])
            if stat.S_ISREG(entry[0][0]):
                self._by_ino.setdefault(entry[0][4], set()).add(path)
        self._entries[path] = entry
        self._changed[path] = entry

    def set(self, path: bytes, sig: Sig, read_ns: int) -> None:
        self._put(path, (sig, read_ns))

    def remove(self, path: bytes) -> None:
        """Forget ``path`` and, for a directory, everything below it."""
        stack = [path]
        while stack:
            p = stack.pop()
            entry = self._entries.pop(p, None)
            if entry is not None:
                self._files -= stat.S_ISREG(entry[0][0])
                self._children.get(p.rpartition(b"/")[0], set()).discard(p)
                self._unindex(p, entry[0])
            self._links.pop(p, None)
            stack.extend(self._children.pop(p, ()))
        self._changed[path] = None

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
        entry = self._entries.get(path)
        if path not in self._links or entry is None:
            return frozenset()
        if self._by_ino is None:
            index: dict[int, set[bytes]] = {}
            for p, (sig, _) in self._entries.items():
                if stat.S_ISREG(sig[0]):
                    index.setdefault(sig[4], set()).add(p)
            self._by_ino = index
        return frozenset(self._by_ino.get(entry[0][4], ())) - {path}

    def loose_links(self) -> list[bytes]:
        """Names of files with more links than names captured here: some name is outside the
        root or ignored, and a write through it reaches no watch of ours."""
        links = list(self._links.items())  # one step: status asks from another thread
        names: dict[Inode, int] = {}
        for _, (inode, _) in links:
            names[inode] = names.get(inode, 0) + 1
        return sorted(p for p, (inode, nlink) in links if nlink > names[inode])

    def _unindex(self, path: bytes, sig: Sig) -> None:
        if self._by_ino is not None and stat.S_ISREG(sig[0]):
            same = self._by_ino.get(sig[4])
            if same is not None:
                same.discard(path)
                if not same:
                    del self._by_ino[sig[4]]

    def is_clean(self, path: bytes, sig: Sig, now_ns: int) -> bool:
        """True when ``path`` certainly has not changed since it was read.

        A directory counts as clean when its own mode is unchanged; whether its *listing* can
        be trusted is :meth:`listing_trusted`.
        """
        entry = self._entries.get(path)
        if entry is None or entry[0] != sig:
            return False
        if stat.S_ISREG(sig[0]):
            return not _racy(sig[2], entry[1], now_ns)
        return True

    def listing_trusted(self, path: bytes, sig: Sig, now_ns: int) -> bool:
        """True when directory ``path`` gained or lost no entry since it was captured.

        Adding, removing or renaming an entry changes a directory's mtime and ctime; an
        unchanged signature, outside the racy window, means its captured children are still
        exactly its entries (the scanner then skips listing it and re-judging ignore rules).
        """
        entry = self._entries.get(path)
        return (
            entry is not None
            and entry[0] == sig
            and stat.S_ISDIR(sig[0])
            and not _racy(max(sig[2], sig[3]), entry[1], now_ns)
        )

    def take_changes(self) -> dict[bytes, Entry | None]:
        changed, self._changed = self._changed, {}
        return changed


def _racy(mtime_ns: int, read_ns: int, now_ns: int) -> bool:
    return mtime_ns >= read_ns - RACY_NS or mtime_ns >= now_ns - RACY_NS
