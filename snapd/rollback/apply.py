"""Applying a rollback plan to a workspace: journaled, re-checked, contained and crash-safe.

Each :class:`~snapd.rollback.plan.Op` says what its path must hold now (``expect``) and what it will
hold (``entry``). Invariants:

- **Write-ahead journal**: before the workspace is touched, the journal (root, token, ops, and
  the temp name each write will use) is published with :func:`safeio.write_atomic`, rewritten
  at phase boundaries, deleted at the end. :func:`recover` rolls forward: an op whose path
  already holds its result (or a later op's on the same path) is recognised *by content* and
  skipped, the others are re-checked and applied. The journal stays until recovery has
  finished, so a crash during recovery is recovered again.
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

import contextlib
import errno
import json
import os
import stat
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from snapd.display import count
from snapd.errors import Conflict, DiskFull, NotFound, StoreError
from snapd.paths import ancestors, decode_path, encode_path, is_snapd_name, temp_name
from snapd.rollback.plan import MKDIR_MODE, Op, Plan, show
from snapd.store import safeio
from snapd.store.objects import parse_key
from snapd.store.trees import Entry

FORMAT = "snapd-apply-1"
BATCH = 128  # writes per batch: bounds open descriptors (a temp file and its directory each)
REPLACED_DIR_MODE = 0o755
_DIR = os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC

Get = Callable[[str], bytes]
Hasher = Callable[[bytes], str]


@dataclass(frozen=True)
class ApplyResult:
    applied: tuple[bytes, ...]  # paths that now hold what the plan wanted
    conflicts: tuple[tuple[bytes, str], ...]  # left as they are: changed meanwhile, or failed
    kept: tuple[tuple[bytes, str], ...]  # the plan's kept paths, and directories still holding others
    left: tuple[tuple[bytes, str], ...]  # ignored at the mark: never touched (not a difference)
    temps_removed: int
    replaced: tuple[bytes, ...]  # symlinks found where a directory was needed, now directories

    @property
    def ok(self) -> bool:
        return not self.conflicts and not self.kept


@dataclass(frozen=True)
class RecoveryResult(ApplyResult):
    root: Path
    token: str


def _phase_of(op: Op) -> str:
    file_mode = op.kind == "chmod" and op.entry is not None and op.entry.kind != "dir"
    return "write" if op.kind in ("write", "symlink") or file_mode else op.kind


class _Engine:
    """Runs ops against the directory behind ``root_fd``; collects what happened."""

    def __init__(self, root_fd: int, get: Get, hasher: Hasher, force: bool) -> None:
        self.root_fd, self.get, self.hasher, self.force = root_fd, get, hasher, force
        self.applied: dict[bytes, None] = {}
        self.conflicts: dict[bytes, str] = {}
        self.kept: dict[bytes, str] = {}
        self.replaced: list[bytes] = []
        self.temps_removed = 0
        self.settled: set[bytes] = set()  # directories of paths found done: synced with the phase

    # -- walking -------------------------------------------------------------------------------

    def open_dir(self, path: bytes, *, replace: bool = True) -> int | str:
        """A descriptor of directory ``path`` (b"" is the root), or why there is none."""
        fd = os.dup(self.root_fd)
        if not path:
            return fd
        here: list[bytes] = []
        for name in path.split(b"/"):
            here.append(name)
            try:
                nfd = os.open(name, _DIR, dir_fd=fd)
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
                self.replaced.append(b"/".join(here))
                nfd = os.open(name, _DIR, dir_fd=fd)
            os.close(fd)
            fd = nfd
        return fd

    # -- judging -------------------------------------------------------------------------------

    def holds(self, fd: int, name: bytes, st: os.stat_result | None, e: Entry | None, exact: bool) -> bool:
        """Does ``name`` hold ``e``? Directories: kind only unless ``exact`` (their mode too)."""
        if e is None or st is None:
            return e is None and st is None
        if e.kind == "dir":
            return stat.S_ISDIR(st.st_mode) and (not exact or stat.S_IMODE(st.st_mode) == e.mode)
        if e.kind == "symlink":
            return stat.S_ISLNK(st.st_mode) and os.readlink(name, dir_fd=fd) == self.get(e.key)
        if not stat.S_ISREG(st.st_mode) or stat.S_IMODE(st.st_mode) != e.mode or st.st_size != e.size:
            return False
        data = safeio.read_file_at(fd, name, st)
        if data is None:
            return False
        digest, size = parse_key(e.key)
        if len(data) != size:
            return False
        return data == self.get(e.key) if "." in e.key else self.hasher(data) == digest  # collision variant

    def done(self, fd: int, name: bytes, st: os.stat_result | None, follow: Sequence[Op]) -> bool:
        """Does the path already hold the result of this op or of a later op on it?"""
        for op in follow:
            if op.kind in ("remove", "rmdir"):
                ok = st is None
            elif op.kind == "mkdir":
                ok = st is not None and stat.S_ISDIR(st.st_mode)
            else:
                ok = self.holds(fd, name, st, op.entry, exact=True)
            if ok:
                return True
        return False

    def admit(self, op: Op, fd: int, name: bytes, st: os.stat_result | None) -> bool:
        """May ``op`` change the path? Records a conflict when not."""
        if op.forced is not None:
            if not self.force:
                self.conflicts[op.path] = f"not captured ({op.forced}): needs --force"
            return self.force
        if self.holds(fd, name, st, op.expect, exact=False):
            return True
        self.conflicts[op.path] = "changed since the plan was made: " + _describe(st)
        return False

    @contextmanager
    def at(self, op: Op, follow: Sequence[Op]) -> Iterator[tuple[int, bytes, os.stat_result | None] | None]:
        """(parent fd, name, state) when ``op`` must run now; None when done, blocked or conflicting."""
        stuck = [a for a in ancestors(op.path) if a in self.conflicts or a in self.kept]
        removal = op.kind in ("remove", "rmdir")
        fd = (
            f"{show(stuck[0])} was left as it is"
            if stuck
            else self.open_dir(op.path.rpartition(b"/")[0], replace=not removal)
        )
        if isinstance(fd, str):
            if removal and not stuck:
                self.applied[op.path] = None  # no directory there: the path is not in the workspace
            else:
                self.conflicts.setdefault(op.path, fd)
            yield None
            return
        try:
            name = op.path.rpartition(b"/")[2] or b"."  # b"": the root itself (its mode)
            st = safeio.lstat_at(fd, name)
            if self.done(fd, name, st, follow):
                self.applied[op.path] = None
                self.settled.add(op.path.rpartition(b"/")[0])  # done before: durable only once synced
                yield None
            else:
                yield (fd, name, st) if self.admit(op, fd, name, st) else None
        finally:
            os.close(fd)

    @contextmanager
    def guarded(self, op: Op) -> Iterator[None]:
        """An OS error leaves the path as it is, reported; a full disk stops the apply."""
        try:
            yield
        except OSError as exc:
            if exc.errno in (errno.ENOSPC, errno.EDQUOT):
                raise stopped(exc, f"restoring {show(op.path)}") from exc
            self.conflicts.setdefault(op.path, f"could not {op.describe()}: {exc.strerror}")

    # -- running -------------------------------------------------------------------------------

    def run(self, ops: Sequence[Op], temps: Sequence[str | None], on_phase: Callable[[int], None]) -> None:
        by_path: dict[bytes, list[int]] = {}
        for k, op in enumerate(ops):
            by_path.setdefault(op.path, []).append(k)
        # A directory's mode is no evidence of progress (a read-only directory is opened, then
        # given its mode back): a chmod of one is judged by its own result only.
        follow = [
            [op] if _dir_chmod(op) else [ops[j] for j in by_path[op.path] if j >= k]
            for k, op in enumerate(ops)
        ]
        k, phase = 0, 0
        while k < len(ops):
            end = k
            while end < len(ops) and _phase_of(ops[end]) == _phase_of(ops[k]):
                end += 1
            touched: set[bytes] = set()
            for start in range(k, end, BATCH):
                batch = range(start, min(end, start + BATCH))
                if _phase_of(ops[k]) == "write":
                    self.writes([(ops[i], temps[i], follow[i]) for i in batch], touched)
                else:
                    for i in batch:
                        with self.guarded(ops[i]):
                            self.one(ops[i], follow[i], touched)
            self.sync_dirs(touched)
            phase += 1
            on_phase(phase)
            k = end

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
                    self.kept[op.path] = "still holds paths that are not captured"
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
            self.applied[op.path] = None
            touched.add(op.path.rpartition(b"/")[0])

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
                        self.drop_temp(dfd, temp)
                os.close(dfd)

    def stage(
        self, op: Op, temp: str, follow: Sequence[Op], out: list[tuple[Op, str, int, int | None]]
    ) -> None:
        assert op.entry is not None
        with self.at(op, follow) as where:
            if where is None:
                return
            fd = where[0]
            data = self.get(op.entry.key)
            _unlink_quiet(fd, temp)  # a leftover of ours under the journaled name
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
                    self.conflicts[op.path] = "its directory was replaced during the rollback"
                else:
                    if st is not None and stat.S_ISDIR(st.st_mode):
                        safeio.remove_tree_at(
                            fd, name, "apply"
                        )  # forced: an uncaptured directory is in the way
                    os.rename(temp, name, src_dir_fd=fd, dst_dir_fd=fd)
                    safeio.step("apply.rename")
                    renamed = True
                    self.applied[op.path] = None
                    touched.add(op.path.rpartition(b"/")[0])
        if not renamed:
            self.drop_temp(staged_dir, temp)

    def drop_temp(self, fd: int, temp: str) -> None:
        if _unlink_quiet(fd, temp):
            self.temps_removed += 1

    def sync_dirs(self, paths: set[bytes]) -> None:
        """fsync each directory changed (or found done) in this phase; an error stops the apply."""
        paths = paths | self.settled
        self.settled = set()
        for path in sorted(paths):
            fd = self.open_dir(path, replace=False)
            if isinstance(fd, int):
                try:
                    if safeio.fsync_dir_at(fd):  # an unreadable directory cannot be: its renames stand
                        safeio.step("apply.fsync_dir")
                except OSError as exc:
                    raise stopped(exc, f"making {show(path) if path else 'the root'} durable") from exc
                finally:
                    os.close(fd)

    def remove_temps(self, ops: Sequence[Op], temps: Sequence[str | None]) -> None:
        for op, temp in zip(ops, temps, strict=True):
            fd = self.open_dir(op.path.rpartition(b"/")[0], replace=False) if temp else None
            if isinstance(fd, int) and temp:
                self.drop_temp(fd, temp)
                os.close(fd)

    def result(self, kept: Sequence[tuple[bytes, str]], left: Sequence[tuple[bytes, str]]) -> dict[str, Any]:
        applied = tuple(p for p in self.applied if p not in self.conflicts and p not in self.kept)
        all_kept = tuple(kept) + tuple(self.kept.items())
        return dict(
            applied=applied,
            conflicts=tuple(self.conflicts.items()),
            kept=all_kept,
            left=tuple(left),
            temps_removed=self.temps_removed,
            replaced=tuple(self.replaced),
        )


def stopped(exc: OSError, what: str) -> StoreError:
    """The error that stops an apply part-way: its journal stays, and it is finished later."""
    later = (
        "the rollback stopped part-way; snapd finishes it (its journal is kept) at the next "
        "request for this workspace, or when it starts again"
    )
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return DiskFull(f"disk full while {what}: free some space on the workspace's disk; {later}")
    return StoreError(f"{exc.strerror or exc} while {what}: {later}", errno=exc.errno)


def _dir_chmod(op: Op) -> bool:
    return op.kind == "chmod" and op.entry is not None and op.entry.kind == "dir"


_KINDS = {stat.S_IFDIR: "directory", stat.S_IFLNK: "symlink", stat.S_IFREG: "file"}


def _describe(st: os.stat_result | None) -> str:
    if st is None:
        return "it is gone"
    kind = _KINDS.get(stat.S_IFMT(st.st_mode), "special file")
    return f"it is now a {kind} (mode {stat.S_IMODE(st.st_mode):04o}, {count(st.st_size, 'byte')})"


def _unlink_quiet(fd: int, name: str) -> bool:
    try:
        os.unlink(name, dir_fd=fd)
    except FileNotFoundError:
        return False
    safeio.step("apply.unlink_temp")
    return True


def _open_root(root: Path) -> int:
    try:
        return os.open(root, _DIR)
    except FileNotFoundError:
        raise NotFound(f"workspace {root} does not exist") from None
    except OSError as exc:
        raise StoreError(f"cannot open workspace {root}: {exc.strerror}") from exc


def apply(
    root: Path, plan: Plan, get: Get, hasher: Hasher, journal: Path, *, force: bool = False
) -> ApplyResult:
    """Apply ``plan`` to the workspace at ``root`` (its real path), journaled in ``journal``.

    Raises Conflict when ``journal`` already exists (an interrupted apply must be recovered
    first). On any exception the journal stays, so :func:`recover` finishes the job.
    """
    if safeio.exists(journal):
        raise Conflict("an interrupted rollback of this workspace must be recovered first")
    temps = [temp_name() if op.kind in ("write", "symlink") else None for op in plan.ops]
    doc: dict[str, Any] = {
        "format": FORMAT,
        "root": encode_path(os.fsencode(root)),
        "token": plan.token,
        "force": force,
        "ops": [dict(op.to_json(), temp=temp) for op, temp in zip(plan.ops, temps, strict=True)],
        "kept": [{"path": encode_path(p), "reason": r} for p, r in plan.kept],
        "left": [{"path": encode_path(p), "reason": r} for p, r in plan.left],
    }

    def record(phase: int) -> None:
        safeio.write_atomic(journal, json.dumps(dict(doc, phase=phase), separators=(",", ":")).encode())

    safeio.ensure_dir(journal.parent)
    root_fd = _open_root(root)
    try:
        record(0)
        engine = _Engine(root_fd, get, hasher, force)
        engine.run(plan.ops, temps, record)
        safeio.unlink(journal)
    finally:
        os.close(root_fd)
    return ApplyResult(**engine.result(plan.kept, plan.left))


def recover(root: Path, journal: Path, get: Get, hasher: Hasher) -> RecoveryResult | None:
    """Finish an apply interrupted by a crash (None when ``journal`` does not exist)."""
    try:
        raw = journal.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise safeio.os_error(exc, "read the rollback journal", journal) from exc
    try:
        doc = json.loads(raw)
        if doc.get("format") != FORMAT:
            raise ValueError(f"unknown format {doc.get('format')!r}")
        ops = [Op.from_json(o) for o in doc["ops"]]
        temps = [o.get("temp") for o in doc["ops"]]
        if any(t is not None and not (is_snapd_name(t) and "/" not in t) for t in temps):
            raise ValueError("a temp file name is not one of snapd's")
        kept = [(decode_path(k["path"]), str(k["reason"])) for k in doc["kept"]]
        left = [(decode_path(k["path"]), str(k["reason"])) for k in doc.get("left", [])]
        journal_root = decode_path(doc["root"])
    except (ValueError, KeyError, TypeError) as exc:
        raise StoreError(f"rollback journal {journal} is unreadable ({exc}); it was left in place") from exc
    if journal_root != os.fsencode(root):
        raise StoreError(f"rollback journal {journal} belongs to {show(journal_root)}, not {root}")
    root_fd = _open_root(root)
    try:
        engine = _Engine(root_fd, get, hasher, bool(doc.get("force")))
        engine.remove_temps(ops, temps)
        engine.run(ops, temps, lambda phase: None)
        safeio.unlink(journal)
    finally:
        os.close(root_fd)
    return RecoveryResult(**engine.result(kept, left), root=root, token=str(doc.get("token", "")))
