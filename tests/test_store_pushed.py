"""Store format 9 (docs/storage.md): the ``pushed`` table and the store's id, which the remote
push and the on-mark pusher's queue rest on (snapd.store.pushed).

The queue is "every mark of the watched workspaces not in ``pushed`` for that repository": these
tests hold the store to it on a new store, on one upgraded from the format-8 fixture (the store
release 6882ac9 wrote), and after a crash at every point of that upgrade.
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import threading
from pathlib import Path

import pytest
from ingest_helpers import capture_paths, ingest_tree

from snapd.store import safeio
from snapd.store.catalog import FORMAT_VERSION
from snapd.store.store import Store

pytestmark = pytest.mark.timeout(120)

FIXTURE = Path(__file__).parent / "fixtures" / "store-format8"


def _format(store_dir: Path) -> str:
    with sqlite3.connect(store_dir / "catalog.sqlite") as db:
        return str(db.execute("SELECT value FROM meta WHERE key='format'").fetchone()[0])


def _fixture(tmp: Path) -> tuple[Path, list[str]]:
    store_dir = tmp / "store"
    shutil.copytree(FIXTURE / "store", store_dir)
    # git keeps no empty directory: a checkout's fixture lacks the store's objects/ (made at
    # the first open, which would count as one more crash point of the upgrade than it has)
    (store_dir / "objects").mkdir(exist_ok=True)
    return store_dir, list(json.loads((FIXTURE / "manifest.json").read_text()))


def _workspace(tmp: Path) -> Path:
    ws = tmp / "ws"
    (ws / "src").mkdir(parents=True)
    (ws / "src" / "a.txt").write_text("a\n")
    return ws


def test_a_new_store_has_the_pushed_table_with_an_empty_queue_per_repository(tmp_path: Path) -> None:
    ws = _workspace(tmp_path)
    with Store.open(tmp_path / "store") as s:
        wid = s.add_workspace(os.fsencode(ws))
        first = ingest_tree(s, wid, ws).mark_id
        (ws / "src" / "a.txt").write_text("b\n")
        second = capture_paths(s, wid, ws, [b"src/a.txt"], "edit").id
        assert [m.id for m in s.unpushed("repo1", [wid])] == [first, second]  # oldest first
        s.record_pushed("repo1", [first])
        assert [m.id for m in s.unpushed("repo1", [wid])] == [second]
        assert [m.id for m in s.unpushed("repo2", [wid])] == [first, second]  # per repository
        assert s.pushed("repo1") == {first}
        s.record_pushed("repo1", [first, second])  # again: harmless
        assert s.unpushed("repo1", [wid]) == [] and s.unpushed("repo1", []) == []
    assert _format(tmp_path / "store") == str(FORMAT_VERSION) == "10"
    with Store.open(tmp_path / "store") as s:  # the queue is the table: it survives a reopen
        assert s.pushed("repo1") == {first, second}


def test_the_store_id_is_made_once_and_kept(tmp_path: Path) -> None:
    with Store.open(tmp_path / "a") as a, Store.open(tmp_path / "b") as b:
        ids = {a.store_id() for _ in range(3)}
        assert len(ids) == 1 and len(ids.pop()) == 32
        assert a.store_id() != b.store_id()
        kept = a.store_id()
    with Store.open(tmp_path / "a") as a:
        assert a.store_id() == kept


def test_two_first_callers_get_one_store_id(tmp_path: Path) -> None:
    with Store.open(tmp_path / "s") as s:
        got: list[str] = []
        threads = [threading.Thread(target=lambda: got.append(s.store_id())) for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert len(set(got)) == 1 and len(got) == 8


def test_rows_of_marks_the_store_no_longer_holds_go(tmp_path: Path) -> None:
    ws = _workspace(tmp_path)
    with Store.open(tmp_path / "store") as s:
        wid = s.add_workspace(os.fsencode(ws))
        first = ingest_tree(s, wid, ws).mark_id
        s.record_pushed("r", [first, "gone-mark"])
        assert s.pushed("r") == {first}


def test_upgrade_from_format_8_queues_every_old_mark(tmp_path: Path) -> None:
    store_dir, marks = _fixture(tmp_path)
    assert _format(store_dir) == "8"
    with Store.open(store_dir) as s:
        (wid,) = [w.id for w in s.workspaces()]
        assert sorted(m.id for m in s.unpushed("r", [wid])) == sorted(marks)
        s.record_pushed("r", marks[:2])
        assert len(s.unpushed("r", [wid])) == len(marks) - 2
        made = s.store_id()  # an upgraded store has none until asked
    assert _format(store_dir) == "10"  # 8 -> 9 -> 10 in one open
    with Store.open(store_dir) as s:
        assert s.pushed("r") == set(marks[:2]) and s.store_id() == made


def _upgrade(store_dir: Path) -> None:
    with Store.open(store_dir) as s:
        s.pushed("r")


def test_a_crash_at_every_point_of_the_upgrade_leaves_a_store_that_upgrades(tmp_path: Path) -> None:
    """Each statement of the 8 -> 9 upgrade and its commit is a crash point: after each, the
    next open finishes the upgrade and every old mark is still there, queued."""
    safeio.crash_after(None)
    _upgrade(_fixture(tmp_path / "count")[0])
    total = safeio.operations()
    assert total == 2  # CREATE TABLE pushed, COMMIT (9 -> 10 has no statement of its own)
    for n in range(1, total + 1):
        store_dir, marks = _fixture(tmp_path / f"n{n}")
        pid = os.fork()
        if pid == 0:  # child
            code = 1
            try:
                safeio.crash_after(n)
                _upgrade(store_dir)
            finally:
                os._exit(code)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == safeio.CRASH_EXIT_CODE, n
        assert _format(store_dir) == ("8" if n < total else "10"), n
        with Store.open(store_dir) as s:
            (wid,) = [w.id for w in s.workspaces()]
            assert sorted(m.id for m in s.unpushed("r", [wid])) == sorted(marks), n
        assert _format(store_dir) == "10"
