"""The daemon as operations see it (issue 14, points 6, 7, 10, 11, 14, 15; docs/operations.md):
a root that goes away while watched, what the watch-limit warning names, what a clean stop
leaves behind, and the warnings and modes the operations guide promises. Real daemons, real
inotify, the real CLI.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from e2e_helpers import Daemon, cli_mark, describe, start_daemon, wait_for


def _status_ws(d: Daemon, root: Path) -> dict[str, Any]:
    return next(w for w in d.call("status")["workspaces"] if w["root"] == str(root))


def _stopped_capturing(d: Daemon, root: Path) -> dict[str, Any]:
    """Wait until the daemon itself (not a status request's own check) stopped capturing
    ``root``: its watches are gone."""

    def stopped() -> dict[str, Any] | None:
        w = _status_ws(d, root)
        return w if w["watches"] == 0 else None

    found: dict[str, Any] = wait_for(stopped, what=f"the daemon stops watching {root}")  # type: ignore[assignment]
    return found


# == point 6: a root that vanished or was replaced ===================================================


def test_a_replaced_root_stops_capture_and_watch_resumes_the_same_directory(daemon: Daemon, ws: Path) -> None:
    """The watches follow the old directory while the paths name the new one: capturing on
    would write another directory's state into this history. The daemon stops capturing at
    once, says why, refuses marks, and `snapctl watch` resumes it when the directory is back."""
    (ws / "b.txt").write_text("one\n")
    cli_mark(daemon, ws, "before")
    old = ws.parent / "moved-away"
    ws.rename(old)
    ws.mkdir()
    w = _stopped_capturing(daemon, ws)
    assert w["state"] == "error" and "was replaced" in w["error"], w
    (old / "b.txt").write_text("two\n")
    (ws / "stranger.txt").write_text("not this workspace's\n")
    history = daemon.ctl_json("history", "b.txt", "-w", ws)
    assert all(v.get("mark") for v in history["versions"]), history  # nothing captured since
    cp = daemon.ctl("mark", "m", cwd=ws, check=False)
    assert cp.returncode == 7 and b"was replaced" in cp.stderr, describe(cp)

    shutil.rmtree(ws)
    old.rename(ws)  # the same directory is back
    cp = daemon.ctl("mark", "m", cwd=ws, check=False)
    assert cp.returncode == 7 and b"snapctl watch" in cp.stderr, describe(cp)
    daemon.ctl("watch", ws)
    w = _status_ws(daemon, ws)
    assert w["state"] == "ready" and w["watches"] == 1 and "error" not in w, w
    mark = daemon.ctl_json("mark", "after", cwd=ws)
    assert mark["summary"]["counts"] == {"modified": 1}, mark  # b.txt, changed while away


def test_a_vanished_root_stops_capture_and_stays_in_error(daemon: Daemon, ws: Path) -> None:
    (ws / "a.txt").write_text("x\n")
    shutil.rmtree(ws)
    w = _stopped_capturing(daemon, ws)
    assert w["state"] == "error" and "no longer exists" in w["error"], w
    assert "snapctl forget" in w["error"] and "recreate" not in w["error"], w
    ws.mkdir()  # a new directory at the path is not the one whose history this is
    cp = daemon.ctl("watch", ws, check=False)
    assert cp.returncode == 7 and b"replaced" in cp.stderr, describe(cp)
    w = _status_ws(daemon, ws)
    assert w["state"] == "error" and "replaced" in w["error"], w


def test_watch_resumes_a_workspace_whose_root_was_away_at_start_up(tmp_path: Path) -> None:
    d = start_daemon(tmp_path / "snapd-home")
    root = tmp_path / "ws"
    root.mkdir()
    (root / "a.txt").write_text("one\n")
    d.ctl("watch", root)
    assert d.stop() == 0
    away = tmp_path / "away"
    root.rename(away)
    d = start_daemon(tmp_path / "snapd-home")
    try:
        w = wait_for(lambda: (x := _status_ws(d, root)).get("state") == "error" and x, what="error state")
        assert "no longer exists" in w["error"], w  # type: ignore[index]
        away.rename(root)
        (root / "a.txt").write_text("two\n")
        d.ctl("watch", root)
        assert _status_ws(d, root)["state"] == "ready"
        assert d.ctl_json("mark", "back", cwd=root)["summary"]["counts"] == {"modified": 1}
    finally:
        assert d.stop() == 0
