"""The daemon's locks, each an exclusive ``flock`` held for the daemon's whole life.

- The instance lock (``state_dir/snapd.lock``): one daemon per store. Needed because binding
  an ipc:// endpoint silently steals it from a daemon already listening there; it is taken
  before anything else. The file stays after a stop (unlinking it would let two processes
  lock two different inodes).
- The socket guard (``sockets.lock`` in the sockets' directory): one daemon per socket path.
  Daemons of two stores can compute one path (one runtime directory, two data directories):
  their instance locks differ, and checking that nobody answers at the path, then binding, is
  a race two daemons started at once can both win — the second bind takes the path over from
  the first, which then serves nobody. The guard is taken before the check and held until the
  sockets are gone. A clean stop removes its file (so the directory can go too): a taker
  checks, once it holds the lock, that the path still names the file it locked, or tries again.

Each file keeps its holder's pid, so a refused start names the daemon in its way.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from pathlib import Path

from snapd.config import LOCK_FILE, ensure_private_dir
from snapd.errors import AlreadyRunning

GUARD_FILE = "sockets.lock"


class HeldLock:
    """One held lock; ``release`` lets it go (and removes the file and its directory when
    ``remove`` says so: the socket guard)."""

    def __init__(self, fd: int, path: Path, remove: bool = False) -> None:
        self.fd, self.path, self.remove = fd, path, remove

    def release(self) -> None:
        if self.fd < 0:
            return
        if self.remove:  # still held: a taker that opened this file finds it unlinked and retries
            with contextlib.suppress(OSError):
                self.path.unlink()
        os.close(self.fd)
        self.fd = -1
        if self.remove:
            with contextlib.suppress(OSError):
                self.path.parent.rmdir()  # only if empty: the sockets are gone by now


def _take(path: Path, refusal: str) -> int:
    """The locked descriptor of ``path`` (created), holding this pid; AlreadyRunning with
    ``refusal`` (``{pid}``: the holder's) when another process holds it."""
    while True:
        ensure_private_dir(path.parent)
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        except FileNotFoundError:  # its directory went with a guard released just now
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "unknown"
            os.close(fd)
            raise AlreadyRunning(refusal.format(pid=holder), pid=holder) from None
        try:
            same = os.path.samestat(os.fstat(fd), os.stat(path, follow_symlinks=False))
        except FileNotFoundError:
            same = False
        if same:
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
            return fd
        os.close(fd)  # we locked a file a releasing holder had unlinked: take the new one


def acquire_instance_lock(state_dir: Path) -> HeldLock:
    """Take the per-state-directory lock or raise ``AlreadyRunning`` naming the holder."""
    path = state_dir / LOCK_FILE
    refusal = (f"another snapd (pid {{pid}}) is already running for {state_dir}; "
               "stop it with `snapd stop` first")
    return HeldLock(_take(path, refusal), path)


def acquire_socket_guard(socket_dir: Path) -> HeldLock:
    """Take the guard of the sockets in ``socket_dir`` or raise ``AlreadyRunning``: a daemon of
    another store (its instance lock is another) binds there."""
    path = socket_dir / GUARD_FILE
    refusal = (f"another snapd is listening at {socket_dir} (pid {{pid}}): a daemon of another "
               "store that uses the same runtime directory. Stop it first, or give each store "
               "its own (SNAPD_HOME, or XDG_RUNTIME_DIR)")
    return HeldLock(_take(path, refusal), path, remove=True)
