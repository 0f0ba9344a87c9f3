"""What the fill's writer threads do (:mod:`snapd.rollback.fill` hands them tasks): create,
write, give a mode to and (where the target's ``syncfs`` is not trusted) fsync files, and make
directories, each relative to a directory held open, never following a symlink. Each says of
every file or directory what failed, if anything, for the fill's thread to record."""

from __future__ import annotations

import contextlib
import os

from snapd.rollback.ops import MKDIR_MODE
from snapd.store import safeio

_FILE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
Failure = tuple[str, OSError] | None  # what a pool's task says of one file or directory


def write_file(dir_fd: int, name: bytes, data: bytes, mode: int, sync: bool) -> Failure:
    """Create ``name`` in ``dir_fd`` (``O_EXCL``), write it, give it ``mode`` and, with
    ``sync``, fsync it (else the fill's final sync makes it durable with the rest): None when
    done; else the step that failed (``"create"``: nothing made; ``"write"``, ``"sync"``: the
    file removed) and its error. Run by the pool's threads."""
    try:
        fd = os.open(name, _FILE_FLAGS, safeio.FILE_MODE, dir_fd=dir_fd)
    except OSError as exc:
        return "create", exc
    step = "write"
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.fchmod(fd, mode)  # after the bytes: a write clears set-user-ID
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




def write_files(files: list[tuple[int, bytes, bytes, int]], sync: bool) -> list[Failure]:
    """:func:`write_file` of each (directory, name, content, mode), in order."""
    return [write_file(*f, sync) for f in files]


def make_dirs(dir_fd: int, names: list[bytes], strip: bool) -> list[Failure]:
    """Make each directory ``names`` in ``dir_fd``, 0700 (``strip``: the umask takes owner
    bits, so chmod it too): None for each made, else the step that failed and its error
    (``"mkdir"``: nothing made; ``"chmod"``: made, left as it is). Run by the pool's threads."""
    out: list[Failure] = []
    for name in names:
        try:
            os.mkdir(name, MKDIR_MODE, dir_fd=dir_fd)
        except OSError as exc:
            out.append(("mkdir", exc))
            continue
        try:
            if strip:
                safeio.chmod_at(dir_fd, name, MKDIR_MODE)  # the final chmod (finish) sets the rest
        except OSError as exc:
            out.append(("chmod", exc))
            continue
        out.append(None)
    return out
