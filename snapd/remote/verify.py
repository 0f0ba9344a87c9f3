"""``verify --remote``: read a repository back from its server and check every promise it makes.

Checked, from the server itself (never from the local cache, which is what is being doubted):

- every index file: its name is the SHA-256 of its bytes, it opens and decodes;
- every pack an index names (or, with ``sample`` in (0, 1), that fraction of them, chosen by
  pack with a seeded generator; the seed is reported so a run can be repeated): it is listed,
  its name is the SHA-256 of its bytes, its header opens and agrees with the index, and every
  blob opens against its key and decodes to the content its key names
  (:func:`snapd.store.objects.decode`);
- every mark record: its name is the MAC its record says, it opens, and every object its tree
  needs (nodes, file and symlink contents, its rule inputs and ignored names) is in an index, in
  a pack that is there, and not damaged. Tree nodes are always all read (a tree must be read to
  know what it needs): from the packs read whole, else as one ranged read of the node's blob.

A problem names the remote object and, for an object a mark needs, every mark and path that
needs it. Packs that no index names are listed as leftovers (an interrupted push's packs, which
its resume indexes or prune deletes once older than the grace period), not as problems.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import NamedTuple

from snapd.errors import CorruptObject, RemoteCorrupt, RemoteMissing
from snapd.remote import fetch, packs
from snapd.remote.crypto import sha256_hex
from snapd.remote.packs import pack_name
from snapd.remote.records import MarkRecord, decode_config, decode_mark
from snapd.remote.repo import THREADS, Repository, parallel
from snapd.store import fan, nodes, objects, trees

Progress = Callable[[int, int], None]


class Ref(NamedTuple):
    """Where a damaged or missing object is needed: a mark and a path in its tree (``b""``: the
    tree's root; ``b"(rules)"``/``b"(ignored names)"``: the mark's own objects)."""

    mark: str
    host: str
    workspace: bytes
    path: bytes


class Problem(NamedTuple):
    problem: str  # "corrupt" | "missing" | "inconsistent"
    object: str  # the remote object at fault (data/.., index/.., marks/..)
    message: str
    key: str | None = None  # the store object (blob) at fault, if one
    refs: tuple[Ref, ...] = ()

    def describe(self) -> str:
        if not self.refs:
            return self.message
        shown = [
            f"mark {r.mark} ({r.host}:{_text(r.workspace)}) {_text(r.path) or '/'}" for r in self.refs[:20]
        ]
        more = f" and {len(self.refs) - 20} more" if len(self.refs) > 20 else ""
        return f"{self.message}; needed by " + ", ".join(shown) + more


def _text(raw: bytes) -> str:
    return raw.decode("utf-8", "backslashreplace")


@dataclass
class VerifyResult:
    packs: int = 0  # packs the live indexes name
    packs_read: int = 0
    blobs: int = 0  # blobs opened and decoded
    marks: int = 0
    nodes: int = 0
    bytes_read: int = 0
    sample: float | None = None
    seed: int | None = None
    leftovers: list[str] = field(default_factory=list)  # packs no index names
    problems: list[Problem] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems


class _Where(NamedTuple):
    pack: str
    offset: int
    length: int


class _Span(NamedTuple):
    """One ranged GET of a pack, ``[start, end)``, holding the blobs of ``keys``."""

    pack: str
    start: int
    end: int
    keys: tuple[str, ...]


def spans(blobs: Iterable[tuple[str, _Where]]) -> list[_Span]:
    """The ranged GETs that read ``blobs`` (key, where): per pack in offset order, neighbours
    closer than ``fetch.GAP_BYTES`` in one GET of at most ``fetch.SPAN_BYTES`` (the restore's
    tuning; verify has its own view of where blobs are, read from the server, not the cache)."""
    by_pack: dict[str, list[tuple[int, int, str]]] = {}
    for key, where in blobs:
        by_pack.setdefault(where.pack, []).append((where.offset, where.offset + where.length, key))
    out: list[_Span] = []
    for pack, found in sorted(by_pack.items()):
        found.sort()
        start, end, keys = found[0][0], found[0][1], [found[0][2]]
        for b_start, b_end, key in found[1:]:
            if b_start - end <= fetch.GAP_BYTES and b_end - start <= fetch.SPAN_BYTES:
                end, keys = max(end, b_end), [*keys, key]
                continue
            out.append(_Span(pack, start, end, tuple(keys)))
            start, end, keys = b_start, b_end, [key]
        out.append(_Span(pack, start, end, tuple(keys)))
    return out


def verify(
    repo: Repository, sample: float | None = None, progress: Progress | None = None, seed: int | None = None
) -> VerifyResult:
    if sample is not None and not 0 < sample <= 1:
        raise ValueError(f"sample {sample} is not in (0, 1]")
    return _Verifier(repo, progress).run(sample, seed)


class _Verifier:
    def __init__(self, repo: Repository, progress: Progress | None) -> None:
        self.repo = repo
        self.backend = repo.backend
        self.master = repo.master
        self.progress = progress
        self.result = VerifyResult()
        self.where: dict[str, list[_Where]] = {}  # key -> its copies in the live indexes
        self.bad: dict[str, Problem] = {}  # key -> what is wrong with it (no refs yet)
        self.node_data: dict[str, bytes] = {}  # node contents met in the packs read whole
        self.held: set[str] = set()  # the parts of the fans of the level being read: not popped
        self.decoded: dict[str, trees.Node | None] = {}  # node key -> the node (None: unreadable)
        self.below: dict[str, list[tuple[bytes, str]]] = {}  # node key -> (path, bad key) beneath

    def problem(self, p: Problem) -> None:
        self.result.problems.append(p)

    def run(self, sample: float | None, seed: int | None) -> VerifyResult:
        r = self.result
        indexed = self.read_indexes()
        listed = {name.rsplit("/", 1)[-1]: name for name in (x.name for x in self.backend.list("data/"))}
        r.packs = len(indexed)
        r.leftovers = sorted(name for pack, name in listed.items() if pack not in indexed)
        present = sorted(p for p in indexed if p in listed)
        for pack in sorted(set(indexed) - set(listed)):
            self.problem(
                Problem("missing", pack_name(pack), f"{pack_name(pack)} is named by an index but missing")
            )
            for key, _, _ in indexed[pack]:
                self.bad.setdefault(
                    key,
                    Problem("missing", pack_name(pack), f"object {key} is in missing {pack_name(pack)}", key),
                )
        chosen = present
        if sample is not None and sample < 1:
            r.sample = sample
            r.seed = random.randrange(2**32) if seed is None else seed
            k = min(len(present), max(1, math.ceil(sample * len(present)))) if present else 0
            chosen = sorted(random.Random(r.seed).sample(present, k))
        for start in range(0, len(chosen), THREADS):  # THREADS packs in flight, held at once
            batch = chosen[start : start + THREADS]
            for n, (pack, data) in enumerate(zip(batch, parallel(self.fetch_pack, batch), strict=True)):
                if data is not None:  # else deleted since the listing: a prune's (only what no mark needs)
                    self.check_pack(pack, data, indexed[pack])
                if self.progress is not None:
                    self.progress(start + n + 1, len(chosen))
        self.check_marks()
        self.check_keys_and_config()
        return r

    # -- indexes and packs ----------------------------------------------------------------

    def read_indexes(self) -> dict[str, list[tuple[str, int, int]]]:
        """The packs the live (not superseded) index files name, with their blobs; each index
        file checked on the way."""
        files = {}
        for listed in self.backend.list("index/"):
            name = listed.name
            try:
                files[name.removeprefix("index/")] = packs.decode_index(
                    self.master, self.backend.get(name), name
                )
            except RemoteMissing:
                continue  # a prune superseded and deleted it since the listing
            except RemoteCorrupt as exc:
                self.problem(Problem("corrupt", name, exc.message))
        superseded = {old for index in files.values() for old in index.supersedes}
        indexed: dict[str, list[tuple[str, int, int]]] = {}
        for index_id, index in sorted(files.items()):
            if index_id in superseded:
                continue
            for pack, blobs in index.packs.items():
                if pack in indexed and sorted(indexed[pack]) != sorted(blobs):
                    self.problem(
                        Problem(
                            "inconsistent",
                            f"index/{index_id}",
                            f"index/{index_id} lists {pack_name(pack)} "
                            "with other blobs than another index does",
                        )
                    )
                    continue
                indexed[pack] = list(blobs)
        for pack, entries in indexed.items():
            for key, offset, length in entries:
                self.where.setdefault(key, []).append(_Where(pack, offset, length))
        return indexed

    def fetch_pack(self, pack: str) -> bytes | None:
        try:
            return self.backend.get(pack_name(pack))
        except RemoteMissing:
            return None

    def check_pack(self, pack: str, data: bytes, blobs: list[tuple[str, int, int]]) -> None:
        name = pack_name(pack)
        r = self.result
        r.packs_read += 1
        r.bytes_read += len(data)
        if sha256_hex(data) != pack:
            self.problem(Problem("corrupt", name, f"{name} is corrupt: its bytes do not hash to its name"))
        try:
            header = packs.parse_header(self.master, data, name)
        except RemoteCorrupt as exc:
            self.problem(Problem("corrupt", name, exc.message))
        else:
            if sorted(map(tuple, header)) != sorted(map(tuple, blobs)):
                self.problem(
                    Problem("inconsistent", name, f"{name}'s header does not list the blobs its index lists")
                )
        for key, offset, length in blobs:
            content = self.open_blob(name, key, data[offset : offset + length])
            if content is not None and content.startswith((nodes.MAGIC, fan.MAGIC)):
                self.node_data[key] = content

    def open_blob(self, name: str, key: str, blob: bytes) -> bytes | None:
        """The content of ``blob`` (the key's copy in pack ``name``), or None (recorded bad)."""
        try:
            codec, payload = packs.read_blob(self.master, blob, key, name)
            content = objects.decode(key, codec, payload)
        except (RemoteCorrupt, CorruptObject) as exc:
            self.bad[key] = Problem("corrupt", name, f"object {key} in {name} is corrupt: {_why(exc)}", key)
            return None
        self.result.blobs += 1
        return content

    def check_keys_and_config(self) -> None:
        """Every key file hashes to its name (a reader trusts one only so); the config opens
        and names this repository."""
        for listed in self.backend.list("keys/"):
            try:
                data = self.backend.get(listed.name)
            except RemoteMissing:
                continue  # a password change deleted it since the listing
            if sha256_hex(data) != listed.name.removeprefix("keys/"):
                self.problem(
                    Problem("corrupt", listed.name, f"key file {listed.name} does not hash to its name")
                )
        try:
            config = decode_config(self.master, self.backend.get("config"))
        except (RemoteCorrupt, RemoteMissing) as exc:
            self.problem(Problem("corrupt", "config", exc.message))
            return
        if config.id != self.repo.id:
            self.problem(
                Problem("corrupt", "config", f"config names repository {config.id}, not {self.repo.id}")
            )

    # -- marks and their trees ------------------------------------------------------------

    def check_marks(self) -> None:
        refs: dict[str, list[Ref]] = {}
        found = (self.read_mark(listed.name) for listed in sorted(self.backend.list("marks/")))
        records = [record for record in found if record is not None]
        self.read_nodes(record.mark.tree for record in records)
        for record in records:
            self.result.marks += 1
            mark, host, ws = record.mark.id, record.host, record.workspace
            for path, key in self.tree_bad(record.mark.tree):
                refs.setdefault(key, []).append(Ref(mark, host, ws, path))
            for label, own in ((b"(rules)", record.mark.rules), (b"(ignored names)", record.mark.ignored)):
                if own is not None and self.content_bad(own):
                    refs.setdefault(own, []).append(Ref(mark, host, ws, label))
        for key, problem in sorted(self.bad.items()):
            self.problem(problem._replace(refs=tuple(refs.get(key, ()))))
        for key, where in sorted(refs.items()):
            if key not in self.bad:  # needed, in no index at all
                self.problem(Problem("missing", "index/", f"object {key} is in no index", key, tuple(where)))

    def read_mark(self, name: str) -> MarkRecord | None:
        """The record ``name`` (``marks/<hex>``), or None (pruned since the listing, or damaged:
        recorded). Decoding refuses a record whose name is not its own store's and mark's."""
        try:
            return decode_mark(self.master, self.backend.get(name), name)
        except RemoteMissing:
            return None
        except RemoteCorrupt as exc:
            self.problem(Problem("corrupt", name, exc.message))
            return None

    def content_bad(self, key: str) -> bool:
        return key in self.bad or key not in self.where

    def tree_bad(self, root: str) -> list[tuple[bytes, str]]:
        """(path, key) of every object under node ``root`` that is damaged or in no index;
        each node read and walked once however many marks share it."""
        if root in self.below:
            return self.below[root]
        found: list[tuple[bytes, str]] = []
        self.below[root] = found
        node = self.load_node(root)
        if node is None:
            found.append((b"", root))
            return found
        for name, entry in sorted(node.items()):
            if entry.kind == "dir":
                found.extend(
                    (name + b"/" + path if path else name, key) for path, key in self.tree_bad(entry.key)
                )
            elif trees.holds_object(entry) and self.content_bad(entry.key):
                found.append((name, entry.key))
        return found

    def read_nodes(self, roots: Iterable[str]) -> None:
        """Have every node under ``roots`` at hand: those no pack read whole held are fetched
        level by level, as a restore reads them (:func:`spans`), a few GETs at once."""
        seen: set[str] = set()
        level = list(dict.fromkeys(roots))
        while level:
            seen.update(level)
            self.fetch_nodes(level)
            parts: list[str] = []  # of the wide directories among them, read before they decode
            for key in level:
                data = self.node_data.get(key)
                if data is not None and fan.is_fan(data):
                    try:
                        parts += [part.key for part in fan.decode(data)]
                    except CorruptObject:
                        continue  # load_node records it
            self.fetch_nodes(parts)
            self.held = set(parts)  # kept for the fans that need them, though a node shares the key
            below: list[str] = []
            for key in level:
                node = self.load_node(key)
                for entry in node.values() if node is not None else ():
                    if entry.kind == "dir" and entry.key not in seen:
                        seen.add(entry.key)
                        below.append(entry.key)
            for part in parts:
                self.node_data.pop(part, None)
            self.held = set()
            level = below

    def fetch_nodes(self, keys: list[str]) -> None:
        """The encodings of the nodes ``keys`` no pack read whole held, into ``node_data``."""
        todo = [
            key for key in keys if key not in self.node_data and key not in self.bad and key in self.where
        ]
        ranges = spans((key, self.where[key][0]) for key in todo)
        for (pack, start, _, held), data in zip(ranges, parallel(self.fetch_range, ranges), strict=True):
            name = pack_name(pack)
            for key in held:
                if data is None:
                    self.bad[key] = Problem("missing", name, f"object {key} is in missing {name}", key)
                    continue
                copy = self.where[key][0]
                content = self.open_blob(
                    name, key, data[copy.offset - start : copy.offset - start + copy.length]
                )
                if content is not None:
                    self.node_data[key] = content
            self.result.bytes_read += len(data or b"")

    def fetch_range(self, span: _Span) -> bytes | None:
        """The bytes of ``span`` (None: the pack is gone). Run in a worker thread: reads only."""
        try:
            return self.backend.get(pack_name(span.pack), span.start, span.end)
        except RemoteMissing:
            return None

    def decode_node(self, data: bytes) -> trees.Node:
        """A node from its verified encoding; a wide directory's parts from ``node_data``
        (:meth:`read_nodes` fetched them; KeyError for one it could not)."""
        if not fan.is_fan(data):
            return nodes.decode_node(data)
        return fan.assemble(data, {p.key: self.node_data[p.key] for p in fan.decode(data)})

    def load_node(self, key: str) -> trees.Node | None:
        """The node ``key`` (None: damaged or in no index; recorded), decoded once."""
        if key in self.decoded:
            return self.decoded[key]
        node: trees.Node | None = None
        data = self.node_data.get(key) if key in self.held else self.node_data.pop(key, None)
        if data is not None:
            try:
                node = self.decode_node(data)
                self.result.nodes += 1
            except CorruptObject as exc:
                self.bad[key] = Problem("corrupt", key, f"tree node {key} does not decode: {_why(exc)}", key)
            except KeyError as exc:  # a part of a wide directory: damaged or in no index (recorded)
                self.bad[key] = Problem(
                    "corrupt", key, f"tree node {key} has a part that cannot be read: {exc}", key
                )
        self.decoded[key] = node
        return node


def _why(exc: RemoteCorrupt | CorruptObject) -> str:
    return exc.message
