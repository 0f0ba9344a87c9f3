"""Exact or loud: a rollback leaves the tree as it was at the mark, or says (non-zero) what differs.

One test per rule of the rollback rules (docs/rollback.md) that an earlier version broke while exiting 0: what
a mark's own rules ignored is never touched; what they captured is held by the pre-rollback
mark before it is written or deleted, whatever today's rules; uncapturable paths that did not
exist at the mark block (or go with ``--force``); the root's mode; repeated rollbacks and
undo; read-only directories (as another uid: root ignores modes); other sessions' changes.
A real daemon and the real CLI throughout.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from e2e_helpers import Daemon, OtherUser, describe, start_daemon, write
from e2e_helpers import cli_mark as mark
from e2e_helpers import cli_rollback as rollback
from e2e_helpers import cli_undo as undo
from e2e_helpers import listed as paths

pytestmark = pytest.mark.timeout(90)














# -- what M's rules ignored is never touched -------------------------------------------------------


def test_a_file_ignored_at_the_mark_survives_a_rule_change(daemon: Daemon, ws: Path) -> None:
    write(ws / ".gitignore", "local.cfg\n")
    write(ws / "local.cfg", "SECRET=1\n")  # not precious (a .env would be captured at M)
    write(ws / "app.py", "v1\n")
    m = mark(daemon, ws, "m")
    write(ws / ".gitignore", "")  # now local.cfg is captured, but it existed at M: not a new file
    write(ws / "app.py", "v2\n")

    code, r = rollback(daemon, ws, "--to", m)
    assert code == 0, r
    assert (ws / "local.cfg").read_text() == "SECRET=1\n"
    assert (ws / ".gitignore").read_text() == "local.cfg\n"
    assert (ws / "app.py").read_text() == "v1\n"
    assert "local.cfg" in paths(r["left"]), r


def test_undo_restores_what_was_ignored_before_the_rollback(daemon: Daemon, ws: Path) -> None:
    write(ws / ".gitignore", "")
    write(ws / "app.py", "v1\n")
    m = mark(daemon, ws, "m")
    write(ws / ".gitignore", ".env\n")
    write(ws / ".env", "made after M, ignored\n")
    write(ws / "app.py", "v2\n")

    code, r = rollback(daemon, ws, "--to", m)
    assert code == 0, r
    # Not ignored at M and absent then: it goes, but only after the pre-rollback mark held it.
    assert not (ws / ".env").exists()
    assert (ws / ".gitignore").read_text() == ""
    code, r = undo(daemon, ws)
    assert code == 0, r
    assert (ws / ".env").read_text() == "made after M, ignored\n"
    assert (ws / ".gitignore").read_text() == ".env\n"
    assert (ws / "app.py").read_text() == "v2\n"


def test_a_file_captured_at_the_mark_but_ignored_now_is_held_then_restored(daemon: Daemon, ws: Path) -> None:
    write(ws / "build.txt", "v1\n")
    m = mark(daemon, ws, "m")
    write(ws / ".gitignore", "build.txt\n")
    write(ws / "build.txt", "v2, ignored now\n", 0o600)

    code, r = rollback(daemon, ws, "--to", m)
    assert code == 0, r
    assert (ws / "build.txt").read_text() == "v1\n"
    assert stat.S_IMODE((ws / "build.txt").stat().st_mode) == 0o644
    assert not (ws / ".gitignore").exists()
    code, r = undo(daemon, ws)
    assert code == 0, r
    assert (ws / "build.txt").read_text() == "v2, ignored now\n"
    assert stat.S_IMODE((ws / "build.txt").stat().st_mode) == 0o600


def test_info_exclude_is_judged_as_it_was_at_the_mark(daemon: Daemon, tmp_path: Path) -> None:
    """Rules that live outside the tree (here git's info/exclude) are recorded by the mark."""
    repo = tmp_path / "repo"
    repo.mkdir()
    subprocess.run(["git", "init", "-q", str(repo)], check=True, env=daemon.env)
    (repo / ".git" / "info").mkdir(exist_ok=True)
    (repo / ".git" / "info" / "exclude").write_text("local.cfg\n")
    write(repo / "local.cfg", "mine\n")
    write(repo / "a.txt", "a1\n")
    repo = repo.resolve()
    daemon.ctl("watch", repo)
    m = mark(daemon, repo, "m")
    (repo / ".git" / "info" / "exclude").write_text("")  # local.cfg is captured from now on
    write(repo / "a.txt", "a2\n")
    mark(daemon, repo, "n")

    code, r = rollback(daemon, repo, "--to", m)
    assert code == 0, r
    assert (repo / "local.cfg").read_text() == "mine\n"
    assert (repo / "a.txt").read_text() == "a1\n"
    assert "local.cfg" in paths(r["left"]), r


def test_a_new_package_with_ignored_bytecode_rolls_back_with_exit_0(daemon: Daemon, ws: Path) -> None:
    write(ws / ".gitignore", "__pycache__/\n")
    write(ws / "main.py", "v1\n")
    m = mark(daemon, ws, "m")
    write(ws / "pkg" / "__init__.py", "x = 1\n")
    write(ws / "pkg" / "__pycache__" / "__init__.cpython-311.pyc", b"\x00bytecode")
    write(ws / "main.py", "v2\n")

    for force in ((), ("--force",)):
        code, r = rollback(daemon, ws, "--to", m, *force)
        assert code == 0, r
        assert not (ws / "pkg" / "__init__.py").exists()
        assert (ws / "pkg" / "__pycache__" / "__init__.cpython-311.pyc").read_bytes() == b"\x00bytecode"
        assert (ws / "main.py").read_text() == "v1\n"
        assert {"pkg", "pkg/__pycache__"} <= paths(r["left"]), r
        assert r["kept"] == [], r


def test_ignored_data_where_the_mark_has_something_else_is_kept_and_named(daemon: Daemon, ws: Path) -> None:
    """A symlink named like a dir-only pattern is captured; a directory of that name is not.
    Rolling back to the symlink must not touch the ignored directory: kept, with the reason."""
    write(ws / ".gitignore", "build/\n")
    os.symlink("elsewhere", ws / "build")
    m = mark(daemon, ws, "m")
    (ws / "build").unlink()
    write(ws / "build" / "out.o", "ignored output\n")

    code, r = rollback(daemon, ws, "--to", m)
    assert code == 10, r
    kept = {k["path"]: k["reason"] for k in r["kept"]}
    assert "build/out.o, ignored at the mark" in kept.get("build", ""), r
    assert (ws / "build" / "out.o").read_text() == "ignored output\n"
    assert r["conflicts"] == [], r


def test_undo_to_a_mark_that_holds_a_path_its_own_rules_ignore(daemon: Daemon, ws: Path) -> None:
    """A pre-rollback mark may hold a path its own rules ignore (held because the rollback's
    target captured it). Undoing to that mark must treat the path like any other it holds."""
    write(ws / ".gitignore", "*.log\nbuild/\n")
    base = mark(daemon, ws, "base")
    write(ws / ".gitignore", "*.log\nx\n")
    code, r = rollback(daemon, ws, "--to", base)
    assert code == 0, r
    (ws / "build").mkdir()
    os.symlink("a", ws / "build" / "x")
    code, r = undo(daemon, ws)  # back to "*.log x": build/ is held, build/x (ignored by x) left
    assert code == 0, r
    write(ws / ".gitignore", "*.log\nbuild/\n")
    code, r = undo(daemon, ws)  # to the state before the first undo, which held build/
    assert code == 0, r
    assert (ws / ".gitignore").read_text() == "*.log\nbuild/\n"
    assert os.readlink(ws / "build" / "x") == "a"


# -- what cannot be captured blocks, wherever it is --------------------------------------------------


def test_uncapturable_paths_made_after_the_mark_block_unless_forced(
    capped_daemon: Daemon, capped_ws: Path
) -> None:
    d, ws = capped_daemon, capped_ws
    write(ws / "a.txt", "a\n")
    m = mark(d, ws, "m")
    write(ws / "big.bin", b"B" * 4096)
    os.mkfifo(ws / "pipe")
    write(ws / "new" / "big.bin", b"N" * 4096)

    code, r = rollback(d, ws, "--to", m)
    assert code == 10, r
    assert {"big.bin", "pipe"} <= paths(r["kept"]), r
    assert "new" in paths(r["kept"]) or "new/big.bin" in paths(r["kept"]), r
    assert (ws / "big.bin").exists() and (ws / "pipe").exists() and (ws / "new" / "big.bin").exists()

    code, r = rollback(d, ws, "--to", m, "--force")
    assert code == 0, r
    assert sorted(os.listdir(ws)) == ["a.txt"], r


def test_a_path_not_captured_at_the_mark_is_never_deleted_by_a_rollback_to_it(
    capped_daemon: Daemon, capped_ws: Path
) -> None:
    """Over the cap (or a FIFO) at M: M's tree records it as there but not captured. Changed
    since, the rollback cannot restore it and says so (kept, with or without --force); as it
    was, there is nothing to say. (It was deleted, exit 0, as if it had not existed at M.)"""
    d, ws = capped_daemon, capped_ws
    write(ws / "big.bin", b"B" * 4096)
    os.mkfifo(ws / "pipe")
    write(ws / "a.txt", "a\n")
    m = mark(d, ws, "m")
    write(ws / "big.bin", "small now\n")  # in place: capturable now, not restorable
    write(ws / "a.txt", "b\n")

    for extra in ((), ("--force",)):
        code, r = rollback(d, ws, "--to", m, *extra)
        assert code == 10 and paths(r["kept"]) == {"big.bin"}, r
        assert "not captured at the mark (over size cap)" in r["kept"][0]["reason"], r
        assert (ws / "big.bin").read_text() == "small now\n" and (ws / "a.txt").read_text() == "a\n"
        assert stat.S_ISFIFO((ws / "pipe").lstat().st_mode)  # there at M, as it was: untouched

    files = {f["path"]: f for f in d.ctl_json("diff", m, cwd=ws)["files"]}
    assert files["big.bin"]["not_captured"] == ["over size cap"], files
    cp = d.ctl("cat", m, "big.bin", cwd=ws, check=False)
    assert cp.returncode != 0 and b"not captured (over size cap)" in cp.stderr, describe(cp)


# -- the root's own mode ----------------------------------------------------------------------------


def test_the_root_mode_is_restored(daemon: Daemon, ws: Path) -> None:
    ws.chmod(0o750)
    write(ws / "a.txt", "a\n")
    m = mark(daemon, ws, "m")
    ws.chmod(0o700)
    code, r = rollback(daemon, ws, "--to", m)
    assert code == 0, r
    assert stat.S_IMODE(ws.stat().st_mode) == 0o750


# -- repeated rollbacks and undo ---------------------------------------------------------------------


def test_repeating_a_rollback_keeps_undo_pointing_at_the_work_it_replaced(daemon: Daemon, ws: Path) -> None:
    write(ws / "a.txt", "at M\n")
    m = mark(daemon, ws, "m")
    write(ws / "a.txt", "the work\n")
    write(ws / "b.txt", "new work\n")

    code, first = rollback(daemon, ws, "--to", m)
    assert code == 0 and first["pre_rollback"], first
    code, second = rollback(daemon, ws, "--to", m)
    assert code == 0, second
    assert second["pre_rollback"] is None and second["applied"] == 0, second
    cp = daemon.ctl("rollback", "--to", m, "--yes", cwd=ws)
    assert b"nothing to change" in cp.stdout, describe(cp)

    code, r = undo(daemon, ws)
    assert code == 0, r
    assert (ws / "a.txt").read_text() == "the work\n"
    assert (ws / "b.txt").read_text() == "new work\n"
    code, r = undo(daemon, ws)  # a second undo redoes
    assert code == 0, r
    assert (ws / "a.txt").read_text() == "at M\n" and not (ws / "b.txt").exists()
    # Older states stay reachable by name: before the second undo, the first undo, the rollback.
    states = [("pre-rollback", b"the work\n"), ("pre-rollback~1", b"at M\n")]
    states.append(("pre-rollback~2", b"the work\n"))
    for ref, want in states:
        cp = daemon.ctl("cat", ref, "a.txt", cwd=ws)
        assert cp.stdout == want, describe(cp)


def test_a_root_mode_change_between_two_rollbacks_is_a_change(daemon: Daemon, ws: Path) -> None:
    """The root's mode is not in the tree, but changing it alone between two rollbacks to the
    same mark is a change: the second takes its own pre-rollback mark, and undo returns there
    (found by the randomized model)."""
    ws.chmod(0o755)
    write(ws / "a.txt", "at M\n")
    m = mark(daemon, ws, "m")
    write(ws / "a.txt", "the work\n")
    code, first = rollback(daemon, ws, "--to", m)
    assert code == 0, first
    ws.chmod(0o700)
    code, second = rollback(daemon, ws, "--to", m)
    assert code == 0 and second["pre_rollback"] not in (None, first["pre_rollback"]), (first, second)
    assert stat.S_IMODE(ws.stat().st_mode) == 0o755
    code, r = undo(daemon, ws)
    assert code == 0, r
    assert stat.S_IMODE(ws.stat().st_mode) == 0o700 and (ws / "a.txt").read_text() == "at M\n"


def test_a_forced_repeat_shares_the_first_rollbacks_pre_rollback_mark(tmp_path: Path) -> None:
    home = tmp_path / "snapd-home"
    home.mkdir(mode=0o700)
    d = start_daemon(home)
    try:
        ws = (tmp_path / "ws").resolve()
        ws.mkdir()
        d.ctl("watch", ws)
        write(ws / "a.txt", "at M\n")
        m = mark(d, ws, "m")
        write(ws / "a.txt", "the work\n")
        os.mkfifo(ws / "pipe")
        code, first = rollback(d, ws, "--to", m)
        assert code == 10 and "pipe" in paths(first["kept"]), first
        assert (ws / "a.txt").read_text() == "at M\n"
        code, second = rollback(d, ws, "--to", m, "--force")  # only the FIFO is left to change
        assert code == 0, second
        assert second["pre_rollback"] == first["pre_rollback"], (first, second)
        code, r = undo(d, ws)
        # the forced rollback deleted the FIFO, which no mark could hold: undo restores the rest
        # and says the FIFO is not back (it exited 0 before uncaptured paths were recorded)
        assert code == 10 and paths(r["kept"]) == {"pipe"}, r
        assert (ws / "a.txt").read_text() == "the work\n" and not os.path.lexists(ws / "pipe")
    finally:
        assert d.stop() == 0, d.log()[-3000:]


# -- read-only directories (another uid: root ignores modes) --------------------------------------


class Acting:
    """A workspace of uid 65534's and its daemon (root ignores modes: permission tests)."""

    def __init__(self, who: OtherUser) -> None:
        self.who, self.ws = who, who.top / "ws"
        who.run("mkdir", self.ws)
        self.d = who.start_daemon(who.top / "home" / "snapd")

    def sh(self, script: str) -> None:
        self.who.run("sh", "-ec", script, cwd=self.ws)

    def ctl(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[bytes]:
        return self.d.ctl(*args, cwd=self.ws, check=check)

    def ctl_json(self, *args: str) -> Any:
        return self.d.ctl_json(*args, cwd=self.ws)

    def stop(self) -> None:
        assert self.d.stop() == 0, self.d.log()[-3000:]


@pytest.fixture
def acting(nobody: OtherUser) -> Iterator[Acting]:
    a = Acting(nobody)
    try:
        yield a
    finally:
        a.stop()


@pytest.mark.timeout(120)
def test_files_in_read_only_directories_are_restored(acting: Acting) -> None:
    o = acting
    o.sh("mkdir ro sub; echo 'at M' > ro/f; echo 'inner at M' > sub/g")
    o.sh("chmod 555 ro; chmod 500 sub; chmod 555 .")
    o.ctl("watch", str(o.ws))
    m = o.ctl_json("mark", "m")["id"]
    o.sh(
        "chmod 755 . ro; chmod 700 sub; echo changed > ro/f; echo changed > sub/g; echo new > ro/new;"
        " chmod 555 ro; chmod 500 sub; chmod 555 ."
    )
    o.ctl("mark", "n")
    cp = o.ctl("rollback", "--to", m, "--yes", check=False)
    assert cp.returncode == 0, describe(cp) + o.d.log()[-3000:]
    assert (o.ws / "ro" / "f").read_text() == "at M\n"
    assert not (o.ws / "ro" / "new").exists()
    assert (o.ws / "sub" / "g").read_text() == "inner at M\n"
    assert stat.S_IMODE((o.ws / "ro").stat().st_mode) == 0o555
    assert stat.S_IMODE((o.ws / "sub").stat().st_mode) == 0o500
    assert stat.S_IMODE(o.ws.stat().st_mode) == 0o555


# -- another session's work -----------------------------------------------------------------------------


def test_the_plan_names_other_sessions_whose_changes_it_reverts(daemon: Daemon, ws: Path) -> None:
    write(ws / "a.txt", "a0\n")
    write(ws / "b.txt", "b0\n")
    start = mark(daemon, ws, "turn-start", "--session", "S1", "--agent", "claude")
    write(ws / "a.txt", "a1 by S1\n")
    mark(daemon, ws, "turn-start", "--session", "S2", "--agent", "codex")
    write(ws / "b.txt", "b1 by S2\n")
    mark(daemon, ws, "turn-end", "--session", "S2", "--agent", "codex")
    mark(daemon, ws, "turn-end", "--session", "S1", "--agent", "claude")

    cp = daemon.ctl("rollback", "--to", start, "--dry-run", "--json", cwd=ws)
    r = json.loads(cp.stdout)
    others = {o["session"]: o for o in r["other_sessions"]}
    assert set(others) == {"S2"}, r
    assert others["S2"]["agent"] == "codex" and others["S2"]["paths"] >= 1, r
    assert "b.txt" in others["S2"]["examples"], r
    cp = daemon.ctl("rollback", "--to", start, "--dry-run", cwd=ws)
    assert b"also reverts" in cp.stderr and b"session S2 (agent codex)" in cp.stderr, describe(cp)


# -- directories that could not be listed (another uid: root lists anything) ---------------------------


@pytest.mark.timeout(120)
def test_a_directory_unlisted_at_the_mark_keeps_its_contents(acting: Acting) -> None:
    o = acting
    o.sh("mkdir d; echo h1 > d/h; chmod 311 d; echo a1 > a.txt")
    o.ctl("watch", str(o.ws))
    a = o.ctl_json("mark", "a")
    st = o.ctl_json("status")
    assert "d" in st["workspaces"][0]["skipped_examples"], st  # reported, never silent
    o.sh("chmod 755 d; echo h2 > d/h; echo new > d/new; echo a2 > a.txt")
    b = o.ctl_json("mark", "b")["id"]
    cp = o.ctl("cat", b, "d/h")  # listable again: watched and listed, so its edits are captured
    assert cp.stdout == b"h2\n", describe(cp)

    r = json.loads(o.ctl("rollback", "--to", a["id"], "--yes", "--json").stdout)
    assert (o.ws / "a.txt").read_text() == "a1\n"
    assert stat.S_IMODE((o.ws / "d").stat().st_mode) == 0o311
    assert (o.ws / "d" / "h").read_text() == "h2\n" and (o.ws / "d" / "new").exists()  # root reads
    assert {"d/h", "d/new"} <= paths(r["left"]), r

    # Unreadable now, with contents M had: they cannot be checked, so they are kept.
    o.sh("chmod 755 d; rm d/new")
    c = o.ctl_json("mark", "c")["id"]
    o.sh("echo h3 > d/h; chmod 311 d")
    cp = o.ctl("rollback", "--to", c, "--yes", "--json", check=False)
    r = json.loads(cp.stdout)
    assert cp.returncode == 10, describe(cp)
    assert any(p.startswith("d") for p in paths(r["kept"])), r
    assert (o.ws / "d" / "h").read_text() == "h3\n"


@pytest.mark.timeout(120)
def test_a_directory_unlisted_now_is_kept_with_what_appeared_in_it(acting: Acting) -> None:
    """Listable at M, unlistable now (311): a file made in it since can be neither seen nor held,
    so the rollback changes nothing there and names the directory (it set the directory's mode
    back and exited 0, leaving the new file unnamed)."""
    o = acting
    o.sh("mkdir -m 500 a; echo x > b.txt")
    o.ctl("watch", str(o.ws))
    m = o.ctl_json("mark", "m")["id"]
    o.sh("chmod 311 a; echo new > a/new; echo y > b.txt")
    cp = o.ctl("rollback", "--to", m, "--yes", "--json", check=False)
    r = json.loads(cp.stdout)
    assert cp.returncode == 10 and paths(r["kept"]) == {"a"}, describe(cp)
    assert "cannot be listed now" in r["kept"][0]["reason"], r
    assert (o.ws / "b.txt").read_text() == "x\n"
    assert stat.S_IMODE((o.ws / "a").stat().st_mode) == 0o311 and (o.ws / "a" / "new").exists()


@pytest.mark.timeout(120)
def test_a_directory_unlisted_at_the_mark_and_now_is_listed_as_left(acting: Acting) -> None:
    """Unlistable (311) at M and now: what it holds is unknown on both sides, so whatever changed
    in it is left, and the reply says so by naming the directory (it said nothing, exit 0)."""
    o = acting
    o.sh("mkdir d; echo h > d/h; chmod 311 d; echo x > a.txt")
    o.ctl("watch", str(o.ws))
    m = o.ctl_json("mark", "m")["id"]
    o.sh("echo new > d/new; echo y > a.txt")
    cp = o.ctl("rollback", "--to", m, "--yes", "--json", check=False)
    r = json.loads(cp.stdout)
    assert cp.returncode == 0 and "d" in paths(r["left"]), describe(cp)
    assert (o.ws / "a.txt").read_text() == "x\n" and (o.ws / "d" / "new").exists()


@pytest.mark.timeout(120)
def test_a_swapped_unlistable_directory_keeps_no_names_it_could_not_see(acting: Acting) -> None:
    """``a`` made unsearchable (0), then swapped with ``b``: a path below a directory that cannot
    be searched answers no ``lstat``, so whether it is there is unknown, and the mark must claim
    nothing there. It recorded ``a/x`` (written in ``a`` after the chmod; with no stat cache row
    for it, no scan saw it go with the swap) and ``b/y`` (a name of the directory ``b`` was before
    the swap, looked up by name) as "there, not captured": neither was, and a rollback to
    the mark after ``rm -rf a b`` exited 10 ("not captured at the mark: cannot be restored") with
    the tree exactly as at the mark. Seed 20260508/0 of the model tier as uid 65534, shrunk."""
    o = acting
    o.sh("mkdir a b; echo x1 > a/x; echo y1 > b/y")
    o.ctl("watch", str(o.ws))
    first = o.ctl_json("mark", "first")["id"]
    o.sh("chmod 0 a")
    (o.ws / "a" / "x").write_text("x2\n")  # by root: an event the daemon (65534) cannot follow up
    o.ctl("mark", "unsearchable")
    o.sh("mv a t; mv b a; mv t b")
    m = o.ctl_json("mark", "m")["id"]

    diff = o.ctl_json("diff", first, m)
    claimed = {f["path"]: f for f in diff["files"] if f.get("not_captured")}
    assert not claimed, f"the mark claims paths it never saw: {claimed}"
    assert o.ctl("cat", m, "a/y").stdout == b"y1\n"

    o.sh("chmod 755 b; rm -rf a b")
    cp = o.ctl("rollback", "--to", m, "--yes", "--json", check=False)
    r = json.loads(cp.stdout)
    assert cp.returncode == 0 and not r["kept"], describe(cp)
    assert (o.ws / "a" / "y").read_text() == "y1\n" and not (o.ws / "a" / "x").exists()
    assert stat.S_IMODE((o.ws / "b").stat().st_mode) == 0 and os.listdir(o.ws / "b") == []
