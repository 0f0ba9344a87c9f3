"""The session's guard against processes that outlive the tests (tests/leftovers.py): what it
counts as left behind, and the reaper that ends them when pytest itself is gone."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import leftovers
import pytest
from e2e_helpers import start_daemon, wait_for

pytestmark = pytest.mark.timeout(60)


def _sleeper(snapd_home: Path, seconds: float = 60) -> subprocess.Popen[bytes]:
    return subprocess.Popen(["sleep", str(seconds)], env={**os.environ, "SNAPD_HOME": str(snapd_home)})


def test_a_daemon_under_the_root_is_reported_and_ended_and_nothing_else(tmp_path: Path) -> None:
    home = tmp_path / "swept" / "home-snapd"
    home.parent.mkdir()
    d = start_daemon(home)
    beside = _sleeper(tmp_path / "swept-not" / "home")  # a sibling that shares the name's prefix
    try:
        left = leftovers.reap(tmp_path / "swept", grace_s=0.0)
        assert [(p.pid, p.snapd_home) for p in left] == [(d.pid, str(home))]
        assert "-m snapd start" in left[0].cmdline
        assert d.wait_exit(10) == 0  # SIGTERM first: the daemon stopped cleanly
        assert beside.poll() is None
    finally:
        beside.kill()
        beside.wait()
        d.stop()


def test_a_process_that_exits_within_the_grace_is_not_left_behind(tmp_path: Path) -> None:
    quick = _sleeper(tmp_path / "home", 0.3)
    started = time.monotonic()
    assert leftovers.reap(tmp_path, grace_s=10.0) == []
    assert time.monotonic() - started < 5  # it did not wait for the whole grace
    assert quick.wait(5) == 0  # and it ended by itself, not by a signal


def test_the_reaper_ends_what_is_left_once_its_pipe_closes(tmp_path: Path) -> None:
    left = _sleeper(tmp_path / "home")
    reaper, pipe = leftovers.start_reaper(tmp_path)
    try:
        assert reaper.poll() is None and left.poll() is None  # nothing happens while we live...
        os.close(pipe)  # ...and this is what our death looks like to it
        wait_for(lambda: left.poll() is not None, 15, what="the reaper ends the sleeper")
        assert reaper.wait(15) == 0
    finally:
        left.kill()
        left.wait()
        reaper.kill()
        reaper.wait()


def test_a_stop_that_fails_on_the_way_still_ends_the_daemon(tmp_path: Path) -> None:
    d = start_daemon(tmp_path / "home-snapd")
    d.python = ("/nonexistent/python",)  # `snapctl stop` cannot run (as if it timed out)
    with pytest.raises(FileNotFoundError):
        d.stop()
    assert not d.alive()
