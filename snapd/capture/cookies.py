"""Barrier cookies: proof that every event queued before a moment has been delivered.

A barrier creates ``.snapd-<pid>-<n>~`` in the root, deletes it, and waits until the
watcher's reader thread reads the cookie's own event from the same inotify queue: every change
completed before the cookie was created was queued before it. The reader releases a waiter
only once the events before its cookie are handed to the workspace (see
:mod:`snapd.capture.moves`). Editors and dev servers ignore the cookie: its name has the shape
of a backup file (:func:`snapd.paths.cookie_name`).
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

import structlog

from snapd.paths import cookie_name, is_cookie_name

log = structlog.get_logger(__name__)


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


class Waiter:
    """One barrier waiting for its cookie; ``ok`` is False when events were lost before it."""

    __slots__ = ("done", "ok")

    def __init__(self) -> None:
        self.done = threading.Event()
        self.ok = False


class Cookies:
    """The cookies of one root that are waited for. Safe to use from many threads at once."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._root_b = os.fsencode(root)
        self._waiting: dict[bytes, Waiter] = {}
        self._lock = threading.Lock()
        self._n = 0
        self._pid = os.getpid()

    def barrier(self, timeout: float) -> bool:
        """Create and delete a cookie, then wait for its event (:meth:`claim` by the reader).

        False on timeout, when the cookie cannot be created (read-only root...), or when the
        waiter was released without proof (a delivery failed, the watcher stopped).
        """
        waiter = Waiter()
        for _ in range(3):
            with self._lock:
                self._n += 1
                name = cookie_name(self._pid, self._n)
                self._waiting[name] = waiter
            path = os.path.join(self._root_b, name)
            try:
                fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
            except FileExistsError:
                del self._waiting[name]
                continue
            except OSError as exc:
                del self._waiting[name]
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
                self._waiting.pop(name, None)
        return False

    def claim(self, name: bytes) -> Waiter | None:
        """The reader read cookie ``name``'s event: its waiter, once only (its close and delete
        records follow), or None for a cookie nobody waits for any more."""
        return self._waiting.pop(name, None)

    def release_all(self) -> None:
        """The watcher stops: every waiting barrier returns False."""
        for waiter in list(self._waiting.values()):
            waiter.done.set()
