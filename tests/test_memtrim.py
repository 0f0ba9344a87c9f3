"""Freed heap goes back to the system once the daemon is quiet (snapd.memtrim): not inside a
mark, not after each commit, but once commits stop; and every store commit counts as one."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

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
