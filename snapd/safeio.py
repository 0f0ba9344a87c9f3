"""Safe persistent file operations, and the one place where tests inject crashes.

Every byte snapd persists goes through here: private directories (0700) and files (0600)
whatever the umask, writes as temp file -> fsync -> rename -> fsync of the directory, and the
catalog's commits (reported with :func:`step`). Each completed operation is counted; a test can
arm :func:`crash_after` so that the process dies (``os._exit``) right after the N-th
operation, which is how the crash tests prove that a store opened after *any* prefix of a
workload is consistent.

Invariants:
- a file published with :func:`write_atomic` is either absent or complete and durable;
- temp files are named ``.snapd-*~`` so recovery (and other tools) can recognise them.
"""

from __future__ import annotations

import errno
import os
import secrets
import stat
from collections.abc import Iterable
from pathlib import Path

from snapd.errors import DiskFull, StoreError

DIR_MODE = 0o700
FILE_MODE = 0o600
TEMP_PREFIX = ".snapd-"
TEMP_SUFFIX = "~"

_ops = 0
_crash_at: int | None = None
CRASH_EXIT_CODE = 86


def crash_after(n: int | None) -> None:
    """Arm (or with None disarm) a simulated crash right after the n-th operation from now.

    ``n == 0`` crashes at the next operation, before it takes effect.
    """
    global _ops, _crash_at
    _ops = 0
    _crash_at = n
    if n == 0:
        os._exit(CRASH_EXIT_CODE)


def operations() -> int:
    """How many operations completed since the last :func:`crash_after` (for test planning)."""
    return _ops


def step(name: str) -> None:
    """Record that a persistent operation named ``name`` completed (crash point)."""
    global _ops
    _ops += 1
    if _crash_at is not None and _ops >= _crash_at:
        os._exit(CRASH_EXIT_CODE)


def _raise_os(exc: OSError, what: str, path: Path | str) -> None:
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        raise DiskFull(f"disk full while {what} {path}: free some space; nothing was lost") from exc
    raise StoreError(f"could not {what} {path}: {exc.strerror}") from exc


def ensure_dir(path: Path) -> None:
    """Create ``path`` (and parents) as private directories; tighten an existing one."""
    try:
        path.mkdir(mode=DIR_MODE, parents=True, exist_ok=True)
        st = path.lstat()
        if not stat.S_ISDIR(st.st_mode):
            raise StoreError(f"{path} exists and is not a directory")
        if stat.S_IMODE(st.st_mode) != DIR_MODE:
            os.chmod(path, DIR_MODE)
    except OSError as exc:
        _raise_os(exc, "create directory", path)


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    step("fsync_dir")


def temp_name() -> str:
    return f"{TEMP_PREFIX}{secrets.token_hex(6)}{TEMP_SUFFIX}"


def is_temp_name(name: str) -> bool:
    return name.startswith(TEMP_PREFIX) and name.endswith(TEMP_SUFFIX)


def write_atomic(path: Path, data: bytes, *, sync_dir: bool = True) -> None:
    """Publish ``data`` at ``path``: temp file, fsync, rename, then fsync of the directory.

    With ``sync_dir=False`` the caller promises to call :func:`fsync_dir` once for a batch.
    """
    tmp = path.parent / temp_name()
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, FILE_MODE)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            step("write")
            os.fsync(fd)
            step("fsync")
        finally:
            os.close(fd)
        os.rename(tmp, path)
        step("rename")
        if sync_dir:
            fsync_dir(path.parent)
    except OSError as exc:
        try:
            tmp.unlink()
        except OSError:
            pass
        _raise_os(exc, "write", path)


def unlink(path: Path) -> bool:
    """Remove a file; True if it existed."""
    try:
        path.unlink()
    except FileNotFoundError:
        return False
    except OSError as exc:
        _raise_os(exc, "remove", path)
    step("unlink")
    return True


def remove_temp_files(directories: Iterable[Path]) -> int:
    """Delete leftover ``.snapd-*~`` temp files (a crash between write and rename)."""
    removed = 0
    for d in directories:
        try:
            names = os.listdir(d)
        except FileNotFoundError:
            continue
        for name in names:
            if is_temp_name(name) and unlink(d / name):
                removed += 1
    return removed
