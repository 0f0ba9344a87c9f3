"""The remote repository as a library, on a directory (FileBackend): opening and passwords,
the index view and its cache, find, push and restore round trips, the journal of an
interrupted push, doomed packs, tampering refused by path, and what a restore costs.

The same paths against a real S3 server: tests/test_remote_push.py (the remote tier)."""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from e2e_helpers import snapshot, write
from ingest_helpers import capture_paths
from remote_helpers import (
    CANARY,
    PASSWORD,
    Recording,
    baseline,
    build_tree,
    new_repo,
    restore,
    same_tree,
    ten_file_mark,
)

from snapd.errors import (
    Ambiguous,
    NotFound,
    RemoteCorrupt,
    RemoteError,
    RemoteMissing,
    RemoteUnreachable,
    WrongPassword,
)
from snapd.remote import crypto
from snapd.remote.fetch import Prefetcher, Tree, readers
from snapd.remote.files import FileBackend
from snapd.remote.packs import Blob, pack_name
from snapd.remote.push import Journal, push
from snapd.remote.repo import Repository
from snapd.store import batch, trees
from snapd.store.store import Store

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    s = Store.open(tmp_path / "store")
    yield s
    s.close()


def listing(backend: FileBackend) -> list[str]:
    return sorted(item.name for item in backend.list(""))


# -- opening, passwords ----------------------------------------------------------------------


def test_open_needs_the_password_and_init_refuses_a_used_prefix(tmp_path: Path) -> None:
    backend = FileBackend(tmp_path / "remote")
    with pytest.raises(RemoteMissing, match="no repository"):
        Repository.open(backend, PASSWORD, tmp_path / "cache")
    repo = new_repo(backend, tmp_path / "cache")
    again = Repository.open(FileBackend(tmp_path / "remote"), PASSWORD, tmp_path / "cache2")
    assert (again.id, again.master) == (repo.id, repo.master)
    with pytest.raises(WrongPassword, match="does not open"):
        Repository.open(backend, "not the password", tmp_path / "cache")
    before = listing(backend)
    with pytest.raises(RemoteError, match="not empty"):
        new_repo(backend, tmp_path / "cache")
    assert listing(backend) == before


def test_change_password_keeps_the_repository_and_drops_the_old_password(tmp_path: Path) -> None:
    backend = FileBackend(tmp_path / "remote")
    repo = new_repo(backend, tmp_path / "cache")
    with pytest.raises(WrongPassword):
        repo.change_password("wrong old", "new one", cost=crypto.LOW_COST)
    assert len([n for n in listing(backend) if n.startswith("keys/")]) == 1
    repo.change_password(PASSWORD, "new one", cost=crypto.LOW_COST)
    assert len([n for n in listing(backend) if n.startswith("keys/")]) == 1
    with pytest.raises(WrongPassword):
        Repository.open(backend, PASSWORD, tmp_path / "cache")
    assert Repository.open(backend, "new one", tmp_path / "cache").master == repo.master


def test_a_damaged_key_file_does_not_lock_out_the_passwords_of_the_others(tmp_path: Path) -> None:
    """Key files are tried one by one: one that cannot be read (damaged, or junk a server put
    there) is passed over, not a refusal of every password; with no other, it is named."""
    backend = FileBackend(tmp_path / "remote")
    repo = new_repo(backend, tmp_path / "cache")
    (real,) = [n for n in listing(backend) if n.startswith("keys/")]
    backend.put("keys/" + "0" * 64, b"{not a key file")  # listed first; not the hash of its bytes
    assert Repository.open(backend, PASSWORD, tmp_path / "cache").master == repo.master
    with pytest.raises(WrongPassword, match="does not open"):
        Repository.open(backend, "not the password", tmp_path / "cache")
    huge = "keys/" + "1" * 64
    (tmp_path / "remote" / huge).write_bytes(b" " * (1 << 20))  # never fetched: past a key file's size
    fetched = Recording(backend)
    assert Repository.open(fetched, PASSWORD, tmp_path / "cache").master == repo.master
    assert huge not in fetched.gets
    backend.delete(real)
    with pytest.raises(RemoteCorrupt, match="key file keys/0{64}"):
        Repository.open(backend, PASSWORD, tmp_path / "cache")


# -- round trips -----------------------------------------------------------------------------


def test_push_then_restore_from_another_repository_object_is_exact(tmp_path: Path, store: Store) -> None:
    ws = tmp_path / "ws"
    build_tree(ws)
    mark = baseline(store, ws)
    repo = new_repo(FileBackend(tmp_path / "remote"), tmp_path / "cache")
    done: list[tuple[int, int]] = []
    result = push(store, repo, [(mark, os.fsencode(ws))], "host-a", lambda d, t: done.append((d, t)))
    assert (result.marks, result.present, result.landed) == (1, 0, (mark.id,))
    assert done and done[-1][0] == done[-1][1] == result.objects
    elsewhere = Repository.open(FileBackend(tmp_path / "remote"), PASSWORD, tmp_path / "other-cache")
    restored = restore(elsewhere, mark.id, tmp_path / "out")
    assert restored.ok
    same_tree(tmp_path / "out", ws)
    again = push(store, repo, [(mark, os.fsencode(ws))], "host-a")
    assert (again.marks, again.present, again.objects) == (0, 1, 0)


def test_an_index_file_that_does_not_open_leaves_restores_working_and_stops_push_and_prune(
    tmp_path: Path, store: Store
) -> None:
    """Any machine that may push may write ``index/<sha256>`` (the bucket policy allows it): junk
    there must not make every other machine's history unreachable: readers leave it out. Push
    and prune refuse by name while it is listed (it could be a superseding index, whose old ones
    a prune cut short left naming deleted packs), and go on once it is gone."""
    from snapd.remote.prune import PrunePolicy, prune

    ws = tmp_path / "ws"
    build_tree(ws)
    mark = baseline(store, ws)
    backend = FileBackend(tmp_path / "remote")
    push(store, new_repo(backend, tmp_path / "cache"), [(mark, os.fsencode(ws))], "host-a")
    junk = b"written by a compromised sandbox"
    backend.put(f"index/{crypto.sha256_hex(junk)}", junk)
    elsewhere = Repository.open(FileBackend(tmp_path / "remote"), PASSWORD, tmp_path / "other-cache")
    restored = restore(elsewhere, mark.id, tmp_path / "out")
    assert restored.ok
    same_tree(tmp_path / "out", ws)
    ten = ten_file_mark(store, ws)
    before = listing(backend)
    with pytest.raises(RemoteCorrupt, match=f"index/{crypto.sha256_hex(junk)} .*nothing is pushed"):
        push(store, elsewhere, [(ten, os.fsencode(ws))], "host-a")
    with pytest.raises(RemoteCorrupt, match=f"index/{crypto.sha256_hex(junk)} .*prune deletes nothing"):
        prune(elsewhere, PrunePolicy(keep_last=1), grace_s=0)
    assert listing(backend) == before
    backend.delete(f"index/{crypto.sha256_hex(junk)}")
    elsewhere.refresh()
    assert push(store, elsewhere, [(ten, os.fsencode(ws))], "host-a").marks == 1


def test_pushes_never_delete_or_overwrite(tmp_path: Path, store: Store) -> None:
    ws = tmp_path / "ws"
    build_tree(ws, files=30)
    backend = FileBackend(tmp_path / "remote")
    new_repo(backend, tmp_path / "cache")
    recording = Recording(FileBackend(tmp_path / "remote"))
    first = baseline(store, ws)
    marks = [(first, os.fsencode(ws))]
    for n in range(3):  # each push: every mark so far, one new, from a repository opened anew
        repo = Repository.open(recording, PASSWORD, tmp_path / f"cache-{n}")
        there = {item.name for item in backend.list("")}
        recording.puts.clear()
        push(store, repo, marks, "h")
        assert not there & set(recording.puts) and len(set(recording.puts)) == len(recording.puts)
        marks.append((ten_file_mark(store, ws, f"m{n}"), os.fsencode(ws)))
    assert recording.deletes == []


def test_no_plaintext_reaches_the_repository(tmp_path: Path, store: Store) -> None:
    ws = tmp_path / "ws"
    build_tree(ws)
    (ws / f"{CANARY.decode()}-name.txt").write_bytes(b"x")
    ws_id = store.add_workspace(os.fsencode(ws))
    from ingest_helpers import ingest_tree

    mark = store.mark(ingest_tree(store, ws_id, ws, label=f"label-{CANARY.decode()}").mark_id)
    repo = new_repo(FileBackend(tmp_path / "remote"), tmp_path / "cache")
    push(store, repo, [(mark, os.fsencode(ws))], "h")
    for path in (tmp_path / "remote").rglob("*"):
        assert CANARY not in os.fsencode(path.name)
        if path.is_file():
            data = path.read_bytes()
            assert CANARY not in data and b"secret.txt" not in data and os.fsencode(ws) not in data, path


def test_an_incremental_push_of_ten_files_costs_three_requests(tmp_path: Path, store: Store) -> None:
    ws = tmp_path / "ws"
    build_tree(ws)
    backend = FileBackend(tmp_path / "remote")
    repo = new_repo(backend, tmp_path / "cache")
    first = baseline(store, ws)
    push(store, repo, [(first, os.fsencode(ws))], "h")
    second = ten_file_mark(store, ws)
    before = backend.requests
    result = push(store, repo, [(first, os.fsencode(ws)), (second, os.fsencode(ws))], "h")
    assert backend.requests - before == result.requests <= 3, result
    # ten contents, their directories' nodes and the root's: nothing of the unchanged tree
    assert result.objects <= 10 + 9 + 2
    restored = restore(Repository.open(backend, PASSWORD, tmp_path / "c2"), "ten", tmp_path / "out")
    assert restored.ok
    same_tree(tmp_path / "out", ws)


def test_an_incremental_push_reads_only_the_directories_that_changed(
    tmp_path: Path, store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    ws = tmp_path / "ws"
    build_tree(ws, files=20)
    for i in range(60):
        write(ws / f"other/d{i:02}/x.txt", f"{i}\n")
    repo = new_repo(FileBackend(tmp_path / "remote"), tmp_path / "cache")
    first = baseline(store, ws)
    push(store, repo, [(first, os.fsencode(ws))], "h")
    rels = [f"src/d0/f{i:03}.txt" for i in range(0, 20, 9)]
    for rel in rels:
        write(ws / rel, os.urandom(100))
    second = capture_paths(store, store.add_workspace(os.fsencode(ws)), ws, [r.encode() for r in rels], "m")
    loaded: list[str] = []
    load = store.load_node
    def counted(key: str) -> trees.Node:
        loaded.append(key)
        return load(key)

    monkeypatch.setattr(store, "load_node", counted)
    result = push(store, repo, [(second, os.fsencode(ws))], "h")
    assert result.objects == len(rels) + 3  # the contents, src/d0, src and the root
    assert len(loaded) <= 6, f"{len(loaded)} nodes read: the whole tree was walked"


def test_a_stale_view_is_listed_again_and_what_prune_deleted_leaves_it(tmp_path: Path, store: Store) -> None:
    ws = tmp_path / "ws"
    build_tree(ws, files=20)
    backend = FileBackend(tmp_path / "remote")
    repo = new_repo(backend, tmp_path / "cache")
    mark = baseline(store, ws)
    push(store, repo, [(mark, os.fsencode(ws))], "h")
    (record,) = repo.marks()
    assert (repo.cache / record.name).exists()
    backend.delete(record.name)  # what prune does to a mark it drops
    assert repo.marks() == [record]  # the view is fresh: not listed again
    repo.view.refreshed = None
    assert repo.marks() == []
    assert not (repo.cache / record.name).exists()


def test_the_cache_spares_a_second_process_every_fetch(tmp_path: Path, store: Store) -> None:
    ws = tmp_path / "ws"
    build_tree(ws, files=20)
    mark = baseline(store, ws)
    first = new_repo(FileBackend(tmp_path / "remote"), tmp_path / "cache")
    push(store, first, [(mark, os.fsencode(ws))], "h")
    recording = Recording(FileBackend(tmp_path / "remote"))
    repo = Repository.open(recording, PASSWORD, tmp_path / "cache")
    repo.refresh()
    assert [g for g in recording.gets if not g.startswith("keys/") and g != "config"] == []
    (repo.cache / "index").joinpath(next(iter(repo.index_files()))).write_bytes(b"damaged")
    third = Repository.open(recording, PASSWORD, tmp_path / "cache")
    assert len(third.marks()) == 1
    assert [g for g in recording.gets if g.startswith("index/")] != []  # the damaged copy: not used
    assert third.has(mark.tree)


def test_a_damaged_mark_record_is_left_out_and_the_rest_stays_usable(tmp_path: Path, store: Store) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    build_tree(a, files=5)
    build_tree(b, files=5)
    backend = FileBackend(tmp_path / "remote")
    repo = new_repo(backend, tmp_path / "cache")
    ma, mb = baseline(store, a), baseline(store, b)
    push(store, repo, [(ma, os.fsencode(a)), (mb, os.fsencode(b))], "h")
    name = repo.record_name(store_id(store), ma.id)
    path = tmp_path / "remote" / name
    path.write_bytes(path.read_bytes()[:-1] + b"?")
    reader = Repository.open(FileBackend(tmp_path / "remote"), PASSWORD, tmp_path / "c2")
    assert [r.mark.id for r in reader.marks()] == [mb.id]
    assert "does not authenticate" in reader.damaged[name]
    with pytest.raises(NotFound):
        reader.find(ma.id)
    assert restore(reader, mb.id, tmp_path / "out").ok
    backend.delete(name)  # gone from the server: gone from the list of damaged records too
    reader.refresh()
    assert reader.damaged == {}
    with open(path, "wb") as f:  # past any record's size (sparse): never fetched, never held
        f.truncate(1 << 30)
    fetched = Recording(FileBackend(tmp_path / "remote"))
    reader = Repository.open(fetched, PASSWORD, tmp_path / "c3")
    assert [r.mark.id for r in reader.marks()] == [mb.id]
    assert "past the" in reader.damaged[name] and name not in fetched.gets


# -- find --------------------------------------------------------------------------------------


def test_find_by_id_prefix_label_host_and_workspace(tmp_path: Path, store: Store) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    build_tree(a, files=5)
    build_tree(b, files=5)
    repo = new_repo(FileBackend(tmp_path / "remote"), tmp_path / "cache")
    ma = baseline(store, a)
    mb = baseline(store, b)
    m2 = ten_file_mark(store, a, "ten")
    push(store, repo, [(ma, os.fsencode(a)), (m2, os.fsencode(a))], "host-a")
    push(store, repo, [(mb, os.fsencode(b))], "host-b")
    assert repo.find(m2.id).mark.id == m2.id
    assert repo.find(m2.id[:6]).mark.id == m2.id
    assert repo.find("ten").mark.id == m2.id
    assert repo.find("ten~1").mark.id == ma.id
    assert repo.find("baseline", host="host-a").mark.id == ma.id
    assert repo.find("baseline", workspace=os.fsencode(a)).mark.id == ma.id
    with pytest.raises(NotFound, match="host-b"):
        repo.find("ten", host="host-b")
    with pytest.raises(NotFound):
        repo.find("ten~5")
    with pytest.raises(NotFound):
        repo.find(m2.id, workspace=os.fsencode(b))


def test_a_label_of_several_workspaces_is_ambiguous_and_names_them(tmp_path: Path, store: Store) -> None:
    """On a fresh machine the newest ``turn-end`` of a repository could be another project's:
    a label carried by marks of more than one (store, workspace) is refused, listing each with
    its host, workspace, id and time, and how to narrow it; within one store's workspace it
    still names the newest."""
    a, b = tmp_path / "a", tmp_path / "b"
    build_tree(a, files=5)
    build_tree(b, files=5)
    repo = new_repo(FileBackend(tmp_path / "remote"), tmp_path / "cache")
    ma, mb = baseline(store, a), baseline(store, b)
    a1 = ten_file_mark(store, a, "turn-end")
    a2 = ten_file_mark(store, a, "turn-end")
    push(store, repo, [(m, os.fsencode(a)) for m in (ma, a1, a2)], "host-a")
    assert repo.find("turn-end").mark.id == a2.id  # one workspace: the newest
    assert repo.find("turn-end~1").mark.id == a1.id
    b1 = ten_file_mark(store, b, "turn-end")
    push(store, repo, [(mb, os.fsencode(b)), (b1, os.fsencode(b))], "host-b")
    with pytest.raises(Ambiguous) as caught:
        repo.find("turn-end")
    message = caught.value.message
    for text in (a2.id, b1.id, "host-a", "host-b", str(a), str(b), "--host", "-w", "mark id", "UTC"):
        assert text in message, (text, message)
    assert a1.id not in message  # each place once, by its newest
    assert sorted(caught.value.details["candidates"]) == sorted([a2.id, b1.id])
    places = {(m["host"], m["workspace"]) for m in caught.value.details["marks"]}
    assert places == {("host-a", str(a)), ("host-b", str(b))}
    with pytest.raises(Ambiguous):
        repo.find("baseline")  # snapd's own labels too
    assert repo.find("turn-end", host="host-b").mark.id == b1.id
    assert repo.find("turn-end", workspace=os.fsencode(a)).mark.id == a2.id
    assert repo.find(b1.id).mark.id == b1.id
    # two stores (two machines) with one workspace path and one host: only the id tells them apart
    with Store.open(tmp_path / "store-2") as other:
        mc = baseline(other, a)
        c1 = ten_file_mark(other, a, "turn-end")
        push(other, repo, [(mc, os.fsencode(a)), (c1, os.fsencode(a))], "host-a")
    with pytest.raises(Ambiguous, match=c1.id):
        repo.find("turn-end", host="host-a", workspace=os.fsencode(a))
    assert repo.find(c1.id[:8]).mark.id == c1.id


def test_find_refuses_an_ambiguous_id_prefix(
    tmp_path: Path, store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    ids = iter(["7abcd00001", "7abcd00002"])
    monkeypatch.setattr(batch, "new_mark_id", lambda: next(ids))
    a = tmp_path / "a"
    build_tree(a, files=5)
    repo = new_repo(FileBackend(tmp_path / "remote"), tmp_path / "cache")
    first = baseline(store, a)
    second = ten_file_mark(store, a, "ten")
    push(store, repo, [(first, os.fsencode(a)), (second, os.fsencode(a))], "h")
    with pytest.raises(Ambiguous, match="7abcd00001.*7abcd00002|7abcd00002.*7abcd00001") as caught:
        repo.find("7abcd")
    assert sorted(caught.value.details["candidates"]) == ["7abcd00001", "7abcd00002"]
    assert repo.find("7abcd00002").mark.label == "ten"  # a full id is never ambiguous


class Cut(Recording):
    """A backend whose server goes away after ``packs`` data PUTs: every later PUT fails."""

    def __init__(self, inner: FileBackend, packs: int) -> None:
        super().__init__(inner)
        self.left = packs

    def put(self, name: str, data: bytes) -> None:
        if name.startswith("data/"):
            if self.left <= 0:
                raise RemoteUnreachable(f"{self.url}: no answer (to write {name})")
            self.left -= 1
        elif self.left <= 0:
            raise RemoteUnreachable(f"{self.url}: no answer (to write {name})")
        super().put(name, data)


def test_a_push_cut_short_resumes_without_sending_landed_packs(tmp_path: Path, store: Store) -> None:
    ws = tmp_path / "ws"
    build_tree(ws, files=40, big=1 << 20)
    mark = baseline(store, ws)
    new_repo(FileBackend(tmp_path / "remote"), tmp_path / "cache")
    cut = Cut(FileBackend(tmp_path / "remote"), packs=5)
    repo = Repository.open(cut, PASSWORD, tmp_path / "cache")
    with pytest.raises(RemoteUnreachable):
        push(store, repo, [(mark, os.fsencode(ws))], "h", pack_target=64 << 10)
    landed = {n for n in cut.puts if n.startswith("data/")}
    assert len(landed) == 5 and not any(n.startswith(("index/", "marks/")) for n in cut.puts)
    # Nothing a reader trusts: no mark, no object of the packs that landed
    reader = Repository.open(FileBackend(tmp_path / "remote"), PASSWORD, tmp_path / "reader-cache")
    assert reader.marks() == []
    journaled = Journal(repo.cache / "journal.jsonl", 3600).landed()
    assert set(journaled) == {n.rsplit("/", 1)[1] for n in landed}
    assert not any(reader.has(blob.key) for blobs in journaled.values() for blob in blobs)
    # resumed by another process (another Repository object on the same cache directory)
    again = Recording(FileBackend(tmp_path / "remote"))
    result = push(store, Repository.open(again, PASSWORD, tmp_path / "cache"), [(mark, os.fsencode(ws))], "h",
                  pack_target=64 << 10)  # fmt: skip
    assert result.resumed == 5
    assert not landed & set(again.puts), "a pack that had landed was sent again"
    restored = restore(Repository.open(FileBackend(tmp_path / "remote"), PASSWORD, tmp_path / "c3"), mark.id,
                       tmp_path / "out")  # fmt: skip
    assert restored.ok
    same_tree(tmp_path / "out", ws)


def test_a_resumed_push_indexes_only_packs_that_are_on_this_server(tmp_path: Path, store: Store) -> None:
    """A copy of a repository (another bucket, synced from this one) has its id and keys, so
    both share one cache directory and its journal. A push to the copy cut short journals
    packs that landed there only; a push to the original must not take them as landed there
    (an index naming packs that are not there, a record counting on it): it sends them."""
    import shutil

    ws = tmp_path / "ws"
    build_tree(ws, files=40, big=1 << 20)
    mark = baseline(store, ws)
    new_repo(FileBackend(tmp_path / "remote"), tmp_path / "cache")
    shutil.copytree(tmp_path / "remote", tmp_path / "copy")
    cut = Cut(FileBackend(tmp_path / "copy"), packs=5)
    with pytest.raises(RemoteUnreachable):
        push(store, Repository.open(cut, PASSWORD, tmp_path / "cache"), [(mark, os.fsencode(ws))], "h",
             pack_target=64 << 10)  # fmt: skip
    push(store, Repository.open(FileBackend(tmp_path / "remote"), PASSWORD, tmp_path / "cache"),
         [(mark, os.fsencode(ws))], "h", pack_target=64 << 10)  # fmt: skip
    restored = restore(Repository.open(FileBackend(tmp_path / "remote"), PASSWORD, tmp_path / "c3"), mark.id,
                       tmp_path / "out")  # fmt: skip
    assert restored.ok
    same_tree(tmp_path / "out", ws)


def test_objects_of_a_doomed_pack_are_sent_again(tmp_path: Path, store: Store) -> None:
    ws = tmp_path / "ws"
    build_tree(ws, files=20)
    backend = FileBackend(tmp_path / "remote")
    repo = new_repo(backend, tmp_path / "cache")
    mark = baseline(store, ws)
    first = push(store, repo, [(mark, os.fsencode(ws))], "h")
    repo.write_doomed(list(repo.packs()))  # as prune's first phase would, had it dropped the mark
    backend.delete(repo.record_name(store_id(store), mark.id))
    repo.refresh()
    assert not repo.has(mark.tree)
    again = push(store, repo, [(mark, os.fsencode(ws))], "h")
    assert again.objects == first.objects and repo.has(mark.tree)
    for pack in list(repo.doomed_lists().values())[0].packs:  # prune's second phase
        backend.delete(pack_name(pack))
    same_tree_after = restore(Repository.open(backend, PASSWORD, tmp_path / "c2"), mark.id, tmp_path / "out")
    assert same_tree_after.ok
    same_tree(tmp_path / "out", ws)


def test_a_push_whose_packs_a_prune_dooms_before_its_record_sends_them_again(
    tmp_path: Path, store: Store
) -> None:
    ws = tmp_path / "ws"
    build_tree(ws, files=20)
    backend = FileBackend(tmp_path / "remote")
    new_repo(backend, tmp_path / "cache")
    prune = Repository.open(backend, PASSWORD, tmp_path / "prune-cache")
    recording = Recording(FileBackend(tmp_path / "remote"))

    def doom_once(name: str) -> None:  # prune's first phase, between this push's index and record
        if name.startswith("index/") and not prune.doomed_lists():
            prune.refresh()
            prune.write_doomed(list(prune.packs()))

    recording.after_put = doom_once
    # a view older than half the grace at the record: here, any view
    pusher = Repository.open(recording, PASSWORD, tmp_path / "cache", refresh_s=0.0)
    mark = baseline(store, ws)
    result = push(store, pusher, [(mark, os.fsencode(ws))], "h")
    doomed = next(iter(prune.doomed_lists().values())).packs
    assert result.packs == 2 * len(doomed)  # every pack sent twice: before and after the doom
    for pack in doomed:  # prune's second phase
        backend.delete(pack_name(pack))
    assert restore(Repository.open(backend, PASSWORD, tmp_path / "c2"), mark.id, tmp_path / "out").ok
    same_tree(tmp_path / "out", ws)


def store_id(store: Store) -> str:
    from snapd.store import pushed

    return pushed.store_id(store.catalog)


# -- reading: tampering, cost ----------------------------------------------------------------


def flip_blob(repo: Repository, root: Path, key: str) -> None:
    where = repo.locate(key)
    path = root / pack_name(where.key)
    data = bytearray(path.read_bytes())
    data[where.offset + where.length // 2] ^= 0x40
    path.write_bytes(bytes(data))


def test_a_tampered_content_is_refused_naming_its_paths(tmp_path: Path, store: Store) -> None:
    ws = tmp_path / "ws"
    build_tree(ws, files=20)
    (ws / "copy-of-secret.txt").write_bytes((ws / "secret.txt").read_bytes())
    mark = baseline(store, ws)
    repo = new_repo(FileBackend(tmp_path / "remote"), tmp_path / "cache")
    push(store, repo, [(mark, os.fsencode(ws))], "h")
    key = trees.lookup(store.load_node, mark.tree, b"secret.txt").key  # type: ignore[union-attr]
    flip_blob(repo, tmp_path / "remote", key)
    reader = Repository.open(FileBackend(tmp_path / "remote"), PASSWORD, tmp_path / "c2")
    with pytest.raises(RemoteCorrupt) as caught:
        restore(reader, mark.id, tmp_path / "out")
    assert "secret.txt" in caught.value.message and "copy-of-secret.txt" in caught.value.message
    assert set(caught.value.details["paths"]) == {"secret.txt", "copy-of-secret.txt"}


def test_a_tampered_directory_is_refused_naming_it(tmp_path: Path, store: Store) -> None:
    ws = tmp_path / "ws"
    build_tree(ws, files=20)
    mark = baseline(store, ws)
    repo = new_repo(FileBackend(tmp_path / "remote"), tmp_path / "cache")
    push(store, repo, [(mark, os.fsencode(ws))], "h")
    deep = store.load_node(store.load_node(store.load_node(mark.tree)[b"nested"].key)[b"deep"].key)
    flip_blob(repo, tmp_path / "remote", store.load_node(mark.tree)[b"nested"].key)
    assert deep  # the node below is intact; the one that holds it is not
    reader = Repository.open(FileBackend(tmp_path / "remote"), PASSWORD, tmp_path / "c2")
    with pytest.raises(RemoteCorrupt, match="directory nested"):
        readers(reader, reader.find(mark.id))


def test_a_restore_reads_packs_not_files(tmp_path: Path, store: Store) -> None:
    ws = tmp_path / "ws"
    build_tree(ws, files=600)
    mark = baseline(store, ws)
    repo = new_repo(FileBackend(tmp_path / "remote"), tmp_path / "cache")
    result = push(store, repo, [(mark, os.fsencode(ws))], "h", pack_target=16 << 10)
    assert result.packs >= 3
    recording = Recording(FileBackend(tmp_path / "remote"))
    reader = Repository.open(recording, PASSWORD, tmp_path / "c2")
    reader.refresh()
    before = len(recording.gets)
    assert restore(reader, mark.id, tmp_path / "out").ok
    same_tree(tmp_path / "out", ws)
    data_gets = [g for g in recording.gets[before:] if g.startswith("data/")]
    # 4 levels of directories, their nodes packed first: a GET or so per level, then one or
    # two per pack of contents (neighbouring blobs coalesced)
    assert len(data_gets) <= 2 * result.packs + 4, len(data_gets)
    assert len(snapshot(ws)) > 600


def test_a_pack_header_lists_what_the_index_says(tmp_path: Path, store: Store) -> None:
    ws = tmp_path / "ws"
    build_tree(ws, files=30)
    mark = baseline(store, ws)
    backend = FileBackend(tmp_path / "remote")
    repo = new_repo(backend, tmp_path / "cache")
    push(store, repo, [(mark, os.fsencode(ws))], "h", pack_target=8 << 10)
    sizes = {item.name: item.size for item in backend.list("data/")}
    for pack, blobs in repo.packs().items():
        assert repo.read_header(pack, sizes[pack_name(pack)]) == blobs


def test_an_object_larger_than_a_pack_gets_a_pack_of_its_own(tmp_path: Path, store: Store) -> None:
    ws = tmp_path / "ws"
    build_tree(ws, files=30)
    write(ws / "big.bin", os.urandom(200 << 10))
    mark = baseline(store, ws)
    repo = new_repo(FileBackend(tmp_path / "remote"), tmp_path / "cache")
    push(store, repo, [(mark, os.fsencode(ws))], "h", pack_target=64 << 10)
    big = trees.lookup(store.load_node, mark.tree, b"big.bin")
    assert big is not None
    assert [b.key for b in repo.packs()[repo.locate(big.key).key]] == [big.key]


def test_a_restore_reads_every_directory_of_a_deep_tree_in_a_few_ranges(tmp_path: Path, store: Store) -> None:
    ws = tmp_path / "ws"
    for a in range(4):
        for b in range(4):
            for c in range(4):
                write(ws / f"a{a}/b{b}/c{c}/d/data.bin", os.urandom(20 << 10))
    mark = baseline(store, ws)
    repo = new_repo(FileBackend(tmp_path / "remote"), tmp_path / "cache")
    result = push(store, repo, [(mark, os.fsencode(ws))], "h", pack_target=256 << 10)
    assert result.packs >= 5
    recording = Recording(FileBackend(tmp_path / "remote"))
    reader = Repository.open(recording, PASSWORD, tmp_path / "c2")
    record = reader.find(mark.id)
    before = len(recording.gets)
    tree = Tree(reader, record.mark.tree)  # what readers() reads first: every node, 6 levels
    assert len(tree.nodes) == 1 + 4 + 16 + 64 + 64
    node_gets = [g for g in recording.gets[before:] if g.startswith("data/")]
    assert len(node_gets) <= 2, node_gets  # a push packs the nodes together: one range, or two


def test_contents_are_fetched_ahead_within_the_window(tmp_path: Path, store: Store) -> None:
    ws = tmp_path / "ws"
    build_tree(ws, files=10, big=2 << 20)
    mark = baseline(store, ws)
    repo = new_repo(FileBackend(tmp_path / "remote"), tmp_path / "cache")
    push(store, repo, [(mark, os.fsencode(ws))], "h", pack_target=128 << 10)
    reader = Repository.open(FileBackend(tmp_path / "remote"), PASSWORD, tmp_path / "c2")
    tree = Tree(reader, reader.find(mark.id).mark.tree)
    window = 256 << 10
    seen: list[tuple[int, int]] = []
    ahead = Prefetcher(reader, tree, lambda done, total: seen.append((done, total)), window)
    largest = max(span.end - span.start for span in ahead.spans)
    most = 0
    for key in [k for k, paths in tree.holders.items() for _ in paths]:  # the writer's order
        assert ahead.get(key) == store.get(key)
        most = max(most, ahead.held)
    assert ahead.total > 4 * window  # the window was needed
    assert most <= window + largest, (most, window)
    assert ahead.held == 0 and not ahead.futures  # everything released
    assert seen[-1] == (ahead.total, ahead.total) and [d for d, _ in seen] == sorted(d for d, _ in seen)


def test_contents_are_opened_by_the_reader_threads_once_each(
    tmp_path: Path, store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The writer's get hands over contents already authenticated and decoded (the AES-GCM and
    zstd work is off its thread), and a content several paths hold is opened once."""
    ws = tmp_path / "ws"
    build_tree(ws, files=60, big=1 << 20)
    for i in range(3):  # contents several paths hold
        write(ws / f"copies/b{i}.bin", (ws / "blobs/b0001.bin").read_bytes())
        write(ws / f"copies/s{i}.txt", (ws / "secret.txt").read_bytes())
    mark = baseline(store, ws)
    repo = new_repo(FileBackend(tmp_path / "remote"), tmp_path / "cache")
    push(store, repo, [(mark, os.fsencode(ws))], "h", pack_target=128 << 10)
    reader = Repository.open(FileBackend(tmp_path / "remote"), PASSWORD, tmp_path / "c2")
    opened: list[tuple[str, bool]] = []  # key, on the writer's thread
    read_blob = reader.read_blob

    def recording(key: str, sealed: bytes) -> bytes:
        opened.append((key, threading.current_thread() is threading.main_thread()))
        return read_blob(key, sealed)

    monkeypatch.setattr(reader, "read_blob", recording)
    tree = Tree(reader, reader.find(mark.id).mark.tree)
    opened.clear()  # the nodes: read before the writer starts
    ahead = Prefetcher(reader, tree, None, 256 << 10)
    wanted = [k for k, paths in tree.holders.items() for _ in paths]  # the writer's order
    assert len(wanted) == len(tree.holders) + 6
    for key in wanted:
        assert ahead.get(key) == store.get(key)
    assert sorted(k for k, _ in opened) == sorted(tree.holders)
    assert not any(on_writer for _, on_writer in opened)


def test_the_journal_survives_a_torn_line_and_keeps_each_packs_age(tmp_path: Path) -> None:
    path = tmp_path / "journal.jsonl"
    journal = Journal(path, max_age_s=3600)
    blob = Blob("0" * 32 + "-3", 0, 40)
    journal.add("a" * 64, [blob])
    with open(path, "ab") as f:
        f.write(b'{"pack": "' + b"t" * 64 + b'", "blo')  # the machine died while appending
    journal.add("b" * 64, [blob])
    assert set(journal.landed()) == {"a" * 64, "b" * 64}
    hour = 3600 * 10**9
    with open(path, "ab") as f:  # landed 2 h ago: prune may have deleted it (no index names it)
        old = time.time_ns() - 2 * hour
        f.write(json.dumps({"pack": "c" * 64, "blobs": [list(blob)], "time": old}).encode() + b"\n")
        half = time.time_ns() - hour // 2
        f.write(json.dumps({"pack": "d" * 64, "blobs": [list(blob)], "time": half}).encode() + b"\n")
    assert set(journal.landed()) == {"a" * 64, "b" * 64, "d" * 64}
    journal.indexed({"a" * 64, "b" * 64})
    (line,) = path.read_bytes().splitlines()
    assert json.loads(line)["time"] == half  # re-written, not re-dated
    journal.indexed({"d" * 64})
    assert not path.exists()


def test_a_refused_content_releases_its_range_and_the_rest_is_read(tmp_path: Path, store: Store) -> None:
    """What the daemon's restore does: a refused content is listed, the writer goes on."""
    ws = tmp_path / "ws"
    build_tree(ws, files=10, big=1 << 20)
    mark = baseline(store, ws)
    repo = new_repo(FileBackend(tmp_path / "remote"), tmp_path / "cache")
    push(store, repo, [(mark, os.fsencode(ws))], "h", pack_target=64 << 10)
    bad = trees.lookup(store.load_node, mark.tree, b"blobs/b0001.bin")
    assert bad is not None
    flip_blob(repo, tmp_path / "remote", bad.key)
    reader = Repository.open(FileBackend(tmp_path / "remote"), PASSWORD, tmp_path / "c2")
    tree = Tree(reader, reader.find(mark.id).mark.tree)
    ahead = Prefetcher(reader, tree, None, 128 << 10)
    refused = []
    for key in [k for k, paths in tree.holders.items() for _ in paths]:
        try:
            assert ahead.get(key) == store.get(key)
        except RemoteCorrupt as exc:
            refused.append(exc.details["paths"])
    assert refused == [["blobs/b0001.bin"]]
    assert ahead.held == 0 and not ahead.futures
