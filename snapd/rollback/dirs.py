"""The workspace as an apply sees it: directory descriptors opened one component at a time
from the root, and the tally of what happened to each path.

Invariants: every directory is opened ``O_PATH|O_DIRECTORY|O_NOFOLLOW`` from its parent's
descriptor, so a symlink is never followed; where the plan needs a directory and finds a
symlink, the symlink is replaced by a directory (``REPLACED_DIR_MODE``) and named in
``Outcome.replaced``. A directory fsync that fails, and a full disk, stop the apply
(:func:`stopped`): its journal stays and the rollback is finished later.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from snapd.errors import DiskFull, StoreError
from snapd.rollback.ops import Op, show
from snapd.store import safeio
from snapd.store.damage import Unreadable

REPLACED_DIR_MODE = 0o755
_OWNER_WX = stat.S_IWUSR | stat.S_IXUSR
DIR_FLAGS = os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


FINISHED_LATER = (
    "the rollback stopped part-way; snapd finishes it (its journal is kept) at the next "
    "request for this workspace, or when it starts again"
)


def stopped(exc: OSError, what: str) -> StoreError:
    """The error that stops an apply part-way: its journal stays, and it is finished later."""
    later = FINISHED_LATER
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return DiskFull(f"disk full while {what}: free some space on the workspace's disk; {later}")
    return StoreError(f"{exc.strerror or exc} while {what}: {later}", errno=exc.errno)


def unlink_quiet(fd: int, name: str) -> bool:
    """Remove ``name`` in directory ``fd``; False when it was not there."""
    try:
        os.unlink(name, dir_fd=fd)
    except FileNotFoundError:
        return False
    safeio.step("apply.unlink_temp")
    return True


@dataclass
class Outcome:
    """What an apply did, path by path, as it goes."""

    applied: dict[bytes, None] = field(default_factory=dict)
    conflicts: dict[bytes, str] = field(default_factory=dict)
    kept: dict[bytes, str] = field(default_factory=dict)
    damaged: dict[bytes, Unreadable] = field(default_factory=dict)  # content unreadable: left as it is
    replaced: list[bytes] = field(default_factory=list)
    temps_removed: int = 0
    settled: set[bytes] = field(default_factory=set)  # directories of paths found done: synced with the phase

    def result(self, kept: Sequence[tuple[bytes, str]], left: Sequence[tuple[bytes, str]]) -> dict[str, Any]:
        """The fields of an ApplyResult: the plan's ``kept`` and ``left`` with what happened."""
        applied = tuple(p for p in self.applied if p not in self.conflicts and p not in self.kept)
        applied = tuple(p for p in applied if p not in self.damaged)
        # A damaged path is left differing like a kept one: listed there too (whoever reads
        # ``kept`` learns of it), with its details in ``damaged``.
        unread = tuple((p, u.reason) for p, u in self.damaged.items())
        all_kept = tuple(kept) + tuple(self.kept.items()) + unread
        return dict(
            applied=applied,
            conflicts=tuple(self.conflicts.items()),
            kept=all_kept,
            damaged=tuple(self.damaged.items()),
            left=tuple(left),
            temps_removed=self.temps_removed,
            replaced=tuple(self.replaced),
        )


class Dirs:
    """Directories below ``root_fd``, opened without following symlinks."""

    def __init__(self, root_fd: int, outcome: Outcome) -> None:
        self.root_fd, self.outcome = root_fd, outcome
        self._replaced_synced = 0  # outcome.replaced[:this] have had their parents synced

    def open(self, path: bytes, *, replace: bool = True) -> int | str:
        """A descriptor of directory ``path`` (b"" is the root), or why there is none."""
        fd = os.dup(self.root_fd)
        if not path:
            return fd
        here: list[bytes] = []
        for name in path.split(b"/"):
            here.append(name)
            try:
                nfd = os.open(name, DIR_FLAGS, dir_fd=fd)
            except FileNotFoundError:
                os.close(fd)
                return f"its directory {show(b'/'.join(here))} is missing"
            except OSError as exc:
                if exc.errno not in (errno.ENOTDIR, errno.ELOOP):
                    os.close(fd)
                    raise
                st = safeio.lstat_at(fd, name)
                if not replace or st is None or not stat.S_ISLNK(st.st_mode):
                    os.close(fd)
                    return f"{show(b'/'.join(here))} is not a directory"
                os.unlink(name, dir_fd=fd)  # never followed: the mark has a directory here
                safeio.step("apply.unlink")
                os.mkdir(name, REPLACED_DIR_MODE, dir_fd=fd)
                safeio.step("apply.mkdir")
                self.outcome.replaced.append(b"/".join(here))
                nfd = os.open(name, DIR_FLAGS, dir_fd=fd)
            os.close(fd)
            fd = nfd
        return fd

    def drop_temp(self, fd: int, temp: str) -> None:
        if unlink_quiet(fd, temp):
            self.outcome.temps_removed += 1

    def sync(self, paths: set[bytes]) -> None:
        """fsync each directory changed (or found done) in this phase, through its parent (a
        directory its owner may not read has its file system synced: ``safeio.fsync_at``);
        an error stops the apply."""
        # A symlink replaced by a directory in this phase (:meth:`open`) changed its parent.
        replaced = self.outcome.replaced[self._replaced_synced :]
        self._replaced_synced = len(self.outcome.replaced)
        paths = paths | self.outcome.settled | {p.rpartition(b"/")[0] for p in replaced}
        self.outcome.settled = set()
        for path in sorted(paths):
            parent, _, name = path.rpartition(b"/")  # the root (b""): "." in itself
            try:
                fd = self.open(parent, replace=False)
                if isinstance(fd, str):
                    continue
                try:
                    safeio.fsync_at(fd, name or b".")
                    safeio.step("apply.fsync_dir")
                finally:
                    os.close(fd)
            except OSError as exc:
                if exc.errno in (errno.ENOENT, errno.ENOTDIR, errno.ELOOP):
                    continue  # removed later in the phase (its parent is synced), or no directory now
                raise stopped(exc, f"making {show(path) if path else 'the root'} durable") from exc

    def reopen(self, ops: Sequence[Op]) -> None:
        """Before a recovery: give the owner write and search permission back on every directory
        the journal chmods that lacks them now (``p`` set to 0600 above ``p/q/f`` by the last
        phase; or 0600 at the plan, to be opened by phase 0), parents first, or nothing below
        it could be reached again. Its chmods run again and set its mode (the mode is not the
        one they set any more). One that cannot be changed so (not the user's, or out of
        reach) is left as it is: its ops report it."""
        dirs = {op.path for op in ops if op.kind == "chmod" and op.entry and op.entry.kind == "dir"}
        for path in sorted(dirs):  # a parent sorts before what is below it
            where = show(path) if path else "the root"
            try:
                fd = self.open(path, replace=False)  # the directory itself: no permission on it needed
                if isinstance(fd, str):
                    continue  # gone, or no directory: its ops say so when they run
                try:
                    mode = stat.S_IMODE(os.fstat(fd).st_mode)
                    if mode & _OWNER_WX != _OWNER_WX:
                        safeio.chmod_fd(fd, mode | _OWNER_WX)
                        safeio.step("apply.reopen")
                finally:
                    os.close(fd)
            except PermissionError:
                continue  # EPERM: another user's directory; EACCES: out of reach. Its ops report it
            except OSError as exc:
                raise stopped(exc, f"opening {where} again") from exc

    def remove_temps(self, ops: Sequence[Op], temps: Sequence[str | None]) -> None:
        """Remove the journaled temps a crash left (recovery, before the ops run again)."""
        for op, temp in zip(ops, temps, strict=True):
            if temp is None:
                continue
            parent = op.path.rpartition(b"/")[0]
            try:
                fd = self.open(parent, replace=False)
                if isinstance(fd, str):
                    continue
                try:
                    self.drop_temp(fd, temp)
                finally:
                    os.close(fd)
            except OSError as exc:
                where = show(parent) if parent else "the root"
                raise stopped(exc, f"removing the temp files in {where}") from exc
