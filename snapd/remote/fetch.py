"""Reading a mark's tree out of a repository for a restore: the readers handed to
:func:`snapd.rollback.restore.write_tree` (the one writer), with the packs fetched ahead.

One request per file would make a restore of 85,000 files 85,000 round trips. Instead the
tree's nodes are read level by level, every node of a level at once; then the contents are
read in the order the writer asks for them (the tree's walk order): the blobs grouped by pack,
neighbouring ranges of a pack coalesced into one ranged GET (a *span*), a few spans in flight
at once, and at most :data:`WINDOW_BYTES` of contents held at a time (a span's are dropped
once each path that needs them has read them). Pushes write packs in walk order, so a
restore reads each pack about once, whole or nearly.

Every blob is authenticated, decoded and checked against its key by the thread that read its
span, so the writer is handed contents ready to write (on 2 cores AES-GCM and zstd, which
release the GIL, overlap its work). A blob that fails is refused, when the writer asks for it,
as :class:`RemoteCorrupt` naming the paths that hold it (this module knows the tree), so a
restore stops saying which files a damaged pack would have given.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import NamedTuple

from snapd.display import shown
from snapd.errors import RemoteCorrupt, RemoteMissing
from snapd.remote.packs import pack_name
from snapd.remote.records import MarkRecord
from snapd.remote.repo import Repository
from snapd.remote.view import THREADS, parallel
from snapd.store import trees

Progress = Callable[[int, int], None]
WINDOW_BYTES = 64 << 20
"""Bytes held at once (in memory) ahead of the writer: a span's while it is read, then its
contents' once decoded."""
GAP_BYTES = 256 << 10
"""Two blobs of a pack this close are read with one GET (the bytes between are read too)."""
SPAN_BYTES = 32 << 20
"""The most one GET reads."""
NODES_AHEAD = 1 << 20
"""How far past the nodes it needs a read of tree nodes goes: a push packs a mark's nodes
together in walk order, so the nodes of the levels below are most likely right after."""


class Span(NamedTuple):
    """One ranged GET of a pack: ``[start, end)``, holding ``keys``' blobs."""

    pack: str
    start: int
    end: int
    keys: tuple[str, ...]


def plan_spans(repo: Repository, keys: Iterable[str]) -> list[Span]:
    """The GETs that read ``keys``' blobs: per pack, blobs in offset order, neighbours within
    :data:`GAP_BYTES` coalesced, no span over :data:`SPAN_BYTES` (unless one blob is)."""
    by_pack: dict[str, list[tuple[int, int, str]]] = {}
    for key in dict.fromkeys(keys):
        where = repo.locate(key)
        by_pack.setdefault(where.key, []).append((where.offset, where.offset + where.length, key))
    spans: list[Span] = []
    for pack, blobs in by_pack.items():
        blobs.sort()
        start, end, held = blobs[0][0], blobs[0][1], [blobs[0][2]]
        for b_start, b_end, key in blobs[1:]:
            if b_start - end <= GAP_BYTES and b_end - start <= SPAN_BYTES:
                end = max(end, b_end)
                held.append(key)
                continue
            spans.append(Span(pack, start, end, tuple(held)))
            start, end, held = b_start, b_end, [key]
        spans.append(Span(pack, start, end, tuple(held)))
    return spans


def read_span(repo: Repository, span: Span) -> bytes:
    return repo.backend.get(pack_name(span.pack), span.start, span.end)


def blob_of(repo: Repository, span: Span, data: bytes, key: str) -> bytes:
    """``key``'s sealed blob out of the bytes of ``span``."""
    where = repo.locate(key)
    return data[where.offset - span.start : where.offset - span.start + where.length]


class _Held(NamedTuple):
    """The bytes of a pack's range ``[start, end)``, read."""

    start: int
    end: int
    data: bytes


class Tree:
    """A mark's tree read out of a repository: every node (read level by level, the nodes of
    a level fetched together) and, for each content, the paths that hold it."""

    def __init__(self, repo: Repository, root: str) -> None:
        self.repo = repo
        self.nodes: dict[str, trees.Node] = {}
        self.dirs: dict[str, bytes] = {root: b""}  # node key -> a directory holding it
        self.holders: dict[str, list[bytes]] = {}  # content key -> paths, in walk order
        self._held: dict[str, list[_Held]] = {}  # pack -> the spans read for nodes so far
        level = [root]
        while level:
            self._fetch_nodes(level)
            below: list[str] = []
            for key in level:
                prefix = self.dirs[key]
                for name, entry in self.nodes[key].items():
                    if entry.kind == "dir" and entry.key not in self.dirs:
                        self.dirs[entry.key] = prefix + name + b"/"
                        below.append(entry.key)
            level = below
        self._held.clear()
        for path, entry in trees.walk(self.load, root):
            if entry.kind in ("file", "symlink"):
                self.holders.setdefault(entry.key, []).append(path)

    def _fetch_nodes(self, keys: list[str]) -> None:
        """Read the nodes ``keys`` (one level of the tree): from the spans read for the levels
        above when they cover them (a push packs nodes together, ahead of the contents, so a
        few spans hold every level), else with new spans read in parallel."""
        repo = self.repo
        missing: list[str] = []
        for key in keys:
            held = self._holding(key)
            if held is None:
                missing.append(key)
            else:
                self._decode(key, held)
        spans = [
            span._replace(end=max(span.end, min(span.end + NODES_AHEAD, repo.pack_end(span.pack))))
            for span in plan_spans(repo, missing)
        ]
        for span, data in zip(spans, parallel(lambda s: read_span(repo, s), spans), strict=True):
            held = _Held(span.start, span.end, data)
            self._held.setdefault(span.pack, []).append(held)
            for key in span.keys:
                self._decode(key, held)

    def _holding(self, key: str) -> _Held | None:
        """The span read so far that holds ``key``'s blob, if one does."""
        where = self.repo.locate(key)
        return next((h for h in self._held.get(where.key, ()) if h.start <= where.offset and
                     where.offset + where.length <= h.end), None)  # fmt: skip

    def _blob(self, key: str, held: _Held) -> bytes:
        where = self.repo.locate(key)
        at = where.offset - held.start
        return self.repo.read_blob(key, held.data[at : at + where.length])

    def _part(self, key: str) -> bytes:
        """A wide directory's part: from the spans read for the nodes (a push packs a fan's parts
        beside it), else one ranged GET."""
        held = self._holding(key)
        return self.repo.get(key) if held is None else self._blob(key, held)

    def _decode(self, key: str, held: _Held) -> None:
        repo = self.repo
        try:
            self.nodes[key] = repo.decode_node(key, self._blob(key, held), self._part)
        except (RemoteCorrupt, RemoteMissing) as exc:  # missing: a wide directory's part
            path = self.dirs[key].rstrip(b"/") or b"."
            raise type(exc)(
                f"{exc.message}; it is the directory {shown(path)} of the mark: nothing under it "
                "can be restored",
                **{**exc.details, "paths": [shown(path)]},
            ) from None

    def load(self, key: str) -> trees.Node:
        node = self.nodes.get(key)
        return node if node is not None else self.repo.load_node(key)


class Prefetcher:
    """Contents read ahead of the writer, in the order it asks for them, within a window."""

    def __init__(self, repo: Repository, tree: Tree, progress: Progress | None, window: int) -> None:
        self.repo, self.tree, self.progress, self.window = repo, tree, progress, window
        order = list(tree.holders)  # first need, walk order
        rank = {key: i for i, key in enumerate(order)}
        spans = plan_spans(repo, order)
        spans.sort(key=lambda s: min(rank[k] for k in s.keys))
        self.spans = spans
        self.span_of = {key: i for i, span in enumerate(spans) for key in span.keys}
        self.uses = [sum(len(tree.holders[k]) for k in span.keys) for span in spans]
        self.total = sum(span.end - span.start for span in spans)
        self.fetched = 0
        self.held = 0  # bytes of spans scheduled and not yet released
        self.next = 0  # the next span to schedule
        self.size = [span.end - span.start for span in spans]  # counted in held: read, then decoded
        self.futures: dict[int, Future[dict[str, bytes | RemoteCorrupt]]] = {}
        self._lock = threading.Lock()
        self._pool = ThreadPoolExecutor(THREADS)
        self._schedule()
        if not spans:
            self._pool.shutdown()  # a tree without contents

    def _schedule(self, also: int | None = None) -> None:
        with self._lock:
            if also is not None and also not in self.futures and self.uses[also] > 0:
                self._start(also)
            while self.next < len(self.spans) and (self.held < self.window or not self.futures):
                if self.next not in self.futures and self.uses[self.next] > 0:
                    self._start(self.next)
                self.next += 1

    def _start(self, i: int) -> None:
        self.held += self.size[i]
        self.futures[i] = self._pool.submit(self._read, i)

    def _read(self, i: int) -> dict[str, bytes | RemoteCorrupt]:
        """Span ``i`` read, and each of its blobs opened: its content, or why it is refused."""
        span, repo = self.spans[i], self.repo
        data = read_span(repo, span)
        with self._lock:  # reported in order, from whichever thread read
            self.fetched += len(data)
            if self.progress is not None:
                self.progress(self.fetched, self.total)
        contents: dict[str, bytes | RemoteCorrupt] = {}
        for key in span.keys:
            try:
                contents[key] = repo.read_blob(key, blob_of(repo, span, data, key))
            except RemoteCorrupt as exc:
                contents[key] = exc
        decoded = sum(len(c) for c in contents.values() if isinstance(c, bytes))
        with self._lock:  # the window counts the contents now, not the span's bytes
            self.held += decoded - self.size[i]
            self.size[i] = decoded
        return contents

    def get(self, key: str) -> bytes:
        i = self.span_of.get(key)
        if i is None:
            return self._checked(key, lambda: self.repo.get(key))
        self._schedule(also=i)
        with self._lock:
            future = self.futures.get(i)
        if future is None:  # released already: asked for again
            return self._checked(key, lambda: self.repo.get(key))
        try:
            content = future.result()[key]
            return self._checked(key, lambda: _opened(content))
        finally:  # used, even when refused: the writer lists the path and goes on
            with self._lock:
                self.uses[i] -= 1
                if self.uses[i] <= 0:
                    del self.futures[i]
                    self.held -= self.size[i]
                finished = self.next >= len(self.spans) and not self.futures
            if finished:
                self._pool.shutdown(wait=False)  # every range read and used: no thread waits
            else:
                self._schedule()

    def _checked(self, key: str, read: Callable[[], bytes]) -> bytes:
        try:
            return read()
        except RemoteCorrupt as exc:
            held = [shown(p) for p in self.tree.holders.get(key, [])]
            listed = ", ".join(held[:10]) + (f" and {len(held) - 10} more" if len(held) > 10 else "")
            raise RemoteCorrupt(
                f"{exc.message}; it holds {listed or 'no path of this mark'}: refused, not restored",
                **{**exc.details, "paths": held},
            ) from None


def _opened(content: bytes | RemoteCorrupt) -> bytes:
    if isinstance(content, RemoteCorrupt):
        raise content
    return content


def readers(
    repo: Repository, record: MarkRecord, progress: Progress | None = None, *, window: int = WINDOW_BYTES
) -> tuple[trees.Load, Callable[[str], bytes]]:
    """``(load, get)`` for writing ``record``'s tree: every node read now, contents fetched
    ahead of ``get`` in walk order. ``progress(done, total)``: bytes of contents fetched."""
    tree = Tree(repo, record.mark.tree)
    ahead = Prefetcher(repo, tree, progress, window)
    return tree.load, ahead.get
