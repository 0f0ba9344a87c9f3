"""``snapctl`` as a person and a script meet it: a real daemon, the real CLI, a real terminal.

Issue 14 ("asks before it destroys, keeps a running daemon reachable, docs tell the truth")
and the CLI points of issue 8 (paths in ``cat``, non-UTF-8 text, pruned labels, terminal
escapes). Questions are tested on a pseudo-terminal (``Pty``: standard input and error are a
pty, standard output the pty or a file), "hung" is a real daemon stopped with SIGSTOP.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from e2e_helpers import (
    Daemon,
    Pty,
    base_env,
    describe,
    raw_json,
    request,
    run_ctl,
    start_daemon,
    wait_for,
)

pytestmark = pytest.mark.timeout(120)


def _status_ws(d: Daemon, root: Path) -> dict[str, Any]:
    return next(w for w in d.call("status")["workspaces"] if w["root"] == str(root))


@pytest.fixture
def stopped(daemon: Daemon) -> Iterator[Daemon]:
    """The daemon, frozen with SIGSTOP (a hung daemon: its socket still accepts connections)."""
    os.kill(daemon.pid, signal.SIGSTOP)
    try:
        yield daemon
    finally:
        os.kill(daemon.pid, signal.SIGCONT)


# == questions: asked on the terminal, or not at all ===============================================


def _rolled_back_setup(daemon: Daemon, ws: Path) -> None:
    (ws / "keep.txt").write_text("at start\n")
    daemon.ctl("mark", "start", cwd=ws)
    (ws / "keep.txt").write_text("changed\n")
    (ws / "new.txt").write_text("created after start\n")


def test_rollback_question_reaches_the_terminal_when_stdout_is_redirected(daemon: Daemon, ws: Path) -> None:
    """Issue 14, point 1: `rollback > out.txt` must still show the plan and the question."""
    _rolled_back_setup(daemon, ws)
    out = ws.parent / "out.txt"

    err = ws.parent / "err.txt"

    def answer(reply: bytes, *args: str, stderr: Path | None = None) -> Pty:
        t = Pty(daemon.env, *args, cwd=ws, stdout=out, stderr=stderr)
        t.read_until(b"[y/N] ")
        t.send(reply)
        return t

    t = answer(b"y\n", "rollback", "--to", "start")
    assert t.finish() == 0, t.out
    assert b"apply this rollback? [y/N]" in t.out
    assert b"delete new.txt" in t.out  # the plan the person confirms is on their screen
    assert b"[y/N]" not in out.read_bytes()
    assert b"rolled back" in out.read_bytes()
    assert (ws / "keep.txt").read_text() == "at start\n" and not (ws / "new.txt").exists()

    # undo asks the same way, on the terminal itself even with stderr redirected too
    t = answer(b"n\n", "undo", stderr=err)
    assert t.finish() == 1, t.out  # "n" changes nothing and exits 1
    assert b"recreate new.txt" in t.out and b"[y/N]" not in err.read_bytes() + out.read_bytes(), t.out
    assert not (ws / "new.txt").exists()
    # with --json, stdout is JSON only: the question and the plan went to the terminal
    t = answer(b"y\n", "undo", "--json")
    assert t.finish() == 0, t.out
    assert json.loads(out.read_bytes())["ok"] is True
    assert b"recreate new.txt" in t.out, t.out
    assert (ws / "new.txt").read_text() == "created after start\n"


def test_no_terminal_means_no_question_and_no_change(daemon: Daemon, ws: Path) -> None:
    """Issue 14, point 1: with nothing to ask on, refuse (and say --yes): "y" piped in is no answer."""
    _rolled_back_setup(daemon, ws)
    for cmd, stdin in ((("rollback", "--to", "start"), b"y\n"), (("undo",), b""), (("forget",), b"y\n")):
        cp = subprocess.run(
            [sys.executable, "-m", "snapd", *cmd], env=daemon.env, cwd=ws, input=stdin,
            capture_output=True, timeout=30, start_new_session=True,  # no controlling terminal
        )
        if cmd == ("undo",):
            assert cp.returncode != 0, describe(cp)  # nothing to undo yet, or refused: never applied
            continue
        assert cp.returncode == 2, describe(cp)
        assert b"--yes" in cp.stderr and b"[y/N]" not in cp.stdout, describe(cp)
    assert (ws / "new.txt").exists()
    assert daemon.ctl_json("log", cwd=ws)["marks"]  # forget deleted nothing


def test_forget_names_what_it_deletes_and_asks(daemon: Daemon, ws: Path) -> None:
    """Issue 14, point 3: forget asks like rollback (terminal, or --yes) and names marks and bytes."""
    (ws / "a.txt").write_text("x" * 3000)
    daemon.ctl("mark", "one", cwd=ws)
    t = Pty(daemon.env, "forget", cwd=ws)
    t.read_until(b"delete this history? [y/N] ")
    t.send(b"n\n")
    assert t.finish() == 1, t.out
    assert b"2 marks" in t.out and b"KiB of file contents" in t.out, t.out
    assert b"nothing deleted" in t.out
    assert len(daemon.ctl_json("log", cwd=ws)["marks"]) == 2
    out = daemon.ctl_json("forget", "--yes", "-w", ws)
    assert out["forgotten_marks"] == 2 and out["bytes"] >= 3000, out
    cp = daemon.ctl("log", cwd=ws, check=False)
    assert cp.returncode == 6, describe(cp)


def test_forget_says_when_gc_gives_the_space_back(tmp_path: Path) -> None:
    """Issue 31, point 12: forget said "`snapctl gc` reclaims the space", then gc freed 0 B:
    the grace period (objects written in its last minutes are kept, a capture in flight may
    still need them) was not mentioned. Both now say it, and gc says when; after it, gc frees."""
    home = tmp_path / "snapd-home"
    home.mkdir(mode=0o700)
    (home / "config.toml").write_text("[retention]\ngrace_s = 10\n")
    d = start_daemon(home)
    try:
        root = tmp_path / "w"
        root.mkdir()
        (root / "big.bin").write_bytes(os.urandom(200_000))  # incompressible: its bytes are the space
        d.ctl("watch", root)
        out = d.ctl("forget", "--yes", "-w", root).stdout.decode()
        assert "10 s grace period" in out and "GC every 1 h" in out, out
        first = d.ctl("gc").stdout.decode()  # well inside the grace: nothing freed, and said why
        assert "freed 0 B" in first and "kept for now: " in first and "grace period" in first, first

        def freed() -> bool:
            return bool(d.ctl_json("gc")["stored_bytes"] < 100_000)

        wait_for(freed, timeout=30, interval=0.5, what="gc reclaims the forgotten workspace's objects")
    finally:
        assert d.stop() == 0


def _undocumented(parser: argparse.ArgumentParser, where: str) -> Iterator[str]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _undocumented(sub, f"{where} {name}")
        elif not isinstance(action, (argparse._HelpAction, argparse._VersionAction)) and not action.help:
            yield f"{where}: {'/'.join(action.option_strings) or action.dest}"


def test_every_option_and_argument_of_every_command_says_what_it_is() -> None:
    """Issue 31, point 12: `snapctl mark --help` listed -m, --agent and --session with no
    text (and so did a dozen others). Every option and argument of snapctl's and snapd's
    commands has its help; `mark --help` shows them, as a user runs it."""
    from snapd.cli import build_parser
    from snapd.daemon.main import build_parser as daemon_parser

    missing = [*_undocumented(build_parser(), "snapctl"), *_undocumented(daemon_parser(), "snapd")]
    assert not missing, missing
    cp = run_ctl(dict(os.environ), "mark", "--help")
    assert cp.returncode == 0, describe(cp)
    for text in (b"a free-text note kept with the mark", b"the agent's session id", b"(e.g. claude)"):
        assert text in b" ".join(cp.stdout.split()), describe(cp)


# == a running daemon stays reachable ===============================================================


def test_broken_config_file_warns_but_keeps_clients_connected(daemon: Daemon, ws: Path) -> None:
    """Issue 14, point 2: a typo in config.toml must not cut clients off a running daemon."""
    (daemon.snapd_home / "config.toml").write_text("log_levle = 1\n")
    for args in (("status",), ("mark", "after-typo"), ("log",)):
        cp = daemon.ctl(*args, cwd=ws)
        for needed in (b"warning", b"log_levle", b"config.toml"):
            assert needed in cp.stderr, describe(cp)
    for broken in (b"this is not toml [\n", b'log_level = "\xff"\n'):  # the second is not UTF-8
        (daemon.snapd_home / "config.toml").write_bytes(broken)
        cp = daemon.ctl("status", "--json")
        assert json.loads(cp.stdout)["pid"] == daemon.pid and b"not valid TOML" in cp.stderr, describe(cp)
    # `snapd stop` reaches it too; `snapd start` (which would use the settings) refuses the file
    stop = [sys.executable, "-c", "import sys; from snapd.daemon.main import main; sys.exit(main(['stop']))"]
    cp = subprocess.run(stop, env=daemon.env, capture_output=True, timeout=30, cwd="/")
    assert cp.returncode == 0 and b"warning" in cp.stderr and b"config.toml" in cp.stderr, describe(cp)
    assert daemon.wait_exit(15) == 0
    start = [sys.executable, "-m", "snapd", "start"]
    for broken in (b"this is not toml [\n", b'log_level = "\xff"\n'):
        (daemon.snapd_home / "config.toml").write_bytes(broken)
        cp = subprocess.run(start, env=daemon.env, capture_output=True, timeout=30, cwd="/")
        assert cp.returncode == 2 and b"not valid TOML" in cp.stderr, describe(cp)
        assert b"Traceback" not in cp.stderr, describe(cp)


def test_unknown_snapd_variables_are_named(daemon: Daemon, ws: Path) -> None:
    """Issue 14, point 14: a misspelled SNAPD_* variable is not silently ignored."""
    env = {**daemon.env, "SNAPD_RETENTION_MAX_MARK": "5"}
    cp = run_ctl(env, "status", cwd=ws)
    assert cp.returncode == 0, describe(cp)
    assert b"SNAPD_RETENTION_MAX_MARK " in cp.stderr, describe(cp)
    assert b"did you mean SNAPD_RETENTION_MAX_MARKS" in cp.stderr, describe(cp)
    other = _daemon_stderr(ws.parent / "other-home", {"SNAPD_SIZE_CAPP": "1"})
    assert b"SNAPD_SIZE_CAPP" in other and b"did you mean SNAPD_SIZE_CAP" in other, other


def _daemon_stderr(home: Path, extra: dict[str, str]) -> bytes:
    """Start a daemon with ``extra`` variables, stop it, and return what it printed on stderr."""
    env = {**base_env(home), **extra}
    proc = subprocess.Popen(
        [sys.executable, "-m", "snapd", "start"], env=env, cwd="/",
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )
    try:
        wait_for(lambda: run_ctl(env, "status").returncode == 0, 20, what="second daemon answers")
        assert run_ctl(env, "stop").returncode == 0
        _, err = proc.communicate(timeout=20)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    return err


@pytest.mark.parametrize("value", ["inf", "nan", "0", "-1", "soon"])
def test_bad_timeout_values_are_usage_errors(daemon: Daemon, value: str) -> None:
    """Issue 14, point 4: no traceback, no "start the daemon" for a daemon that is running."""
    cp = daemon.ctl("--timeout", value, "status", check=False)
    assert cp.returncode == 2, describe(cp)
    assert b"Traceback" not in cp.stderr and b"--timeout" in cp.stderr and b"snapd start" not in cp.stderr


def test_a_deadline_too_short_to_meet_does_not_call_a_live_daemon_hung(daemon: Daemon) -> None:
    """Issue 14, point 4: a live daemon that misses a 1 ns deadline is "running", not "hung"."""
    cp = daemon.ctl("status", "--timeout", "1e-9", check=False)  # --timeout after the command, too
    assert cp.returncode == 9, describe(cp)
    assert b"is running but did not finish" in cp.stderr and b"hung" not in cp.stderr, describe(cp)


def test_hung_daemon_is_not_reported_as_absent(stopped: Daemon, tmp_path: Path) -> None:
    """Issue 14, point 4: a stopped daemon times out (exit 9) with a message that says it is
    there but not answering; no daemon at all stays exit 3 (tested in test_e2e)."""
    started = time.monotonic()
    cp = stopped.ctl("--timeout", "2", "status", check=False, timeout=30)
    assert cp.returncode == 9, describe(cp)
    assert b"answered nothing" in cp.stderr and b"snapd start" not in cp.stderr, describe(cp)
    assert time.monotonic() - started < 15
    out = stopped.ctl("--timeout", "1", "status", "--json", check=False, timeout=30)
    assert json.loads(out.stdout)["error"]["code"] == "timeout"


def test_one_deadline_rule_setting_overrides_command_defaults(stopped: Daemon, tmp_path: Path) -> None:
    """Issue 14, point 5: client_timeout_s / SNAPD_CLIENT_TIMEOUT_S replace every command's own
    deadline (mark's is 120 s), --timeout replaces both; --help says so."""
    work = tmp_path / "work"
    work.mkdir()
    for env in (
        {**stopped.env, "SNAPD_CLIENT_TIMEOUT_S": "1"},
        {**stopped.env, "SNAPD_CLIENT_TIMEOUT_S": "600"},  # --timeout below wins
    ):
        args = ("mark", "m") if env["SNAPD_CLIENT_TIMEOUT_S"] == "1" else ("--timeout", "1", "mark", "m")
        started = time.monotonic()
        cp = run_ctl(env, *args, cwd=work, timeout=60)
        assert cp.returncode == 9, describe(cp)
        assert time.monotonic() - started < 15, "the command's own 120 s deadline was used"
    (stopped.snapd_home / "config.toml").write_text("client_timeout_s = 1\n")
    started = time.monotonic()
    cp = run_ctl(stopped.env, "log", cwd=work, timeout=60)
    assert cp.returncode == 9 and time.monotonic() - started < 15, describe(cp)
    (stopped.snapd_home / "config.toml").unlink()
    help_text = run_ctl(stopped.env, "--help").stdout.decode()
    for needed in ("client_timeout_s", "SNAPD_CLIENT_TIMEOUT_S", "--timeout replaces both", "120 s  mark"):
        assert needed in help_text, help_text


def test_documented_deadlines_are_the_ones_used() -> None:
    """Issue 14, point 5: docs/operations.md's table, `snapctl --help` and the code agree, and
    every command that asks the daemon has a deadline there."""
    from snapd.cli import build_parser, request

    doc = (Path(__file__).parents[1] / "docs" / "operations.md").read_text()
    section = doc.split("### Client deadlines", 1)[1].split("\n\n")
    table = next(p for p in section if p.startswith("| deadline |"))
    documented: dict[str, float] = {}
    for row in table.splitlines()[2:]:
        seconds, commands = row.strip("|").split("|")
        for name in commands.split("(")[0].replace("`", "").split(","):
            documented[name.strip()] = float(seconds.strip().removesuffix(" s"))
    assert documented == request.DEADLINES
    # integrate never calls the daemon; hook has its own budget; ui: each request its op's
    own_budget = {"integrate", "hook", "ui"}
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    assert set(sub.choices) - own_budget == set(request.DEADLINES)
    help_text = build_parser().format_help()
    for name, seconds in request.DEADLINES.items():
        assert any(f"{seconds:g} s" in line and name in line for line in help_text.splitlines()), name


# == status tells the truth ==========================================================================


def test_vanished_and_replaced_roots_show_in_status_at_once(daemon: Daemon, ws: Path) -> None:
    """Issue 14, point 6: no `[ready]` for a root that is gone, without waiting for a restart."""
    shutil.rmtree(ws)
    w = _status_ws(daemon, ws)
    assert w["state"] == "error" and "no longer exists" in w["error"], w
    human = daemon.ctl("status")
    assert b"[error]" in human.stdout and b"no longer exists" in human.stderr, describe(human)
    ws.mkdir()
    w = _status_ws(daemon, ws)
    assert w["state"] == "error" and "replaced" in w["error"], w
    cp = daemon.ctl("mark", "m", cwd=ws, check=False)
    assert cp.returncode != 0 and b"replaced" in cp.stderr, describe(cp)


def test_plurals_and_not_found_for_a_missing_directory(daemon: Daemon, tmp_path: Path) -> None:
    """Issue 14, point 11: `watch /nonexistent` is not_found (exit 6); "1 file", "1 mark"."""
    cp = daemon.ctl("watch", tmp_path / "nonexistent", check=False)
    assert cp.returncode == 6, describe(cp)
    one = tmp_path / "one"
    one.mkdir()
    (one / "only.txt").write_text("x\n")
    daemon.ctl("watch", one)
    assert b"1 file," in daemon.ctl("status").stdout
    out = daemon.ctl("forget", "--yes", "-w", one).stdout
    assert b"1 mark deleted" in out, out


def test_clean_stop_leaves_no_socket_behind(tmp_path: Path) -> None:
    """Issue 14, point 11: neither control.sock nor the short /tmp directory of a long path."""
    long_home = tmp_path / ("h" * 60) / ("i" * 60)
    long_home.parent.mkdir()
    d = start_daemon(long_home)
    sock = Path(d.endpoint.removeprefix("ipc://"))
    assert sock.exists() and str(sock).startswith("/tmp/snapd-"), sock
    assert d.stop() == 0
    assert not sock.exists() and not sock.parent.exists(), sorted(os.listdir(sock.parent))
    d = start_daemon(tmp_path / "short")
    sock = Path(d.endpoint.removeprefix("ipc://"))
    assert d.stop() == 0
    assert not sock.exists(), sock


def test_install_service_carries_snapd_home(tmp_path: Path) -> None:
    """Issue 14, point 10: the unit uses the store that `snapd start` here would use."""
    home = tmp_path / "odd home %s"
    env = {**base_env(home), "XDG_CONFIG_HOME": str(tmp_path / "cfg"), "SNAPD_RETENTION_MAX_MARKS": "50"}
    env.pop("DBUS_SESSION_BUS_ADDRESS", None)
    env["XDG_RUNTIME_DIR"] = str(tmp_path / "no-runtime")
    cp = subprocess.run(
        [sys.executable, "-m", "snapd", "install-service", "--no-start"],
        env=env, capture_output=True, timeout=60, cwd="/",
    )
    assert cp.returncode == 0, describe(cp)
    unit = (tmp_path / "cfg" / "systemd" / "user" / "snapd.service").read_text()
    assert f'Environment="SNAPD_HOME={tmp_path}/odd home %%s"' in unit, unit
    assert 'Environment="SNAPD_RETENTION_MAX_MARKS=50"' in unit, unit
    assert b"SNAPD_HOME" in cp.stdout
    if shutil.which("systemd-analyze"):
        unit_file = tmp_path / "snapd.service"
        unit_file.write_text(unit)
        check = subprocess.run(["systemd-analyze", "verify", str(unit_file)], capture_output=True, timeout=60)
        assert check.returncode == 0 and not check.stdout.strip() and not check.stderr.strip(), check


def test_directory_modes_are_as_documented(tmp_path: Path) -> None:
    """Issue 14, point 15: snapd's own directories are 0700; parents it creates on the way
    (~/.local, ~/.local/share) get the usual mode (umask), as docs/operations.md says."""
    env = {**base_env(tmp_path), "XDG_RUNTIME_DIR": str(tmp_path / "run")}
    env.pop("SNAPD_HOME")
    old = os.umask(0o022)
    try:
        d = start_daemon(tmp_path / "unused", env)
    finally:
        os.umask(old)
    try:
        home = Path(env["HOME"])
        assert stat.S_IMODE((home / ".local/share/snapd").stat().st_mode) == 0o700
        assert stat.S_IMODE((home / ".local/share/snapd/store").stat().st_mode) == 0o700
        assert stat.S_IMODE((home / ".local").stat().st_mode) == 0o755
    finally:
        assert d.stop() == 0


# == log, names and references =====================================================================


def test_log_pages_and_says_when_more_exist(daemon: Daemon, ws: Path) -> None:
    """Issue 14, point 8: default 20 (in --help), "N older marks" hint, --before, --all, -n checked."""
    for i in range(24):
        daemon.ctl("mark", f"m-{i:02d}", cwd=ws)
    cp = daemon.ctl("log", cwd=ws)
    lines = cp.stdout.decode().splitlines()
    assert len(lines) == 20 and "m-23" in lines[0], lines
    assert b"5 older marks" in cp.stderr and b"--before" in cp.stderr, describe(cp)
    page = daemon.ctl_json("log", cwd=ws)
    assert page["more"] == 5
    rest = daemon.ctl_json("log", "--before", page["marks"][-1]["id"], cwd=ws)
    assert [m["label"] for m in rest["marks"]] == ["m-03", "m-02", "m-01", "m-00", "baseline"]
    assert rest["more"] == 0
    assert len(daemon.ctl_json("log", "--all", cwd=ws)["marks"]) == 25
    assert len(daemon.ctl_json("log", "-n", "3", cwd=ws)["marks"]) == 3
    cp = daemon.ctl("log", "-n", "3", "-w", ws, cwd=ws.parent)  # the hint keeps the page size and -w
    assert f"snapctl log -w {ws} -n 3 --before ".encode() in cp.stderr, describe(cp)
    for bad in ("0", "-5", "x", "2 --all"):
        cp = daemon.ctl("log", "-n", *bad.split(), cwd=ws, check=False)
        assert cp.returncode == 2 and not cp.stdout, describe(cp)
    assert "default 20" in daemon.ctl("log", "--help").stdout.decode()
    reply = raw_json(daemon.endpoint, request("log", {"limit": 0, "workspace": str(ws)}))
    assert reply["error"]["code"] == "usage", reply


def test_every_command_names_a_workspace_with_w(daemon: Daemon, ws: Path, tmp_path: Path) -> None:
    """Issue 14, point 9: what the errors suggest ("pass -w PATH") works for every command."""
    outside = tmp_path / "outside"
    outside.mkdir()
    cp = daemon.ctl("unwatch", cwd=outside, check=False)
    assert cp.returncode == 6 and b"-w PATH" in cp.stderr, describe(cp)
    for args in (("mark", "via-w"), ("log",), ("show", "via-w"), ("pin", "via-w"), ("unpin", "via-w"),
                 ("diff", "via-w"), ("rollback", "--to", "via-w", "--dry-run"), ("unwatch",)):
        daemon.ctl(*args, "-w", ws, cwd=outside)
    daemon.ctl("watch", "-w", ws, cwd=outside)  # watch names its directory the same way
    assert _status_ws(daemon, ws)["watching"]
    daemon.ctl("unwatch", ws, cwd=outside)  # the positional PATH still works where it did
    daemon.ctl("watch", ws, cwd=outside)
    for two_names in (("forget", ws, "-w", outside), ("watch", ws, "-w", outside)):
        cp = daemon.ctl(*two_names, check=False)
        assert cp.returncode == 2 and b"named twice" in cp.stderr, describe(cp)
    daemon.ctl("forget", "--yes", "-w", ws, cwd=outside)


def test_every_command_takes_json_and_usage_errors_are_json(daemon: Daemon, ws: Path) -> None:
    """Issue 14, point 12: README says every command takes --json; make it true."""
    (ws / "f.txt").write_text("f\n")
    daemon.ctl("mark", "m1", cwd=ws)
    for args in (("status",), ("mark", "m2"), ("log",), ("show", "m1"), ("cat", "m1", "f.txt"), ("verify",),
                 ("gc", "--dry-run"), ("pin", "m1"), ("unpin", "m1"), ("diff", "m1"), ("unwatch",),
                 ("watch", "."), ("rollback", "--to", "m1", "--dry-run")):
        cp = daemon.ctl(*args, "--json", cwd=ws)
        assert isinstance(json.loads(cp.stdout), dict), describe(cp)
    assert json.loads(daemon.ctl("cat", "m1", "f.txt", "--json", cwd=ws).stdout)["data_b64"] == "Zgo="
    assert json.loads(daemon.ctl("--json", "log", cwd=ws).stdout)["marks"]  # before the name, too
    for bad in (("log", "-n", "x", "--json"), ("bogus", "--json"), ("mark", "--json"),
                ("status", "--json", "--", "x"), ("--json", "log", "-n", "x"), ("--json", "integrate")):
        cp = daemon.ctl(*bad, cwd=ws, check=False)
        assert cp.returncode == 2, describe(cp)
        err = json.loads(cp.stdout)
        assert err["ok"] is False and err["error"]["code"] == "usage", err
    cp = daemon.ctl("stop", "--json")
    assert json.loads(cp.stdout)["pid"] == daemon.pid
    assert daemon.wait_exit(15) == 0


def test_session_limits_label_references(daemon: Daemon, ws: Path) -> None:
    """Issue 14, point 13: --session on show, rollback, diff, cat (and pin)."""
    ids = {}
    for session in ("s1", "s2"):
        (ws / "f.txt").write_text(f"{session}\n")
        ids[session] = daemon.ctl_json("mark", "turn-start", "--session", session, cwd=ws)["id"]
    assert daemon.ctl_json("show", "turn-start", cwd=ws)["id"] == ids["s2"]
    assert daemon.ctl_json("show", "turn-start", "--session", "s1", cwd=ws)["id"] == ids["s1"]
    assert daemon.ctl("cat", "turn-start", "f.txt", "--session", "s1", cwd=ws).stdout == b"s1\n"
    plan = daemon.ctl_json("rollback", "--to", "turn-start", "--session", "s1", "--dry-run", cwd=ws)
    assert plan["target"]["id"] == ids["s1"]
    diff = daemon.ctl_json("diff", "turn-start", "--session", "s1", cwd=ws)
    assert [f["path"] for f in diff["files"]] == ["f.txt"]
    assert daemon.ctl_json("pin", "turn-start", "--session", "s1", cwd=ws)["id"] == ids["s1"]
    cp = daemon.ctl("show", "turn-start", "--session", "s3", cwd=ws, check=False)
    assert cp.returncode == 6 and b"session s3" in cp.stderr, describe(cp)


def test_cat_paths_are_relative_to_the_current_directory(daemon: Daemon, ws: Path) -> None:
    """Issue 8, point 11: from a subdirectory, `cat REF README.md` is that directory's file."""
    (ws / "sub").mkdir()
    (ws / "README.md").write_text("root\n")
    (ws / "sub" / "README.md").write_text("sub\n")
    daemon.ctl("mark", "m", cwd=ws)
    assert daemon.ctl("cat", "m", "README.md", cwd=ws / "sub").stdout == b"sub\n"
    assert daemon.ctl("cat", "m", "../README.md", cwd=ws / "sub").stdout == b"root\n"
    assert daemon.ctl("cat", "m", "README.md", cwd=ws).stdout == b"root\n"
    # from outside the workspace (named with -w), a relative path starts at its root
    assert daemon.ctl("cat", "-w", ws, "m", "sub/README.md", cwd="/").stdout == b"sub\n"
    # diff -- PATH follows the same rule
    (ws / "sub" / "README.md").write_text("sub changed\n")
    (ws / "README.md").write_text("root changed\n")
    files = json.loads(daemon.ctl("diff", "m", "--json", "--", "README.md", cwd=ws / "sub").stdout)["files"]
    assert [f["path"] for f in files] == ["sub/README.md"], files


def test_non_utf8_text_arguments_are_usage_errors(daemon: Daemon, ws: Path) -> None:
    """Issue 8, point 14: refused clearly by snapctl, and bad_request over the protocol."""
    for args in ((b"mark", b"m", b"--agent", b"a\xff"), (b"mark", b"m", b"--session", b"\xfe"),
                 (b"mark", b"m", b"-m", b"msg \xff"), (b"mark", b"l\xff"), (b"show", b"x\xff")):
        cp = run_ctl(daemon.env, *args, cwd=ws)
        assert cp.returncode == 2, describe(cp)
        assert b"UTF-8" in cp.stderr and b"Traceback" not in cp.stderr, describe(cp)
    ep = daemon.endpoint
    payload = b'{"op": "mark", "id": "s1", "version": 1, "args": {"label": "m", "agent": "\\udcff", '
    payload += b'"cwd": "%s"}}'
    reply = raw_json(ep, payload % str(ws).encode())
    assert reply["error"]["code"] == "bad_request" and "surrogate" in reply["error"]["message"], reply
    reply = raw_json(ep, b'{"op": "\\udcff", "id": "s2", "version": 1}')
    assert reply["error"]["code"] == "bad_request" and reply["id"] == "s2", reply
    reply = raw_json(ep, b'{"op": "log", "id": "s3", "version": 1, "args": {"\\ud800": 1}}')
    assert reply["error"]["code"] == "bad_request", reply
    assert daemon.ctl_json("mark", "still-serving", cwd=ws)["label"] == "still-serving"


def test_pruned_mark_is_named_by_label_too(tmp_path: Path) -> None:
    """Issue 8, point 16: "pruned by retention" whether the mark is named by id or by label."""
    home = tmp_path / "snapd-home"
    env = {**base_env(home), "SNAPD_RETENTION_MAX_MARKS": "2"}
    d = start_daemon(home, env)
    try:
        root = tmp_path / "ws"
        root.mkdir()
        d.ctl("watch", root)
        first = d.ctl_json("mark", "first", cwd=root)["id"]
        for label in ("second", "third", "fourth"):
            d.ctl("mark", label, cwd=root)
        assert first in [e["id"] for e in d.ctl_json("gc")["evicted"]]
        for ref in (first, "first"):
            cp = d.ctl("show", ref, cwd=root, check=False)
            assert cp.returncode == 6 and b"pruned by retention" in cp.stderr, describe(cp)
    finally:
        assert d.stop() == 0


# == nothing reaches the terminal raw ==============================================================

ESC_NAME = b"evil\x1b]0;pwned\x07\x1b[2J.txt"


def test_names_labels_and_messages_are_escaped_for_the_terminal(daemon: Daemon, ws: Path) -> None:
    """Issue 8, point 17: no ESC (or other control byte) from a file name, message or agent
    name reaches the terminal, in the plan, log, show, diff or status."""
    daemon.ctl("mark", "clean", "-m", "first\x1b[31m line\rsecond", "--agent", "ag\x1b[2Jent", cwd=ws)
    (ws / os.fsdecode(ESC_NAME)).write_bytes(b"x\n")
    (ws / "plain.txt").write_text("a\x1b[31mred\n")
    outputs = [
        daemon.ctl("rollback", "--to", "clean", "--dry-run", cwd=ws),
        daemon.ctl("log", cwd=ws),
        daemon.ctl("show", "clean", cwd=ws),
        daemon.ctl("diff", "clean", cwd=ws),
        daemon.ctl("mark", "after", cwd=ws),
        daemon.ctl("show", "after", cwd=ws),
        daemon.ctl("status"),
    ]
    for cp in outputs:
        for stream in (cp.stdout, cp.stderr):
            assert not any(b < 0x20 and b not in b"\n\t" or b == 0x7F for b in stream), describe(cp)
    plan = outputs[0].stdout.decode()
    assert "delete evil\\x1b]0;pwned\\x07\\x1b[2J.txt" in plan, plan
    assert "first\\x1b[31m line\\x0dsecond" in outputs[2].stdout.decode()


@pytest.fixture
def capped(tmp_path: Path) -> Iterator[tuple[Daemon, Path]]:
    """A daemon whose size cap is 1 KiB, and a watched workspace ``tmp_path/"ws"``."""
    home = tmp_path / "snapd-home"
    d = start_daemon(home, {**base_env(home), "SNAPD_SIZE_CAP": "1 KiB"})
    try:
        root = tmp_path / "ws"
        root.mkdir()
        (root / "grows.bin").write_bytes(b"small\n")
        (root / "other.txt").write_text("one\n")
        d.ctl("watch", root)
        yield d, root
    finally:
        assert d.stop() == 0


def test_rollback_lists_a_kept_path_once(capped: tuple[Daemon, Path]) -> None:
    """Issue 8, point 17: the kept path is listed once, whether the plan or the result lists it."""
    d, root = capped
    d.ctl("mark", "small", cwd=root)
    (root / "grows.bin").write_bytes(b"x" * 4096)  # now over the cap: its content cannot be held
    (root / "other.txt").write_text("two\n")
    cp = d.ctl("rollback", "--to", "small", "--yes", cwd=root, check=False)
    assert cp.returncode == 10, describe(cp)
    assert (cp.stdout + cp.stderr).count(b"grows.bin") == 1, describe(cp)
    assert (root / "other.txt").read_text() == "one\n"
    t = Pty(d.env, "rollback", "--to", "small", cwd=root)
    t.read_until(b"[y/N] ")
    t.send(b"y\n")
    assert t.finish() == 10, t.out
    assert t.out.count(b"grows.bin") == 1, t.out


def test_mark_summary_lists_a_skipped_path_once(capped: tuple[Daemon, Path]) -> None:
    """Issue 8, point 17: a path skipped by two captures between marks is one skipped path."""
    d, root = capped
    (root / "big.bin").write_bytes(b"x" * 4096)
    wait_for(lambda: _status_ws(d, root)["skipped"] == 1, what="the first capture skipped big.bin")
    (root / "big.bin").write_bytes(b"y" * 5000)
    summary = d.ctl_json("mark", "m", cwd=root)["summary"]
    assert summary["skipped"] == {"over size cap": ["big.bin"]}, summary
    assert summary["skipped_count"] == 1, summary


def test_a_reader_that_went_away_ends_the_output_quietly(daemon: Daemon, ws: Path) -> None:
    """``snapctl status --json | head -c 5``: the pipe breaks; the CLI exits 0 and says nothing
    (under PYTHONUNBUFFERED its stdout is buffered by the CLI, whose closing flush printed
    "Exception ignored ... BrokenPipeError")."""
    daemon.ctl("watch", ws)
    r, w = os.pipe()
    os.close(r)  # every write now fails with EPIPE
    try:
        env = dict(daemon.env, PYTHONUNBUFFERED="1")
        argv = [*daemon.python, "-m", "snapd", "status", "--json"]
        cp = subprocess.run(argv, env=env, stdout=w, stderr=subprocess.PIPE, timeout=30)
    finally:
        os.close(w)
    assert cp.returncode == 0 and cp.stderr == b"", cp.stderr
