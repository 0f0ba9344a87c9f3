"""Linux inotify through watchdog's ctypes binding: the only module that imports watchdog.

It uses ``watchdog.observers.inotify_c`` (``inotify_init``, ``inotify_add_watch``,
``inotify_rm_watch``, ``InotifyConstants``; pinned by ``watchdog>=6.0,<6.1``) and nothing
above it. The watcher runs its own reader thread instead of watchdog's Observer ->
InotifyEmitter -> InotifyBuffer -> Inotify stack, because each of those layers has a behaviour
snapd cannot live with (watchdog 6.0.0):

* ``WATCHDOG_ALL_EVENTS`` includes IN_OPEN and IN_CLOSE_NOWRITE, so the daemon's own reads of
  changed files would echo back as events. :data:`WATCH_MASK` has no open/access/close-nowrite
  bits: reading a file produces nothing at all.
* ``Inotify.read_events`` drops IN_Q_OVERFLOW silently (its ``wd == -1`` record is skipped).
  The watcher turns it into an ``overflow`` event, after re-synchronising the watches, so the
  daemon rescans.
* ``Inotify._add_dir_watch`` and the ``_recursive_simulate`` of new directories watch every
  directory, ``.git`` and ``node_modules`` included, and swallow failures below the root. The
  watch table asks ``should_watch_dir`` before every watch and counts watches and failures.
* ``InotifyBuffer`` delays every unpaired IN_MOVED_FROM (see :mod:`snapd.capture.moves`).
* A directory moved out of the tree keeps its watches in watchdog and keeps reporting changes
  under its old path; the watch table removes them (:mod:`snapd.capture.watches`).
"""

from __future__ import annotations

import ctypes
import errno
import fcntl
import os
import struct
from collections.abc import Iterator
from pathlib import Path
from typing import Final

from watchdog.observers.inotify_c import (
    InotifyConstants,
    inotify_add_watch,
    inotify_init,
    inotify_rm_watch,
)

from snapd.errors import WorkspaceRefused

#: The ``IN_*`` bits, by name.
Mask = InotifyConstants

WATCH_MASK: Final[int] = (
    Mask.IN_MODIFY
    | Mask.IN_ATTRIB  # chmod: modes are captured
    | Mask.IN_CLOSE_WRITE
    | Mask.IN_MOVED_FROM
    | Mask.IN_MOVED_TO
    | Mask.IN_CREATE
    | Mask.IN_DELETE
    | Mask.IN_DELETE_SELF
    | Mask.IN_MOVE_SELF
    | Mask.IN_ONLYDIR  # a directory replaced by a file between listing and watching
    | Mask.IN_DONT_FOLLOW  # ... or by a symlink: never watch outside the root
    | Mask.IN_EXCL_UNLINK  # no events from files already unlinked but still open
)
CHANGE_MASK: Final[int] = Mask.IN_MODIFY | Mask.IN_ATTRIB | Mask.IN_CLOSE_WRITE

READ_SIZE: Final = 64 * 1024
_EVENT_HEADER: Final = struct.Struct("iIII")


def open_instance(root: Path) -> int:
    """A new inotify instance (close-on-exec: git subprocesses must not inherit it)."""
    fd = int(inotify_init())
    if fd < 0:
        err = ctypes.get_errno()
        raise WorkspaceRefused(
            f"cannot watch {root}: {os.strerror(err)}"
            + (" (raise fs.inotify.max_user_instances)" if err == errno.EMFILE else ""),
            errno=err,
        )
    fcntl.fcntl(fd, fcntl.F_SETFD, fcntl.FD_CLOEXEC)
    return fd


def add_watch(fd: int, path: bytes) -> tuple[int, int]:
    """Watch directory ``path``: (its watch descriptor, 0), or (-1, errno)."""
    wd = int(inotify_add_watch(fd, path, WATCH_MASK))
    return (wd, 0) if wd >= 0 else (-1, ctypes.get_errno())


def rm_watch(fd: int, wd: int) -> None:
    """Remove a watch; EINVAL when the kernel already dropped it is fine, and ignored."""
    inotify_rm_watch(fd, wd)


def records(data: bytes) -> Iterator[tuple[int, int, int, bytes]]:
    """The (wd, mask, cookie, name) records of one read(2) of an inotify descriptor."""
    offset = 0
    while offset + _EVENT_HEADER.size <= len(data):
        wd, mask, cookie, length = _EVENT_HEADER.unpack_from(data, offset)
        start = offset + _EVENT_HEADER.size
        yield wd, mask, cookie, data[start : start + length].rstrip(b"\0")
        offset = start + length
