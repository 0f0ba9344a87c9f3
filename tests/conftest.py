"""Shared fixtures: every test gets its own HOME / XDG dirs / SNAPD_HOME under tmp_path."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest


@pytest.fixture(autouse=True)
def _isolated_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    for var in ("XDG_RUNTIME_DIR", "XDG_DATA_HOME", "XDG_CONFIG_HOME", "XDG_STATE_HOME", "SNAPD_HOME"):
        monkeypatch.delenv(var, raising=False)
    yield


def wait_for(predicate: Callable[[], object], timeout: float = 10.0, interval: float = 0.01) -> object:
    """Poll until ``predicate()`` is truthy; fail with a clear message at the deadline."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout}s: {predicate}")
        time.sleep(interval)
