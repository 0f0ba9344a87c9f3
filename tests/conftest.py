"""Shared fixtures: every test gets its own HOME / XDG dirs / SNAPD_HOME under tmp_path."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from e2e_helpers import NOBODY, OtherUser, other_user


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
