"""Promises that no other test would miss if their code went (issue 11, point 6).

Each test names the code that keeps its promise; `make mutants` (tests/mutants.py) removes that
code and checks the test fails. Inputs are fixed numbers, never derived from the constant under
test: a racy window of 0 s, a pre-rollback mark left unprotected, a batch that never flushes
early, a GC that leaves orphans, a `verify` that exits 0 on damage, a barrier timeout that does
not rescan, a log that never rotates, a watchdog fed by a dead server — each fails here.
"""

from __future__ import annotations

import json
import mmap
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from e2e_helpers import Daemon, start_daemon, wait_for
from ingest_helpers import capture_paths

from snapd.capture import scan
from snapd.capture.statcache import StatCache
from snapd.config import Retention, load_config
from snapd.daemon.main import Daemon as SnapDaemon
from snapd.daemon.main import ProcessEnv
from snapd.ipc.server import ControlServer
from snapd.store import gc
from snapd.store.objects import fingerprint
from snapd.store.store import Store
from snapd.store.verify import verify

S = 10**9  # one second in ns


# -- the racy window ----------------------------------------------------------------------------


def test_a_file_read_within_a_second_of_its_mtime_is_not_trusted() -> None:
    """Timestamps have a granularity (a second on some file systems, a kernel tick on others):
    a file read in the same tick as its last write may be written again with the same size
    and mtime. Fixed times: read 0.5 s after its mtime, looked at much later."""
    sig = (0o100644, 5, 1_000 * S, 1_000 * S, 7)
    cache = StatCache({b"f": (sig, 1_000 * S + S // 2), b"old": (sig, 1_010 * S)})
    assert not cache.is_clean(b"f", sig, now_ns=5_000 * S)
    assert cache.is_clean(b"old", sig, now_ns=5_000 * S)  # read 10 s after its mtime: trusted
    # a file written a moment ago is not trusted either, whenever it was read
    fresh = (0o100644, 5, 4_999 * S + S // 2, 4_999 * S + S // 2, 8)
    cache.set(b"g", fresh, 5_000 * S)
    assert not cache.is_clean(b"g", fresh, now_ns=5_000 * S)


def test_a_scan_rereads_a_file_whose_read_was_racy(tmp_path: Path) -> None:
    """On a real file: the cache says it was read 0.5 s after its mtime, the stat is unchanged
    (nothing wrote it since), and the scan still queues it; read 30 s after, it does not."""
    root = tmp_path / "ws"
    root.mkdir()
    f = root / "f"
    f.write_text("hello")
    when = time.time_ns() - 3600 * S
    os.utime(f, ns=(when, when))
    os.utime(root, ns=(when, when))
    st = f.lstat()
    sig = (st.st_mode, st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino)
    rst = root.lstat()
    rsig = (rst.st_mode, rst.st_size, rst.st_mtime_ns, rst.st_ctime_ns, rst.st_ino)

    def dirty(read_ns: int) -> set[bytes]:
        cache = StatCache({b"f": (sig, read_ns)})
        return scan.scan(os.fsencode(root), b"", cache, lambda rel, is_dir: False, lambda rel: True)

    assert rsig  # the root itself is not a cached path: only f can be dirty
    assert dirty(st.st_mtime_ns + S // 2) == {b"f"}
    assert dirty(st.st_mtime_ns + 30 * S) == set()


# -- retention under pressure, on a real store ----------------------------------------------------


def test_budget_pressure_keeps_a_young_pre_rollback_mark(tmp_path: Path) -> None:
    with Store.open(tmp_path / "store") as store:
        root = tmp_path / "ws"
        root.mkdir()
        ws = store.add_workspace(os.fsencode(root))
        ids = []
        for i in range(5):
            (root / "f").write_bytes(os.urandom(20_000))
            kind = "pre-rollback" if i == 1 else "user"
            ids.append(capture_paths(store, ws, root, [b"f"], f"m{i}", kind=kind).id)
        # a budget nothing fits in, and a count of 1 (the young pre-rollback mark does not
        # count against it): everything unprotected goes
        rep = gc.run(store, Retention(budget_bytes=1_000, max_marks=1, grace_s=0))
        left = {m.id for m in store.marks(ws)}
        assert left == {ids[1], ids[4]}, (left, rep.evicted)
        assert rep.warnings  # what must be kept exceeds the budget: said, not hidden
        assert verify(store).ok


def test_no_mark_is_evicted_for_the_budget_when_what_must_be_kept_exceeds_it(tmp_path: Path) -> None:
    """Evicting marks cannot meet the budget when the kept content alone is over it: versions
    inside the age window, or pinned marks. Then nothing is evicted (the history would be
    emptied for no gain) and the report warns."""
    with Store.open(tmp_path / "store") as store:
        root = tmp_path / "ws"
        root.mkdir()
        ws = store.add_workspace(os.fsencode(root))
        ids = []
        for i in range(4):
            (root / "f").write_bytes(os.urandom(20_000))
            ids.append(capture_paths(store, ws, root, [b"f"], f"m{i}").id)
        # every version is inside the 14-day window: they hold all 80 KB
        rep = gc.run(store, Retention(budget_bytes=30_000, grace_s=0))
        assert rep.evicted == [] and rep.warnings, rep
        # no version kept (window 0), but the two oldest marks are pinned: 40 KB over 30 KB
        store.set_pinned(ids[0], True)
        store.set_pinned(ids[1], True)
        rep = gc.run(store, Retention(budget_bytes=30_000, grace_s=0, max_age_days=0))
        assert rep.evicted == [(ids[2], "age")] and rep.warnings, rep  # nothing for the budget
        assert {m.id for m in store.marks(ws)} == {ids[0], ids[1], ids[3]}
        # two more marks of the same content: m3 and m4 are candidates, and evicting them would
        # free nothing; the pinned marks alone are over the budget
        more = [capture_paths(store, ws, root, [b"f"], f"m{i}").id for i in (4, 5)]
        rep = gc.run(store, Retention(budget_bytes=30_000, grace_s=0))
        assert rep.evicted == [] and rep.warnings, rep
        assert {m.id for m in store.marks(ws)} == {ids[0], ids[1], ids[3], *more}


# -- batches over the flush size ----------------------------------------------------------------


def test_a_batch_over_the_flush_size_flushes_early_and_still_dedups_and_tells_collisions(
    tmp_path: Path,
) -> None:
    """A batch holds at most ``flush_bytes`` of new content in memory (FLUSH_BYTES, 32 MiB;
    1 KiB here). Content met again after its flush is recognised by its SHA-256, and content
    with the same xxh3 key but other bytes (a forced collision) gets its own key."""
    constant = "0" * 32
    store = Store.open(tmp_path / "s", hasher=lambda data: constant, flush_bytes=1_000)
    first, other = b"A" * 600, b"B" * 600  # same size, same (forced) digest
    try:
        with store.batch() as b:
            k1 = b.put(first)
            k2 = b.put(b"C" * 600)  # 1,200 bytes pending: flushed, before the batch ends
            assert store.has(k1) and store.has(k2), "nothing was flushed before the commit"
            assert b.put(first) == k1  # met again after its flush: by its fingerprint
            k3 = b.put(other)
            assert k3 not in (k1, k2), "a different content took a flushed content's key"
            b.put(b"D" * 600)
        assert [store.get(k) for k in (k1, k2, k3)] == [first, b"C" * 600, other]
        assert fingerprint(first) != fingerprint(other)
        assert verify(store).ok
    finally:
        store.close()


# -- GC: orphans and temp files -----------------------------------------------------------------


def test_gc_removes_orphan_object_files_and_temps_past_the_grace_period(tmp_path: Path) -> None:
    with Store.open(tmp_path / "store") as store:
        with store.batch() as b:
            kept = b.put(os.urandom(2 << 20))  # a large object: a file of its own
        shard = store.object_path(kept).parent
        old = time.time() - 3600
        orphans = [shard / ("f" * 32 + ".0"), shard / ".snapd-0123456789ab~"]
        young = shard / ("e" * 32 + ".0")
        for p in [*orphans, young]:
            p.write_bytes(b"left by a crash")
        for p in orphans:
            os.utime(p, (old, old))
        gc.run(store, Retention(grace_s=600))
        assert not any(p.exists() for p in orphans), "an orphan or temp file outlived the GC"
        assert young.exists(), "a file inside the grace period (a batch in flight) was removed"
        assert store.get(kept) and verify(store).ok


# -- verify exits non-zero -----------------------------------------------------------------------


def test_verify_exits_non_zero_and_names_the_mark_when_the_store_is_damaged(daemon: Daemon, ws: Path) -> None:
    (ws / "big").write_bytes(os.urandom(2 << 20))  # an object file of its own
    m = daemon.ctl_json("mark", "m", "-w", ws)
    assert daemon.ctl("verify").returncode == 0
    store = Path(daemon.ctl_json("status")["store"]["path"])
    (obj,) = [p for p in (store / "objects").rglob("*") if p.is_file()]
    data = bytearray(obj.read_bytes())
    data[len(data) // 2] ^= 0xFF
    obj.write_bytes(bytes(data))
    cp = daemon.ctl("verify", check=False)
    assert cp.returncode == 1, cp
    assert b"PROBLEMS FOUND" in cp.stdout and m["id"].encode() in cp.stdout, cp.stdout
    cp = daemon.ctl("verify", "--json", check=False)
    assert cp.returncode == 1 and json.loads(cp.stdout)["clean"] is False
    obj.write_bytes(bytes(data[: len(data) // 2]))  # truncated
    assert daemon.ctl("verify", check=False).returncode == 1


# -- a barrier that times out -------------------------------------------------------------------


def test_a_barrier_that_cannot_complete_rescans_so_the_mark_is_complete(tmp_path: Path) -> None:
    """A write through a shared mmap sends no inotify event: only a scan can find it. When the
    barrier cannot complete (its cookie's event never comes back: a timeout, or, here, every
    cookie name it tries is taken), the mark rescans and holds the write anyway. The file is
    opened before the watch starts and closed after the mark (a close after a write is an
    event)."""
    root = (tmp_path / "ws").resolve()
    root.mkdir()
    f = root / "mapped.bin"
    f.write_bytes(b"0" * 4096)
    d = start_daemon(tmp_path / "snapd-home")
    try:
        with open(f, "r+b") as fh, mmap.mmap(fh.fileno(), 4096) as mm:
            d.ctl("watch", root)
            for n in range(1, 40):  # the names of the cookies the next marks' barriers would use
                (root / f".snapd-{d.pid}-{n}~").mkdir()
            mm[:5] = b"11111"  # no event
            m = d.call("mark", label="after", workspace=os.fsencode(root))
            assert m["summary"]["counts"] == {"modified": 1}, m["summary"]
        cat = d.ctl("cat", "after", "mapped.bin", "-w", root).stdout
        assert cat == b"11111" + b"0" * 4091
        assert "workspace.barrier_failed" in d.log(), "the barrier completed: nothing tested"
    finally:
        assert d.stop() == 0


# -- log rotation -------------------------------------------------------------------------------


def test_the_log_file_rotates_and_keeps_a_bounded_number_of_private_files(tmp_path: Path) -> None:
    """``--log-file`` rotates at MAX_LOG_BYTES (10 MiB; 4 KiB here) keeping LOG_BACKUPS old
    files, each 0600. Run in a child: logging is process-wide."""
    log = tmp_path / "logs" / "snapd.log"
    script = (
        "import sys; from pathlib import Path; import structlog; from snapd.daemon import logs\n"
        "logs.MAX_LOG_BYTES = 4096\n"
        "logs.configure_logging('info', json=True, file=Path(sys.argv[1]))\n"
        "for i in range(400): structlog.get_logger('t').info('test.event', n=i, pad='x' * 80)\n"
    )
    subprocess.run([sys.executable, "-c", script, str(log)], check=True, timeout=60, cwd="/")
    files = sorted(log.parent.iterdir())
    assert [p.name for p in files] == ["snapd.log", "snapd.log.1", "snapd.log.2", "snapd.log.3"], files
    for p in files:
        assert p.stat().st_size <= 4096 + 300, (p, p.stat().st_size)
        assert p.stat().st_mode & 0o777 == 0o600, p
    last = json.loads(log.read_text().splitlines()[-1])
    assert last["event"] == "test.event" and last["n"] == 399


# -- the systemd watchdog -----------------------------------------------------------------------


def test_the_watchdog_is_no_longer_fed_once_the_server_thread_dies(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """systemd restarts a daemon that stops petting its watchdog; snapd pets it only while its
    request loop runs. Here the loop's thread dies of an error (a bug): the petting stops."""
    sock_path = tmp_path / "notify"
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    listener.bind(str(sock_path))
    listener.settimeout(0.05)
    config = load_config({"SNAPD_HOME": str(tmp_path / "home"), "HOME": str(tmp_path)})
    server = ControlServer(f"ipc://{tmp_path}/ctl.sock", lambda op, args: {})
    daemon = SnapDaemon(config, ProcessEnv((), str(sock_path), 100_000))  # pet every 0.05 s

    def pets(seconds: float) -> int:
        n, end = 0, time.monotonic() + seconds
        while time.monotonic() < end:
            try:
                n += listener.recv(64) == b"WATCHDOG=1"
            except TimeoutError:
                continue
        return n

    monkeypatch.setattr(threading, "excepthook", lambda args: None)  # the thread dies on purpose
    serving = threading.Thread(target=daemon._serve, args=(server,))
    try:
        server.start()
        serving.start()
        assert pets(0.6) >= 2, "the watchdog is not fed while the server runs"

        def broken(sock: object) -> None:
            raise RuntimeError("a bug in the request loop")

        server._send_finished = broken  # type: ignore[method-assign]
        wait_for(lambda: not server.alive, 5, what="the server thread died")
        pets(0.2)  # one already on its way
        assert pets(0.6) == 0, "the watchdog is still fed after the server thread died"
    finally:
        daemon.request_stop()
        serving.join(5)
        listener.close()
