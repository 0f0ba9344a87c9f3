"""Exact against git: a mark records the names of the top-most ignored entries present.

A path the mark's rules ignore but that did not exist at the mark is deleted by a rollback to it,
like any path absent then (held first by the pre-rollback mark, so ``undo`` brings it back), as
``git checkout`` of that commit would. One that existed at the mark is left, and one ignored both
at the mark and now is never touched (docs/rollback.md, "M's rules"). A real daemon and the real
CLI throughout; the names come from the daemon's own captures (events, scans, a restart).
"""

from __future__ import annotations

import os
import sqlite3
import subprocess
import time
from pathlib import Path

import pytest
from e2e_helpers import Daemon, start_daemon, wait_for, write
from e2e_helpers import cli_mark as mark
from e2e_helpers import cli_rollback as rollback
from e2e_helpers import cli_undo as undo
from e2e_helpers import listed as paths

pytestmark = pytest.mark.timeout(90)


def test_a_path_ignored_at_the_mark_that_did_not_exist_then_is_deleted(daemon: Daemon, ws: Path) -> None:
    """The issue's repro: ``gen`` was ignored at M and absent; tracked (captured) since. The
    rollback left it with exit 0 ("ignored at the mark"); git checkout deletes it."""
    write(ws / ".gitignore", "gen\n")
    write(ws / "app.py", "v1\n")
    m = mark(daemon, ws, "m")
    write(ws / ".gitignore", "")
    write(ws / "gen", "generated, captured now\n")
    write(ws / "app.py", "v2\n")
    mark(daemon, ws, "n")

    code, r = rollback(daemon, ws, "--to", m)
    assert code == 0, r
    assert not (ws / "gen").exists(), r
    assert (ws / ".gitignore").read_text() == "gen\n"
    assert (ws / "app.py").read_text() == "v1\n"
    assert r["left"] == [] and r["kept"] == [], r

    code, r = undo(daemon, ws)  # the pre-rollback mark held it
    assert code == 0, r
    assert (ws / "gen").read_text() == "generated, captured now\n"
    assert (ws / ".gitignore").read_text() == ""
    assert (ws / "app.py").read_text() == "v2\n"


def test_a_directory_ignored_at_the_mark_that_did_not_exist_then_is_deleted(daemon: Daemon, ws: Path) -> None:
    write(ws / ".gitignore", "gen/\n")
    m = mark(daemon, ws, "m")
    write(ws / ".gitignore", "")
    write(ws / "gen" / "a.txt", "a\n")
    write(ws / "gen" / "sub" / "b.txt", "b\n")

    code, r = rollback(daemon, ws, "--to", m)
    assert code == 0, r
    assert not (ws / "gen").exists(), r
    assert r["left"] == [] and r["kept"] == [], r
    code, r = undo(daemon, ws)
    assert code == 0, r
    assert (ws / "gen" / "sub" / "b.txt").read_text() == "b\n"


def test_info_exclude_at_the_mark_hid_what_was_not_there_then(daemon: Daemon, tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    subprocess.run(["git", "init", "-q", str(repo)], check=True, env=daemon.env)
    (repo / ".git" / "info").mkdir(exist_ok=True)
    (repo / ".git" / "info" / "exclude").write_text("local.cfg\nscratch/\n")
    write(repo / "a.txt", "a1\n")
    repo = repo.resolve()
    daemon.ctl("watch", repo)
    m = mark(daemon, repo, "m")
    (repo / ".git" / "info" / "exclude").write_text("")
    write(repo / "local.cfg", "made after M\n")
    write(repo / "scratch" / "x", "made after M\n")
    write(repo / "a.txt", "a2\n")
    mark(daemon, repo, "n")

    code, r = rollback(daemon, repo, "--to", m)
    assert code == 0, r
    assert not (repo / "local.cfg").exists() and not (repo / "scratch").exists(), r
    assert (repo / "a.txt").read_text() == "a1\n"
    assert r["left"] == [], r


def test_an_ignored_entry_that_existed_at_the_mark_is_left(daemon: Daemon, ws: Path) -> None:
    """What existed at M, ignored then, is never deleted: a file, a directory (and what is in it
    now), and a symlink where M had an ignored directory of that name (a dir-only pattern: it
    was loud, exit 10, when marks recorded no names)."""
    write(ws / ".gitignore", "gen\nout/\nsrc/__pycache__/\n")
    write(ws / "gen", "was there\n")
    write(ws / "out" / "o.bin", "was there\n")
    write(ws / "src" / "__pycache__" / "m.pyc", "bytecode\n")
    write(ws / "src" / "m.py", "v1\n")
    m = mark(daemon, ws, "m")
    write(ws / ".gitignore", "src/__pycache__/\n")
    write(ws / "out" / "new.bin", "made after M\n")
    write(ws / "gen", "changed after M\n")
    for p in (ws / "src" / "__pycache__").iterdir():
        p.unlink()
    (ws / "src" / "__pycache__").rmdir()
    os.symlink("nowhere", ws / "src" / "__pycache__")
    write(ws / "src" / "m.py", "v2\n")

    code, r = rollback(daemon, ws, "--to", m)
    assert code == 0, r
    assert (ws / "gen").read_text() == "changed after M\n"
    assert (ws / "out" / "new.bin").read_text() == "made after M\n"
    assert os.readlink(ws / "src" / "__pycache__") == "nowhere"
    assert (ws / "src" / "m.py").read_text() == "v1\n"
    assert {"gen", "out", "src/__pycache__"} <= paths(r["left"]), r
    assert r["kept"] == [], r


def test_a_symlink_named_like_an_ignored_directory_made_since_is_deleted(daemon: Daemon, ws: Path) -> None:
    """Nothing was at ``build`` at M (M's rules ignore a directory of that name): the symlink made
    since goes, exit 0. Without names it was kept (exit 10): an ignored directory may have been there."""
    write(ws / ".gitignore", "build/\n")
    write(ws / "a.txt", "a\n")
    m = mark(daemon, ws, "m")
    os.symlink("a.txt", ws / "build")

    code, r = rollback(daemon, ws, "--to", m)
    assert code == 0, r
    assert not os.path.lexists(ws / "build"), r
    assert r["kept"] == [], r


def test_a_path_ignored_at_the_mark_and_now_is_never_touched(daemon: Daemon, ws: Path) -> None:
    """Made after M, ignored by M's rules and today's: not deleted (node_modules, build output)."""
    write(ws / ".gitignore", "node_modules/\n*.log\n")
    write(ws / "app.py", "v1\n")
    m = mark(daemon, ws, "m")
    write(ws / "node_modules" / "dep" / "index.js", "made after M\n")
    write(ws / "run.log", "made after M\n")
    write(ws / "app.py", "v2\n")
    write(ws / "pkg" / "x.log", "made after M, in a new directory\n")

    code, r = rollback(daemon, ws, "--to", m)
    assert code == 0, r
    assert (ws / "node_modules" / "dep" / "index.js").read_text() == "made after M\n"
    assert (ws / "run.log").read_text() == "made after M\n"
    assert (ws / "pkg" / "x.log").read_text() == "made after M, in a new directory\n"
    assert (ws / "app.py").read_text() == "v1\n"
    assert "pkg" in paths(r["left"]), r


def test_the_names_are_right_after_a_restart(tmp_path: Path) -> None:
    """The names at a mark taken after a restart: the set recorded beside the head (``keep/old``,
    in a directory the reconcile scan does not list again: nothing changed there), corrected by
    what that scan found while the daemon was down (``gen`` made, ``sub/gen`` removed)."""
    home = tmp_path / "snapd-home"
    root = tmp_path / "ws"
    root.mkdir()
    root = root.resolve()
    write(root / ".gitignore", "gen\nold\n")
    write(root / "keep" / "old", "ignored, there at M\n")
    write(root / "keep" / "a.txt", "a\n")
    old = time.time() - 3600  # outside the racy window: the restart trusts what did not change
    for p in (root / "keep" / "old", root / "keep" / "a.txt", root / "keep", root / ".gitignore"):
        os.utime(p, (old, old))
    changed = (root / "keep").stat().st_ctime_ns  # a listing is trusted once its ctime is 2 s old
    wait_for(lambda: time.time_ns() > changed + 2_200_000_000, what="keep/ outside the racy window")
    d = start_daemon(home)
    try:
        d.ctl("watch", root)
        write(root / "sub" / "gen", "ignored, made before the stop\n")
        mark(d, root, "settled")
    finally:
        assert d.stop() == 0
    write(root / "gen", "ignored, made while stopped\n")
    (root / "sub" / "gen").unlink()
    d = start_daemon(home)
    try:
        m = mark(d, root, "m")  # names: keep/old, gen
        write(root / ".gitignore", "")
        write(root / "sub" / "gen", "made after M\n")
        write(root / "gen", "changed after M\n")
        write(root / "keep" / "old", "changed after M\n")
        code, r = rollback(d, root, "--to", m)
        assert code == 0, r
        assert (root / "gen").read_text() == "changed after M\n"
        assert (root / "keep" / "old").read_text() == "changed after M\n"
        assert not (root / "sub" / "gen").exists(), r
        assert {"gen", "keep/old"} <= paths(r["left"]), r
    finally:
        assert d.stop() == 0


def test_marks_from_before_names_were_recorded_keep_the_old_rule(tmp_path: Path) -> None:
    """A store upgraded from format 7: its marks have no names, so a rollback to one leaves what
    its rules ignore (listed), as before. The workspace's first start lists its directories once
    to learn its current set, so the marks taken from then on have names."""
    home = tmp_path / "snapd-home"
    root = tmp_path / "ws"
    root.mkdir()
    root = root.resolve()
    write(root / ".gitignore", "gen\nold\n")
    write(root / "sub" / "old", "there before the upgrade\n")
    old = time.time() - 3600  # outside the racy window: the restart trusts what did not change
    for p in (root / "sub" / "old", root / "sub", root / ".gitignore"):
        os.utime(p, (old, old))
    changed = (root / "sub").stat().st_ctime_ns
    wait_for(lambda: time.time_ns() > changed + 2_200_000_000, what="sub/ outside the racy window")
    d = start_daemon(home)
    try:
        d.ctl("watch", root)
        before = mark(d, root, "before")
    finally:
        assert d.stop() == 0
    db = sqlite3.connect(home / "store" / "catalog.sqlite")
    db.execute("UPDATE marks SET ignored=NULL")
    db.execute("UPDATE workspaces SET ignored=NULL")
    db.commit()
    db.close()
    d = start_daemon(home)
    try:
        after = mark(d, root, "after")  # sub/old: learnt by the first start's listing
        write(root / ".gitignore", "")
        write(root / "gen", "made after both marks\n")
        code, r = rollback(d, root, "--to", before, "--dry-run")
        assert code == 0 and "gen" in paths(r["plan"]["left"]), r
        code, r = rollback(d, root, "--to", after)
        assert code == 0, r
        assert not (root / "gen").exists(), r
        assert (root / "sub" / "old").read_text() == "there before the upgrade\n"
        assert "sub/old" in paths(r["left"]), r
    finally:
        assert d.stop() == 0


def test_the_names_at_an_instant_between_marks(tmp_path: Path) -> None:
    """Each capture that changed the set records a state with it (``states``), so the names at any
    instant are known, not only at marks: what a time target (``--to @T``) needs. A real
    workspace (real inotify, the capture thread) in this process, read through the store."""
    from snapd.capture.workspace import Workspace
    from snapd.config import CaptureSettings, Retention
    from snapd.store import gc, history, ignored
    from snapd.store.store import Store
    from snapd.store.verify import verify

    root = (tmp_path / "ws").resolve()
    root.mkdir()
    write(root / ".gitignore", "*.o\n")
    with Store.open(tmp_path / "store") as store:
        wid = store.add_workspace(os.fsencode(root))
        w = Workspace(store, wid, root, CaptureSettings())
        w.start()
        try:
            m = w.mark("m")

            def names_now() -> frozenset[bytes]:
                got = ignored.load(store, store.live_ignored(wid))
                return got.names if got is not None else frozenset()

            write(root / "a.o", "made after m\n")  # the capture thread records it, no mark
            wait_for(lambda: names_now() == {b"a.o"}, what="a.o captured as an ignored name")
            t1 = time.time_ns()
            (root / "a.o").unlink()
            write(root / "b.o", "made later\n")
            wait_for(lambda: names_now() == {b"b.o"}, what="b.o captured as an ignored name")
            t2 = time.time_ns()
            n = w.mark("n")
        finally:
            w.stop()

        def at(instant: int) -> frozenset[bytes]:
            got = ignored.load(store, history.at_time(store, wid, instant).ignored)
            assert got is not None
            return got.names

        assert ignored.at_mark(store, m) == ignored.IgnoredNames()
        assert at(m.created) == frozenset()
        assert at(t1) == {b"a.o"}
        assert at(t2) == {b"b.o"} == ignored.at_mark(store, n).names  # type: ignore[union-attr]
        # GC keeps every set a mark, the workspace or a change inside the age window names
        gc.run(store, Retention(grace_s=0))
        assert verify(store).ok
        assert at(t1) == {b"a.o"} and names_now() == {b"b.o"}


def test_an_excluded_directory_holding_a_tracked_file_keeps_its_mode_captured(
    daemon: Daemon, tmp_path: Path
) -> None:
    """``build/`` holds a tracked file, so it is captured (a directory holding captured paths)
    whatever pattern names it. Chmod-ed, then excluded: the mode change was dropped as if the
    directory were ignored, and the rollback exited 0 leaving it 0500 (model seed 20260508)."""
    repo = tmp_path / "repo"
    repo.mkdir()
    subprocess.run(["git", "init", "-q", str(repo)], check=True, env=daemon.env)
    repo = repo.resolve()
    daemon.ctl("watch", repo)
    write(repo / "build" / "f", "tracked\n")
    os.chmod(repo / "build", 0o755)
    subprocess.run(["git", "-C", str(repo), "add", "-A"], check=True, env=daemon.env)
    m = mark(daemon, repo, "m")
    os.chmod(repo / "build", 0o500)
    (repo / ".git" / "info").mkdir(exist_ok=True)
    (repo / ".git" / "info" / "exclude").write_text("build/\n")

    code, r = rollback(daemon, repo, "--to", m)
    assert code == 0, r
    assert (repo / "build").stat().st_mode & 0o7777 == 0o755, r
    assert (repo / "build" / "f").read_text() == "tracked\n"
    code, r = undo(daemon, repo)
    assert code == 0, r
    assert (repo / "build").stat().st_mode & 0o7777 == 0o500, r
