"""The engine of an apply: runs a plan's ops phase by phase against the workspace, re-checking
each path right before it changes (the invariants: :mod:`snapd.rollback.apply`).

Phases follow the plan's order (:mod:`snapd.rollback.modes`); writes go in batches of
``BATCH``: temps staged, fsynced, then renamed, only those whose fsync succeeded; each
directory touched (or found done) in a phase is fsynced once at its end, and the journal
records the phase. A chmod is synced on its own inode, done or found done: no fsync of a
parent carries it (:meth:`Engine.mode_durable`). An OS error leaves its path
as it is (a conflict); a full disk stops the apply (:func:`snapd.rollback.dirs.stopped`).
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager

from snapd.errors import CorruptObject, MissingObject
from snapd.paths import ancestors
from snapd.rollback.checks import Contents, describe_state
from snapd.rollback.dirs import Dirs, stopped, unlink_quiet
from snapd.rollback.ops import MKDIR_MODE, Op, show
from snapd.store import safeio
from snapd.store.damage import Unreadable

BATCH = 128  # writes per batch: bounds open descriptors (a temp file and its directory each)


def _phase_of(op: Op) -> str:
    file_mode = op.kind == "chmod" and op.entry is not None and op.entry.kind != "dir"
    return "write" if op.kind in ("write", "symlink") or file_mode else op.kind


def _dir_chmod(op: Op) -> bool:
    return op.kind == "chmod" and op.entry is not None and op.entry.kind == "dir"


class Engine:
    """Runs ops against the directory behind ``dirs``; ``outcome`` collects what happened."""

    def __init__(self, dirs: Dirs, contents: Contents, force: bool) -> None:
        self.dirs, self.contents, self.force = dirs, contents, force
        self.outcome = dirs.outcome
        self.modes: list[tuple[bytes, int]] = []  # (path, open descriptor): chmodded, not yet fsynced

    def admit(self, op: Op, fd: int, name: bytes, st: os.stat_result | None) -> bool:
        """May ``op`` change the path? Records a conflict when not."""
        if op.forced is not None:
            if not self.force:
                self.outcome.conflicts[op.path] = f"not captured ({op.forced}): needs --force"
            return self.force
        if self.contents.holds(fd, name, st, op.expect, exact=False):
            return True
        self.outcome.conflicts[op.path] = "changed since the plan was made: " + describe_state(st)
        return False

    @contextmanager
    def at(self, op: Op, follow: Sequence[Op]) -> Iterator[tuple[int, bytes, os.stat_result | None] | None]:
        """(parent fd, name, state) when ``op`` must run now; None when done, blocked or conflicting."""
        out = self.outcome
        stuck = [a for a in ancestors(op.path) if a in out.conflicts or a in out.kept or a in out.damaged]
        removal = op.kind in ("remove", "rmdir")
        fd = (
            f"{show(stuck[0])} was left as it is"
            if stuck
            else self.dirs.open(op.path.rpartition(b"/")[0], replace=not removal)
        )
        if isinstance(fd, str):
            if removal and not stuck:
                self.outcome.applied[op.path] = None  # no directory there: the path is not in the workspace
            else:
                self.outcome.conflicts.setdefault(op.path, fd)
            yield None
            return
        try:
            name = op.path.rpartition(b"/")[2] or b"."  # b"": the root itself (its mode)
            st = safeio.lstat_at(fd, name)
            if self.contents.done(fd, name, st, follow):
                self.outcome.applied[op.path] = None
                if op.kind == "chmod":  # done before: durable only once synced
                    self.mode_durable(op, fd, name)
                else:
                    self.outcome.settled.add(op.path.rpartition(b"/")[0])
                yield None
            else:
                yield (fd, name, st) if self.admit(op, fd, name, st) else None
        finally:
            os.close(fd)

    @contextmanager
    def guarded(self, op: Op) -> Iterator[None]:
        """An OS error leaves the path as it is, reported; a full disk stops the apply. So does
        a content the store cannot read (corrupt or missing): the path is listed as damaged,
        and the rest of the plan goes on."""
        try:
            yield
        except OSError as exc:
            if exc.errno in (errno.ENOSPC, errno.EDQUOT):
                raise stopped(exc, f"restoring {show(op.path)}") from exc
            self.outcome.conflicts.setdefault(op.path, f"could not {op.describe()}: {exc.strerror}")
        except (CorruptObject, MissingObject) as exc:
            hurt = Unreadable.of(exc)
            if op.entry is None or hurt.key != op.entry.key:  # the re-check's: what it holds now
                hurt = hurt._replace(what="the captured content it holds now")
            self.outcome.damaged.setdefault(op.path, hurt)

    def unreadable(self, ops: Sequence[Op]) -> set[int]:
        """The ops to skip because a path that changes kind has a content the store cannot
        read: its removal (and what is below it) would run phases before its write, which
        would then fail, so the content is read first and such a path is left as it is
        (listed as damaged). Only these are read ahead: any other write fails on its own."""
        removed = {op.path for op in ops if op.kind in ("remove", "rmdir")}
        for op in ops:
            if op.kind in ("write", "symlink") and op.path in removed and op.entry is not None:
                with self.guarded(op):
                    self.contents.get(op.entry.key)
        gone = self.outcome.damaged
        if not gone:
            return set()
        return {k for k, op in enumerate(ops) if any(a in gone for a in (op.path, *ancestors(op.path)))}

    def run(
        self,
        ops: Sequence[Op],
        temps: Sequence[str | None],
        on_phase: Callable[[int], None],
        progress: Callable[[int, int], None] | None = None,
    ) -> None:
        """Run ``ops``; ``progress(done, len(ops))`` after each batch (a terminal's bar)."""
        by_path: dict[bytes, list[int]] = {}
        for k, op in enumerate(ops):
            by_path.setdefault(op.path, []).append(k)
        # A directory's mode is no evidence of progress (a read-only directory is opened, then
        # given its mode back): a chmod of one is judged by its own result only.
        follow = [
            [op] if _dir_chmod(op) else [ops[j] for j in by_path[op.path] if j >= k]
            for k, op in enumerate(ops)
        ]
        skip = self.unreadable(ops)
        k, phase = 0, 0
        try:
            while k < len(ops):
                end = k
                while end < len(ops) and _phase_of(ops[end]) == _phase_of(ops[k]):
                    end += 1
                touched: set[bytes] = set()
                for start in range(k, end, BATCH):
                    batch = [i for i in range(start, min(end, start + BATCH)) if i not in skip]
                    if _phase_of(ops[k]) == "write":
                        self.writes([(ops[i], temps[i], follow[i]) for i in batch], touched)
                    else:
                        for i in batch:
                            with self.guarded(ops[i]):
                                self.one(ops[i], follow[i], touched)
                    if progress is not None:
                        progress(min(end, start + BATCH), len(ops))
                self.sync_modes()
                self.dirs.sync(touched)
                phase += 1
                on_phase(phase)
                k = end
        finally:
            for _, ifd in self.modes:  # stopped part-way: the journal stays, nothing to sync
                os.close(ifd)
            self.modes = []

    def one(self, op: Op, follow: Sequence[Op], touched: set[bytes]) -> None:
        with self.at(op, follow) as where:
            if where is None:
                return
            fd, name, st = where
            if op.kind == "remove" or (op.kind == "rmdir" and op.forced is not None):
                safeio.remove_tree_at(fd, name, "apply")
            elif op.kind == "rmdir":
                try:
                    os.rmdir(name, dir_fd=fd)
                except OSError as exc:
                    if exc.errno != errno.ENOTEMPTY:
                        raise
                    self.outcome.kept[op.path] = "still holds paths that are not captured"
                    return
                safeio.step("apply.rmdir")
            elif op.kind == "mkdir":
                if st is not None:
                    safeio.remove_tree_at(fd, name, "apply")  # forced: something uncaptured is in the way
                os.mkdir(name, MKDIR_MODE, dir_fd=fd)
                safeio.chmod_at(fd, name, MKDIR_MODE)  # whatever the umask
                safeio.step("apply.mkdir")
            else:  # chmod
                assert op.entry is not None
                safeio.chmod_at(fd, name, op.entry.mode)
                safeio.step("apply.chmod")
                self.outcome.applied[op.path] = None
                self.mode_durable(op, fd, name)
                return
            self.outcome.applied[op.path] = None
            touched.add(op.path.rpartition(b"/")[0])

    def mode_durable(self, op: Op, fd: int, name: bytes) -> None:
        """A chmod is in its own inode only, which no fsync of the parent carries. The inode is
        opened now (later, a directory's parent may have lost the owner's search permission
        to its own chmod) and fsynced with the others at the end of the phase, or of
        ``BATCH`` of them (:meth:`sync_modes`): the first fsync carries most of the rest."""
        try:
            ifd = safeio.open_for_sync(fd, name)
            if ifd is None:  # the user's own unreadable, unwritable inode: its file system
                safeio.sync_fs_at(fd)
                safeio.step("apply.fsync_mode")
                return
        except OSError as exc:
            raise stopped(exc, f"making the mode of {show(op.path)} durable") from exc
        self.modes.append((op.path, ifd))
        if len(self.modes) >= BATCH:
            self.sync_modes()

    def sync_modes(self) -> None:
        """fsync the inodes whose mode changed (:meth:`mode_durable`); an error stops the apply."""
        modes, self.modes = self.modes, []
        try:
            for path, ifd in modes:
                try:
                    safeio.fsync(ifd)
                except OSError as exc:
                    raise stopped(exc, f"making the mode of {show(path)} durable") from exc
                safeio.step("apply.fsync_mode")
        finally:
            for _, ifd in modes:
                os.close(ifd)

    def writes(self, batch: Sequence[tuple[Op, str | None, Sequence[Op]]], touched: set[bytes]) -> None:
        """Temp files for the whole batch, one fsync each, then the renames, then directory syncs.

        Only temps whose fsync succeeded are renamed; every other staged temp is removed,
        also when a full disk stops the batch.
        """
        staged: list[tuple[Op, str, int, int | None]] = []  # op, temp, its directory's fd, temp fd
        published: set[str] = set()
        try:
            for op, temp, follow in batch:
                with self.guarded(op):
                    if op.kind == "chmod":
                        self.one(op, follow, touched)
                    else:
                        assert temp is not None
                        self.stage(op, temp, follow, staged)
            synced = []
            for entry in staged:
                op, _, _, tfd = entry
                with self.guarded(op):
                    if tfd is not None:
                        safeio.fsync(tfd)  # an error is final: this temp is never published
                        safeio.step("apply.fsync_temp")
                    synced.append(entry)
            for op, temp, dfd, _ in synced:
                with self.guarded(op):
                    self.publish(op, temp, dfd, touched)
                    published.add(temp)  # renamed, or removed by publish itself
        finally:
            for _, temp, dfd, tfd in staged:
                if tfd is not None:
                    os.close(tfd)
                if temp not in published:
                    with contextlib.suppress(OSError):  # the disk may be failing: recovery retries
                        self.dirs.drop_temp(dfd, temp)
                os.close(dfd)

    def stage(
        self, op: Op, temp: str, follow: Sequence[Op], out: list[tuple[Op, str, int, int | None]]
    ) -> None:
        assert op.entry is not None
        with self.at(op, follow) as where:
            if where is None:
                return
            fd = where[0]
            data = self.contents.get(op.entry.key)
            unlink_quiet(fd, temp)  # a leftover of ours under the journaled name
            if op.kind == "symlink":
                os.symlink(data, temp, dir_fd=fd)
                safeio.step("apply.symlink_temp")
                out.append((op, temp, os.dup(fd), None))
                return
            tfd = safeio.write_temp_at(fd, temp, data, op.entry.mode)
            safeio.step("apply.write_temp")
            out.append((op, temp, os.dup(fd), tfd))

    def publish(self, op: Op, temp: str, staged_dir: int, touched: set[bytes]) -> None:
        """Re-check the path right before the rename; a changed path keeps its content."""
        renamed = False
        with self.at(op, [op]) as where:
            if where is not None:
                fd, name, st = where
                if not os.path.samestat(os.fstat(fd), os.fstat(staged_dir)):
                    self.outcome.conflicts[op.path] = "its directory was replaced during the rollback"
                else:
                    if st is not None and stat.S_ISDIR(st.st_mode):
                        safeio.remove_tree_at(
                            fd, name, "apply"
                        )  # forced: an uncaptured directory is in the way
                    os.rename(temp, name, src_dir_fd=fd, dst_dir_fd=fd)
                    safeio.step("apply.rename")
                    renamed = True
                    self.outcome.applied[op.path] = None
                    touched.add(op.path.rpartition(b"/")[0])
        if not renamed:
            self.dirs.drop_temp(staged_dir, temp)
