"""``snapctl run -- CMD``: a turn around a command (snapd/cli/run.py).

The protocol's ``run`` argument of ``mark`` is checked here too (pure); everything else runs a
real daemon and the real CLI as a subprocess.
"""

from __future__ import annotations

import fcntl
import json
import os
import pty
import shlex
import signal
import subprocess
import sys
import termios
from pathlib import Path
from typing import Any

import pytest
from e2e_helpers import Daemon, base_env, describe, run_ctl, wait_for, write

from snapd.errors import BadRequest, DaemonUnavailable
from snapd.ipc import protocol

pytestmark = pytest.mark.timeout(120)


def _mark_request(run: Any) -> bytes:
    args = {"label": "turn-end", "run": run}
    return json.dumps({"op": "mark", "id": "r", "version": protocol.PROTOCOL_VERSION, "args": args}).encode()


def test_marks_run_argument_is_checked_before_any_io() -> None:
    good = {"argv": ["make", "test"], "exit": 2, "signal": None}
    assert protocol.parse_request(_mark_request(good), 1 << 20).args["run"] == good
    killed = {"argv": ["sleep", "9"], "exit": None, "signal": "SIGTERM"}
    assert protocol.parse_request(_mark_request(killed), 1 << 20).args["run"] == killed
    for bad in (["make"], {"argv": [], "exit": 0, "signal": None},
                {"argv": ["x"], "exit": True, "signal": None}, {"argv": ["x"], "exit": 0},
                {"argv": ["x"], "exit": 0, "signal": None, "more": 1},
                {"argv": [1], "exit": 0, "signal": None}, {"argv": ["\udc80"], "exit": 0, "signal": None}):
        with pytest.raises(BadRequest, match="argument 'run'"):
            protocol.parse_request(_mark_request(bad), 1 << 20)


# -- the real thing ------------------------------------------------------------------------------

#: A command (Python, so the test needs nothing else) that writes a file in the workspace.
WRITES = "import pathlib, sys; pathlib.Path('made.txt').write_text('by the command\\n'); sys.exit(3)"


def _marks(d: Daemon, ws: Path) -> list[dict[str, Any]]:
    return list(d.ctl_json("log", "--all", "-w", ws)["marks"])


def test_the_command_runs_between_two_marks_and_its_status_is_snapctls(daemon: Daemon, ws: Path) -> None:
    cp = daemon.ctl("run", "--label", "gen", "--", sys.executable, "-c", WRITES, cwd=ws, check=False)
    assert cp.returncode == 3, describe(cp)
    assert (ws / "made.txt").read_text() == "by the command\n"
    end, start = _marks(daemon, ws)[:2]
    assert (start["label"], end["label"]) == ("turn-start", "turn-end")
    assert start["agent"] == end["agent"] == "run"
    assert start["session"] == end["session"] and start["session"].startswith("run-")
    argv = [sys.executable, "-c", WRITES]
    assert start["summary"]["run"] == {"argv": argv, "exit": None, "signal": None}
    assert end["summary"]["run"] == {"argv": argv, "exit": 3, "signal": None}
    assert start["message"] == end["message"] == "gen: " + shlex.join(argv)
    assert end["summary"]["changed"] == 1  # the turn holds what the command wrote
    err = cp.stderr.decode()
    assert f"turn-start {start['id']}" in err and f"turn-end {end['id']} (exit 3)" in err, err
    # show and log say how it ended
    shown = daemon.ctl("show", end["id"], cwd=ws).stdout.decode()
    assert f"run       {shlex.join(argv)}  (exit 3)" in shown, shown
    log = daemon.ctl("log", cwd=ws).stdout.decode()
    assert "[exit 3]" in log, log


def test_a_runs_turn_is_reverted_keeping_what_came_after(daemon: Daemon, ws: Path) -> None:
    write(ws / "mine.txt", "before the run\n")
    cp = daemon.ctl("run", "--json", "--", sys.executable, "-c", WRITES, cwd=ws, check=False)
    assert cp.returncode == 3, describe(cp)
    start = json.loads(cp.stdout)["start"]["id"]
    write(ws / "mine.txt", "after the run\n")
    daemon.ctl("revert", "--turn", start, "--yes", cwd=ws)
    assert not (ws / "made.txt").exists()  # what the command made is taken back
    assert (ws / "mine.txt").read_text() == "after the run\n"  # what came after it stays


def test_json_after_the_command_and_a_session_given(daemon: Daemon, ws: Path) -> None:
    cp = daemon.ctl("run", "--json", "--session", "build-7", "--", sys.executable, "-c", "print('out')",
                    cwd=ws, check=False)
    assert cp.returncode == 0, describe(cp)
    first, _, rest = cp.stdout.partition(b"\n")
    assert first == b"out"  # the command's own stdout comes first, untouched
    r = json.loads(rest)
    assert (r["exit"], r["signal"], r["status"]) == (0, None, 0)
    assert r["start"]["session"] == r["end"]["session"] == "build-7"
    assert r["end"]["summary"]["run"]["exit"] == 0


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["TERM", "INT"])
def test_a_kill_is_forwarded_and_the_exit_is_128_plus_the_signal(
    daemon: Daemon, ws: Path, sig: signal.Signals
) -> None:
    """A SIGINT that ends the command closes an interrupted turn, as an agent's interrupt does."""
    started = ws.parent / "started"
    sleeper = f"import pathlib, time; pathlib.Path({str(started)!r}).touch(); time.sleep(60)"
    argv = [sys.executable, "-m", "snapd", "run", "--json", "--", sys.executable, "-c", sleeper]
    proc = subprocess.Popen(
        argv, env=daemon.env, cwd=ws, stdout=subprocess.PIPE, stderr=subprocess.PIPE, preexec_fn=_foreground
    )
    try:
        wait_for(started.exists, 30, what="the command to start")
        proc.send_signal(sig)
        try:
            out, err = proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:  # once in a loaded CI run (SIGINT): say where it stood
            raise AssertionError(f"snapctl run did not end after {sig.name}: {_where(proc.pid)}") from None
    finally:
        proc.kill()
    assert proc.returncode == 128 + sig, (out, err)
    r = json.loads(out)
    assert (r["exit"], r["signal"]) == (None, sig.name)
    assert r["end"]["summary"]["run"] == {"argv": [sys.executable, "-c", sleeper], "exit": None,
                                         "signal": sig.name}
    assert r["end"]["summary"].get("interrupted") == (r["start"]["id"] if sig == signal.SIGINT else None)


def _foreground() -> None:
    """In the child, before snapctl starts: the dispositions of a shell's foreground job. A test
    run started in the background (``sh -c 'cmd &'``, ``nohup``) ignores SIGINT, SIGQUIT and
    SIGHUP, and snapctl run passes on what it inherited (the next test): the command would
    ignore the forwarded SIGINT (seen in CI, through :func:`_where`)."""
    for sig in (signal.SIGINT, signal.SIGQUIT, signal.SIGHUP):
        signal.signal(sig, signal.SIG_DFL)


def test_the_command_keeps_the_signal_dispositions_snapctl_inherited(daemon: Daemon, ws: Path) -> None:
    """A background job of a shell ignores SIGINT; wrapped in ``snapctl run`` it still does (as
    the shell started it), and one not ignored is not made ignored."""
    probe = "import signal; print(signal.getsignal(signal.SIGINT) == signal.SIG_IGN)"
    argv = [sys.executable, "-m", "snapd", "run", "--", sys.executable, "-c", probe]
    for disposition, ignored in ((signal.SIG_IGN, "True"), (signal.SIG_DFL, "False")):

        def inherit(d: signal.Handlers = disposition) -> None:
            signal.signal(signal.SIGINT, d)

        cp = subprocess.run(argv, env=daemon.env, cwd=ws, capture_output=True, text=True, timeout=60,
                            preexec_fn=inherit)
        assert cp.returncode == 0 and cp.stdout.strip() == ignored, (disposition, describe(cp))


def _where(pid: int) -> str:
    """What a hung ``snapctl run`` was doing: its signal masks and wait channel, and its
    children (the command) with theirs."""
    def state(p: int) -> str:
        try:
            status = Path(f"/proc/{p}/status").read_text().splitlines()
            wchan = Path(f"/proc/{p}/wchan").read_text()
            cmd = Path(f"/proc/{p}/cmdline").read_bytes().replace(b"\0", b" ")[:120]
        except OSError as exc:
            return f"{p}: gone ({exc.strerror})"
        sig = [ln for ln in status if ln.startswith(("State", "Sig", "Shd", "Threads"))]
        return f"{p} {cmd!r} wchan={wchan} " + " ".join(ln.replace("\t", " ") for ln in sig)

    kids = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True).stdout.split()
    return "; ".join([state(pid), *(state(int(k)) for k in kids)])


#: Counts the SIGINTs delivered to it, for a second after the first, into COUNT; exits 0. Python
#: runs a handler once for signals that arrive together, but its C handler writes a byte to the
#: wakeup fd for each one delivered: those are counted.
COUNTS = """
import os, pathlib, signal, sys, time
r, w = os.pipe()
os.set_blocking(w, False)
os.set_blocking(r, False)
signal.signal(signal.SIGINT, lambda *_: None)
signal.set_wakeup_fd(w)
pathlib.Path(sys.argv[2]).touch()
got = b""
deadline = time.monotonic() + 60
while time.monotonic() < deadline and not (got and time.monotonic() > first + 1):
    time.sleep(0.01)
    try:
        more = os.read(r, 64)
    except BlockingIOError:
        continue
    first = time.monotonic() if not got else first
    got += more
pathlib.Path(sys.argv[1]).write_text(str(got.count(bytes([signal.SIGINT]))))
sys.exit(0 if got else 9)
"""


def test_ctrl_c_on_the_terminal_reaches_the_command_once(daemon: Daemon, ws: Path) -> None:
    """^C signals the terminal's whole foreground group, the command included: snapctl must not
    send it a second SIGINT (a forwarded kill, as above, it must)."""
    count, started = ws.parent / "count", ws.parent / "started"
    master, slave = pty.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-m", "snapd", "run", "--", sys.executable, "-c", COUNTS, str(count), str(started)],
        env=daemon.env, cwd=ws, stdin=slave, stdout=slave, stderr=slave, start_new_session=True,
        preexec_fn=lambda: fcntl.ioctl(0, termios.TIOCSCTTY, 0),  # the pty is its terminal
    )
    os.close(slave)
    try:
        wait_for(started.exists, 30, what="the command to start")
        os.write(master, b"\x03")
        assert proc.wait(30) == 0  # the command's status: it handled the one SIGINT and exited 0
    finally:
        proc.kill()
        os.close(master)
    assert count.read_text() == "1"
    assert _marks(daemon, ws)[0]["summary"]["run"]["exit"] == 0


def test_no_daemon_no_command(tmp_path: Path) -> None:
    """The turn-start mark comes first: with no daemon to take it, the command is not run."""
    env = base_env(tmp_path / "no-daemon")
    made = tmp_path / "made"
    cp = run_ctl(env, "run", "--", sys.executable, "-c", f"open({str(made)!r}, 'w')", cwd=tmp_path)
    assert cp.returncode == DaemonUnavailable.exit_code, describe(cp)
    assert not made.exists()


def test_a_command_not_found_still_ends_its_turn(daemon: Daemon, ws: Path) -> None:
    cp = daemon.ctl("run", "--", "no-such-command-here", cwd=ws, check=False)
    assert cp.returncode == 127, describe(cp)
    assert b"no-such-command-here" in cp.stderr
    end, start = _marks(daemon, ws)[:2]
    assert (start["label"], end["label"]) == ("turn-start", "turn-end")
    assert end["summary"]["run"]["exit"] == 127


def test_run_needs_a_command(daemon: Daemon, ws: Path) -> None:
    cp = daemon.ctl("run", cwd=ws, check=False)
    assert cp.returncode == 2 and b"after --" in cp.stderr, describe(cp)
    assert [m["label"] for m in _marks(daemon, ws)] == ["baseline"]  # nothing marked


def test_an_argument_that_is_not_utf8_is_passed_as_is_and_shown_escaped(daemon: Daemon, ws: Path) -> None:
    """The command gets its bytes; the marks (JSON text) show them as \\xNN, never refused."""
    got = ws.parent / "got"
    code = f"import os, sys; open({str(got)!r}, 'wb').write(os.fsencode(sys.argv[1]))"
    cp = daemon.ctl("run", "--", sys.executable, "-c", code, b"caf\xe9", cwd=ws, check=False)
    assert cp.returncode == 0, describe(cp)
    assert got.read_bytes() == b"caf\xe9"
    assert _marks(daemon, ws)[0]["summary"]["run"]["argv"][-1] == "caf\\xe9"
