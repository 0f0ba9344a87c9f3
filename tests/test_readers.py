"""Reader processes (snapd.capture.readers): a baseline read outside the daemon captures
exactly what the in-daemon reader threads capture, sends back no raw bytes, survives a process
that dies, leaves no process behind, and a daemon stopped mid-baseline exits with its readers."""

from __future__ import annotations

import os
import signal
import stat
import threading
import time
from pathlib import Path

import pytest
from e2e_helpers import start_daemon, wait_for
from ingest_helpers import vcs_only

from snapd.capture import readers, statcache
from snapd.capture.counters import Counters
from snapd.capture.ingest import Report, capture
from snapd.capture.reader import Read, read_path, walk
from snapd.capture.statcache import RACY_NS, StatCache
from snapd.ipc.client import Client
from snapd.store.objwrite import LARGE_OBJECT
from snapd.store.store import Store
from snapd.store.verify import verify

CAP = 4 << 20


def make_tree(root: Path) -> None:
    """Repeated contents, an empty file, a symlink, a FIFO, one file over the cap and one whose
    payload is large enough to be an object file of its own."""
    for i in range(30):
        d = root / f"d{i % 4}" / f"e{i}"
        d.mkdir(parents=True)
        (d / "same.txt").write_text("shared content\n" * 50)  # one content, 30 names
        (d / "own.txt").write_text(f"file {i}\n" * (i + 1))
        (d / "empty").write_bytes(b"")
    (root / "link").symlink_to("d0/e0/own.txt")
    os.mkfifo(root / "fifo")
    (root / "big").write_bytes(b"x" * (CAP + 1))
    (root / "random").write_bytes(os.urandom(LARGE_OBJECT + 4096))


def baseline(tmp_path: Path, name: str, root: Path, processes: bool) -> tuple[str, Report, dict[str, int]]:
    rootb = os.fsencode(root)
    rels = [rel for rel, _ in walk(rootb, vcs_only)]
    report, counters = Report(), Counters()
    with Store.open(tmp_path / name) as store:
        ws = store.add_workspace(rootb)
        with store.batch() as batch:
            changes = capture(
                batch,
                rootb,
                rels,
                report,
                size_cap=CAP,
                ws=ws,
                parallel=True,
                from_walk=True,
                counters=counters,
                processes=processes,
            )
            tree = batch.apply(None, changes)
            batch.add_mark(ws, "baseline", tree, kind="baseline")
        assert verify(store).ok
    return tree, report, counters.to_json()


def test_reader_processes_capture_exactly_what_reader_threads_capture(tmp_path: Path) -> None:
    root = tmp_path / "ws"
    make_tree(root)
    by_threads = baseline(tmp_path, "threads", root, processes=False)
    by_processes = baseline(tmp_path, "processes", root, processes=True)
    assert by_processes == by_threads  # same tree key: same names, modes, sizes and contents
    tree, report, counters = by_processes
    assert report.skipped == {"special file": [b"fifo"], "over size cap": [b"big"]}, report
    assert counters["files_read"] == 91, counters  # 90 small files and "random", counted by the processes


def read_all(rp: readers.ReaderProcesses, chunks: list[list[bytes]]) -> dict[bytes, Read]:
    return {r.rel: r for chunk in rp.map(chunks) for r in chunk}


def gone(pid: int) -> bool:
    return not Path(f"/proc/{pid}").exists()  # reaped: no zombie left either


def test_reader_processes_send_digests_not_bytes_and_end_with_the_capture(tmp_path: Path) -> None:
    root = tmp_path / "ws"
    make_tree(root)
    rootb = os.fsencode(root)
    rels = [rel for rel, _ in walk(rootb, vcs_only)]
    in_daemon = {rel: read_path(rootb, rel, CAP) for rel in rels}
    with readers.ReaderProcesses(rootb, CAP, True, lambda rel: pytest.fail("fell back"), None) as rp:
        pids = rp.pids
        assert len(pids) == readers.WORKERS
        got = read_all(rp, [rels[i : i + 7] for i in range(0, len(rels), 7)])
    assert wait_for(lambda: all(gone(p) for p in pids), 10, what="reader processes exit")
    assert rp.failures == []
    assert got.keys() == in_daemon.keys()
    payloads: dict[bytes, int] = {}
    for rel, r in got.items():
        want = in_daemon[rel]
        assert (r.kind, r.mode, r.size, r.sig, r.reason) == (
            want.kind,
            want.mode,
            want.size,
            want.sig,
            want.reason,
        )
        if r.kind in ("file", "symlink"):
            assert r.data == b"" and r.sha is not None and r.digest is not None, rel
            payloads[r.sha] = payloads.get(r.sha, 0) + (r.encoded is not None)
    # each process compresses a content once: the 30 copies of same.txt cost at most WORKERS
    assert 1 <= max(payloads.values()) <= readers.WORKERS
    assert min(payloads.values()) >= 1  # and every content came with its payload at least once


def test_a_reader_process_that_dies_loses_nothing(tmp_path: Path) -> None:
    root = tmp_path / "ws"
    make_tree(root)
    rootb = os.fsencode(root)
    rels = [rel for rel, _ in walk(rootb, vcs_only)]
    fell_back: list[bytes] = []

    def fallback(rel: bytes) -> Read:
        fell_back.append(rel)
        return read_path(rootb, rel, CAP, trusted=True)

    with readers.ReaderProcesses(rootb, CAP, True, fallback, None) as rp:
        victim = rp.pids[0]
        os.kill(victim, signal.SIGKILL)
        wait_for(lambda: Path(f"/proc/{victim}/stat").read_text().split()[2] == "Z", 10, what="victim dead")
        got = read_all(rp, [rels[i : i + 5] for i in range(0, len(rels), 5)])
    assert got.keys() == set(rels)
    assert fell_back, "the dead process's paths were not read in the daemon"
    assert any(str(victim) in f for f in rp.failures), rp.failures
    assert all(got[rel].kind == read_path(rootb, rel, CAP).kind for rel in rels)


def reader_pids(daemon_pid: int) -> list[int]:
    """The daemon's children that are reader processes."""
    found = []
    for proc in Path("/proc").iterdir():
        try:
            ppid = int((proc / "stat").read_text().rsplit(")", 1)[1].split()[1])
            cmd = (proc / "cmdline").read_bytes()
        except (OSError, ValueError, IndexError):
            continue
        if ppid == daemon_pid and b"snapd.capture.readers" in cmd:
            found.append(int(proc.name))
    return found


@pytest.mark.timeout(180)
def test_a_daemon_stopped_during_a_baseline_exits_with_its_readers(tmp_path: Path) -> None:
    """Reader processes are children of the daemon for one baseline: stopping the daemon while
    they read ends them too, and a restart takes the baseline again, whole. (~5 s: two daemons
    and two baselines of 3,606 paths, the fewest that still start reader processes.)"""
    root = tmp_path / "ws"
    for i in range(6):
        sub = root / f"d{i}"
        sub.mkdir(parents=True)
        for j in range(600):
            (sub / f"f{j}").write_text(f"{i}-{j}\n" * 40)
    home = tmp_path / "snapd-home"
    d = start_daemon(home)
    seen: list[int] = []
    try:

        def watch() -> None:
            try:
                with Client(d.endpoint, 120) as c:
                    c.call("watch", path=os.fsencode(root))
            except Exception:
                pass  # the daemon stops under it: the reply is an error or never comes

        t = threading.Thread(target=watch, daemon=True)
        t.start()
        wait_for(lambda: bool(seen.extend(reader_pids(d.pid)) or seen), 60, what="reader processes start")
    finally:
        assert d.stop() == 0
    assert wait_for(lambda: all(gone(p) for p in seen), 10, what="reader processes exit with the daemon")
    d = start_daemon(home)
    try:

        def baseline_done() -> bool:
            ws = [w for w in d.call("status")["workspaces"] if w["root"] == str(root)]
            return bool(ws) and ws[0].get("state") == "ready"

        wait_for(baseline_done, 120, what="the restarted daemon's baseline")
        marks = d.ctl_json("log", "-w", str(root))["marks"]
        base = [m for m in marks if m["kind"] == "baseline"]
        assert len(base) == 1, marks
        assert base[0]["summary"]["counts"] == {"added": 6 * 600 + 6}, base[0]["summary"]
    finally:
        assert d.stop() == 0
    assert stat.S_ISDIR(root.stat().st_mode)


@pytest.mark.timeout(120)
def test_reader_processes_stopped_and_continued_lose_no_byte(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A reader stopped while it writes its answer (^Z, a freezer, a profiler: SIGSTOP, then
    SIGCONT) must send it whole. Under PYTHONUNBUFFERED (the service unit sets it) its stdout
    was a raw file: the interrupted write(2) took part of the bytes, pickle dropped the rest, and
    the daemon met a corrupt stream (the paths were read again in the daemon: slow, not lost)."""
    monkeypatch.setenv("PYTHONUNBUFFERED", "1")  # the readers inherit it, as from the service
    root = tmp_path / "ws"
    for i in range(600):  # incompressible payloads: answers of ~64 KiB fill the pipe
        d = root / f"d{i % 10}"
        d.mkdir(parents=True, exist_ok=True)
        (d / f"f{i}").write_bytes(os.urandom(16 << 10))
    rootb = os.fsencode(root)
    rels = [rel for rel, _ in walk(rootb, vcs_only)]
    chunks = [rels[i : i + 4] for i in range(0, len(rels), 4)]
    with readers.ReaderProcesses(rootb, CAP, True, lambda rel: read_path(rootb, rel, CAP), None) as rp:
        pids, done = rp.pids, threading.Event()

        def pester() -> None:  # every stop is followed by a continue
            while not done.is_set():
                for p in pids:
                    os.kill(p, signal.SIGSTOP)
                time.sleep(0.005)
                for p in pids:
                    os.kill(p, signal.SIGCONT)
                time.sleep(0.002)

        t = threading.Thread(target=pester, daemon=True)
        t.start()
        try:
            got = []
            for chunk in rp.map(chunks):
                got.extend(chunk)
                time.sleep(0.002)  # a slow consumer: the readers block writing into full pipes
        finally:
            done.set()
            t.join(5)
            for p in pids:
                os.kill(p, signal.SIGCONT)
    assert [r.rel for r in got] == rels
    assert rp.failures == [], rp.failures


def test_a_read_crosses_the_pipe_whole() -> None:
    """``Read.__reduce__`` lists the fields by hand (a fast pickle): every field, none forgotten."""
    import dataclasses
    import pickle

    values = {
        "rel": b"a/b", "kind": "file", "mode": 0o600, "data": b"xy", "reason": "why", "unstable": True,
        "digest": "d" * 32, "encoded": (1, b"p"), "sig": (1, 2, 3, 4, 5), "sha": b"s" * 32, "listed": False,
        "dev": 7, "nlink": 2, "size": 2,
    }  # fmt: skip
    fields = dataclasses.fields(Read)
    assert {f.name for f in fields} == values.keys(), "a new Read field: give it a value here"
    assert all(values[f.name] != f.default for f in fields if f.default is not dataclasses.MISSING)
    r = Read(**values)  # type: ignore[arg-type]
    assert pickle.loads(pickle.dumps(r, pickle.HIGHEST_PROTOCOL)) == r


def test_a_restat_in_reader_processes_reports_what_the_daemon_would_and_survives_a_death(
    tmp_path: Path,
) -> None:
    """A restart's catch-up judges the stat cache's rows in the processes
    (``ReaderProcesses.restat``): what they report is what :func:`statcache.restat` reports
    in the daemon, chunk by chunk and in order; a process killed first costs nothing (its
    chunks are judged in the daemon, the failure listed)."""
    root = tmp_path / "ws"
    make_tree(root)
    rootb = os.fsencode(root)
    cache = StatCache()
    read_at = time.time_ns() + 10 * RACY_NS  # read well after every mtime: none is racy
    for rel, _ in walk(rootb, vcs_only):
        st = os.lstat(root / os.fsdecode(rel))
        cache.set(rel, (st.st_mode, st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino), read_at)
    (root / "d1" / "e1" / "own.txt").write_text("changed\n")  # reported: changed
    (root / "d2" / "e2" / "own.txt").unlink()  # reported: gone, and its directory changed
    os.link(root / "d3" / "e3" / "own.txt", root / "d3" / "e3" / "second-name")  # 2 links, dir changed
    paths = sorted(cache.paths())
    chunks = [cache.rows(paths[i : i + 7]) for i in range(0, len(paths), 7)]
    here = [statcache.restat(rootb, rows, read_at) for rows in chunks]
    reported = {r.path: r for rs in here for r in rs}
    assert reported.keys() == {b"d1/e1/own.txt", b"d2/e2/own.txt", b"d3/e3/own.txt", b"d2/e2", b"d3/e3"}
    assert reported[b"d2/e2/own.txt"].mode is None and not reported[b"d1/e1/own.txt"].same
    assert reported[b"d3/e3/own.txt"].nlink == 2  # (a new link changed its ctime too)
    with readers.ReaderProcesses(rootb, CAP, False, None, None) as rp:
        assert list(rp.restat(read_at, chunks)) == here
        victim = rp.pids[0]
        os.kill(victim, signal.SIGKILL)
        wait_for(lambda: Path(f"/proc/{victim}/stat").read_text().split()[2] == "Z", 10, what="victim dead")
        assert list(rp.restat(read_at, chunks)) == here
    assert any(str(victim) in f for f in rp.failures), rp.failures
