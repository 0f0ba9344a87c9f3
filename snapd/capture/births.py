"""New names, looked at as the reader meets them: which captured file a hard link made inside
the tree belongs to, even when the link is gone before the capture runs (reader thread).

``ln a b; echo x >> b; rm b`` inside one settle: inotify reports the write on ``b`` only (a
link count changes on the inode, which inotify reports to no watched directory), and the
capture finds ``b`` gone, so nothing would lead to ``a``, whose bytes changed. So every new
name — created, renamed or moved in, or found by the listing of a new directory — is
``lstat``-ed when its record is read: a regular file with more than one link becomes a
``linked`` event with its inode, and the capture reads that inode's captured names again.

That look comes after the fact. When it finds the name gone (*missed*), what became of the
name decides: renamed within the tree (it, or a directory above it), its file is looked at
under the new name (or read there by the subtree scan), so nothing is lost; deleted, moved out
of the tree, or never accounted for, its file is unknown and an ``unseen`` event follows.

A look may also have come after the name was born *again*, and seen the newcomer's file. Only
births among the records read with it or in the read after can be such newcomers (those reads
hold everything queued before the look), so each name keeps, that long, the files its looks
saw: a later birth of it whose file one of them saw puts that look in doubt (``unseen``), and so
does a later look that misses, and a directory born above names looked at. A file renamed from
a name looked at is known without a look of its own, so an editor's atomic saves (a temporary
name renamed over the file, again and again) doubt nothing. A directory removed or moved out
right after it was made is ``unseen`` too: it may have been linked into, written through and
emptied before its watch was placed. A name listed in a new directory and then reported created
(its record came between the watch and the listing), or listed twice, is one birth.

After ``unseen`` the next capture re-checks every captured file against the stat cache (one
``lstat`` each, :func:`snapd.capture.scan.recheck_files`).

Cost: one ``lstat`` per new name on the reader thread, and a re-check of every file for a
capture after a new name went unseen (a probe file made and removed at once, a fleeting link).
"""

from __future__ import annotations

import os
import stat
from collections import Counter, deque
from typing import Final, Literal, NamedTuple

from snapd.capture.events import WatchEvent
from snapd.capture.inotify import READ_SIZE
from snapd.paths import at_or_below

Inode = tuple[int, int]  # (st_dev, st_ino)
# How a name born lately stands: looked at (by a record, or by its new directory's listing),
# its file known from the name it was renamed from, missed (gone by its look), or gone since.
State = Literal["looked", "listed", "known", "missed", "gone"]
# A read this close to READ_SIZE may have left records queued before the looks made while
# the previous one was handled: those looks stay open one read more.
_FULL: Final = READ_SIZE - 4096
_READS: Final = 8  # reads whose looks stay open at most (~12,000 records: the kernel's queue)


class _Name(NamedTuple):
    state: State
    file: Inode | None  # the file there now, as looked at or known (None: unknown, a directory)
    seen: frozenset[Inode]  # the files its looks saw, any of which may have been a newcomer's


_NONE: Final = _Name("gone", None, frozenset())


def _unseen(rel: bytes) -> WatchEvent:
    return WatchEvent("unseen", rel)


class Births:
    """Used by the reader thread only, under the watcher's lock."""

    def __init__(self, root: bytes) -> None:
        self._root = root
        # The names born while handling the reads whose looks are still open, a dict per read
        # (the last one: this read's), and every directory above them, counted.
        self._reads: deque[dict[bytes, _Name]] = deque([{}])
        self._above: Counter[bytes] = Counter()
        self._full = False
        self._missed: set[bytes] = set()  # names found gone by their look, fate not known yet
        self._moving: dict[int, bytes] = {}  # rename cookie -> what it took away that matters
        self._leaving: dict[int, Inode | None] = {}  # rename cookie -> the known file it carries

    def next_read(self, size: int) -> list[WatchEvent]:
        """A read(2) of ``size`` bytes is about to be handled: the looks of the reads before
        the last one close, and the last one's too unless it was full (what was queued before
        them is all read now). A name missed and not accounted for by then is ``unseen``; so
        is the oldest read's, when more than :data:`_READS` full reads in a row keep looks open
        (the reader is that far behind: the kernel's queue is about to overflow anyway)."""
        if not size:
            return []
        reads = self._reads
        keep = len(reads) if self._full else 1
        out: list[WatchEvent] = []
        if keep > _READS:
            keep = _READS
            out.append(_unseen(b""))
        while len(reads) > keep:
            for name in reads.popleft():
                self._above.subtract(_parents(name))
                if name in self._missed and self._get(name) is None:
                    self._missed.discard(name)
                    out.append(_unseen(name))
        self._above = +self._above  # drop the zero counts
        reads.append({})
        self._full = size >= _FULL
        return out

    def _get(self, rel: bytes) -> _Name | None:
        for names in reversed(self._reads):
            got = names.get(rel)
            if got is not None:
                return got
        return None

    def _put(self, rel: bytes, name: _Name) -> None:
        current = self._reads[-1]
        if rel not in current:
            self._above.update(_parents(rel))
        current[rel] = name

    def died(self, rel: bytes, is_dir: bool, cookie: int = 0) -> list[WatchEvent]:
        """``rel`` was deleted (``cookie`` 0) or renamed away (that rename's cookie).

        Names missed at or below it, and a directory made so recently that it may have been
        linked into, written through and emptied before its watch was placed, are ``unseen``
        — at once when deleted, once the rename turns out to have left the tree
        (:meth:`moved_out`); a rename within it (:meth:`arrived`) brings them under a new
        name that is looked at (a file) or scanned (a directory)."""
        was = self._get(rel)
        missed = [p for p in self._missed if at_or_below(p, rel)]
        for p in missed:
            self._missed.discard(p)
        if was is not None:
            self._put(rel, was._replace(state="gone", file=None))
        if cookie and not is_dir and (was is None or was.state in ("looked", "listed", "known")):
            # Its file is known at its next name: looked at here, or (a name not born lately)
            # settled — captured with its links, or looked at and its looks closed.
            self._leaving[cookie] = None if was is None else was.file
        if not missed and not (is_dir and was is not None and was.state in ("looked", "listed")):
            return []
        if cookie:
            self._moving[cookie] = rel
            return []
        return [_unseen(rel)]

    def arrived(self, cookie: int, rel: bytes, is_dir: bool) -> list[WatchEvent]:
        """The rename ``cookie`` ended inside the tree, at ``rel``: a birth there. A file
        known under the name it left needs no look of its own."""
        self._moving.pop(cookie, None)
        if cookie not in self._leaving or is_dir:
            self._leaving.pop(cookie, None)
            return self.born(rel, is_dir, moved=True)
        file = self._leaving.pop(cookie)
        was = self._get(rel) or _NONE
        self._put(rel, _Name("known", file, was.seen))
        return [_unseen(rel)] if file in was.seen else []

    def moved_out(self, cookie: int) -> list[WatchEvent]:
        """The rename ``cookie`` left the tree (resolved so by the move pairing)."""
        self._leaving.pop(cookie, None)
        rel = self._moving.pop(cookie, None)
        return [] if rel is None else [_unseen(rel)]

    def born(
        self, rel: bytes, is_dir: bool, *, listed: bool = False, moved: bool = False
    ) -> list[WatchEvent]:
        """A name appeared at ``rel`` — created, ``listed`` in a new directory, or ``moved``
        there (a rename, or a move into the tree): what a capture must do beyond reading it."""
        got = self._get(rel)
        if got is not None and got.state in ("looked", "listed", "known") and not moved:
            # Listed, then reported created (its record came between the watch and the
            # listing), or listed twice: one birth. Only a rename replaces a name that is there.
            return []
        was = got or _NONE
        state: State = "listed" if listed else "looked"
        doubt = is_dir and self._above[rel] > 0  # born again above names looked at
        self._put(rel, _Name(state, None, was.seen))
        if is_dir:
            return [_unseen(rel)] if doubt else []
        try:
            st = os.lstat(self._root + b"/" + rel)
        except OSError:  # gone already: what became of it decides (died, next_read)
            self._put(rel, _Name("missed", None, was.seen))
            self._missed.add(rel)
            return [_unseen(rel)] if was.seen else []  # an earlier look may have seen its file
        file = (st.st_dev, st.st_ino)
        self._put(rel, _Name(state, file, was.seen | {file}))
        out = [_unseen(rel)] if file in was.seen else []  # an earlier look may have seen it
        if stat.S_ISREG(st.st_mode) and st.st_nlink > 1:
            out.append(WatchEvent("linked", rel, inode=file))
        return out


def _parents(rel: bytes) -> list[bytes]:
    parts = rel.split(b"/")
    return [b"/".join(parts[:i]) for i in range(1, len(parts))]
