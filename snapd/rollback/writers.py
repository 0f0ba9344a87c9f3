"""What the fill's writer threads do (:mod:`snapd.rollback.fill` hands them tasks): create,
write, give a mode to and (where the target's ``syncfs`` is not trusted) fsync files, and make
directories, each relative to a directory held open, never following a symlink. Each says of
every file or directory what failed, if anything, for the fill's thread to record."""

from __future__ import annotations

import contextlib
import os
import stat

from snapd.rollback.ops import MKDIR_MODE
from snapd.store import safeio

_FILE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
Failure = tuple[str, OSError] | None  # what a pool's task says of one file or directory


def write_file(dir_fd: int, name: bytes, data: bytes, mode: int, sync: bool, umask: int) -> Failure:
    """Create ``name`` in ``dir_fd`` (``O_EXCL``), write it, give it ``mode`` and, with
    ``sync``, fsync it (else the fill's final sync makes it durable with the rest): None when
    done; else the step that failed (``"create"``: nothing made; ``"write"``, ``"sync"``: the
    file removed) and its error. Run by the pool's threads.

    A mode the process's ``umask`` keeps whole and without set-user-ID, set-group-ID or sticky
    bits is asked of the create itself (the creating descriptor may write whatever the mode),
    and checked (``fstat``, which journals nothing): a default ACL, or a FUSE server's own
    mask, may have changed it, and then ``fchmod`` gives it. Any other mode is created 0600
    and given by ``fchmod`` after the bytes (a write clears set-user-ID)."""
    direct = mode & 0o7000 == 0 and mode & umask == 0
    try:
        fd = os.open(name, _FILE_FLAGS, mode if direct else safeio.FILE_MODE, dir_fd=dir_fd)
    except OSError as exc:
        return "create", exc
    step = "write"
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        if not direct or stat.S_IMODE(os.fstat(fd).st_mode) != mode:
            os.fchmod(fd, mode)
        if sync:
            step = "sync"
            safeio.fsync(fd)  # an error is final: the file is removed, never counted as written
    except OSError as exc:
        with contextlib.suppress(OSError):
            os.unlink(name, dir_fd=dir_fd)
        return step, exc
    finally:
        os.close(fd)
    return None




def write_files(files: list[tuple[int, bytes, bytes, int]], sync: bool, umask: int) -> list[Failure]:
    """:func:`write_file` of each (directory, name, content, mode), in order."""
    return [write_file(*f, sync, umask) for f in files]


def make_dirs(dir_fd: int, names: list[tuple[bytes, int]], umask: int) -> list[Failure]:
    """Make each directory (name, mode) in ``dir_fd``: ``mode`` is its final one where
    :func:`dir_mode` allows, else 0700 (chmodded too when the ``umask`` takes bits of it; the
    fill's end sets the rest): None for each made, else the step that failed and its error
    (``"mkdir"``: nothing made; ``"chmod"``: made, left as it is). Run by the pool's threads,
    and by the fill's for a directory's first."""
    out: list[Failure] = []
    for name, mode in names:
        try:
            os.mkdir(name, mode, dir_fd=dir_fd)
        except OSError as exc:
            out.append(("mkdir", exc))
            continue
        try:
            if mode & umask:
                safeio.chmod_at(dir_fd, name, mode)
        except OSError as exc:
            out.append(("chmod", exc))
            continue
        out.append(None)
    return out


def dir_mode(mode: int, umask: int) -> int:
    """The mode a directory whose final one is ``mode`` is made with: that one when it lets
    the owner write and search it (so it can be filled), gives no one else write, has no
    set-group-ID or sticky bit and the ``umask`` keeps it whole (a directory of most trees);
    else 0700 (``MKDIR_MODE``), given its mode once filled. What the ``mkdir`` really gave
    is checked by the fill (a set-group-ID parent, a default ACL, a FUSE server's mask may
    change it): one that is not the final mode gets it at the end."""
    if mode & 0o700 == 0o700 and mode & 0o7022 == 0 and mode & umask == 0:
        return mode
    return MKDIR_MODE
