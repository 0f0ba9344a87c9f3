"""What a mark asks of the catalog: SQLite statements are most of a mark's time at 10^5 files
(docs/benchmarks.md), so the number a mark of a few changed files runs is kept small and
checked here, on a real store (the catalog's own connections, traced)."""

from __future__ import annotations

from pathlib import Path

import pytest
from ingest_helpers import capture_paths, ingest_tree

from snapd.store import objects, trees
from snapd.store.store import Store

pytestmark = pytest.mark.timeout(60)


def test_a_mark_looks_its_new_contents_up_in_one_query(tmp_path: Path) -> None:
    root = tmp_path / "ws"
    root.mkdir()
    for i in range(20):
        (root / f"f{i}.txt").write_bytes(b"first %d\n" % i)
    with Store.open(tmp_path / "store") as store:
        ws = store.add_workspace(bytes(root))
        ingest_tree(store, ws, root)
        changed = [b"f%d.txt" % i for i in range(10)]
        for rel in changed:
            (root / rel.decode()).write_bytes(b"second " + rel)
        seen: list[str] = []
        store.catalog.read().set_trace_callback(seen.append)
        capture_paths(store, ws, root, changed, "turn")
        one_by_one = [s for s in seen if s.startswith("SELECT 1 FROM objects WHERE key=")]
        assert one_by_one == [], f"{len(one_by_one)} single-key lookups for 10 new contents"
        previous = [s for s in seen if "FROM versions" in s]  # the delta bases: their last versions
        assert len(previous) == 1, f"10 files' previous versions looked up with {len(previous)} queries"


def test_a_mark_in_a_reopened_store_looks_its_node_bases_up_together(tmp_path: Path) -> None:
    """A reopened store knows no chain links: the directory nodes a mark rewrites above one
    deep file get their bases' links in one query, and a node stored as a delta is read with
    its whole chain in one query, not one per link."""
    root = tmp_path / "ws"
    deep = root / "a" / "b" / "c" / "d"
    deep.mkdir(parents=True)
    (deep / "f.txt").write_bytes(b"first\n" * 50)
    with Store.open(tmp_path / "store") as store:
        ws = store.add_workspace(bytes(root))
        ingest_tree(store, ws, root)
        for turn in range(3):  # the nodes above f.txt become deltas three links deep
            (deep / "f.txt").write_bytes(b"turn %d\n" % turn * 50)
            tree = capture_paths(store, ws, root, [b"a/b/c/d/f.txt"], "turn").tree
    with Store.open(tmp_path / "store") as store:
        seen: list[str] = []
        store.catalog.read().set_trace_callback(seen.append)
        assert trees.lookup(store.load_node, tree, b"a/b/c/d/f.txt") is not None
        assert len(seen) == 5, f"5 nodes read with {len(seen)} statements"
    with Store.open(tmp_path / "store") as store:
        (deep / "f.txt").write_bytes(b"last\n" * 50)
        seen = []
        store.catalog.read().set_trace_callback(seen.append)
        capture_paths(store, ws, root, [b"a/b/c/d/f.txt"], "turn")
        one_by_one = [s for s in seen if s.startswith("SELECT base, depth FROM objects WHERE key=")]
        assert len(one_by_one) <= 1, f"{len(one_by_one)} single-key link lookups (the file's is one)"


def test_a_mark_in_a_reopened_store_reads_its_nodes_a_level_at_a_time(tmp_path: Path) -> None:
    """Four files in four directories: the 10 nodes above them (the root, a, a/b0..b3,
    a/b0/c..a/b3/c) are read with one query per level of the tree (4), not one per node;
    each file's previous version (its delta base) is one more read."""
    root = tmp_path / "ws"
    files = [f"a/b{i}/c/f.txt" for i in range(4)]
    for rel in files:
        (root / rel).parent.mkdir(parents=True)
        (root / rel).write_bytes(b"first %s\n" % rel.encode() * 20)
    with Store.open(tmp_path / "store") as store:
        ws = store.add_workspace(bytes(root))
        ingest_tree(store, ws, root)
    for rel in files:
        (root / rel).write_bytes(b"second %s\n" % rel.encode() * 20)
    with Store.open(tmp_path / "store") as store:
        seen: list[str] = []
        store.catalog.read().set_trace_callback(seen.append)
        capture_paths(store, ws, root, [f.encode() for f in files], "turn")
        reads = [s for s in seen if s.startswith("WITH RECURSIVE chain")]
        assert len(reads) == 4 + 4, f"{len(reads)} object reads for 10 nodes on 4 levels and 4 files"


def test_a_chain_at_full_depth_is_rebased_without_a_lookup_per_link(tmp_path: Path) -> None:
    """Past ``MAX_DEPTH`` a version is stored against its chain's first object, found by
    walking the chain's links down; the store keeps only each chain's newest link in memory
    (``deltas.Recent``), so the links below come in one query per mark, not one per link
    (a file and the three nodes above it, rebased twice in 18 marks: 48 lookups without it)."""
    root = tmp_path / "ws"
    (root / "a" / "b").mkdir(parents=True)
    source = b"".join(b"def f%d(x):\n    return x * %d\n" % (j, j * j) for j in range(300))
    (root / "a" / "b" / "f.txt").write_bytes(source)
    for i in range(100):  # nodes large enough to be stored as deltas
        (root / "a" / "b" / f"other{i}.txt").write_bytes(b"%d\n" % i)
        (root / "a" / f"other{i}.txt").write_bytes(b"%d\n" % i)
    with Store.open(tmp_path / "store") as store:
        ws = store.add_workspace(bytes(root))
        ingest_tree(store, ws, root)
        one_by_one: list[str] = []
        deepest = 0
        for turn in range(2 * objects.MAX_DEPTH + 2):  # every chain rebased twice
            (root / "a" / "b" / "f.txt").write_bytes(source + b"# turn %d\n" % turn)
            seen: list[str] = []
            store.catalog.read().set_trace_callback(seen.append)
            capture_paths(store, ws, root, [b"a/b/f.txt"], "turn")
            store.catalog.read().set_trace_callback(None)
            one_by_one += [s for s in seen if s.startswith("SELECT base, depth FROM objects WHERE key=")]
            (depth,) = store.catalog.read().execute("SELECT MAX(depth) FROM objects").fetchone()
            deepest = max(deepest, depth)
        assert deepest == objects.MAX_DEPTH, "the chains reached their full depth"
        assert one_by_one == [], f"{len(one_by_one)} single-key link lookups"


def test_a_base_that_is_also_another_paths_deep_base_gets_the_links_below_it(tmp_path: Path) -> None:
    """q holds the content p's newest version is a delta on (depth 7 under p's depth 8): in
    the mark that edits both, that content is q's base, looked up itself, and the base below
    p's newest, whose links the rebase walks. Its own link known must not stand for the links
    below it (7 single-key lookups when it did; found by review)."""
    root = tmp_path / "ws"
    (root / "a").mkdir(parents=True)
    source = b"".join(b"def f%d(x):\n    return x * %d\n" % (j, j * j) for j in range(300))
    p, q = root / "a" / "p.txt", root / "a" / "q.txt"
    p.write_bytes(source)
    for i in range(50):
        (root / "a" / f"o{i}.txt").write_bytes(b"%d\n" % i)
    with Store.open(tmp_path / "store") as store:
        ws = store.add_workspace(bytes(root))
        ingest_tree(store, ws, root)
        for turn in range(objects.MAX_DEPTH):
            p.write_bytes(source + b"# %d\n" % turn)
            paths = [b"a/p.txt"]
            if turn == objects.MAX_DEPTH - 1:  # q takes p's version before this one
                q.write_bytes(source + b"# %d\n" % (turn - 1))
                paths.append(b"a/q.txt")
            capture_paths(store, ws, root, paths, "turn")
        last = store.last_objects(ws, [b"a/p.txt", b"a/q.txt"])
        assert store.delta_link(last[b"a/p.txt"]) == (last[b"a/q.txt"], objects.MAX_DEPTH)
        p.write_bytes(source + b"# last\n")
        q.write_bytes(source + b"# q\n")
        seen: list[str] = []
        store.catalog.read().set_trace_callback(seen.append)
        capture_paths(store, ws, root, [b"a/p.txt", b"a/q.txt"], "both")
        store.catalog.read().set_trace_callback(None)
        one_by_one = [s for s in seen if s.startswith("SELECT base, depth FROM objects WHERE key=")]
        assert one_by_one == [], f"{len(one_by_one)} single-key link lookups"
