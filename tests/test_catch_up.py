"""A restarted workspace's catch-up: the reconcile scan once its known directories are watched.

The scan visits the cached paths in sorted order and looks at any of them only once the watch
of every known directory was attempted (snapd/capture/placement.py argues why that is exact).
These tests restart a real workspace (real store, real inotify) with the watch placement
slowed down, and change the tree at chosen moments of the scan: each change must be in the
first mark. Without the wait for the watches, the scan runs ahead of them and a file changed
right after its ``lstat``, in a directory not watched yet, is lost.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from snapd.capture import readers, scan
from snapd.capture import watcher as watcher_mod
from snapd.capture import watches as watches_mod
from snapd.capture.workspace import Workspace
from snapd.config import CaptureSettings
from snapd.errors import WorkspaceRefused
from snapd.store import trees
from snapd.store.store import Store

pytestmark = pytest.mark.timeout(60)

DIRS = 40  # enough directories that a slowed placement would still be going when the scan starts


def _tree(root: Path) -> None:
    for i in range(DIRS):
        d = root / f"d{i:02}" / "sub"
        d.mkdir(parents=True)
        (d.parent / "f.txt").write_text(f"old {i}\n")
        (d / "g.txt").write_text(f"old sub {i}\n")
    old = time.time() - 3600  # outside the racy window: an unchanged file is not re-read
    for p in [root, *root.rglob("*")]:
        os.utime(p, (old, old))


def _files(store: Store, ws: Workspace, tree: str | None = None) -> dict[bytes, bytes]:
    root = tree or ws.tree
    assert root is not None
    return {p: store.get(e.key) for p, e in trees.walk(store.load_node, root) if e.kind == "file"}


def _watched_then_stopped(tmp_path: Path) -> tuple[Path, Store, int]:
    """A workspace over :func:`_tree` watched once (its baseline stored), then stopped."""
    root = tmp_path / "ws"
    _tree(root)
    store = Store.open(tmp_path / "store")
    first = Workspace(store, store.add_workspace(os.fsencode(root)), root, CaptureSettings())
    first.start()
    first.stop()
    return root, store, first.id


@contextmanager
def _restarted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, on_seen: Callable[[bytes], None]
) -> Iterator[tuple[Store, Workspace]]:
    """A workspace watched, stopped, and started again with its watches placed one at a time,
    slowly, its scan four paths at a time behind them, and ``on_seen(rel)`` called right
    after the scan's ``lstat`` of each path (in the daemon's process: a cache this small is
    judged there, not in reader processes)."""
    root, store, ws_id = _watched_then_stopped(tmp_path)

    real_add = watches_mod.WatchTable.add

    def slow_add(self: watches_mod.WatchTable, rel: bytes, *, root: bool = False) -> int:
        time.sleep(0.005)
        return real_add(self, rel, root=root)

    real_lstat = os.lstat

    def lstat_then(path: bytes, *, dir_fd: int | None = None) -> os.stat_result:
        result = real_lstat(path, dir_fd=dir_fd)
        if dir_fd is not None:  # a name relative to the root: the catch-up's (statcache.restat)
            on_seen(path)
        return result

    monkeypatch.setattr(watcher_mod, "_CHUNK", 1)
    monkeypatch.setattr(scan, "ROWS_CHUNK", 4)  # the scan a few paths behind the placement
    monkeypatch.setattr(watches_mod.WatchTable, "add", slow_add)
    monkeypatch.setattr(os, "lstat", lstat_then)
    ws = Workspace(store, ws_id, root, CaptureSettings())
    try:
        ws.start()
        monkeypatch.setattr(os, "lstat", real_lstat)
        yield store, ws
    finally:
        ws.stop()
        store.close()


def test_changes_made_during_the_catch_up_are_in_the_first_mark(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "ws"
    done: list[bytes] = []

    def change(rel: bytes) -> None:
        # Right after the scan looked at each of these paths: a change its stat cannot show,
        # so only an event of a watch already in place reports it.
        if rel in (b"d30/f.txt", b"d35/sub/g.txt") and rel not in done:
            (root / os.fsdecode(rel)).write_text("changed after its lstat\n")
            done.append(rel)
        elif rel == b"d33/sub" and rel not in done:  # after a directory's lstat: a new entry
            (root / "d33" / "sub" / "new.txt").write_text("new after the listing's check\n")
            done.append(rel)
        elif rel == b"d01/f.txt" and rel not in done:  # before the scan gets there
            (root / "d38" / "f.txt").write_text("changed ahead of the scan\n")
            done.append(rel)

    with _restarted(tmp_path, monkeypatch, change) as (store, ws):
        assert len(done) == 4
        mark = ws.mark("first")
        files = _files(store, ws, mark.tree)
    assert files[b"d30/f.txt"] == b"changed after its lstat\n"
    assert files[b"d35/sub/g.txt"] == b"changed after its lstat\n"
    assert files[b"d33/sub/new.txt"] == b"new after the listing's check\n"
    assert files[b"d38/f.txt"] == b"changed ahead of the scan\n"
    assert files[b"d02/f.txt"] == b"old 2\n"


@pytest.mark.parametrize("where", ["daemon", "reader processes"])
def test_changes_made_while_down_are_in_the_first_mark(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, where: str
) -> None:
    """What the sorted pass has to get right besides the race: a vanished subtree, a directory
    turned into a file or into a symlink (nothing read through it), a new subtree inside a
    known directory, a new entry at the root, and a file changed deep in an unchanged one;
    and a file with another name outside the root, whose links only the catch-up's ``lstat``
    sees after a restart (links are not stored): a write through that name after the
    restart is in the mark. Judged in the daemon (a small cache) and in reader processes
    (a big one: here, forced)."""
    if where == "reader processes":
        monkeypatch.setattr(readers, "RESTAT_FROM", 0)
    listed: list[bytes] = []
    real_list = scan._list

    def list_noted(root: bytes, d: bytes, *args: Any, **kwargs: Any) -> Any:
        listed.append(d)
        return real_list(root, d, *args, **kwargs)

    monkeypatch.setattr(scan, "_list", list_noted)
    root = tmp_path / "ws"
    _tree(root)
    outside = tmp_path / "outside"
    (outside / "sub").mkdir(parents=True)
    (outside / "f.txt").write_text("outside\n")
    (outside / "sub" / "g.txt").write_text("outside\n")
    os.link(root / "d11" / "f.txt", outside / "link.txt")
    store = Store.open(tmp_path / "store")
    first = Workspace(store, store.add_workspace(os.fsencode(root)), root, CaptureSettings())
    first.start()
    ws_id = first.id
    first.stop()
    try:
        (root / "d05" / "sub" / "g.txt").unlink()
        (root / "d05" / "sub").rmdir()
        (root / "d05" / "f.txt").unlink()
        (root / "d05").rmdir()
        for name in ("d06", "d07"):
            (root / name / "sub" / "g.txt").unlink()
            (root / name / "sub").rmdir()
            (root / name / "f.txt").unlink()
            (root / name).rmdir()
        (root / "d06").write_text("a file now\n")
        (root / "d07").symlink_to(outside)
        (root / "d08" / "new" / "deeper").mkdir(parents=True)
        (root / "d08" / "new" / "deeper" / "h.txt").write_text("new deep\n")
        (root / "top.txt").write_text("new at the root\n")
        (root / "d09" / "sub" / "g.txt").write_text("changed while down\n")
        ws = Workspace(store, ws_id, root, CaptureSettings())
        ws.start()
        try:
            with (outside / "link.txt").open("a") as f:
                f.write("written through the outside name\n")
            files = _files(store, ws, ws.mark("first").tree)
            kinds = {p: e.kind for p, e in trees.walk(store.load_node, ws.mark("second").tree)}
        finally:
            ws.stop()
    finally:
        store.close()
    assert not any(p.startswith(b"d05") for p in files)
    assert files[b"d06"] == b"a file now\n"
    assert kinds[b"d07"] == "symlink"
    assert not any(p.startswith(b"d07/") for p in kinds)
    assert not [d for d in listed if d.startswith(b"d07/")]  # nothing listed through the symlink
    assert files[b"d08/new/deeper/h.txt"] == b"new deep\n"
    assert files[b"top.txt"] == b"new at the root\n"
    assert files[b"d09/sub/g.txt"] == b"changed while down\n"
    assert files[b"d10/sub/g.txt"] == b"old sub 10\n"
    assert files[b"d11/f.txt"] == b"old 11\nwritten through the outside name\n"


def test_a_file_turned_directory_while_down_is_watched_after_the_restart(tmp_path: Path) -> None:
    """A captured file replaced by a directory (with a subdirectory) while snapd was down: the
    catch-up captures what it holds, and it is watched from then on, so a file made in it after
    the restart is in the next mark (it is a cached path, but no longer the file it was)."""
    root, store, ws_id = _watched_then_stopped(tmp_path)
    try:
        (root / "d04" / "f.txt").unlink()
        (root / "d04" / "f.txt" / "sub").mkdir(parents=True)
        (root / "d04" / "f.txt" / "a.txt").write_text("made while down\n")
        ws = Workspace(store, ws_id, root, CaptureSettings())
        ws.start()
        try:
            (root / "d04" / "f.txt" / "later.txt").write_text("after the restart\n")
            (root / "d04" / "f.txt" / "sub" / "later.txt").write_text("after the restart, deeper\n")
            files = _files(store, ws, ws.mark("first").tree)
        finally:
            ws.stop()
    finally:
        store.close()
    assert files[b"d04/f.txt/a.txt"] == b"made while down\n"
    assert files[b"d04/f.txt/later.txt"] == b"after the restart\n"
    assert files[b"d04/f.txt/sub/later.txt"] == b"after the restart, deeper\n"


def test_a_workspace_stopped_while_it_loads_its_stat_cache_leaves_nothing_watching(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The registry stops a workspace still starting when its root was replaced, and starts
    another on the same id. A stop that comes while the stat cache loads (before any watch is
    placed) must end that start: no watcher of it is left running, watching for nobody."""
    root, store, ws_id = _watched_then_stopped(tmp_path)
    loading, go_on = threading.Event(), threading.Event()
    real_load = Store.load_stats

    def slow_load(self: Store, ws: int) -> Iterator[tuple[bytes, bytes]]:
        loading.set()
        go_on.wait(10)
        return real_load(self, ws)

    monkeypatch.setattr(Store, "load_stats", slow_load)
    ws = Workspace(store, ws_id, root, CaptureSettings())
    errors: list[Exception] = []

    def start() -> None:
        try:
            ws.start()
        except WorkspaceRefused as exc:
            errors.append(exc)

    before = set(threading.enumerate())
    starting = threading.Thread(target=start)
    starting.start()
    try:
        assert loading.wait(10)
        ws.stop()
    finally:
        go_on.set()
        starting.join(30)
    try:
        assert len(errors) == 1 and "was stopped before it began" in str(errors[0]), errors
        left = [t.name for t in set(threading.enumerate()) - before if t.name.startswith("snapd-watch:")]
        assert not left, f"a watcher of the stopped start is still running: {left}"
    finally:
        ws.stop()
        store.close()


_NAMES = st.sampled_from([b"a", b"a.d", b"a-b", b"a0", b"b", b"ab", b"a.txt", b"z"])


@settings(max_examples=300, deadline=None)
@given(st.sets(st.lists(_NAMES, min_size=1, max_size=4).map(b"/".join), max_size=40), st.data())
def test_a_directorys_children_are_found_in_sorted_paths_by_bisection(paths: set[bytes], data: Any) -> None:
    """What the catch-up lists a directory against (its cached children) and what it marks
    dirty below a vanished path, found in the sorted paths by bisection, are what a pass over
    every path finds: names that sort between a child and its subtree ("a", "a.d", "a.d/x",
    "a/y") included."""
    ordered = sorted(paths)
    d = data.draw(st.sampled_from([b"", *ordered]))
    assert scan._children(ordered, d) == [p for p in ordered if p.rpartition(b"/")[0] == d]
    lo, hi = scan._below(ordered, d)
    assert ordered[lo:hi] == [p for p in ordered if not d or p.startswith(d + b"/")]
