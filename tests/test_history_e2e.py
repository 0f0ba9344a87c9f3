"""History between marks, end to end: a real daemon, real inotify, the real CLI.

Captures between marks are awaited through the ``history`` op itself (poll until the version
is listed), never by sleeping; a time between two captures is taken from the capture times
the daemon reports, so it names exactly the state in between.
"""

from __future__ import annotations

import datetime
import json
import os
import re
import stat
import zoneinfo
from pathlib import Path
from typing import Any

from e2e_helpers import (
    Daemon,
    base_env,
    cli_mark,
    cli_rollback,
    cli_undo,
    describe,
    run_ctl,
    snapshot,
    start_daemon,
    wait_for,
    write,
)

from snapd import timeref


def versions(d: Daemon, ws: Path, rel: str) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = d.ctl_json("history", rel, cwd=ws)["versions"]
    return out


def captured(d: Daemon, ws: Path, rel: str, status: str, size: int | None = None) -> dict[str, Any]:
    """Wait until the newest version of ``rel`` has ``status`` (and ``size``); return it."""

    def newest() -> dict[str, Any] | None:
        vs = versions(d, ws, rel)
        ok = vs and vs[0]["status"] == status and (size is None or vs[0]["size"] == size)
        return vs[0] if ok else None

    v = wait_for(newest, timeout=15, what=f"{rel} captured as {status}")
    assert isinstance(v, dict)
    return v


def between(earlier: dict[str, Any], later: dict[str, Any]) -> str:
    """A time reference to an instant after one capture and before the next."""
    assert later["time_ns"] > earlier["time_ns"] + 1
    return timeref.wire((earlier["time_ns"] + later["time_ns"]) // 2)


def test_rollback_to_a_time_between_two_marks_restores_the_files_as_captured_then(
    daemon: Daemon, ws: Path
) -> None:
    write(ws / "a.txt", "one\n")
    cli_mark(daemon, ws, "first")
    write(ws / "a.txt", "two, between the marks\n")
    write(ws / "sub" / "b.txt", "b\n", 0o600)
    (ws / "sub").chmod(0o700)  # a directory's mode is a version too
    two = captured(daemon, ws, "a.txt", "modified", 23)
    captured(daemon, ws, "sub/b.txt", "created")
    wait_for(lambda: any(v["mode"] == 0o700 for v in versions(daemon, ws, "sub")), what="sub's mode captured")
    then = snapshot(ws)
    write(ws / "a.txt", "three\n")
    (ws / "sub" / "b.txt").unlink()
    write(ws / "c.txt", "c\n")
    three = captured(daemon, ws, "a.txt", "modified", 6)
    cli_mark(daemon, ws, "second")
    before_rollback = snapshot(ws)
    instant = between(two, three)

    plan = daemon.ctl_json("rollback", "--to", instant, "--dry-run", cwd=ws)
    assert plan["time"]["ref"] == instant
    assert plan["time"]["base"]["label"] == "first"
    used = {v["path"]: v["captured_ns"] for v in plan["time"]["versions"]}
    assert used["a.txt"] == two["time_ns"]  # the plan names the version it restores
    text = daemon.ctl("rollback", "--to", instant, "--dry-run", cwd=ws).stdout.decode()
    assert "as captured at" in text and "built from mark" in text and "version captured" in text

    code, res = cli_rollback(daemon, ws, "--to", instant)
    assert code == 0, res
    assert snapshot(ws) == then  # between the marks: what no mark holds
    assert res["pre_rollback"] is not None
    code, _ = cli_undo(daemon, ws)
    assert code == 0
    assert snapshot(ws) == before_rollback


def test_rollback_of_one_path_to_a_time_and_cat_and_diff_at_times(daemon: Daemon, ws: Path) -> None:
    write(ws / "app.py", "v1\n")
    write(ws / "other.py", "o1\n")
    v1 = captured(daemon, ws, "app.py", "created")
    write(ws / "app.py", "v2 longer\n")
    write(ws / "other.py", "o2 longer\n")
    v2 = captured(daemon, ws, "app.py", "modified", 10)
    captured(daemon, ws, "other.py", "modified", 10)
    instant = between(v1, v2)
    assert daemon.ctl("cat", instant, "app.py", cwd=ws).stdout == b"v1\n"
    assert daemon.ctl("cat", "@0s", "app.py", cwd=ws).stdout == b"v2 longer\n"  # relative: now
    diff = json.loads(daemon.ctl("diff", "--json", instant, "--", "app.py", cwd=ws).stdout)
    assert diff["from_time"]["ref"] == instant
    assert [f["path"] for f in diff["files"]] == ["app.py"]

    code, res = cli_rollback(daemon, ws, "--to", instant, "--", "app.py")
    assert code == 0, res
    assert (ws / "app.py").read_text() == "v1\n"
    assert (ws / "other.py").read_text() == "o2 longer\n"  # only the path named


def test_a_time_before_the_workspace_history_uses_its_baseline(daemon: Daemon, ws: Path) -> None:
    """Issue 31, point 8: `diff @1h` and `rollback --to @5m` on a workspace younger than that
    were not_found (exit 6) quoting a UTC nanosecond instant. What the user means is "as far
    back as you have": the baseline, said in local time. The oldest time `history` prints, typed
    back, names the baseline too (it was refused: a version's time is its capture's start, a
    mark's is taken after)."""
    write(ws / "late.txt", "made after the baseline\n")
    (ws / "early.txt").unlink(missing_ok=True)
    cli_mark(daemon, ws, "m1")
    baseline = daemon.ctl_json("log", cwd=ws)["marks"][-1]
    assert baseline["kind"] == "baseline"

    india = {**daemon.env, "TZ": "Asia/Kolkata"}  # a zone that is no whole hour off UTC
    cp = run_ctl(india, "diff", "@1h", "--stat", cwd=ws)
    assert cp.returncode == 0 and b"added" in cp.stdout and b"late.txt" in cp.stdout, describe(cp)
    local = datetime.datetime.fromtimestamp(baseline["created"], zoneinfo.ZoneInfo("Asia/Kolkata"))
    note = cp.stderr.decode()
    assert f"the workspace's history starts at {local:%Y-%m-%d %H:%M:%S}: using its baseline" in note, note
    diff = json.loads(daemon.ctl("diff", "--json", "@1h", cwd=ws).stdout)
    assert diff["from_time"]["base"]["id"] == baseline["id"]

    cp = daemon.ctl("rollback", "--to", "@5m", "--yes", cwd=ws)
    assert b"history starts at" in cp.stdout and b"using its baseline" in cp.stdout, describe(cp)
    assert not (ws / "late.txt").exists()
    code, res = cli_undo(daemon, ws)
    assert code == 0, res
    assert (ws / "late.txt").read_text() == "made after the baseline\n"

    write(ws / "late.txt", "changed\n")
    oldest = run_ctl(daemon.env, "history", "late.txt", cwd=ws).stdout.decode().splitlines()[-1]
    typed = "@" + oldest.split()[0] + " " + oldest.split()[1]  # "2026-12-06 05:00:01.234"
    cp = daemon.ctl("cat", typed, "late.txt", cwd=ws, check=False)
    assert cp.returncode == 0 and cp.stdout == b"made after the baseline\n", (oldest, describe(cp))

    cp = daemon.ctl("diff", "@999999999d", cwd=ws, check=False)
    assert cp.returncode == 2 and b"too far back" in cp.stderr, describe(cp)
    assert b"@-" not in cp.stderr and b"-2" not in cp.stderr, describe(cp)  # no year it never typed


def test_a_time_before_the_oldest_kept_mark_is_refused_in_local_time(tmp_path: Path) -> None:
    """With the baseline evicted, what came before the oldest kept mark is unknown: refused
    (not_found), quoting the oldest kept mark's time as a local time that can be typed back."""
    home = tmp_path / "snapd-home"
    home.mkdir(mode=0o700)
    (home / "config.toml").write_text("[retention]\nmax_marks = 2\n")
    d = start_daemon(home, {**base_env(home), "TZ": "Asia/Kolkata"})  # the daemon's zone: +05:30
    try:
        root = tmp_path / "w"
        root.mkdir()
        d.ctl("watch", root)
        for i in range(4):
            write(root / "f.txt", f"v{i}\n")
            cli_mark(d, root, f"m{i}")
        d.ctl("gc", cwd=root)
        marks = d.ctl_json("log", cwd=root)["marks"]
        assert all(m["kind"] != "baseline" for m in marks), marks
        cp = d.ctl("diff", "@1h", cwd=root, check=False)
        assert cp.returncode == 6, describe(cp)
        err = cp.stderr.decode()
        assert "nothing was captured in this workspace at or before" in err, err
        assert ".000000000Z" not in err and not re.search(r"\.[0-9]{9}Z", err), err
        oldest = re.search(r"at (@\S+)", err.split("oldest kept mark is")[1])
        assert oldest and oldest.group(1).rstrip(":").endswith("+05:30"), err
        assert d.ctl("diff", oldest.group(1).rstrip(":"), cwd=root).returncode == 0  # typed back: accepted
    finally:
        assert d.stop() == 0


def test_history_of_a_deleted_recreated_and_renamed_file(daemon: Daemon, ws: Path) -> None:
    write(ws / "f.txt", "first\n")
    captured(daemon, ws, "f.txt", "created")
    (ws / "f.txt").unlink()
    captured(daemon, ws, "f.txt", "deleted")
    write(ws / "f.txt", "second life\n")
    captured(daemon, ws, "f.txt", "recreated")
    cli_mark(daemon, ws, "turn-end", "--session", "s1", "--agent", "bot")
    os.rename(ws / "f.txt", ws / "g.txt")
    gone = captured(daemon, ws, "f.txt", "deleted")
    assert gone["renamed_to"] == "g.txt"
    statuses = [v["status"] for v in versions(daemon, ws, "f.txt")]
    assert statuses == ["deleted", "recreated", "deleted", "created"]
    recreated = versions(daemon, ws, "f.txt")[1]
    assert recreated["in_mark"] and recreated["mark"]["label"] == "turn-end"
    assert recreated["sessions"] == [{"session": "s1", "agent": "bot"}]
    g = versions(daemon, ws, "g.txt")
    assert [v["status"] for v in g] == ["created"] and g[0]["renamed_from"] == "f.txt"
    # a file whose directory moves: the directory's one deletion row deletes it too
    write(ws / "d" / "h.txt", "h\n")
    captured(daemon, ws, "d/h.txt", "created")
    os.rename(ws / "d", ws / "e")
    moved = captured(daemon, ws, "d/h.txt", "deleted")
    assert moved["via"] == "d" and moved["renamed_to"] == "e/h.txt"
    text = daemon.ctl("history", "f.txt", cwd=ws).stdout.decode()
    assert "renamed to g.txt" in text and "recreated" in text


def test_log_path_lists_only_the_marks_whose_turn_changed_it(daemon: Daemon, ws: Path) -> None:
    write(ws / "a.txt", "1")
    m1 = cli_mark(daemon, ws, "one")
    write(ws / "b.txt", "1")
    cli_mark(daemon, ws, "two")
    write(ws / "a.txt", "2")
    m3 = cli_mark(daemon, ws, "three")
    cli_mark(daemon, ws, "four")
    got = [m["id"] for m in daemon.ctl_json("log", "--path", "a.txt", cwd=ws)["marks"]]
    assert got == [m3, m1]
    write(ws / "dir" / "x", "1")
    m5 = cli_mark(daemon, ws, "five")
    assert [m["id"] for m in daemon.ctl_json("log", "--path", "dir", cwd=ws)["marks"]] == [m5]


def test_labels_starting_with_at_are_refused(daemon: Daemon, ws: Path) -> None:
    cp = daemon.ctl("mark", "@home", cwd=ws, check=False)
    assert cp.returncode == 2
    assert b"reserved for time references" in cp.stderr
    reply = daemon.ctl("mark", "@home", "--json", cwd=ws, check=False)
    assert json.loads(reply.stdout)["error"]["code"] == "usage"
    cp = daemon.ctl("pin", "@10m", cwd=ws, check=False)
    assert cp.returncode == 2 and b"is a time" in cp.stderr


def test_an_ambiguous_or_skipped_local_time_is_refused_before_sending(tmp_path: Path) -> None:
    """Europe/Berlin repeats 02:00-03:00 on 2026-10-25 and skips it on 2026-03-29: the CLI
    refuses both, with no daemon involved (there is none here: a sent request would fail
    with 'not running' instead)."""
    env = {**os.environ, "TZ": "Europe/Berlin", "SNAPD_HOME": str(tmp_path / "none")}
    cp = run_ctl(env, "cat", "@2026-10-25 02:30", "f", cwd=tmp_path)
    assert cp.returncode == 2 and b"happened twice" in cp.stderr, cp
    assert b"+02:00" in cp.stderr and b"+01:00" in cp.stderr
    cp = run_ctl(env, "rollback", "--to", "@2026-03-29T02:30", cwd=tmp_path)
    assert cp.returncode == 2 and b"never happened" in cp.stderr, cp
    cp = run_ctl(env, "cat", "@2026-10-25 02:30+01:00", "f", cwd=tmp_path)  # with its offset: sent
    assert cp.returncode == 3, cp


def test_a_rollback_to_a_time_keeps_what_the_mark_could_not_capture(
    capped_daemon: Daemon, capped_ws: Path
) -> None:
    """The workspace at an instant is built from a mark and the versions after it: a path the
    mark recorded as there but not captured (over the cap, a FIFO) stays so in the rebuilt
    tree, so a rollback to the instant keeps it and says so, never deletes it as 'created'."""
    d, ws = capped_daemon, capped_ws
    write(ws / "big.bin", b"B" * 4096)
    os.mkfifo(ws / "pipe")
    write(ws / "a.txt", "a\n")
    cli_mark(d, ws, "m")
    write(ws / "a.txt", "b\n")
    two = captured(d, ws, "a.txt", "modified", 2)
    instant = timeref.wire(two["time_ns"] + 1)
    write(ws / "big.bin", "small now\n")  # capturable now; at the instant it was not captured
    write(ws / "a.txt", "ccc\n")
    captured(d, ws, "a.txt", "modified", 4)
    wait_for(lambda: any(v["size"] == 10 for v in versions(d, ws, "big.bin")), what="big.bin captured")

    code, res = cli_rollback(d, ws, "--to", instant)
    assert (ws / "big.bin").read_text() == "small now\n", res
    assert code == 10 and [k["path"] for k in res["kept"]] == ["big.bin"], res
    assert (ws / "a.txt").read_text() == "b\n"
    assert stat.S_ISFIFO((ws / "pipe").lstat().st_mode)
