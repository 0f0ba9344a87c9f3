"""Crash tests: kill the process right after the N-th persistent operation, for every N.

The child runs a fixed workload with ``safeio.crash_after(N)`` armed and reports each mark id
through a pipe as soon as its commit returns. The parent then reopens the store and checks
the invariants: it opens, ``verify`` is clean, and every mark that was acknowledged is still
there with every object it references readable (or was recorded as evicted by GC).
"""

from __future__ import annotations

import json
import os
import random
import shutil
import traceback
from collections.abc import Callable
from pathlib import Path

import pytest
from ingest_helpers import capture_paths, ingest_tree

from snapd.config import Retention
from snapd.store import gc, safeio, trees
from snapd.store.objwrite import LARGE_OBJECT
from snapd.store.store import Store
from snapd.store.verify import verify

pytestmark = pytest.mark.timeout(300)

Workload = Callable[[Path, Path, Callable[[str], None]], None]


def _workspace(tmp: Path) -> Path:
    ws = tmp / "ws"
    (ws / "src").mkdir(parents=True)
    for i in range(5):
        (ws / "src" / f"f{i}.txt").write_bytes(f"file {i}\n".encode() * 40)
    (ws / "big.bin").write_bytes(random.Random(1).randbytes(LARGE_OBJECT + 100))
    return ws


def capture_workload(store_dir: Path, ws: Path, ack: Callable[[str], None]) -> None:
    with Store.open(store_dir) as s:
        wid = s.add_workspace(os.fsencode(ws))
        ack(ingest_tree(s, wid, ws).mark_id)
        (ws / "src" / "f1.txt").write_bytes(b"edited")
        (ws / "new.txt").write_bytes(b"new file " * 30)
        ack(capture_paths(s, wid, ws, [b"src/f1.txt", b"new.txt"], "turn-1").id)
        (ws / "big.bin").write_bytes(random.Random(2).randbytes(LARGE_OBJECT + 100))
        (ws / "src" / "f2.txt").unlink()
        ack(capture_paths(s, wid, ws, [b"big.bin", b"src/f2.txt"], "turn-2").id)


def gc_workload(store_dir: Path, ws: Path, ack: Callable[[str], None]) -> None:
    with Store.open(store_dir) as s:
        wid = s.add_workspace(os.fsencode(ws))
        ack(ingest_tree(s, wid, ws).mark_id)
        for i in range(4):
            (ws / "big.bin").write_bytes(random.Random(10 + i).randbytes(LARGE_OBJECT + 10))
            (ws / "src" / "f0.txt").write_bytes(f"v{i}".encode() * 100)
            ack(capture_paths(s, wid, ws, [b"big.bin", b"src/f0.txt"], f"m{i}").id)
        gc.run(s, Retention(max_marks=2, grace_s=0, max_age_days=0))


FIXTURES = Path(__file__).parent / "fixtures"


def migration_workload(store_dir: Path, ws: Path, ack: Callable[[str], None], fmt: int = 4) -> None:
    """Open a store written by an earlier release (tests/fixtures/store-format{fmt}: its marks
    were acknowledged then), which upgrades it, then store an edit of one of its files as a
    delta."""
    fixture = FIXTURES / f"store-format{fmt}"
    shutil.copytree(fixture / "store", store_dir)
    for mark_id in json.loads((fixture / "manifest.json").read_text()):
        ack(mark_id)
    with Store.open(store_dir) as s:
        (wid,) = [w.id for w in s.workspaces()]
        latest = s.latest_mark(wid)
        assert latest is not None
        for path, entry in trees.walk(s.load_node, latest.tree):
            if entry.kind == "file":
                (ws / os.fsdecode(path)).parent.mkdir(parents=True, exist_ok=True)
                (ws / os.fsdecode(path)).write_bytes(s.get(entry.key))
        with open(ws / "src" / "pkg" / "mod1.py", "ab") as f:
            f.write(b"# edited after the upgrade\n")
        ack(capture_paths(s, wid, ws, [b"src/pkg/mod1.py"], "upgraded").id)


def _count_ops(tmp: Path, workload: Workload) -> int:
    safeio.crash_after(None)
    workload(tmp / "count-store", _workspace(tmp / "count"), lambda _: None)
    return safeio.operations()


def _run_crashing(tmp: Path, workload: Workload, n: int) -> tuple[Path, list[str], int]:
    ws = _workspace(tmp)
    store_dir = tmp / "store"
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # child
        os.close(r)
        code = 0
        try:
            safeio.crash_after(n)
            workload(store_dir, ws, lambda mark: os.write(w, mark.encode() + b"\n"))
        except BaseException:
            traceback.print_exc()  # the parent fails on the exit code; this says why
            code = 1
        os._exit(code)
    os.close(w)
    with os.fdopen(r, "rb") as fh:
        acked = fh.read().decode().split()
    _, status = os.waitpid(pid, 0)
    return store_dir, acked, os.waitstatus_to_exitcode(status)


def _check(store_dir: Path, acked: list[str]) -> None:
    if not store_dir.exists():
        assert not acked
        return
    with Store.open(store_dir) as s:
        report = verify(s)
        assert report.ok, (report.missing, report.corrupt)
        evicted = {m for w in s.workspaces() for m in (e["mark"] for e in s.evictions(w.id))}
        for mark_id in acked:
            if mark_id in evicted:
                continue
            mark = s.mark(mark_id)
            for _, entry in trees.walk(s.load_node, mark.tree):
                if entry.kind != "dir":
                    s.get(entry.key)
        # a reopened store keeps working: it can take another mark and GC
        ws = s.workspaces()
        if ws:
            with s.batch() as b:
                b.put(b"after the crash")
        gc.run(s, Retention(grace_s=0))
        assert verify(s).ok


def migration5_workload(store_dir: Path, ws: Path, ack: Callable[[str], None]) -> None:
    """The 5 -> 6 upgrade (keys to blobs): a crash between its two statements is one point."""
    migration_workload(store_dir, ws, ack, fmt=5)


def migration6_workload(store_dir: Path, ws: Path, ack: Callable[[str], None]) -> None:
    """The 6 -> 7 upgrade (stat-cache rows packed): a crash after each of its four statements
    (new table, copy, drop, rename) is one point."""
    migration_workload(store_dir, ws, ack, fmt=6)


def migration7_workload(store_dir: Path, ws: Path, ack: Callable[[str], None]) -> None:
    """The 7 -> 8 upgrade (the ignored names' columns): a crash after each of its two statements
    is one point."""
    migration_workload(store_dir, ws, ack, fmt=7)


def migration8_workload(store_dir: Path, ws: Path, ack: Callable[[str], None]) -> None:
    """The 8 -> 9 upgrade (the pushed marks' table): a crash after its one statement is one
    point."""
    migration_workload(store_dir, ws, ack, fmt=8)


def migration9_workload(store_dir: Path, ws: Path, ack: Callable[[str], None]) -> None:
    """The 9 -> 10 upgrade (wide directories in parts: no statement, the format's number
    only): a crash before or after its commit is one point."""
    migration_workload(store_dir, ws, ack, fmt=9)


MIGRATIONS = (
    migration_workload, migration5_workload, migration6_workload, migration7_workload, migration8_workload,
    migration9_workload,
)


@pytest.mark.parametrize(
    "workload",
    [capture_workload, gc_workload, *MIGRATIONS],
    ids=[
        "capture", "gc", "migration", "migration-5-6", "migration-6-7", "migration-7-8", "migration-8-9",
        "migration-9-10",
    ],
)
def test_crash_after_every_operation(tmp_path: Path, workload: Workload) -> None:
    total = _count_ops(tmp_path, workload)
    # 8 -> 9: its statement, its commit, a capture; 9 -> 10 has no statement
    assert total >= (2 if workload is migration9_workload else 3 if workload in MIGRATIONS else 10)
    for n in range(1, total + 1):
        tmp = tmp_path / f"n{n}"
        store_dir, acked, code = _run_crashing(tmp, workload, n)
        # every run dies at its crash point: an error before it (exit 1) is a failure
        assert code == safeio.CRASH_EXIT_CODE, f"crash point {n} of {total}: the child exited {code}"
        _check(store_dir, acked)
