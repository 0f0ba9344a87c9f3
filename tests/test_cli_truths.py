"""What the CLI says is true (issue 31, point 10): each message names what happened and
what to do, against a real daemon and the real CLI."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from e2e_helpers import Daemon, describe, start_daemon, write


def test_a_rollback_that_can_change_nothing_says_so_not_that_the_workspace_matches(
    daemon: Daemon, ws: Path
) -> None:
    """The only difference from the mark is a FIFO snapd cannot capture: nothing is changed,
    exit 10, and the words say that (not "already matches the mark", which is false)."""
    write(ws / "a.txt", "a\n")
    daemon.ctl("mark", "m", cwd=ws)
    os.mkfifo(ws / "pipe")
    cp = daemon.ctl("rollback", "--to", "m", "--yes", cwd=ws, check=False)
    out = cp.stdout + cp.stderr
    assert cp.returncode == 10, describe(cp)
    assert b"already matches" not in out and b"nothing changed" in out, describe(cp)
    assert b"kept: pipe" in out and b"1 path kept as they are" in out, describe(cp)
    plan = daemon.ctl("rollback", "--to", "m", "--dry-run", cwd=ws, check=False)
    assert b"nothing can be changed: 1 path differing from the mark kept" in plan.stdout, describe(plan)


def test_kept_paths_with_force_do_not_say_force_replaces_them(daemon: Daemon, ws: Path) -> None:
    """A FIFO at the mark has no content to restore: --force cannot change that, and the
    summary says so instead of "(--force replaces them)"."""
    write(ws / "a.txt", "a\n")
    os.mkfifo(ws / "pipe")
    daemon.ctl("mark", "m", cwd=ws)
    (ws / "pipe").unlink()
    write(ws / "a.txt", "changed\n")
    cp = daemon.ctl("rollback", "--to", "m", "--yes", "--force", cwd=ws, check=False)
    assert cp.returncode == 10 and b"kept: pipe" in cp.stderr, describe(cp)
    assert b"--force replaces" not in cp.stderr and b"even with --force" in cp.stderr, describe(cp)
    assert (ws / "a.txt").read_text() == "a\n"


def test_dot_at_the_root_is_named_the_root_directory_not_outside(daemon: Daemon, ws: Path) -> None:
    """`cat M .` and `history .` at the root: `.` is the workspace's root directory, said so
    with what to run instead; `cat M sub` names a directory."""
    write(ws / "sub" / "a.txt", "a\n")
    daemon.ctl("mark", "m", cwd=ws)
    for args, hint in ((("cat", "m", "."), b"snapctl show"), (("history", "."), b"snapctl log")):
        cp = daemon.ctl(*args, cwd=ws, check=False)
        assert cp.returncode == 2, describe(cp)
        assert b"outside the workspace" not in cp.stderr, describe(cp)
        assert b"root directory" in cp.stderr and hint in cp.stderr, describe(cp)
    cp = daemon.ctl("cat", "m", "sub", cwd=ws, check=False)
    assert cp.returncode == 6 and b"sub is a directory" in cp.stderr, describe(cp)  # not_found, as before


def test_a_bogus_plan_token_is_not_a_changed_workspace(daemon: Daemon, ws: Path) -> None:
    write(ws / "a.txt", "a\n")
    daemon.ctl("mark", "m", cwd=ws)
    write(ws / "a.txt", "b\n")
    cp = daemon.ctl("rollback", "--to", "m", "--yes", "--plan-token", "bogus", cwd=ws, check=False)
    assert cp.returncode == 2, describe(cp)
    assert b"not the token of a plan" in cp.stderr and b"workspace changed" not in cp.stderr, describe(cp)
    assert (ws / "a.txt").read_text() == "b\n"


def test_history_calls_the_oldest_kept_version_so_after_retention_pruned(tmp_path: Path) -> None:
    """Retention deleted the file's first version: the oldest left is the oldest kept, not its
    creation; a file created after the pruning point, in a mark that lacked it, is created."""
    home = tmp_path / "snapd-home"
    home.mkdir()
    (home / "config.toml").write_text("[retention]\nmax_age_days = 0.00002\ngrace_s = 0.001\n")  # 1.7 s
    d = start_daemon(home)
    try:
        root = tmp_path / "ws"
        root.mkdir()
        write(root / "f.txt", "v1\n")
        d.ctl("watch", root)
        time.sleep(2)  # the baseline's version of f.txt is past the age window
        write(root / "f.txt", "v2\n")
        d.ctl("mark", "b", cwd=root)
        write(root / "g.txt", "new\n")
        d.ctl("mark", "c", cwd=root)
        gc = d.ctl_json("gc")
        assert gc["evicted"], f"nothing evicted: nothing tested ({gc})"
        h = json.loads(d.ctl("history", "f.txt", "--json", cwd=root).stdout)
        assert h["pruned_before"] is not None, h
        assert [v["status"] for v in h["versions"]] == ["oldest_kept"], h
        assert b"oldest kept" in d.ctl("history", "f.txt", cwd=root).stdout
        g = json.loads(d.ctl("history", "g.txt", "--json", cwd=root).stdout)
        assert [v["status"] for v in g["versions"]] == ["created"], g
        assert d.stop() == 0
    finally:
        if d.alive():
            d.stop()
