"""inotify records -> :class:`WatchEvent`s, with the watch table kept in step (reader thread).

Each record is about an entry of a watched directory (its ``wd`` names the directory, its
``name`` the entry) or about the directory itself. A created directory is watched at once and
listed, its entries reported as created; every new name is looked at for hard links
(:mod:`snapd.capture.births`); a directory moved away has its watches detached until
its move is paired or resolved, and one a rename arrives on is displaced until the same
rename says whether it died or went the other way (an exchange: :mod:`snapd.capture.watches`);
a barrier cookie in the root is never an event: it releases
its barrier once everything before it is delivered. An overflow re-synchronises the watches
and becomes an ``overflow`` event (the workspace rescans).
"""

from __future__ import annotations

import os
from pathlib import Path

import structlog

from snapd.capture import inotify
from snapd.capture.births import Births
from snapd.capture.cookies import Cookies
from snapd.capture.events import OVERFLOW, RESYNC, OnEvents, WatchEvent
from snapd.capture.inotify import CHANGE_MASK, Mask
from snapd.capture.moves import MovePairing
from snapd.capture.reader import Listing
from snapd.capture.watches import WatchTable
from snapd.paths import is_cookie_name, join

log = structlog.get_logger(__name__)


class Translator:
    """Used by the reader thread only, under the watcher's lock."""

    def __init__(
        self, root: Path, watches: WatchTable, moves: MovePairing, cookies: Cookies, on_events: OnEvents
    ) -> None:
        self._root = root
        self._watches, self._moves, self._cookies = watches, moves, cookies
        self._on_events = on_events
        self._births = Births(os.fsencode(root))
        self.overflowed = 0  # kernel queue overflows seen
        self.resynced = 0  # times the watch table fell behind the disk and was re-placed

    def handle(self, data: bytes) -> None:
        """Turn one read(2) worth of records into events and deliver what is complete."""
        self._moves.add(self._births.next_read(len(data)))
        for wd, mask, cookie, name in inotify.records(data):
            if self._record(wd, mask, cookie, name):
                # A barrier cookie: every rename completed before it was created has both
                # halves queued before it, so whatever is still unpaired moved out.
                self._resolve_moves(force=True)
                if self._watches.behind:  # before the barrier is released: it rescans
                    self.catch_up()
                # Its close and delete records follow: release each barrier once only.
                waiter = self._cookies.claim(name)
                if waiter is not None:
                    self._moves.wait_here(waiter)
        self._resolve_moves(force=False)
        self._moves.deliver(self._on_events)

    def catch_up(self) -> None:
        """The disk was found ahead of the records read (:attr:`WatchTable.behind`: a
        directory renamed again before its first rename was read, so some events may have
        come under a name it no longer had): place the watches from the disk, and have the
        workspace rescan. Called once the moves read are resolved."""
        self.resynced += 1
        log.info("watcher.resynced", workspace=str(self._root))
        self._watches.resync()
        self._moves.add([RESYNC])

    def _resolve_moves(self, *, force: bool) -> None:
        for cookie in self._moves.resolve(force=force):
            self._watches.release(cookie)
            self._moves.add(self._births.moved_out(cookie))
        if force:
            self._watches.settle_displaced()

    def _created_below(self, rel: bytes) -> None:
        """Watch new directory ``rel`` and below; report what the listings find as created.
        A directory gone (or replaced by a file) before its watch was placed was seen by no
        one while it was there: ``unseen``."""
        found: Listing = []
        watches, births = self._watches, self._births
        vanished: list[bytes] = []
        watches.add_tree(rel, found, vanished=vanished)
        events = created(found)
        for path, is_dir in found:
            events += births.born(path, is_dir, listed=True)
        events += [WatchEvent("unseen", path, None, True) for path in vanished]
        self._moves.add(events)

    def _record(self, wd: int, mask: int, cookie: int, name: bytes) -> bool:
        """Translate one inotify record; True iff it is one of our barrier cookies."""
        watches, moves = self._watches, self._moves
        if mask & Mask.IN_Q_OVERFLOW:
            self.overflowed += 1
            log.warning("watcher.overflow", workspace=str(self._root))
            self._resolve_moves(force=True)
            watches.resync()
            moves.add([OVERFLOW])
            return False
        if mask & Mask.IN_IGNORED:  # the kernel dropped this watch (directory deleted...)
            watches.dropped(wd)
            return False
        parent = watches.path_of(wd)
        if parent is None:  # a watch we removed, or of a directory moved away (detached)
            if not name and mask & Mask.IN_ATTRIB:
                watches.replaced(wd)  # perhaps a directory renamed over: dead
            return False
        is_dir = bool(mask & Mask.IN_ISDIR)
        if not name:  # about the watched directory itself
            if wd == watches.root_wd:
                if mask & (Mask.IN_DELETE_SELF | Mask.IN_MOVE_SELF | Mask.IN_UNMOUNT):
                    moves.add([WatchEvent("deleted", b"", None, True)])
                elif mask & Mask.IN_ATTRIB:
                    moves.add([WatchEvent("modified", b"", None, True)])
            elif mask & Mask.IN_UNMOUNT:
                watches.resync()
                moves.add([OVERFLOW])
            return False  # other directories are reported by their parent's watch
        if wd == watches.root_wd and is_cookie_name(name):
            return True
        rel = join(parent, name)
        births = self._births
        if mask & Mask.IN_MOVED_FROM:
            moves.add(births.died(rel, is_dir, cookie))
            moves.moved_from(rel, is_dir, cookie)
            if is_dir:
                watches.detach(rel, cookie)
        elif mask & Mask.IN_MOVED_TO:
            watches.displace(rel)
            if moves.moved_to(cookie, rel, is_dir):
                moves.add(births.arrived(cookie, rel, is_dir))
                if is_dir:
                    watches.reattach(cookie, rel)
            else:
                moves.add([WatchEvent("created", rel, None, is_dir), *births.born(rel, is_dir, moved=True)])
                if is_dir:
                    self._created_below(rel)
        elif mask & Mask.IN_CREATE:
            moves.add([WatchEvent("created", rel, None, is_dir), *births.born(rel, is_dir)])
            if is_dir:
                self._created_below(rel)
        elif mask & Mask.IN_DELETE:
            moves.add([WatchEvent("deleted", rel, None, is_dir), *births.died(rel, is_dir)])
            if is_dir:
                watches.deleted(rel)
        elif mask & CHANGE_MASK:
            moves.add([WatchEvent("modified", rel, None, is_dir)])
            if is_dir and mask & Mask.IN_ATTRIB and rel in watches.refused:
                # Its mode changed: maybe we may watch it now. Then whatever it holds is
                # reported as created, since none of it was seen while it was refused.
                self._created_below(rel)
        return False


def created(found: Listing) -> list[WatchEvent]:
    """``created`` events for what listings found."""
    return [WatchEvent("created", rel, None, is_dir) for rel, is_dir in found]
