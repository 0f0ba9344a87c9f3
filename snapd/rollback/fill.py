"""The fill: a plan made from nothing written into an empty directory that no workspace
watches — a restore's target (:mod:`snapd.rollback.restore`, through :func:`apply.fill`).

Nothing is there to re-check, replace or roll forward, so the writes are direct:

- **Directories** are made with their modes where those let the owner fill them and no one
  else write into them (most: 0755, 0750, 0711), else 0700 (``MKDIR_MODE``: read-only, 0000,
  sticky, group- or other-writable ones; :func:`~snapd.rollback.writers.dir_mode`), and held
  open (``O_PATH|O_NOFOLLOW``) while what they hold is written, every change an ``*at`` call
  relative to them: never a path walked again from the root, never a symlink followed.
- **Files** are created under their own names ``O_CREAT|O_EXCL|O_NOFOLLOW``, written and
  given their mode (by the create, or by ``fchmod`` after the bytes:
  :func:`~snapd.rollback.writers.write_file`) by a pool of ``WRITERS`` threads, while this one
  reads the next contents and makes the directories. **Symlinks** are made in place.
- **A name found taken** (a process wrote into the target meanwhile) is left as found: a
  conflict — unless it already holds what the tree has there (a directory where the tree has
  one is filled as it is; its mode is changed only where the tree's is not 0700).
- **At the end**, deepest first, each directory made 0700 is given its mode (the root its own
  last; only those and the directories above them are opened again), then the target's
  file system is synced once (``syncfs``, through a descriptor opened before the first
  write), which makes every file's bytes, every entry and every mode durable together. When
  :meth:`Fill.run` returns, everything it counts as written is on disk.
- **Where a sync of the file system is not trusted to reach the disk** (any file system but
  the local ones :data:`safeio.SYNCFS_REACHES_DISK` names: a FUSE server, sshfs's among them,
  gets no request from a ``syncfs``), each file is fsynced by its writer instead, a file
  whose fsync fails is removed (a conflict), and each directory is fsynced at the end.
- **A directory on another file system** (one mounted there meanwhile) is not filled: a
  conflict, with what it would have held.

One ``syncfs`` instead of an ``fsync`` per file and per directory: the same promise at the
end, and a quarter of the time on a fresh ext4 (the journal commits once, not once per file:
docs/benchmarks.md, session 21). Its price is that a write error the disk reports is known
only for the whole target, not per file: it stops the fill, and the restore says the target
holds part of the tree (what :func:`snapd.rollback.dirs.stopped` says of a failing disk).

Failures: a content the store cannot read leaves its path unwritten (damaged); an OS error
leaves its path unwritten, a conflict (a file begun is removed), and with a directory all it
would hold. A full disk, and a failing sync, stop the fill
(:func:`snapd.rollback.dirs.stopped`): the target then holds part of the tree, which the
caller says. Every change calls :func:`safeio.step` (``apply.*``).
"""

from __future__ import annotations

import errno
import os
import stat
from collections import deque
from collections.abc import Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor

from snapd.errors import CorruptObject, MissingObject
from snapd.rollback.checks import Contents, describe_state
from snapd.rollback.dirs import DIR_FLAGS, Outcome, stopped
from snapd.rollback.ending import READ_DIR, Ending
from snapd.rollback.modes import order
from snapd.rollback.ops import MKDIR_MODE, Op, show
from snapd.rollback.writers import Failure, dir_mode, make_dirs, write_files
from snapd.store import safeio
from snapd.store.damage import Unreadable

WRITERS = 4  # threads writing files (system calls, waits on the disk: not on the GIL)
IN_FLIGHT = 256  # files handed to them and not settled: bounds open descriptors
IN_FLIGHT_BYTES = 64 << 20  # and their contents held in memory (one larger file is alone)
MKDIRS = 16  # directories made in one task
BATCH = 32  # files handed over in one task: a task (a future, a queue entry, a wake-up) per
BATCH_BYTES = 1 << 20  # file cost the request thread more than the writes (mixed-83k: 4 of 20 s)
_FULL = (errno.ENOSPC, errno.EDQUOT)
Started = dict[bytes, tuple["Future[list[Failure]]", int]]  # directory -> the task making it, its place


def _name(path: bytes) -> bytes:
    return path.rpartition(b"/")[2] or b"."


class Fill:
    """Writes ``ops`` (a plan from nothing) below ``root_fd``; ``outcome`` says what happened."""

    def __init__(self, root_fd: int, ops: Sequence[Op], contents: Contents) -> None:
        self.root_fd, self.contents = root_fd, contents
        self.outcome = Outcome()
        self.children: dict[bytes, list[Op]] = {}  # directory -> the ops creating what it holds
        self.modes: dict[bytes, int] = {}  # directory -> its mode at the end (the last chmod's)
        self.early: list[Op] = []  # chmods before anything is written (a read-only root opened)
        for op in ops:
            if op.kind == "chmod":
                assert op.entry is not None and op.entry.kind == "dir", op
                if order(op)[0] == 0:  # before anything is written: only the root's can be
                    assert not op.path, op
                    self.early.append(op)
                else:
                    self.modes[op.path] = op.entry.mode
            else:
                assert op.kind in ("mkdir", "write", "symlink") and op.expect is None, op
                self.children.setdefault(op.path.rpartition(b"/")[0], []).append(op)
        self.made: set[bytes] = set()  # directories the fill made (adopted ones keep their mode)
        self.at_final: set[bytes] = set()  # directories found at their final mode (made or adopted)
        self.private = False  # the root lets no one in more than at the end (fill)
        self.batch: list[tuple[Op, int, bytes, int]] = []  # files not yet handed to the pool (mode last)
        self.batch_bytes = 0
        self.pending: deque[tuple[list[tuple[Op, int, int]], Future[list[Failure]]]] = deque()  # in the pool
        self.in_pool = 0  # files of the pending tasks
        self.held = 0  # bytes of the contents of the files in the batch and in the pool
        self.closing: deque[tuple[int, int]] = deque()  # (files queued before, directory fd)
        self.queued = self.settled = 0
        self.umask = _umask()
        self.root_dev = os.fstat(root_fd).st_dev  # a directory on another device is not filled
        self.each = False  # each file and directory fsynced: syncfs is not trusted there (run)

    def run(self) -> None:
        """Fill the target, give its directories their modes and sync it
        (:class:`~snapd.rollback.ending.Ending`); the descriptor that syncs it is opened first,
        so that the sync answers for every write of the fill."""
        try:
            sync_fd: int | None = os.open(".", READ_DIR, dir_fd=self.root_fd)
        except PermissionError:  # a root we may not read: every file system is synced instead
            sync_fd = None
        except OSError as exc:
            raise stopped(exc, "opening the target") from exc
        try:
            self.each = not safeio.syncfs_reaches_disk(self.root_fd)
        except OSError as exc:
            if sync_fd is not None:
                os.close(sync_fd)
            raise stopped(exc, "opening the target") from exc
        try:
            self.fill()
            made = (self.children, self.modes, self.made, self.at_final, self.outcome)
            Ending(self.root_fd, *made, self.each).run(sync_fd)
        finally:
            if sync_fd is not None:
                os.close(sync_fd)

    def fill(self) -> None:
        for op in self.early:
            assert op.entry is not None
            safeio.chmod_fd(self.root_fd, op.entry.mode)
            safeio.step("apply.chmod")
        now = stat.S_IMODE(os.fstat(self.root_fd).st_mode)
        self.private = now & 0o077 & ~self.modes.get(b"", now) == 0
        with ThreadPoolExecutor(WRITERS, thread_name_prefix="snapd-fill") as pool:
            try:
                self.write_all(pool)
                self.hand_over(pool)
                self.settle(0)
            except BaseException:
                pool.shutdown(wait=True)  # stopped part-way: the files being written first
                self.pending.clear()
                self.batch.clear()
                raise
            finally:
                for _, fd in self.closing:
                    os.close(fd)
                self.closing.clear()

    # -- writing ---------------------------------------------------------------------------

    def write_all(self, pool: ThreadPoolExecutor) -> None:
        """Every directory made and filled, parents first, each held open while it is."""
        stack = [self.enter(self.root_fd, b"", pool)]
        try:
            while stack:
                fd, todo, started = stack[-1]
                op = next(todo, None)
                if op is None:
                    stack.pop()
                    if stack:
                        self.close_dir(fd, pool)
                elif op.kind == "mkdir":
                    task = started.pop(op.path, None)
                    if task is None:
                        failure = make_dirs(fd, [self.named(op)], self.umask)[0]
                    else:
                        failure = task[0].result()[task[1]]
                    sub = self.mkdir(fd, op, failure)
                    if sub is None:
                        self.block(op.path)
                    else:
                        stack.append(self.enter(sub, op.path, pool))
                else:
                    self.write(fd, op, pool)
        finally:  # stopped part-way: closed once the pool is done with them (run)
            self.closing.extend((self.queued, fd) for fd, _, _ in stack[1:])

    def enter(self, fd: int, path: bytes, pool: ThreadPoolExecutor) -> tuple[int, Iterator[Op], Started]:
        """Directory ``path``, open as ``fd``, entered: the ops of what it holds, and the
        directories among them but the first handed to the pool to be made (``MKDIRS`` a task)
        while this thread makes the first and fills it. A ``mkdir`` waits on the file system's
        journal, and an aged, busy one makes them by the millisecond (docs/benchmarks.md,
        session 21); the first is made here when it is reached, since waiting on a task for it
        at once would cost as much as making it."""
        subdirs = [op for op in self.children.get(path, ()) if op.kind == "mkdir"][1:]
        started: Started = {}
        for i in range(0, len(subdirs), MKDIRS):
            chunk = subdirs[i : i + MKDIRS]
            task = pool.submit(make_dirs, fd, [self.named(op) for op in chunk], self.umask)
            started.update((op.path, (task, j)) for j, op in enumerate(chunk))
        return fd, iter(self.children.get(path, ())), started

    def named(self, op: Op) -> tuple[bytes, int]:
        """A directory's name and the mode it is made with (:func:`writers.dir_mode`; 0700
        while the target's root lets others in more than it will at the end)."""
        assert op.entry is not None
        return _name(op.path), dir_mode(op.entry.mode, self.umask) if self.private else MKDIR_MODE

    def mkdir(self, fd: int, op: Op, failure: Failure) -> int | None:
        """The new directory's descriptor, once made (``failure`` None) or found made there
        meanwhile; None (its conflict recorded) when there is none."""
        name = _name(op.path)
        if failure is not None and failure[0] == "mkdir":
            if isinstance(failure[1], FileExistsError):
                return self.adopt(fd, op)
            self.failed(op, failure[1])
            return None
        safeio.step("apply.mkdir")
        self.made.add(op.path)
        if failure is not None:  # made, but its chmod failed
            self.failed(op, failure[1])
            return None
        try:
            sub = os.open(name, DIR_FLAGS, dir_fd=fd)
        except OSError as exc:
            if exc.errno in (errno.ENOENT, errno.ENOTDIR, errno.ELOOP):
                self.taken(fd, op)  # replaced since it was made (by the writers, a while ago)
            else:
                self.failed(op, exc)
            return None
        return self.entered(sub, op)

    def entered(self, sub: int, op: Op) -> int | None:
        """``sub``, the directory at ``op.path``, unless it is on another file system (mounted
        there meanwhile: not the target's, and not what its final sync makes durable)."""
        try:
            st = os.fstat(sub)
        except OSError as exc:
            os.close(sub)
            self.failed(op, exc)
            return None
        other = st.st_dev != self.root_dev
        if stat.S_IMODE(st.st_mode) == self.modes.get(op.path, MKDIR_MODE):
            self.at_final.add(op.path)  # made (or found) with its final mode: none to give
        if other:
            os.close(sub)
            self.outcome.conflicts[op.path] = "another file system was mounted there meanwhile: left as it is"
            return None
        self.outcome.applied[op.path] = None
        return sub

    def adopt(self, fd: int, op: Op) -> int | None:
        """A directory made there meanwhile is filled as it is; anything else is a conflict."""
        try:
            sub = os.open(_name(op.path), DIR_FLAGS, dir_fd=fd)
        except OSError:
            self.taken(fd, op)
            return None
        return self.entered(sub, op)

    def taken(self, fd: int, op: Op) -> None:
        name = _name(op.path)
        st = safeio.lstat_at(fd, name)
        if op.kind != "mkdir" and self.contents.holds(fd, name, st, op.entry, exact=True):
            self.outcome.applied[op.path] = None  # holds the tree's entry already
            return
        self.outcome.conflicts[op.path] = "made there meanwhile, not by the restore: " + describe_state(st)

    def failed(self, op: Op, exc: OSError) -> None:
        """An OS error leaves the path unwritten (a conflict); a full disk stops the fill."""
        if exc.errno in _FULL:
            raise stopped(exc, f"restoring {show(op.path)}") from exc
        self.outcome.conflicts.setdefault(op.path, f"could not {op.describe()}: {exc.strerror}")

    def block(self, path: bytes) -> None:
        """What a directory left unwritten would have held: unwritten too, and said so."""
        why = f"{show(path)} was left as it is"
        below = [path]
        while below:
            for op in self.children.get(below.pop(), ()):
                self.outcome.conflicts.setdefault(op.path, why)
                if op.kind == "mkdir":
                    below.append(op.path)

    def write(self, fd: int, op: Op, pool: ThreadPoolExecutor) -> None:
        """A symlink made now; a file batched for the pool with its directory's descriptor
        (closed only once the file is settled: :meth:`close_dir`)."""
        assert op.entry is not None
        try:
            data = self.contents.get(op.entry.key)
        except (CorruptObject, MissingObject) as exc:
            self.outcome.damaged.setdefault(op.path, Unreadable.of(exc))
            return
        if op.kind == "write":
            if self.in_pool + len(self.batch) >= IN_FLIGHT or self.held + len(data) > IN_FLIGHT_BYTES:
                self.hand_over(pool)
                self.settle(IN_FLIGHT // 2, IN_FLIGHT_BYTES - len(data))
            self.batch.append((op, fd, data, op.entry.mode))
            self.batch_bytes += len(data)
            self.held += len(data)
            self.queued += 1
            if len(self.batch) >= BATCH or self.batch_bytes >= BATCH_BYTES:
                self.hand_over(pool)
            return
        try:
            os.symlink(data, _name(op.path), dir_fd=fd)
        except FileExistsError:
            self.taken(fd, op)
            return
        except OSError as exc:
            self.failed(op, exc)
            return
        safeio.step("apply.symlink")
        self.outcome.applied[op.path] = None

    def hand_over(self, pool: ThreadPoolExecutor) -> None:
        """The batch, one task for the pool."""
        if not self.batch:
            return
        files = [(fd, _name(op.path), data, mode) for op, fd, data, mode in self.batch]
        future = pool.submit(write_files, files, self.each, self.umask)
        self.pending.append(([(op, fd, len(data)) for op, fd, data, _ in self.batch], future))
        self.in_pool += len(self.batch)
        self.batch, self.batch_bytes = [], 0

    def settle(self, keep: int, room: int = IN_FLIGHT_BYTES) -> None:
        """Wait for the oldest tasks until at most ``keep`` files are left in the pool, and
        the contents held at most ``room`` bytes: each file is written, or unwritten and a
        conflict; a full disk stops the fill."""
        while self.pending and (self.in_pool > keep or self.held > room):
            files, future = self.pending[0]
            failures = future.result()
            self.pending.popleft()
            self.in_pool -= len(files)
            for (op, fd, size), failure in zip(files, failures, strict=True):
                self.settled += 1
                self.held -= size
                if failure is None:
                    safeio.step("apply.write")
                    self.outcome.applied[op.path] = None
                elif isinstance(failure[1], FileExistsError):
                    self.taken(fd, op)
                elif failure[0] == "sync" and failure[1].errno not in _FULL:
                    why = f"could not be made durable: {failure[1].strerror}; removed"
                    self.outcome.conflicts[op.path] = why
                else:
                    self.failed(op, failure[1])
        while self.closing and self.closing[0][0] <= self.settled:
            os.close(self.closing.popleft()[1])

    def close_dir(self, fd: int, pool: ThreadPoolExecutor) -> None:
        """Close a directory once the files queued in it are settled; no more than
        ``IN_FLIGHT`` directories wait so (their files in the batch, or in the pool)."""
        self.closing.append((self.queued, fd))
        if len(self.closing) > IN_FLIGHT:
            self.hand_over(pool)
            self.settle(0)
        else:
            self.settle(self.in_pool)


def _umask() -> int:
    """The process's umask, read without changing it (another thread may be creating files)."""
    try:
        with open("/proc/self/status", "rb") as f:
            for line in f:
                if line.startswith(b"Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    return 0o777  # unknown: assume the worst (every directory made is given 0700 at once)
