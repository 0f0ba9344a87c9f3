"""The instance lock: one daemon per state directory, held for the daemon's whole life.

Needed because binding an ipc:// endpoint silently steals it from a daemon already listening
there; the lock is taken before the socket is bound. The file keeps the holder's pid, so a
second start names the daemon in its way.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

from snapd.config import ensure_private_dir
from snapd.errors import AlreadyRunning


class InstanceLock:
    """An exclusive ``flock`` held for the daemon's lifetime. Needed because binding an ipc://
    endpoint silently steals it from a daemon already listening there."""

    def __init__(self, fd: int, path: Path) -> None:
        self.fd, self.path = fd, path

    def release(self) -> None:
        # The file stays: unlinking a lock file lets two processes lock two different inodes.
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


def acquire_instance_lock(state_dir: Path) -> InstanceLock:
    """Take the per-state-directory lock or raise ``AlreadyRunning`` naming the holder."""
    ensure_private_dir(state_dir)
    path = state_dir / "snapd.lock"
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "unknown"
        os.close(fd)
        raise AlreadyRunning(
            f"another snapd (pid {holder}) is already running for {state_dir}; "
            "stop it with `snapd stop` first", pid=holder) from None
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    return InstanceLock(fd, path)
