"""Watches placed on a restart's known directories while the reconcile scan runs: the frontier.

A restarted workspace must watch every directory captured last time (~48k at django-100k)
and ``lstat`` every captured path (~150k) before its first mark. Both are system calls that
let go of the GIL (``inotify_add_watch`` through ctypes, ``lstat``), so the watcher's reader
thread places the watches while the workspace's start thread scans, on two cores.

The order that keeps the catch-up exact: the known directories are placed in sorted byte
order, and the scan visits the cached paths in the same order. Before it calls ``lstat`` on a
directory it waits until that directory's watch was attempted (:meth:`Placement.wait_for`);
a directory's parent sorts before it (a prefix sorts first), so by the time any path is
looked at, its parent's watch was attempted too. Hence, for every captured path:

* a change made *before* its ``lstat`` shows in its signature (a file's size, mtime, ctime
  or inode; a directory's mtime/ctime when an entry came or went, so its listing is not
  trusted and it is listed again) — the stat compare catches it;
* a change made *after* its ``lstat`` happens while its directory (and, for a directory, its
  own) watch is in place — inotify reports it, and the first mark's barrier collects it.

A watch that could not be placed is a race with the tree (the directory went: its ``lstat``
fails and the scan marks it dirty) or a failure counted by the watch table (the kernel's
limit: every mark scans then). The events of watches placed here queue in the kernel until
the reader thread, done placing, starts reading.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence

from snapd.errors import WorkspaceRefused


class Placement:
    """The progress of placing ``dirs`` (sorted) in order: how many were attempted."""

    def __init__(self, dirs: Sequence[bytes]) -> None:
        self.dirs = dirs
        self.total = len(dirs)
        self._index = {d: i for i, d in enumerate(dirs)}
        self.done = 0  # dirs[:done] attempted; read without the lock (an int, set atomically)
        self._failed: str | None = None
        self._cond = threading.Condition()

    @property
    def complete(self) -> bool:
        return self.done >= self.total

    def advance(self, done: int) -> None:
        """The placing thread: ``dirs[:done]`` were attempted. Once all were, the list and
        its index are let go (~10 MB at 48k directories, for the daemon's lifetime else):
        every wait returns at once from then on."""
        with self._cond:
            self.done = done
            if done >= self.total:
                self.dirs = ()
                self._index = {}
            self._cond.notify_all()

    def fail(self, why: str) -> None:
        """The placing thread stopped before the end (the watcher was stopped, or crashed):
        waiters are told, so a scan never goes on without the watches it relies on."""
        with self._cond:
            self._failed = why
            self._cond.notify_all()

    def wait_for(self, rel: bytes) -> None:
        """Return once the watch of ``rel`` (and of every directory sorting before it) was
        attempted; at once for a directory that is not one of :attr:`dirs`."""
        i = self._index.get(rel)
        if i is not None and self.done <= i:
            self._wait(i + 1)

    def wait_all(self) -> None:
        if not self.complete:
            self._wait(self.total)

    def _wait(self, n: int) -> None:
        with self._cond:
            while self.done < n:
                if self._failed is not None:
                    raise WorkspaceRefused(f"watches could not be placed: {self._failed}")
                self._cond.wait()


DONE = Placement(())  # nothing to place: every wait returns at once
