"""``remote prune``, library level, against a directory and the real rclone S3 server: what it
frees, what it keeps (every kept mark restores exactly from a fresh view), its lock, its dry
run, and the two phases that keep a push running between them safe."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from remote_repo_helpers import (
    HOST,
    Recording,
    Workspace,
    flip_byte,
    fresh,
    listing,
    make_backend,
    new_repo,
    record_of,
    restored,
)

from snapd.errors import RemoteCorrupt, RemoteError, RemoteLocked, RemoteMissing, UsageError
from snapd.remote import crypto, fetch, fields, locks, packs
from snapd.remote.backend import Backend, Listed
from snapd.remote.packs import pack_name
from snapd.remote.prune import PrunePolicy, PruneResult, dropped, prune
from snapd.remote.push import push
from snapd.remote.records import MarkRecord, RemoteMark
from snapd.remote.repo import Repository
from snapd.remote.verify import verify
from snapd.store import fan, trees

pytestmark = [pytest.mark.remote, pytest.mark.timeout(120)]

BACKENDS = ["file", "s3"]
KEEP_TWO = PrunePolicy(keep_last=2)


def _history(tmp_path: Path, repo: Repository) -> Workspace:
    """A baseline and three marks, each pushed on its own (a pack each): ``x.bin`` is A in m1
    only, B from m2 on; m3 adds y.bin. Keeping the last two (m2, m3) leaves m1's pack (A and
    m1's root node) needed by no one; the baseline's pack still holds a.txt, which both need."""
    ws = Workspace(tmp_path)
    ws.push(repo, ws.baseline({"a.txt": b"alpha\n" * 50, "sub/s.txt": b"s"}))
    ws.push(repo, ws.mark("m1", {"x.bin": os.urandom(30000)}))
    ws.push(repo, ws.mark("m2", {"x.bin": os.urandom(30000)}))
    ws.push(repo, ws.mark("m3", {"y.bin": os.urandom(30000)}))
    return ws


def _key(ws: Workspace, mark_index: int, path: bytes) -> str:
    entry = trees.lookup(ws.store.load_node, ws.marks[mark_index].tree, path)
    assert entry is not None
    return entry.key


def _pack_of(repo: Repository, key: str) -> str:
    return repo.locate(key)[0]  # (pack, offset, length)


def _assert_kept_restore(
    backend: Backend, tmp_path: Path, ws: Workspace, *indexes: int, view: str, leftovers: tuple[str, ...] = ()
) -> None:
    repo = fresh(backend, tmp_path, view)
    assert sorted(r.mark.id for r in repo.marks()) == sorted(ws.marks[i].id for i in indexes)
    for i in indexes:
        assert restored(repo, ws.marks[i]) == ws.contents(ws.marks[i]), f"mark {i} does not restore exactly"
    checked = verify(repo)
    assert checked.ok and checked.leftovers == [pack_name(p) for p in leftovers], [
        p.describe() for p in checked.problems
    ]


@pytest.mark.parametrize("kind", BACKENDS)
def test_prune_with_no_grace_frees_the_dropped_marks_data_and_keeps_the_rest_exact(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    where = make_backend(kind, tmp_path, request)
    repo = new_repo(where.backend, tmp_path)
    ws = _history(tmp_path, repo)
    a = _key(ws, 1, b"x.bin")
    m1_pack = _pack_of(repo, a)
    before = listing(where.backend)

    got = prune(fresh(where.backend, tmp_path, "p1"), KEEP_TWO, grace_s=0)
    assert sorted(got.marks_dropped) == sorted([ws.marks[0].id, ws.marks[1].id]) and got.marks_kept == 2
    assert got.packs_doomed == [m1_pack] and got.packs_deleted == [m1_pack] and not got.packs_rescued
    assert got.bytes_freed == before[pack_name(m1_pack)] > 30000
    after = listing(where.backend)
    assert pack_name(m1_pack) not in after and not [n for n in after if n.startswith(("doomed/", "locks/"))]
    assert not fresh(where.backend, tmp_path, "look").has(a)
    _assert_kept_restore(where.backend, tmp_path, ws, 2, 3, view="r1")

    seen = Recording(where.backend)
    again = prune(fresh(seen, tmp_path, "p2"), KEEP_TWO, grace_s=0)
    assert not (again.marks_dropped or again.packs_doomed or again.packs_deleted or again.leftovers)
    assert not [c for c in seen.calls if c.op in ("put", "delete") and not c.name.startswith("locks/")]
    _assert_kept_restore(where.backend, tmp_path, ws, 2, 3, view="r2")


def test_a_doomed_pack_waits_out_the_grace_and_pushers_treat_it_as_absent(
    tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    where = make_backend("file", tmp_path, request)
    repo = new_repo(where.backend, tmp_path)
    ws = _history(tmp_path, repo)
    a = _key(ws, 1, b"x.bin")
    m1_pack = _pack_of(repo, a)

    got = prune(fresh(where.backend, tmp_path, "p1"), KEEP_TWO, grace_s=3600)
    assert got.packs_doomed == [m1_pack] and got.packs_waiting == 1 and not got.packs_deleted
    assert pack_name(m1_pack) in listing(where.backend)
    assert not fresh(where.backend, tmp_path, "look").has(a)  # doomed: a pusher sends A again

    later = prune(fresh(where.backend, tmp_path, "p2"), KEEP_TWO, grace_s=0)
    assert later.packs_deleted == [m1_pack] and not later.packs_doomed
    _assert_kept_restore(where.backend, tmp_path, ws, 2, 3, view="r")


def test_a_dry_run_changes_nothing_and_says_what_a_run_would_do(
    tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    where = make_backend("file", tmp_path, request)
    repo = new_repo(where.backend, tmp_path)
    ws = _history(tmp_path, repo)
    m1_pack = _pack_of(repo, _key(ws, 1, b"x.bin"))
    before = listing(where.backend)
    seen = Recording(where.backend)
    got = prune(fresh(seen, tmp_path, "p"), KEEP_TWO, grace_s=0, dry_run=True)
    assert got.dry_run and sorted(got.marks_dropped) == sorted([ws.marks[0].id, ws.marks[1].id])
    assert got.packs_deleted == [m1_pack]
    assert listing(where.backend) == before
    assert not [c for c in seen.calls if c.op in ("put", "delete")]


def test_a_second_prune_is_refused_while_one_holds_the_lock(
    tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    where = make_backend("s3", tmp_path, request)
    repo = new_repo(where.backend, tmp_path)
    ws = _history(tmp_path, repo)
    inside, go_on = threading.Event(), threading.Event()
    first: list[object] = []

    def hold(done: int, total: int) -> None:  # called as the first prune deletes its packs
        inside.set()
        assert go_on.wait(60)

    def run_first() -> None:
        first.append(prune(fresh(where.backend, tmp_path, "p1"), KEEP_TWO, 0, progress=hold, host="box-one"))

    thread = threading.Thread(target=run_first)
    thread.start()
    try:
        assert inside.wait(60), "the first prune never reached its deletions"
        records = listing(where.backend)
        held_by = f"locked: prune by pid {os.getpid()} on box-one since "
        with pytest.raises(RemoteLocked, match=held_by) as err:
            prune(fresh(where.backend, tmp_path, "p2"), PrunePolicy(keep_last=0), 0)
        assert err.value.details["host"] == "box-one"
        assert listing(where.backend) == records  # refused before anything was written or deleted
    finally:
        go_on.set()
        thread.join(60)
    assert len(first) == 1
    _assert_kept_restore(where.backend, tmp_path, ws, 2, 3, view="r")


def test_a_stale_lock_is_taken_over_and_said_so(tmp_path: Path, request: pytest.FixtureRequest) -> None:
    where = make_backend("file", tmp_path, request)
    repo = new_repo(where.backend, tmp_path)
    _history(tmp_path, repo)
    _put_lock(where.backend, repo, "dead-box", 4242, time.time_ns() - int((locks.STALE_S + 60) * 1e9))
    got = prune(fresh(where.backend, tmp_path, "p"), KEEP_TWO, grace_s=0)
    assert len(got.took_over) == 1 and "pid 4242 on dead-box" in got.took_over[0]
    assert not [n for n in listing(where.backend) if n.startswith("locks/")]


def _put_lock(backend: Backend, repo: Repository, host: str, pid: int, at: int) -> None:
    """A lock file as another prune writes it (docs/remote.md, "Repository format")."""
    doc = fields.dump_json({"host": host, "pid": pid, "time": at, "op": "prune"})
    backend.put("locks/" + os.urandom(16).hex(), crypto.seal(repo.master, doc, b"lock"))


@pytest.mark.parametrize("kind", BACKENDS)
def test_a_push_between_the_two_phases_never_counts_on_a_doomed_pack(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """Phase 1 dooms m1's pack (A). A day later (the list is aged by hand) a pusher whose view
    holds the list pushes m4, where x.bin is A again: it must send A anew, not point at the
    doomed pack, because phase 2 runs while m4's packs are landing, before its record exists,
    and deletes that pack. Afterwards the kept marks and m4 all restore exactly."""
    where = make_backend(kind, tmp_path, request)
    repo = new_repo(where.backend, tmp_path)
    ws = _history(tmp_path, repo)
    m1_a = _key(ws, 1, b"x.bin")
    m1_pack = _pack_of(repo, m1_a)
    pruner = fresh(where.backend, tmp_path, "pruner")
    assert prune(pruner, KEEP_TWO, grace_s=3600).packs_doomed == [m1_pack]
    (listed,) = [x.name for x in where.backend.list("doomed/")]
    where.backend.delete(listed)
    aged = packs.encode_doomed(
        repo.master, packs.Doomed(frozenset([m1_pack]), time.time_ns() - 2 * 3600 * 10**9)
    )
    where.backend.put(packs.doomed_name(aged), aged)

    pusher = fresh(where.backend, tmp_path, "pusher")
    assert not pusher.has(m1_a)
    m4 = ws.mark("m4", {"x.bin": ws.store.get(m1_a), "z.bin": os.urandom(20000)})  # x.bin is A again
    assert _key(ws, 4, b"x.bin") == m1_a
    settled: list[PruneResult] = []

    def phase_two(done: int, total: int) -> None:  # a pack of m4 landed; its record is not there
        if not settled:
            settled.append(
                prune(fresh(where.backend, tmp_path, "phase2"), PrunePolicy(keep_last=5), grace_s=3600)
            )

    push(ws.store, pusher, [(m4, os.fsencode(ws.root))], HOST, phase_two)
    (result,) = settled
    assert result.packs_deleted == [m1_pack]
    assert pack_name(m1_pack) not in listing(where.backend)
    _assert_kept_restore(where.backend, tmp_path, ws, 2, 3, 4, view="r")


def test_packs_in_no_index_go_once_older_than_the_grace(
    tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    where = make_backend("file", tmp_path, request)
    repo = new_repo(where.backend, tmp_path)
    ws = _history(tmp_path, repo)
    dead = repo.write_pack(b"a dead push's pack" * 10)
    young = repo.write_pack(b"a live push's pack, not indexed yet" * 10)
    two_hours_ago = time.time() - 7200
    os.utime(where.folder / pack_name(dead), (two_hours_ago, two_hours_ago))
    got = prune(fresh(where.backend, tmp_path, "p"), PrunePolicy(keep_last=10), grace_s=3600)
    assert got.leftovers == [dead] and not got.marks_dropped
    names = listing(where.backend)
    assert pack_name(dead) not in names and pack_name(young) in names
    _assert_kept_restore(where.backend, tmp_path, ws, 0, 1, 2, 3, view="r", leftovers=(young,))


class _CutAfterPackDeleted(Recording):
    """The prune is killed right after it deleted its first pack: the next write or delete fails."""

    def __init__(self, inner: Backend) -> None:
        super().__init__(inner)
        self.cut = False

    def put(self, name: str, data: bytes) -> None:
        self._check(name)
        super().put(name, data)

    def delete(self, name: str) -> None:
        self._check(name)
        super().delete(name)
        self.cut = self.cut or name.startswith("data/")

    def _check(self, name: str) -> None:
        if self.cut:
            raise RemoteError(f"cut before {name}")


def test_a_prune_cut_short_leaves_a_sound_repository_the_next_one_finishes(
    tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """The superseding index lands before any pack goes: a prune killed after deleting a pack
    leaves every index a reader trusts naming packs that are there."""
    where = make_backend("file", tmp_path, request)
    repo = new_repo(where.backend, tmp_path)
    ws = _history(tmp_path, repo)
    m1_pack = _pack_of(repo, _key(ws, 1, b"x.bin"))
    with pytest.raises(RemoteError, match="cut before"):
        prune(fresh(_CutAfterPackDeleted(where.backend), tmp_path, "p1"), KEEP_TWO, grace_s=0)
    assert pack_name(m1_pack) not in listing(where.backend)
    _assert_kept_restore(where.backend, tmp_path, ws, 2, 3, view="r1")
    assert [n for n in listing(where.backend) if n.startswith("doomed/")]  # the cut left its list
    with pytest.raises(RemoteLocked, match="is locked"):  # and its lock, live for an hour
        prune(fresh(where.backend, tmp_path, "p2"), KEEP_TWO, grace_s=0)
    (dead,) = locks.read_locks(where.backend, repo.master)
    where.backend.delete(dead.name)
    _put_lock(where.backend, repo, dead.host, dead.pid, time.time_ns() - int((locks.STALE_S + 1) * 1e9))
    got = prune(fresh(where.backend, tmp_path, "p3"), KEEP_TWO, grace_s=0)
    assert len(got.took_over) == 1 and got.indexes_deleted and not got.packs_deleted
    assert not [n for n in listing(where.backend) if n.startswith(("doomed/", "locks/"))]
    _assert_kept_restore(where.backend, tmp_path, ws, 2, 3, view="r2")


def test_a_mark_that_lands_before_phase_two_keeps_the_doomed_pack_it_needs(
    tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """A pusher whose view predates the doomed list (it has not listed the repository since)
    counts on the doomed pack for A, and its mark lands before phase 2: phase 2 settles the
    list against the marks listed then, so it keeps that pack (and drops the list)."""
    where = make_backend("file", tmp_path, request)
    repo = new_repo(where.backend, tmp_path)
    ws = _history(tmp_path, repo)
    m1_a = _key(ws, 1, b"x.bin")
    m1_pack = _pack_of(repo, m1_a)
    stale = fresh(where.backend, tmp_path, "stale-pusher")  # its view: before phase 1
    assert prune(fresh(where.backend, tmp_path, "p1"), KEEP_TWO, grace_s=3600).packs_doomed == [m1_pack]
    m4 = ws.mark("m4", {"x.bin": ws.store.get(m1_a)})
    push(ws.store, stale, [(m4, os.fsencode(ws.root))], HOST)
    assert stale.has(m1_a)  # it never looked again: it counted on the doomed pack
    got = prune(fresh(where.backend, tmp_path, "p2"), PrunePolicy(keep_last=5), grace_s=0)
    assert got.packs_rescued == [m1_pack] and not got.packs_deleted
    assert not [n for n in listing(where.backend) if n.startswith("doomed/")]
    _assert_kept_restore(where.backend, tmp_path, ws, 2, 3, 4, view="r")


class _PushWhenDoomed(Recording):
    """Runs ``then`` once, right after the prune's phase 1 wrote its doomed list."""

    def __init__(self, inner: Backend, then: Callable[[], None]) -> None:
        super().__init__(inner)
        self.then: Callable[[], None] | None = then

    def put(self, name: str, data: bytes) -> None:
        super().put(name, data)
        if name.startswith("doomed/") and self.then is not None:
            then, self.then = self.then, None
            then()


def test_phase_two_judges_by_the_marks_listed_after_the_list(
    tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """With no grace, phase 2 follows phase 1 in the same run. A pusher whose view predates the
    list writes m4, counting on the doomed pack, between the two: phase 2 lists the marks again
    and keeps that pack."""
    where = make_backend("file", tmp_path, request)
    repo = new_repo(where.backend, tmp_path)
    ws = _history(tmp_path, repo)
    m1_a = _key(ws, 1, b"x.bin")
    m1_pack = _pack_of(repo, m1_a)
    stale = fresh(where.backend, tmp_path, "stale-pusher")
    m4 = ws.mark("m4", {"x.bin": ws.store.get(m1_a)})

    def push_m4() -> None:
        push(ws.store, stale, [(m4, os.fsencode(ws.root))], HOST)

    got = prune(
        fresh(_PushWhenDoomed(where.backend, push_m4), tmp_path, "p"), PrunePolicy(keep_last=2), grace_s=0
    )
    assert got.packs_doomed == [m1_pack] and got.packs_rescued == [m1_pack] and not got.packs_deleted
    _assert_kept_restore(where.backend, tmp_path, ws, 2, 3, 4, view="r")


def test_a_long_prune_renews_its_lock(
    tmp_path: Path, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With locks going stale after 3 s, a prune that deletes a pack a second for four seconds
    still holds a live lock at its end: a second prune is refused, not let in as a taker-over."""
    monkeypatch.setattr(locks, "STALE_S", 3.0)
    where = make_backend("file", tmp_path, request)
    repo = new_repo(where.backend, tmp_path)
    ws = Workspace(tmp_path)
    ws.push(repo, ws.baseline({"a.txt": b"a"}))
    for i in range(5):
        ws.push(repo, ws.mark(f"m{i}", {"x.bin": os.urandom(5000)}))
    refused: list[BaseException] = []

    def slow(done: int, total: int) -> None:  # one pack a second
        threading.Event().wait(1.0)
        if done == 4:
            try:
                prune(fresh(where.backend, tmp_path, "second"), PrunePolicy(keep_last=100), grace_s=3600)
            except RemoteLocked as exc:
                refused.append(exc)

    got = prune(fresh(where.backend, tmp_path, "first"), PrunePolicy(keep_last=1), grace_s=0, progress=slow)
    assert len(got.packs_deleted) == 4 and len(refused) == 1
    assert not [n for n in listing(where.backend) if n.startswith("locks/")]


def test_a_kept_mark_that_cannot_be_read_stops_the_prune_before_it_deletes_anything(
    tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """What a damaged tree needs is unknown, so nothing may be judged unneeded: the prune stops
    with the damage named, its lock released, and not one record or pack deleted."""
    where = make_backend("file", tmp_path, request)
    repo = new_repo(where.backend, tmp_path)
    ws = _history(tmp_path, repo)
    pack, offset, _ = repo.locate(ws.marks[3].tree)
    flip_byte(where.folder / pack_name(pack), offset + 20)
    before = listing(where.backend)
    with pytest.raises(RemoteCorrupt, match=ws.marks[3].tree):
        prune(fresh(where.backend, tmp_path, "p"), KEEP_TWO, grace_s=0)
    assert listing(where.backend) == before


def _record(n: int, host: str, workspace: bytes, age_h: float, now: int) -> MarkRecord:
    mark = RemoteMark(f"{n}m", n, f"l{n}", None, None, None, now - int(age_h * 3600e9), None, "0" * 32 + "-0",
                      "user", {}, None, None, None)  # fmt: skip
    return MarkRecord(f"marks/{n:064x}", host, "a" * 32, workspace, mark, 0, now, 0)


def test_the_policy_keeps_the_newest_and_the_young_of_each_host_and_workspace() -> None:
    now = time.time_ns()
    a = [_record(i, "h1", b"/w", age_h=10 - i, now=now) for i in range(5)]  # ages 10, 9, 8, 7, 6 h
    b = [_record(10 + i, "h1", b"/other", age_h=20 + i, now=now) for i in range(3)]  # 20, 21, 22 h
    c = [_record(20 + i, "h2", b"/w", age_h=0.5 + i, now=now) for i in range(3)]  # 0.5, 1.5, 2.5 h
    everything = [*a, *b, *c]
    by_last = dropped(everything, PrunePolicy(keep_last=2), now)
    assert {r.mark.id for r in by_last} == {r.mark.id for r in [*a[:3], b[2], c[2]]}
    by_age = dropped(everything, PrunePolicy(keep_within_s=7.5 * 3600), now)
    assert {r.mark.id for r in by_age} == {r.mark.id for r in [*a[:3], *b]}
    both = dropped(everything, PrunePolicy(keep_last=1, keep_within_s=8.5 * 3600), now)
    assert {r.mark.id for r in both} == {r.mark.id for r in [*a[:2], *b[1:]]}
    with pytest.raises(UsageError, match="keep_last or keep_within"):
        dropped(everything, PrunePolicy(), now)


class _RivalLock(Recording):
    """Another prune writes its lock right after ours lands (both listed ``locks/`` empty)."""

    def __init__(self, inner: Backend, repo: Repository, offset_ns: int) -> None:
        super().__init__(inner)
        self.repo, self.offset_ns, self.done = repo, offset_ns, False

    def put(self, name: str, data: bytes) -> None:
        super().put(name, data)
        if name.startswith("locks/") and not self.done:
            self.done = True
            _put_lock(self.inner, self.repo, "rival-box", 777, time.time_ns() + self.offset_ns)


@pytest.mark.parametrize("rival_first", [True, False])
def test_two_prunes_taking_the_lock_at_once_agree_on_one(
    rival_first: bool, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """Both wrote a lock before either listed again: whichever time is older, we cannot know
    the rival did not go on, so we withdraw ours and try again, where its lock refuses us;
    nothing of ours is left."""
    where = make_backend("file", tmp_path, request)
    repo = new_repo(where.backend, tmp_path)
    seen = _RivalLock(where.backend, repo, -(10**9) if rival_first else 10**9)
    with pytest.raises(RemoteLocked, match="rival-box"):
        locks.acquire(seen, repo.master, "us")
    assert [x.host for x in locks.read_locks(where.backend, repo.master)] == ["rival-box"]


def test_a_push_walked_against_a_mark_that_counted_on_a_doomed_pack_sends_its_objects_again(
    tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """m4 lands counting on m1's doomed pack (its pusher's view predates the list: allowed, the
    case phase 2 rescues). A later pusher whose view holds the list pushes m5 of the same
    workspace and walks it against m4: x.bin (A, in the doomed pack) is unchanged there, so the
    walk skips it. Then, while m5's packs land and before its record exists, m4 is dropped (as a
    --keep-within policy drops a mark created long before it was pushed) and phase 2 settles the
    aged list: nothing listed needs A, the pack goes. m5's record must not count on it."""
    where = make_backend("file", tmp_path, request)
    repo = new_repo(where.backend, tmp_path)
    ws = _history(tmp_path, repo)
    m1_a = _key(ws, 1, b"x.bin")
    m1_pack = _pack_of(repo, m1_a)
    stale = fresh(where.backend, tmp_path, "stale-pusher")
    assert prune(fresh(where.backend, tmp_path, "p1"), KEEP_TWO, grace_s=3600).packs_doomed == [m1_pack]
    m4 = ws.mark("m4", {"x.bin": ws.store.get(m1_a)})
    push(ws.store, stale, [(m4, os.fsencode(ws.root))], HOST)
    (listed,) = [x.name for x in where.backend.list("doomed/")]
    where.backend.delete(listed)
    aged = packs.encode_doomed(
        repo.master, packs.Doomed(frozenset([m1_pack]), time.time_ns() - 2 * 3600 * 10**9)
    )
    where.backend.put(packs.doomed_name(aged), aged)

    pusher = fresh(where.backend, tmp_path, "pusher")
    assert not pusher.has(m1_a)
    m5 = ws.mark("m5", {"w.bin": os.urandom(20000)})  # x.bin still A
    assert _key(ws, 5, b"x.bin") == m1_a
    settled: list[PruneResult] = []

    def drop_m4_then_phase_two(done: int, total: int) -> None:
        if not settled:
            where.backend.delete(record_of(pusher, m4).name)
            settled.append(
                prune(fresh(where.backend, tmp_path, "phase2"), PrunePolicy(keep_last=5), grace_s=3600)
            )

    push(ws.store, pusher, [(m5, os.fsencode(ws.root))], HOST, drop_m4_then_phase_two)
    assert settled and settled[0].packs_deleted == [m1_pack]
    _assert_kept_restore(where.backend, tmp_path, ws, 2, 3, 5, view="r")


class _RivalTakesItWhole(Recording):
    """Our first listing of ``locks/`` (empty) is answered, then a rival prune takes the lock
    from start to end (list, write, list: it sees only its own and goes on) before we write
    ours. Our lock's time is the older: we started first."""

    def __init__(self, inner: Backend, repo: Repository) -> None:
        super().__init__(inner)
        self.repo = repo
        self.rival: locks.Held | None = None

    def list(self, prefix: str) -> Iterator[Listed]:
        found = list(super().list(prefix))
        if prefix == locks.PREFIX and self.rival is None:
            self.rival = locks.acquire(self.inner, self.repo.master, "rival-box")
        return iter(found)


def test_a_prune_that_wrote_its_lock_after_another_took_it_whole_never_holds_it_too(
    tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """The rival saw only its own lock and holds it: ours, older by its time but written
    after, must not win as well (two prunes judging the same packs at once)."""
    where = make_backend("file", tmp_path, request)
    repo = new_repo(where.backend, tmp_path)
    seen = _RivalTakesItWhole(where.backend, repo)
    with pytest.raises(RemoteLocked, match="rival-box"):
        locks.acquire(seen, repo.master, "us")
    assert seen.rival is not None
    assert [x.host for x in locks.read_locks(where.backend, repo.master)] == ["rival-box"]


def test_a_prune_whose_lock_was_taken_over_while_it_stalled_stops_at_its_next_renewal(
    tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """Stalled past the stale age (the machine suspended), its lock deleted by a prune that took
    it over: renewing must not write a new lock and go on beside the other."""
    where = make_backend("file", tmp_path, request)
    repo = new_repo(where.backend, tmp_path)
    held = locks.acquire(where.backend, repo.master, "sleeper")
    held.lock = held.lock._replace(time=held.lock.time - int((locks.STALE_S + 60) * 1e9))
    where.backend.delete(held.lock.name)  # taken over
    with pytest.raises(RemoteLocked, match="taken over as stale meanwhile"):
        held.renew()
    assert locks.read_locks(where.backend, repo.master) == []


def test_the_parts_of_a_wide_directory_are_kept_by_prune_and_walked_by_a_sampled_verify(
    tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """A directory of 1,500 names is stored in parts (store format 10), pushed in packs so
    small that most hold a part and nothing else. Prune, keeping the last mark only, keeps every
    part that mark's directory is made of (they are needed as its nodes are, though no entry
    names them); a verify that reads a sample of the packs fetches the parts it walks."""
    where = make_backend("file", tmp_path, request)
    repo = new_repo(where.backend, tmp_path)
    ws = Workspace(tmp_path)
    first = ws.baseline({f"icons/Icon{i:04d}.js": b"export default %d;\n" % i for i in range(1500)})
    second = ws.mark("m2", {"icons/Icon0777.js": b"export default 'changed';\n"})
    for mark in (first, second):
        push(ws.store, repo, [(mark, os.fsencode(ws.root))], HOST, pack_target=2048)
    got = prune(fresh(where.backend, tmp_path, "p1"), PrunePolicy(keep_last=1), grace_s=0)
    assert got.marks_kept == 1 and got.packs_deleted  # the first mark's own packs went
    _assert_kept_restore(where.backend, tmp_path, ws, 1, view="r1")
    sampled = verify(fresh(where.backend, tmp_path, "v"), sample=0.01, seed=1)
    assert sampled.ok and sampled.packs_read == 1 and sampled.nodes == 3, [
        p.describe() for p in sampled.problems
    ]


def test_a_part_equal_to_a_sibling_directory_is_verified_with_both(
    tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """A directory ``a`` holding exactly the first part of a wide directory ``b`` (the same
    names, the same contents) is one object with that part: verify decodes both at one level,
    and the node ``a`` must not take the part's bytes from the fan ``b`` (found by review)."""
    where = make_backend("file", tmp_path, request)
    repo = new_repo(where.backend, tmp_path)
    ws = Workspace(tmp_path)
    names = sorted(f"Icon{i:04d}.js".encode() for i in range(1500))
    files = {f"b/{n.decode()}": b"x %s\n" % n for n in names}
    files |= {f"a/{n.decode()}": b"x %s\n" % n for n in names[: fan.split(names)[0]]}
    mark = ws.baseline(files)
    push(ws.store, repo, [(mark, os.fsencode(ws.root))], HOST)
    a = trees.lookup(ws.store.load_node, mark.tree, b"a")
    b = ws.store.load_node(trees.lookup(ws.store.load_node, mark.tree, b"b").key)  # type: ignore[union-attr]
    assert a is not None and isinstance(b, fan.FanNode) and a.key == b.parts[0]
    for sample in (None, 0.01):
        got = verify(fresh(where.backend, tmp_path, f"v{sample}"), sample=sample, seed=1)
        assert got.ok, [p.describe() for p in got.problems]
        if sample is None:  # every pack read whole: no node (a fan neither) fetched again by range
            packed = sum(size for name, size in listing(where.backend).items() if name.startswith("data/"))
            assert got.bytes_read == packed, (got.bytes_read, packed)
    _assert_kept_restore(where.backend, tmp_path, ws, 0, view="r")


def test_a_restore_reads_a_wide_directory_s_parts_with_the_nodes_not_one_get_each(
    tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """A push packs a fan's parts beside it, ahead of the contents; a restore reads the level's
    nodes as a few spans, and takes the parts from those spans too (a GET per part was 80
    sequential requests for a directory of 21,231 names: found by review)."""
    where = make_backend("file", tmp_path, request)
    repo = new_repo(where.backend, tmp_path)
    ws = Workspace(tmp_path)
    mark = ws.baseline({f"icons/Icon{i:04d}.js": b"export default %d;\n" % i for i in range(6000)})
    push(ws.store, repo, [(mark, os.fsencode(ws.root))], HOST)
    icons = ws.store.load_node(trees.lookup(ws.store.load_node, mark.tree, b"icons").key)  # type: ignore[union-attr]
    assert isinstance(icons, fan.FanNode) and len(icons.parts) > 10
    seen = Recording(where.backend)
    reader = fresh(seen, tmp_path, "r")
    before = seen.requests
    load, _ = fetch.readers(reader, record_of(reader, mark))
    assert set(load(record_of(reader, mark).mark.tree)) == {b"icons", b"empty", b"link"}
    assert seen.requests - before <= 3, [c for c in seen.calls][-12:]
    assert restored(reader, mark) == ws.contents(mark)


def test_a_restore_missing_a_part_names_the_directory(tmp_path: Path, request: pytest.FixtureRequest) -> None:
    """A wide directory whose part is in no index (a hand-made loss): the restore fails naming
    the directory of the mark, as for a damaged node (found by review)."""
    where = make_backend("file", tmp_path, request)
    repo = new_repo(where.backend, tmp_path)
    ws = Workspace(tmp_path)
    mark = ws.baseline({f"icons/Icon{i:04d}.js": b"export default %d;\n" % i for i in range(3000)})
    icons = ws.store.load_node(trees.lookup(ws.store.load_node, mark.tree, b"icons").key)  # type: ignore[union-attr]
    assert isinstance(icons, fan.FanNode)
    push(ws.store, repo, [(mark, os.fsencode(ws.root))], HOST)
    reader = fresh(where.backend, tmp_path, "r")
    real = reader.locate

    def losing(key: str) -> Any:
        if key == icons.parts[3]:
            raise RemoteMissing(f"object {key} is in no index")
        return real(key)

    reader.locate = losing  # type: ignore[method-assign]
    with pytest.raises(RemoteMissing, match="it is the directory icons of the mark"):
        restored(reader, mark)
