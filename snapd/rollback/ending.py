"""The fill's end (:mod:`snapd.rollback.fill`): the directories' modes, then durability.

Deepest first, each directory with a mode left to give gets it — one the fill made 0700
because its mode would let another user write in it or the owner not
(:func:`~snapd.rollback.writers.dir_mode`), one found made there meanwhile whose mode the tree
says otherwise — and the root its own last. Only those directories and the ones above them
are opened again; where each directory is fsynced (``syncfs`` not trusted there), every one
the fill wrote into is. Then the target's file system is synced once, through the descriptor
the fill opened before its first write, which makes the files' bytes and modes, every entry
and the directories' modes durable together. An error stops the fill
(:func:`snapd.rollback.dirs.stopped`).
"""

from __future__ import annotations

import errno
import os
from collections.abc import Iterator, Mapping, Set

from snapd.paths import ancestors
from snapd.rollback.dirs import DIR_FLAGS, Outcome, stopped
from snapd.rollback.ops import MKDIR_MODE, Op, show
from snapd.store import safeio

READ_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


class Ending:
    """The end of a fill of ``root_fd``: ``children`` (directory -> the ops creating what it
    holds), ``modes`` (directory -> its mode at the end, the plan's chmods), ``made`` (the
    directories the fill made), ``at_final`` (those it found at their final mode once made or
    adopted: an ``fstat``, not what it asked of ``mkdir``), ``outcome`` (what it applied;
    conflicts are added), ``each`` (each directory fsynced)."""

    def __init__(
        self,
        root_fd: int,
        children: Mapping[bytes, list[Op]],
        modes: Mapping[bytes, int],
        made: Set[bytes],
        at_final: Set[bytes],
        outcome: Outcome,
        each: bool,
    ) -> None:
        self.root_fd, self.children, self.modes, self.made = root_fd, children, modes, made
        self.at_final, self.outcome, self.each = at_final, outcome, each
        self.unsettled: set[bytes] = set()  # directories with a mode left to give, and above them
        applied = outcome.applied
        for ops in children.values():
            for op in ops:
                if op.kind == "mkdir" and op.path in applied and self.mode_left(op.path) is not None:
                    self.unsettled.add(op.path)
                    self.unsettled.update(ancestors(op.path))

    def run(self, sync_fd: int | None) -> None:
        stack: list[tuple[bytes, int, bool, Iterator[Op]]] = []
        here = b""
        try:
            stack.append((b"", *_open_dir(self.root_fd, "."), iter(self._subdirs(b""))))
            while stack:
                path, fd, readable, todo = stack[-1]
                op = next(todo, None)
                if op is None:
                    stack.pop()
                    try:
                        here = path
                        self.settle_dir(path, fd, readable)
                    finally:
                        os.close(fd)
                    continue
                try:
                    here = op.path
                    name = op.path.rpartition(b"/")[2]
                    stack.append((op.path, *_open_dir(fd, name), iter(self._subdirs(op.path))))
                except OSError as exc:
                    if exc.errno not in (errno.ENOENT, errno.ENOTDIR, errno.ELOOP):
                        raise
                    self.outcome.conflicts[op.path] = f"removed meanwhile ({exc.strerror})"
        except OSError as exc:
            raise stopped(exc, f"making {show(here) if here else 'the root'} durable") from exc
        finally:
            for _, fd, _, _ in stack:
                os.close(fd)
        if self.each:
            return
        try:
            if sync_fd is None:
                safeio.sync_fs_at(self.root_fd)
            else:
                safeio.syncfs(sync_fd)
        except OSError as exc:
            raise stopped(exc, "making the restored tree durable (the disk reported an error)") from exc
        safeio.step("apply.sync")

    def settle_dir(self, path: bytes, fd: int, readable: bool) -> None:
        """A directory's mode, when it has one left to give (:meth:`mode_left`); where
        ``syncfs`` is not trusted, then its fsync (one that may not be read has its file
        system synced instead)."""
        mode = self.mode_left(path) if path else self.modes.get(b"")  # the root: its own op
        if mode is not None:
            os.fchmod(fd, mode) if readable else safeio.chmod_fd(fd, mode)
            safeio.step("apply.chmod")
        if self.each:
            safeio.fsync(fd) if readable else safeio.sync_fs_at(fd)
            safeio.step("apply.fsync_dir")

    def mode_left(self, path: bytes) -> int | None:
        """The mode directory ``path`` (not the root) is still to be given, if any: none when
        it was found at its final mode; else its final one, or, for one found made there
        meanwhile, the tree's unless that is 0700."""
        if path in self.at_final:
            return None
        return self.modes.get(path, MKDIR_MODE) if path in self.made else self.modes.get(path)

    def _subdirs(self, path: bytes) -> list[Op]:
        """The directories in ``path`` the fill wrote into that the end must open: each, where
        each is fsynced; else those with a mode left to give, or holding one."""
        applied = self.outcome.applied
        return [
            op
            for op in self.children.get(path, ())
            if op.kind == "mkdir" and op.path in applied and (self.each or op.path in self.unsettled)
        ]


def _open_dir(dir_fd: int, name: bytes | str) -> tuple[int, bool]:
    """Directory ``name`` opened for reading (``fchmod``), or, where it may not be read,
    ``O_PATH`` (False): a root or a directory made there meanwhile, not the user's to read."""
    try:
        return os.open(name, READ_DIR, dir_fd=dir_fd), True
    except PermissionError:
        return os.open(name, DIR_FLAGS, dir_fd=dir_fd), False
