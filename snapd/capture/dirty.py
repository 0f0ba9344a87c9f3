"""The dirty set of one workspace: what changed since the last capture, and what to rescan.

The watcher's reader thread adds to it (:meth:`DirtySet.add_events`: keep it quick, nothing
is read from the disk); the capture thread, a barrier or a mark takes it whole
(:meth:`DirtySet.take`). A directory's contents get no events of their own when it moves or
is replaced, so such a directory is queued for a subtree scan; an overflow (or a barrier that
timed out) queues a full scan, with the reason the ``workspace.rescanned`` event gives. A new
name seen as a hard link queues the inode, whose captured names are read again; one gone
before it could be looked at queues a re-check of every captured file
(:mod:`snapd.capture.births`).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from snapd.capture.events import WatchEvent
from snapd.capture.statcache import Inode


@dataclass
class Dirty:
    """What one capture has to look at."""

    paths: set[bytes] = field(default_factory=set)
    scan_dirs: set[bytes] = field(default_factory=set)
    full: bool = False
    rules: bool = False  # a rule file changed: the ignore rules are to be rebuilt
    why: set[str] = field(default_factory=set)  # why a full scan is due (the rescanned event's reason)
    inodes: set[Inode] = field(default_factory=set)  # new names' files with other links
    recheck: bool = False  # a new name went unseen: re-check every captured file

    def __or__(self, other: Dirty) -> Dirty:
        return Dirty(
            self.paths | other.paths,
            self.scan_dirs | other.scan_dirs,
            self.full or other.full,
            self.rules or other.rules,
            self.why | other.why,
            self.inodes | other.inodes,
            self.recheck or other.recheck,
        )

    def __bool__(self) -> bool:
        return bool(self.paths or self.scan_dirs or self.full or self.inodes or self.recheck)


class DirtySet:
    """A :class:`Dirty` shared by the reader thread and the capturers, under its own lock."""

    def __init__(self) -> None:
        self._dirty = Dirty()
        self._cond = threading.Condition()
        self._stopping = False
        self._root_event = False  # the root itself had an event (gone, moved, unmounted, chmod): wake up

    def add_events(
        self, events: list[WatchEvent], is_rule_file: Callable[[bytes], bool], known: Callable[[bytes], bool]
    ) -> None:
        """Record a batch of events. ``known(path)``: the path was captured before (a directory
        created there replaced one whose cached children must go)."""
        with self._cond:
            d = self._dirty
            for ev in events:
                if ev.kind == "overflow" or ev.kind == "resync":
                    d.full = True
                    d.why.add("overflow" if ev.kind == "overflow" else "watches_resynced")
                    continue
                if ev.kind == "linked":
                    assert ev.inode is not None
                    d.inodes.add(ev.inode)
                    continue
                if ev.kind == "unseen":
                    d.recheck = True
                    continue
                if ev.path == b"":
                    # The root itself: the capture thread checks it is still there, and records
                    # a new mode (a time after a chmod of the root must restore that mode).
                    self._root_event = True
                    continue
                for path in (ev.path, ev.dest):
                    if path is None:
                        continue
                    if is_rule_file(path):
                        d.rules = True
                    d.paths.add(path)
                if ev.is_dir:
                    # A directory's contents get no events of their own when it moves or is
                    # replaced: re-list both ends, so the cached children of the old one go
                    # and the new one's are found ("mv build old && mkdir build").
                    if ev.kind == "moved" and ev.dest is not None:
                        d.scan_dirs.update((ev.path, ev.dest))
                    elif ev.kind == "deleted" or (ev.kind == "created" and known(ev.path)):
                        d.scan_dirs.add(ev.path)
            self._cond.notify_all()

    def add_paths(self, paths: Iterable[bytes], *, rules: bool = False) -> None:
        """Paths found changed some other way (a scan, a re-stat, a failed commit)."""
        with self._cond:
            self._dirty.paths.update(paths)
            self._dirty.rules |= rules

    def request_full(self, why: str | None = None, *, rules: bool = False) -> None:
        """Queue a full scan (``why``: the reason announced), and with ``rules`` a rebuild of
        the ignore rules first. The capture thread is not woken: see :meth:`wake`."""
        with self._cond:
            self._dirty.full = True
            self._dirty.rules |= rules
            if why is not None:
                self._dirty.why.add(why)

    def wake(self) -> None:
        """Let the capture thread take what is queued now rather than at the next event."""
        with self._cond:
            self._cond.notify_all()

    def paths(self) -> set[bytes]:
        with self._cond:
            return set(self._dirty.paths)

    def pending(self) -> int:
        with self._cond:
            d = self._dirty
            return len(d.paths) + len(d.scan_dirs) + len(d.inodes) + int(d.full or d.recheck)

    def take(self) -> Dirty:
        with self._cond:
            d, self._dirty = self._dirty, Dirty()
            return d

    def wait(self) -> bool:
        """Block until something is dirty or the root itself had an event (True), or
        :meth:`stop` is called (False)."""
        with self._cond:
            while not self._stopping and not (self._dirty or self._root_event):
                self._cond.wait()
            self._root_event = False
            return not self._stopping

    def stop(self) -> None:
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
