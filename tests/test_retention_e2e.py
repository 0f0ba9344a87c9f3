"""Retention's count against a real daemon (issue 31, point 11): ``max_marks`` bounds the
marks retention may evict, so young pre-rollback marks (never evicted) do not push the user's
marks out."""

from __future__ import annotations

from pathlib import Path

from e2e_helpers import start_daemon, write


def test_max_marks_keeps_the_users_marks_beside_young_pre_rollback_marks(tmp_path: Path) -> None:
    """max_marks=4: a baseline, four user marks and three rollbacks (three pre-rollback marks).
    GC evicts one mark, the baseline; every user mark and every pre-rollback mark stays (the
    count used to evict four, leaving one user mark)."""
    home = tmp_path / "snapd-home"
    home.mkdir()
    (home / "config.toml").write_text("[retention]\nmax_marks = 4\n")
    d = start_daemon(home)
    try:
        root = tmp_path / "ws"
        root.mkdir()
        write(root / "a.txt", "0\n")
        d.ctl("watch", root)
        for i in range(1, 5):
            write(root / "a.txt", f"{i}\n")
            d.ctl("mark", f"u{i}", cwd=root)
        for i in range(1, 4):
            d.ctl("rollback", "--to", f"u{i}", "--yes", cwd=root)
        gc = d.ctl_json("gc")
        assert [e["reason"] for e in gc["evicted"]] == ["count"], gc
        marks = d.ctl_json("log", "--all", cwd=root)["marks"]
        labels = sorted(m["label"] for m in marks)
        assert labels == ["pre-rollback"] * 3 + ["u1", "u2", "u3", "u4"], labels
        d.ctl("undo", "--yes", cwd=root)  # the newest pre-rollback mark: before the last rollback
        assert (root / "a.txt").read_text() == "2\n"
        assert d.stop() == 0
    finally:
        if d.alive():
            d.stop()
