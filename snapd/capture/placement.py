"""The watches a restart places on its known directories before the reconcile scan.

A restarted workspace must watch every directory captured last time (~48k at django-100k)
and ``lstat`` every captured path (~150k) before its first mark. The watcher's reader thread
places the watches (parents first: sorted byte order) before it starts reading. The scan
visits the cached paths in the same order, a chunk at a time, and looks at a chunk only once
the watch of every directory sorted at or before its last path was attempted
(:meth:`Placement.wait_past`): each path's parent's and, a directory, its own watch among
them. Hence, for every captured path:

* a change made *before* its ``lstat`` shows in its signature (a file's size, mtime, ctime
  or inode; a directory's mtime/ctime when an entry came or went, so its listing is not
  trusted and it is listed again) -- the stat compare catches it;
* a change made *after* its ``lstat`` happens while its directory's (and, for a directory,
  its own) watch is in place -- inotify reports it, and the first mark's barrier collects it.

Placing the watches *while* the stat cache loaded and the scan ran, all in the daemon, was
tried, on the grounds that both are system calls that let go of the GIL, so two cores could
share them. Measured at django-100k (restarts as bench/bench_restart.py makes them, the
phases timed ad hoc inside the daemon), it cost more than it saved: each thread gave up the
GIL at every ``inotify_add_watch``, ``sqlite3_step`` and ``lstat``, and waited for it back
behind the other, so loading took 0.9 s instead of 0.26 s, and the first mark came 0.3 s
later than with the phases one after the other. The load still comes first; the scan's
``lstat`` s now run in reader processes (:func:`snapd.capture.statcache.restat`), outside
the daemon's GIL, so they go on beside the placement, a chunk behind it.

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
        self.done = 0  # dirs[:done] attempted; read without the lock (an int, set atomically)
        self._failed: str | None = None
        self._cond = threading.Condition()

    @property
    def complete(self) -> bool:
        return self.done >= self.total

    def advance(self, done: int) -> None:
        """The placing thread: ``dirs[:done]`` were attempted. Once all were, the list is
        let go (for the daemon's lifetime else): every wait returns at once from then on."""
        with self._cond:
            self.done = done
            if done >= self.total:
                self.dirs = ()
            self._cond.notify_all()

    def fail(self, why: str) -> None:
        """The placing thread stopped before the end (the watcher was stopped, or crashed):
        waiters are told, so a scan never goes on without the watches it relies on."""
        with self._cond:
            self._failed = why
            self._cond.notify_all()

    def wait_past(self, path: bytes) -> None:
        """Return once the watch of every directory sorted at or before ``path`` was attempted
        (its ancestors' and, a directory, its own among them: they sort before it); raise if
        placing stopped first."""
        with self._cond:
            while not self.complete and self.dirs[self.done] <= path:
                if self._failed is not None:
                    raise WorkspaceRefused(f"watches could not be placed: {self._failed}")
                self._cond.wait()

    def wait_all(self) -> None:
        """Return once every directory's watch was attempted; raise if placing stopped first."""
        with self._cond:
            while not self.complete:
                if self._failed is not None:
                    raise WorkspaceRefused(f"watches could not be placed: {self._failed}")
                self._cond.wait()


DONE = Placement(())  # nothing to place: every wait returns at once
