"""The workspace itself is gone (issue 30, point 1; docs/rollback.md, "A deleted or re-made
root"): `rm -rf` of the root, or a new directory made at its path, then a rollback, an undo,
later marks; and `snapctl restore REF --target DEST`. Real daemons, real inotify, the real CLI.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
from disks import tmpfs
from e2e_helpers import Daemon, Pty, describe, snap_diff, snapshot, start_daemon, wait_for, write

from snapd import timeref


def _tree(ws: Path) -> None:
    """A small tree of every kind a mark holds: files of two modes, a symlink (dangling), an
    empty directory, a read-only directory with a file inside, and a root of mode 0750."""
    write(ws / "a.txt", "alpha\n")
    write(ws / "bin" / "run.sh", "#!/bin/sh\necho hi\n", 0o755)
    (ws / "link").symlink_to("nowhere/at/all")
    (ws / "empty").mkdir()
    write(ws / "ro" / "inside.txt", "held\n", 0o600)
    (ws / "ro").chmod(0o555)
    ws.chmod(0o750)


def _yes(d: Daemon, *args: str | Path, cwd: Path | str = "/") -> tuple[int, dict[str, Any]]:
    """``snapctl ARGS --yes --json`` from ``cwd``: (exit, reply)."""
    cp = d.ctl(*args, "--yes", "--json", cwd=cwd, check=False)
    try:
        return cp.returncode, json.loads(cp.stdout)
    except json.JSONDecodeError:
        raise AssertionError(describe(cp) + d.log()[-3000:]) from None


def _gone(ws: Path) -> None:
    """``rm -rf`` of the root, read-only directories included."""
    for dirpath, dirs, _ in os.walk(ws):
        for name in dirs:
            os.chmod(os.path.join(dirpath, name), 0o700)
    shutil.rmtree(ws)


def _out(cp: subprocess.CompletedProcess[bytes]) -> str:
    return (cp.stdout + cp.stderr).decode(errors="replace")


def _status_ws(d: Daemon, root: Path) -> dict[str, Any]:
    return next(w for w in d.call("status")["workspaces"] if w["root"] == str(root))


def test_rollback_recreates_a_deleted_root_exactly_and_undo_works(daemon: Daemon, ws: Path) -> None:
    _tree(ws)
    m = daemon.ctl_json("mark", "m", cwd=ws)["id"]
    want = snapshot(ws, with_root=True)
    _gone(ws)
    wait_for(lambda: "error" in _status_ws(daemon, ws), what="the daemon sees the root gone")

    plan = daemon.ctl("rollback", "--to", m, "-w", ws, "--dry-run", "--json", cwd="/", check=False)
    assert plan.returncode == 0, describe(plan)
    shown = json.loads(plan.stdout)
    assert shown["root"] == "missing" and "does not exist" in shown["root_note"], shown
    assert not ws.exists(), "a dry run must not make the root"

    # The plan shown is the plan applied: made again, the empty root plans to the same token.
    code, r = _yes(daemon, "rollback", "--to", m, "-w", ws, "--plan-token", shown["plan"]["token"])
    assert code == 0, r
    assert r["root"] == "missing" and r["pre_rollback"], r
    got = snapshot(ws, with_root=True)
    assert got == want, snap_diff(got, want)

    # The history goes on on the new directory: watching resumed, a later mark sees an edit.
    wait_for(lambda: _status_ws(daemon, ws).get("watches", 0) > 0 and "error" not in _status_ws(daemon, ws),
             what="watching resumes")
    write(ws / "a.txt", "alpha 2\n")
    later = daemon.ctl_json("mark", "later", cwd=ws)
    assert daemon.ctl("cat", later["id"], "a.txt", cwd=ws).stdout == b"alpha 2\n"
    code, r = _yes(daemon, "undo", "-w", ws)
    assert code == 0, r
    assert snapshot(ws) == {}, "undo returns to the state before the rollback: an empty root"
    code, r = _yes(daemon, "rollback", "--to", later["id"], cwd=ws)
    assert code == 0, r
    assert (ws / "a.txt").read_text() == "alpha 2\n"


def test_rollback_of_a_remade_root_holds_its_contents_and_goes_on(daemon: Daemon, ws: Path) -> None:
    _tree(ws)
    m = daemon.ctl_json("mark", "m", cwd=ws)["id"]
    want = snapshot(ws, with_root=True)
    _gone(ws)
    ws.mkdir(mode=0o700)
    write(ws / "new.txt", "made in the new directory\n")
    write(ws / "a.txt", "not alpha\n")
    held = snapshot(ws, with_root=True)

    code, r = _yes(daemon, "rollback", "--to", m, "-w", ws)
    assert code == 0, r
    assert r["root"] == "new" and "new directory" in r["root_note"], r
    got = snapshot(ws, with_root=True)
    assert got == want, snap_diff(got, want)

    code, r = _yes(daemon, "undo", "-w", ws)
    assert code == 0, r
    got = snapshot(ws, with_root=True)
    assert got == held, snap_diff(got, held)

    # One history: the old marks are still there, a new mark and a rollback to it work.
    labels = [x["label"] for x in daemon.ctl_json("log", "--all", "-w", ws)["marks"]]
    assert "m" in labels and "baseline" in labels, labels
    write(ws / "b.txt", "b\n")
    later = daemon.ctl_json("mark", "later", cwd=ws)["id"]
    write(ws / "b.txt", "changed\n")
    (ws / "new.txt").unlink()
    code, r = _yes(daemon, "rollback", "--to", later, cwd=ws)
    assert code == 0, r
    assert (ws / "b.txt").read_text() == "b\n" and (ws / "new.txt").exists()
    w = _status_ws(daemon, ws)
    assert w["state"] == "ready" and "error" not in w, w


def test_no_message_about_a_gone_root_suggests_forget(daemon: Daemon, ws: Path) -> None:
    """Every message a user meets when the root is gone or re-made (status, mark, watch,
    rollback from inside the deleted directory) says what brings it back; none advises
    `snapctl forget`, which deletes the only copy."""
    write(ws / "a.txt", "a\n")
    daemon.ctl("mark", "m", cwd=ws)
    inside = ws / "sub"
    inside.mkdir()
    _gone(ws)
    said: list[str] = []
    w = wait_for(lambda: (x := _status_ws(daemon, ws)).get("error") and x, what="error state")
    said.append(w["error"])  # type: ignore[index]
    said.append(_out(daemon.ctl("status", check=False)))
    said.append(_out(daemon.ctl("mark", "x", "-w", ws, check=False)))
    # From inside the deleted directory: the shell's cwd is gone.
    cp = subprocess.run(
        ["/bin/sh", "-c",
         f'mkdir -p "{inside}" && cd "{inside}" && rm -rf "{ws}" && "$0" -m snapd rollback --to m --yes',
         daemon.python[0]],
        env=daemon.env, capture_output=True, timeout=30, cwd="/",
    )
    said.append(cp.stderr.decode())
    assert cp.returncode == 2 and "-w PATH" in cp.stderr.decode(), describe(cp)
    ws.mkdir()
    said.append(_out(daemon.ctl("watch", ws, check=False)))
    said.append(_out(daemon.ctl("mark", "y", "-w", ws, check=False)))
    w = _status_ws(daemon, ws)
    said.append(w.get("error", ""))
    assert any("rollback --to" in s for s in said), said
    for text in said:
        assert not re.search(r"\bforget\b", text), text


def test_restore_writes_a_mark_into_an_absent_or_empty_target(
    daemon: Daemon, ws: Path, tmp_path: Path
) -> None:
    _tree(ws)
    m = daemon.ctl_json("mark", "m", cwd=ws)["id"]
    want = snapshot(ws, with_root=True)
    write(ws / "a.txt", "changed since\n")
    daemon.ctl("mark", "after", cwd=ws)

    absent = tmp_path / "copy"
    code, r = _yes(daemon, "restore", m, "--target", absent, "-w", ws)
    assert code == 0 and r["ok"] and r["written"] >= 5, r
    got = snapshot(absent, with_root=True)
    assert got == want, snap_diff(got, want)

    empty = tmp_path / "empty-target"
    empty.mkdir()
    cp = daemon.ctl("restore", "m", "--target", empty, cwd=ws, check=False)  # a label, from inside
    assert cp.returncode == 0, describe(cp)
    got = snapshot(empty, with_root=True)
    assert got == want, snap_diff(got, want)
    assert (ws / "a.txt").read_text() == "changed since\n", "the workspace is not touched"
    assert snapshot(ws / "..")  # still there


def test_restore_refuses_a_target_that_holds_anything(daemon: Daemon, ws: Path, tmp_path: Path) -> None:
    write(ws / "a.txt", "a\n")
    daemon.ctl("mark", "m", cwd=ws)
    full = tmp_path / "full"
    write(full / "mine.txt", "mine\n")
    before = snapshot(full, with_root=True)
    code, r = _yes(daemon, "restore", "m", "--target", full, "-w", ws)
    assert code != 0 and "not empty" in r["error"]["message"], r
    assert snapshot(full, with_root=True) == before, "nothing written"
    a_file = tmp_path / "file"
    a_file.write_text("x")
    code, r = _yes(daemon, "restore", "m", "--target", a_file, "-w", ws)
    assert code != 0 and "not a directory" in r["error"]["message"], r
    assert a_file.read_text() == "x"
    own = daemon.snapd_home / "restored"
    code, r = _yes(daemon, "restore", "m", "--target", own, "-w", ws)
    assert code != 0 and "snapd's own" in r["error"]["message"], r
    assert not own.exists()
    assert daemon.call("ping")  # still serving


def test_restore_of_a_time_and_of_a_deleted_root(daemon: Daemon, ws: Path, tmp_path: Path) -> None:
    """``restore @T`` between two marks writes the workspace as captured at T, and works when
    the root itself is gone (the history is all there is)."""
    write(ws / "a.txt", "one\n")
    daemon.ctl("mark", "m", cwd=ws)
    write(ws / "a.txt", "two\n", 0o600)
    write(ws / "d" / "b.txt", "b\n")
    for rel, n in (("a.txt", 2), ("d/b.txt", 1)):
        wait_for(lambda rel=rel, n=n: len(daemon.ctl_json("history", rel, cwd=ws)["versions"]) >= n,
                 what=f"{rel} captured between marks")
    at_t = snapshot(ws, with_root=True)
    instant = timeref.wire(time.time_ns())
    wait_for(lambda: time.time_ns() > timeref.parse_wire(instant) + 10_000_000, what="time moves on")
    write(ws / "a.txt", "three\n")
    daemon.ctl("mark", "later", cwd=ws)
    _gone(ws)
    target = tmp_path / "at-t"
    code, r = _yes(daemon, "restore", instant, "--target", target, "-w", ws)
    assert code == 0, r
    got = snapshot(target, with_root=True)
    assert got == at_t, snap_diff(got, at_t)
    assert not ws.exists(), "restore never makes the workspace"


@pytest.mark.timeout(600)
def test_a_crash_while_a_deleted_root_is_rolled_back_is_finished(tmp_path: Path) -> None:
    """The daemon killed after every step of a rollback into a recreated root (making the root
    included): the next start finishes it from the journal, or, when the crash came before
    the root was adopted, the new directory is reported and a second rollback completes. Either
    way the workspace ends exactly at the mark, with no temp file left."""
    n = crashed = 0
    while True:
        n += 1
        assert n < 80, "the rollback never completed: the crash seam is not counting apply steps"
        base = tmp_path / f"n{n}"
        root = base / "ws"
        write(root / "src" / "a.txt", "a\n")
        write(root / "src" / "b.txt", "b\n", 0o600)
        (root / "link").symlink_to("src/a.txt")
        root.chmod(0o750)
        home = base / "snapd-home"
        d = start_daemon(home)
        d.ctl("watch", root)
        d.ctl("mark", "a", "-w", root)
        want = snapshot(root, with_root=True)
        assert d.stop() == 0
        _gone(root)
        d = start_daemon(home, crash_after=f"apply.:{n}")
        code, r = _yes(d, "rollback", "--to", "a", "-w", root)
        if code == 0:
            assert d.stop() == 0
            assert snapshot(root, with_root=True) == want
            break
        crashed += 1
        assert d.wait_exit(20) == 86, d.log()[-3000:]
        d2 = start_daemon(home)
        try:
            def settled(d2: Daemon = d2, root: Path = root) -> dict[str, Any] | None:
                w = _status_ws(d2, root)
                return w if w.get("state") in ("ready", "error") else None

            w = wait_for(settled, 30, what="the workspace settles")
            if w["state"] == "ready":  # type: ignore[index]
                got = snapshot(root, with_root=True)
                assert got == want, f"crash at step {n}: recovered to\n{snap_diff(got, want)}"
            code, r = _yes(d2, "rollback", "--to", "a", "-w", root)
            assert code == 0, r
            got = snapshot(root, with_root=True)
            assert got == want, f"crash at step {n}:\n{snap_diff(got, want)}"
            assert not list(root.rglob(".snapd-*~"))
        finally:
            assert d2.stop() == 0
    assert crashed >= 5, f"only {crashed} crash points: the seam is not in the apply path"


def test_restore_lists_what_the_mark_did_not_capture(daemon: Daemon, ws: Path, tmp_path: Path) -> None:
    """A FIFO at the mark is recorded without content: a restore writes the rest and names it
    as not restored, exit 10."""
    write(ws / "a.txt", "a\n")
    os.mkfifo(ws / "pipe")
    daemon.ctl("mark", "m", cwd=ws)
    dest = tmp_path / "copy"
    cp = daemon.ctl("restore", "m", "--target", dest, cwd=ws, check=False)
    assert cp.returncode == 10 and b"not restored: pipe" in cp.stderr, describe(cp)
    assert (dest / "a.txt").read_text() == "a\n" and not (dest / "pipe").exists()


@pytest.mark.timeout(300)
def test_a_long_restore_shows_its_progress_on_a_terminal(daemon: Daemon, ws: Path, tmp_path: Path) -> None:
    """The bar is drawn from ``status``'s ``restores`` while the daemon writes."""
    for i in range(40):
        for j in range(100):
            write(ws / f"d{i}" / f"f{j}.txt", f"{i} {j}\n" * 20)
    daemon.ctl("mark", "m", cwd=ws, timeout=120)
    t0 = time.monotonic()
    t = Pty(daemon.env, "restore", "m", "--target", tmp_path / "copy", cwd=ws)
    t.read_until(b"/4000 files\r", timeout=120)  # the bar, drawn while the restore runs
    assert t.finish(120) == 0, t.out
    print(f"restore of 4000 files: {time.monotonic() - t0:.2f}s")
    assert b"restored mark" in t.out and b"4000 files" in t.out, t.out


def test_a_restore_that_fills_its_disk_stops_and_says_what_is_left(
    daemon: Daemon, ws: Path, tmp_path: Path
) -> None:
    """No journal to finish a restore: one stopped by a full disk says that DEST holds part of
    the tree (and nothing about a rollback being finished later); the daemon serves on."""
    for i in range(4):
        write(ws / f"f{i}.bin", os.urandom(512 * 1024))
    daemon.ctl("mark", "m", cwd=ws)
    with tmpfs(tmp_path / "small", 1024 * 1024) as small:
        code, r = _yes(daemon, "restore", "m", "--target", small / "copy", "-w", ws)
        assert code == 8 and r["error"]["code"] == "disk_full", r
        message = r["error"]["message"]
        assert "holds part of the tree" in message and "journal" not in message, message
        assert not list((small / "copy").rglob(".snapd-*~")), "staged temps removed"
    assert daemon.call("ping")
