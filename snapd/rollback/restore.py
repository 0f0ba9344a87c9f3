"""Restoring a tree into a directory of its own: ``snapctl restore REF --target DEST``, the
workspace as at a mark or a time, written where nothing is overwritten (docs/rollback.md,
"Restore into another directory").

The seam (what a fleet restore, another issue, calls): :func:`write_tree` takes a tree key, the
mode of its root, the store's readers (nodes, objects, the content hasher) and where to write
— no workspace, no registry, no live capture. The daemon's ``restore`` op resolves a local
workspace's reference (a mark, or a time rebuilt from the versions) into those; a fleet restore
hands the tree and readers of wherever its history lives.

Rules:

- DEST is absent (made, 0700 while it is filled) or an empty directory; a symlink is never
  followed; anything else is refused before a byte is written (:class:`TargetRefused`), as is
  a DEST equal to, inside or around snapd's own directories. Its parent must exist.
- The plan is the rollback's: a plan from nothing to the tree (:func:`plan.plan` with no
  current state, made in one walk: :func:`plan.from_nothing`). The fill writes it
  (:func:`apply.fill`, :mod:`snapd.rollback.fill`): DEST
  holds nothing to re-check or roll forward, so every name is created in place (``O_EXCL``:
  what another process put there meanwhile is left as found, a conflict) through directories
  held open; directories made with their modes, but those that would let another user write
  in them or the owner not (made 0700 while they are filled, given their modes deepest first),
  DEST's own mode (the root's at REF) last; then DEST's file system synced once (``syncfs``, which
  reports the write errors it met since the fill began: one stops the restore). When this
  returns, what it counts as written is on disk.
- What the tree holds without content (not captured at REF: over the size cap, unreadable,
  FIFOs and other special files) is listed as not restored, as are directories that could
  not be listed then (only what was captured in them by name is written); the reply is then
  not ``ok``.
- No journal: nothing that was there is changed, so a restore stopped part-way (a full disk,
  a crash) has nothing to roll forward: DEST holds part of the tree, which the error says;
  remove it and restore again.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from snapd.errors import NotFound, SnapdError, TargetRefused, UsageError
from snapd.rollback import apply
from snapd.rollback.checks import Get, Hasher
from snapd.rollback.dirs import FINISHED_LATER
from snapd.rollback.ops import MKDIR_MODE
from snapd.rollback.plan import from_nothing as plan_of
from snapd.rollback.running import Progress
from snapd.store import trees


@dataclass(frozen=True)
class Restored:
    target: Path
    made: bool  # DEST did not exist: the restore made it
    counts: dict[str, int]  # files, symlinks, dirs, bytes
    not_restored: tuple[tuple[bytes, str], ...]  # in the tree without content, or unlisted
    conflicts: tuple[tuple[bytes, str], ...]  # written under it meanwhile: left as found

    @property
    def ok(self) -> bool:
        return not self.not_restored and not self.conflicts


def check_target(dest: Path, own_dirs: Iterable[Path]) -> tuple[Path, int | None]:
    """Where ``dest`` (absolute) really is, and its mode when it is an empty directory (None:
    absent). TargetRefused when it may not be written; nothing is changed."""
    if not dest.is_absolute():
        raise UsageError(f"the restore target must be an absolute path, got {dest}")
    try:
        parent = dest.parent.resolve(strict=True)
    except (OSError, RuntimeError):
        raise NotFound(
            f"cannot restore into {dest}: the directory that would hold it, {dest.parent}, does "
            f"not exist (make it, `mkdir -p {dest.parent}`, then restore again)"
        ) from None
    real = parent / dest.name if dest.name not in ("", ".", "..") else dest.resolve()
    for own in own_dirs:
        own = own.resolve()
        if real == own or own in real.parents or real in own.parents:
            raise TargetRefused(f"refusing to restore into {real}: it overlaps snapd's own directory {own}")
    try:
        st = os.lstat(real)
    except FileNotFoundError:
        return real, None
    except OSError as exc:
        raise TargetRefused(f"cannot restore into {real}: {exc.strerror}") from None
    if stat.S_ISLNK(st.st_mode):
        raise TargetRefused(
            f"refusing to restore into {real}: it is a symlink (never followed); name a directory"
        )
    if not stat.S_ISDIR(st.st_mode):
        raise TargetRefused(f"refusing to restore into {real}: it is not a directory; nothing was written")
    try:
        held = sorted(os.listdir(real))
    except OSError as exc:
        raise TargetRefused(f"cannot restore into {real}: {exc.strerror}") from None
    if held:
        raise TargetRefused(
            f"refusing to restore into {real}: it is not empty ({len(held)} entr"
            f"{'y' if len(held) == 1 else 'ies'}, such as {held[0]!r}); a restore writes only into "
            "an absent or empty directory; nothing was written"
        )
    return real, stat.S_IMODE(st.st_mode)


def write_tree(
    dest: Path,
    tree: str,
    root_mode: int | None,
    load: trees.Load,
    get: Get,
    hasher: Hasher,
    own_dirs: Iterable[Path],
    progress: Progress | None = None,
) -> Restored:
    """Write ``tree`` (its root's mode ``root_mode``; None: DEST's is left) into ``dest``."""
    real, mode_now = check_target(dest, own_dirs)
    planned = plan_of(load, tree, (MKDIR_MODE if mode_now is None else mode_now, root_mode))
    writes = sum(op.kind in ("write", "symlink") for op in planned.ops)
    done = 0

    def counting(key: str) -> bytes:
        nonlocal done
        data = get(key)
        done += 1
        if progress is not None:
            progress(done, writes)
        return data

    if mode_now is None:
        apply.make_root(real)
    try:
        result = apply.fill(real, planned, counting, hasher)
    except SnapdError as exc:  # a full or failing disk: no journal to finish it, say what is left
        cause = exc.message.replace(f": {FINISHED_LATER}", "").replace(f"; {FINISHED_LATER}", "")
        cause = cause.replace("the workspace's disk", "the target's disk")
        raise type(exc)(
            f"the restore into {real} stopped part-way ({cause}); {real} holds part of the "
            "tree: remove it and restore again",
            **exc.details,
        ) from exc
    counts = {"files": 0, "symlinks": 0, "dirs": 0, "bytes": 0}
    applied = set(result.applied)
    for op in planned.ops:
        if op.entry is not None and op.path in applied:
            if op.kind == "write":
                counts["files"] += 1
                counts["bytes"] += op.entry.size
            elif op.kind == "symlink":
                counts["symlinks"] += 1
            elif op.kind == "mkdir":
                counts["dirs"] += 1
    unlisted = [  # every directory of the tree has its mkdir: no second walk of the tree
        (op.path, "could not be listed at the mark: only what was captured in it by name is restored")
        for op in planned.ops
        if op.kind == "mkdir" and trees.unlisted(op.entry)
    ]
    return Restored(real, mode_now is None, counts, (*result.kept, *unlisted), result.conflicts)
