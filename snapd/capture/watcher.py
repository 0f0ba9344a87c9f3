"""Change notification for one workspace root, as plain values.

The only module that imports watchdog. It uses watchdog's ctypes binding of Linux inotify
(``watchdog.observers.inotify_c``: ``inotify_init``, ``inotify_add_watch``,
``inotify_rm_watch``, ``InotifyConstants``; pinned by ``watchdog>=6.0,<6.1``) and runs its own
reader thread instead of watchdog's Observer -> InotifyEmitter -> InotifyBuffer -> Inotify
stack, because each of those layers has a behaviour snapd cannot live with (watchdog 6.0.0):

* ``WATCHDOG_ALL_EVENTS`` includes IN_OPEN and IN_CLOSE_NOWRITE, so the daemon's own reads of
  changed files would echo back as events. Our mask has no open/access/close-nowrite bits:
  reading a file produces nothing at all.
* ``Inotify.read_events`` drops IN_Q_OVERFLOW silently (its ``wd == -1`` record is skipped).
  We turn it into an ``overflow`` event, after re-synchronising the watches, so the daemon
  rescans.
* ``Inotify._add_dir_watch`` and the ``_recursive_simulate`` of new directories watch every
  directory, ``.git`` and ``node_modules`` included, and swallow failures below the root. We
  ask ``should_watch_dir`` before every watch and count watches and failures.
* ``InotifyBuffer`` holds every unpaired IN_MOVED_FROM for 0.5 s in a ``DelayedQueue`` whose
  ``get()`` blocks the head of the queue, so one file moved out of the tree delays every
  later event, a barrier included. We pair moves ourselves: the kernel queues the MOVED_TO of
  a rename right after its MOVED_FROM, so an unpaired MOVED_FROM is resolved as a deletion
  when a barrier cookie (or overflow) is read after it, or after a short grace period.
* A directory moved out of the tree keeps its watches in watchdog and keeps reporting changes
  under its old path; we remove them.

Watches of a directory whose IN_MOVED_FROM is read are *detached* at once: taken off the path
tables and held by the pending move. Its IN_MOVED_TO re-attaches them under the new name; a
move resolved as leaving the tree removes only those still detached. So whatever arrives under
the old name in between — another directory renamed there (``mv out /x && mv out.new out``), or
the same directory moved back (the kernel hands back the same watch descriptors) — keeps its
watches: a watch belongs to the directory it was placed on, never to a name.

One inotify instance and one reader thread per workspace: the barrier cookie is created in the
root and comes back through the same queue as every other event of that workspace (so a barrier
proves every earlier event was read), and an overflow in one workspace does not force rescans of the others.

Callbacks run on the reader thread and must be quick (hand the batch to a queue): while the
callback runs nothing is read, and the kernel queue can overflow.
"""

from __future__ import annotations

import ctypes
import errno
import fcntl
import os
import select
import struct
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Final, Literal

import structlog
from watchdog.observers.inotify_c import (
    InotifyConstants,
    inotify_add_watch,
    inotify_init,
    inotify_rm_watch,
)

from snapd.errors import NotFound, WorkspaceRefused
from snapd.paths import at_or_below, cookie_name, is_cookie_name, join

log = structlog.get_logger(__name__)

EventKind = Literal["created", "modified", "deleted", "moved", "overflow"]

_C = InotifyConstants
WATCH_MASK: Final[int] = (
    _C.IN_MODIFY
    | _C.IN_ATTRIB  # chmod: modes are captured
    | _C.IN_CLOSE_WRITE
    | _C.IN_MOVED_FROM
    | _C.IN_MOVED_TO
    | _C.IN_CREATE
    | _C.IN_DELETE
    | _C.IN_DELETE_SELF
    | _C.IN_MOVE_SELF
    | _C.IN_ONLYDIR  # a directory replaced by a file between listing and watching
    | _C.IN_DONT_FOLLOW  # ... or by a symlink: never watch outside the root
    | _C.IN_EXCL_UNLINK  # no events from files already unlinked but still open
)
_CHANGE_MASK: Final[int] = _C.IN_MODIFY | _C.IN_ATTRIB | _C.IN_CLOSE_WRITE

# How long an unpaired IN_MOVED_FROM waits for its IN_MOVED_TO when no cookie comes along.
# Both are queued by the same rename(2) before it returns, so this only covers a read(2) that
# happened to split them.
MOVE_GRACE: Final = 0.05
_READ_SIZE: Final = 64 * 1024
_EVENT_HEADER: Final = struct.Struct("iIII")
# Watch failures that are not races with the tree changing under us.
_RACES: Final = frozenset({errno.ENOENT, errno.ENOTDIR, errno.ELOOP})
# ... that are the kernel's limits (fs.inotify.max_user_watches, memory), not the directory's.
LIMITS: Final = frozenset({errno.ENOSPC, errno.ENOMEM})

@dataclass(frozen=True, slots=True)
class WatchEvent:
    """One change below the root, ``path`` relative to it (``b""`` is the root itself).

    * ``created``/``modified``/``deleted``: ``path`` (``modified`` includes mode changes).
      A created directory is followed by ``created`` for every entry found in it when its
      watch was placed (files made before the watch existed are not lost).
    * ``moved``: ``path`` -> ``dest`` inside the root. For a directory, nothing is reported
      for its contents: everything below ``path`` now lies below ``dest``.
    * A move out of the tree is ``deleted``; a move into it is ``created``.
    * ``overflow``: events were lost; rescan everything (watches are already re-synced).
    * ``deleted`` of ``b""``: the root itself was deleted, moved or unmounted.
    """

    kind: EventKind
    path: bytes
    dest: bytes | None = None
    is_dir: bool = False


OVERFLOW: Final = WatchEvent("overflow", b"", None, True)
OnEvents = Callable[[list[WatchEvent]], None]


def remove_stale_cookies(root: Path) -> int:
    """Delete cookies left in ``root`` by a crashed daemon; returns how many."""
    removed = 0
    try:
        entries = list(os.scandir(os.fsencode(root)))
    except OSError:
        return 0
    for entry in entries:
        if is_cookie_name(entry.name) and entry.is_file(follow_symlinks=False):
            try:
                os.unlink(entry.path)
                removed += 1
            except FileNotFoundError:
                pass
    return removed


class _Pending:
    """A MOVED_FROM waiting for its MOVED_TO; holds its place in the event order."""

    __slots__ = ("path", "is_dir", "cookie", "since", "event")

    def __init__(self, path: bytes, is_dir: bool, cookie: int) -> None:
        self.path = path
        self.is_dir = is_dir
        self.cookie = cookie
        self.since = time.monotonic()
        self.event: WatchEvent | None = None


class _Waiter:
    __slots__ = ("done", "ok")

    def __init__(self) -> None:
        self.done = threading.Event()
        self.ok = False


class Watcher:
    """inotify watches on one workspace root, delivering :class:`WatchEvent` batches.

    ``should_watch_dir(rel_dir)`` is asked before a directory below the root gets a watch
    (the root is always watched); pass ``IgnoreRules.dir_may_contain_captured``. Entries of
    watched directories are reported whatever their name, except barrier cookies, which are
    never delivered. ``max_watches`` is snapd's ``watch_limit`` setting: past it a directory
    fails as at the kernel's limit (``ENOSPC``, counted in ``limit_failures``); the caller tells
    the two causes apart by ``watch_count`` reaching it.
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
        self._should_watch_dir = should_watch_dir
        self._max_watches = max_watches
        self._lock = threading.RLock()  # watch tables; taken by the reader and rescan_watches
        self._fd = -1
        self._kill_r = self._kill_w = -1
        self._thread: threading.Thread | None = None
        self._stopping = False
        self._stop_requested = False
        self._pipe_lock = threading.Lock()  # the kill pipe is closed by stop() only
        self._wd_path: dict[int, bytes] = {}
        self._path_wd: dict[bytes, int] = {}
        # Watches of directories moved away whose move is not resolved yet:
        # wd -> (the move's cookie, path relative to the moved directory, b"" for itself).
        self._detached: dict[int, tuple[int, bytes]] = {}
        self._root_wd = -1
        self._pending: dict[int, _Pending] = {}
        self._carry: list[WatchEvent | _Pending] = []  # undelivered, blocked by a pending move
        self._carry_waiters: list[tuple[int, _Waiter]] = []
        self._cookies: dict[bytes, _Waiter] = {}
        self._cookie_lock = threading.Lock()
        self._cookie_n = 0
        self._pid = os.getpid()
        self._failures = 0
        self._limit_failures = 0
        self._failed_dirs: deque[tuple[bytes, int]] = deque(maxlen=32)
        # Directories left unwatched for a reason of their own (EACCES...), until watched again.
        self._refused: dict[bytes, int] = {}
        self._overflowed = 0
        self._delivery_failed = False

    # -- public ---------------------------------------------------------------------------

    @property
    def watch_count(self) -> int:
        """inotify watches currently registered (root included)."""
        return len(self._path_wd)

    @property
    def watch_failures(self) -> int:
        """Directories that should have been watched but could not be (ENOSPC, EACCES, the
        ``max_watches`` seam...), counted since start (a refused directory once, however often
        it is tried again); changes in them go unseen."""
        return self._failures

    @property
    def limit_failures(self) -> int:
        """The failures due to the kernel's limits (``LIMITS``, the ``max_watches`` seam):
        where they lie is anyone's guess, so only a scan at every mark makes up for them."""
        return self._limit_failures

    @property
    def failed_dirs(self) -> list[tuple[bytes, int]]:
        """Recent (rel_dir, errno) watch failures, for status reports."""
        return list(self._failed_dirs)

    def refused_dirs(self) -> dict[bytes, int]:
        """Directories unwatched now for a reason of their own (``EACCES`` for one we may not
        read...) -> errno. A directory leaves this table when a watch on it is placed again —
        a change of its mode is tried at once — or when it is deleted or moved."""
        with self._lock:
            return dict(self._refused)

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
        fd = inotify_init()
        if fd < 0:
            err = ctypes.get_errno()
            raise WorkspaceRefused(
                f"cannot watch {self.root}: {os.strerror(err)}"
                + (" (raise fs.inotify.max_user_instances)" if err == errno.EMFILE else ""),
                errno=err,
            )
        fcntl.fcntl(fd, fcntl.F_SETFD, fcntl.FD_CLOEXEC)  # git subprocesses must not inherit it
        self._fd = fd
        try:
            with self._lock:
                self._root_wd = self._add_watch(b"", root=True)
                if known_dirs is None:
                    self._add_tree(b"", None)
                else:
                    for rel in sorted(known_dirs, key=lambda p: p.count(b"/")):
                        parent = rel.rpartition(b"/")[0]
                        if (parent == b"" or parent in self._path_wd) and self._should_watch(rel):
                            self._add_watch(rel)
        except BaseException:
            os.close(fd)
            self._fd = -1
            self._path_wd.clear()
            self._wd_path.clear()
            raise
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
        for waiter in list(self._cookies.values()):
            waiter.done.set()

    def barrier(self, timeout: float) -> bool:
        """Return True once every event queued before this call has been delivered.

        Creates ``.snapd-<pid>-<n>~`` in the root, deletes it, and waits for its event to come
        back through this watcher's inotify queue. False on timeout, when the cookie cannot be
        created (read-only root...), when a delivery failed, or when the watcher is stopped:
        the caller must then rescan. Safe to call from many threads at once.
        """
        if not self.running:
            return False
        waiter = _Waiter()
        for _ in range(3):
            with self._cookie_lock:
                self._cookie_n += 1
                name = cookie_name(self._pid, self._cookie_n)
                self._cookies[name] = waiter
            path = os.path.join(self._root_b, name)
            try:
                fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
            except FileExistsError:
                del self._cookies[name]
                continue
            except OSError as exc:
                del self._cookies[name]
                log.warning("watcher.barrier_failed", workspace=str(self.root), error=str(exc))
                return False
            try:
                os.close(fd)
                os.unlink(path)
            except FileNotFoundError:  # a concurrent remove_stale_cookies; the create counts
                pass
            try:
                waiter.done.wait(timeout)
                return waiter.ok and waiter.done.is_set()
            finally:
                self._cookies.pop(name, None)
        return False

    def watch_new(self, dirs: Iterable[bytes]) -> list[WatchEvent]:
        """Watch directories found after :meth:`start` (and everything below them); returns a
        ``created`` event for every entry found in them once watched, so nothing created
        between their creation and their watch is missed."""
        out: list[WatchEvent | _Pending] = []
        with self._lock:
            if not self.running:
                return []
            for rel in sorted(dirs, key=lambda p: p.count(b"/")):
                parent = rel.rpartition(b"/")[0]
                if rel in self._path_wd or (parent and parent not in self._path_wd):
                    continue
                if os.path.isdir(os.path.join(self._root_b, rel)) and not os.path.islink(
                    os.path.join(self._root_b, rel)
                ):
                    self._add_tree(rel, out)
        return [e for e in out if isinstance(e, WatchEvent)]

    def rescan_watches(self, should_watch_dir: Callable[[bytes], bool] | None = None) -> None:
        """Re-apply ``should_watch_dir`` (a new one if given, e.g. after the ignore rules
        changed) to the whole tree: add missing watches, drop watches of directories that
        should no longer be watched. Events are not synthesised: the caller rescans."""
        with self._lock:
            if should_watch_dir is not None:
                self._should_watch_dir = should_watch_dir
            if self.running:
                self._resync()

    # -- watches --------------------------------------------------------------------------

    def _should_watch(self, rel: bytes) -> bool:
        if rel == b"":
            return True
        try:
            return bool(self._should_watch_dir(rel))
        except Exception:  # a bug in the predicate must not cost us changes
            log.exception("watcher.predicate_failed", path=rel.decode("utf-8", "backslashreplace"))
            return True

    def _add_watch(self, rel: bytes, *, root: bool = False) -> int:
        """Watch directory ``rel``; returns its wd, or -1 after counting a failure."""
        full = os.path.join(self._root_b, rel) if rel else self._root_b
        if (
            self._max_watches is not None
            and rel not in self._path_wd
            and len(self._path_wd) >= self._max_watches
        ):
            wd, err = -1, errno.ENOSPC
        else:
            wd = inotify_add_watch(self._fd, full, WATCH_MASK)
            err = ctypes.get_errno() if wd < 0 else 0
        if wd < 0:
            if root:
                raise WorkspaceRefused(
                    f"cannot watch {self.root}: {os.strerror(err)}"
                    + (" (raise fs.inotify.max_user_watches)" if err == errno.ENOSPC else ""),
                    errno=err,
                )
            if err not in _RACES and self._refused.get(rel) != err:  # each refusal counts once
                self._failures += 1
                if err in LIMITS:
                    self._limit_failures += 1
                else:
                    self._refused[rel] = err
                self._failed_dirs.append((rel, err))
                report = log.warning if self._failures <= 5 else log.debug
                report(
                    "watcher.add_failed", path=rel.decode("utf-8", "backslashreplace"), error=os.strerror(err)
                )
            return -1
        old = self._wd_path.get(wd)
        if old is not None and old != rel:  # same directory under a stale name
            self._path_wd.pop(old, None)
        self._wd_path[wd] = rel
        self._path_wd[rel] = wd
        self._refused.pop(rel, None)
        # A detached directory back in the tree (the kernel gives an inode its old wd): it is
        # watched here now, whatever becomes of the move that took it away.
        self._detached.pop(wd, None)
        return wd

    def _drop_watches(self, top: bytes) -> None:
        """Remove the watches of ``top`` and everything below it."""
        for wd, path in list(self._wd_path.items()):
            if not at_or_below(path, top):
                continue
            del self._wd_path[wd]
            if self._path_wd.get(path) == wd:
                del self._path_wd[path]
            inotify_rm_watch(self._fd, wd)  # EINVAL if the kernel already dropped it: fine

    def _forget_refused(self, top: bytes) -> None:
        """``top`` was deleted or moved: its refusals went with it (a move's arrival is tried
        again under its new name)."""
        for rel in [r for r in self._refused if at_or_below(r, top)]:
            del self._refused[rel]

    def _detach(self, top: bytes, cookie: int) -> None:
        """Take the watches of directory ``top`` (moved away by the rename ``cookie``) off the
        path tables; :meth:`_moved_dir` or :meth:`_release` decides their fate."""
        for path in [p for p in self._path_wd if at_or_below(p, top)]:
            wd = self._path_wd.pop(path)
            if self._wd_path.get(wd) == path:
                del self._wd_path[wd]
            self._detached[wd] = (cookie, path[len(top) :])

    def _release(self, cookie: int) -> None:
        """The rename ``cookie`` left the tree: remove the watches it took that are still
        detached (none came back into the tree)."""
        for wd, (c, _) in list(self._detached.items()):
            if c == cookie:
                del self._detached[wd]
                inotify_rm_watch(self._fd, wd)  # EINVAL if the kernel already dropped it: fine

    def _add_tree(self, top: bytes, out: list[WatchEvent | _Pending] | None) -> set[bytes]:
        """Watch ``top`` and the directories below it that ``should_watch_dir`` allows,
        watch first and list second, so nothing created in between is missed. With ``out``,
        report every entry found as ``created``. Returns the directories watched."""
        watched: set[bytes] = set()
        stack = [top]
        while stack:
            rel = stack.pop()
            if rel != b"" and not self._should_watch(rel):
                continue
            if self._add_watch(rel) < 0:
                continue
            watched.add(rel)
            try:
                with os.scandir(os.path.join(self._root_b, rel) if rel else self._root_b) as it:
                    entries = [(e.name, e.is_dir(follow_symlinks=False)) for e in it]
            except OSError:
                continue
            for name, is_dir in entries:
                if rel == b"" and is_cookie_name(name):
                    continue
                child = join(rel, name)
                if out is not None:
                    out.append(WatchEvent("created", child, None, is_dir))
                if is_dir:
                    stack.append(child)
        return watched

    def _resync(self) -> None:
        watched = self._add_tree(b"", None)
        for path in [p for p in self._path_wd if p not in watched]:
            wd = self._path_wd.pop(path)
            self._wd_path.pop(wd, None)
            inotify_rm_watch(self._fd, wd)

    def _moved_dir(self, cookie: int, dest: bytes) -> None:
        """Re-attach the watches detached by the rename ``cookie`` under ``dest``, then
        re-apply the predicate at the new place (it may now be ignored, or no longer)."""
        for wd, (c, suffix) in list(self._detached.items()):
            if c == cookie:
                del self._detached[wd]
                self._path_wd[dest + suffix] = wd
                self._wd_path[wd] = dest + suffix
        for path in sorted(p for p in self._path_wd if at_or_below(p, dest)):
            if path in self._path_wd and not self._should_watch(path):
                self._drop_watches(path)
        self._add_tree(dest, None)

    # -- reading --------------------------------------------------------------------------

    def _run(self) -> None:
        poller = select.poll()
        poller.register(self._fd, select.POLLIN)
        poller.register(self._kill_r, select.POLLIN)
        try:
            while not self._stopping:
                timeout_ms = None
                if self._pending:
                    oldest = min(p.since for p in self._pending.values())
                    timeout_ms = max(0, int((oldest + MOVE_GRACE - time.monotonic()) * 1000) + 1)
                ready = {fd for fd, _ in poller.poll(timeout_ms)}
                if self._kill_r in ready or self._stopping:
                    break
                if self._fd in ready:
                    try:
                        data = os.read(self._fd, _READ_SIZE)
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
                self._path_wd.clear()
                self._wd_path.clear()
                self._detached.clear()
                self._refused.clear()
                os.close(self._fd)  # drops every watch
                self._fd = -1
            for waiter in [*self._cookies.values(), *(w for _, w in self._carry_waiters)]:
                waiter.done.set()

    def _handle(self, data: bytes) -> None:
        """Turn one read(2) worth of records into events and deliver what is complete."""
        out = self._carry
        waiters = self._carry_waiters
        offset = 0
        while offset + _EVENT_HEADER.size <= len(data):
            wd, mask, cookie, length = _EVENT_HEADER.unpack_from(data, offset)
            start = offset + _EVENT_HEADER.size
            name = data[start : start + length].rstrip(b"\0")
            offset = start + length
            if self._record(wd, mask, cookie, name, out):
                # A barrier cookie: every rename completed before it was created has both
                # halves queued before it, so whatever is still unpaired moved out.
                self._resolve_pending(out, force=True)
                # Its close and delete records follow: release each barrier once only.
                waiter = self._cookies.pop(name, None)
                if waiter is not None:
                    waiters.append((len(out), waiter))
        self._resolve_pending(out, force=False)
        self._deliver(out, waiters)

    def _record(self, wd: int, mask: int, cookie: int, name: bytes, out: list[WatchEvent | _Pending]) -> bool:
        """Translate one inotify record; True iff it is one of our barrier cookies."""
        if mask & _C.IN_Q_OVERFLOW:
            self._overflowed += 1
            log.warning("watcher.overflow", workspace=str(self.root))
            self._resolve_pending(out, force=True)
            self._resync()
            out.append(OVERFLOW)
            return False
        if mask & _C.IN_IGNORED:  # the kernel dropped this watch (directory deleted...)
            self._detached.pop(wd, None)
            gone = self._wd_path.pop(wd, None)
            if gone is not None and self._path_wd.get(gone) == wd:
                del self._path_wd[gone]
            return False
        parent = self._wd_path.get(wd)
        if parent is None:
            return False  # a watch we removed, or of a directory moved away (detached)
        is_dir = bool(mask & _C.IN_ISDIR)
        if not name:  # about the watched directory itself
            if wd == self._root_wd:
                if mask & (_C.IN_DELETE_SELF | _C.IN_MOVE_SELF | _C.IN_UNMOUNT):
                    out.append(WatchEvent("deleted", b"", None, True))
                elif mask & _C.IN_ATTRIB:
                    out.append(WatchEvent("modified", b"", None, True))
            elif mask & _C.IN_UNMOUNT:
                self._resync()
                out.append(OVERFLOW)
            return False  # other directories are reported by their parent's watch
        if wd == self._root_wd and is_cookie_name(name):
            return True
        rel = join(parent, name)
        if mask & _C.IN_MOVED_FROM:
            pending = _Pending(rel, is_dir, cookie)
            self._pending[cookie] = pending
            out.append(pending)
            if is_dir:
                self._detach(rel, cookie)
                self._forget_refused(rel)
        elif mask & _C.IN_MOVED_TO:
            source = self._pending.pop(cookie, None)
            if source is not None:
                source.event = WatchEvent("moved", source.path, rel, is_dir)
                if is_dir:
                    self._moved_dir(cookie, rel)
            else:
                out.append(WatchEvent("created", rel, None, is_dir))
                if is_dir:
                    self._add_tree(rel, out)
        elif mask & _C.IN_CREATE:
            out.append(WatchEvent("created", rel, None, is_dir))
            if is_dir:
                self._add_tree(rel, out)
        elif mask & _C.IN_DELETE:
            out.append(WatchEvent("deleted", rel, None, is_dir))
            if is_dir:
                self._forget_refused(rel)
        elif mask & _CHANGE_MASK:
            out.append(WatchEvent("modified", rel, None, is_dir))
            if is_dir and mask & _C.IN_ATTRIB and rel in self._refused:
                # Its mode changed: maybe we may watch it now. Then whatever it holds is
                # reported as created, since none of it was seen while it was refused.
                self._add_tree(rel, out)
        return False

    def _resolve_pending(self, out: list[WatchEvent | _Pending], *, force: bool) -> None:
        """Unpaired MOVED_FROMs (all, or those past the grace period) become deletions."""
        if not self._pending:
            return
        now = time.monotonic()
        for cookie, pending in list(self._pending.items()):
            if force or now - pending.since >= MOVE_GRACE:
                del self._pending[cookie]
                pending.event = WatchEvent("deleted", pending.path, None, pending.is_dir)
                if pending.is_dir:
                    self._release(cookie)

    def _deliver(self, out: list[WatchEvent | _Pending], waiters: list[tuple[int, _Waiter]]) -> None:
        """Hand the complete prefix of ``out`` to the callback, then release the barriers
        whose cookie lies in it. A still-unpaired move keeps the rest back, in order."""
        cut = len(out)
        for i, item in enumerate(out):
            if isinstance(item, _Pending) and item.event is None:
                cut = i
                break
        batch: list[WatchEvent] = []
        for item in out[:cut]:
            event = item.event if isinstance(item, _Pending) else item
            assert event is not None
            if not batch or batch[-1] != event:  # the kernel coalesces only unread repeats
                batch.append(event)
        if batch:
            try:
                self._on_events(batch)
            except Exception:
                # Those events are lost to the daemon: the next barrier released says so.
                self._delivery_failed = True
                log.exception("watcher.callback_failed", workspace=str(self.root))
        released = [w for pos, w in waiters if pos <= cut]
        ok = not self._delivery_failed
        if released:
            self._delivery_failed = False
        self._carry = out[cut:]
        self._carry_waiters = [(pos - cut, w) for pos, w in waiters if pos > cut]
        for waiter in released:
            if not waiter.done.is_set():
                waiter.ok = ok
                waiter.done.set()
