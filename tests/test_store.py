"""Store tests on real directories: objects, catalog, refs, retention, GC, verify."""

from __future__ import annotations

import contextlib
import gc as pygc
import os
import sqlite3
import stat
import threading
import time
import weakref
from pathlib import Path

import pytest
from conftest import FsyncFaults
from disks import fill, tmpfs
from ingest_helpers import capture_paths, ingest_tree

from snapd import paths
from snapd.config import DAY_NS, Retention
from snapd.errors import (
    Ambiguous,
    CorruptObject,
    DiskFull,
    MissingObject,
    NotFound,
    StoreError,
    StoreFormatError,
    UsageError,
)
from snapd.statrow import ROW
from snapd.store import gc, history, nodes, objects, refs, safeio, trees
from snapd.store.catalog import FORMAT_VERSION
from snapd.store.objwrite import LARGE_OBJECT
from snapd.store.store import Store
from snapd.store.verify import verify

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def store(tmp_path: Path) -> Store:
    s = Store.open(tmp_path / "store")
    yield s
    s.close()


def put(store: Store, data: bytes) -> str:
    with store.batch() as b:
        key = b.put(data)
    return key


def test_statements_leave_nothing_behind_on_their_connection(store: Store) -> None:
    """A connection keeps a weak reference to each cursor made on it, dropped (every 200
    cursors) only when the cursor came from ``cursor()``: the catalog's statements all do, so
    a daemon's connections hold no trace of the statements they ran. A cursor made by calling
    its class left one reference per statement for the connection's life (issue 33: ~87 a
    mark, the daemon's steady growth over a day)."""

    def refs() -> int:
        return sum(1 for o in pygc.get_objects() if type(o) is weakref.ReferenceType)

    read = store.catalog.read()
    before = refs()
    for _ in range(2000):
        read.execute("SELECT 1").fetchone()
        with store.catalog.write() as c:
            c.execute("SELECT 1").fetchone()
    assert refs() - before < 2 * 200  # at most the 200 between two clean-ups, per connection


def test_roundtrip_compression_and_raw(store: Store) -> None:
    text = b"hello world\n" * 1000
    noise = os.urandom(5000)
    k1, k2 = put(store, text), put(store, noise)
    assert store.get(k1) == text and store.get(k2) == noise
    rows = {objects.py_key(k): c for k, c in store.catalog.read().execute("SELECT key, codec FROM objects")}
    assert rows[k1] == objects.CODEC_ZSTD and rows[k2] == objects.CODEC_RAW
    assert put(store, text) == k1  # dedup
    assert store.catalog.read().execute("SELECT COUNT(*) FROM objects").fetchone()[0] == 2


def test_large_objects_are_files(store: Store) -> None:
    big = os.urandom(LARGE_OBJECT + 10)
    key = put(store, big)
    assert store.object_path(key).exists()
    assert store.get(key) == big


def test_corruption_is_detected_never_returned(store: Store) -> None:
    key = put(store, b"important " * 100)
    big = put(store, os.urandom(LARGE_OBJECT + 1))
    with store.catalog.write() as c:
        data = bytearray(
            c.execute("SELECT data FROM objects WHERE key=?", (objects.db_key(key),)).fetchone()[0]
        )
        data[len(data) // 2] ^= 0xFF
        c.execute("UPDATE objects SET data=? WHERE key=?", (bytes(data), objects.db_key(key)))
    p = store.object_path(big)
    raw = bytearray(p.read_bytes())
    raw[100] ^= 1
    p.write_bytes(bytes(raw))
    for k in (key, big):
        with pytest.raises(CorruptObject):
            store.get(k)


def test_forced_collision_keeps_both(tmp_path: Path) -> None:
    constant = "0" * 32
    s = Store.open(tmp_path / "s", hasher=lambda data: constant)
    with s.batch() as b:
        k1 = b.put(b"first content")
        k2 = b.put(b"other content")  # same size, same (forced) digest: collision in one batch
        k3 = b.put(b"first content")
    assert k1 != k2 and k3 == k1 and k2.endswith(".1")
    with s.batch() as b:
        k4 = b.put(b"third content")  # collides with two stored objects
        k5 = b.put(b"other content")
    assert k4.endswith(".2") and k5 == k2
    assert [s.get(k) for k in (k1, k2, k4)] == [b"first content", b"other content", b"third content"]
    s.close()


def test_a_tree_node_whose_key_collides_gets_its_own_key(tmp_path: Path) -> None:
    """Batch.apply looks the new nodes' keys up together before storing them; a node whose
    key is taken by other stored bytes (a forced collision) must still be stored under a
    variant key, and the tree must name that key."""
    constant = "0" * 32
    s = Store.open(tmp_path / "s", hasher=lambda data: constant)
    entry = trees.Entry("file", 0o644, 1, "1" * 32 + "-1")
    node_bytes = nodes.encode_node({b"f": entry})
    with s.batch() as b:
        taken = b.put(b"x" * len(node_bytes))  # same size, same (forced) digest as the node
        before = b.apply(None, {b"g": entry})
    with s.batch() as b:
        tree = b.apply(before, {b"g": None, b"f": entry})  # an edit: the node is {f: entry}
    assert tree not in (taken, before)  # each of the three contents has a key of its own
    assert nodes.decode_node(s.get(tree)) == {b"f": entry}  # the stored bytes, not the cache
    s.close()


def test_a_tree_node_colliding_with_its_own_base_keeps_its_own_content(tmp_path: Path) -> None:
    """A mark's node whose key is taken by its own previous version (a forced collision: same
    digest, same size) goes to a variant key; that key must hold the new node, read back from
    the disk, not the base's bytes. The batch once recorded the new records under the taken
    key before the put said it was taken, and the variant was then stored as a delta against
    those records: it decoded to the old node (found by an adversarial review, session 12)."""
    constant = "0" * 32
    x = trees.Entry("file", 0o644, 1, objects.xxh3_hex(b"x") + "-1")
    y = trees.Entry("file", 0o644, 1, objects.xxh3_hex(b"y") + "-1")
    with Store.open(tmp_path / "s", hasher=lambda data: constant) as s:
        with s.batch() as b:
            r1 = b.apply(None, {b"f": x})
            b.commit()
        with s.batch() as b:
            r2 = b.apply(r1, {b"f": y})  # the same size: collides with r1
            b.commit()
        s.forget_caches()
        assert r2 != r1
        assert dict(s.load_node(r2)) == {b"f": y} and dict(s.load_node(r1)) == {b"f": x}


def test_store_is_private_whatever_the_umask(tmp_path: Path) -> None:
    old = os.umask(0)
    try:
        s = Store.open(tmp_path / "s")
        put(s, os.urandom(LARGE_OBJECT + 1))
        s.close()
    finally:
        os.umask(old)
    for p in [tmp_path / "s", *(tmp_path / "s").rglob("*")]:
        mode = stat.S_IMODE(p.lstat().st_mode)
        assert mode == (0o700 if p.is_dir() else 0o600), (p, oct(mode))


def test_unknown_format_refused(tmp_path: Path) -> None:
    Store.open(tmp_path / "s").close()
    db = sqlite3.connect(tmp_path / "s" / "catalog.sqlite")
    db.execute("UPDATE meta SET value='99' WHERE key='format'")
    db.commit()
    db.close()
    with pytest.raises(StoreFormatError, match="format 99"):
        Store.open(tmp_path / "s")


def test_a_format_1_store_is_upgraded_in_place(tmp_path: Path) -> None:
    """Format 1 lacked the marks' rule inputs and root mode and the workspace's last rollback:
    its marks stay readable (without them) and new marks record them."""
    root = make_ws(tmp_path, {"a": b"a"})
    with Store.open(tmp_path / "s") as store:
        ws = store.add_workspace(os.fsencode(root))
        old = ingest_tree(store, ws, root).mark_id
    db = sqlite3.connect(tmp_path / "s" / "catalog.sqlite")
    for table, column in (
        ("marks", "rules"),
        ("marks", "root_mode"),
        ("workspaces", "last_rollback"),
        ("workspaces", "pruned_before"),
        ("marks", "absent"),
        ("objects", "base"),
        ("objects", "depth"),
    ):
        db.execute(f"ALTER TABLE {table} DROP COLUMN {column}")
    unpack_stats(db)
    db.execute("UPDATE meta SET value='1' WHERE key='format'")
    db.commit()
    db.close()
    with Store.open(tmp_path / "s") as store:
        m = store.mark(old)
        assert (m.rules, m.root_mode) == (None, None)
        assert store.last_rollback(ws) is None
        store.set_last_rollback(ws, {"target": old, "after": m.tree, "pre": old})
        assert store.last_rollback(ws) == {"target": old, "after": m.tree, "pre": old}
    db = sqlite3.connect(tmp_path / "s" / "catalog.sqlite")
    assert db.execute("SELECT value FROM meta WHERE key='format'").fetchone() == (str(FORMAT_VERSION),)
    db.close()


def test_a_format_2_store_keeps_its_at_labels_reachable_by_id(tmp_path: Path) -> None:
    """Format 3 reserves a leading '@' for time references: a format-2 store is upgraded in
    place (pruned_before added), a mark already labelled '@…' keeps its label and is reached
    by its id, and the label no longer names it (it reads as a time)."""
    root = make_ws(tmp_path, {"a": b"a"})
    with Store.open(tmp_path / "s") as store:
        ws = store.add_workspace(os.fsencode(root))
        old = ingest_tree(store, ws, root).mark_id
    db = sqlite3.connect(tmp_path / "s" / "catalog.sqlite")
    db.execute("ALTER TABLE workspaces DROP COLUMN pruned_before")
    db.execute("ALTER TABLE marks DROP COLUMN absent")
    drop_delta_columns(db)
    db.execute("UPDATE marks SET label='@home' WHERE id=?", (old,))
    unpack_stats(db)
    db.execute("UPDATE meta SET value='2' WHERE key='format'")
    db.commit()
    db.close()
    with Store.open(tmp_path / "s") as store:
        assert store.resolve(ws, old).label == "@home"
        with pytest.raises(UsageError, match="is a time"):
            store.resolve(ws, "@home")
        assert history.pruned_before(store, ws) is None
    db = sqlite3.connect(tmp_path / "s" / "catalog.sqlite")
    assert db.execute("SELECT value FROM meta WHERE key='format'").fetchone() == (str(FORMAT_VERSION),)
    db.close()


def drop_delta_columns(db: sqlite3.Connection) -> None:
    """Make a catalog's objects table what formats 1 to 4 had: no delta columns."""
    db.execute("ALTER TABLE objects DROP COLUMN base")
    db.execute("ALTER TABLE objects DROP COLUMN depth")


def unpack_stats(db: sqlite3.Connection) -> None:
    """Make a catalog's stats table what formats 1 to 6 had: six columns of numbers a row (and
    drop the ignored names and the states, which format 8 added, and the pushed marks, which
    format 9 added)."""
    db.execute("DROP TABLE pushed")
    db.execute("ALTER TABLE marks DROP COLUMN ignored")
    db.execute("ALTER TABLE workspaces DROP COLUMN ignored")
    db.execute("DROP TABLE states")
    db.execute(
        "CREATE TABLE stats_6 (workspace INTEGER NOT NULL, path BLOB NOT NULL, mode INTEGER NOT NULL,"
        " size INTEGER NOT NULL, mtime INTEGER NOT NULL, ctime INTEGER NOT NULL, ino INTEGER NOT NULL,"
        " read INTEGER NOT NULL, PRIMARY KEY (workspace, path)) WITHOUT ROWID"
    )
    rows = [(w, p, *ROW.unpack(sig)) for w, p, sig in db.execute("SELECT workspace, path, sig FROM stats")]
    db.executemany("INSERT INTO stats_6 VALUES (?,?,?,?,?,?,?,?)", rows)
    db.execute("DROP TABLE stats")
    db.execute("ALTER TABLE stats_6 RENAME TO stats")


def test_a_format_3_store_is_opened_as_format_4(tmp_path: Path) -> None:
    """Format 4 adds a kind of tree entry (uncaptured paths) and the paths a pre-rollback mark
    holds as absent: a format-3 store gets the column, its marks read as before."""
    root = make_ws(tmp_path, {"a": b"a"})
    with Store.open(tmp_path / "s") as store:
        ws = store.add_workspace(os.fsencode(root))
        old = ingest_tree(store, ws, root).mark_id
    db = sqlite3.connect(tmp_path / "s" / "catalog.sqlite")
    db.execute("ALTER TABLE marks DROP COLUMN absent")
    drop_delta_columns(db)
    unpack_stats(db)
    db.execute("UPDATE meta SET value='3' WHERE key='format'")
    db.commit()
    db.close()
    with Store.open(tmp_path / "s") as store:
        assert store.mark(old).tree and store.mark(old).absent == ()  # its marks read as before
    db = sqlite3.connect(tmp_path / "s" / "catalog.sqlite")
    assert db.execute("SELECT value FROM meta WHERE key='format'").fetchone() == (str(FORMAT_VERSION),)
    db.close()


def make_ws(tmp_path: Path, files: dict[str, bytes]) -> Path:
    root = tmp_path / "ws"
    for name, data in files.items():
        p = root / name
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(data)
    root.mkdir(exist_ok=True)
    return root


def test_ingest_and_capture_with_odd_names_symlinks_modes(store: Store, tmp_path: Path) -> None:
    root = make_ws(tmp_path, {"a/b.txt": b"b", "run.sh": b"#!/bin/sh\n"})
    os.chmod(root / "run.sh", 0o755)
    os.symlink("a/b.txt", root / "link")
    (root / ".git").mkdir()
    (root / ".git" / "HEAD").write_bytes(b"ref")
    odd = os.fsencode(root) + b"/\xff\xfe-name"
    with open(odd, "wb") as fh:
        fh.write(b"odd")
    os.mkfifo(root / "fifo")
    ws = store.add_workspace(os.fsencode(root))
    res = ingest_tree(store, ws, root)
    got = dict(trees.walk(store.load_node, res.tree))
    assert set(got) == {b"a", b"a/b.txt", b"run.sh", b"link", b"\xff\xfe-name", b"fifo"}
    # there, but not captured: the tree says so (a rollback to it must not delete the FIFO)
    assert got[b"fifo"].kind == "uncaptured" and trees.uncaptured_reason(got[b"fifo"]) == "special file"
    assert got[b"run.sh"].mode == 0o755 and got[b"link"].kind == "symlink"
    assert store.get(got[b"link"].key) == b"a/b.txt"
    assert res.report.skipped == {"special file": [b"fifo"]}
    (root / "a" / "b.txt").write_bytes(b"changed")
    os.unlink(odd)
    m = capture_paths(store, ws, root, [b"a/b.txt", b"\xff\xfe-name"], "turn-1")
    assert m.summary["counts"] == {"modified": 1, "removed": 1}
    assert [v.entry is None for v in store.versions(ws, b"\xff\xfe-name")] == [False, True]


def test_mark_refs(store: Store, tmp_path: Path) -> None:
    root = make_ws(tmp_path, {"f": b"0"})
    ws = store.add_workspace(os.fsencode(root))
    ingest_tree(store, ws, root)
    ids = []
    for i, label in enumerate(["turn-start", "turn-end", "turn-start"]):
        (root / "f").write_bytes(str(i).encode())
        ids.append(capture_paths(store, ws, root, [b"f"], label, session="s1" if i < 2 else "s2").id)
    assert store.resolve(ws, "turn-start").id == ids[2]
    assert store.resolve(ws, "turn-start", session="s1").id == ids[0]
    assert store.resolve(ws, "turn-start~1").id == ids[1]
    assert store.resolve(ws, ids[1]).id == ids[1]
    assert store.resolve(ws, ids[1][:6]).id == ids[1]
    assert store.resolve(ws, ids[2] + "~2").id == ids[0]
    with pytest.raises(NotFound):
        store.resolve(ws, "nope")
    with pytest.raises(NotFound):
        store.resolve(ws, "turn-start~9")
    for bad in ("42", "3abc", "has space", "a~1", ""):
        with pytest.raises(UsageError):
            refs.validate_label(bad)
    assert all(refs.FULL_ID.match(i) for i in ids)


def test_ambiguous_prefix_lists_candidates(store: Store, tmp_path: Path) -> None:
    root = make_ws(tmp_path, {"f": b"0"})
    ws = store.add_workspace(os.fsencode(root))
    ingest_tree(store, ws, root)
    tree = store.latest_mark(ws).tree
    with store.batch() as b:
        for i in range(2):
            b.add_mark(ws, f"m{i}", tree)
    with store.catalog.write() as c:  # force a shared prefix
        c.execute("UPDATE marks SET id='1aaaa' || substr(id, 6) WHERE label IN ('m0', 'm1')")
    with pytest.raises(Ambiguous) as err:
        store.resolve(ws, "1aaaa")
    assert len(err.value.details["candidates"]) == 2


def _marks(store: Store, root: Path, ws: int, n: int, **kw: object) -> list[str]:
    out = []
    for i in range(n):
        (root / "f").write_bytes(f"v{i}-".encode() * 50)
        out.append(capture_paths(store, ws, root, [b"f"], f"m{i}", **kw).id)
    return out


def test_retention_by_count_keeps_newest_pinned_and_records(store: Store, tmp_path: Path) -> None:
    root = make_ws(tmp_path, {"f": b"0"})
    ws = store.add_workspace(os.fsencode(root))
    ids = _marks(store, root, ws, 6)
    store.set_pinned(ids[0], True)
    policy = Retention(max_marks=3, grace_s=0)
    rep = gc.run(store, policy)
    left = [m.id for m in store.marks(ws)]
    assert ids[0] in left and ids[-1] in left and len(left) == 3
    assert {e["mark"] for e in store.evictions(ws)} == {i for i, _ in rep.evicted}
    assert verify(store).ok
    with pytest.raises(NotFound, match="pruned"):
        store.resolve(ws, rep.evicted[0][0])


def test_retention_by_age_spares_young_pre_rollback(store: Store, tmp_path: Path) -> None:
    root = make_ws(tmp_path, {"f": b"0"})
    ws = store.add_workspace(os.fsencode(root))
    old = _marks(store, root, ws, 3)
    pre = capture_paths(store, ws, root, [b"f"], "pre-rollback", kind="pre-rollback").id
    newest = _marks(store, root, ws, 1)[0]
    later = time.time_ns() + DAY_NS  # one day on: everything is older than 0.5 days
    rep = gc.run(store, Retention(max_age_days=0.5, grace_s=0), now=later)
    assert {i for i, _ in rep.evicted} == set(old) | {pre}
    assert [m.id for m in store.marks(ws)] == [newest]
    store2_pre = capture_paths(store, ws, root, [b"f"], "pre-rollback", kind="pre-rollback").id
    _marks(store, root, ws, 1)
    rep = gc.run(store, Retention(max_age_days=0.5, grace_s=0))
    assert store2_pre in {m.id for m in store.marks(ws)}


def test_budget_evicts_oldest_then_warns(store: Store, tmp_path: Path) -> None:
    root = make_ws(tmp_path, {})
    ws = store.add_workspace(os.fsencode(root))
    ids = []
    for i in range(4):
        (root / "f").write_bytes(os.urandom(20_000))
        ids.append(capture_paths(store, ws, root, [b"f"], f"m{i}").id)
    rep = gc.run(store, Retention(budget_bytes=50_000, grace_s=0, max_age_days=0))
    assert ids[-1] in {m.id for m in store.marks(ws)}
    assert ids[0] in {i for i, _ in rep.evicted}
    assert store.stored_bytes() <= 50_000 or rep.warnings
    rep = gc.run(store, Retention(budget_bytes=1_000, grace_s=0, max_age_days=0))
    assert rep.warnings and [m.id for m in store.marks(ws)] == [ids[-1]]
    assert verify(store).ok


def test_the_budget_is_judged_once_new_objects_pass_the_grace_period(store: Store, tmp_path: Path) -> None:
    """docs/operations.md (issue 14, point 15): the budget counts only objects older than the
    grace period, so a store pushed over it is judged (here: warned about, since every version
    is inside the age window) at the first GC after its objects pass that age, not at once."""
    root = make_ws(tmp_path, {})
    ws = store.add_workspace(os.fsencode(root))
    for i in range(3):
        (root / "f").write_bytes(os.urandom(20_000))
        capture_paths(store, ws, root, [b"f"], f"m{i}")
    policy = Retention(budget_bytes=1_000, grace_s=900)
    now = time.time_ns()
    rep = gc.run(store, policy, now=now)
    assert rep.warnings == [] and rep.evicted == [], rep
    rep = gc.run(store, policy, now=now + 899 * 10**9)
    assert rep.warnings == [], rep
    rep = gc.run(store, policy, now=now + 901 * 10**9)
    assert len(rep.warnings) == 1 and "over its budget" in rep.warnings[0], rep
    assert len(store.marks(ws)) == 3  # what is held by versions inside the age window stays


def test_gc_grace_and_inflight_batches(store: Store, tmp_path: Path) -> None:
    loose = put(store, b"unreferenced " * 10)
    gc.run(store, Retention())  # within grace: kept
    assert store.has(loose)
    with store.batch() as b:
        held = b.put(b"unreferenced " * 10)  # a batch in flight holds the existing key
        gc.run(store, Retention(grace_s=0))
        assert store.has(held)
    gc.run(store, Retention(grace_s=0))
    assert not store.has(loose)


def test_verify_reports_affected_marks(store: Store, tmp_path: Path) -> None:
    root = make_ws(tmp_path, {"a/x": b"x" * 300, "y": b"y" * 300})
    ws = store.add_workspace(os.fsencode(root))
    res = ingest_tree(store, ws, root)
    assert verify(store).ok
    xkey = trees.lookup(store.load_node, res.tree, b"a/x").key
    ykey = trees.lookup(store.load_node, res.tree, b"y").key
    with store.catalog.write() as c:
        c.execute("UPDATE objects SET data=zeroblob(length(data)) WHERE key=?", (objects.db_key(xkey),))
        c.execute("DELETE FROM objects WHERE key=?", (objects.db_key(ykey),))
    rep = verify(store)
    assert not rep.ok
    assert rep.corrupt == {xkey: [res.mark_id]} and rep.missing == {ykey: [res.mark_id]}
    assert verify(store, sample=0.0001, seed=1).checked < rep.checked


def test_write_atomic_publishes_nothing_when_its_fsync_fails(
    tmp_path: Path, fsync_faults: FsyncFaults
) -> None:
    (tmp_path / "d").mkdir()
    target = tmp_path / "d" / "obj"
    target.write_bytes(b"old")
    fsync_faults.fail_when = lambda path: os.path.basename(path).startswith(paths.SNAPD_PREFIX)
    with pytest.raises(StoreError, match="Input/output error"):
        safeio.write_atomic(target, b"new")
    assert target.read_bytes() == b"old" and os.listdir(target.parent) == ["obj"]


def test_a_batch_whose_directory_fsync_fails_commits_nothing_and_a_retry_writes_again(
    store: Store, fsync_faults: FsyncFaults
) -> None:
    """The object file was written and fsynced, but its directory entry may not be durable:
    no mark may name it, and the next attempt writes it again instead of trusting it."""
    data = os.urandom(LARGE_OBJECT + 1000)
    ws = store.add_workspace(b"/nowhere")
    shards = str(store.dir / "objects") + "/"
    fsync_faults.fail_when = lambda path: path.startswith(shards) and os.path.isdir(path)
    for attempt in ("first", "second"):
        fsync_faults.synced.clear()
        with store.batch() as b:
            key = b.put(data)
            b.add_mark(ws, attempt, b.apply(None, {b"f": trees.Entry("file", 0o644, len(data), key)}))
            if attempt == "first":
                with pytest.raises(StoreError, match="Input/output error"):
                    b.commit()
        if attempt == "first":  # leaving the with block did not commit it again
            assert store.marks(ws) == []
        written = [p for p in fsync_faults.synced if paths.SNAPD_PREFIX in p and p.startswith(shards)]
        assert written, f"{attempt}: the object file was not written and fsynced: {fsync_faults.synced}"
    assert [m.label for m in store.marks(ws)] == ["second"]
    assert store.get(key) == data and verify(store).ok


@pytest.mark.parametrize("cause", ["fsync", pytest.param("disk full", marks=pytest.mark.powercut)])
def test_a_batch_whose_early_flush_failed_commits_nothing_and_a_new_batch_writes_again(
    tmp_path: Path, fsync_faults: FsyncFaults, cause: str
) -> None:
    """A put past ``flush_bytes`` flushes the batch's new objects early. Should that flush fail
    (its directory fsync: EIO; or a real full tmpfs: ENOSPC), the batch is over: a later put
    and its commit raise and write nothing, even once the fsync would pass or space is free
    again (an fsync that failed is never retried: what it covered may be lost). A new batch
    writes again."""
    with contextlib.ExitStack() as stack:
        if cause == "fsync":
            top = tmp_path
            contents = [os.urandom(LARGE_OBJECT + 1000)]  # a file: the flush fsyncs its directory
        else:
            top = stack.enter_context(tmpfs(tmp_path / "fs", 16 << 20))
            contents = [os.urandom(LARGE_OBJECT // 2) for _ in range(4)]  # inline: rows fill the disk
        store = Store.open(top / "store", flush_bytes=sum(map(len, contents)))  # the last put flushes
        stack.callback(store.close)
        ws = store.add_workspace(b"/nowhere")
        keys = [objects.variant_key(objects.base_key(store.hasher(c), len(c)), 0) for c in contents]
        entry = trees.Entry("file", 0o644, len(contents[0]), keys[0])
        shards = str(store.dir / "objects") + "/"
        if cause == "fsync":
            fsync_faults.fail_when = lambda path: path.startswith(shards) and os.path.isdir(path)
            error, match = StoreError, "Input/output error"
        else:
            fill(top / "filler")
            error, match = DiskFull, "disk full"
        with store.batch() as b:
            for c in contents[:-1]:
                b.put(c)
            with pytest.raises(error, match=match):
                b.put(contents[-1])  # past flush_bytes: the early flush fails
            if cause == "fsync":
                assert fsync_faults.failed and fsync_faults.times == 0  # the next fsync would pass
            else:
                (top / "filler").unlink()
            with pytest.raises(StoreError, match="failed, already"):
                b.put(b"a later content")  # it would flush again (the fsync that failed, retried)
            b.add_version(ws, b"f", time.time_ns(), entry)
            with pytest.raises(StoreError, match="failed, already"):
                b.commit()
        # leaving the with block did not commit it either
        assert set(keys).isdisjoint(_object_rows(store)) and not store.has(keys[0])
        assert store.catalog.read().execute("SELECT COUNT(*) FROM versions").fetchone() == (0,)
        fsync_faults.synced.clear()
        with store.batch() as b:
            assert [b.put(c) for c in contents] == keys
            b.add_mark(ws, "again", b.apply(None, {b"f": entry}))
        if cause == "fsync":  # the object file was written and fsynced afresh
            assert [p for p in fsync_faults.synced if paths.SNAPD_PREFIX in p and p.startswith(shards)]
        assert [m.label for m in store.marks(ws)] == ["again"]
        assert [store.get(k) for k in keys] == contents and verify(store).ok


# -- GC's report and live set, exactly (written to kill the mutants mutmut found surviving in
# gc.run and sweep: docs/reliability.md) ------------------------------------------------


def _object_rows(store: Store) -> dict[str, int]:
    return {objects.py_key(k): s for k, s in store.catalog.read().execute("SELECT key, stored FROM objects")}


def test_stored_bytes_is_counted_once_then_kept_by_every_commit(store: Store, tmp_path: Path) -> None:
    """``status`` asks for the store's size on every call: the table (inline data included) is
    read once, and from then on each commit that inserts or deletes objects keeps the total."""
    root = make_ws(tmp_path, {"a": b"a" * 3000, "d/b": b"b" * 5000})
    ws = store.add_workspace(os.fsencode(root))
    base = ingest_tree(store, ws, root)
    assert store.stored_bytes() == sum(_object_rows(store).values()) > 0
    sums: list[str] = []
    count = "SELECT COALESCE(SUM(stored), 0) FROM objects"  # the whole table (gc's own sums have a WHERE)
    store.catalog.read().set_trace_callback(lambda sql: sums.append(sql) if sql == count else None)
    for i in range(3):
        # unrelated contents: no version is a delta against the one before, so the GC below
        # deletes the evicted ones (a kept delta keeps its base: docs/storage.md)
        (root / "a").write_bytes(os.urandom(3000))
        capture_paths(store, ws, root, [b"a"], f"m{i}")
        assert store.stored_bytes() == sum(_object_rows(store).values())
    with pytest.raises(RuntimeError), store.batch() as b:  # a transaction that fails adds nothing
        b.put(b"never committed " * 100)
        raise RuntimeError("abandoned")
    # past the age window: the old versions of "a" go (the old root nodes stay, the bases of
    # the kept mark's root node)
    rep = gc.run(store, Retention(max_marks=1, grace_s=0, max_age_days=0))
    assert base.mark_id in [m for m, _ in rep.evicted] and rep.objects_deleted > 0
    assert rep.stored_bytes == store.stored_bytes() == sum(_object_rows(store).values())
    assert sums == [], "the total was counted again"


def test_gc_sweeps_every_dead_object_in_chunks_and_reports_what_it_freed(store: Store) -> None:
    """More dead objects than one sweep transaction takes, and one large object (a file)."""
    n = gc.SWEEP_CHUNK * 2 + 1
    with store.batch() as b:
        for i in range(n):
            b.put(f"loose {i} ".encode() * 20)
        big = b.put(os.urandom(LARGE_OBJECT + 1))
    before = _object_rows(store)
    assert len(before) == n + 1 and store.object_path(big).exists()
    rep = gc.run(store, Retention(grace_s=0))
    assert (rep.objects_deleted, rep.bytes_freed) == (n + 1, sum(before.values()))
    assert _object_rows(store) == {} and not store.object_path(big).exists()
    assert rep.stored_bytes == 0 == store.stored_bytes() and rep.evicted == [] and rep.warnings == []


def test_gc_keeps_what_marks_and_recent_versions_hold_and_prunes_the_rest(
    store: Store, tmp_path: Path
) -> None:
    root = make_ws(tmp_path, {"d/e/f": b"deep " * 100})
    ws = store.add_workspace(os.fsencode(root))
    base = ingest_tree(store, ws, root)
    contents = [f"v{i} ".encode() * 100 for i in range(3)]
    ids = []
    for i, data in enumerate(contents):
        (root / "top").write_bytes(data)
        ids.append(capture_paths(store, ws, root, [b"top"], f"m{i}").id)
    key = {}
    for i, data in enumerate(contents):
        entry = trees.lookup(store.load_node, store.resolve(ws, ids[i]).tree, b"top")
        assert entry is not None
        key[data] = entry.key
    deep = trees.lookup(store.load_node, base.tree, b"d/e/f")
    assert deep is not None
    now = time.time_ns()
    # count: the baseline and m0 go; v0 is still held by its version (inside the age window)
    rows = _object_rows(store)
    rep = gc.run(store, Retention(max_marks=2, grace_s=0), now=now)
    assert rep.evicted == [(base.mark_id, "count"), (ids[0], "count")]
    gone = rows.keys() - _object_rows(store).keys()
    assert (rep.objects_deleted, rep.bytes_freed) == (len(gone), sum(rows[k] for k in gone))
    assert rep.versions_deleted == 0 and store.has(key[contents[0]]) and store.has(deep.key)
    assert rep.stored_bytes == store.stored_bytes() == sum(_object_rows(store).values())
    # two days on, a one-day window: m1 goes for its age, every version before the cutoff goes,
    # and with them v0 and v1; m2's tree (down to d/e/f) stays whole
    later = now + 2 * DAY_NS
    rows = _object_rows(store)
    rep = gc.run(store, Retention(max_marks=2, grace_s=0, max_age_days=1), now=later)
    assert rep.evicted == [(ids[1], "age")] and rep.versions_deleted == 6
    gone = rows.keys() - _object_rows(store).keys()
    assert (rep.objects_deleted, rep.bytes_freed) == (len(gone), sum(rows[k] for k in gone))
    assert not store.has(key[contents[0]]) and not store.has(key[contents[1]])
    assert store.has(key[contents[2]]) and store.has(deep.key)
    live: set[bytes | str] = set()
    nodes.reachable(store.get_many, [store.resolve(ws, ids[2]).tree], live)
    assert {objects.py_key(k) for k in live} <= _object_rows(store).keys()
    pruned = store.catalog.read().execute("SELECT pruned_before FROM workspaces WHERE id=?", (ws,)).fetchone()
    assert pruned == (later - DAY_NS,)
    assert verify(store).ok


def test_gc_stops_at_a_node_it_cannot_read_and_deletes_nothing(store: Store) -> None:
    """What lies below a missing or damaged node is unknown, not dead: the sweep must not run."""
    ws = store.add_workspace(b"/nowhere")
    with store.batch() as b:
        below = b.put(b"only the lost directory holds this " * 10)
        loose = b.put(b"nobody holds this " * 10)
        tree = b.apply(None, {b"d/e/x": trees.Entry("file", 0o644, 350, below)})
        b.add_mark(ws, "m", tree)
    lost = trees.lookup(store.load_node, tree, b"d")
    assert lost is not None
    with store.catalog.write() as c:
        c.execute("DELETE FROM objects WHERE key=?", (objects.db_key(lost.key),))
    with pytest.raises(MissingObject):
        gc.run(store, Retention(grace_s=0))
    assert store.has(below) and store.has(loose)


def test_gc_keeps_a_workspaces_head_and_every_marks_rule_inputs(store: Store) -> None:
    ws = store.add_workspace(b"/nowhere")
    with store.batch() as b:
        held = b.put(b"captured since the last mark " * 10)
        rules = b.put(b"snapd-rules-1 " * 10)
        loose = b.put(b"nobody holds this " * 10)
        marked = b.put(b"the mark holds this " * 10)
        b.add_mark(ws, "m", b.apply(None, {b"a": trees.Entry("file", 0o644, 200, marked)}), rules=rules)
        b.set_head(ws, b.apply(None, {b"d/x": trees.Entry("file", 0o644, 280, held)}))
    rep = gc.run(store, Retention(grace_s=0, max_age_days=0))
    assert [store.has(k) for k in (held, rules, marked, loose)] == [True, True, True, False]
    assert rep.objects_deleted == 1 and verify(store).ok


def _marks_of_fresh_content(store: Store, tmp_path: Path, n: int, size: int) -> tuple[int, list[str], int]:
    """``n`` marks of one file, each time ``size`` new random bytes, dated 10 days after now:
    the workspace, the marks' ids (oldest first) and now."""
    root = make_ws(tmp_path, {})
    ws = store.add_workspace(os.fsencode(root))
    t0 = time.time_ns()
    ids = []
    for i in range(n):
        (root / "f").write_bytes(os.urandom(size))
        ids.append(capture_paths(store, ws, root, [b"f"], f"m{i}", created=t0 + 10 * DAY_NS + i).id)
    return ws, ids, t0


def test_the_budget_evicts_no_more_marks_than_it_needs(store: Store, tmp_path: Path) -> None:
    """8 marks of 10 KB each (their own content), a budget of 45 KB: the 4 oldest must go and
    no more (the doubling batches this replaced evicted 7 of them: history lost for nothing)."""
    ws, ids, t0 = _marks_of_fresh_content(store, tmp_path, 8, 10_000)
    # 15 days on: the versions are past the 14-day window, the marks (dated 10 days on) are not
    rep = gc.run(store, Retention(budget_bytes=45_000, grace_s=0), now=t0 + 15 * DAY_NS)
    assert rep.evicted == [(i, "budget") for i in ids[:4]], rep.evicted
    assert sorted(m.id for m in store.marks(ws)) == sorted(ids[4:])
    assert rep.warnings == [] and 30_000 < store.stored_bytes() <= 45_000 and verify(store).ok


def test_budget_evicts_the_oldest_marks_until_the_store_fits(store: Store, tmp_path: Path) -> None:
    """The budget's own evictions (the other tests reach only age, count and the warning): marks
    inside the age window whose content no recent version holds; every mark but the newest must
    go here (the next test: no more than needed)."""
    ws, ids, t0 = _marks_of_fresh_content(store, tmp_path, 5, 20_000)
    # 15 days on: the versions are past the 14-day window, the marks (dated 10 days on) are not
    rep = gc.run(store, Retention(max_marks=4, budget_bytes=25_000, grace_s=0), now=t0 + 15 * DAY_NS)
    assert rep.evicted == [(ids[0], "count"), (ids[1], "budget"), (ids[2], "budget"), (ids[3], "budget")]
    assert rep.versions_deleted == 5 and rep.warnings == []
    assert [m.id for m in store.marks(ws)] == [ids[4]]
    assert 20_000 < rep.stored_bytes == store.stored_bytes() <= 25_000
    assert {e["reason"] for e in store.evictions(ws)} == {"count", "budget"} and verify(store).ok


def test_an_object_is_swept_only_once_older_than_the_grace_period(store: Store) -> None:
    loose = put(store, b"unreferenced " * 10)
    t = 1_000_000 * 10**9
    with store.catalog.write() as c:
        c.execute("UPDATE objects SET created=? WHERE key=?", (t, objects.db_key(loose)))
    rep = gc.run(store, Retention(grace_s=1), now=t + 10**9)  # exactly the grace period
    assert store.has(loose) and rep.objects_deleted == 0
    rep = gc.run(store, Retention(grace_s=1), now=t + 10**9 + 1)
    assert not store.has(loose) and rep.objects_deleted == 1


def test_a_key_a_batch_holds_is_spared_and_the_sweep_goes_on(store: Store) -> None:
    held_data = b"held by a batch in flight " * 10
    held = put(store, held_data)  # first in the sweep's order
    others = [put(store, f"dead {i} ".encode() * 20) for i in range(3)]
    with store.batch() as b:
        b.put(held_data)
        rep = gc.run(store, Retention(grace_s=0))
    assert store.has(held) and not any(store.has(k) for k in others) and rep.objects_deleted == 3


def test_the_budget_counts_only_objects_past_the_grace_period_and_says_when_it_cannot_fit(
    store: Store, tmp_path: Path
) -> None:
    root = make_ws(tmp_path, {"f": b"small " * 100})
    ws = store.add_workspace(os.fsencode(root))
    capture_paths(store, ws, root, [b"f"], "only")
    fresh = put(store, os.urandom(50_000))  # not referenced, but younger than the grace period
    by_key = "SELECT created FROM objects WHERE key=?"
    created = store.catalog.read().execute(by_key, (objects.db_key(fresh),)).fetchone()[0]
    with store.catalog.write() as c:  # the mark's objects are an hour old
        c.execute(
            "UPDATE objects SET created=? WHERE key<>?", (created - 3600 * 10**9, objects.db_key(fresh))
        )
    now = created + 10**9
    rep = gc.run(store, Retention(budget_bytes=20_000, grace_s=600), now=now)
    assert rep.warnings == [] and rep.evicted == [] and store.has(fresh)
    rep = gc.run(store, Retention(budget_bytes=50, grace_s=600), now=now)
    settled = (
        store.stored_bytes()
        - store.catalog.read()
        .execute("SELECT stored FROM objects WHERE key=?", (objects.db_key(fresh),))
        .fetchone()[0]
    )
    assert rep.evicted == [] and rep.warnings == [
        f"the store holds {settled} bytes, over its budget of 50, and what remains is held by marks "
        "and versions that must be kept (newest, pinned, recent pre-rollback, versions inside the age "
        "window): raise the budget or unpin marks"
    ]


def test_a_commit_writes_version_rows_in_path_order_and_holds_no_emptied_table(store: Store) -> None:
    """A capture's version rows go to SQLite in the order of their index (workspace, path,
    time), whatever order they were read in: SQLite then appends to the index's pages instead
    of splitting them at random (a 100k-file baseline's commit took twice the CPU). And once
    the batch ends, the GC holds table is a new one: a dict keeps its size as keys go (a
    baseline held 10^4 keys at once)."""
    ws = store.add_workspace(b"/nowhere")
    names = [b"z", b"a/c", b"m", b"a", b"a/b", b"b"]
    with store.batch() as b:
        for i, p in enumerate(names):
            b.add_version(ws, p, 5, trees.Entry("file", 0o644, 1, b.put(b"%d" % i)))
        holds = store.holds._held
        assert len(holds) == len(names)
    rows = store.catalog.read().execute("SELECT path FROM versions ORDER BY id").fetchall()
    assert [p for (p,) in rows] == sorted(names)
    assert store.holds._held is not holds and len(store.holds._held) == 0


def test_a_new_workspace_deletes_a_journal_left_under_its_id(store: Store, tmp_path: Path) -> None:
    """Ids are reused once the highest is forgotten; a rollback journal under the new id (left
    by a version that kept it at forget) is another workspace's, and must never be rolled
    forward over this one."""
    ws = store.add_workspace(os.fsencode(tmp_path / "one"))
    store.forget_workspace(ws)
    stale = store.journal_path(ws)
    stale.parent.mkdir(parents=True, exist_ok=True)
    stale.write_text("{}")
    again = store.add_workspace(os.fsencode(tmp_path / "two"))
    assert again == ws and not stale.exists()
    store.journal_path(again).write_text("{}")  # a known workspace keeps its own journal
    assert store.add_workspace(os.fsencode(tmp_path / "two")) == again
    assert store.journal_path(again).exists()


def _stored_again_meanwhile(
    store: Store, data: bytes, path: Path, monkeypatch: pytest.MonkeyPatch
) -> tuple[list[str], list[threading.Thread]]:
    """When GC is about to delete ``path``, a capture stores ``data`` (whose file it is) again
    on another thread; GC waits up to 1 s for it, then deletes. The keys the capture got, and
    its thread (join it: the key is reported before the batch commits)."""
    real, got = safeio.unlink, []
    threads: list[threading.Thread] = []

    def store_again() -> None:
        with store.batch() as b:
            got.append(b.put(data))

    def unlink(p: Path) -> bool:
        if p == path and not threads:
            threads.append(threading.Thread(target=store_again))
            threads[0].start()
            threads[0].join(1.0)  # blocked by GC's holds lock, or done: either way, go on
        return real(p)

    monkeypatch.setattr(safeio, "unlink", unlink)
    return got, threads


def test_a_large_object_stored_again_while_the_sweep_deletes_it_keeps_its_file(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Found by a review: the sweep committed the deletion of a dead object's row, then deleted
    its file outside the holds lock; a capture that stored the same content in between (no
    row: a new file at the same path, and a new row) lost its file, and its mark read back as
    missing. The sweep now deletes each file under the holds lock, unless a batch holds it."""
    data = os.urandom(LARGE_OBJECT + 100)
    key = put(store, data)  # referenced by nothing: dead once past the grace period
    got, threads = _stored_again_meanwhile(store, data, store.object_path(key), monkeypatch)
    rep = gc.run(store, Retention(grace_s=0))
    assert len(threads) == 1
    threads[0].join(10)
    assert not threads[0].is_alive() and got == [key] and rep.objects_deleted == 1
    assert store.get(key) == data and verify(store).ok


def test_an_orphan_file_a_batch_is_storing_again_is_spared(store: Store) -> None:
    """A batch holds a key before it writes the key's file (and until its row is committed):
    the orphan sweep, which deletes files no row names, never deletes the file of a content a
    capture is storing right now."""
    data = os.urandom(LARGE_OBJECT + 100)
    with store.batch() as b:
        key = b.put(data)
        assert store.object_path(key).exists() and not store.has(key)  # written, not committed
        removed = gc.remove_orphan_files(store, time.time_ns() + 3600 * 10**9)  # any age
    assert removed == 0 and store.get(key) == data and verify(store).ok


def test_a_batch_holds_a_key_before_it_writes_the_file(store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    """The orphan sweep, run right after a batch wrote an object's file (before its row), finds
    the key held: the hold is taken before the file exists, not after."""
    data = os.urandom(LARGE_OBJECT + 100)
    real, swept = safeio.write_atomic, []

    def write_atomic(path: Path, payload: bytes, **kw: bool) -> None:
        real(path, payload, **kw)
        swept.append(gc.remove_orphan_files(store, time.time_ns() + 3600 * 10**9))

    monkeypatch.setattr(safeio, "write_atomic", write_atomic)
    with store.batch() as b:
        key = b.put(data)
    assert swept == [0] and store.get(key) == data


def test_a_capture_storing_a_content_between_the_sweeps_commit_and_its_unlink_keeps_its_file(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The real race: the sweep committed the deletion of a dead object's row and let go of the
    holds lock; before it takes the lock again to delete the file, a capture stores the same
    content (no row: it holds the key and writes the file at the same path) and commits. The
    sweep must then spare the file (the key was held during the sweep), or the new row names
    a file that is gone. The capture runs to its end on another thread while GC holds no lock."""
    data = os.urandom(LARGE_OBJECT + 100)
    key = put(store, data)  # referenced by nothing: dead once past the grace period
    gc_thread = threading.get_ident()
    real_lock, rows_deleted, got = store.holds.lock, threading.Event(), []

    def store_again() -> None:
        with store.batch() as b:
            got.append(b.put(data))

    class Gate:
        """The holds lock; the GC thread's first acquire after the rows' commit first lets a
        capture run to its end (the lock is free then: nothing waits on GC)."""

        def __init__(self) -> None:
            self.raced = False

        def __enter__(self) -> bool:
            if threading.get_ident() == gc_thread and rows_deleted.is_set() and not self.raced:
                self.raced = True
                capture = threading.Thread(target=store_again)
                capture.start()
                capture.join(10)
                assert not capture.is_alive(), "the capture blocked: GC held the holds lock"
            return real_lock.__enter__()

        def __exit__(self, *exc: object) -> None:
            real_lock.__exit__(*exc)  # type: ignore[arg-type]

        def acquire(self, *a: object, **kw: object) -> bool:
            return real_lock.acquire(*a, **kw)  # type: ignore[arg-type]

        def release(self) -> None:
            real_lock.release()

    real_changed = store.catalog.stored_changed

    def stored_changed(delta: int) -> None:
        real_changed(delta)
        if delta < 0:
            rows_deleted.set()

    gate = Gate()
    monkeypatch.setattr(store.holds, "lock", gate)
    monkeypatch.setattr(store.catalog, "stored_changed", stored_changed)
    rep = gc.run(store, Retention(grace_s=0))
    monkeypatch.undo()
    assert gate.raced and got == [key] and rep.objects_deleted == 1
    assert store.object_path(key).exists(), "the sweep deleted the file a capture stored again"
    assert store.get(key) == data and verify(store).ok


@pytest.mark.parametrize("flush_bytes", [1 << 30, 300])  # all pending at the commit; flushed as built
def test_a_tree_built_from_nothing_is_not_kept_decoded(tmp_path: Path, flush_bytes: int) -> None:
    """A baseline's nodes are stored as built, not kept decoded in the batch (every name and
    record of the tree: most of a 500k-file baseline's heap); the batch still reads each one,
    pending or flushed, and the commit stores them all. A directory in parts is kept."""
    store = Store.open(tmp_path / "store", flush_bytes=flush_bytes)
    try:
        wide = {b"wide/n%05d" % i: trees.Entry("file", 0o644, 1, put(store, b"w")) for i in range(1_100)}
        changes: dict[bytes, trees.Change] = {
            b"a/b/f": trees.Entry("file", 0o644, 1, put(store, b"f")),
            b"a/g": trees.Entry("file", 0o600, 1, put(store, b"g")),
            b"e": trees.Dir(0o700),
            **wide,
        }
        with store.batch() as batch:
            root = batch.apply(None, changes)
            assert [type(n).__name__ for n in batch._nodes.values()] == ["FanNode"], "only the wide one"
            got = dict(trees.walk(batch.load_node, root))
            assert {p: e for p, e in got.items() if e.kind == "file"} == {
                p: c for p, c in changes.items() if isinstance(c, trees.Entry)
            }
            assert got[b"e"].mode == 0o700 and got[b"a"].kind == "dir"
            batch.set_head(store.add_workspace(b"/w"), root)
            batch.commit()
        store.forget_caches()
        assert dict(trees.walk(store.load_node, root)) == got
    finally:
        store.close()
