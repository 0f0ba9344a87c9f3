"""Shared fixtures: every test gets its own HOME / XDG dirs / SNAPD_HOME under tmp_path; a
running daemon (`daemon`) and a workspace it watches (`ws`); one whose home another uid may
reach up to its private directories (`root_daemon`); acting as uid 65534 (`nobody`);
fsync failures (`fsync_faults`)."""

from __future__ import annotations

import errno
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from e2e_helpers import NOBODY, Daemon, OtherUser, other_user, start_daemon


@pytest.fixture(autouse=True)
def _isolated_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    for var in ("XDG_RUNTIME_DIR", "XDG_DATA_HOME", "XDG_CONFIG_HOME", "XDG_STATE_HOME", "SNAPD_HOME"):
        monkeypatch.delenv(var, raising=False)
    yield


@pytest.fixture
def nobody() -> Iterator[OtherUser]:
    """Acting as uid 65534 (permission tests: root reads everything), in a directory of its
    own, removed afterwards."""
    top = Path(tempfile.mkdtemp(prefix="snapd-uid-"))  # pytest's temp root is 0700: not enterable
    try:
        yield other_user(NOBODY, top)
    finally:
        shutil.rmtree(top, ignore_errors=True)


def _running(snapd_home: Path) -> Iterator[Daemon]:
    d = start_daemon(snapd_home)
    try:
        yield d
    finally:
        code = d.stop()
        assert code == 0, f"snapd exited with {code}\n{d.log()[-4000:]}"


@pytest.fixture
def daemon(tmp_path: Path) -> Iterator[Daemon]:
    """A running ``snapd start`` of this test's own (e2e_helpers); stopped at teardown, where
    anything but a clean exit 0 fails the test."""
    yield from _running(tmp_path / "snapd-home")


@pytest.fixture
def capped_daemon(tmp_path: Path) -> Iterator[Daemon]:
    """Like ``daemon``, with a size cap of 1 KiB (its config.toml): a file of a few KiB is over
    the cap, so it is recorded as there but not captured."""
    home = tmp_path / "snapd-home"
    home.mkdir(mode=0o700)
    (home / "config.toml").write_text('size_cap = "1 KiB"\n')
    yield from _running(home)


@pytest.fixture
def root_daemon() -> Iterator[tuple[Daemon, Path]]:
    """A daemon of root's with its SNAPD_HOME in a short directory under /tmp (its parent is
    enterable: the test itself decides what the other uid may reach)."""
    top = Path(tempfile.mkdtemp(prefix="snapd-root-"))
    top.chmod(0o755)
    d = start_daemon(top / "home")
    try:
        yield d, top
    finally:
        code = d.stop()
        shutil.rmtree(top, ignore_errors=True)
        assert code == 0, d.log()[-3000:]


def _watched(tmp_path: Path, daemon: Daemon) -> Path:
    root = tmp_path / "proj" / "ws"
    root.mkdir(parents=True)
    root = root.resolve()
    out = daemon.ctl_json("watch", root)
    assert out["workspace"] == str(root)
    assert out["baseline"]["kind"] == "baseline"
    return root


@pytest.fixture
def ws(tmp_path: Path, daemon: Daemon) -> Path:
    """A watched workspace (via `snapctl watch`), as its real path."""
    return _watched(tmp_path, daemon)


@pytest.fixture
def capped_ws(tmp_path: Path, capped_daemon: Daemon) -> Path:
    """A workspace watched by ``capped_daemon`` (size cap 1 KiB), as its real path."""
    return _watched(tmp_path, capped_daemon)


@dataclass
class FsyncFaults:
    """``os.fsync`` in this process, failing with EIO for the descriptors ``fail_when`` picks
    (by the path behind them), ``times`` times; every fsync's path is recorded in ``synced``
    (a failure too). How a disk reports lost writes: the error is final, whatever a retry says."""

    fail_when: Callable[[str], bool] = lambda path: False
    times: int = 1
    synced: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)


@pytest.fixture
def fsync_faults(monkeypatch: pytest.MonkeyPatch) -> FsyncFaults:
    faults = FsyncFaults()
    real = os.fsync

    def fsync(fd: int) -> None:
        path = os.readlink(f"/proc/self/fd/{fd}")
        faults.synced.append(path)
        if faults.times > 0 and faults.fail_when(path):
            faults.times -= 1
            faults.failed.append(path)
            raise OSError(errno.EIO, os.strerror(errno.EIO))
        real(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    return faults
