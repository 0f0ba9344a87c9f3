"""Reading a workspace from disk: walking its directories and reading each path, without the
store (scans and ingest share it; nothing here imports SQLite, xxhash or zstd).

Files are opened with ``O_NOFOLLOW`` and ``O_NONBLOCK`` (a path swapped for a symlink or a FIFO
between ``lstat`` and ``open`` is never followed or waited on); a file whose size or mtime
changes while it is read is read again a bounded number of times, then kept as last read and
marked ``unstable``. A path under a parent that became a symlink reads as missing: reading it
would read through the link, possibly outside the workspace.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Literal

from snapd.capture.counters import Counters

MAX_REREADS = 3

Sig = tuple[int, int, int, int, int]
"""What a stat says about a path: (st_mode, size, mtime_ns, ctime_ns, inode)."""


def sig_of(st: os.stat_result) -> Sig:
    return (st.st_mode, st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino)


Ignored = Callable[[bytes, bool], bool]
"""(relative path, is_dir) -> True when the path is not captured."""


@dataclass(slots=True)
class Read:
    """One path as found on disk, read and (for contents) hashed, ready for the store.

    ``skipped``: there, but its content is not captured (``reason``); its stat is known (``sig``),
    so its tree entry has a stat cache row and a scan sees it go. ``hidden``: not even its
    ``lstat`` answered (a directory above it cannot be searched): whether anything is there is
    unknown, so nothing is recorded at it (the directory is recorded as unlisted)."""

    rel: bytes
    kind: Literal["file", "symlink", "dir", "missing", "skipped", "hidden"]
    mode: int = 0
    data: bytes = b""
    reason: str = ""
    unstable: bool = False
    digest: str | None = None
    encoded: tuple[int, bytes] | None = None
    sig: Sig | None = None  # (st_mode, size, mtime_ns, ctime_ns, inode) as read
    sha: bytes | None = None  # objects.fingerprint of the content
    listed: bool = True  # a directory: whether it can be listed (else its contents are unknown)
    dev: int = 0  # a file's st_dev and st_nlink as read: its other names must be captured too
    nlink: int = 1
    size: int = 0  # a file's or symlink's length; ``data`` is dropped by a reader process

    def __reduce__(self) -> tuple[type[Read], tuple[object, ...]]:
        # Reader processes pickle 10^5 of these per baseline, and the daemon's request thread
        # unpickles them: the plain argument tuple loads ~5x faster than the dataclass's
        # field-by-field state. Every field, in declaration order.
        return (
            Read,
            (
                self.rel,
                self.kind,
                self.mode,
                self.data,
                self.reason,
                self.unstable,
                self.digest,
                self.encoded,
                self.sig,
                self.sha,
                self.listed,
                self.dev,
                self.nlink,
                self.size,
            ),
        )


def lstat(path: bytes, counters: Counters | None = None) -> os.stat_result:
    """``os.lstat``, counted: every lstat of a workspace path goes through here, but for the
    scan's loop over a directory's entries, which counts them once per directory."""
    if counters is not None:
        counters.stat()
    return os.lstat(path)


def parents_real(root: bytes, rel: bytes, counters: Counters | None = None) -> bool:
    """Every ancestor of ``rel`` below ``root`` is a real directory (not a symlink to one).

    A path whose parent became a symlink does not exist as captured: reading it would read
    through the link, possibly outside the workspace. The link itself is captured as a link.
    """
    parent = rel.rpartition(b"/")[0]
    while parent:
        try:
            if not stat.S_ISDIR(lstat(root + b"/" + parent, counters).st_mode):
                return False
        except OSError:
            return False
        parent = parent.rpartition(b"/")[0]
    return True


def read_path(
    root: bytes,
    rel: bytes,
    size_cap: int,
    *,
    trusted: bool = False,
    counters: Counters | None = None,
) -> Read:
    """Read one path without following symlinks or blocking on special files.

    ``trusted``: the caller (a walk that never descends into symlinks) vouches for the
    parents; otherwise they are checked, before and after the read.
    """
    path = root + b"/" + rel
    if not trusted and not parents_real(root, rel, counters):
        return Read(rel, "missing")
    try:
        st = lstat(path, counters)
    except (FileNotFoundError, NotADirectoryError):  # gone, or a parent is a file now
        return Read(rel, "missing")
    except OSError as exc:
        return Read(rel, "hidden", reason=f"unreadable ({exc.strerror})")
    got = _read_entry(path, rel, st, size_cap, counters)
    if not trusted and got.kind != "missing" and not parents_real(root, rel, counters):
        return Read(rel, "missing")  # a parent was swapped for a link while we read
    return got


def _read_entry(
    path: bytes, rel: bytes, st: os.stat_result, size_cap: int, counters: Counters | None
) -> Read:
    mode = stat.S_IMODE(st.st_mode)
    if stat.S_ISDIR(st.st_mode):
        if _listable(path):
            return Read(rel, "dir", mode, sig=sig_of(st))
        return Read(rel, "dir", mode, sig=sig_of(st), listed=False, reason="unreadable directory")
    if stat.S_ISLNK(st.st_mode):
        try:
            target = os.readlink(path)
            return Read(rel, "symlink", mode, target, sig=sig_of(st), size=len(target))
        except (FileNotFoundError, NotADirectoryError):
            return Read(rel, "missing")
        except OSError as exc:
            return _skipped(rel, st, f"unreadable ({exc.strerror})")
    if not stat.S_ISREG(st.st_mode):
        return _skipped(rel, st, "special file")
    if st.st_size > size_cap:
        return _skipped(rel, st, "over size cap")
    for _ in range(MAX_REREADS + 1):
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
        except (FileNotFoundError, NotADirectoryError):
            return Read(rel, "missing")
        except OSError as exc:
            return _skipped(rel, st, f"unreadable ({exc.strerror})")
        try:
            before = os.fstat(fd)
            if not stat.S_ISREG(before.st_mode):
                return _skipped(rel, before, "special file")
            if before.st_size > size_cap:
                return _skipped(rel, before, "over size cap")
            if counters is not None:
                counters.read()
            chunks = []
            while chunk := os.read(fd, max(before.st_size + 1, 1 << 16)):
                chunks.append(chunk)
            data = b"".join(chunks)
            after = os.fstat(fd)
        except OSError as exc:
            return _skipped(rel, st, f"unreadable ({exc.strerror})")
        finally:
            os.close(fd)
        stable = (after.st_size, after.st_mtime_ns) == (before.st_size, before.st_mtime_ns)
        if stable and len(data) == after.st_size:
            break
    else:
        stable = False
    mode, sig = stat.S_IMODE(after.st_mode), sig_of(after)
    nlink, size = after.st_nlink, len(data)
    return Read(
        rel, "file", mode, data, unstable=not stable, sig=sig, dev=after.st_dev, nlink=nlink, size=size
    )


def _skipped(rel: bytes, st: os.stat_result, reason: str) -> Read:
    """A path whose content cannot be captured, with what its stat said (its entry records it)."""
    return Read(rel, "skipped", stat.S_IMODE(st.st_mode), reason=reason, sig=sig_of(st))


_ROOT = os.geteuid() == 0


def _listable(path: bytes) -> bool:
    """Whether a directory can be listed (root can list any; one syscall otherwise)."""
    return _ROOT or os.access(path, os.R_OK | os.X_OK, follow_symlinks=False)


Listing = list[tuple[bytes, bool]]
"""Entries of a listing, every name: (path relative to the root, is_dir)."""
LeftOut = Callable[[bytes, Listing], None]
"""Told of each fresh listing: (the directory, the entries it left out as ignored)."""


def walk(
    root: bytes,
    ignored: Ignored,
    rel_dir: bytes = b"",
    descend: Callable[[bytes], bool] | None = None,
    unreadable: Callable[[bytes, str], None] | None = None,
    counters: Counters | None = None,
    listed: Callable[[bytes], Listing | None] | None = None,
    left_out: LeftOut | None = None,
) -> Iterator[tuple[bytes, bool]]:
    """(relative path, is_dir) for every non-ignored path under ``rel_dir``, parents first.

    An ignored directory is still entered (and yielded) when ``descend(rel)`` says it may
    hold captured paths (files git tracks inside an ignored directory). A directory that
    cannot be listed is reported to ``unreadable``, never skipped in silence. Iterative and
    unsorted: on a 100k-file tree a recursive, sorted walk costs several times the syscalls.
    A walk of the whole workspace counts as a full scan in ``counters``.

    ``listed(d)``, if given, lists directory ``d`` as the walk reaches it, or returns None
    (then ``d`` is listed here): a new workspace's watcher watches each directory, then lists
    it. Its listing is judged like a fresh one. ``left_out`` is told what each listing leaves
    out as ignored.
    """
    if counters is not None and not rel_dir:
        counters.scanned_all()
    stack = [rel_dir]
    while stack:
        d = stack.pop()
        made = listed(d) if listed is not None else None
        entries: Listing = []
        try:
            if made is None:
                entries = list_dir(root, d, ignored, descend, counters, left_out)
            else:
                out: Listing = []
                for e in made:
                    (out if _left_out(e[0], e[1], ignored, descend) else entries).append(e)
                if left_out is not None:
                    left_out(d, out)
        except (FileNotFoundError, NotADirectoryError):
            continue
        except OSError as exc:
            if unreadable is not None:
                unreadable(d, f"unreadable directory ({exc.strerror})")
            continue
        for rel, is_dir in entries:
            yield rel, is_dir
            if is_dir:
                stack.append(rel)


def list_dir(
    root: bytes,
    d: bytes,
    ignored: Ignored,
    descend: Callable[[bytes], bool] | None = None,
    counters: Counters | None = None,
    left_out: LeftOut | None = None,
) -> list[tuple[bytes, bool]]:
    """One directory's captured entries as (relative path, is_dir): ignored names dropped,
    unless a directory may hold captured paths (``descend``); ``left_out`` is told the names
    dropped. Raises OSError."""
    out: list[tuple[bytes, bool]] = []
    dropped: list[tuple[bytes, bool]] = []
    if counters is not None:
        counters.listed()
    with os.scandir(root + b"/" + d if d else root) as it:
        for e in it:
            rel = d + b"/" + e.name if d else e.name
            is_dir = entry_is_dir(e)
            (dropped if _left_out(rel, is_dir, ignored, descend) else out).append((rel, is_dir))
    if left_out is not None:
        left_out(d, dropped)
    return out


def entry_is_dir(entry: os.DirEntry[bytes]) -> bool:
    """Whether a listed entry is a directory (not a symlink to one); False if it went."""
    try:
        return entry.is_dir(follow_symlinks=False)
    except OSError:
        return False


def _left_out(rel: bytes, is_dir: bool, ignored: Ignored, descend: Callable[[bytes], bool] | None) -> bool:
    """Whether a walk leaves a listed entry out: ignored, and not a directory that may hold
    captured paths."""
    return ignored(rel, is_dir) and not (is_dir and descend is not None and descend(rel))
