"""Reading a workspace into the store: the baseline walk and capturing changed paths.

This is where file system reads meet the store. Files are opened with ``O_NOFOLLOW`` and
``O_NONBLOCK`` (a path swapped for a symlink or a FIFO between ``lstat`` and ``open`` is
never followed or waited on); a file whose size or mtime changes while it is read is read
again a bounded number of times, then stored as last read and reported ``unstable``.
Everything not captured is reported with a reason, never dropped silently.

Costs: ``ingest_tree`` is one walk of the workspace; ``capture_paths`` reads only the paths
it is given and rewrites only their directories' tree nodes.
"""

from __future__ import annotations

import contextlib
import os
import stat
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from snapd import objects, trees
from snapd.batch import Batch, fingerprint
from snapd.ignore import VCS_NAMES
from snapd.records import Mark
from snapd.store import Store

DEFAULT_SIZE_CAP = 64 << 20
MAX_REREADS = 3
EXAMPLES = 10
WORKERS = 2  # more only adds GIL contention: the main thread is the bottleneck
WINDOW = 16  # chunks in flight
CHUNK = 64  # paths per chunk

Sig = tuple[int, int, int, int, int]
"""What a stat says about a path: (st_mode, size, mtime_ns, ctime_ns, inode)."""


def sig_of(st: os.stat_result) -> Sig:
    return (st.st_mode, st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino)


Ignored = Callable[[bytes, bool], bool]
"""(relative path, is_dir) -> True when the path is not captured."""


def vcs_only(rel: bytes, is_dir: bool) -> bool:
    return rel.rsplit(b"/", 1)[-1] in VCS_NAMES


@dataclass
class Report:
    """What a capture did, for mark summaries and ``status``."""

    files: int = 0
    size: int = 0
    skipped: dict[str, list[bytes]] = field(default_factory=dict)
    skipped_count: int = 0
    unstable: list[bytes] = field(default_factory=list)
    # One report spans every capture between two marks: a path skipped (or unstable) by two
    # of them is still one path, counted and listed once.
    _skipped_paths: set[bytes] = field(default_factory=set, repr=False)

    def skip(self, rel: bytes, reason: str) -> None:
        if rel in self._skipped_paths:
            return
        self._skipped_paths.add(rel)
        self.skipped_count += 1
        examples = self.skipped.setdefault(reason, [])
        if len(examples) < EXAMPLES:
            examples.append(rel)


@dataclass
class IgnoredTally:
    """Paths left out by ignore rules, by reason, with a few examples (DESIGN.md 2: nothing is
    left out silently). Counted by walks that judge every name; a directory counts once."""

    counts: dict[str, int] = field(default_factory=dict)
    examples: dict[str, list[bytes]] = field(default_factory=dict)

    def add(self, reason: str, rel: bytes) -> None:
        self.counts[reason] = self.counts.get(reason, 0) + 1
        ex = self.examples.setdefault(reason, [])
        if len(ex) < 5:
            ex.append(rel)

    def to_json(self) -> dict[str, Any]:
        return {
            "counts": dict(self.counts),
            "total": sum(self.counts.values()),
            "examples": {k: [os.fsdecode(p) for p in v] for k, v in self.examples.items()},
        }


@dataclass(frozen=True)
class IngestResult:
    files: int
    bytes: int
    tree: str
    mark_id: str
    report: Report


@dataclass(slots=True)
class Read:
    """One path as found on disk, read and (for contents) hashed, ready for the store."""

    rel: bytes
    kind: Literal["file", "symlink", "dir", "missing", "skipped"]
    mode: int = 0
    data: bytes = b""
    reason: str = ""
    unstable: bool = False
    digest: str | None = None
    encoded: tuple[int, bytes] | None = None
    sig: Sig | None = None  # (st_mode, size, mtime_ns, ctime_ns, inode) as read
    sha: bytes | None = None  # store.fingerprint, for contents seen earlier in this capture
    listed: bool = True  # a directory: whether it can be listed (else its contents are unknown)
    dev: int = 0  # a file's st_dev and st_nlink as read: its other names must be captured too
    nlink: int = 1


def parents_real(root: bytes, rel: bytes) -> bool:
    """Every ancestor of ``rel`` below ``root`` is a real directory (not a symlink to one).

    A path whose parent became a symlink does not exist as captured: reading it would read
    through the link, possibly outside the workspace. The link itself is captured as a link.
    """
    parent = rel.rpartition(b"/")[0]
    while parent:
        try:
            if not stat.S_ISDIR(os.lstat(root + b"/" + parent).st_mode):
                return False
        except OSError:
            return False
        parent = parent.rpartition(b"/")[0]
    return True


def read_path(root: bytes, rel: bytes, size_cap: int = DEFAULT_SIZE_CAP, *, trusted: bool = False) -> Read:
    """Read one path without following symlinks or blocking on special files.

    ``trusted``: the caller (a walk that never descends into symlinks) vouches for the
    parents; otherwise they are checked, before and after the read.
    """
    path = root + b"/" + rel
    if not trusted and not parents_real(root, rel):
        return Read(rel, "missing")
    try:
        st = os.lstat(path)
    except (FileNotFoundError, NotADirectoryError):  # gone, or a parent is a file now
        return Read(rel, "missing")
    except OSError as exc:
        return Read(rel, "skipped", reason=f"unreadable ({exc.strerror})")
    got = _read_entry(path, rel, st, size_cap)
    if not trusted and got.kind != "missing" and not parents_real(root, rel):
        return Read(rel, "missing")  # a parent was swapped for a link while we read
    return got


def _read_entry(path: bytes, rel: bytes, st: os.stat_result, size_cap: int) -> Read:
    mode = stat.S_IMODE(st.st_mode)
    if stat.S_ISDIR(st.st_mode):
        if _listable(path):
            return Read(rel, "dir", mode, sig=sig_of(st))
        return Read(rel, "dir", mode, sig=sig_of(st), listed=False, reason="unreadable directory")
    if stat.S_ISLNK(st.st_mode):
        try:
            return Read(rel, "symlink", mode, os.readlink(path), sig=sig_of(st))
        except (FileNotFoundError, NotADirectoryError):
            return Read(rel, "missing")
        except OSError as exc:
            return Read(rel, "skipped", reason=f"unreadable ({exc.strerror})")
    if not stat.S_ISREG(st.st_mode):
        return Read(rel, "skipped", reason="special file")
    if st.st_size > size_cap:
        return Read(rel, "skipped", reason="over size cap")
    for _ in range(MAX_REREADS + 1):
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
        except (FileNotFoundError, NotADirectoryError):
            return Read(rel, "missing")
        except OSError as exc:
            return Read(rel, "skipped", reason=f"unreadable ({exc.strerror})")
        try:
            before = os.fstat(fd)
            if not stat.S_ISREG(before.st_mode):
                return Read(rel, "skipped", reason="special file")
            if before.st_size > size_cap:
                return Read(rel, "skipped", reason="over size cap")
            chunks = []
            while chunk := os.read(fd, max(before.st_size + 1, 1 << 16)):
                chunks.append(chunk)
            data = b"".join(chunks)
            after = os.fstat(fd)
        except OSError as exc:
            return Read(rel, "skipped", reason=f"unreadable ({exc.strerror})")
        finally:
            os.close(fd)
        stable = (after.st_size, after.st_mtime_ns) == (before.st_size, before.st_mtime_ns)
        if stable and len(data) == after.st_size:
            break
    else:
        stable = False
    mode, sig = stat.S_IMODE(after.st_mode), sig_of(after)
    return Read(rel, "file", mode, data, unstable=not stable, sig=sig, dev=after.st_dev, nlink=after.st_nlink)


_ROOT = os.geteuid() == 0


def _listable(path: bytes) -> bool:
    """Whether a directory can be listed (root can list any; one syscall otherwise)."""
    return _ROOT or os.access(path, os.R_OK | os.X_OK, follow_symlinks=False)


class _Preparer:
    """Worker-side part of a capture: read, hash, and compress each distinct content once.

    Runs in a thread pool (file reads, xxh3 and zstd all release the GIL); only the first
    worker to see a content compresses it, the store's dedup does the rest.
    """

    def __init__(self, root: bytes, size_cap: int, hasher: objects.Hasher, trusted: bool) -> None:
        self.root, self.size_cap, self.hasher, self.trusted = root, size_cap, hasher, trusted
        self._claimed: set[str] = set()
        self._lock = threading.Lock()

    def __call__(self, rel: bytes) -> Read:
        r = read_path(self.root, rel, self.size_cap, trusted=self.trusted)
        if r.kind in ("file", "symlink"):
            r.digest = self.hasher(r.data)
            base = objects.base_key(r.digest, len(r.data))
            with self._lock:
                first = base not in self._claimed
                self._claimed.add(base)
            if first:
                r.encoded = objects.encode(r.data)
            else:  # a repeat: the batch compares it by fingerprint; compute it here, in parallel
                r.sha = fingerprint(r.data)
        return r


def _chunks(items: Iterable[bytes], size: int) -> Iterator[list[bytes]]:
    chunk: list[bytes] = []
    for item in items:
        chunk.append(item)
        if len(chunk) >= size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


def _bounded_map(
    pool: ThreadPoolExecutor, fn: Callable[[bytes], Read], items: Iterable[bytes]
) -> Iterator[list[Read]]:
    """Chunks of ``fn`` results in input order, at most WINDOW chunks in flight (memory bound)."""
    pending: deque[Future[list[Read]]] = deque()
    for chunk in _chunks(items, CHUNK):
        pending.append(pool.submit(lambda c: [fn(x) for x in c], chunk))
        if len(pending) >= WINDOW:
            yield pending.popleft().result()
    while pending:
        yield pending.popleft().result()


def walk(
    root: bytes,
    ignored: Ignored,
    rel_dir: bytes = b"",
    descend: Callable[[bytes], bool] | None = None,
    unreadable: Callable[[bytes, str], None] | None = None,
) -> Iterator[tuple[bytes, bool]]:
    """(relative path, is_dir) for every non-ignored path under ``rel_dir``, parents first.

    An ignored directory is still entered (and yielded) when ``descend(rel)`` says it may
    hold captured paths (files git tracks inside an ignored directory). A directory that
    cannot be listed is reported to ``unreadable``, never skipped in silence. Iterative and
    unsorted: on a 100k-file tree a recursive, sorted walk costs several times the syscalls.
    """
    stack = [rel_dir]
    while stack:
        d = stack.pop()
        try:
            entries = list_dir(root, d, ignored, descend)
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
    root: bytes, d: bytes, ignored: Ignored, descend: Callable[[bytes], bool] | None = None
) -> list[tuple[bytes, bool]]:
    """One directory's captured entries as (relative path, is_dir): ignored names dropped,
    unless a directory may hold captured paths (``descend``). Raises OSError."""
    out: list[tuple[bytes, bool]] = []
    with os.scandir(root + b"/" + d if d else root) as it:
        for e in it:
            rel = d + b"/" + e.name if d else e.name
            try:
                is_dir = e.is_dir(follow_symlinks=False)
            except OSError:
                is_dir = False
            if ignored(rel, is_dir) and not (is_dir and descend is not None and descend(rel)):
                continue
            out.append((rel, is_dir))
    return out


def summarize(
    store: Store | Batch,
    old: str | None,
    new: str,
    report: Report,
    added: Iterable[bytes] | None = None,
) -> dict[str, Any]:
    """Counts and examples of what changed from tree ``old`` to ``new``.

    ``added``: with ``old=None``, the paths that make up ``new`` (saves re-reading the tree).
    """
    counts: dict[str, int] = {}
    examples: dict[str, list[str]] = {}
    diffs: Iterable[trees.Difference] = trees.diff(store.load_node, old, new)
    if old is None and added is not None:
        diffs = (trees.Difference(p, "added", None, None) for p in added)
    for d in diffs:
        counts[d.status] = counts.get(d.status, 0) + 1
        ex = examples.setdefault(d.status, [])
        if len(ex) < EXAMPLES:
            ex.append(os.fsdecode(d.path))
    return {
        "counts": counts,
        "changed": sum(counts.values()),
        "examples": examples,
        "skipped": {k: [os.fsdecode(p) for p in v] for k, v in report.skipped.items()},
        "skipped_count": report.skipped_count,
        "unstable": [os.fsdecode(p) for p in report.unstable],
    }


def capture(
    batch: Batch,
    root: bytes,
    paths: Iterable[bytes],
    report: Report,
    *,
    size_cap: int = DEFAULT_SIZE_CAP,
    ws: int | None = None,
    parallel: bool = False,
    on_read: Callable[[Read], None] | None = None,
    from_walk: bool = False,
) -> dict[bytes, trees.Change]:
    """Read ``paths`` into ``batch``; return tree changes (and record versions if ``ws``).

    ``on_read`` sees every path as read (the daemon keeps its stat cache with it).
    ``from_walk``: the paths come from :func:`walk` just now, which never descends into a
    symlink, so their parents need no re-check.
    """
    changes: dict[bytes, trees.Change] = {}
    now = time.time_ns()
    prepare = _Preparer(root, size_cap, batch.store.hasher, trusted=from_walk)
    with contextlib.ExitStack() as stack:
        chunks: Iterable[list[Read]] = ([prepare(p)] for p in paths)
        if parallel:  # a thread pool only where it pays: baselines, not a mark's few paths
            pool = stack.enter_context(ThreadPoolExecutor(WORKERS, thread_name_prefix="snapd-read"))
            chunks = _bounded_map(pool, prepare, paths)
        for chunk in chunks:
            if len(chunk) > 1:  # one existence query for the whole chunk
                batch.prefetch(objects.base_key(r.digest, len(r.data)) for r in chunk if r.digest is not None)
            for r in chunk:
                change: trees.Change
                if on_read is not None:
                    on_read(r)
                if r.kind == "skipped":
                    # Not captured now: a previous version must not stand in for it.
                    report.skip(r.rel, r.reason)
                    changes[r.rel] = None
                    continue
                if r.kind == "missing":
                    change = None
                elif r.kind == "dir":
                    change = trees.Dir(r.mode, r.listed)
                    if not r.listed:
                        report.skip(r.rel, r.reason)
                else:
                    key = batch.put(r.data, r.digest, r.encoded, r.sha)
                    change = trees.Entry(r.kind, r.mode, len(r.data), key)
                    if r.kind == "file":
                        report.files += 1
                        report.size += len(r.data)
                    if r.unstable and r.rel not in report.unstable:
                        report.unstable.append(r.rel)
                changes[r.rel] = change
                if ws is not None and not isinstance(change, trees.Dir):
                    batch.add_version(ws, r.rel, now, change)
    return changes


def ingest_tree(
    store: Store,
    ws: int,
    root: Path | str | bytes,
    *,
    ignored: Ignored = vcs_only,
    size_cap: int = DEFAULT_SIZE_CAP,
    label: str = "baseline",
    kind: str = "baseline",
) -> IngestResult:
    """Capture the whole workspace as a new mark (the baseline)."""
    rootb = os.fsencode(root)
    report = Report()
    with store.batch() as batch:
        rels = [rel for rel, _ in walk(rootb, ignored)]  # before the readers start: no GIL contention
        changes = capture(batch, rootb, rels, report, size_cap=size_cap, ws=ws, parallel=True, from_walk=True)
        tree = batch.apply(None, changes)
        prev = store.latest_mark(ws)
        old = prev.tree if prev else None
        new_paths = [p for p, c in changes.items() if c is not None] if old is None else None
        summary = summarize(batch, old, tree, report, new_paths)
        batch.add_mark(ws, label, tree, kind=kind, summary=summary)
        (mark,) = batch.commit()
    return IngestResult(report.files, report.size, tree, mark.id, report)


def capture_paths(
    store: Store,
    ws: int,
    root: Path | str | bytes,
    paths: Iterable[bytes],
    label: str,
    *,
    size_cap: int = DEFAULT_SIZE_CAP,
    kind: str = "user",
    **meta: Any,
) -> Mark:
    """A new durable mark: the previous mark's tree plus the current state of ``paths``."""
    rootb = os.fsencode(root)
    report = Report()
    prev = store.latest_mark(ws)
    base = prev.tree if prev else None
    with store.batch() as batch:
        changes = capture(batch, rootb, paths, report, size_cap=size_cap, ws=ws)
        tree = batch.apply(base, changes)
        summary = summarize(batch, base, tree, report)
        batch.add_mark(ws, label, tree, kind=kind, summary=summary, **meta)
        (mark,) = batch.commit()
    return mark
