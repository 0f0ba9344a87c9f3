"""The baseline's rules learn from the watcher's listings which directories hold no
``.gitignore`` (673c6e9): that knowledge must not outlive the directory it was learnt of.

A directory moved within the tree onto the path of one listed without a ``.gitignore`` brings
its own: the mark taken next must judge what it holds by that ``.gitignore``, as it did before
(dd649b7 searched a directory for its ``.gitignore`` when first asked about one of its
entries, so an empty directory was never searched during the baseline).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from e2e_helpers import Daemon

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    root = (tmp_path / "ws").resolve()
    root.mkdir()
    return root


def _write(path: Path, data: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(data)


def _mark_now(d: Daemon, root: Path, label: str) -> None:
    """A mark requested at once (in process: no CLI start-up), before the capture thread's
    debounce lets it capture the move on its own."""
    d.client().call("mark", label=label, workspace=os.fsencode(root))


def _cat(d: Daemon, root: Path, mark: str, rel: str) -> bytes | None:
    cp = d.ctl("cat", mark, rel, "-w", root, check=False)
    return cp.stdout if cp.returncode == 0 else None


def test_directory_moved_onto_an_empty_one_brings_its_gitignore(daemon: Daemon, ws: Path) -> None:
    """``rmdir a && mv b a``: ``a`` was listed empty at the baseline (no ``.gitignore``); the
    next mark judges ``a/keep.log`` by the ``.gitignore`` that came with ``b``, which
    re-includes it, and ``a/junk.tmp``, which it ignores."""
    _write(ws / ".gitignore", "*.log\n")
    (ws / "a").mkdir()
    _write(ws / "b" / ".gitignore", "!keep.log\n*.tmp\n")
    _write(ws / "b" / "keep.log", "re-included\n")
    _write(ws / "b" / "junk.tmp", "ignored\n")
    daemon.ctl("watch", ws)
    assert _cat(daemon, ws, "baseline", "b/keep.log") == b"re-included\n"
    assert _cat(daemon, ws, "baseline", "b/junk.tmp") is None
    os.rmdir(ws / "a")
    os.rename(ws / "b", ws / "a")
    _mark_now(daemon, ws, "m1")
    assert _cat(daemon, ws, "m1", "a/.gitignore") == b"!keep.log\n*.tmp\n"
    assert _cat(daemon, ws, "m1", "a/keep.log") == b"re-included\n"  # by a/.gitignore
    assert _cat(daemon, ws, "m1", "a/junk.tmp") is None


def test_directory_moved_onto_a_nonempty_one_brings_its_gitignore(daemon: Daemon, ws: Path) -> None:
    """The same with ``a`` holding a file at the baseline (its rules were searched for then,
    before and after 673c6e9)."""
    _write(ws / ".gitignore", "*.log\n")
    _write(ws / "a" / "old.txt", "old\n")
    _write(ws / "b" / ".gitignore", "!keep.log\n*.tmp\n")
    _write(ws / "b" / "keep.log", "re-included\n")
    _write(ws / "b" / "junk.tmp", "ignored\n")
    daemon.ctl("watch", ws)
    os.rename(ws / "a", ws / "a.old")
    os.rename(ws / "b", ws / "a")
    _mark_now(daemon, ws, "m1")
    assert _cat(daemon, ws, "m1", "a/keep.log") == b"re-included\n"
    assert _cat(daemon, ws, "m1", "a/junk.tmp") is None


def test_rollback_to_the_mark_after_the_move_keeps_the_re_included_file(daemon: Daemon, ws: Path) -> None:
    """What the mark missed, a rollback to it deletes: ``a/keep.log`` existed when ``m1`` was
    taken and ``m1``'s own rules (its ``a/.gitignore``) capture it."""
    _write(ws / ".gitignore", "*.log\n")
    (ws / "a").mkdir()
    _write(ws / "b" / ".gitignore", "!keep.log\n")
    _write(ws / "b" / "keep.log", "re-included\n")
    daemon.ctl("watch", ws)
    os.rmdir(ws / "a")
    os.rename(ws / "b", ws / "a")
    _mark_now(daemon, ws, "m1")
    _write(ws / "later.txt", "later\n")
    daemon.ctl("mark", "m2", "-w", ws)
    cp = daemon.ctl("rollback", "--to", "m1", "--yes", "-w", ws, check=False)
    assert cp.returncode == 0, cp
    assert not (ws / "later.txt").exists()
    assert (ws / "a" / "keep.log").read_text() == "re-included\n"
