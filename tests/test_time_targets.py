"""A time target keeps every promise a mark keeps (issue 30, point 2), end to end.

``rollback --to @T`` must do what a rollback to a mark taken at T would: judge each path under the
ignore rules of T (the ``.gitignore`` files *and* the inputs outside the tree, such as
``.git/info/exclude``), know the paths T could not capture (over the size cap, FIFOs), restore the
root's mode of T, and never mix a partly watched tree. Each test takes its instant right after a
barrier'd capture (``snapctl diff``), so everything done before it is captured, and most also take
a real mark then and check both targets give the same plan.
"""

from __future__ import annotations

import json
import os
import sqlite3
import stat
import time
from pathlib import Path
from typing import Any

import pytest
from e2e_helpers import (
    NOBODY,
    Daemon,
    OtherUser,
    base_env,
    cli_mark,
    cli_rollback,
    git,
    snapshot,
    start_daemon,
    wait_for,
    write,
)

from snapd import timeref


def now_captured(d: Daemon, ws: Path) -> str:
    """Capture everything done so far (a barrier, through ``diff``), then the instant after it."""
    d.ctl_json("diff", d.ctl_json("log", "-n", "1", cwd=ws)["marks"][0]["id"], cwd=ws)
    instant = time.time_ns()
    time.sleep(0.002)  # the next capture starts after the instant
    return timeref.wire(instant)


def state_root_modes(d: Daemon) -> set[int]:
    """The root modes the catalog's states record (read-only: SQLite's WAL lets a reader in)."""
    db = sqlite3.connect(f"file:{d.snapd_home / 'store' / 'catalog.sqlite'}?mode=ro", uri=True)
    try:
        return {m for (m,) in db.execute("SELECT root_mode FROM states")}
    finally:
        db.close()


def plan(d: Daemon, ws: Path, ref: str) -> dict[str, Any]:
    """A dry-run plan's operations, kept and left paths (its token digests them) and lines."""
    cp = d.ctl("rollback", "--to", ref, "--dry-run", "--json", cwd=ws, check=False)
    p = json.loads(cp.stdout)
    return {"exit": cp.returncode, "plan": p["plan"], "lines": p["lines"]}


def same_as_a_mark(d: Daemon, ws: Path, instant: str, mark: str) -> None:
    got, want = plan(d, ws, instant), plan(d, ws, mark)
    assert got == want, f"@T plans\n{got}\nbut the mark taken then plans\n{want}"


def test_a_time_judges_paths_by_the_gitignore_of_then(daemon: Daemon, ws: Path) -> None:
    """`.gitignore` gains `*.log` between marks; at T `x.log` is v2 and `y.log` deleted. A mark
    taken then holds neither (ignored), so a rollback to T leaves both as they are."""
    d = daemon
    write(ws / "x.log", "v1\n")
    write(ws / "y.log", "v1\n")
    write(ws / "a.txt", "a1\n")
    cli_mark(d, ws, "m0")
    write(ws / ".gitignore", "*.log\n")
    write(ws / "x.log", "v2\n")
    (ws / "y.log").unlink()
    instant = now_captured(d, ws)
    at_t = cli_mark(d, ws, "taken-at-t")
    write(ws / "x.log", "v3\n")
    write(ws / "a.txt", "a2\n")
    same_as_a_mark(d, ws, instant, at_t)

    code, res = cli_rollback(d, ws, "--to", instant)
    assert code == 0, res
    assert (ws / "x.log").read_text() == "v3\n", "an ignored file was overwritten with its old bytes"
    assert not (ws / "y.log").exists(), "an ignored file deleted before T was recreated"
    assert (ws / "a.txt").read_text() == "a1\n"


def test_a_time_judges_paths_by_the_exclude_file_of_then(daemon: Daemon, tmp_path: Path) -> None:
    """`.git/info/exclude` gains a pattern between marks and a file is made that it excludes: at
    T that file is ignored and present, so a rollback to T leaves it (it used to delete it)."""
    d = daemon
    root = (tmp_path / "repo").resolve()
    root.mkdir()
    git(root, "init", "-q")
    write(root / "a.txt", "a1\n")
    d.ctl_json("watch", root)
    cli_mark(d, root, "m0")
    write(root / ".git" / "info" / "exclude", "scratch*\n")
    write(root / "a.txt", "a2\n")  # a change in the tree: its capture sees the new rules
    write(root / "scratch.txt", "made while excluded\n")
    instant = now_captured(d, root)
    at_t = cli_mark(d, root, "taken-at-t")
    write(root / "a.txt", "a3\n")
    same_as_a_mark(d, root, instant, at_t)

    code, res = cli_rollback(d, root, "--to", instant)
    assert code == 0, res
    assert (root / "scratch.txt").read_text() == "made while excluded\n", res
    assert (root / "a.txt").read_text() == "a2\n"


def test_a_time_knows_the_paths_it_could_not_capture(capped_daemon: Daemon, capped_ws: Path) -> None:
    """An over-cap file there unchanged at T is not 'created since' (so `--force` must not delete
    it), and a FIFO there at T and gone now is listed as not restorable (exit 10)."""
    d, ws = capped_daemon, capped_ws
    write(ws / "a.txt", "a1\n")
    cli_mark(d, ws, "m0")
    write(ws / "big.bin", b"B" * 4096)  # over the 1 KiB cap
    os.mkfifo(ws / "pipe")
    write(ws / "a.txt", "a2\n")
    instant = now_captured(d, ws)
    at_t = cli_mark(d, ws, "taken-at-t")
    (ws / "pipe").unlink()
    write(ws / "a.txt", "a3\n")
    same_as_a_mark(d, ws, instant, at_t)

    code, res = cli_rollback(d, ws, "--to", instant, "--force")
    assert (ws / "big.bin").read_bytes() == b"B" * 4096, "an uncaptured file there at T was deleted"
    assert code == 10 and "pipe" in {k["path"] for k in res["kept"]}, res
    assert (ws / "a.txt").read_text() == "a2\n"


def test_a_time_restores_the_root_mode_of_then(daemon: Daemon, ws: Path) -> None:
    d = daemon
    write(ws / "a.txt", "a1\n")
    ws.chmod(0o755)
    cli_mark(d, ws, "m0")
    ws.chmod(0o700)  # only the root's mode changes: no path is dirty
    # No request captures it: the root's own event records a state (read-only, as `history` is
    # polled elsewhere), so a time after it has the mode though no mark or diff followed.
    wait_for(lambda: 0o700 in state_root_modes(d), what="a state with the root's new mode")
    instant = timeref.wire(time.time_ns())
    at_t = cli_mark(d, ws, "taken-at-t")
    ws.chmod(0o750)
    same_as_a_mark(d, ws, instant, at_t)

    code, res = cli_rollback(d, ws, "--to", instant)
    assert code == 0, res
    assert stat.S_IMODE(ws.stat().st_mode) == 0o700


def test_a_time_in_a_partly_watched_workspace_resolves_to_the_mark_and_says_so(tmp_path: Path) -> None:
    """With a watch shortfall, captures between marks see only the watched directories: a time
    then must not mix them with the unwatched ones as at the earlier mark. It resolves the whole
    tree to the mark (which scanned everything), and the plan says so."""
    home = tmp_path / "home-snapd"
    root = (tmp_path / "ws").resolve()
    for sub in ("a", "b", "c"):
        write(root / sub / "f.txt", f"{sub}1\n")
    env = base_env(home) | {"SNAPD_WATCH_LIMIT": "2"}  # the root and one directory
    d = start_daemon(home, env)
    try:
        d.ctl_json("watch", root)
        assert d.ctl_json("status")["workspaces"][0]["scan_every_mark"]
        cli_mark(d, root, "m0")
        at_m0 = snapshot(root)
        for sub in ("a", "b", "c"):
            write(root / sub / "f.txt", f"{sub}2\n")
        time.sleep(0.5)  # the capture thread records what the watched directory reports
        instant = now_captured(d, root)
        for sub in ("a", "b", "c"):
            write(root / sub / "f.txt", f"{sub}3\n")

        p = d.ctl_json("rollback", "--to", instant, "--dry-run", cwd=root)
        assert p["time"]["partial"] is True, p["time"]
        text = d.ctl("rollback", "--to", instant, "--dry-run", cwd=root).stdout.decode()
        assert "only at marks" in text, text
        code, res = cli_rollback(d, root, "--to", instant)
        assert code == 0, res
        assert snapshot(root) == at_m0, "a partly watched time gave a mixed tree"
    finally:
        assert d.stop() == 0


@pytest.mark.timeout(90)
def test_a_time_knows_what_it_could_not_read_then(nobody: OtherUser) -> None:
    """As uid 65534 (root reads anything): a file and a directory made `chmod 000` between marks
    could not be captured then. A rollback to a time when they were so must not bring them back
    as they were at the earlier mark (0644/0755, exit 0): it does what the mark taken then does."""
    ws = nobody.top / "ws"
    write(ws / "f.txt", "f at m0\n")
    write(ws / "d" / "g.txt", "g at m0\n")
    for p in (ws, ws / "f.txt", ws / "d", ws / "d" / "g.txt"):
        os.chown(p, NOBODY, NOBODY)
    d = nobody.start_daemon(nobody.top / "home" / "snapd")
    try:
        d.ctl("watch", ws)
        cli_mark(d, ws, "m0")
        (ws / "f.txt").write_text("f at T\n")
        (ws / "f.txt").chmod(0o000)
        (ws / "d").chmod(0o000)
        instant = now_captured(d, ws)
        at_t = cli_mark(d, ws, "taken-at-t")
        (ws / "d").chmod(0o755)
        (ws / "f.txt").chmod(0o644)
        (ws / "f.txt").write_text("f now\n")
        same_as_a_mark(d, ws, instant, at_t)

        code, res = cli_rollback(d, ws, "--to", instant)
        assert code == 10, res
        assert {"f.txt"} <= {k["path"] for k in res["kept"]}, res
        assert (ws / "f.txt").read_text() == "f now\n"
    finally:
        assert d.stop() == 0, d.log()[-3000:]
