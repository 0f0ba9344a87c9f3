"""``verify --remote``, library level, against a directory and the real rclone S3 server: what
it reads, what it finds, and how it names what it finds (the marks and paths hit)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from remote_repo_helpers import PASSWORD, Recording, Workspace, flip_byte, fresh, make_backend, new_repo

from snapd.remote.packs import pack_name
from snapd.remote.repo import Repository
from snapd.remote.verify import verify
from snapd.store import trees

pytestmark = [pytest.mark.remote, pytest.mark.timeout(120)]

BACKENDS = ["file", "s3"]


def _ws(tmp_path: Path) -> Workspace:
    ws = Workspace(tmp_path)
    ws.baseline({"a.txt": b"alpha\n" * 100, "src/deep/b.py": os.urandom(3000), "c.bin": os.urandom(5000)})
    ws.mark("second", {"src/deep/b.py": os.urandom(4000), "d.txt": b"delta"})
    return ws


@pytest.mark.parametrize("kind", BACKENDS)
def test_a_sound_repository_verifies_every_pack_blob_and_mark(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    where = make_backend(kind, tmp_path, request)
    ws = _ws(tmp_path)
    repo = new_repo(where.backend, tmp_path)
    ws.push(repo, *ws.marks)
    got = verify(fresh(where.backend, tmp_path, "v"))
    assert got.ok, [p.describe() for p in got.problems]
    assert got.marks == 2 and got.packs >= 1 and got.packs_read == got.packs
    assert got.blobs >= 7 and got.nodes >= 3 and not got.leftovers and got.sample is None


@pytest.mark.parametrize("kind", BACKENDS)
def test_a_flipped_byte_in_a_pack_is_found_and_named_by_mark_and_path(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    where = make_backend(kind, tmp_path, request)
    ws = _ws(tmp_path)
    repo = new_repo(where.backend, tmp_path)
    ws.push(repo, *ws.marks)
    first, second = ws.marks
    key = trees.lookup(ws.store.load_node, first.tree, b"c.bin")
    assert key is not None
    pack, offset, length = repo.locate(key.key)
    flip_byte(where.folder / pack_name(pack), offset + length // 2)

    got = verify(fresh(where.backend, tmp_path, "v"))
    assert not got.ok
    hit = [p for p in got.problems if p.key == key.key]
    assert len(hit) == 1 and hit[0].problem == "corrupt"
    assert pack_name(pack) in hit[0].message
    # c.bin is unchanged in the second mark: both marks need it, by its path
    assert {(r.mark, r.path) for r in hit[0].refs} == {(first.id, b"c.bin"), (second.id, b"c.bin")}
    assert "c.bin" in hit[0].describe() and first.id in hit[0].describe()
    # the pack's name is its SHA-256: the flip is seen without the password too
    assert any(p.object == pack_name(pack) and "hash" in p.message for p in got.problems)
    # nothing else is blamed
    assert {p.key for p in got.problems if p.key} == {key.key}


def test_a_damaged_tree_node_names_the_directory(tmp_path: Path, request: pytest.FixtureRequest) -> None:
    where = make_backend("file", tmp_path, request)
    ws = _ws(tmp_path)
    repo = new_repo(where.backend, tmp_path)
    ws.push(repo, ws.marks[0])
    deep = trees.lookup(ws.store.load_node, ws.marks[0].tree, b"src/deep")
    assert deep is not None and deep.kind == "dir"
    pack, offset, _ = repo.locate(deep.key)
    flip_byte(where.folder / pack_name(pack), offset + 20)
    got = verify(fresh(where.backend, tmp_path, "v"))
    (hit,) = [p for p in got.problems if p.key == deep.key]
    assert [(r.mark, r.path) for r in hit.refs] == [(ws.marks[0].id, b"src/deep")]


def test_a_missing_pack_and_an_unindexed_pack(tmp_path: Path, request: pytest.FixtureRequest) -> None:
    """A pack an index names but the server lacks is a problem naming the marks and paths that
    need what it held (the second mark's tree is in a pack of its own, and reaches c.bin in the
    lost one); a pack no index names (an interrupted push's) is a leftover, not an error."""
    where = make_backend("file", tmp_path, request)
    ws = _ws(tmp_path)
    repo = new_repo(where.backend, tmp_path)
    ws.push(repo, ws.marks[0])
    leftover = repo.write_pack(b"an interrupted push's pack")
    got = verify(fresh(where.backend, tmp_path, "v1"))
    assert got.ok and got.leftovers == [pack_name(leftover)]

    ws.push(repo, ws.marks[1])
    first, second = ws.marks
    c = trees.lookup(ws.store.load_node, first.tree, b"c.bin")
    assert c is not None
    gone = repo.locate(c.key)[0]
    assert gone != repo.locate(second.tree)[0]
    (where.folder / pack_name(gone)).unlink()
    got = verify(fresh(where.backend, tmp_path, "v2"))
    assert any(p.problem == "missing" and p.object == pack_name(gone) for p in got.problems)
    (hit,) = [p for p in got.problems if p.key == c.key]
    assert hit.problem == "missing" and [(r.mark, r.path) for r in hit.refs] == [(second.id, b"c.bin")]
    (root,) = [p for p in got.problems if p.key == first.tree]  # the first mark's whole tree is lost
    assert [(r.mark, r.path) for r in root.refs] == [(first.id, b"")]


def test_a_tampered_mark_record_is_named(tmp_path: Path, request: pytest.FixtureRequest) -> None:
    where = make_backend("file", tmp_path, request)
    ws = _ws(tmp_path)
    repo = new_repo(where.backend, tmp_path)
    ws.push(repo, *ws.marks)
    record = sorted((where.folder / "marks").iterdir())[0]
    flip_byte(record, 30)
    got = verify(
        Repository.open(where.backend, PASSWORD, tmp_path / "cache-v")
    )  # no refresh: it would refuse
    assert got.marks == 1
    assert [p.object for p in got.problems] == [f"marks/{record.name}"]


@pytest.mark.parametrize("kind", BACKENDS)
def test_a_sampled_verify_reads_only_its_sample(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """Each push makes a pack of its own: ten pushes, ten packs. A 30% sample reads 3 packs
    whole (chosen by its seed, which it reports: the same seed picks the same packs) and of
    the others only the tree nodes, one ranged read each."""
    where = make_backend(kind, tmp_path, request)
    ws = Workspace(tmp_path)
    repo = new_repo(where.backend, tmp_path)
    ws.push(repo, ws.baseline({"a.txt": b"a", "big.bin": os.urandom(20000)}))
    for i in range(9):
        ws.push(repo, ws.mark(f"m{i}", {f"f{i}.bin": os.urandom(20000)}))
    packs = {x.name for x in where.backend.list("data/")}
    assert len(packs) == 10

    seen = Recording(where.backend)
    got = verify(fresh(seen, tmp_path, "v1"), sample=0.3)
    assert got.ok and got.sample == 0.3 and got.seed is not None
    whole = {c.name for c in seen.calls if c.op == "get" and c.name.startswith("data/") and c.end is None}
    ranged = [c for c in seen.calls if c.op == "get" and c.name.startswith("data/") and c.end is not None]
    assert len(whole) == 3 == got.packs_read
    assert all(c.end is not None and c.end - c.start < 2000 for c in ranged)  # node blobs, not contents
    assert got.bytes_read < sum(x.size for x in where.backend.list("data/")) // 2

    again = Recording(where.backend)
    verify(fresh(again, tmp_path, "v2"), sample=0.3, seed=got.seed)
    assert {
        c.name for c in again.calls if c.op == "get" and c.name.startswith("data/") and c.end is None
    } == whole


def test_a_tampered_index_file_is_named_and_its_objects_count_as_in_no_index(
    tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    where = make_backend("file", tmp_path, request)
    ws = _ws(tmp_path)
    repo = new_repo(where.backend, tmp_path)
    ws.push(repo, ws.marks[0])
    (index,) = sorted((where.folder / "index").iterdir())
    flip_byte(index, 40)
    got = verify(Repository.open(where.backend, PASSWORD, tmp_path / "cache-v"))
    assert [p.object for p in got.problems if p.problem == "corrupt"] == [f"index/{index.name}"]
    (root,) = [p for p in got.problems if p.key == ws.marks[0].tree]
    assert root.problem == "missing" and [(r.mark, r.path) for r in root.refs] == [(ws.marks[0].id, b"")]
    assert got.leftovers  # its pack is named by no index that opens


def test_a_tampered_key_file_or_config_is_named(tmp_path: Path, request: pytest.FixtureRequest) -> None:
    where = make_backend("file", tmp_path, request)
    ws = _ws(tmp_path)
    repo = new_repo(where.backend, tmp_path)
    ws.push(repo, ws.marks[0])
    opened = Repository.open(where.backend, PASSWORD, tmp_path / "cache-v")
    (key_file,) = sorted((where.folder / "keys").iterdir())
    flip_byte(key_file, len(key_file.read_bytes()) - 3)
    flip_byte(where.folder / "config", 5)
    got = verify(opened)
    assert sorted(p.object for p in got.problems) == ["config", f"keys/{key_file.name}"]
