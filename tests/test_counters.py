"""O(changes), counted: a mark costs what changed, not the workspace (docs/architecture.md).

Timing cannot prove that on a shared machine; the daemon's counters can (``status --json``:
``counters.full_scans``, ``listings``, ``lstats``, ``files_read`` per workspace, counted by
the scanner, the reader and the watcher themselves). Each test also shows the counters move
when the work is really done, so a counter stuck at zero cannot pass them.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from e2e_helpers import Daemon, start_daemon, wait_for

from snapd.capture import scan
from snapd.capture.counters import Counters
from snapd.capture.reader import read_path
from snapd.capture.statcache import StatCache
from snapd.config import CaptureSettings

DIRS, PER_DIR = 20, 100  # 2,000 files


def _tree(root: Path) -> None:
    old = time.time() - 3600  # outside any racy window: nothing is re-read for its mtime
    for d in range(DIRS):
        sub = root / f"d{d:02}"
        sub.mkdir(parents=True)
        for f in range(PER_DIR):
            p = sub / f"f{f:03}.txt"
            p.write_text(f"file {d}/{f}\n")
            os.utime(p, (old, old))
        os.utime(sub, (old, old))
    os.utime(root, (old, old))


def _counters(d: Daemon, root: Path) -> dict[str, int]:
    for w in d.ctl_json("status")["workspaces"]:
        if w["root"] == str(root):
            work: dict[str, int] = w["counters"]
            return work
    raise AssertionError(f"{root} not in status")


def _delta(after: dict[str, int], before: dict[str, int]) -> dict[str, int]:
    return {k: after[k] - before[k] for k in after}


def test_a_mark_of_one_changed_file_in_2000_does_no_full_scan_and_reads_one_file(tmp_path: Path) -> None:
    root = (tmp_path / "ws").resolve()
    _tree(root)
    d = start_daemon(tmp_path / "snapd-home")
    try:
        d.ctl("watch", root)
        base = _counters(d, root)
        # The baseline walked and read everything: the counters count real work. It listed
        # each directory once: the watcher's listing, made as it placed the directory's watch,
        # is the walk's (not a second listing of the whole tree).
        assert base["full_scans"] == 1 and base["files_read"] == DIRS * PER_DIR, base
        assert base["listings"] == DIRS + 1, base
        assert d.ctl_json("mark", "m1", "-w", root)["summary"]["changed"] == 0
        before = _counters(d, root)  # the capture thread may read the change before the mark
        (root / "d07" / "f042.txt").write_text("changed\n")
        m = d.ctl_json("mark", "m2", "-w", root)
        assert m["summary"]["counts"] == {"modified": 1}, m["summary"]
        got = _delta(_counters(d, root), before)
        assert got["full_scans"] == 0, got
        assert got["files_read"] == 1, got
        assert got["lstats"] <= 10, got  # the path, its parents: never one per workspace file
        assert got["listings"] <= 2, got  # nothing was created: no directory needs listing
        st = d.ctl("status").stdout.decode()
        assert "since start: 1 full scan, 21 directories listed," in st and "files read" in st, st
    finally:
        assert d.stop() == 0


def test_a_restart_reconciles_with_one_full_scan_and_reads_only_what_changed(tmp_path: Path) -> None:
    root = (tmp_path / "ws").resolve()
    _tree(root)
    home = tmp_path / "snapd-home"
    d = start_daemon(home)
    d.ctl("watch", root)
    assert d.stop() == 0
    (root / "d03" / "f001.txt").write_text("changed while down\n")
    d2 = start_daemon(home, d.env)
    try:

        def ready() -> dict[str, Any] | None:
            for w in d2.ctl_json("status")["workspaces"]:
                if w["root"] == str(root) and w.get("state") == "ready":
                    return w
            return None

        w: Any = wait_for(ready, what="workspace ready")
        work = w["counters"]
        assert work["full_scans"] == 1, work
        assert work["files_read"] == 1, work
        assert DIRS * PER_DIR <= work["lstats"] <= DIRS * PER_DIR + DIRS + 10, work
    finally:
        assert d2.stop() == 0


def test_scan_and_read_count_where_they_work(tmp_path: Path) -> None:
    root = tmp_path / "ws"
    (root / "a").mkdir(parents=True)
    for name in ("x", "y"):
        (root / "a" / name).write_text(name)
    rootb = os.fsencode(root)
    c = Counters()
    dirty = scan.scan(rootb, b"", StatCache(), lambda rel, is_dir: False, lambda rel: True, counters=c)
    assert dirty == {b"a", b"a/x", b"a/y"}
    want = {"full_scans": 1, "lstats": 3, "files_read": 0, "listings": 2, "rechecks": 0, "ignored_names": 0}
    assert c.to_json() == want
    scan.scan(rootb, b"a", StatCache(), lambda rel, is_dir: False, lambda rel: True, counters=c)
    assert c.full_scans == 1 and c.lstats == 3 + 3  # a subtree: not a full scan
    assert c.listings == 2 + 1
    r = read_path(rootb, b"a/x", CaptureSettings().size_cap, counters=c)
    assert r.data == b"x"
    assert c.files_read == 1 and c.lstats == 6 + 3  # the path, and its parent before and after


def test_a_rollback_restats_every_captured_file_once_and_lists_no_directory(tmp_path: Path) -> None:
    """A rollback looks for changes no event reports (a file written through a hard link made
    outside the watches: docs/rollback.md, "Hard links") with one ``lstat`` per captured file:
    no full scan (no listing, no ignore rule judged, no directory stat'ed), and once per
    ``rollback --yes``, not once for the plan and again for the apply."""
    root = (tmp_path / "ws").resolve()
    _tree(root)
    d = start_daemon(tmp_path / "snapd-home")
    try:
        d.ctl("watch", root)
        d.ctl("mark", "m1", "-w", root)
        (root / "d07" / "f042.txt").write_text("changed\n")
        d.ctl("mark", "m2", "-w", root)
        before = _counters(d, root)
        out = d.ctl_json("rollback", "--to", "m1", "--yes", "-w", root)
        assert out["applied"] == 1 and (root / "d07" / "f042.txt").read_text() == "file 7/42\n", out
        got = _delta(_counters(d, root), before)
        assert got["full_scans"] == 0 and got["listings"] == 0, got
        # every file once (the re-check), plus the few paths the rollback itself touches
        assert DIRS * PER_DIR <= got["lstats"] < DIRS * PER_DIR + DIRS, got
    finally:
        assert d.stop() == 0


def test_a_mark_records_its_ignored_names_from_the_events_alone(tmp_path: Path) -> None:
    """The names of the ignored entries present (what a mark records: docs/storage.md) are kept
    from the captures' own judgements: a mark whose set did not change encodes nothing and lists
    nothing; an ignored file made since is learnt from its event (no listing, no full scan) and
    the set encoded once per capture that changed it, however many files the workspace holds."""
    root = (tmp_path / "ws").resolve()
    _tree(root)
    (root / ".gitignore").write_text("*.o\nbuild/\n")
    for d in range(DIRS):
        (root / f"d{d:02}" / "x.o").write_text("ignored\n")
    d = start_daemon(tmp_path / "snapd-home")
    try:
        d.ctl("watch", root)
        d.ctl_json("mark", "m1", "-w", root)
        before = _counters(d, root)
        (root / "d07" / "f042.txt").write_text("changed\n")
        d.ctl_json("mark", "m2", "-w", root)
        got = _delta(_counters(d, root), before)
        assert got["ignored_names"] == 0 and got["full_scans"] == 0, got
        before = _counters(d, root)
        (root / "d03" / "y.o").write_text("ignored, new\n")
        (root / "build").mkdir()
        (root / "build" / "out.bin").write_text("ignored, new\n")
        d.ctl_json("mark", "m3", "-w", root)
        got = _delta(_counters(d, root), before)
        # once per capture that changed the set (the capture thread may take the two apart)
        assert 1 <= got["ignored_names"] <= 2, got
        assert got["full_scans"] == 0 and got["listings"] == 0, got
        assert got["lstats"] <= 20, got
    finally:
        assert d.stop() == 0
