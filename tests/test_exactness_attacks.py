"""Adversarial review of rollback exactness (issue 8, DESIGN.md semantics 4): each test is an
attack that made ``rollback --to M`` exit 0 with the tree not as it was at M, or lose data.

A real daemon and the real CLI throughout, as in test_exactness.py.
"""

from __future__ import annotations

import json
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


# -- rule inputs outside the tree must be followed while the daemon runs ------------------------------


def _repo(tmp_path: Path) -> Path:
    repo = (tmp_path / "repo").resolve()
    repo.mkdir()
    git(repo, "init", "-q")
    write(repo / "README", "r\n")
    git(repo, "add", "README")
    git(repo, "commit", "-qm", "init")
    return repo


def test_info_exclude_edited_for_a_linked_worktree_is_followed(daemon: Daemon, tmp_path: Path) -> None:
    """A linked worktree's rules use the common dir's info/exclude; emptying it makes
    local.cfg captured, so a mark taken afterwards must hold it."""
    repo = _repo(tmp_path)
    wt = (tmp_path / "wt").resolve()
    git(repo, "worktree", "add", "-q", str(wt))
    exclude = repo / ".git" / "info" / "exclude"
    exclude.parent.mkdir(exist_ok=True)
    exclude.write_text("local.cfg\n")
    daemon.ctl("watch", wt)
    mark(daemon, wt, "before")
    exclude.write_text("")  # local.cfg is captured from now on
    write(wt / "local.cfg", "v1\n")
    a = mark(daemon, wt, "a")
    write(wt / "local.cfg", "v2\n")
    mark(daemon, wt, "b")

    cp = daemon.ctl("cat", a, "local.cfg", cwd=wt, check=False)
    assert cp.returncode == 0 and cp.stdout == b"v1\n", describe(cp)
    code, r = rollback(daemon, wt, "--to", a)
    assert code == 0, r
    assert (wt / "local.cfg").read_text() == "v1\n", r


def test_an_outer_gitignore_edited_above_the_root_is_followed(daemon: Daemon, tmp_path: Path) -> None:
    """The root is a subdirectory of a work tree: the .gitignore above it is a rule input too."""
    repo = _repo(tmp_path)
    write(repo / ".gitignore", "*.log\n")
    sub = repo / "sub"
    write(sub / "a.txt", "a\n")
    daemon.ctl("watch", sub)
    mark(daemon, sub, "before")
    write(repo / ".gitignore", "")  # x.log is captured from now on
    write(sub / "x.log", "v1\n")
    a = mark(daemon, sub, "a")
    write(sub / "x.log", "v2\n")
    mark(daemon, sub, "b")

    cp = daemon.ctl("cat", a, "x.log", cwd=sub, check=False)
    assert cp.returncode == 0 and cp.stdout == b"v1\n", describe(cp)
    code, r = rollback(daemon, sub, "--to", a)
    assert code == 0, r
    assert (sub / "x.log").read_text() == "v1\n", r
