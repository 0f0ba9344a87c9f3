"""New names, looked at as the reader meets them: which captured file a hard link made inside
the tree belongs to, even when the link is gone before the capture runs (reader thread).

``ln a b; echo x >> b; rm b`` inside one settle: inotify reports the write on ``b`` only (a
link count changes on the inode, which inotify reports to no watched directory), and the
capture finds ``b`` gone, so nothing would lead to ``a``, whose bytes changed. So every new
name — created, renamed or moved in, or found by the listing of a new directory — is
``lstat``-ed when its record is read: a regular file with more than one link becomes a
``linked`` event with its inode, and the capture reads that inode's captured names again.

That look comes after the fact, and two outcomes prove nothing: the name already gone (or a
path below a directory already gone), and the name born again — or a directory above it —
before the look may have happened (another birth of it among the records read with it or in
the read after, which hold everything queued before the look). Each becomes an ``unseen``
event: the next capture re-checks every captured file against the stat cache (one ``lstat``
each, :func:`snapd.capture.scan.recheck_files`). A name listed in a new directory and then
reported created (its record came between the watch and the listing) is one birth, not two.

Cost: one ``lstat`` per new name on the reader thread, and a re-check of every file when a
new name vanished before the reader could look (a probe file made and removed at once, a
fleeting link): O(files) for that capture only.
"""

from __future__ import annotations

import os
import stat
from typing import Final, Literal

from snapd.capture.events import WatchEvent
from snapd.capture.inotify import READ_SIZE

State = Literal["listed", "born", "gone"]
# A read this close to READ_SIZE may have left records queued before the looks made while
# the previous one was handled: those looks stay open one read more.
_FULL: Final = READ_SIZE - 4096


class Births:
    """Used by the reader thread only, under the watcher's lock."""

    def __init__(self, root: bytes) -> None:
        self._root = root
        self._current: dict[bytes, State] = {}  # names looked at while handling this read
        self._open: dict[bytes, State] = {}  # ... and those of the read(s) before it
        self._above: set[bytes] = set()  # every directory above a name in either
        self._full = False

    def next_read(self, size: int) -> None:
        """A read(2) of ``size`` bytes is about to be handled: the looks of the read before
        it close unless that one was full (what was queued before them is all read now)."""
        if not size:
            return
        kept = self._open if self._full else {}
        self._open = kept | self._current
        self._current = {}
        self._full = size >= _FULL
        self._above = {p for name in self._open for p in _parents(name)}

    def _state(self, rel: bytes) -> State | None:
        return self._current.get(rel, self._open.get(rel))

    def died(self, rel: bytes, is_dir: bool) -> list[WatchEvent]:
        """``rel`` was deleted or moved away. A directory born so recently may have been
        linked into, written through and emptied before its watch was placed: ``unseen``."""
        was = self._state(rel)
        if was is None:
            return []
        self._current[rel] = "gone"
        return [WatchEvent("unseen", rel)] if is_dir and was != "gone" else []

    def born(self, rel: bytes, is_dir: bool, *, listed: bool = False) -> list[WatchEvent]:
        """A name appeared at ``rel`` (``listed``: found by the listing of a new directory):
        what a capture must do beyond reading ``rel``."""
        was = self._state(rel)
        if was == "listed" and not listed:
            return []  # its creation, reported after the listing that found it
        out: list[WatchEvent] = []
        if was is not None or (is_dir and rel in self._above):
            # Born again (or a directory above names looked at): a look may have been at
            # this newcomer, not at what the earlier record named.
            out.append(WatchEvent("unseen", rel))
        self._current[rel] = "listed" if listed else "born"
        self._above.update(_parents(rel))
        if is_dir:
            return out
        try:
            st = os.lstat(self._root + b"/" + rel)
        except OSError:  # gone already: what it was linked to is unknown
            return [WatchEvent("unseen", rel)]
        if stat.S_ISREG(st.st_mode) and st.st_nlink > 1:
            out.append(WatchEvent("linked", rel, inode=(st.st_dev, st.st_ino)))
        return out


def _parents(rel: bytes) -> list[bytes]:
    parts = rel.split(b"/")
    return [b"/".join(parts[:i]) for i in range(1, len(parts))]
