"""Applying a rollback plan to a workspace: journaled, re-checked, contained and crash-safe.

The parts: the journal (:mod:`snapd.rollback.journal`), the engine that runs the ops phase by
phase (:mod:`snapd.rollback.engine`), the directory descriptors it works through and the tally
of what happened (:mod:`snapd.rollback.dirs`), and the comparisons it makes
(:mod:`snapd.rollback.checks`). This module puts them together: :func:`apply` and
:func:`recover`; and :func:`fill`, a plan from nothing written into an empty directory no
workspace watches (a restore's target: :mod:`snapd.rollback.fill`, none of the below needed).

Each :class:`~snapd.rollback.ops.Op` says what its path must hold now (``expect``) and what it will
hold (``entry``). Invariants:

- **Write-ahead journal**: before the workspace is touched, the journal (root, token, ops, and
  the temp name each write will use) is published with :func:`safeio.write_atomic`, rewritten
  at phase boundaries, deleted at the end, durably (a deletion a power cut undoes would bring
  back the journal of a finished rollback, and start-up would run it again). :func:`recover`
  rolls forward: an op whose path already holds its result (or a later op's on the same path)
  is recognised *by content* and skipped, the others are re-checked and applied. The journal
  stays until recovery has finished, so a crash during recovery is recovered again.
- **Re-check**: right before a path changes it must still hold ``expect`` (kind, mode, size
  and content hash; link text; "a directory"; absent), else it is left as it is: a conflict.
- **Containment**: every change is an ``*at`` call on directory descriptors opened
  ``O_PATH|O_DIRECTORY|O_NOFOLLOW`` one component at a time from the root. A parent that is
  (or became) a symlink is never followed: it is replaced by a directory. Removals below a
  non-directory are already done: the path is not in the workspace.
- **Files** are written to ``.snapd-<hex>~`` temps in their own directory (``O_EXCL``,
  ``fchmod`` to their mode), fsynced as a batch, renamed over the path, and each touched
  directory is fsynced once; they carry the current mtime. Every step calls
  :func:`safeio.step` (``apply.*``), where the crash tests stop the process.
- A **forced** op (``Op.forced``: its content could not be captured) replaces or removes
  whatever is there without comparing, and only when ``force`` is given; else a conflict.
- **Failures of the disk**: a temp file whose fsync fails is never renamed into place (an
  fsync error is final: retrying it would report success for data the kernel may have
  dropped); its path is left as it is, a conflict. A full disk, or a directory fsync that
  fails, stops the apply with an error that says so; the staged temps are removed and the
  journal stays, so the rollback is finished (rolled forward, every path re-checked) as soon
  as snapd can write again: at the next request for the workspace, or at start-up. A path the
  journal finds already done has its directory fsynced again by whoever finishes it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from snapd.errors import Conflict, NotFound, StoreError
from snapd.paths import temp_name
from snapd.rollback import journal as journals
from snapd.rollback.checks import Contents, Get, Hasher
from snapd.rollback.dirs import DIR_FLAGS, Dirs, Outcome
from snapd.rollback.engine import Engine
from snapd.rollback.fill import Fill
from snapd.rollback.ops import MKDIR_MODE, Plan
from snapd.rollback.running import Progress
from snapd.store import safeio
from snapd.store.damage import Unreadable


@dataclass(frozen=True)
class ApplyResult:
    applied: tuple[bytes, ...]  # paths that now hold what the plan wanted
    conflicts: tuple[tuple[bytes, str], ...]  # left as they are: changed meanwhile, or failed
    kept: tuple[tuple[bytes, str], ...]  # the plan's kept paths, and directories still holding others
    damaged: tuple[tuple[bytes, Unreadable], ...]  # the store cannot read their content: left as they are
    left: tuple[tuple[bytes, str], ...]  # ignored at the mark: never touched (not a difference)
    temps_removed: int
    replaced: tuple[bytes, ...]  # symlinks found where a directory was needed, now directories

    @property
    def ok(self) -> bool:
        return not self.conflicts and not self.kept and not self.damaged


@dataclass(frozen=True)
class RecoveryResult(ApplyResult):
    root: Path
    token: str


def _open_root(root: Path) -> int:
    try:
        return os.open(root, DIR_FLAGS)
    except FileNotFoundError:
        raise NotFound(f"workspace {root} does not exist") from None
    except OSError as exc:
        raise StoreError(f"cannot open workspace {root}: {exc.strerror}") from exc


def make_root(root: Path) -> None:
    """Make the directory a plan is applied into when it is not there (a workspace root that
    was deleted, a restore's target): 0700 while it is filled (the plan's chmod of the root
    gives it its mode at the mark last), durably (its parent fsynced). The parent must exist:
    the tree is recreated, not the directories around it."""
    parent = root.parent
    if not parent.is_dir():
        raise NotFound(
            f"{root} cannot be made: the directory that holds it, {parent}, does not exist "
            f"(make it, `mkdir -p {parent}`, then try again)"
        )
    try:
        os.mkdir(root, MKDIR_MODE)
        os.chmod(root, MKDIR_MODE)  # whatever the umask
    except OSError as exc:
        raise StoreError(f"cannot make {root}: {exc.strerror}") from exc
    safeio.step("apply.make_root")
    safeio.fsync_dir(parent)


def _engine(root_fd: int, get: Get, hasher: Hasher, force: bool) -> Engine:
    return Engine(Dirs(root_fd, Outcome()), Contents(get, hasher), force)


def apply(
    root: Path,
    plan: Plan,
    get: Get,
    hasher: Hasher,
    journal: Path,
    *,
    force: bool = False,
    progress: Progress | None = None,
) -> ApplyResult:
    """Apply ``plan`` to the workspace at ``root`` (its real path), journaled in ``journal``;
    ``progress(done, total)`` counts its ops (the lines of the plan), for ``status``.

    Raises Conflict when ``journal`` already exists (an interrupted apply must be recovered
    first). On any exception the journal stays, so :func:`recover` finishes the job.
    """
    if safeio.exists(journal):
        raise Conflict("an interrupted rollback of this workspace must be recovered first")
    temps = [temp_name() if op.kind in ("write", "symlink") else None for op in plan.ops]
    writer = journals.Writer(journal, root, plan, temps, force)
    safeio.ensure_dir(journal.parent)
    root_fd = _open_root(root)
    try:
        writer.record(0)
        engine = _engine(root_fd, get, hasher, force)
        engine.run(plan.ops, temps, writer.record, progress)
        journals.remove(journal)
    finally:
        os.close(root_fd)
    return ApplyResult(**engine.outcome.result(plan.kept, plan.left))


def fill(root: Path, plan: Plan, get: Get, hasher: Hasher) -> ApplyResult:
    """Write ``plan``, made from nothing (every op creates), into the empty directory ``root``
    that no workspace watches (a restore's target): :class:`snapd.rollback.fill.Fill`, in
    place, without a journal or temps. Nothing there is replaced, so a fill stopped part-way
    has nothing to roll forward; the caller says what is left (:mod:`snapd.rollback.restore`)."""
    root_fd = _open_root(root)
    try:
        filling = Fill(root_fd, plan.ops, Contents(get, hasher))
        filling.run()
    finally:
        os.close(root_fd)
    return ApplyResult(**filling.outcome.result(plan.kept, plan.left))


def recover(root: Path, journal: Path, get: Get, hasher: Hasher) -> RecoveryResult | None:
    """Finish an apply interrupted by a crash (None when ``journal`` does not exist)."""
    found = journals.read(journal, root)
    if found is None:
        return None
    root_fd = _open_root(root)
    try:
        engine = _engine(root_fd, get, hasher, found.force)
        engine.dirs.reopen(found.ops)
        engine.dirs.remove_temps(found.ops, found.temps)
        engine.run(found.ops, found.temps, lambda phase: None)
        journals.remove(journal)
    finally:
        os.close(root_fd)
    return RecoveryResult(**engine.outcome.result(found.kept, found.left), root=root, token=found.token)
