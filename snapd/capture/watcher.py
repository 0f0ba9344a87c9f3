"""Change notification for one workspace root, as plain values (:class:`WatchEvent`).

The watcher places the watches (:mod:`snapd.capture.watches`), reads the workspace's inotify
queue on a thread of its own and translates what it reads (:mod:`snapd.capture.translator`),
pairs moves (:mod:`snapd.capture.moves`) and answers barriers (:mod:`snapd.capture.cookies`).
Why it binds inotify itself rather than through watchdog's observers:
:mod:`snapd.capture.inotify`.

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
from snapd.capture.counters import Counters
from snapd.capture.events import OnEvents, WatchEvent
from snapd.capture.moves import MovePairing
from snapd.capture.placement import DONE, Placement
from snapd.capture.reader import Listing
from snapd.capture.translator import Translator, created
from snapd.capture.watches import WatchTable
from snapd.errors import NotFound, WorkspaceRefused

log = structlog.get_logger(__name__)

_CHUNK = 256  # known directories watched per turn of the lock


class Watcher:
    """inotify watches on one workspace root, delivering :class:`WatchEvent` batches.

    ``should_watch_dir(rel_dir)`` is asked before a directory below the root gets a watch
    (the root is always watched); pass ``IgnoreRules.dir_may_contain_captured``. Entries of
    watched directories are reported whatever their name, except barrier cookies, which are
    never delivered. ``max_watches`` is snapd's ``watch_limit`` setting: past it a directory
    fails as at the kernel's limit (``ENOSPC``, counted in ``limit_failures``); the caller tells
    the two causes apart by ``watch_count`` reaching it. ``counters`` counts the directories
    listed as their watches are placed.
    """

    def __init__(
        self,
        root: Path,
        on_events: OnEvents,
        should_watch_dir: Callable[[bytes], bool],
        *,
        max_watches: int | None = None,
        counters: Counters | None = None,
    ) -> None:
        self.root = root
        self._root_b = os.fsencode(root)
        self._lock = threading.RLock()  # the watch table and the moves; reader and rescan_watches
        self._watches = WatchTable(root, should_watch_dir, max_watches, counters)
        self._moves = MovePairing(str(root))
        self._cookies = Cookies(root)
        self._translator = Translator(root, self._watches, self._moves, self._cookies, on_events)
        self._kill_r = self._kill_w = -1
        self._thread: threading.Thread | None = None
        self._stopping = False
        self._stop_requested = False
        self._pipe_lock = threading.Lock()  # the kill pipe is closed by stop() only
        # The known directories' watches, placed by the reader thread before it reads.
        self.placement: Placement = DONE

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
    def aliased(self) -> dict[bytes, bytes]:
        """Directories left unwatched because they are a watched directory mounted at a second
        path (a bind mount) -> that directory: their changes come under its name only."""
        with self._lock:
            return dict(self._watches.aliased)

    @property
    def untrusted(self) -> bool:
        """Some changes may reach no event or the wrong name: only a scan at every mark finds
        them (:attr:`limit_failures`, :attr:`aliased`)."""
        return bool(self._watches.limit_failures or self._watches.aliased)

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
        return self._translator.overflowed

    @property
    def resynced(self) -> int:
        """Times the disk was found ahead of the events read (a directory renamed again
        before its first rename was read) and the watches were placed again from the disk."""
        return self._translator.resynced

    @property
    def running(self) -> bool:
        thread = self._thread
        return thread is not None and thread.is_alive() and not self._stopping

    def start(self, known_dirs: Iterable[bytes] | None = None, *, walked: bool = False) -> None:
        """Place the watches and start reading.

        ``known_dirs`` None: every directory is watched (then listed) before this returns,
        or with ``walked`` only the root: the caller's walk places the others, parents first,
        through :meth:`watch_and_list` (a new workspace's baseline: the tree is listed once,
        its files read while the walk goes on, and whatever changes in a directory after its
        listing reaches its watch).
        Else they are the directories a previous run captured, watched without listing any
        (at start-up, listing tens of thousands of unchanged directories dominates), by the
        reader thread before it starts reading, in sorted order: :attr:`placement` tells how
        far it got, and the reconcile scan waits until all were
        (:mod:`snapd.capture.placement`). Directories that appeared since are for the caller
        to find (its reconcile scan) and hand to :meth:`watch_new`.
        """
        if self._thread is not None:
            raise RuntimeError("watcher already started")
        if self._stop_requested:
            raise self._stopped_before_start()
        if not os.path.isdir(self._root_b):
            raise NotFound(f"workspace root {self.root} does not exist or is not a directory")
        with self._lock:
            self._watches.open(whole_tree=known_dirs is None and not walked)
        if known_dirs is not None:
            self.placement = Placement(sorted(known_dirs))
        with self._pipe_lock:  # a stop() from now on either finds the thread or was first
            if self._stop_requested:
                with self._lock:
                    self._watches.close()
                raise self._stopped_before_start()
            self._kill_r, self._kill_w = os.pipe2(os.O_CLOEXEC)
            self._thread = threading.Thread(target=self._run, name=f"snapd-watch:{self.root}", daemon=True)
            self._thread.start()

    def _stopped_before_start(self) -> WorkspaceRefused:
        return WorkspaceRefused(f"watching {self.root} was stopped before it began")

    def stop(self) -> None:
        """Stop reading and drop every watch; waiting barriers return False. Idempotent;
        may be called from the callback. Before :meth:`start` (a workspace stopped while it
        loads its stat cache), start refuses from then on: nothing is left watching."""
        with self._pipe_lock:
            if self._stop_requested:
                return
            self._stop_requested = True
            self._stopping = True
            thread = self._thread
            if thread is None:
                return
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

    def watch_and_list(self, rel: bytes) -> Listing | None:
        """Watch directory ``rel``, whose parent a walk watched and listed through here
        already (:meth:`start` with ``walked``), then list it: its entries, or None if it is
        not to be watched, its watch failed, it could not be listed or the watcher stopped
        (the walk lists it itself then, and reports why it cannot)."""
        with self._lock:
            if not self.running:
                return None
            return self._watches.watch_and_list(rel)

    def watch_new(self, dirs: Iterable[bytes]) -> list[WatchEvent]:
        """Watch directories found after :meth:`start` (and everything below them); returns a
        ``created`` event for every entry found in them once watched, so nothing created
        between their creation and their watch is missed."""
        found: Listing = []
        self.placement.wait_all()  # a new directory's parent may be a known one
        with self._lock:
            if self.running:
                self._watches.watch_found(dirs, found)
        return created(found)

    def rescan_watches(self, should_watch_dir: Callable[[bytes], bool] | None = None) -> None:
        """Re-apply ``should_watch_dir`` (a new one if given, e.g. after the ignore rules
        changed) to the whole tree: add missing watches, drop watches of directories that
        should no longer be watched. Events are not synthesised: the caller rescans."""
        self.placement.wait_all()
        with self._lock:
            if should_watch_dir is not None:
                self._watches.should_watch_dir = should_watch_dir
            if self.running:
                self._watches.resync()

    # -- reading --------------------------------------------------------------------------

    def _place(self) -> None:
        """Watch the known directories, a chunk at a time under the lock (``status`` asks for
        the table meanwhile), telling :attr:`placement` after each chunk."""
        placement = self.placement
        dirs = placement.dirs
        for start in range(0, len(dirs), _CHUNK):
            if self._stopping:
                return
            with self._lock:
                self._watches.place(dirs[start : start + _CHUNK])
            placement.advance(min(start + _CHUNK, len(dirs)))  # lets go of the list once all are

    def _run(self) -> None:
        fd = self._watches.fd
        poller = select.poll()
        poller.register(fd, select.POLLIN)
        poller.register(self._kill_r, select.POLLIN)
        try:
            self._place()
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
                    self._translator.handle(data)
                    if self._watches.behind and not self._moves.unpaired and not _readable(fd):
                        self._translator.catch_up()  # every record queued is read
                        self._translator.handle(b"")  # delivers it
        except Exception:
            log.exception("watcher.reader_crashed", workspace=str(self.root))
        finally:
            self._stopping = True
            if not self.placement.complete:
                self.placement.fail("the watcher stopped")
            with self._lock:
                self._watches.close()  # drops every watch
            self._cookies.release_all()
            self._moves.release_all()


def _readable(fd: int) -> bool:
    """Whether ``fd`` has something to read right now."""
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    return bool(poller.poll(0))
