"""Move pairing, and delivery in the kernel's order: the events read but not handed over yet.

A rename queues IN_MOVED_FROM and IN_MOVED_TO (same cookie) back to back before it returns,
so the MOVED_TO of a rename follows its MOVED_FROM in the queue. watchdog's ``InotifyBuffer``
holds every unpaired MOVED_FROM for 0.5 s in a ``DelayedQueue`` whose ``get()`` blocks the
head of the queue, so one file moved out of the tree delays every later event, a barrier
included. Here an unpaired MOVED_FROM holds its place in the order, and only what follows it
waits: it becomes a ``moved`` event when its MOVED_TO comes, or a ``deleted`` one (moved out
of the tree) when a barrier cookie or an overflow is read after it, or after
:data:`MOVE_GRACE`.

Barrier waiters sit at their cookie's place: each is released once every event before it has
been delivered, and told whether a delivery failed since the previous release.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Final

import structlog

from snapd.capture.cookies import Waiter
from snapd.capture.events import OnEvents, WatchEvent

log = structlog.get_logger(__name__)

# How long an unpaired IN_MOVED_FROM waits for its IN_MOVED_TO when no cookie comes along.
# Both are queued by the same rename(2) before it returns, so this only covers a read(2) that
# happened to split them.
MOVE_GRACE: Final = 0.05


class PendingMove:
    """A MOVED_FROM waiting for its MOVED_TO; holds its place in the event order."""

    __slots__ = ("path", "is_dir", "cookie", "since", "event")

    def __init__(self, path: bytes, is_dir: bool, cookie: int) -> None:
        self.path = path
        self.is_dir = is_dir
        self.cookie = cookie
        self.since = time.monotonic()
        self.event: WatchEvent | None = None


class MovePairing:
    """The undelivered events of one watcher, in order, with the moves still unpaired.

    Used by the reader thread only (under the watcher's lock).
    """

    def __init__(self, root: str) -> None:
        self._root = root  # for the log
        self._pending: dict[int, PendingMove] = {}
        self._out: list[WatchEvent | PendingMove] = []  # undelivered, blocked by a pending move
        self._waiters: list[tuple[int, Waiter]] = []
        self._delivery_failed = False

    def add(self, events: Iterable[WatchEvent]) -> None:
        self._out.extend(events)

    def moved_from(self, path: bytes, is_dir: bool, cookie: int) -> None:
        pending = PendingMove(path, is_dir, cookie)
        self._pending[cookie] = pending
        self._out.append(pending)

    def moved_to(self, cookie: int, dest: bytes, is_dir: bool) -> bool:
        """Pair the rename ``cookie`` with its arrival at ``dest``; False when no MOVED_FROM
        waits for it (a move into the tree)."""
        source = self._pending.pop(cookie, None)
        if source is None:
            return False
        source.event = WatchEvent("moved", source.path, dest, is_dir)
        return True

    @property
    def unpaired(self) -> bool:
        """Whether a MOVED_FROM still waits for its MOVED_TO."""
        return bool(self._pending)

    def wait_here(self, waiter: Waiter) -> None:
        """Release ``waiter`` once everything read so far is delivered."""
        self._waiters.append((len(self._out), waiter))

    def timeout_ms(self) -> int | None:
        """How long the reader may block before the oldest unpaired move expires."""
        if not self._pending:
            return None
        oldest = min(p.since for p in self._pending.values())
        return max(0, int((oldest + MOVE_GRACE - time.monotonic()) * 1000) + 1)

    def resolve(self, *, force: bool) -> list[int]:
        """Unpaired MOVED_FROMs (all, or those past the grace period) become deletions; returns
        their cookies (a directory's watches are to be released; a new name's fate is told to
        :mod:`snapd.capture.births`)."""
        if not self._pending:
            return []
        now = time.monotonic()
        left: list[int] = []
        for cookie, pending in list(self._pending.items()):
            if force or now - pending.since >= MOVE_GRACE:
                del self._pending[cookie]
                pending.event = WatchEvent("deleted", pending.path, None, pending.is_dir)
                left.append(cookie)
        return left

    def deliver(self, on_events: OnEvents) -> None:
        """Hand the complete prefix to ``on_events``, then release the barriers whose cookie
        lies in it. A still-unpaired move keeps the rest back, in order."""
        out, waiters = self._out, self._waiters
        cut = len(out)
        for i, item in enumerate(out):
            if isinstance(item, PendingMove) and item.event is None:
                cut = i
                break
        batch: list[WatchEvent] = []
        for item in out[:cut]:
            event = item.event if isinstance(item, PendingMove) else item
            assert event is not None
            if not batch or batch[-1] != event:  # the kernel coalesces only unread repeats
                batch.append(event)
        if batch:
            try:
                on_events(batch)
            except Exception:
                # Those events are lost to the daemon: the next barrier released says so.
                self._delivery_failed = True
                log.exception("watcher.callback_failed", workspace=self._root)
        released = [w for pos, w in waiters if pos <= cut]
        ok = not self._delivery_failed
        if released:
            self._delivery_failed = False
        self._out = out[cut:]
        self._waiters = [(pos - cut, w) for pos, w in waiters if pos > cut]
        for waiter in released:
            if not waiter.done.is_set():
                waiter.ok = ok
                waiter.done.set()

    def release_all(self) -> None:
        """The reader stops: every barrier waiting here returns False."""
        for _, waiter in self._waiters:
            waiter.done.set()
