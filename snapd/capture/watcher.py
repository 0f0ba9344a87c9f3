"""Change notification for one workspace root, as plain values (:class:`WatchEvent`).

The watcher places the watches (:mod:`snapd.capture.watches`), reads the workspace's inotify
queue on a thread of its own, pairs moves (:mod:`snapd.capture.moves`) and answers barriers
(:mod:`snapd.capture.cookies`). Why it binds inotify itself rather than through watchdog's
observers: :mod:`snapd.capture.inotify`.

One inotify instance and one reader thread per workspace: the barrier cookie is created in the
root and comes back through the same queue as every other event of that workspace (so a barrier
proves every earlier event was read), and an overflow in one workspace does not force rescans of the others.

Callbacks run on the reader thread and must be quick (hand the batch to a queue): while the
callback runs nothing is read, and the kernel queue can overflow.
"""

from __future__ import annotations

import os
import select
import threading
from collections.abc import Callable, Iterable
from pathlib import Path

import structlog

from snapd.capture import inotify
from snapd.capture.cookies import Cookies
from snapd.capture.events import OVERFLOW, OnEvents, WatchEvent
from snapd.capture.inotify import CHANGE_MASK, Mask
from snapd.capture.moves import MovePairing
from snapd.capture.watches import Found, WatchTable
from snapd.errors import NotFound
from snapd.paths import is_cookie_name, join

log = structlog.get_logger(__name__)


class Watcher:
    """inotify watches on one workspace root, delivering :class:`WatchEvent` batches.

    ``should_watch_dir(rel_dir)`` is asked before a directory below the root gets a watch
    (the root is always watched); pass ``IgnoreRules.dir_may_contain_captured``. Entries of
    watched directories are reported whatever their name, except barrier cookies, which are
    never delivered. ``max_watches`` simulates the kernel's watch limit (tests).
    """

    def __init__(
        self,
        root: Path,
        on_events: OnEvents,
        should_watch_dir: Callable[[bytes], bool],
        *,
        max_watches: int | None = None,
    ) -> None:
        self.root = root
        self._root_b = os.fsencode(root)
        self._on_events = on_events
        self._lock = threading.RLock()  # the watch table and the moves; reader and rescan_watches
        self._watches = WatchTable(root, should_watch_dir, max_watches)
        self._moves = MovePairing(str(root))
        self._cookies = Cookies(root)
        self._kill_r = self._kill_w = -1
        self._thread: threading.Thread | None = None
        self._stopping = False
        self._stop_requested = False
        self._pipe_lock = threading.Lock()  # the kill pipe is closed by stop() only
        self._overflowed = 0

    # -- public ---------------------------------------------------------------------------

    @property
    def watch_count(self) -> int:
        """inotify watches currently registered (root included)."""
        return len(self._watches)

    @property
    def watch_failures(self) -> int:
        """Directories that should have been watched but could not be (ENOSPC, EACCES, the
        ``max_watches`` seam...), counted since start (a refused directory once, however often
        it is tried again); changes in them go unseen."""
        return self._watches.failures

    @property
    def limit_failures(self) -> int:
        """The failures due to the kernel's limits (``LIMITS``, the ``max_watches`` seam):
        where they lie is anyone's guess, so only a scan at every mark makes up for them."""
        return self._watches.limit_failures

    @property
    def failed_dirs(self) -> list[tuple[bytes, int]]:
        """Recent (rel_dir, errno) watch failures, for status reports."""
        return list(self._watches.failed_dirs)

    def refused_dirs(self) -> dict[bytes, int]:
        """Directories unwatched now for a reason of their own (``EACCES`` for one we may not
        read...) -> errno. A directory leaves this table when a watch on it is placed again —
        a change of its mode is tried at once — or when it is deleted or moved."""
        with self._lock:
            return dict(self._watches.refused)

    @property
    def overflowed(self) -> int:
        """Kernel queue overflows seen since start."""
        return self._overflowed

    @property
    def running(self) -> bool:
        thread = self._thread
        return thread is not None and thread.is_alive() and not self._stopping

    def start(self, known_dirs: Iterable[bytes] | None = None) -> None:
        """Place the watches and start reading; returns once every watch is in place.

        ``known_dirs``: the directories a previous run captured (parents before children are
        not required). They are watched without listing any directory — at start-up, listing
        tens of thousands of unchanged directories dominates — and directories that appeared
        since are for the caller to find (its reconcile scan) and hand to :meth:`watch_new`.
        """
        if self._thread is not None:
            raise RuntimeError("watcher already started")
        if not os.path.isdir(self._root_b):
            raise NotFound(f"workspace root {self.root} does not exist or is not a directory")
        with self._lock:
            self._watches.open(known_dirs)
        self._kill_r, self._kill_w = os.pipe2(os.O_CLOEXEC)
        self._thread = threading.Thread(target=self._run, name=f"snapd-watch:{self.root}", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop reading and drop every watch; waiting barriers return False. Idempotent;
        may be called from the callback."""
        thread = self._thread
        if thread is None:
            return
        with self._pipe_lock:
            if self._stop_requested:
                return
            self._stop_requested = True
            self._stopping = True
            os.write(self._kill_w, b"x")
        if thread is not threading.current_thread():
            thread.join()
        with self._pipe_lock:
            os.close(self._kill_r)
            os.close(self._kill_w)
            self._kill_r = self._kill_w = -1
        self._cookies.release_all()

    def barrier(self, timeout: float) -> bool:
        """Return True once every event queued before this call has been delivered.

        Creates ``.snapd-<pid>-<n>~`` in the root, deletes it, and waits for its event to come
        back through this watcher's inotify queue. False on timeout, when the cookie cannot be
        created (read-only root...), when a delivery failed, or when the watcher is stopped:
        the caller must then rescan. Safe to call from many threads at once.
        """
        if not self.running:
            return False
        return self._cookies.barrier(timeout)

    def watch_new(self, dirs: Iterable[bytes]) -> list[WatchEvent]:
        """Watch directories found after :meth:`start` (and everything below them); returns a
        ``created`` event for every entry found in them once watched, so nothing created
        between their creation and their watch is missed."""
        found: Found = []
        with self._lock:
            if not self.running:
                return []
            for rel in sorted(dirs, key=lambda p: p.count(b"/")):
                parent = rel.rpartition(b"/")[0]
                if rel in self._watches or (parent and parent not in self._watches):
                    continue
                if os.path.isdir(os.path.join(self._root_b, rel)) and not os.path.islink(
                    os.path.join(self._root_b, rel)
                ):
                    self._watches.add_tree(rel, found)
        return _created(found)

    def rescan_watches(self, should_watch_dir: Callable[[bytes], bool] | None = None) -> None:
        """Re-apply ``should_watch_dir`` (a new one if given, e.g. after the ignore rules
        changed) to the whole tree: add missing watches, drop watches of directories that
        should no longer be watched. Events are not synthesised: the caller rescans."""
        with self._lock:
            if should_watch_dir is not None:
                self._watches.should_watch_dir = should_watch_dir
            if self.running:
                self._watches.resync()

    # -- reading --------------------------------------------------------------------------

    def _run(self) -> None:
        fd = self._watches.fd
        poller = select.poll()
        poller.register(fd, select.POLLIN)
        poller.register(self._kill_r, select.POLLIN)
        try:
            while not self._stopping:
                ready = {f for f, _ in poller.poll(self._moves.timeout_ms())}
                if self._kill_r in ready or self._stopping:
                    break
                if fd in ready:
                    try:
                        data = os.read(fd, inotify.READ_SIZE)
                    except InterruptedError:
                        continue
                else:
                    data = b""
                with self._lock:
                    self._handle(data)
        except Exception:
            log.exception("watcher.reader_crashed", workspace=str(self.root))
        finally:
            self._stopping = True
            with self._lock:
                self._watches.close()  # drops every watch
            self._cookies.release_all()
            self._moves.release_all()

    def _handle(self, data: bytes) -> None:
        """Turn one read(2) worth of records into events and deliver what is complete."""
        for wd, mask, cookie, name in inotify.records(data):
            if self._record(wd, mask, cookie, name):
                # A barrier cookie: every rename completed before it was created has both
                # halves queued before it, so whatever is still unpaired moved out.
                self._resolve_moves(force=True)
                # Its close and delete records follow: release each barrier once only.
                waiter = self._cookies.claim(name)
                if waiter is not None:
                    self._moves.wait_here(waiter)
        self._resolve_moves(force=False)
        self._moves.deliver(self._on_events)

    def _resolve_moves(self, *, force: bool) -> None:
        for cookie in self._moves.resolve(force=force):
            self._watches.release(cookie)

    def _created_below(self, rel: bytes) -> None:
        """Watch new directory ``rel`` and below; report what the listings find as created."""
        found: Found = []
        self._watches.add_tree(rel, found)
        self._moves.add(_created(found))

    def _record(self, wd: int, mask: int, cookie: int, name: bytes) -> bool:
        """Translate one inotify record; True iff it is one of our barrier cookies."""
        watches, moves = self._watches, self._moves
        if mask & Mask.IN_Q_OVERFLOW:
            self._overflowed += 1
            log.warning("watcher.overflow", workspace=str(self.root))
            self._resolve_moves(force=True)
            watches.resync()
            moves.add([OVERFLOW])
            return False
        if mask & Mask.IN_IGNORED:  # the kernel dropped this watch (directory deleted...)
            watches.dropped(wd)
            return False
        parent = watches.path_of(wd)
        if parent is None:
            return False  # a watch we removed, or of a directory moved away (detached)
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
        if mask & Mask.IN_MOVED_FROM:
            moves.moved_from(rel, is_dir, cookie)
            if is_dir:
                watches.detach(rel, cookie)
                watches.forget_refused(rel)
        elif mask & Mask.IN_MOVED_TO:
            if moves.moved_to(cookie, rel, is_dir):
                if is_dir:
                    watches.reattach(cookie, rel)
            else:
                moves.add([WatchEvent("created", rel, None, is_dir)])
                if is_dir:
                    self._created_below(rel)
        elif mask & Mask.IN_CREATE:
            moves.add([WatchEvent("created", rel, None, is_dir)])
            if is_dir:
                self._created_below(rel)
        elif mask & Mask.IN_DELETE:
            moves.add([WatchEvent("deleted", rel, None, is_dir)])
            if is_dir:
                watches.forget_refused(rel)
        elif mask & CHANGE_MASK:
            moves.add([WatchEvent("modified", rel, None, is_dir)])
            if is_dir and mask & Mask.IN_ATTRIB and rel in watches.refused:
                # Its mode changed: maybe we may watch it now. Then whatever it holds is
                # reported as created, since none of it was seen while it was refused.
                self._created_below(rel)
        return False


def _created(found: Found) -> list[WatchEvent]:
    return [WatchEvent("created", rel, None, is_dir) for rel, is_dir in found]
