"""Delta objects (store format 5): a new version stored against the previous one.

What is promised (docs/storage.md, "Objects"): a mark's edited file and its rewritten
directory nodes are stored as deltas against their previous versions; a chain is never longer
than ``objects.MAX_DEPTH``; a read verifies the decoded bytes, and a delta whose base is
missing or corrupt is an error, never content; GC never deletes a base a kept object needs;
a store written by the release before format 5, or before format 6 (binary keys), opens
and reads every mark.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import shutil
import sqlite3
import stat
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from ingest_helpers import capture_paths, ingest_tree

from snapd.capture.statcache import StatCache
from snapd.config import DAY_NS, Retention
from snapd.errors import CorruptObject, MissingObject
from snapd.store import damage as damaged
from snapd.store import gc, nodes, objects, trees
from snapd.store import store as store_module
from snapd.store.catalog import FORMAT_VERSION
from snapd.store.ignored import IgnoredNames
from snapd.store.records import State
from snapd.store.store import Store
from snapd.store.verify import verify

pytestmark = pytest.mark.timeout(60)
FIXTURES = Path(__file__).parent / "fixtures"
SOURCE = "".join(f"def f{j}(x):\n    return x * {j} + {j * j}\n" for j in range(300)).encode()


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    with Store.open(tmp_path / "s") as s:
        yield s


def rows(store: Store) -> dict[str, tuple[int, str | None, int, int]]:
    """key -> (codec, base, depth, stored bytes) of every object."""
    sql = "SELECT key, codec, base, depth, stored FROM objects"
    return {
        objects.py_key(k): (c, None if b is None else objects.py_key(b), d, s)
        for k, c, b, d, s in store.catalog.read().execute(sql)
    }


def contents(store: Store, tree: str) -> dict[bytes, bytes]:
    return {p: store.get(e.key) for p, e in trees.walk(store.load_node, tree) if e.kind == "file"}


def edit_series(store: Store, root: Path, turns: int) -> tuple[int, list[tuple[str, dict[bytes, bytes]]]]:
    """A baseline, then ``turns`` marks each appending a line to src/pkg/a.py; each mark's id
    and the contents that were on disk when it was taken."""
    pkg = root / "src" / "pkg"
    pkg.mkdir(parents=True)
    (pkg / "a.py").write_bytes(SOURCE)
    for i in range(20):
        (pkg / f"other{i}.py").write_bytes(b"x = %d\n" % i * 20)
    ws = store.add_workspace(os.fsencode(root))
    taken = [(ingest_tree(store, ws, root).mark_id, on_disk(root))]
    for turn in range(turns):
        with open(pkg / "a.py", "ab") as f:
            f.write(b"# turn %d\n" % turn)
        taken.append((capture_paths(store, ws, root, [b"src/pkg/a.py"], f"t{turn}").id, on_disk(root)))
    return ws, taken


def damage(store: Store, key: str) -> None:
    """Change one byte of an inline object's stored payload."""
    with store.catalog.write() as c:
        data = bytearray(
            c.execute("SELECT data FROM objects WHERE key=?", (objects.db_key(key),)).fetchone()[0]
        )
        data[len(data) // 2] ^= 0xFF
        c.execute("UPDATE objects SET data=? WHERE key=?", (bytes(data), objects.db_key(key)))


def on_disk(root: Path) -> dict[bytes, bytes]:
    return {os.fsencode(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file()}


def assert_marks_read_back(store: Store, taken: list[tuple[str, dict[bytes, bytes]]]) -> None:
    kept = {m.id: m for m in store.marks()}
    for mark_id, expected in taken:
        if mark_id in kept:
            assert contents(store, kept[mark_id].tree) == expected, mark_id


def test_successive_versions_are_small_deltas_in_bounded_chains(store: Store, tmp_path: Path) -> None:
    _, taken = edit_series(store, tmp_path / "ws", 3 * objects.MAX_DEPTH)
    assert_marks_read_back(store, taken)
    objs = rows(store)
    deltas = {k: r for k, r in objs.items() if r[0] == objects.CODEC_DELTA}
    assert max(d for _, _, d, _ in objs.values()) <= objects.MAX_DEPTH
    assert all(r[1] in objs and r[2] == objs[r[1]][2] + 1 for r in deltas.values())  # depth = base's + 1
    versions = [store.mark(m).tree for m, _ in taken[1:]]
    file_keys = {trees.lookup(store.load_node, t, b"src/pkg/a.py").key for t in versions}  # type: ignore[union-attr]
    # Every version is a delta: past MAX_DEPTH, against the chain's first object (stored whole)
    assert all(k in deltas for k in file_keys), [rows(store)[k] for k in file_keys]
    assert all(deltas[k][3] < 200 for k in file_keys), "a few appended lines cost bytes, not a file"
    pkg_nodes = {trees.lookup(store.load_node, t, b"src/pkg").key for t in versions}  # type: ignore[union-attr]
    assert any(k in deltas for k in pkg_nodes), "a rewritten directory node is a delta too"
    assert verify(store).ok


def test_the_recent_links_keep_the_newest_of_each_chain(store: Store, tmp_path: Path) -> None:
    """The store's recent chain links (``deltas.Recent``) serve the next version's base: a
    version a newer one superseded must leave them, whether the newer one is a delta on it, a
    delta rebased on its chain's first object (past ``MAX_DEPTH``) or stored whole. Kept, a
    long day's marks filled the whole bound (65,536 links, 12 MB, for a workspace of 5,000
    files: issue 33's soak)."""
    _, taken = edit_series(store, tmp_path / "ws", 3 * objects.MAX_DEPTH)
    head = store.mark(taken[-1][0]).tree
    live = {head} | {e.key for _, e in trees.walk(store.load_node, head)}
    kept = {k for k in rows(store) if k in store.recent}
    assert kept - live == set(), f"{len(kept - live)} superseded versions kept of {len(kept)}"
    # The newest versions stay (the next mark's bases): the file, its directory, the root
    newest = [trees.lookup(store.load_node, head, p) for p in (b"src/pkg/a.py", b"src/pkg")]
    assert all(e is not None and e.key in store.recent for e in newest) and head in store.recent
    assert len(store.recent) == len(kept)


def test_a_delta_whose_base_is_corrupt_or_missing_is_an_error(store: Store, tmp_path: Path) -> None:
    _, taken = edit_series(store, tmp_path / "ws", 2)
    objs = rows(store)
    key = trees.lookup(store.load_node, store.mark(taken[-1][0]).tree, b"src/pkg/a.py").key  # type: ignore[union-attr]
    base = objs[key][1]
    assert objs[key][0] == objects.CODEC_DELTA and base is not None
    root = base
    while objs[root][1] is not None:
        root = objs[root][1]  # type: ignore[assignment]
    damage(store, root)  # the chain's whole object
    with pytest.raises(CorruptObject):
        store.get(key)
    report = verify(store)
    assert key in report.corrupt and taken[-1][0] in report.corrupt[key]
    with store.catalog.write() as c:
        c.execute("DELETE FROM objects WHERE key=?", (objects.db_key(base),))
    with pytest.raises(MissingObject, match=f"delta against {base}"):
        store.get(key)


def test_every_path_and_mark_through_a_damaged_base_is_located(store: Store, tmp_path: Path) -> None:
    """verify names, for the damaged object (the chain's first), every version stored through
    it at any depth, by path and mark; a read error names both the object read and the link
    that is damaged (corrupt, or missing: its row deleted)."""
    _, taken = edit_series(store, tmp_path / "ws", 4)
    objs = rows(store)
    versions = [trees.lookup(store.load_node, store.mark(m).tree, b"src/pkg/a.py").key for m, _ in taken]  # type: ignore[union-attr]
    first = versions[0]
    assert objs[first][0] != objects.CODEC_DELTA and all(objs[k][2] == i for i, k in enumerate(versions))
    damage(store, first)
    with pytest.raises(CorruptObject) as caught:
        store.get(versions[-1])
    hurt = damaged.Unreadable.of(caught.value)
    assert (hurt.key, hurt.damaged, hurt.problem) == (versions[-1], first, "corrupt")
    assert first in hurt.reason and "delta base" in hurt.reason
    report = verify(store)
    (d,) = report.damage
    assert d.key == first and d.problem == "corrupt"
    by_key = {r.key: r for r in d.refs}
    assert set(by_key) == set(versions) and {r.path for r in d.refs} == {b"src/pkg/a.py"}
    assert [m for m, _ in taken] == [m for k in versions for m in by_key[k].marks]
    assert by_key[versions[-1]].latest and not by_key[versions[0]].latest
    assert set(report.corrupt) == set(versions)
    with store.catalog.write() as c:
        c.execute("DELETE FROM objects WHERE key=?", (objects.db_key(versions[1]),))
    with pytest.raises(MissingObject) as missing:
        store.get(versions[3])
    assert damaged.Unreadable.of(missing.value)[:3] == (versions[3], versions[1], "missing")


def test_a_damaged_node_is_located_as_its_directory(store: Store, tmp_path: Path) -> None:
    _, taken = edit_series(store, tmp_path / "ws", 2)
    node = trees.lookup(store.load_node, store.mark(taken[0][0]).tree, b"src/pkg").key  # type: ignore[union-attr]
    damage(store, node)
    store.forget_caches()
    (d,) = verify(store).damage
    assert d.key == node
    assert {(r.path, r.kind) for r in d.refs} == {(b"src/pkg", "dir")}
    assert taken[0][0] in {m for r in d.refs for m in r.marks}


def test_a_damaged_base_node_is_found_though_its_encoding_is_kept(store: Store, tmp_path: Path) -> None:
    """The encodings the store keeps of recent nodes serve new deltas only: a read through a
    chain verifies every base in the catalog, so it still finds a damaged one."""
    _, taken = edit_series(store, tmp_path / "ws", 2)
    objs = rows(store)
    key = trees.lookup(store.load_node, store.mark(taken[-1][0]).tree, b"src/pkg").key  # type: ignore[union-attr]
    base = objs[key][1]
    assert objs[key][0] == objects.CODEC_DELTA and base is not None and store.node_bytes(base) is not None
    damage(store, base)
    with pytest.raises(CorruptObject):
        store.get(key)


def test_a_damaged_previous_version_does_not_stop_the_next_one(store: Store, tmp_path: Path) -> None:
    """The base a new version would be stored against is corrupt: the new version is stored
    whole, and reads back exactly."""
    root = tmp_path / "ws"
    ws, taken = edit_series(store, root, 0)
    old = trees.lookup(store.load_node, store.mark(taken[0][0]).tree, b"src/pkg/a.py")
    assert old is not None
    damage(store, old.key)
    store.recent.forget(old.key)  # as after a restart: the damage is on disk only
    with open(root / "src" / "pkg" / "a.py", "ab") as f:
        f.write(b"# after the damage\n")
    mark = capture_paths(store, ws, root, [b"src/pkg/a.py"], "next")
    new = trees.lookup(store.load_node, mark.tree, b"src/pkg/a.py")
    assert new is not None and rows(store)[new.key][0] != objects.CODEC_DELTA
    assert store.get(new.key) == (root / "src" / "pkg" / "a.py").read_bytes()


@pytest.mark.parametrize(
    "policy",
    [
        Retention(max_marks=2, grace_s=0, max_age_days=0),  # count and age
        Retention(budget_bytes=40_000, grace_s=0, max_age_days=1),  # the budget, versions 2 days old
    ],
    ids=["count", "budget"],
)
def test_gc_never_deletes_a_base_that_a_kept_object_needs(
    store: Store, tmp_path: Path, policy: Retention
) -> None:
    """The newest version of a file is a delta whose chain starts at the baseline's object,
    which no kept mark or version names: GC must keep the chain. Replaced incompressible
    contents (no delta) give the sweep something to delete."""
    root = tmp_path / "ws"
    (root / "bin").mkdir(parents=True)
    (root / "bin" / "blob").write_bytes(os.urandom(30_000))
    ws, taken = edit_series(store, root, 4)
    for i in range(3):
        (root / "bin" / "blob").write_bytes(os.urandom(30_000))
        with open(root / "src" / "pkg" / "a.py", "ab") as f:
            f.write(b"# blob %d\n" % i)
        mark = capture_paths(store, ws, root, [b"bin/blob", b"src/pkg/a.py"], f"b{i}")
        taken.append((mark.id, on_disk(root)))
    report = gc.run(store, policy, now=time.time_ns() + 2 * DAY_NS)
    assert report.evicted and report.objects_deleted, report
    kept = {m.id for m in store.marks()}
    assert taken[-1][0] in kept and len(kept) < len(taken)
    assert_marks_read_back(store, taken)
    assert verify(store).ok
    newest = trees.lookup(store.load_node, store.mark(taken[-1][0]).tree, b"src/pkg/a.py")
    assert newest is not None and rows(store)[newest.key][2] > 1  # it is a chain, and it was kept


def open_fixture(tmp_path: Path, fixture: Path) -> tuple[Store, dict[str, dict[str, list[str]]]]:
    shutil.copytree(fixture / "store", tmp_path / "store")
    manifest = json.loads((fixture / "manifest.json").read_text())
    return Store.open(tmp_path / "store"), manifest


def stored_state(store: Store, tree: str) -> dict[str, list[str]]:
    """A mark as the fixture's manifest records a workspace: path -> [kind, sha256 of content]."""
    out: dict[str, list[str]] = {}
    for path, e in trees.walk(store.load_node, tree):
        digest = "" if e.kind == "dir" else hashlib.sha256(store.get(e.key)).hexdigest()
        out[os.fsdecode(path)] = [e.kind, digest]
    return out


@pytest.mark.parametrize("fmt", [4, 5, 6, 7, 8, 9])
def test_a_store_written_by_the_previous_release_reads_every_mark(tmp_path: Path, fmt: int) -> None:
    """tests/fixtures/store-format4 was written by commit 8d903f1 (format 4), store-format5 by
    c8109a5 (format 5, with deltas), store-format6 by 7938ed3 (format 6, with a stat cache),
    store-format7 by 32af038 (format 7, packed stat rows), store-format8 by 6882ac9 (format 8, ignored
    names and states), store-format9 by 9ede0cf (format 9, pushed marks; before wide directories
    in parts; see make_store_fixture.py). Each opens as today's format, its marks (before
    format 8) without ignored names (NULL: a rollback keeps the old rule),
    with every key converted to a blob, every mark reads back as the workspace was on disk, and
    a new version of an old file is stored as a delta against an object the old release wrote."""
    fixture = FIXTURES / f"store-format{fmt}"
    old = sqlite3.connect(fixture / "store" / "catalog.sqlite")
    assert old.execute("SELECT value FROM meta WHERE key='format'").fetchone() == (str(fmt),)
    # text up to format 5, a blob from format 6 on
    old_keys = {k if isinstance(k, str) else objects.py_key(k)
                for (k,) in old.execute("SELECT key FROM objects")}
    old.close()
    store, manifest = open_fixture(tmp_path, fixture)
    with store:
        db = store.catalog.read()
        assert db.execute("SELECT value FROM meta WHERE key='format'").fetchone() == (str(FORMAT_VERSION),)
        assert db.execute(
            "SELECT COUNT(*) FROM objects WHERE typeof(key)!='blob' OR typeof(base) NOT IN ('blob','null')"
        ).fetchone() == (0,)
        assert db.execute("SELECT COUNT(*) FROM versions WHERE typeof(object)='text'").fetchone() == (0,)
        assert set(rows(store)) == old_keys
        marks = {m.id: m for m in store.marks()}
        assert set(marks) == set(manifest)
        if fmt < 8:  # format 8 recorded the ignored names already
            assert all(m.ignored is None for m in marks.values())
            assert all(store.live_ignored(w.id) is None for w in store.workspaces())
        for mark_id, expected in manifest.items():
            assert stored_state(store, marks[mark_id].tree) == expected, mark_id
        assert verify(store).ok
        (ws,) = [w.id for w in store.workspaces()]
        newest = max(marks.values(), key=lambda m: m.seq)
        root = tmp_path / "ws"
        for path, data in contents(store, newest.tree).items():
            (root / os.fsdecode(path)).parent.mkdir(parents=True, exist_ok=True)
            (root / os.fsdecode(path)).write_bytes(data)
        with open(root / "src" / "pkg" / "mod0.py", "ab") as f:
            f.write(b"# after the upgrade\n")
        mark = capture_paths(store, ws, root, [b"src/pkg/mod0.py"], "upgraded")
        entry = trees.lookup(store.load_node, mark.tree, b"src/pkg/mod0.py")
        assert entry is not None
        codec, base, _, _ = rows(store)[entry.key]
        assert codec == objects.CODEC_DELTA and base is not None
        assert base in old_keys
        assert store.get(entry.key) == (root / "src" / "pkg" / "mod0.py").read_bytes()
        for mark_id, expected in manifest.items():
            assert stored_state(store, marks[mark_id].tree) == expected, mark_id


def test_a_format_6_stat_cache_comes_back_packed(tmp_path: Path) -> None:
    """store-format6 holds the stat cache a workspace's catch-up stored, six numbers a row. It
    opens as format 7 (each row one packed blob, snapd/statrow.py) and every entry loads as
    the old release wrote it; a changed entry is written and read back in the new form."""
    fixture = FIXTURES / "store-format6"
    old = sqlite3.connect(fixture / "store" / "catalog.sqlite")
    was = {
        path: ((mode, size, mtime, ctime, ino), read)
        for path, mode, size, mtime, ctime, ino, read in old.execute(
            "SELECT path, mode, size, mtime, ctime, ino, read FROM stats WHERE workspace=1"
        )
    }
    old.close()
    assert len(was) > 5 and {stat.S_IFMT(sig[0]) for sig, _ in was.values()} >= {
        stat.S_IFREG, stat.S_IFDIR, stat.S_IFLNK
    }
    store, _ = open_fixture(tmp_path, fixture)
    with store:
        db = store.catalog.read()
        assert [r[1] for r in db.execute("PRAGMA table_info(stats)")] == ["workspace", "path", "sig"]
        cache = StatCache.from_rows(store.load_stats(1))
        assert {p: cache.get(p) for p in cache.paths()} == was
        added = (stat.S_IFREG | 0o644, 7, 8, 9, 10)
        cache.set(b"src/added.txt", added, 11)
        with store.batch() as batch:
            batch.set_stats(1, cache.take_changes())
        again = StatCache.from_rows(store.load_stats(1))
        assert again.get(b"src/added.txt") == (added, 11)
        assert len(again) == len(was) + 1


def test_the_node_encodings_the_store_keeps_are_their_keys_contents(tmp_path: Path) -> None:
    """The store keeps the encodings of the nodes read and written last, for the next deltas'
    bases and chain reads. With every content forced onto one digest, a node whose key is taken
    gets a variant key: what the store keeps under each key must be that key's stored content
    (a fresh store reads it), or the next delta would be made against other bytes."""
    constant = "0" * 32
    entry = trees.Entry("file", 0o644, 1, "1" * 32 + "-1")
    with Store.open(tmp_path / "s", hasher=lambda data: constant) as s:
        with s.batch() as b:
            b.put(b"x" * len(nodes.encode_node({b"f": entry})))  # takes the next node's key
            tree = b.apply(None, {b"d/g": entry})
        for name in (b"f", b"h", b"f"):  # each edit a delta against the node before
            with s.batch() as b:
                tree = b.apply(tree, {b"d/g": None, b"d/h": None, b"d/f": None, b"d/" + name: entry})
        kept = {k: s.node_bytes(k) for k in rows(s)}
        kept_keys = sorted(k for k, v in kept.items() if v is not None)
        assert len(kept_keys) >= 4
        with Store.open(tmp_path / "s", hasher=lambda data: constant) as fresh:
            assert {k: kept[k] for k in kept_keys} == {k: fresh.get(k) for k in kept_keys}
            assert trees.lookup(fresh.load_node, tree, b"d/f") == entry


def test_a_small_delta_is_stored_without_compressing_its_content_whole(
    store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A delta under 1/16 of its content wins whatever the whole encoding, so a mark's
    rewritten directory node is compressed once, as a delta: its whole encoding is never
    asked for (it was half of a mark's zstd time at 100k files). The file's content is
    compressed by its reader before any base is known; nodes under 64 bytes are not
    compressed at all."""
    ws, _ = edit_series(store, tmp_path / "ws", 1)
    whole: list[bytes] = []
    real = objects.encode
    monkeypatch.setattr(objects, "encode", lambda data: whole.append(data) or real(data))
    with open(tmp_path / "ws" / "src" / "pkg" / "a.py", "ab") as f:
        f.write(b"# one more turn\n")
    mark = capture_paths(store, ws, tmp_path / "ws", [b"src/pkg/a.py"], "again")
    node = trees.lookup(store.load_node, mark.tree, b"src/pkg")
    assert node is not None and rows(store)[node.key][0] == objects.CODEC_DELTA
    encoded = nodes.encode_node(store.load_node(node.key))
    assert len(encoded) >= 8 * objects.DELTA_GAIN * rows(store)[node.key][3]
    assert encoded not in whole, "a node stored as a small delta was compressed whole too"
    assert contents(store, mark.tree)[b"src/pkg/a.py"].endswith(b"# one more turn\n")


def test_an_edit_to_a_large_file_or_a_wide_directory_is_a_small_delta(store: Store, tmp_path: Path) -> None:
    """A delta against a large base matches all of it: a line changed in a 2 MiB file (of
    incompressible bytes, so nothing but the base can shrink it) or a name added to a
    directory of 12,000 entries costs bytes, not the file or the node again. With the zstd
    level's own parameters (a window and match table sized for the input) the file's delta
    was 2 MiB and the node's was stored whole (npm corpus: +349 MB over 214 marks)."""
    root = tmp_path / "ws"
    wide = root / "icons"
    wide.mkdir(parents=True)
    for i in range(12_000):
        (wide / f"Icon{i:05d}Outlined.js").write_bytes(b"export default %d;\n" % i)
    big = root / "bundle.bin"
    big.write_bytes(random.Random(7).randbytes(2 << 20))
    ws = store.add_workspace(os.fsencode(root))
    ingest_tree(store, ws, root)
    data = bytearray(big.read_bytes())
    data[1 << 20 : (1 << 20) + 5] = b"edit!"
    big.write_bytes(bytes(data))
    (wide / "IconNewRounded.js").write_bytes(b"export default -1;\n")
    mark = capture_paths(store, ws, root, [b"bundle.bin", b"icons/IconNewRounded.js"], "edit")
    objs = rows(store)
    for path in (b"bundle.bin", b"icons"):
        entry = trees.lookup(store.load_node, mark.tree, path)
        assert entry is not None
        codec, _, _, stored = objs[entry.key]
        assert codec == objects.CODEC_DELTA and stored < 1024, (path, codec, stored)
    assert contents(store, mark.tree)[b"bundle.bin"] == bytes(data)
    assert verify(store).ok


def test_the_node_caches_are_bounded_by_the_entries_they_hold(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A wide directory rewritten by every mark must not fill the node caches with its
    versions (848 MB after 214 marks on the npm corpus): past ``NODE_ENTRIES`` entries the
    oldest nodes go, whatever their count; the newest stays, however wide."""
    monkeypatch.setattr(store_module, "NODE_ENTRIES", 1_000)
    entry = trees.Entry("file", 0o644, 1, "1" * 32 + "-1")
    with Store.open(tmp_path / "s") as s:
        keys = [f"{i:032x}-9" for i in range(5)]
        for k in keys:
            node = {b"f%04d" % j: entry for j in range(400)}
            s.cache_node(k, node, nodes.encode_records(node))
        assert [s.cached_node(k) is not None for k in keys] == [False, False, False, True, True]
        assert [s.node_records(k) is not None for k in keys] == [False, False, False, True, True]
        huge = {b"g%05d" % j: entry for j in range(5_000)}
        s.cache_node("f" * 32 + "-9", huge, nodes.encode_records(huge))
        assert s.cached_node("f" * 32 + "-9") == huge and s.cached_nodes == 1
        assert s.node_records("f" * 32 + "-9") is not None


def test_damaged_ignored_names_and_a_state_only_tree_are_located(store: Store, tmp_path: Path) -> None:
    """What marks and states record beside their trees is located too: a mark's ignored names
    (named with the mark), and a file only a state between marks holds (named as history)."""
    ws, taken = edit_series(store, tmp_path / "ws", 1)
    with store.batch() as batch:
        names = batch.put(IgnoredNames.of([b"build"]).encode())
        content = batch.put(b"only between marks\n")
        tree = batch.apply(None, {b"between.txt": trees.Entry("file", 0o644, 19, content)})
        batch.add_state(State(ws, 1, tree, None, None, names))
        batch.add_mark(ws, "with-names", batch.apply(None, {}), ignored=names)
    damage(store, names)
    damage(store, content)
    store.forget_caches()
    found = {d.key: d for d in verify(store).damage}
    assert {(r.path, r.kind) for r in found[names].refs} == {(b"", "ignored")}
    (ref,) = found[names].refs
    assert ref.marks and ref.history  # the mark that recorded them, and a state
    assert (b"between.txt", "file") in {(r.path, r.kind) for r in found[content].refs}
