"""Repack (GC's last step, snapd/store/repack.py): whole objects become deltas against a
content of the same file name, as git's pack pairs them.

What is promised (docs/storage.md, "Repack"): every mark reads back byte for byte; a chain
stays at most ``MAX_DEPTH`` long and a delta's depth is its base's plus one; GC never deletes
a base a kept delta needs; a key a batch holds is left alone; each object is tried once; the
freed pages go back to the file system.
"""

from __future__ import annotations

import os
import random
import time
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from ingest_helpers import capture_paths, ingest_tree

from snapd.config import DAY_NS, Retention
from snapd.store import deltas, gc, objects, repack, trees
from snapd.store.store import Store
from snapd.store.verify import verify

pytestmark = pytest.mark.timeout(60)
RELEASES = 4
MODULES = 5


def module(n: int, release: int) -> bytes:
    """Module n as release ``release`` has it: each release edits a few of its lines."""
    rng = random.Random(n)
    lines = [f"def f{n}_{j}(x):\n    return x * {rng.randrange(10**6)} + {j}\n" for j in range(200)]
    for r in range(1, release + 1):
        lines[(r * 37 + n) % len(lines)] = f"# changed in release {r}\n"
    return "".join(lines).encode()


def releases(root: Path) -> dict[bytes, bytes]:
    """A tree of several releases of one project side by side (the multi-release corpus's
    shape): the same names under each release's directory, the contents a little apart."""
    files = {}
    for r in range(RELEASES):
        for n in range(MODULES):
            rel = f"proj-1.{r}/pkg/mod{n}.py"
            (root / rel).parent.mkdir(parents=True, exist_ok=True)
            (root / rel).write_bytes(module(n, r))
            files[os.fsencode(rel)] = module(n, r)
    return files


def links(store: Store) -> dict[str, tuple[int, str | None, int]]:
    """key -> (codec, base, depth) of every object."""
    sql = "SELECT key, codec, base, depth FROM objects"
    return {
        objects.py_key(k): (c, None if b is None else objects.py_key(b), d)
        for k, c, b, d in store.catalog.read().execute(sql)
    }


def read_back(store: Store, mark_id: str) -> dict[bytes, bytes]:
    tree = store.mark(mark_id).tree
    return {p: store.get(e.key) for p, e in trees.walk(store.load_node, tree) if e.kind == "file"}


def baseline(store: Store, root: Path) -> tuple[int, str, dict[bytes, bytes]]:
    files = releases(root)
    ws = store.add_workspace(os.fsencode(root))
    return ws, ingest_tree(store, ws, root).mark_id, files


def test_release_copies_become_deltas_and_read_back_exactly(tmp_path: Path) -> None:
    with Store.open(tmp_path / "s") as store:
        ws, mark_id, files = baseline(store, tmp_path / "ws")
        before = store.stored_bytes()
        assert all(c != objects.CODEC_DELTA for c, _, _ in links(store).values())
        report = gc.run(store, Retention())
        # every copy after the first of each module has a sibling to be stored against
        assert report.repacked >= (RELEASES - 1) * MODULES and report.repack_saved > 0
        assert store.stored_bytes() == before - report.repack_saved
        count = store.catalog.read().execute("SELECT SUM(stored) FROM objects").fetchone()[0]
        assert store.stored_bytes() == count
        rows = links(store)
        by_key = {objects.base_key(objects.xxh3_hex(data), len(data)): path for path, data in files.items()}
        for key, (codec, base, depth) in rows.items():
            if codec == objects.CODEC_DELTA and key in by_key:
                assert base is not None and by_key[base].rsplit(b"/", 1)[1] == by_key[key].rsplit(b"/", 1)[1]
                assert depth == rows[base][2] + 1 <= objects.MAX_DEPTH
        assert read_back(store, mark_id) == files
        assert verify(store).ok
        # each object is tried once: a second GC has nothing new to try
        assert gc.run(store, Retention()).repacked == 0
        # a mark's new content is tried at the next GC
        (tmp_path / "ws" / "proj-1.4" / "pkg").mkdir(parents=True)
        (tmp_path / "ws" / "proj-1.4" / "pkg" / "mod0.py").write_bytes(module(0, 4))
        capture_paths(store, ws, tmp_path / "ws", [b"proj-1.4", b"proj-1.4/pkg/mod0.py"], "1.4")
        assert gc.run(store, Retention()).repacked == 1


def test_gc_keeps_a_base_no_mark_names_any_more(tmp_path: Path) -> None:
    root = tmp_path / "ws"
    with Store.open(tmp_path / "s") as store:
        ws, _, files = baseline(store, root)
        gc.run(store, Retention())
        bases = {b for _, b, _ in links(store).values() if b}
        assert bases
        os.rename(root / "proj-1.0", tmp_path / "gone")  # the first release leaves the tree
        mark = capture_paths(store, ws, root, [b"proj-1.0"], "without-1.0")
        report = gc.run(store, Retention(max_marks=1, grace_s=0, max_age_days=0), now=time.time_ns() + DAY_NS)
        assert report.evicted and report.versions_deleted
        assert bases <= set(links(store))
        kept = {p: d for p, d in files.items() if not p.startswith(b"proj-1.0/")}
        assert read_back(store, mark.id) == kept
        assert verify(store).ok


def test_a_key_a_batch_holds_is_left_whole(tmp_path: Path) -> None:
    with Store.open(tmp_path / "s") as store:
        _, mark_id, files = baseline(store, tmp_path / "ws")
        newest = [module(n, RELEASES - 1) for n in range(MODULES)]
        held = {objects.base_key(objects.xxh3_hex(data), len(data)) for data in newest}
        with store.holds.lock:
            for key in held:
                store.holds.hold(key)
        converted, _ = repack.repack(store)
        assert converted > 0
        assert all(links(store)[k][0] != objects.CODEC_DELTA for k in held)
        assert read_back(store, mark_id) == files


def test_gc_gives_the_freed_pages_back(tmp_path: Path) -> None:
    """Each step of ``PRAGMA incremental_vacuum`` frees one page: GC runs it to its end."""
    root = tmp_path / "ws"
    root.mkdir()
    for i in range(40):
        (root / f"f{i}.bin").write_bytes(os.urandom(20_000))
    with Store.open(tmp_path / "s") as store:
        ws = store.add_workspace(os.fsencode(root))
        ingest_tree(store, ws, root)
        for i in range(40):
            (root / f"f{i}.bin").write_bytes(b"small %d" % i)
        capture_paths(store, ws, root, [b"f%d.bin" % i for i in range(40)], "shrunk")
        db = store.catalog.read()
        pages = db.execute("PRAGMA page_count").fetchone()[0]
        report = gc.run(store, Retention(max_marks=1, grace_s=0, max_age_days=0), now=time.time_ns() + DAY_NS)
        assert report.objects_deleted >= 40
        assert db.execute("PRAGMA freelist_count").fetchone() == (0,)
        assert db.execute("PRAGMA page_count").fetchone()[0] < pages - 150  # 40 x 20 kB freed


def test_a_key_that_became_a_base_after_the_plan_stays_whole(tmp_path: Path) -> None:
    """Between the plan and its transaction a mark stored the next version of a planned
    object as a delta against it (at depth 1, counting it whole): it must stay whole."""
    root = tmp_path / "ws"
    with Store.open(tmp_path / "s") as store:
        ws, _, _ = baseline(store, root)
        start = time.time_ns()
        plan = repack.plan(store, 0)
        rel = b"proj-1.3/pkg/mod0.py"
        planned = trees.lookup(store.load_node, store.head(ws) or "", rel)
        assert planned is not None and planned.key in {k for k, *_ in plan}
        with open(root / os.fsdecode(rel), "ab") as f:
            f.write(b"# one more line\n")
        mark = capture_paths(store, ws, root, [rel], "next")
        newest = trees.lookup(store.load_node, mark.tree, rel)
        assert newest is not None and links(store)[newest.key][1] == planned.key
        converted, _ = repack._convert(store, plan, start)
        assert converted == len(plan) - 1
        assert links(store)[planned.key] == (objects.CODEC_ZSTD, None, 0)
        rows = links(store)
        assert all(rows[k][2] == rows[b][2] + 1 for k, (_, b, _) in rows.items() if b)
        assert store.get(newest.key) == (root / os.fsdecode(rel)).read_bytes()
        assert verify(store).ok


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 50), st.integers(0, objects.MAX_DEPTH)), min_size=1, max_size=40),
    st.data(),
)
def test_the_candidates_are_the_nearest_in_size_that_may_be_bases(
    items: list[tuple[int, int]], data: st.DataObject
) -> None:
    """The walk outwards from an object finds what sorting the whole name group by distance
    found: the ``NEIGHBOURS`` nearest sizes among the others whose chain is below the limit
    (ties may go either way: the distances are compared)."""
    items.sort()
    known = [f"k{j}" for j in range(len(items))]
    sizes = [s for s, _ in items]
    rows = {
        k: repack._Row(size, objects.CODEC_ZSTD, 0, depth == 0, depth, size, 0)
        for k, (size, depth) in zip(known, items, strict=True)
    }
    i = data.draw(st.integers(0, len(known) - 1))
    got = repack._nearest(known, sizes, i, rows)
    others = [j for j in range(len(known)) if j != i and items[j][1] < objects.MAX_DEPTH]
    want = sorted(abs(sizes[j] - sizes[i]) for j in others)[: repack.NEIGHBOURS]
    assert len(set(got)) == len(got) and known[i] not in got
    assert all(rows[k].depth < objects.MAX_DEPTH for k in got)
    assert sorted(abs(rows[k].size - sizes[i]) for k in got) == want


def test_a_repack_reads_contents_a_window_at_a_time(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each object and its candidates are read together with the rest of their window: one
    chain query per name group here, not one per read (three per object tried)."""
    with Store.open(tmp_path / "s") as store:
        _, mark_id, files = baseline(store, tmp_path / "ws")
        queries = []
        real = deltas.read_chains

        def counted(conn: Any, keys: list[str]) -> Any:
            queries.append(len(keys))
            return real(conn, keys)

        monkeypatch.setattr(deltas, "read_chains", counted)
        converted, _ = repack.repack(store)
        monkeypatch.undo()
        assert converted >= (RELEASES - 1) * MODULES
        assert len(queries) <= MODULES, queries  # one window per module name
        assert read_back(store, mark_id) == files
