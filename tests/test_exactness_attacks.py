"""Adversarial review of rollback exactness (issue 8, docs/rollback.md): each test is an
attack that made ``rollback --to M`` exit 0 with the tree not as it was at M, or lose data.

A real daemon and the real CLI throughout, as in test_exactness.py.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any

import pytest
from e2e_helpers import Daemon, OtherUser, base_env, describe, git, start_daemon, wait_for, write
from e2e_helpers import cli_mark as mark
from e2e_helpers import cli_rollback as rollback
from e2e_helpers import cli_undo as undo
from e2e_helpers import listed as paths_of

from snapd.errors import SnapdError
from snapd.ipc.client import Client

pytestmark = pytest.mark.timeout(90)










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


# -- read-only directories, nested, created, removed (another uid: root ignores modes) --------------


def _tree(root: Path) -> dict[str, tuple[str, int, bytes]]:
    """Every path under ``root``: (kind, mode, bytes or link target)."""
    out: dict[str, tuple[str, int, bytes]] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            p = Path(dirpath) / name
            st = p.lstat()
            rel = str(p.relative_to(root))
            if stat.S_ISDIR(st.st_mode):
                out[rel] = ("dir", stat.S_IMODE(st.st_mode), b"")
            elif stat.S_ISLNK(st.st_mode):
                out[rel] = ("symlink", 0, os.readlink(p).encode())
            else:
                out[rel] = ("file", stat.S_IMODE(st.st_mode), p.read_bytes())
    out["."] = ("dir", stat.S_IMODE(root.stat().st_mode), b"")
    return out


@pytest.mark.timeout(150)
def test_nested_read_only_directories_round_trip_through_rollback_and_undo(nobody: OtherUser) -> None:
    ws = nobody.top / "ws"
    nobody.run("mkdir", ws)
    d = nobody.start_daemon(nobody.top / "home" / "snapd")
    try:

        def sh(script: str) -> None:
            nobody.run("sh", "-ec", script, cwd=ws)

        sh(
            "mkdir -p a/b gone/deep; echo v1 > a/b/f; echo old > a/b/old; echo g > gone/deep/g;"
            " chmod 555 a/b a gone/deep; chmod 500 gone; chmod 555 ."
        )
        d.ctl("watch", str(ws))
        m = d.ctl_json("mark", "m", cwd=ws)["id"]
        at_m = _tree(ws)
        sh(
            "chmod 755 . a a/b gone gone/deep; echo v2 > a/b/f; rm a/b/old; echo new > a/b/new;"
            " rm -r gone; mkdir -p r/s; echo x > r/s/x; chmod 555 r/s r; chmod 700 a; chmod 511 ."
        )
        d.ctl("mark", "n", cwd=ws)
        before = _tree(ws)

        cp = d.ctl("rollback", "--to", m, "--yes", "--json", cwd=ws, check=False)
        assert cp.returncode == 0, describe(cp) + d.log()[-3000:]
        assert _tree(ws) == at_m, json.loads(cp.stdout)["lines"]
        cp = d.ctl("undo", "--yes", "--json", cwd=ws, check=False)
        assert cp.returncode == 0, describe(cp) + d.log()[-3000:]
        assert _tree(ws) == before, json.loads(cp.stdout)["lines"]
    finally:
        assert d.stop() == 0, d.log()[-3000:]


# -- crash recovery with the root's mode and the opened read-only directories -----------------------


@pytest.mark.timeout(600)
def test_a_crash_after_any_step_leaves_modes_as_at_the_mark_after_recovery(tmp_path: Path) -> None:
    """The plan opens ro/ for its owner, writes inside, closes it and sets the root's mode:
    killed after every step, the next start must leave every mode as at M (root's included)."""
    n = crashed = 0
    while True:
        n += 1
        assert n < 60, "the rollback never completed"
        base = tmp_path / f"n{n}"
        root = base / "ws"
        (root / "ro").mkdir(parents=True)
        (root / "ro" / "f").write_text("v1\n")
        (root / "ro").chmod(0o555)
        root.chmod(0o750)
        home = base / "snapd-home"
        env = base_env(home)
        d = start_daemon(home, env)
        d.ctl("watch", str(root))
        d.ctl("mark", "a", "-w", str(root))
        target = _tree(root)
        (root / "ro").chmod(0o755)
        (root / "ro" / "f").write_text("v2\n")
        (root / "ro" / "g").write_text("new\n")
        (root / "ro").chmod(0o555)
        root.chmod(0o700)
        d.ctl("mark", "b", "-w", str(root))
        before = _tree(root)
        assert d.stop() == 0
        d = start_daemon(home, env, crash_after=f"apply.:{n}")
        try:
            with Client(d.endpoint, 20.0) as c:
                c.call("rollback_apply", workspace=os.fsencode(root), to="a")
            completed = True
        except SnapdError:
            completed = False
        if completed:
            assert d.stop() == 0
            assert _tree(root) == target
            break
        crashed += 1
        assert d.wait_exit(20) == 86, d.log()[-3000:]
        d2 = start_daemon(home, env)
        try:

            def ready(d: Daemon = d2, r: Path = root) -> dict[str, Any] | None:
                st = d.call("status")
                w = next(x for x in st["workspaces"] if x["root"] == str(r))
                return st if w.get("state") == "ready" else None

            wait_for(ready, 30)
            now = _tree(root)
            assert now in (target, before), (n, now, d2.log()[-2000:])
        finally:
            assert d2.stop() == 0
    assert crashed >= 3, crashed


# -- paths ignored now but captured at M: odd kinds, limited rollbacks --------------------------------


def test_extras_of_odd_kinds_under_a_now_ignored_directory(daemon: Daemon, ws: Path) -> None:
    write(ws / "build" / "out.txt", "v1\n")
    os.symlink("/etc/passwd", ws / "build" / "link")
    write(ws / "a.txt", "a1\n")
    m = mark(daemon, ws, "m")
    write(ws / ".gitignore", "build/\n")
    write(ws / "build" / "out.txt", "v2\n", 0o600)
    (ws / "build" / "link").unlink()
    os.symlink("/etc/hostname", ws / "build" / "link")
    os.mkfifo(ws / "build" / "pipe")
    write(ws / "build" / "deep" / "new.txt", "new\n")
    write(ws / "a.txt", "a2\n")
    mark(daemon, ws, "n")

    code, r = rollback(daemon, ws, "--to", m, "--", "build/out.txt")  # limited: only this file
    assert code == 0, (r["lines"], r["kept"], r["left"])
    assert (ws / "build" / "out.txt").read_text() == "v1\n"
    assert (ws / "a.txt").read_text() == "a2\n" and (ws / ".gitignore").exists()
    code, r = rollback(daemon, ws, "--to", m)
    assert code == 10 and paths_of(r["kept"]) == {"build/pipe"}, r
    assert os.readlink(ws / "build" / "link") == "/etc/passwd"
    assert not (ws / "build" / "deep").exists() and not (ws / ".gitignore").exists()
    code, r = undo(daemon, ws)
    assert code == 0, r
    assert (ws / "build" / "out.txt").read_text() == "v1\n"  # the state before the last rollback
    assert os.readlink(ws / "build" / "link") == "/etc/hostname"
    assert (ws / "build" / "deep" / "new.txt").read_text() == "new\n"
    assert (ws / ".gitignore").read_text() == "build/\n" and (ws / "a.txt").read_text() == "a2\n"
    code, r = undo(daemon, ws)  # a second undo redoes; the FIFO was there then too, unchanged
    assert code == 0 and not r["kept"], r
    assert not (ws / "build" / "deep").exists() and stat.S_ISFIFO((ws / "build" / "pipe").lstat().st_mode)

