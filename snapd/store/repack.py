"""Repack, GC's last step: store whole objects as deltas against a similar content of another path.

A mark stores a file's new version against the path's previous version (``deltas.py``). A
content that arrives under a new path has no previous version and is stored whole: a
baseline of a tree that holds several releases of one project (``django-4.1/…/base.py`` beside
``django-4.2/…/base.py``) stores every release's copy whole. Git's pack pairs objects by file
name and size; repack does the same, after the fact: for each object stored whole (zstd, inline)
that a version names, it tries the contents of the same base name closest in size as a base,
and keeps the delta if it is at most ``1/DELTA_GAIN`` of the stored payload.

Invariants (the same as a mark's deltas): the content of every key is unchanged (the delta is
decoded and checked against the key on every read); a chain stays at most ``MAX_DEPTH`` long;
no cycle: only an object that is nobody's base yet is converted, and its new base's chain was
fixed before (an object with a dependent is never converted, so it cannot be in that chain). A
key a batch in flight holds is left alone (the batch may have chosen it as a base with its
depth as it was). GC keeps every base of a live delta (``gc.with_bases``), so a base that no
mark names stays.

Each object is tried once: the catalog's ``meta`` row ``repacked_before`` (ns) says that every
object created before it has been tried, so a GC after a mark looks at that mark's objects
only. Conversions commit in transactions of :data:`CHUNK` objects.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from snapd.store import objects
from snapd.store.reading import StoreReader
from snapd.store.store import Store

CHUNK = 500
NEIGHBOURS = 2  # candidates per object: the contents of the same name closest in size
WINDOW = 64  # objects whose contents (and their candidates') are read together
WINDOW_BYTES = 32 << 20  # ... unless that would hold more than this in memory
META_KEY = "repacked_before"


@dataclass
class _Row:
    size: int
    codec: int
    external: int
    whole: bool  # no base
    depth: int
    stored: int
    created: int


def _names(store: StoreReader) -> dict[bytes, set[str]]:
    """File base name -> the keys versions of that name hold."""
    groups: dict[bytes, set[str]] = defaultdict(set)
    rows = store.catalog.read().execute(
        "SELECT path, object FROM versions WHERE kind='file' AND object IS NOT NULL"
    )
    for path, obj in rows:
        groups[bytes(path).rsplit(b"/", 1)[-1]].add(objects.py_key(obj))
    return groups


Conversion = tuple[str, str, bytes, int, int]
"""(key, base, delta payload, depth, old stored size): one object worth converting."""


def plan(store: StoreReader, since: int) -> list[Conversion]:
    """The conversions worth making among the objects created at or after ``since`` (ns).
    Reads only: the daemon's GC makes it in its mark process (:mod:`snapd.store.gcmark`),
    where the table of every object's row and the name groups it needs cannot stay in the
    daemon's heap; :func:`_convert` re-checks each under the holds lock."""
    db = store.catalog.read()
    # Only the objects of a name that more than one content has can pair: no tree node, no
    # content alone under its name (at 8,800 marks of the soak the table of every object's
    # row was most of this process's 568 MB).
    groups = [keys for keys in _names(store).values() if len(keys) > 1]
    wanted: set[str] = set().union(*groups)
    rows: dict[str, _Row] = {}
    for k, size, codec, external, base, depth, stored, created in db.execute(
        "SELECT key, size, codec, external, base, depth, stored, created FROM objects"
    ):
        key = objects.py_key(k)
        if key in wanted:
            rows[key] = _Row(size, codec, external, base is None, depth, stored, created)
    bases = {
        key for (b,) in db.execute("SELECT base FROM objects WHERE base IS NOT NULL")
        if (key := objects.py_key(b)) in wanted
    }

    def convertible(key: str) -> bool:
        row = rows[key]
        return row.codec == objects.CODEC_ZSTD and row.whole and key not in bases and row.created >= since

    found: list[Conversion] = []
    contents = _Contents(store)
    for keys in groups:
        known = sorted((k for k in keys if k in rows and not rows[k].external), key=lambda k: rows[k].size)
        if len(known) < 2:
            continue
        sizes = [rows[k].size for k in known]
        todo = [i for i, k in enumerate(known) if convertible(k)]
        for window, needed in _windows(todo, known, sizes, rows):
            contents.ahead(needed)
            for i in window:
                key = known[i]
                if not convertible(key):  # it became a base in this plan
                    continue
                row = rows[key]
                best = _best_delta(contents, key, _nearest(known, sizes, i, rows), row.stored)
                if best is not None:
                    base, delta = best
                    found.append((key, base, delta, rows[base].depth + 1, row.stored))
                    bases.add(base)  # it has a dependent now: never converted after this
                    row.whole, row.depth = False, rows[base].depth + 1
    return found


def _nearest(known: list[str], sizes: list[int], i: int, rows: dict[str, _Row]) -> list[str]:
    """The :data:`NEIGHBOURS` keys of ``known`` (sorted by size) closest in size to
    ``known[i]`` that may still be a base (their chain below the limit), nearest first: a
    walk outwards from ``i``, not a sort of the whole name group per object (which made the
    plan quadratic in a group's size)."""
    out: list[str] = []
    lo, hi, size = i - 1, i + 1, sizes[i]
    while len(out) < NEIGHBOURS and (lo >= 0 or hi < len(known)):
        if hi >= len(known) or (lo >= 0 and size - sizes[lo] <= sizes[hi] - size):
            k, lo = known[lo], lo - 1
        else:
            k, hi = known[hi], hi + 1
        if rows[k].depth < objects.MAX_DEPTH:
            out.append(k)
    return out


def _windows(
    todo: list[int], known: list[str], sizes: list[int], rows: dict[str, _Row]
) -> Iterator[tuple[list[int], list[str]]]:
    """``todo`` in runs of at most :data:`WINDOW` objects whose contents and candidates' sum
    to at most :data:`WINDOW_BYTES` (one object and its candidates at least), each with the
    keys whose contents it reads."""
    window: list[int] = []
    needed: list[str] = []
    held = 0
    for i in todo:
        keys = [known[i], *_nearest(known, sizes, i, rows)]
        size = sum(rows[k].size for k in keys)
        if window and (len(window) == WINDOW or held + size > WINDOW_BYTES):
            yield window, needed
            window, needed, held = [], [], 0
        window.append(i)
        needed.extend(keys)
        held += size
    if window:
        yield window, needed


class _Contents:
    """The contents a window of conversions reads, fetched together (one chain query per 64
    keys, each content decoded once) instead of a query per read and up to three reads of
    each content; what the next window does not need is let go."""

    def __init__(self, store: StoreReader) -> None:
        self._store = store
        self._held: dict[str, bytes] = {}

    def ahead(self, keys: list[str]) -> None:
        """Hold exactly ``keys``' contents, fetching those not held yet."""
        keep = dict.fromkeys(keys)
        self._held = {k: v for k, v in self._held.items() if k in keep}
        self._held.update(self._store.get_many([k for k in keep if k not in self._held]))

    def __getitem__(self, key: str) -> bytes:
        data = self._held.get(key)
        return self._store.get(key) if data is None else data


def _best_delta(contents: _Contents, key: str, cands: list[str], stored: int) -> tuple[str, bytes] | None:
    if not cands:
        return None
    content = contents[key]
    best: tuple[str, bytes] | None = None
    for base in cands:
        delta = objects.encode_delta(contents[base], content)
        if len(delta) * objects.DELTA_GAIN <= stored and (best is None or len(delta) < len(best[1])):
            best = (base, delta)
    return best


_CONVERT = "UPDATE objects SET codec=?, data=?, stored=?, base=?, depth=? WHERE key=? AND base IS NULL"


def _convert(store: Store, chunk: list[Conversion], planned: int) -> tuple[int, int]:
    """One transaction of conversions; (converted, saved). The links batches choose bases by
    (``deltas.Recent``) change under the same lock as the rows, after the commit.

    What changed since the plan (``planned``, ns) is checked here, under the lock and inside
    the transaction: a key a batch holds, or that an object committed since has as its base,
    stays whole (that object's depth counts it as whole); the depth is the base's as it is
    now, plus one."""
    done: list[tuple[str, tuple[str | None, int]]] = []
    saved = 0
    with store.holds.lock:
        with store.catalog.write() as c:
            rows = c.execute("SELECT base FROM objects WHERE base IS NOT NULL AND created >= ?", (planned,))
            new_bases = {objects.py_key(b) for (b,) in rows}
            for key, base, delta, _, old in chunk:
                if store.holds.spared(key) or key in new_bases:
                    continue
                row = c.execute("SELECT depth FROM objects WHERE key=?", (objects.db_key(base),)).fetchone()
                if row is None or row[0] >= objects.MAX_DEPTH:
                    continue
                depth = int(row[0]) + 1
                link = (objects.db_key(base), depth, objects.db_key(key))
                if c.execute(_CONVERT, (objects.CODEC_DELTA, delta, len(delta), *link)).rowcount:
                    store.catalog.stored_changed(len(delta) - old)
                    done.append((key, (base, depth)))
                    saved += old - len(delta)
        store.recent.add_all(done)
    return len(done), saved


def repack(store: Store, planner: Callable[[int], list[Conversion]] | None = None) -> tuple[int, int]:
    """Convert what is worth it; (objects converted, payload bytes saved). ``planner``: where
    the plan is made (the daemon's GC: its mark process); :func:`plan` over ``store`` here
    by default."""
    start = time.time_ns()
    row = store.catalog.read().execute("SELECT value FROM meta WHERE key=?", (META_KEY,)).fetchone()
    since = int(row[0]) if row else 0
    todo = planner(since) if planner is not None else plan(store, since)
    converted = saved = 0
    for i in range(0, len(todo), CHUNK):
        n, b = _convert(store, todo[i : i + CHUNK], start)
        converted, saved = converted + n, saved + b
    with store.catalog.write() as c:
        c.execute("INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)", (META_KEY, str(start)))
    return converted, saved
