"""Shared fixtures: every test gets its own HOME / XDG dirs / SNAPD_HOME under tmp_path; a
running daemon (`daemon`) and a workspace it watches (`ws`); acting as uid 65534 (`nobody`)."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
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


@pytest.fixture
def daemon(tmp_path: Path) -> Iterator[Daemon]:
    """A running ``snapd start`` of this test's own (e2e_helpers); stopped at teardown, where
    anything but a clean exit 0 fails the test."""
    d = start_daemon(tmp_path / "snapd-home")
    try:
        yield d
    finally:
        code = d.stop()
        assert code == 0, f"snapd exited with {code}\n{d.log()[-4000:]}"


@pytest.fixture
def ws(tmp_path: Path, daemon: Daemon) -> Path:
    """A watched workspace (via `snapctl watch`), as its real path."""
    root = tmp_path / "proj" / "ws"
    root.mkdir(parents=True)
    root = root.resolve()
    out = daemon.ctl_json("watch", root)
    assert out["workspace"] == str(root)
    assert out["baseline"]["kind"] == "baseline"
    return root
