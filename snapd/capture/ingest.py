"""Ingest: paths read from disk (:mod:`snapd.capture.reader`) become objects, versions and tree
changes in a store batch. This is where file system reads meet the store.

Reads, hashing and compression of a baseline run in parallel, in bounded chunks (memory
stays flat): in reader processes (:mod:`snapd.capture.readers`) for a big tree, so the batch
never holds raw file bytes and the readers never wait for the GIL; in a small thread pool
otherwise. Each reader compresses a content once. Everything not captured is reported with a
reason (:class:`Report`, :class:`IgnoredTally`), never dropped silently.
"""

from __future__ import annotations

import contextlib
import functools
import os
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, TypeVar

import structlog

from snapd.capture import readers
from snapd.capture.counters import Counters
from snapd.capture.reader import Read, read_path
from snapd.store import objects, treediff, trees
from snapd.store.batch import Batch
from snapd.store.store import Store

log = structlog.get_logger(__name__)

EXAMPLES = 10
WORKERS = 2  # more only adds GIL contention: the main thread is the bottleneck
WINDOW = 16  # chunks in flight
CHUNK = 64  # paths per chunk
T = TypeVar("T")


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
    """Paths left out by ignore rules, by reason, with a few examples (nothing is left
    out silently). Counted by walks that judge every name; a directory counts once."""

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


class _Preparer:
    """Worker-side part of a capture: read, hash, and compress each distinct content once.

    Runs in a thread pool (file reads, xxh3, SHA-256 and zstd all release the GIL) or in the
    caller's thread; only the first worker to see a content compresses it, the store's dedup
    does the rest. (:func:`readers.digested` is the same for a reader process.)
    """

    def __init__(
        self, root: bytes, size_cap: int, hasher: objects.Hasher, trusted: bool, counters: Counters | None
    ) -> None:
        self.root, self.size_cap, self.hasher, self.trusted = root, size_cap, hasher, trusted
        self.counters = counters
        self._claimed: set[str] = set()
        self._lock = threading.Lock()

    def __call__(self, rel: bytes) -> Read:
        r = read_path(self.root, rel, self.size_cap, trusted=self.trusted, counters=self.counters)
        if r.kind in ("file", "symlink"):
            r.digest = self.hasher(r.data)
            base = objects.base_key(r.digest, len(r.data))
            with self._lock:
                first = base not in self._claimed
                self._claimed.add(base)
            r.sha = objects.fingerprint(r.data)  # the batch compares contents by it
            if first:
                r.encoded = objects.encode(r.data)
        return r


def _chunks(items: Iterable[T], size: int) -> Iterator[list[T]]:
    chunk: list[T] = []
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


def summarize(
    store: Store | Batch,
    old: str | None,
    new: str,
    report: Report,
    added: Iterable[bytes] | None = None,
    where: treediff.Only | None = None,
) -> dict[str, Any]:
    """Counts and examples of what changed from tree ``old`` to ``new``.

    ``added``: with ``old=None``, the paths that make up ``new`` (saves re-reading the tree).
    ``where``: the trees differ nowhere else (see :func:`treediff.diff`).
    """
    counts: dict[str, int] = {}
    examples: dict[str, list[str]] = {}
    diffs: Iterable[treediff.Difference] = treediff.diff(store.load_node, old, new, where=where)
    if old is None and added is not None:
        diffs = (treediff.Difference(p, "added", None, None) for p in added)
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
    size_cap: int,
    ws: int | None = None,
    parallel: bool = False,
    on_read: Callable[[Read], None] | None = None,
    from_walk: bool = False,
    counters: Counters | None = None,
    processes: bool = False,
) -> dict[bytes, trees.Change]:
    """Read ``paths`` into ``batch``; return tree changes (and record versions if ``ws``).

    ``on_read`` sees every path as read (the daemon keeps its stat cache with it).
    ``from_walk``: the paths come from :func:`walk` just now, which never descends into a
    symlink, so their parents need no re-check. ``counters`` counts the reads.
    ``processes`` (with ``parallel``): read in reader processes, unless the store hashes with
    another function than theirs (tests forcing collisions).
    """
    changes: dict[bytes, trees.Change] = {}
    now = time.time_ns()
    prepare = _Preparer(root, size_cap, batch.store.hasher, from_walk, counters)
    with contextlib.ExitStack() as stack:
        # Read in chunks, so each chunk's contents are looked up in one query, not one each.
        chunks: Iterable[list[Read]] = _chunks(map(prepare, paths), CHUNK)
        if parallel and processes and batch.store.hasher is objects.xxh3_hex:
            procs = stack.enter_context(readers.ReaderProcesses(root, size_cap, from_walk, prepare, counters))
            stack.callback(log_failures, procs)
            chunks = procs.map(_chunks(paths, CHUNK))
        elif parallel:  # a thread pool only where it pays: baselines, not a mark's few paths
            pool = stack.enter_context(ThreadPoolExecutor(WORKERS, thread_name_prefix="snapd-read"))
            chunks = _bounded_map(pool, prepare, paths)
        for chunk in chunks:
            if len(chunk) > 1:  # one existence query for the whole chunk
                batch.prefetch(objects.base_key(r.digest, r.size) for r in chunk if r.digest is not None)
            # A mark's few files are stored as deltas against their previous versions, looked
            # up (with those versions' chain links) in one query each for the chunk; a
            # baseline's have none.
            bases: dict[bytes, str] = {}
            if ws is not None and not parallel:
                bases = batch.store.last_objects(ws, [r.rel for r in chunk if r.digest is not None])
                batch.prefetch_links(bases.values())
            for r in chunk:
                change: trees.Change
                if on_read is not None:
                    on_read(r)
                if r.kind == "skipped":
                    # Not captured now: a previous version must not stand in for it, and the
                    # tree says it is there (a rollback to this state must not delete it).
                    report.skip(r.rel, r.reason)
                    stamp = (r.sig[4], r.sig[2]) if r.sig is not None else None
                    size = r.sig[1] if r.sig is not None else 0
                    changes[r.rel] = trees.uncaptured(r.reason, r.mode, size, stamp)
                    continue
                if r.kind == "hidden":
                    # Whether it is there is unknown (its directory cannot be searched, and may
                    # not even be the one that held it: swapped, moved in): the tree claims
                    # nothing, and a rollback leaves what lies in that unlisted directory. No
                    # version row: it was not seen to go.
                    changes[r.rel] = None
                    continue
                if r.kind == "missing":
                    change = None
                elif r.kind == "dir":
                    change = trees.Dir(r.mode, r.listed)
                    if not r.listed:
                        report.skip(r.rel, r.reason)
                else:
                    assert r.digest is not None and r.sha is not None
                    base = bases.get(r.rel)
                    data = r.data if base is not None else None
                    key = batch.put_digested(r.digest, r.size, r.sha, _payload(r), base, data)
                    change = trees.Entry(r.kind, r.mode, r.size, key)
                    if r.kind == "file":
                        report.files += 1
                        report.size += r.size
                    if r.unstable and r.rel not in report.unstable:
                        report.unstable.append(r.rel)
                changes[r.rel] = change
                if ws is not None:
                    _record_version(batch, ws, r.rel, now, change)
    return changes


def _payload(r: Read) -> Callable[[], tuple[int, bytes]]:
    """What the batch calls for ``r``'s payload if its content is new: the one its reader
    compressed, or ``r``'s bytes compressed now. A reader process drops the bytes; it sends a
    content without its payload only after sending it with it (see :mod:`readers`)."""

    def payload() -> tuple[int, bytes]:
        if r.encoded is not None:
            return r.encoded
        if len(r.data) != r.size:
            raise RuntimeError(f"a reader process sent {r.rel!r} without its payload the first time")
        return objects.encode(r.data)

    return payload


def log_failures(procs: readers.ReaderProcesses) -> None:
    """What went wrong in reader processes (the work was done in the daemon instead)."""
    for failure in procs.failures:
        log.warning("capture.reader_failed", error=failure)


def _record_version(batch: Batch, ws: int, rel: bytes, now: int, change: trees.Change) -> None:
    """A version row for what was read: a file, symlink, directory (its mode) or a deletion,
    so the workspace can be rebuilt as captured at any instant (:mod:`snapd.store.history`).
    A directory that could not be listed gets none: a row cannot say its contents are unknown,
    so the marks' trees, which can, stay the only record of it."""
    if isinstance(change, trees.Dir):
        if change.listed:
            batch.add_version(ws, rel, now, _dir_version(change.mode))
        return
    batch.add_version(ws, rel, now, change)


@functools.lru_cache(maxsize=64)
def _dir_version(mode: int) -> trees.Entry:
    """A directory's version row (its mode): one shared entry per mode, not one per directory
    until the commit (239,171 of them at a 500k-file baseline)."""
    return trees.Entry("dir", mode, 0, "")
