"""Shared fixtures: every test gets its own HOME / XDG dirs / SNAPD_HOME under tmp_path, and
end-to-end tests get a real daemon (``daemon``) and a watched workspace (``ws``)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from e2e_helpers import Daemon, start_daemon


@pytest.fixture(autouse=True)
def _isolated_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    for var in ("XDG_RUNTIME_DIR", "XDG_DATA_HOME", "XDG_CONFIG_HOME", "XDG_STATE_HOME", "SNAPD_HOME"):
        monkeypatch.delenv(var, raising=False)
    yield


@pytest.fixture
def daemon(tmp_path: Path) -> Iterator[Daemon]:
    """A real ``snapd start`` on ``tmp_path/"snapd-home"``; stopped with ``snapctl stop`` at
    teardown (SIGKILL as a last resort, which fails the test), and it must exit 0."""
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
