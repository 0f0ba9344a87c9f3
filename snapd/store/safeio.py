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

import ctypes
import errno
import functools
import os
import stat
from pathlib import Path

from snapd.errors import DiskFull, StoreError
from snapd.paths import temp_name

DIR_MODE = 0o700
FILE_MODE = 0o600

_ops = 0
_crash_at: int | None = None
_crash_only = ""
CRASH_EXIT_CODE = 86


def crash_after(n: int | None, only: str = "") -> None:
    """Arm (or with None disarm) a simulated crash right after the n-th operation from now.

    ``n == 0`` crashes at the next operation, before it takes effect. With ``only``, just the
    operations whose name starts with it count (``"apply."``: the steps of a rollback).
    """
    global _ops, _crash_at, _crash_only
    _ops = 0
    _crash_at = n
    _crash_only = only
    if n == 0:
        os._exit(CRASH_EXIT_CODE)


def operations() -> int:
    """How many operations completed since the last :func:`crash_after` (for test planning)."""
    return _ops


def step(name: str) -> None:
    """Record that a persistent operation named ``name`` completed (crash point)."""
    global _ops
    if _crash_only and not name.startswith(_crash_only):
        return
    _ops += 1
    if _crash_at is not None and _ops >= _crash_at:
        os._exit(CRASH_EXIT_CODE)


def os_error(exc: OSError, what: str, path: Path | str) -> StoreError:
    """The user-facing error for an OS error met while ``what``-ing ``path`` in the store:
    :class:`DiskFull` for a full disk or quota, else :class:`StoreError` naming the cause."""
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return DiskFull(
            f"disk full while trying to {what} {path}: free some space on that disk and retry. What "
            "failed was not recorded; everything acknowledged before is kept"
        )
    return StoreError(
        f"could not {what} {path}: {exc.strerror or exc}. What failed was not recorded; if the disk "
        "failed or went away, restart snapd once it is back: every acknowledged mark is kept",
        errno=exc.errno,
    )


def _raise_os(exc: OSError, what: str, path: Path | str) -> None:
    raise os_error(exc, what, path) from exc


def exists(path: Path) -> bool:
    """Whether ``path`` exists; a disk that cannot tell (EIO...) is a :class:`StoreError`,
    never a "no" (``Path.exists`` would raise the bare OSError)."""
    try:
        os.lstat(path)
    except (FileNotFoundError, NotADirectoryError):
        return False
    except OSError as exc:
        _raise_os(exc, "look for", path)
    return True


def ensure_dir(path: Path) -> None:
    """Create ``path`` (and parents) as private directories; tighten an existing one.

    A directory it creates is made durable in its parent (an fsync of the parent), so a file
    later fsynced inside it cannot lose its way there on power loss.
    """
    try:
        missing: list[Path] = []
        here = path
        while not here.exists():
            missing.append(here)
            here = here.parent
        for new in reversed(missing):
            try:
                os.mkdir(new, DIR_MODE)
            except FileExistsError:
                continue
            fsync_dir(new.parent)
        st = path.lstat()
        if not stat.S_ISDIR(st.st_mode):
            raise StoreError(f"{path} exists and is not a directory")
        if stat.S_IMODE(st.st_mode) != DIR_MODE:
            os.chmod(path, DIR_MODE)
    except OSError as exc:
        _raise_os(exc, "create directory", path)


def fsync(fd: int) -> None:
    """fsync ``fd``, and believe it only if the file system is still alive afterwards.

    A file system shut down by an I/O error can report an fsync as done that it did not do:
    XFS returns 0 for a directory whose changes it has just thrown away, and a file fsync
    that races the shutdown can pass its own check. ``fstat`` fails once the file system is
    shut down, so an fsync followed by a successful ``fstat`` was done while it was alive.
    Either error is final (see :func:`fsync_dir`).
    """
    os.fsync(fd)
    os.fstat(fd)


def fsync_dir(path: Path) -> None:
    """fsync a directory, so the entries created or renamed in it survive power loss. An
    error is final: the caller must not treat anything it covered as durable."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
        try:
            fsync(fd)
        finally:
            os.close(fd)
    except OSError as exc:
        _raise_os(exc, "sync the directory", path)
    step("fsync_dir")


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
            fsync(fd)
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


# -- operations relative to a directory descriptor (never following a symlink) ------------------
# Added for rollback's apply: every name is one component inside the directory behind ``dir_fd``,
# so no path can escape it. The caller reports its own steps where it changes something.


def remove_durably(path: Path) -> bool:
    """Delete ``path`` and fsync its directory, for a file whose return after a power cut
    would be acted on (a rollback journal): a deletion still in the file system's memory is
    undone by the cut. True if it existed."""
    existed = unlink(path)
    if existed:
        fsync_dir(path.parent)
    return existed


def lstat_at(dir_fd: int, name: bytes | str) -> os.stat_result | None:
    """``lstat`` of ``name`` in ``dir_fd``; None when it does not exist."""
    try:
        return os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return None


def chmod_at(dir_fd: int, name: bytes | str, mode: int) -> None:
    """chmod without following a symlink (Linux has no lchmod): through an O_PATH descriptor."""
    fd = os.open(name, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dir_fd)
    try:
        if stat.S_ISLNK(os.fstat(fd).st_mode):
            raise OSError(errno.ELOOP, "refusing to chmod through a symlink")
        chmod_fd(fd, mode)
    finally:
        os.close(fd)


def chmod_fd(fd: int, mode: int) -> None:
    """chmod the inode behind ``fd``, which may be O_PATH (no permission on it needed)."""
    os.chmod(f"/proc/self/fd/{fd}", mode)


def open_for_sync(dir_fd: int, name: bytes | str = ".") -> int | None:
    """A descriptor of the inode ``name`` in ``dir_fd`` (which may be O_PATH; ``"."`` is the
    directory itself) that fsync accepts, or None when the user may neither read nor write it
    (a directory of mode 0300, a file of mode 0100 or one being executed: the user's own, as
    they want it). Never follows a symlink, never blocks on a FIFO. Any other error raises."""
    flags = os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
    for access in (os.O_RDONLY, os.O_WRONLY):
        try:
            return os.open(name, access | flags, dir_fd=dir_fd)
        except (PermissionError, IsADirectoryError):  # a directory is never opened for writing
            continue
        except OSError as exc:
            if exc.errno != errno.ETXTBSY:
                raise
    return None


def sync_fs_at(dir_fd: int) -> None:
    """Flush the whole file system of directory ``dir_fd``: ``syncfs``, which reports the
    file system's write errors (Linux >= 5.8), through a descriptor of the directory; where
    the directory may not be read either, every file system (``sync``, which reports
    nothing). For the inodes :func:`open_for_sync` cannot open: rare."""
    try:
        fd = os.open(".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC, dir_fd=dir_fd)
    except PermissionError:
        os.sync()
        return
    try:
        syncfs(fd)
    finally:
        os.close(fd)


# File systems whose ``syncfs`` writes everything dirty to their disk and waits for it (statfs
# f_type): ext2/3/4, XFS, btrfs, F2FS, bcachefs, ZFS, and tmpfs/ramfs (nothing to write). On the
# others a sync of the whole file system may reach nothing durable: a FUSE server gets no
# request from it (sshfs, and every /dev/fuse file system), network file systems differ.
SYNCFS_REACHES_DISK = frozenset(
    (0xEF53, 0x58465342, 0x9123683E, 0xF2F52010, 0xCA451A4E, 0x2FC12FC1, 0x01021994, 0x858458F6)
)


class _StatFs(ctypes.Structure):
    _fields_ = [("f_type", ctypes.c_long), ("rest", ctypes.c_byte * 112)]


def fs_type(fd: int) -> int:
    """The ``f_type`` of the file system of open descriptor ``fd`` (``fstatfs``)."""
    buf = _StatFs()
    if _libc().fstatfs(fd, ctypes.byref(buf)) != 0:
        code = ctypes.get_errno()
        raise OSError(code, os.strerror(code))
    return int(buf.f_type) & 0xFFFFFFFF


def syncfs_reaches_disk(fd: int) -> bool:
    """Whether one :func:`syncfs` makes durable what was written on ``fd``'s file system."""
    return fs_type(fd) in SYNCFS_REACHES_DISK


def syncfs(fd: int) -> None:
    """``syncfs`` the file system of open descriptor ``fd``: it reports the write errors the
    file system met since ``fd`` was opened (Linux >= 5.8: open it before the writes it is to
    answer for), and is believed only if the file system is alive afterwards (see
    :func:`fsync`). Any error raises, and is final."""
    if _libc().syncfs(fd) != 0:
        code = ctypes.get_errno()
        raise OSError(code, os.strerror(code))
    os.fstat(fd)


@functools.cache
def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


def fsync_at(dir_fd: int, name: bytes | str = ".") -> None:
    """Make the inode ``name`` in ``dir_fd`` durable: its entries for a directory, its metadata
    (a chmod) for a file; its whole file system where it cannot be opened (see
    :func:`open_for_sync`, :func:`sync_fs_at`). Any error raises, and is final (see
    :func:`fsync`)."""
    fd = open_for_sync(dir_fd, name)
    if fd is None:
        sync_fs_at(dir_fd)
        return
    try:
        fsync(fd)
    finally:
        os.close(fd)


def remove_tree_at(dir_fd: int, name: bytes | str, step_prefix: str) -> None:
    """Remove ``name`` and everything below it, reporting ``<step_prefix>.unlink``/``.rmdir``."""
    st = lstat_at(dir_fd, name)
    if st is None:
        return
    if not stat.S_ISDIR(st.st_mode):
        os.unlink(name, dir_fd=dir_fd)
        step(f"{step_prefix}.unlink")
        return
    chmod_at(dir_fd, name, stat.S_IMODE(st.st_mode) | stat.S_IRWXU)  # make it listable
    fd = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dir_fd)
    try:
        for child in os.listdir(fd):
            remove_tree_at(fd, child, step_prefix)
    finally:
        os.close(fd)
    os.rmdir(name, dir_fd=dir_fd)
    step(f"{step_prefix}.rmdir")


def read_file_at(dir_fd: int, name: bytes | str, expect: os.stat_result) -> bytes | None:
    """The bytes of regular file ``name`` if it is still the inode ``expect`` describes."""
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dir_fd)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if (st.st_dev, st.st_ino) != (expect.st_dev, expect.st_ino) or not stat.S_ISREG(st.st_mode):
            return None
        chunks = []
        while chunk := os.read(fd, max(st.st_size + 1, 1 << 16)):
            chunks.append(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def write_temp_at(dir_fd: int, name: str, data: bytes, mode: int) -> int:
    """Create temp file ``name`` (O_EXCL, no-follow) holding ``data`` with ``mode``; its open fd.

    The caller fsyncs it (batched) and renames it; on failure nothing is left behind.
    """
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    fd = os.open(name, flags, FILE_MODE, dir_fd=dir_fd)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.fchmod(fd, mode)
    except BaseException:
        os.close(fd)
        os.unlink(name, dir_fd=dir_fd)
        raise
    return fd
