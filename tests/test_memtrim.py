"""Freed heap goes back to the system once the daemon is quiet (snapd.memtrim): not inside a
mark, not after each commit, but once commits stop; and every store commit counts as one."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from e2e_helpers import Daemon, cli_mark

from snapd import memtrim
from snapd.store.store import Store

pytestmark = pytest.mark.timeout(60)


def _wait_for(cond: Callable[[], bool], timeout_s: float = 10.0) -> bool:
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        if cond():
            return True
        time.sleep(0.01)
    return False


def test_a_burst_of_writes_is_trimmed_once_after_it_stops() -> None:
    calls: list[str] = []
    trimmer = memtrim.IdleTrim(idle_s=0.5, trim=lambda: calls.append(threading.current_thread().name))
    for _ in range(10):  # 20 ms apart: never quiet for 0.5 s
        trimmer.wrote()
        time.sleep(0.02)
    assert calls == []  # not during the burst
    assert _wait_for(lambda: len(calls) >= 1)
    time.sleep(1.0)
    assert calls == ["snapd-heap-trim"]  # once, on its own thread; nothing written since
    trimmer.wrote()
    assert _wait_for(lambda: len(calls) == 2)


def test_writes_that_never_stop_are_trimmed_all_the_same() -> None:
    """An agent marking back to back never leaves the daemon quiet: the heap is trimmed every
    ``busy_s`` of writing all the same (issue 33: the GC's transient stayed resident all day)."""
    calls: list[int] = []
    trimmer = memtrim.IdleTrim(idle_s=2.0, busy_s=0.2, trim=lambda: calls.append(1))
    deadline = time.monotonic() + 10
    while len(calls) < 2 and time.monotonic() < deadline:  # 20 ms apart: never quiet for 2 s
        trimmer.wrote()
        time.sleep(0.02)
    assert len(calls) >= 2


def test_every_store_commit_asks_for_a_trim(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    trims: list[int] = []
    monkeypatch.setattr(memtrim, "after_writes", memtrim.IdleTrim(idle_s=0.01, trim=lambda: trims.append(1)))
    with Store.open(tmp_path / "s") as s:
        time.sleep(0.2)
        trims.clear()  # opening may write (the schema)
        with s.batch() as b:
            b.put(b"some content")
            b.commit()
        assert _wait_for(lambda: len(trims) >= 1)


HEAP_MAX = 64 << 20  # the address space glibc reserves for each arena but the main one (64-bit)


def thread_arenas(pid: int) -> int:
    """glibc's malloc arenas besides the main one in process ``pid``: each is an anonymous
    mapping of HEAP_MAX bytes at a HEAP_MAX-aligned address, read-write where it is in use and
    inaccessible beyond (/proc/PID/maps; the main arena is ``[heap]``)."""
    maps = []
    for line in Path(f"/proc/{pid}/maps").read_text().splitlines():
        fields = line.split()
        lo, hi = (int(x, 16) for x in fields[0].split("-"))
        maps.append((lo, hi, fields[1], len(fields) > 5))
    found = 0
    for i, (lo, hi, perms, named) in enumerate(maps):
        if lo % HEAP_MAX or named or not perms.startswith("rw"):
            continue
        end = hi
        for nlo, nhi, _, nnamed in maps[i + 1 :]:
            if nlo != end or nnamed or end >= lo + HEAP_MAX:
                break
            end = nhi
        found += end == lo + HEAP_MAX
    return found


def test_the_daemons_threads_share_two_malloc_arenas(daemon: Daemon, ws: Path) -> None:
    """What a thread frees stays in its arena, and glibc gives each new thread one of its own
    (up to 8 per core): the daemon's request, capture, GC and ZeroMQ threads held ten, each with
    its transient heap (the soak, bench/bench_soak.py: 92-96 MB after 6,000 marks against 85-87
    with two). A plain Python process with threads that allocate is the count's control."""
    control = subprocess.Popen(
        [sys.executable, "-c", "import threading, time\n"
         "def work(): held.append([bytearray(4096) for _ in range(256)]); time.sleep(30)\n"
         "held = []\n"
         "for _ in range(6): threading.Thread(target=work, daemon=True).start()\n"
         "time.sleep(30)"],
    )
    try:
        seen = _wait_for(lambda: thread_arenas(control.pid) >= 2)
        assert seen, "the count sees the arenas of threads that allocate"
    finally:
        control.kill()
        control.wait()
    for i in range(3):
        (ws / f"a{i}.txt").write_text(f"edited {i}\n")
        cli_mark(daemon, ws, f"turn-{i}")
    assert thread_arenas(daemon.pid) <= memtrim.ARENAS - 1
