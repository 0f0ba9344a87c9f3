"""Shared fixtures: every test gets its own HOME / XDG dirs / SNAPD_HOME under tmp_path; a
running daemon (`daemon`) and a workspace it watches (`ws`); one whose home another uid may
reach up to its private directories (`root_daemon`); acting as uid 65534 (`nobody`);
fsync failures (`fsync_faults`). No process a test started outlives the session
(`pytest_sessionfinish`, and the reaper for a pytest that dies: tests/leftovers.py)."""

from __future__ import annotations

import errno
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import leftovers
import pytest
from e2e_helpers import NOBODY, Daemon, OtherUser, other_user, start_daemon

pytest_plugins = ["remote_server"]  # the remote tier's S3 server fixtures (tests/remote_server.py)

_SWEPT = pytest.StashKey[Path]()  # the session's temporary root, once a test has run
_REAPER = pytest.StashKey[tuple[subprocess.Popen[bytes], int]]()  # and its reaper, and pipe
LEFT_GRACE_S = 5.0  # for a daemon still finishing a stop it was asked for at the very end


@pytest.fixture(scope="session", autouse=True)
def _reaper(tmp_path_factory: pytest.TempPathFactory, pytestconfig: pytest.Config) -> None:
    """The reaper of this session's temporary root (tests/leftovers.py): it ends what the tests
    started if pytest dies without running their ``finally`` blocks. Its pipe's write end stays
    open, in the stash, for as long as this process lives."""
    root = tmp_path_factory.getbasetemp()
    pytestconfig.stash[_SWEPT] = root
    pytestconfig.stash[_REAPER] = leftovers.start_reaper(root)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    """Under ``CI`` a skip is a failure with its reason: a test that cannot set up its real
    condition there must say so, never pass quietly (the helper for it:
    ``e2e_helpers.unavailable``). An expected failure (``xfail``) stays what it is."""
    outcome = yield
    report: pytest.TestReport = outcome.get_result()
    if os.environ.get("CI") and report.skipped and not hasattr(report, "wasxfail"):
        longrepr = report.longrepr
        reason = longrepr[2] if isinstance(longrepr, tuple) else str(longrepr)
        report.outcome = "failed"
        report.longrepr = f"a skip under CI fails: {reason}"


def pytest_sessionfinish(session: pytest.Session) -> None:
    """A process still running with its SNAPD_HOME under this session's temporary root once
    every test is done was left behind by one of them (its SNAPD_HOME names the test): it
    would run on after pytest with ppid 1. It is reported, ended, and fails the run."""
    root = session.config.stash.get(_SWEPT, None)
    if root is None:
        return
    left = leftovers.reap(root, LEFT_GRACE_S)
    if not left:
        return
    if session.exitstatus == pytest.ExitCode.OK:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
    lines = [f"{len(left)} process(es) started by the tests outlived them (now ended):", *map(str, left)]
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is None:
        print("\n".join(lines), file=sys.stderr)
        return
    reporter.ensure_newline()
    reporter.write_sep("=", "left behind", red=True)
    for line in lines:
        reporter.write_line(line, red=True)


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
