"""A commit that fails part-way (a full disk at the catalog's commit) loses nothing later.

The paths whose reads the failed batch held are read again (``Capturer.uncommitted``), and
the stat cache keeps its entries. The real full disk is tests/test_diskfull.py's; these
cases fail one commit in process (``Batch.commit`` raising ``DiskFull`` as a full catalog
does) to reach the states that a scan or a rule change meets afterwards: a directory whose
own entry was in the failed batch must still be reached by a scan that trusts its parent's
listing, and still be dropped from the tree when it is ignored since.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from snapd.capture import capture_thread
from snapd.capture.workspace import Workspace
from snapd.config import CaptureSettings
from snapd.errors import DiskFull
from snapd.store import trees
from snapd.store.batch import Batch
from snapd.store.records import Mark
from snapd.store.store import Store

pytestmark = pytest.mark.timeout(60)


@contextmanager
def _watched(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Path, Store, Workspace]]:
    """``p/d/a.txt`` and ``p/other.txt`` watched, dated an hour back and out of the racy
    window (a scan trusts ``p``'s listing); captured only by marks (no capture thread)."""
    monkeypatch.setattr(capture_thread.CaptureThread, "start", lambda self: None)
    root = tmp_path / "ws"
    (root / "p" / "d").mkdir(parents=True)
    (root / "p" / "d" / "a.txt").write_text("old\n")
    (root / "p" / "other.txt").write_text("x\n")
    old = time.time() - 3600
    for p in [root, *root.rglob("*")]:
        os.utime(p, (old, old))
    time.sleep(2.2)  # the ctimes out of the racy window too
    store = Store.open(tmp_path / "store")
    ws = Workspace(store, store.add_workspace(os.fsencode(root)), root, CaptureSettings())
    ws.start()
    try:
        yield root, store, ws
    finally:
        ws.stop()
        store.close()


def _mark_after_chmod(monkeypatch: pytest.MonkeyPatch, root: Path, ws: Workspace, fail: bool) -> None:
    """``p/d``'s mode changed (its own entry in the next batch), then a mark whose commit
    fails with a full disk (``fail``) or succeeds."""
    os.chmod(root / "p" / "d", 0o700)
    _fail_next_commit(monkeypatch, ws, fail)


def _fail_next_commit(monkeypatch: pytest.MonkeyPatch, ws: Workspace, fail: bool) -> None:
    """A mark whose commit fails with a full disk (``fail``) or succeeds."""
    real = Batch.commit
    armed = [fail]

    def commit(self: Batch) -> list[Mark]:
        if armed[0]:
            armed[0] = False
            raise DiskFull("disk full (test)")
        return real(self)

    monkeypatch.setattr(Batch, "commit", commit)
    if fail:
        with pytest.raises(DiskFull):
            ws.mark("m1")
    else:
        ws.mark("m1")


@pytest.mark.parametrize("fail", [False, True])
def test_a_change_below_a_directory_of_a_failed_commit_is_found_by_a_scan(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fail: bool
) -> None:
    """Events lost after the failed mark (the watcher stopped: the next mark's barrier fails
    and a full scan stands in for them, as after an overflow): the file changed below the
    failed batch's directory is in the next mark."""
    with _watched(tmp_path, monkeypatch) as (root, store, ws):
        _mark_after_chmod(monkeypatch, root, ws, fail)
        assert ws.watcher is not None
        ws.watcher.stop()
        (root / "p" / "d" / "a.txt").write_text("changed while events were lost\n")
        tree = ws.mark("m2").tree
        files = {p: store.get(e.key) for p, e in trees.walk(store.load_node, tree) if e.kind == "file"}
    assert files[b"p/d/a.txt"] == b"changed while events were lost\n"


@pytest.mark.parametrize("fail", [False, True])
def test_a_directory_of_a_failed_commit_ignored_since_leaves_the_tree(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fail: bool
) -> None:
    with _watched(tmp_path, monkeypatch) as (root, store, ws):
        _mark_after_chmod(monkeypatch, root, ws, fail)
        (root / "p" / ".gitignore").write_text("d/\n")
        paths = {p for p, _ in trees.walk(store.load_node, ws.mark("m2").tree)}
    assert b"p/.gitignore" in paths
    assert not {p for p in paths if p.startswith(b"p/d")}, sorted(paths)


@pytest.mark.parametrize("fail", [False, True])
def test_a_file_ignored_in_a_failed_commit_leaves_the_tree_in_the_next(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fail: bool
) -> None:
    """A rule added ignores a captured file: the capture drops it from the tree and the
    cache. If that commit fails, the next must still drop it, although the rules are already
    the new ones (no rule change is seen again) and the cache no longer names it."""
    with _watched(tmp_path, monkeypatch) as (root, store, ws):
        (root / "p" / ".gitignore").write_text("other.txt\n")
        _fail_next_commit(monkeypatch, ws, fail)
        paths = {p for p, _ in trees.walk(store.load_node, ws.mark("m2").tree)}
    assert b"p/.gitignore" in paths
    assert b"p/other.txt" not in paths, sorted(paths)
