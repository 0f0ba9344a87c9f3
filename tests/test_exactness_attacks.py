"""Adversarial review of rollback exactness (issue 8, DESIGN.md semantics 4): each test is an
attack that made ``rollback --to M`` exit 0 with the tree not as it was at M, or lose data.

A real daemon and the real CLI throughout, as in test_exactness.py.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
from e2e_helpers import Daemon, describe, git

pytestmark = pytest.mark.timeout(90)


def write(path: Path, data: str | bytes, mode: int = 0o644) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data.encode() if isinstance(data, str) else data)
    path.chmod(mode)


def mark(d: Daemon, ws: Path, label: str, *extra: str) -> str:
    return str(d.ctl_json("mark", label, *extra, cwd=ws)["id"])


def rollback(d: Daemon, ws: Path, *args: str) -> tuple[int, dict[str, Any]]:
    cp = d.ctl("rollback", *args, "--yes", "--json", cwd=ws, check=False)
    try:
        return cp.returncode, json.loads(cp.stdout)
    except json.JSONDecodeError:
        raise AssertionError(describe(cp) + d.log()[-3000:]) from None


@pytest.fixture
def ws(tmp_path: Path, daemon: Daemon) -> Path:
    root = (tmp_path / "ws").resolve()
    root.mkdir()
    daemon.ctl("watch", root)
    return root


# -- a .gitignore that ignores itself (`*`, as .venv/, .pytest_cache/, .ruff_cache/ hold) ---------


def test_a_self_ignoring_gitignore_still_protects_its_directory(daemon: Daemon, ws: Path) -> None:
    """cache/.gitignore holds `*`, so it ignores itself and is in no mark's tree; M's rules must
    still ignore cache/x (it existed at M, ignored), whatever else changed since."""
    write(ws / "cache" / ".gitignore", "*\n")
    write(ws / "cache" / "x", "precious, ignored at M\n")
    write(ws / "a.txt", "a1\n")
    m = mark(daemon, ws, "m")
    write(ws / ".gitignore", "*.log\n")  # any rule-file change since M
    write(ws / "a.txt", "a2\n")

    code, r = rollback(daemon, ws, "--to", m)
    assert (ws / "a.txt").read_text() == "a1\n", r
    assert sorted(p.name for p in (ws / "cache").iterdir()) == [".gitignore", "x"], (code, r["lines"])
    assert (ws / "cache" / "x").read_text() == "precious, ignored at M\n", r
    assert code == 0, r


def test_removing_a_self_ignoring_gitignore_does_not_make_its_files_new(daemon: Daemon, ws: Path) -> None:
    """The same, with no other rule change: the user deletes cache/.gitignore after M, so
    cache/x is captured from then on. It existed at M and M's rules ignored it: it is left."""
    write(ws / "cache" / ".gitignore", "*\n")
    write(ws / "cache" / "x", "precious, ignored at M\n")
    write(ws / "a.txt", "a1\n")
    m = mark(daemon, ws, "m")
    (ws / "cache" / ".gitignore").unlink()
    write(ws / "a.txt", "a2\n")
    mark(daemon, ws, "n")

    code, r = rollback(daemon, ws, "--to", m)
    assert (ws / "a.txt").read_text() == "a1\n", r
    assert (ws / "cache" / "x").exists(), (code, r["lines"])
    assert (ws / "cache" / "x").read_text() == "precious, ignored at M\n", r
