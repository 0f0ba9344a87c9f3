"""A mark sent from a linked worktree's git dir (``repo/.git/worktrees/wt``: where a git hook
of that worktree runs) marks that worktree, not the main work tree that holds the git dir
(issue 31, point 11)."""

from __future__ import annotations

import shutil
from pathlib import Path

from e2e_helpers import Daemon, git, unavailable, write

from snapd.capture import git as gitfacts


def _repo_with_worktree(top: Path) -> tuple[Path, Path]:
    if shutil.which("git") is None:
        unavailable("git not installed")
    repo, wt = top / "repo", top / "wt"
    repo.mkdir()
    git(repo, "init", "-q")
    write(repo / "f.txt", "main\n")
    git(repo, "add", "f.txt")
    git(repo, "commit", "-q", "-m", "one")
    git(repo, "worktree", "add", "-q", str(wt), "-b", "side")
    write(wt / "f.txt", "side\n")
    return repo, wt


def test_linked_worktree_maps_a_worktrees_git_dir_to_its_top(tmp_path: Path) -> None:
    repo, wt = _repo_with_worktree(tmp_path.resolve())
    own = repo / ".git" / "worktrees" / "wt"
    assert gitfacts.linked_worktree(bytes(own)) == bytes(wt)
    assert gitfacts.linked_worktree(bytes(own / "logs")) == bytes(wt)
    assert gitfacts.linked_worktree(bytes(repo / ".git" / "refs")) is None
    assert gitfacts.linked_worktree(bytes(repo)) is None
    shutil.rmtree(wt)  # a stale record names nothing
    assert gitfacts.linked_worktree(bytes(own)) is None


def test_a_mark_from_a_worktrees_git_dir_marks_that_worktree(daemon: Daemon, tmp_path: Path) -> None:
    repo, wt = _repo_with_worktree(tmp_path.resolve())
    own = repo / ".git" / "worktrees" / "wt"
    m = daemon.ctl_json("mark", "from-wt-git-dir", cwd=own)
    assert m["workspace"] == str(wt), m
    assert daemon.ctl("cat", m["id"], "f.txt", "-w", wt).stdout == b"side\n"
    # the main work tree watched too: the worktree's git dir, inside it, still means the worktree
    daemon.ctl("watch", repo)
    m = daemon.ctl_json("mark", "again", cwd=own)
    assert m["workspace"] == str(wt), m
    assert daemon.ctl_json("log", cwd=own)["workspace"] == str(wt)
    # and a mark from the main .git is the main work tree's
    assert daemon.ctl_json("mark", "main", cwd=repo / ".git" / "refs")["workspace"] == str(repo)
