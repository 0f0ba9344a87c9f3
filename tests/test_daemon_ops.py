"""The daemon as operations see it (issue 14, points 6, 7, 10, 11, 14, 15; docs/operations.md):
a root that goes away while watched, what the watch-limit warning names, what a clean stop
leaves behind, and the warnings and modes the operations guide promises. Real daemons, real
inotify, the real CLI.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from disks import loop_disk
from e2e_helpers import Daemon, base_env, cli_mark, describe, run_ctl, start_daemon, wait_for


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
    assert "forget" not in w["error"] and "rollback --to MARK" in w["error"], w  # brings it back
    ws.mkdir()  # a new directory at the path is not the one whose history this is
    cp = daemon.ctl("watch", ws, check=False)
    assert cp.returncode == 7 and b"replaced" in cp.stderr, describe(cp)
    w = _status_ws(daemon, ws)
    assert w["state"] == "error" and "replaced" in w["error"], w


def test_watch_of_a_root_replaced_a_moment_ago_is_refused(daemon: Daemon, ws: Path) -> None:
    """`snapctl watch` right after the root was replaced, before the capture thread has looked:
    the registry checks the root itself, so the answer is the refusal, not "already watched"
    (found under load: the kernel drops a deleted tree's watches before snapd notices)."""
    (ws / "a.txt").write_text("x\n")
    daemon.ctl("mark", "m", cwd=ws)
    shutil.rmtree(ws)
    ws.mkdir()
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


@pytest.mark.timeout(90)
def test_a_root_whose_file_system_is_unmounted_is_told_to_mount_it_back(tmp_path: Path) -> None:
    """The files of a workspace whose file system is unmounted are not gone: the advice is to
    mount it back (then `snapctl watch` resumes it with its history), never `forget`, which
    would delete a history that is still good. Both shapes: the root is the mount point (a
    different, empty directory is at its path now) or lies below it (nothing is there), and
    both moments: while the daemon runs, and at its start."""
    with loop_disk(tmp_path / "one") as at_point, loop_disk(tmp_path / "two") as above:
        roots = [at_point.mount, above.mount / "proj"]
        roots[1].mkdir()
        d = start_daemon(tmp_path / "snapd-home")
        try:
            for root in roots:
                (root / "kept.txt").write_text("still here\n")
                d.ctl("watch", root)
                cli_mark(d, root, "before")
            at_point.unmount()
            above.unmount()
            for root in roots:
                _told_to_mount_it_back(_stopped_capturing(d, root), root)
                cp = d.ctl("mark", "m", "-w", root, check=False)
                assert cp.returncode in (6, 7) and b"Mount it back" in cp.stderr, describe(cp)
                # A rollback neither makes the root again nor adopts the empty mount point.
                cp = d.ctl("rollback", "--to", "before", "-w", root, "--yes", cwd="/", check=False)
                assert cp.returncode == 7 and b"Mount it back" in cp.stderr, describe(cp)
                assert not (root / "kept.txt").exists() and (root == roots[0]) == root.exists()
            assert d.stop() == 0
            d = start_daemon(tmp_path / "snapd-home")
            for root in roots:
                w = wait_for(lambda r=root: (x := _status_ws(d, r)).get("error") and x, what="an error")
                _told_to_mount_it_back(w, root)
            at_point.mount_again()
            above.mount_again()
            for root in roots:
                (root / "kept.txt").write_text("changed after the mount came back\n")
                d.ctl("watch", root)
                assert _status_ws(d, root)["state"] == "ready"
                mark = d.ctl_json("mark", "back", cwd=root)
                assert mark["summary"]["counts"] == {"modified": 1}, mark
                assert [m["label"] for m in d.ctl_json("log", cwd=root)["marks"]][:2] == ["back", "before"]
        finally:
            assert d.stop() == 0


def _told_to_mount_it_back(w: Any, root: Path) -> None:
    assert w["state"] == "error" and "is not mounted" in w["error"] and "Mount it back" in w["error"], w
    assert "forget" not in w["error"] and str(root) in w["error"], w


# == point 11: what a clean stop removes, and only that ============================================


def test_a_daemon_of_another_store_cannot_take_over_a_running_daemons_socket(tmp_path: Path) -> None:
    """Two stores, one runtime directory: both compute the same socket path. ZeroMQ's bind
    would silently take it over, and the first daemon's clean stop would then remove the
    second's socket. The second start is refused, naming the cause."""
    env = {**base_env(tmp_path / "unused"), "XDG_RUNTIME_DIR": str(tmp_path / "run")}
    env.pop("SNAPD_HOME")
    first = start_daemon(tmp_path / "first", {**env, "XDG_DATA_HOME": str(tmp_path / "data1")})
    try:
        second = subprocess.Popen(
            [sys.executable, "-m", "snapd", "start"], env={**env, "XDG_DATA_HOME": str(tmp_path / "data2")},
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd="/",
        )
        try:
            _, err = second.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            second.kill()
            second.communicate()
            raise AssertionError("a second daemon took the running daemon's socket over") from None
        assert second.returncode == 4 and b"another snapd is listening" in err, err
        assert first.call("status")["pid"] == first.pid
    finally:
        assert first.stop() == 0
    assert not (tmp_path / "run" / "snapd").exists(), sorted((tmp_path / "run" / "snapd").iterdir())


BIND_RACE_LAUNCHER = Path(__file__).resolve().parent / "bind_race_launcher.py"


@pytest.mark.timeout(120)
def test_two_daemons_of_two_stores_started_at_once_leave_one_serving(tmp_path: Path) -> None:
    """Two stores, one runtime directory, both daemons started at the same instant: checking
    that nobody listens at the socket path, then binding, is a race both can win (the second
    bind takes the path over, and the first serves nobody). The launcher starts both within
    a millisecond and widens that moment to 0.3 s, so each round meets the race; the socket
    guard must leave exactly one daemon serving, on both of its sockets, and refuse the other
    with the reason. Two rounds: which one wins varies."""
    for round_ in range(2):
        _race_two_daemons(tmp_path / f"round-{round_}")


def _race_two_daemons(top: Path) -> None:
    env = {**base_env(top / "unused"), "XDG_RUNTIME_DIR": str(top / "run")}
    env.pop("SNAPD_HOME")
    envs = [{**env, "XDG_DATA_HOME": str(top / f"data-{n}")} for n in (1, 2)]
    at = f"{time.time() + 1.2:.3f}"
    procs = [
        subprocess.Popen(
            [sys.executable, str(BIND_RACE_LAUNCHER), at, "0.3", "start"], env=e, cwd="/",
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        )
        for e in envs
    ]
    try:
        wait_for(lambda: any(p.poll() is not None for p in procs), 30, what="one of the two exits")
        (loser,) = [p for p in procs if p.poll() is not None]
        winner = next(p for p in procs if p is not loser)
        err = loser.stderr.read() if loser.stderr else b""
        assert loser.returncode == 4 and b"another snapd is listening" in err, (loser.returncode, err)
        mine = envs[procs.index(winner)]
        status: Any = wait_for(lambda: _status_of(mine), 20, what="the other one answers")
        assert status["pid"] == winner.pid, (status, winner.pid)
        probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            probe.connect(status["events"]["endpoint"].removeprefix("ipc://"))  # its events socket too
        finally:
            probe.close()
        assert winner.poll() is None
    finally:
        for p in procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
                assert p.wait(20) == 0
    assert not (top / "run" / "snapd").exists(), sorted((top / "run" / "snapd").iterdir())


def _status_of(env: dict[str, str]) -> dict[str, Any] | None:
    cp = run_ctl(env, "status", "--json", timeout=10)
    return json.loads(cp.stdout) if cp.returncode == 0 else None


def test_a_clean_stop_removes_only_the_socket_it_bound(tmp_path: Path) -> None:
    d = start_daemon(tmp_path / "snapd-home")
    path = Path(d.endpoint.removeprefix("ipc://"))
    path.unlink()
    other = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        other.bind(str(path))  # someone else's socket now lives at the path
        other.listen()
        os.kill(d.pid, signal.SIGTERM)
        assert d.wait_exit() == 0, d.log()[-3000:]
        assert path.exists(), "the daemon removed a socket it did not bind"
    finally:
        other.close()


# == point 15: the budget warning ===================================================================


def test_snapctl_gc_puts_its_budget_warning_in_status(tmp_path: Path) -> None:
    """`snapctl gc` runs what the periodic GC runs, status included: a store it finds over its
    budget (once its objects pass the grace period) is warned about in `status` at once, not
    after the next periodic GC (an hour later by default)."""
    home = tmp_path / "snapd-home"
    env = {**base_env(home), "SNAPD_RETENTION_BUDGET_BYTES": "1", "SNAPD_RETENTION_GRACE_S": "0.5"}
    d = start_daemon(home, env)
    try:
        root = tmp_path / "ws"
        root.mkdir()
        (root / "f.txt").write_text("more than one byte\n")
        d.ctl("watch", root)
        assert not any("budget" in w for w in d.call("status")["warnings"])
        wait_for(lambda: d.ctl_json("gc")["warnings"], what="gc finds the store over its budget")
        warnings = d.call("status")["warnings"]
        assert any("over its budget of 1" in w for w in warnings), warnings
    finally:
        assert d.stop() == 0


# == point 14: unknown SNAPD_* names are reported by every run, agent hooks included ==================


def test_an_agent_hook_reports_a_misspelled_snapd_variable_and_still_marks(daemon: Daemon, ws: Path) -> None:
    env = {**daemon.env, "SNAPD_RETENTION_MAX_MARK": "5"}
    event = {"session_id": "s1", "cwd": str(ws), "hook_event_name": "UserPromptSubmit", "prompt": "go"}
    cp = run_ctl(env, "hook", "claude-code", "--project", cwd=ws, input=json.dumps(event).encode())
    assert cp.returncode == 0, describe(cp)
    assert b"SNAPD_RETENTION_MAX_MARK " in cp.stderr and b"did you mean" in cp.stderr, describe(cp)
    assert daemon.ctl_json("log", cwd=ws)["marks"][0]["label"] == "turn-start"


# == the daemon's own configuration warnings: said once at start, then shown by status ==============


def test_the_daemons_config_warnings_are_logged_once_and_shown_by_status(tmp_path: Path) -> None:
    """A misspelled ``SNAPD_*`` name in the daemon's environment is the user's to fix: the
    foreground daemon says it once (its log is its stderr here), and ``snapctl status`` — run
    from a shell without the typo — shows it, in text and in JSON, for as long as it stands."""
    home = tmp_path / "snapd-home"
    clean = base_env(home)
    d = start_daemon(home, {**clean, "SNAPD_RETENTION_MAX_MARK": "5"})
    try:
        said = d.log().count("SNAPD_RETENTION_MAX_MARK ")
        assert said == 1, d.log()
        status = json.loads(run_ctl(clean, "status", "--json").stdout)
        daemon_said = [w for w in status["warnings"] if "SNAPD_RETENTION_MAX_MARK " in w]
        assert len(daemon_said) == 1 and "did you mean SNAPD_RETENTION_MAX_MARKS" in daemon_said[0], status
        assert daemon_said[0].startswith("the daemon's configuration: "), daemon_said
        text = run_ctl(clean, "status")
        assert text.returncode == 0, describe(text)
        assert text.stderr.count(b"SNAPD_RETENTION_MAX_MARK ") == 1, describe(text)
    finally:
        assert d.stop() == 0
