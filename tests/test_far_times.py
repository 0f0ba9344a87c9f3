"""Files, directories and symlinks dated far from now (issue 30, 4): 2400 and 1900.

A time past 2262 (or before 1677) in nanoseconds does not fit the stat cache's 44-byte row;
``watch`` and ``mark`` used to exit 70 on such a path, later marks left it out, and a restart
put the workspace in ``[error]``. Here a real daemon captures such paths at its baseline and
at marks, rolls back to them exactly, restarts with them in its catalog (catching up on edits
made while it was down) and keeps capturing their edits.

The workspace is on the test's own file system (ext4 keeps 1901 to 2446, so 1900 is stored
as 1901-12-13: still a negative time) and on a tmpfs, which keeps every time a timespec holds
(1600 and 9999 too: both past the 44-byte row's range).
"""

from __future__ import annotations

import calendar
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import disks
import pytest
from e2e_helpers import (
    Daemon,
    Snap,
    cli_mark,
    cli_rollback,
    snap_diff,
    snapshot,
    start_daemon,
    wait_for,
    write,
)

pytestmark = pytest.mark.timeout(180)

ROW_MAX = 2**63 - 1  # the 44-byte row's int64: nanoseconds up to 2262-04-11


def ns(year: int) -> int:
    return calendar.timegm((year, 1, 1, 0, 0, 0)) * 10**9 + 123_456_789


DATES = {"2400": ns(2400), "1900": ns(1900), "1600": ns(1600), "9999": ns(9999)}


def make(root: Path, tag: str, text: str) -> None:
    """A file, a directory holding a file, and a symlink, named after ``tag``."""
    write(root / f"f{tag}", text)
    write(root / f"d{tag}" / "in", text)
    os.symlink(f"target {text}", root / f"l{tag}")


def date(root: Path, tag: str, when: int) -> None:
    """Date each of ``tag``'s paths ``when`` (a symlink itself, not its target); the
    directory last, after what changes it."""
    for name in (f"d{tag}/in", f"f{tag}", f"l{tag}", f"d{tag}"):
        os.utime(root / name, ns=(when, when), follow_symlinks=False)


def edit(root: Path, tag: str, text: str, when: int) -> None:
    """Change each of ``tag``'s paths and date it as it was: same size, same mtime, so only
    its ctime tells (and, for a file, inotify while the daemon runs)."""
    for name in (f"f{tag}", f"d{tag}/in"):
        p = root / name
        p.write_text(text.ljust(len(p.read_text()))[: len(p.read_text())])
    os.unlink(root / f"l{tag}")
    os.symlink(f"target {text}", root / f"l{tag}")
    write(root / f"d{tag}" / "new", text)
    date(root, tag, when)


def far(root: Path) -> list[str]:
    """The paths under ``root`` whose mtime is past the 44-byte row's range."""
    out = []
    for dirpath, dirnames, filenames in os.walk(root):
        for n in dirnames + filenames:
            p = os.path.join(dirpath, n)
            if not -(2**63) <= os.lstat(p).st_mtime_ns <= ROW_MAX:
                out.append(os.path.relpath(p, root))
    return out


def healthy(d: Daemon, root: Path) -> dict[str, object]:
    st = d.ctl_json("status")
    (ws,) = [w for w in st["workspaces"] if w["root"] == str(root)]
    assert "error" not in ws and not st["warnings"], f"workspace {ws}; warnings {st['warnings']}"
    return dict(ws)


def ready(d: Daemon, root: Path) -> None:
    wait_for(lambda: healthy(d, root).get("state") == "ready", 30, what=f"{root} ready")


def rolled_back(d: Daemon, root: Path, mark: str, want: Snap) -> None:
    rc, reply = cli_rollback(d, root, "--to", mark)
    got = snapshot(root)
    said = {k: reply.get(k) for k in ("error", "conflicts", "kept", "left")}
    assert rc == 0 and got == want, f"rollback to {mark}: rc={rc} {said}\n{snap_diff(got, want)}"


@contextmanager
def on(fs: str, tmp_path: Path) -> Iterator[Path]:
    if fs == "disk":
        yield tmp_path / "ws"
    else:
        with disks.tmpfs(tmp_path / "tmpfs", 64 << 20) as mount:
            yield mount / "ws"


def make_old(root: Path) -> None:
    for tag, when in DATES.items():
        make(root, f"-{tag}-old", f"old {tag}")
        date(root, f"-{tag}-old", when)
    assert far(root), "the file system kept no time past 2262: nothing tested"


@pytest.mark.parametrize("fs", ["disk", "tmpfs"])
@pytest.mark.parametrize("first", ["watch", "mark"])
def test_far_dated_paths_are_captured_rolled_back_and_kept_across_a_restart(
    fs: str, first: str, tmp_path: Path
) -> None:
    """``first``: the command that first meets far-dated paths (both exited 70)."""
    with on(fs, tmp_path) as root:
        root.mkdir()
        write(root / "plain", "plain\n")
        if first == "watch":
            make_old(root)
            os.utime(root, ns=(DATES["2400"], DATES["2400"]))  # the root itself too
        d = start_daemon(tmp_path / "home")
        try:
            d.ctl("watch", str(root))
            if first == "mark":
                cli_mark(d, root, "plain")
                make_old(root)
            base = snapshot(root)
            base_mark = cli_mark(d, root, "base")
            for tag, when in DATES.items():
                make(root, f"-{tag}-new", f"new {tag}")  # made after it
                date(root, f"-{tag}-new", when)
            m1 = cli_mark(d, root, "m1")
            s1 = snapshot(root)
            for tag, when in DATES.items():
                edit(root, f"-{tag}-old", f"OLD {tag}", when)
                edit(root, f"-{tag}-new", f"NEW {tag}", when)
            m2 = cli_mark(d, root, "m2")
            s2 = snapshot(root)
            healthy(d, root)
            assert d.stop() == 0

            for tag, when in DATES.items():  # while it is down: the catch-up must find these
                edit(root, f"-{tag}-new", f"new2 {tag}", when)
            write(root / "plain", "PLAIN\n")  # a 44-byte row on record, a far date on disk
            os.utime(root / "plain", ns=(DATES["2400"], DATES["2400"]))
            s3 = snapshot(root)
            d = start_daemon(tmp_path / "home")
            ready(d, root)  # it was stuck in [error]
            m3 = cli_mark(d, root, "m3")
            for tag, when in DATES.items():  # and once it runs again
                edit(root, f"-{tag}-old", f"old4 {tag}", when)
            m4 = cli_mark(d, root, "m4")
            s4 = snapshot(root)
            assert len({str(s) for s in (base, s1, s2, s3, s4)}) == 5

            rolled_back(d, root, m1, s1)
            rolled_back(d, root, m3, s3)
            rolled_back(d, root, m2, s2)
            rolled_back(d, root, m4, s4)
            rolled_back(d, root, base_mark, base)
            healthy(d, root)
        finally:
            assert d.stop() == 0
