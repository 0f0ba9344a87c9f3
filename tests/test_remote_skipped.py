"""A push whose marks need objects the local store cannot read (bit rot, as tests/test_bitrot.py
does it: a byte of the stored payload flipped): the damaged marks are skipped and reported by
path, every other mark is pushed, and no record claims what the repository does not hold. On a
directory (FileBackend); the daemon's side (reply, exit 10, the on-mark pusher's last error):
tests/test_pusher.py."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from e2e_helpers import snapshot
from remote_helpers import PASSWORD, baseline, build_tree, new_repo, restore, same_tree, ten_file_mark

from snapd.errors import NotFound
from snapd.remote.files import FileBackend
from snapd.remote.push import push
from snapd.remote.repo import Repository
from snapd.store import objects, trees
from snapd.store.records import Mark
from snapd.store.store import Store

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    s = Store.open(tmp_path / "store")
    yield s
    s.close()


def rot(store: Store, key: str) -> None:
    """Flip a byte in the middle of ``key``'s stored payload (an inline object's row)."""
    with store.catalog.write() as c:
        row = c.execute("SELECT data, external FROM objects WHERE key=?", (objects.db_key(key),)).fetchone()
        assert row is not None and not row[1], key
        data = bytearray(row[0])
        data[len(data) // 2] ^= 0x40
        c.execute("UPDATE objects SET data=? WHERE key=?", (bytes(data), objects.db_key(key)))


def key_at(store: Store, mark: Mark, path: bytes) -> str:
    entry = trees.lookup(store.load_node, mark.tree, path)
    assert entry is not None, path
    return entry.key


def history(store: Store, tmp_path: Path) -> tuple[Path, Path, list[Mark]]:
    """Workspace a: baseline, ``ten``, ``later`` (the same ten files changed again); b: baseline."""
    a, b = tmp_path / "a", tmp_path / "b"
    build_tree(a, files=20)
    build_tree(b, files=5)
    ma, mb = baseline(store, a), baseline(store, b)
    m2 = ten_file_mark(store, a, "ten")
    m3 = ten_file_mark(store, a, "later")
    return a, b, [ma, m2, m3, mb]


def test_a_mark_whose_content_is_rotten_is_skipped_by_path_and_the_others_land(
    tmp_path: Path, store: Store
) -> None:
    a, b, (ma, m2, m3, mb) = history(store, tmp_path)
    at_m3 = snapshot(a)
    bad = key_at(store, m2, b"src/d1/f001.txt")  # only ``ten`` has this version
    rot(store, bad)
    repo = new_repo(FileBackend(tmp_path / "remote"), tmp_path / "cache")
    marks = [(ma, os.fsencode(a)), (m2, os.fsencode(a)), (m3, os.fsencode(a)), (mb, os.fsencode(b))]
    done: list[tuple[int, int]] = []
    result = push(store, repo, marks, "h", lambda d, t: done.append((d, t)))
    assert done[-1][0] == done[-1][1] == result.objects + 1  # the rotten one counted as done, not sent
    assert [s.mark for s in result.skipped] == [m2.id]
    skip = result.skipped[0]
    assert (skip.workspace, skip.problem, skip.paths) == (os.fsencode(a), "corrupt", ("src/d1/f001.txt",))
    assert "src/d1/f001.txt" in skip.reason and bad in skip.reason and "corrupt" in skip.reason, skip.reason
    assert set(result.landed) == {ma.id, m3.id, mb.id} and result.marks == 3
    elsewhere = Repository.open(FileBackend(tmp_path / "remote"), PASSWORD, tmp_path / "elsewhere")
    with pytest.raises(NotFound):
        elsewhere.find(m2.id)  # no record claims what the repository lacks
    assert restore(elsewhere, m3.id, tmp_path / "out").ok  # walked against the skipped one: complete
    same_tree(tmp_path / "out", at_m3)
    assert not elsewhere.has(bad)
    again = push(store, repo, marks, "h")  # skipped again, nothing sent again
    assert [s.mark for s in again.skipped] == [m2.id]
    assert (again.marks, again.present, again.objects) == (0, 3, 0)


def test_a_rotten_object_shared_by_later_marks_skips_them_all(tmp_path: Path, store: Store) -> None:
    """A later mark walked against an earlier one of the same push does not list the objects
    they share: the damage is found in its tree, not in its walk."""
    a, b, (ma, m2, m3, mb) = history(store, tmp_path)
    bad = key_at(store, ma, b"src/d3/f012.txt")  # never changed: every mark of a needs it (b has no such)
    rot(store, bad)
    repo = new_repo(FileBackend(tmp_path / "remote"), tmp_path / "cache")
    marks = [(ma, os.fsencode(a)), (m2, os.fsencode(a)), (m3, os.fsencode(a)), (mb, os.fsencode(b))]
    result = push(store, repo, marks, "h")
    assert sorted(s.mark for s in result.skipped) == sorted([ma.id, m2.id, m3.id])
    assert all(s.paths == ("src/d3/f012.txt",) for s in result.skipped), result.skipped
    assert result.landed == (mb.id,)
    assert restore(Repository.open(FileBackend(tmp_path / "remote"), PASSWORD, tmp_path / "e"), mb.id,
                   tmp_path / "out").ok  # fmt: skip
    same_tree(tmp_path / "out", b)


def test_a_rotten_directory_node_skips_its_mark_naming_the_directory(tmp_path: Path) -> None:
    """A tree node that cannot be read (a store opened afresh: no node cached) stops the walk of
    its mark only; the reason names the directory."""
    with Store.open(tmp_path / "store") as store:
        a, b, (ma, m2, m3, mb) = history(store, tmp_path)
        bad = key_at(store, m3, b"src/d1")  # the newest: no other node is a delta of it
        rot(store, bad)
    with Store.open(tmp_path / "store") as store:
        repo = new_repo(FileBackend(tmp_path / "remote"), tmp_path / "cache")
        marks = [(ma, os.fsencode(a)), (m2, os.fsencode(a)), (m3, os.fsencode(a)), (mb, os.fsencode(b))]
        result = push(store, repo, marks, "h")
    assert [s.mark for s in result.skipped] == [m3.id], result.skipped
    assert result.skipped[0].paths == ("src/d1",) and "the directory src/d1" in result.skipped[0].reason
    assert set(result.landed) == {ma.id, m2.id, mb.id}
    assert restore(repo, m2.id, tmp_path / "out").ok


def test_a_mark_whose_wide_directory_has_a_rotten_part_is_skipped_though_the_fan_is_cached(
    tmp_path: Path, store: Store
) -> None:
    """A directory of 1,500 names is stored in parts (store format 10). One part rots while the
    fan is still in the node cache (as right after a mark): the mark is skipped with the
    directory named, not recorded as pushed without that part (found by review: the damage
    walk returned the cached fan before looking at its parts)."""
    from snapd.store import fan

    ws = tmp_path / "ws"
    for i in range(1500):
        (ws / "icons").mkdir(parents=True, exist_ok=True)
        (ws / "icons" / f"Icon{i:04d}.js").write_bytes(b"export default %d;\n" % i)
    mark = baseline(store, ws)
    node = store.load_node(key_at(store, mark, b"icons"))  # cached, as after a mark
    assert isinstance(node, fan.FanNode)
    rot(store, node.parts[2])
    repo = new_repo(FileBackend(tmp_path / "remote"), tmp_path / "cache")
    result = push(store, repo, [(mark, os.fsencode(ws))], "h")
    assert [s.mark for s in result.skipped] == [mark.id] and not result.landed, result
    assert result.skipped[0].paths == ("icons",), result.skipped
