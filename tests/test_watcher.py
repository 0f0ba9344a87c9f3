"""Real inotify on tmp_path: no mocks (``max_watches`` is the only seam)."""

from __future__ import annotations

import os
import shutil
import subprocess
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from e2e_helpers import unavailable, wait_for

from snapd.capture.cookies import remove_stale_cookies
from snapd.capture.events import WatchEvent
from snapd.capture.reader import walk
from snapd.capture.watcher import Watcher
from snapd.errors import WorkspaceRefused
from snapd.paths import is_cookie_name

pytestmark = pytest.mark.timeout(60)

IGNORED_NAMES = {b".git", b"node_modules"}


class Recorder:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._events: list[WatchEvent] = []

    def __call__(self, batch: list[WatchEvent]) -> None:
        with self._lock:
            self._events.extend(batch)

    @property
    def events(self) -> list[WatchEvent]:
        with self._lock:
            return list(self._events)

    def clear(self) -> None:
        with self._lock:
            self._events.clear()

    def has(self, kind: str, path: bytes, dest: bytes | None = None) -> bool:
        return any(
            e.kind == kind and e.path == path and (dest is None or e.dest == dest) for e in self.events
        )

    def paths(self) -> set[bytes]:
        out = set()
        for e in self.events:
            out.add(e.path)
            if e.dest is not None:
                out.add(e.dest)
        return out


def default_should_watch(rel: bytes) -> bool:
    return not any(part in IGNORED_NAMES for part in rel.split(b"/"))


@pytest.fixture
def root(tmp_path: Path) -> Path:
    r = tmp_path / "ws"
    r.mkdir()
    return r


@pytest.fixture
def make_watcher(root: Path) -> Iterator[Callable[..., tuple[Watcher, Recorder]]]:
    started: list[Watcher] = []

    def make(
        should_watch: Callable[[bytes], bool] = default_should_watch,
        *,
        path: Path | None = None,
        on_events: Callable[[list[WatchEvent]], None] | None = None,
        max_watches: int | None = None,
    ) -> tuple[Watcher, Recorder]:
        rec = Recorder()
        w = Watcher(path or root, on_events or rec, should_watch, max_watches=max_watches)
        w.start()
        started.append(w)
        return w, rec

    yield make
    for w in started:
        w.stop()


def test_write_then_barrier_sees_the_write(root: Path, make_watcher) -> None:
    w, rec = make_watcher()
    for i in range(50):
        (root / f"f{i}").write_bytes(b"x")
        assert w.barrier(10)
        # No wait: the barrier guarantees the event was already delivered.
        assert rec.has("created", f"f{i}".encode())
        assert rec.has("modified", f"f{i}".encode())


def test_atomic_save_rename_over(root: Path, make_watcher) -> None:
    (root / "doc.txt").write_bytes(b"old")
    w, rec = make_watcher()
    tmp = root / ".doc.txt.tmp123"
    tmp.write_bytes(b"new")
    os.replace(tmp, root / "doc.txt")
    assert w.barrier(10)
    assert rec.has("moved", b".doc.txt.tmp123", b"doc.txt")


def test_sed_in_place(root: Path, make_watcher) -> None:
    (root / "conf").write_bytes(b"a=1\n")
    w, rec = make_watcher()
    subprocess.run(["sed", "-i", "s/1/2/", str(root / "conf")], check=True)
    assert w.barrier(10)
    assert any(e.kind == "moved" and e.dest == b"conf" for e in rec.events)
    assert (root / "conf").read_bytes() == b"a=2\n"


def test_chmod_is_a_modification(root: Path, make_watcher) -> None:
    (root / "run.sh").write_bytes(b"#!/bin/sh\n")
    (root / "d").mkdir()
    w, rec = make_watcher()
    os.chmod(root / "run.sh", 0o755)
    os.chmod(root / "d", 0o700)
    os.chmod(root, 0o750)
    assert w.barrier(10)
    assert rec.has("modified", b"run.sh")
    assert any(e.kind == "modified" and e.path == b"d" and e.is_dir for e in rec.events)
    assert any(e.kind == "modified" and e.path == b"" and e.is_dir for e in rec.events)


def test_mkdir_p_deep_then_files_races_the_watch(root: Path, make_watcher) -> None:
    w, rec = make_watcher()
    deep = root / "a" / "b" / "c" / "d"
    deep.mkdir(parents=True)
    (deep / "f").write_bytes(b"1")
    (root / "a" / "b" / "g").write_bytes(b"2")
    assert w.barrier(10)
    for path in (b"a", b"a/b", b"a/b/c", b"a/b/c/d"):
        assert any(e.kind == "created" and e.path == path and e.is_dir for e in rec.events)
    assert rec.has("created", b"a/b/c/d/f") or rec.has("modified", b"a/b/c/d/f")
    assert rec.has("created", b"a/b/g") or rec.has("modified", b"a/b/g")
    assert w.watch_count == 5
    # the new directories are really watched
    rec.clear()
    (deep / "h").write_bytes(b"3")
    assert w.barrier(10)
    assert rec.has("created", b"a/b/c/d/h")


def test_rm_r_reports_deletions_and_frees_watches(root: Path, make_watcher) -> None:
    (root / "t" / "u").mkdir(parents=True)
    (root / "t" / "u" / "f").write_bytes(b"1")
    (root / "t" / "g").write_bytes(b"1")
    w, rec = make_watcher()
    assert w.watch_count == 3
    shutil.rmtree(root / "t")
    assert w.barrier(10)
    assert rec.has("deleted", b"t/u/f") and rec.has("deleted", b"t/g")
    assert any(e.kind == "deleted" and e.path == b"t" and e.is_dir for e in rec.events)
    assert w.watch_count == 1


def test_reading_produces_no_events(root: Path, make_watcher) -> None:
    (root / "d").mkdir()
    for name in ("a", "b", "d/c"):
        (root / name).write_bytes(b"data" * 100)
    w, rec = make_watcher()
    assert w.barrier(10)
    rec.clear()
    for _ in range(3):
        for name in ("a", "b", "d/c"):
            (root / name).read_bytes()
            os.stat(root / name)
        os.listdir(root / "d")
        with open(root / "a", "rb") as fh:
            fh.read(1)
    assert w.barrier(10)
    assert rec.events == []


def test_ignored_trees_cost_no_watches_and_no_events(root: Path, make_watcher) -> None:
    for d in ("src/lib", "node_modules/pkg/dist", ".git/objects/ab", "sub/node_modules/x"):
        (root / d).mkdir(parents=True)
    w, rec = make_watcher()
    # root, src, src/lib, sub
    assert w.watch_count == 4
    (root / "node_modules" / "pkg" / "dist" / "i.js").write_bytes(b"x")
    (root / ".git" / "objects" / "ab" / "cd").write_bytes(b"x")
    (root / ".git" / "index").write_bytes(b"x")
    (root / "sub" / "node_modules" / "x" / "y.js").write_bytes(b"x")
    assert w.barrier(10)
    assert rec.events == []
    # a node_modules created later: reported as a directory, but never watched
    (root / "src" / "node_modules" / "deep").mkdir(parents=True)
    (root / "src" / "node_modules" / "deep" / "z.js").write_bytes(b"x")
    assert w.barrier(10)
    assert rec.paths() == {b"src/node_modules"}
    assert w.watch_count == 4


def test_move_out_of_tree_is_a_prompt_deletion(root: Path, tmp_path: Path, make_watcher) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (root / "f").write_bytes(b"1")
    (root / "d" / "e").mkdir(parents=True)
    w, rec = make_watcher()
    assert w.watch_count == 3
    os.rename(root / "f", outside / "f")
    assert w.barrier(10)
    # Ordering, not time: the deletion was delivered before the barrier returned, so the
    # barrier did not wait for watchdog-style move pairing.
    assert rec.has("deleted", b"f")
    os.rename(root / "d", outside / "d")
    assert w.barrier(10)
    assert any(e.kind == "deleted" and e.path == b"d" and e.is_dir for e in rec.events)
    assert w.watch_count == 1
    # the moved-out directory no longer reports under its old name
    rec.clear()
    (outside / "d" / "e" / "late").write_bytes(b"x")
    assert w.barrier(10)
    assert rec.events == []


def test_move_out_without_barrier_resolves_on_its_own(root: Path, tmp_path: Path, make_watcher) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (root / "f").write_bytes(b"1")
    w, rec = make_watcher()
    os.rename(root / "f", outside / "f")
    wait_for(lambda: rec.has("deleted", b"f"))


def test_move_into_tree_and_within(root: Path, tmp_path: Path, make_watcher) -> None:
    outside = tmp_path / "outside"
    (outside / "p" / "q").mkdir(parents=True)
    (outside / "p" / "q" / "f").write_bytes(b"1")
    (root / "keep").mkdir()
    w, rec = make_watcher()
    os.rename(outside / "p", root / "p")
    assert w.barrier(10)
    assert any(e.kind == "created" and e.path == b"p" and e.is_dir for e in rec.events)
    assert rec.has("created", b"p/q/f")
    assert w.watch_count == 4
    os.rename(root / "p", root / "keep" / "p2")
    assert w.barrier(10)
    assert rec.has("moved", b"p", b"keep/p2")
    rec.clear()
    (root / "keep" / "p2" / "q" / "new").write_bytes(b"x")
    assert w.barrier(10)
    assert rec.has("created", b"keep/p2/q/new")
    assert w.watch_count == 4


def test_move_into_an_ignored_directory_drops_watches(root: Path, make_watcher) -> None:
    (root / "node_modules").mkdir()
    (root / "a" / "b").mkdir(parents=True)
    w, rec = make_watcher()
    assert w.watch_count == 3
    os.rename(root / "a", root / "node_modules" / "a")
    assert w.barrier(10)
    assert any(e.kind == "deleted" and e.path == b"a" for e in rec.events)
    assert w.watch_count == 1


def test_overflow_is_reported_and_watching_resumes(root: Path, make_watcher) -> None:
    limit = int(Path("/proc/sys/fs/inotify/max_queued_events").read_text())
    if limit > 200_000:
        unavailable(f"fs.inotify.max_queued_events is {limit}: too large to overflow quickly")
    gate = threading.Event()
    entered = threading.Event()
    rec = Recorder()

    def blocking(batch: list[WatchEvent]) -> None:
        rec(batch)
        if not entered.is_set():
            entered.set()
            gate.wait(30)

    w, _ = make_watcher(on_events=blocking)
    (root / "trigger").write_bytes(b"x")
    wait_for(entered.is_set)
    # The reader is stuck in the callback: the kernel queue fills up. Every new file queues
    # at least IN_CREATE and IN_CLOSE_WRITE.
    for i in range(limit // 2 + 500):
        fd = os.open(root / f"spam{i}", os.O_CREAT | os.O_WRONLY, 0o644)
        os.close(fd)
    late = root / "late"
    late.mkdir()  # its IN_CREATE is lost: the queue is already full
    gate.set()
    wait_for(lambda: any(e.kind == "overflow" for e in rec.events))
    assert w.overflowed >= 1
    # watches were re-synced before the overflow was delivered: late/ is watched
    assert w.barrier(10)
    assert w.watch_count == 2
    rec.clear()
    (late / "after").write_bytes(b"x")
    assert w.barrier(10)
    assert rec.has("created", b"late/after")


def test_cookies_never_delivered_nor_left(root: Path, make_watcher) -> None:
    w, rec = make_watcher()
    results: list[bool] = []

    def many() -> None:
        for _ in range(20):
            results.append(w.barrier(10))

    threads = [threading.Thread(target=many) for _ in range(8)]
    for t in threads:
        t.start()
    (root / "f").write_bytes(b"x")
    for t in threads:
        t.join()
    assert results == [True] * 160
    assert not any(b".snapd-" in p for p in rec.paths())
    assert [n for n in os.listdir(root) if n.startswith(".snapd-")] == []


def test_remove_stale_cookies_only_touches_cookie_shapes(root: Path) -> None:
    for name in (".snapd-123-4~", ".snapd-1-22~"):
        (root / name).write_bytes(b"")
    for name in (".snapd-x~", ".snapd-1-2", "snapd-1-2~", ".snapd-1-2~.bak"):
        (root / name).write_bytes(b"")
    (root / ".snapd-9-9~d").mkdir()
    assert remove_stale_cookies(root) == 2
    assert sorted(os.listdir(root)) == sorted(
        [".snapd-x~", ".snapd-1-2", "snapd-1-2~", ".snapd-1-2~.bak", ".snapd-9-9~d"]
    )
    assert is_cookie_name(b".snapd-1-2~") and not is_cookie_name(b".snapd-a-2~")


def test_non_utf8_names_round_trip_as_bytes(root: Path, make_watcher) -> None:
    w, rec = make_watcher()
    name = b"caf\xe9-\xff.txt"
    dname = b"d\xfe"
    os.mkdir(os.path.join(os.fsencode(root), dname))
    with open(os.path.join(os.fsencode(root), dname, name), "wb") as fh:
        fh.write(b"x")
    assert w.barrier(10)
    assert any(e.kind == "created" and e.path == dname and e.is_dir for e in rec.events)
    assert rec.has("created", dname + b"/" + name)


def test_max_watches_seam_counts_failures(root: Path, make_watcher) -> None:
    for d in ("a", "b", "c", "d", "e"):
        (root / d).mkdir()
    w, rec = make_watcher(max_watches=3)
    assert w.watch_count == 3
    assert w.watch_failures == 3
    assert len(w.failed_dirs) == 3
    (root / "f").mkdir()
    assert w.barrier(10)
    assert w.watch_failures == 4
    assert rec.has("created", b"f")


def test_predicate_sees_relative_bytes_and_rescan_applies_new_rules(root: Path, make_watcher) -> None:
    (root / "build" / "out").mkdir(parents=True)
    ignored = {b"build"}
    asked: list[bytes] = []

    def should_watch(rel: bytes) -> bool:
        asked.append(rel)
        return rel not in ignored

    w, rec = make_watcher(should_watch)
    assert asked == [b"build"]
    assert w.watch_count == 1
    ignored.clear()
    w.rescan_watches()
    assert w.watch_count == 3
    (root / "build" / "out" / "x").write_bytes(b"1")
    assert w.barrier(10)
    assert rec.has("created", b"build/out/x")


def test_watchers_coexist_and_stop_cleanly(tmp_path: Path, make_watcher) -> None:
    r1, r2 = tmp_path / "one", tmp_path / "two"
    r1.mkdir()
    r2.mkdir()
    w1, rec1 = make_watcher(path=r1)
    w2, rec2 = make_watcher(path=r2)
    (r1 / "a").write_bytes(b"1")
    (r2 / "b").write_bytes(b"1")
    assert w1.barrier(10) and w2.barrier(10)
    assert rec1.paths() == {b"a"} and rec2.paths() == {b"b"}
    w1.stop()
    w1.stop()
    assert not w1.running
    assert w1.barrier(1) is False
    assert w2.barrier(10)


def test_root_deleted_is_reported(root: Path, make_watcher) -> None:
    w, rec = make_watcher()
    os.rmdir(root)
    wait_for(lambda: rec.has("deleted", b""))
    assert w.barrier(0.5) is False


def test_callback_failure_fails_the_barrier_not_the_watcher(root: Path, make_watcher) -> None:
    calls = []

    def flaky(batch: list[WatchEvent]) -> None:
        calls.append(batch)
        if len(calls) == 1:
            raise RuntimeError("boom")

    w, _ = make_watcher(on_events=flaky)
    (root / "a").write_bytes(b"1")
    ok = w.barrier(10)
    assert ok is False, calls
    (root / "b").write_bytes(b"1")
    assert w.barrier(10) is True
    assert w.running


def test_known_directories_are_watched_and_their_list_let_go_once_placed(root: Path) -> None:
    # A restart hands the watcher the directories captured last time (48k at django-100k):
    # once all are watched, the placement no longer keeps their list, which
    # would otherwise stay in the daemon's memory for as long as it runs.
    known = [b""] + [b"d%04d" % i for i in range(600)]  # more than one chunk of placing
    for rel in known[1:]:
        (root / rel.decode()).mkdir()
    rec = Recorder()
    w = Watcher(root, rec, default_should_watch)
    w.start(known)
    try:
        placement = w.placement
        placement.wait_all()
        assert placement.complete and placement.total == len(known)
        assert not placement.dirs, "the placed list is still held"
        placement.wait_all()  # returns at once: nothing left to wait for
        assert w.watch_count == len(known)
        (root / "d0599" / "f").write_bytes(b"x")
        assert w.barrier(timeout=10)
        assert rec.has("modified", b"d0599/f") or rec.has("created", b"d0599/f")
    finally:
        w.stop()


def test_a_watcher_stopped_before_it_starts_never_watches(root: Path) -> None:
    """A workspace stopped while it loads its stat cache stops a watcher not started yet: its
    start must then refuse, or a watcher nobody will stop keeps the tree watched for good."""
    w = Watcher(root, Recorder(), default_should_watch)
    w.stop()
    with pytest.raises(WorkspaceRefused, match="stopped before it began"):
        w.start()
    assert not w.running
    assert not [t for t in threading.enumerate() if t.name == f"snapd-watch:{root}"]


def test_a_walk_watches_nothing_below_a_directory_whose_watch_it_could_not_place(tmp_path: Path) -> None:
    """A new workspace's baseline walk (``start(walked=True)``) reaches ``Q/b``, just moved there
    from ``P/a`` and a symlink left at ``P/a``, before the watcher thread has read the move:
    ``Q/b``'s watch is still named ``P/a`` in the table, so it is not placed (the records lag
    the disk). Nothing below it is watched either: ``Q/b/x``'s watch, still named ``P/a/x``,
    is the same directory through the symlink, and would pass for a bind mount (every mark a
    full scan, until a restart). Once the move is read, the table names the disk."""
    root = tmp_path / "ws"
    (root / "P" / "a" / "x").mkdir(parents=True)
    (root / "Q").mkdir()
    rootb = os.fsencode(root)
    w = Watcher(root, Recorder(), lambda rel: True)
    w.start(walked=True)
    try:
        for _ in walk(rootb, lambda rel, is_dir: False, b"P", listed=w.watch_and_list):
            pass  # P, P/a, P/a/x watched; Q not reached yet
        with w._lock:  # the watcher thread cannot read the move until the walk below is done
            os.rename(root / "P" / "a", root / "Q" / "b")
            os.symlink("../Q/b", root / "P" / "a")
            walked = [rel for rel, _ in walk(rootb, lambda rel, is_dir: False, b"Q", listed=w.watch_and_list)]
        assert walked == [b"Q/b", b"Q/b/x"]
        assert w.barrier(10) and w.barrier(10)
        assert w.aliased == {}
        assert not w.untrusted
        with w._lock:
            assert {w._watches.path_of(wd) for wd in w._watches._wd_path} >= {b"Q/b", b"Q/b/x"}
    finally:
        w.stop()
