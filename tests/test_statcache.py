"""The stat cache's footprint and its one-step scan check, and what a baseline leaves behind
(docs/benchmarks.md, issue 12).

At 10^5 paths the stat cache is the daemon's largest structure: its entries must stay compact,
its regular-file count must not need a walk, and :meth:`StatCache.seen` (the reconcile scan's
one call per path) must judge exactly as :meth:`is_clean` and :meth:`listing_trusted` do.
"""

from __future__ import annotations

import os
import stat
import tracemalloc
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from snapd.capture import statcache
from snapd.capture.statcache import RACY_NS, StatCache
from snapd.statrow import ROW

S = 10**9
FILE, DIR, LINK = 0o100644, 0o040755, 0o120777


def test_entries_are_compact() -> None:
    """Loaded from the catalog's rows, an entry (path and signature) holds under 200 bytes of
    heap once the rows are gone; a tuple of six ints per path held over 400 (a 100k-file
    workspace has ~150k entries)."""
    n = 20_000
    tracemalloc.start()
    try:
        rows = [
            (
                f"d{i // 10}/f{i}".encode(),
                ROW.pack(FILE, i + 1000, 1_700 * S + i, 1_700 * S + i, 10**6 + i, 1_800 * S + i),
            )
            for i in range(n)
        ]
        cache = StatCache.from_rows(rows)
        del rows
        used = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    assert len(cache) == n
    assert used / n < 200, f"{used / n:.0f} bytes per entry"


def test_file_count_follows_every_change() -> None:
    cache = StatCache({b"d": ((DIR, 0, 1, 1, 1), 5), b"d/a": ((FILE, 1, 1, 1, 2), 5)})
    assert cache.files() == 1
    cache.set(b"d/b", (FILE, 1, 1, 1, 3), 5)
    cache.set(b"d/a", (LINK, 1, 1, 1, 2), 5)  # a file replaced by a symlink
    assert cache.files() == 1
    cache.set(b"d/a", (FILE, 1, 1, 1, 4), 5)
    cache.set(b"d/a", (FILE, 2, 1, 1, 4), 5)  # rewritten: still one file
    assert cache.files() == 2
    cache.remove(b"d")  # a directory and what it held
    assert cache.files() == 0 and len(cache) == 0


def test_entries_round_trip_whatever_the_values() -> None:
    """Negative times (before 1970) and 64-bit inodes come back as stored."""
    sig = (FILE, 2**40, -5 * S, -4 * S, 2**63 - 1)
    cache = StatCache.from_rows([(b"f", ROW.pack(*sig, -3 * S))])
    assert cache.get(b"f") == (sig, -3 * S)
    assert cache.take_changes() == {}  # loaded, not learnt: nothing to write back
    cache.set(b"g", sig, 7)
    assert cache.get(b"g") == (sig, 7) and cache.take_changes() == {b"g": (sig, 7)}


_modes = st.sampled_from([FILE, DIR, LINK])
_times = st.integers(0, 20).map(lambda x: 1_000 * S + x * (RACY_NS // 2))


@settings(max_examples=300, deadline=None)
@given(
    was=st.tuples(_modes, st.integers(0, 2), _times, _times, st.integers(1, 2)),
    now=st.tuples(_modes, st.integers(0, 2), _times, _times, st.integers(1, 2)),
    read=_times,
    clock=_times,
    cached=st.booleans(),
)
def test_seen_judges_as_is_clean_and_listing_trusted(
    was: tuple[int, ...], now: tuple[int, ...], read: int, clock: int, cached: bool
) -> None:
    cache = StatCache({b"p": ((was[0], was[1], was[2], was[3], was[4]), read)} if cached else None)
    sig = (now[0], now[1], now[2], now[3], now[4])
    fake = os.stat_result((sig[0], sig[4], 1, 1, 0, 0, sig[1], 0, 0, 0, 0.0, 0.0, 0.0, 0, sig[2], sig[3]))
    assert (fake.st_mtime_ns, fake.st_ctime_ns, fake.st_ino) == (sig[2], sig[3], sig[4])
    assert cache.seen(b"p", fake, clock) == (
        cache.is_clean(b"p", sig, clock),
        cache.listing_trusted(b"p", sig, clock),
    )


def test_seen_notes_hard_links(tmp_path: Path) -> None:
    (tmp_path / "a").write_bytes(b"x")
    os.link(tmp_path / "a", tmp_path / "b")
    st_a = os.lstat(tmp_path / "a")
    cache = StatCache({b"a": ((st_a.st_mode, 1, 1, 1, st_a.st_ino), 1)})
    cache.seen(b"a", st_a, 0)
    assert cache.loose_links() == [b"a"], "two links, one name known: re-checked at marks"
    os.unlink(tmp_path / "b")
    cache.seen(b"a", os.lstat(tmp_path / "a"), 0)
    assert cache.loose_links() == [] and stat.S_ISREG(st_a.st_mode)


def test_changes_waiting_for_a_commit_hold_no_second_copy() -> None:
    """A baseline sets every entry before its one commit: what waits for take_changes is the
    path, not another copy of the entry (the copies fragmented a 100k-file baseline's heap)."""
    n = 20_000
    paths = [f"d{i // 10}/f{i}".encode() for i in range(n)]
    cache = StatCache()
    tracemalloc.start()
    try:
        for i, p in enumerate(paths):
            cache.set(p, (FILE, i + 1000, 1_700 * S + i, 1_700 * S + i, 10**6 + i), 1_800 * S + i)
        used = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    assert used / n < 300, f"{used / n:.0f} bytes per entry set"  # a copy each: over 400
    cache.set(b"d", (DIR, 0, 1, 1, 1), 5)
    cache.remove(b"d0")  # set above, then gone with its directory: never stored, nothing to delete
    changes = cache.take_changes()
    assert changes._packed is cache._entries, "a new cache's first changes are its entries, not a copy"
    assert b"d0/f1" not in changes and changes.removed() == [] and changes[b"d"] == ((DIR, 0, 1, 1, 1), 5)
    assert changes[b"d1/f10"] == ((FILE, 1010, 1_700 * S + 10, 1_700 * S + 10, 10**6 + 10), 1_800 * S + 10)
    assert len(changes) == n - 10 + 1 and cache.take_changes() == {}
    # A cache loaded from the store: its changes are the paths since, a removal written as one.
    loaded = StatCache.from_rows(changes.rows())
    loaded.set(b"e", (DIR, 0, 1, 1, 1), 5)
    loaded.remove(b"d1")
    later = loaded.take_changes()
    assert later[b"d1"] is None and later[b"e"] == ((DIR, 0, 1, 1, 1), 5) and len(later) == 2
    assert later.removed() == [b"d1"] and loaded.take_changes() == {}


def test_a_new_caches_changes_refuse_to_be_read_once_it_changed() -> None:
    """A new workspace's first changes are the cache's own entries: a put or removal before
    they are written would write rows for what the commit's tree does not hold, so reading
    them then is refused, never a silent mix."""
    for edit in (lambda c: c.set(b"b", (FILE, 2, 2, 2, 2), 3), lambda c: c.remove(b"a")):
        cache = StatCache()
        cache.set(b"a", (FILE, 1, 1, 1, 1), 2)
        changes = cache.take_changes()
        assert dict(changes.rows()) == {b"a": ROW.pack(FILE, 1, 1, 1, 1, 2)}
        edit(cache)
        with pytest.raises(RuntimeError, match="changed before its changes were written"):
            list(changes.rows())


def test_children_of_small_and_big_directories() -> None:
    """The directory index stays exact whether a directory holds a few names (a list) or many
    (a set): names added, removed one by one, and a whole directory removed."""
    f = (FILE, 1, 1, 1, 1)
    cache = StatCache({b"big": ((DIR, 0, 1, 1, 2), 1), b"small": ((DIR, 0, 1, 1, 3), 1)})
    for i in range(40):
        cache.set(b"big/f%d" % i, f, 1)
    cache.set(b"small/a", f, 1)
    assert cache.children(b"big") == {b"big/f%d" % i for i in range(40)}  # the index, built now
    for i in range(45):
        cache.set(b"big/f%d" % i, f, 1)  # 40 again, 5 new: listed once each
    for i in range(0, 45, 2):
        cache.remove(b"big/f%d" % i)
    cache.set(b"small/b", f, 1)
    cache.remove(b"small/a")
    assert cache.children(b"big") == {b"big/f%d" % i for i in range(1, 45, 2)}
    assert cache.children(b"small") == {b"small/b"} and cache.children(b"") == {b"big", b"small"}
    assert sorted(cache.under(b"small")) == [b"small", b"small/b"]
    cache.remove(b"big")
    assert cache.children(b"big") == set() and len(cache) == 2 and cache.files() == 1


def test_changes_are_written_in_path_order_and_packed() -> None:
    """A baseline's 10^5 stat rows go to SQLite in key order (appended, not split into its
    pages at random), each as the packed bytes the catalog stores (format 7): the changes hold
    packed bytes, never a tuple per path."""
    cache = StatCache()
    names = [b"z", b"a/c", b"m", b"a", b"a/b", b"b"]
    for i, p in enumerate(names):
        cache.set(p, (FILE, i, i, i, i), 10 + i)
    cache.remove(b"m")
    changes = cache.take_changes()
    assert [r[0] for r in changes.rows()] == sorted(set(names) - {b"m"})
    assert next(iter(changes.rows())) == (b"a", ROW.pack(FILE, 3, 3, 3, 3, 13))
    assert all(type(v) is bytes for v in changes._packed.values())
    loaded = StatCache.from_rows(changes.rows())  # a known workspace's: removals are rows too
    for i, p in enumerate(names):
        loaded.set(p, (FILE, i, i, i, i), 20 + i)
    loaded.remove(b"b")
    again = loaded.take_changes()
    assert [r[0] for r in again.rows()] == sorted(set(names) - {b"b"})
    assert again.removed() == [b"b"] and again[b"b"] is None
    assert all(type(v) is bytes or v is None for v in again._packed.values())


def test_a_baseline_leaves_no_tree_nodes_cached(tmp_path: Path) -> None:
    """The nodes a baseline wrote are not kept (they pinned its fragmented heap); a mark after
    it reloads what it needs and holds the change."""
    from snapd.capture.workspace import Workspace
    from snapd.config import CaptureSettings
    from snapd.store.store import Store

    root = tmp_path / "ws"
    for i in range(30):
        (root / f"d{i}" / "e").mkdir(parents=True)
        (root / f"d{i}" / "e" / "f").write_text(str(i))
    store = Store.open(tmp_path / "store")
    ws = Workspace(store, store.add_workspace(os.fsencode(root)), root, CaptureSettings())
    try:
        assert ws.start() is not None  # the baseline
        assert store.cached_nodes == 0
        (tree,) = store.catalog.read().execute("SELECT tree FROM marks WHERE kind='baseline'").fetchone()
        assert store.recent.get(tree) is None, "nor the chain links of the objects it wrote"
        (root / "d3" / "e" / "f").write_text("changed")
        mark = ws.mark("after")
        assert mark.summary.get("changed") == 1
    finally:
        ws.stop()
        store.close()


@pytest.mark.parametrize("files", [30, 2100])  # read in threads; in reader processes
def test_a_baseline_builds_its_tree_as_its_walk_goes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, files: int
) -> None:
    """A real walk's changes reach the tree build in an order it builds as they come (each
    directory saved once the walk leaves it), never through the general algorithm, which
    holds the whole tree at once; and the tree is the one on disk."""
    from snapd.capture.workspace import Workspace
    from snapd.config import CaptureSettings
    from snapd.store import trees
    from snapd.store.store import Store

    root = tmp_path / "ws"
    want: dict[bytes, bytes] = {}
    for i in range(files):
        rel = f"d{i % 7}/e{i % 5}/f{i % 3}/n{i}.txt" if i % 4 else f"d{i % 7}/top{i}.txt"
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(str(i))
        want[rel.encode()] = str(i).encode()
    (root / "empty" / "below").mkdir(parents=True)

    def general(*args: object) -> object:
        raise AssertionError("the baseline's changes took the general algorithm")

    monkeypatch.setattr(trees, "_nest", general)
    store = Store.open(tmp_path / "store")
    ws = Workspace(store, store.add_workspace(os.fsencode(root)), root, CaptureSettings())
    try:
        assert ws.start() is not None  # the baseline
        assert ws.tree is not None
        got = dict(trees.walk(store.load_node, ws.tree))
        assert {p: store.get(e.key) for p, e in got.items() if e.kind == "file"} == want
        assert got[b"empty/below"].kind == "dir"
    finally:
        ws.stop()
        store.close()


def test_a_restat_looks_at_nothing_below_what_is_no_longer_a_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A restart's judgement of the cached rows (``restat``): below a directory that is now a
    symlink (it may lead anywhere: a hung mount too), a file, or gone, nothing is stat'ed or
    reported; their subtrees interleave in sorted order with names like ``a.d`` ("a", "a.d",
    "a.d/x", "a/y")."""
    root = tmp_path / "ws"
    for d in ("a", "a.d", "b", "c"):
        (root / d).mkdir(parents=True)
    for f in ("a/y", "a/z", "a.d/x", "b/w", "c/v"):
        (root / f).write_text(f)
    read_at = 10**19 // 2  # well after every mtime: nothing racy
    cache = StatCache()
    for rel in (b"a", b"a.d", b"a.d/x", b"a/y", b"a/z", b"b", b"b/w", b"c", b"c/v"):
        st = os.lstat(root / os.fsdecode(rel))
        cache.set(rel, (st.st_mode, st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino), read_at)
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "y").write_text("a/y")
    for f in ("a/y", "a/z", "a.d/x", "b/w"):
        (root / f).unlink()
    (root / "a").rmdir()
    (root / "a").symlink_to(outside)
    (root / "a.d").rmdir()
    (root / "a.d").write_text("a file now")
    (root / "b").rmdir()
    stated: list[bytes] = []
    real = os.lstat

    def noted(path: bytes, *, dir_fd: int | None = None) -> os.stat_result:
        stated.append(path)
        return real(path, dir_fd=dir_fd)

    monkeypatch.setattr(os, "lstat", noted)
    paths = sorted(cache.paths())
    reported = statcache.restat(os.fsencode(root), cache.rows(paths), read_at)
    monkeypatch.setattr(os, "lstat", real)
    assert stated == [b"a", b"a.d", b"b", b"c", b"c/v"]
    assert [(r.path, r.mode is None) for r in reported] == [(b"a", False), (b"a.d", False), (b"b", True)]
