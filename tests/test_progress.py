"""Progress bars of long work, on a terminal (issue 31, point 9): one mechanism for all —
the daemon says in ``status`` how far it has come (a baseline's ``progress``; the restores
and rollbacks ``running``), the CLI's bar polls it — counting what it names, and finished
when the work is."""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest
from e2e_helpers import Daemon, Pty, write


def _tree(top: Path, dirs: int, per_dir: int, text: str) -> None:
    for i in range(dirs):
        for j in range(per_dir):
            write(top / f"d{i}" / f"f{j}.txt", f"{text} {i} {j}\n" * 20)


def _bars(out: bytes, unit: bytes) -> list[tuple[int, int]]:
    return [(int(a), int(b)) for a, b in re.findall(rb"\] (\d+)/(\d+) " + unit, out)]


@pytest.mark.timeout(300)
def test_watch_bar_counts_files_not_directories_and_finishes(daemon: Daemon, tmp_path: Path) -> None:
    """20000 files in 2000 directories: the bar counts 20000 files (not 22001 paths) and is drawn
    finished, 20000/20000, when the baseline is done. (6000 files were read before the bar's
    first poll on a quick run: the baseline was over before anything was drawn.)"""
    root = tmp_path / "big"
    _tree(root, 2000, 10, "x")
    t = Pty(daemon.env, "watch", root, cwd=tmp_path)
    t.read_until(b" files", timeout=120)  # drawn while the baseline runs
    assert t.finish(180) == 0, t.out
    bars = _bars(t.out, b"files")
    assert bars and {total for _, total in bars} == {20000}, t.out[-2000:]
    assert b"20000/20000 files\n" in t.out.replace(b"\r\n", b"\n"), t.out[-2000:]
    assert b"watching " in t.out


@pytest.mark.timeout(300)
def test_a_long_rollback_shows_its_progress_on_a_terminal(daemon: Daemon, ws: Path) -> None:
    """A rollback of 4000 changed files, confirmed on a terminal: the bar counts the plan's
    changes while the daemon applies them (drawn from ``status``'s ``running``) and ends at
    4000/4000; an undo shows the same bar."""
    _tree(ws, 40, 100, "old")
    daemon.ctl("mark", "m", cwd=ws, timeout=120)
    _tree(ws, 40, 100, "new")
    t0 = time.monotonic()
    t = Pty(daemon.env, "rollback", "--to", "m", cwd=ws)
    t.read_until(b"apply this rollback? [y/N] ", timeout=120)
    t.send(b"y\n")
    t.read_until(b"/4000 changes", timeout=120)  # drawn while the apply runs
    assert t.finish(120) == 0, t.out[-2000:]
    print(f"rollback of 4000 files: {time.monotonic() - t0:.2f}s")
    assert b"4000/4000 changes\n" in t.out.replace(b"\r\n", b"\n"), t.out[-2000:]
    assert b"rolled back: 4000 paths" in t.out, t.out[-2000:]
    assert (ws / "d3" / "f7.txt").read_text().startswith("old 3 7")
    u = Pty(daemon.env, "undo", "--yes", cwd=ws)
    u.read_until(b"/4000 changes", timeout=120)
    assert u.finish(120) == 0, u.out[-2000:]
    assert (ws / "d3" / "f7.txt").read_text().startswith("new 3 7")
