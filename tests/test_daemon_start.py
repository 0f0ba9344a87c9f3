"""Where ``snapd start`` runs, and where it cannot: real processes, real file systems.

- ``snapd start --background`` run from a directory that holds a ``snapd/`` package starts
  this installation's daemon, never that package (the child runs ``-P -m snapd`` from ``/``);
- a ``SNAPD_HOME`` that is a file, on a read-only file system, or that the user cannot create
  or enter gives one line naming it, and the exit code of its error class (docs/protocol.md),
  for ``snapd start`` (foreground and background) and for ``snapctl``: never a traceback.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from e2e_helpers import OtherUser, base_env, describe, run_ctl, start_daemon, unavailable, wait_for

from snapd.errors import PermissionRefused

pytestmark = pytest.mark.timeout(120)

SNAPD = Path(sys.executable).parent / "snapd"  # the console script, as a user runs it


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_background_start_from_a_directory_holding_a_snapd_package(tmp_path: Path) -> None:
    """A project named snapd (or anything with a ``snapd/`` directory) is where a user may well
    stand: before the fix the detached child ran ``python -m snapd`` there and imported it."""
    here = tmp_path / "project"
    (here / "snapd").mkdir(parents=True)
    marker = tmp_path / "foreign-code-ran"
    foreign = f"open({str(marker)!r}, 'w').write('imported')\nraise SystemExit('foreign snapd')\n"
    (here / "snapd" / "__init__.py").write_text(foreign)
    (here / "snapd" / "__main__.py").write_text(foreign)
    home = tmp_path / "snapd-home"
    env = base_env(home)
    start = [str(SNAPD), "start", "--background"]
    cp = subprocess.run(start, env=env, cwd=here, capture_output=True, timeout=60)
    st = run_ctl(env, "status", "--json", cwd="/")
    pid = json.loads(st.stdout)["pid"] if st.returncode == 0 else None
    try:
        assert cp.returncode == 0, describe(cp)
        assert not marker.exists(), "the daemon imported the snapd package of the current directory"
        assert pid is not None, describe(st)
        assert os.readlink(f"/proc/{pid}/cwd") == "/", "the daemon holds the user's directory busy"
    finally:
        if pid is not None:
            run_ctl(env, "stop")
            try:
                wait_for(lambda: not _alive(pid), 15, what="the background daemon exits")
            finally:
                if _alive(pid):
                    os.kill(pid, signal.SIGKILL)


# -- a SNAPD_HOME snapd cannot use ---------------------------------------------------------------

COMMANDS = (
    ("snapd", "start"), ("snapd", "start", "--background"), ("snapctl", "status"), ("snapctl", "mark", "x")
)
#: Where snapctl has nothing to say but that no daemon answers there (nothing is written).
NO_DAEMON = 3


def _one_clear_line(cp: subprocess.CompletedProcess[bytes], home: Path, code: int) -> None:
    err = cp.stderr.decode(errors="replace")
    assert b"Traceback" not in cp.stderr and b"Traceback" not in cp.stdout, describe(cp)
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, describe(cp)
    assert str(home) in lines[0], describe(cp)
    assert cp.returncode == code, describe(cp)


def _run(python: list[str], command: tuple[str, ...], env: dict[str, str], prefix: list[str] | None = None
         ) -> subprocess.CompletedProcess[bytes]:
    """One command (``python -m snapd`` is snapd for start and stop, snapctl for the rest); a
    background daemon that came up after all (the test failed) is stopped, not left behind."""
    run = [*(prefix or []), *python, "-m", "snapd"]
    cp = subprocess.run([*run, *command[1:]], env=env, capture_output=True, timeout=60, cwd="/")
    if cp.returncode == 0 and "--background" in command:
        subprocess.run([*run, "stop"], env=env, capture_output=True, timeout=30, cwd="/")
    return cp


@pytest.mark.parametrize("command", COMMANDS, ids=" ".join)
def test_a_snapd_home_that_is_a_file(tmp_path: Path, command: tuple[str, ...]) -> None:
    home = tmp_path / "home-file"
    home.write_text("not a directory\n")
    cp = _run([sys.executable], command, base_env(home))
    _one_clear_line(cp, home, PermissionRefused.exit_code)
    assert home.read_text() == "not a directory\n"


def _read_only_prefix(home: Path) -> list[str]:
    """Run a command in a mount namespace of its own where ``home`` is read-only (a bind
    mount remounted ``ro``): the file system refuses root too."""
    if os.geteuid() != 0 or not shutil.which("unshare"):
        unavailable("a read-only bind mount needs root and unshare")
    script = 'mount --bind "$1" "$1" && mount -o remount,ro,bind "$1" "$1" || exit 97; shift; exec "$@"'
    prefix = ["unshare", "-m", "sh", "-c", script, "sh", str(home)]
    probe = subprocess.run([*prefix, "true"], capture_output=True, timeout=30)
    if probe.returncode != 0:
        unavailable(f"cannot make a read-only bind mount here: {probe.stderr[-200:]!r}")
    return prefix


@pytest.mark.parametrize("command", COMMANDS, ids=" ".join)
def test_a_read_only_snapd_home(tmp_path: Path, command: tuple[str, ...]) -> None:
    home = tmp_path / "home-ro"
    home.mkdir(mode=0o700)
    cp = _run([sys.executable], command, base_env(home), _read_only_prefix(home))
    if command[0] == "snapctl":
        _one_clear_line(cp, home, NO_DAEMON)
        return
    _one_clear_line(cp, home, PermissionRefused.exit_code)
    assert b"read-only" in cp.stderr.lower(), describe(cp)
    assert list(home.iterdir()) == []


@pytest.mark.parametrize("command", COMMANDS, ids=" ".join)
@pytest.mark.parametrize("where", ["cannot-create", "cannot-enter"])
def test_a_snapd_home_the_user_cannot_use(nobody: OtherUser, command: tuple[str, ...], where: str) -> None:
    """As uid 65534: a SNAPD_HOME under a directory of root's (it cannot be made), or one of
    root's with mode 0700 (it cannot be entered: reading its config.toml fails too)."""
    parent = nobody.top / "roots"
    parent.mkdir(mode=0o755)  # root's
    home = parent / "snapd" if where == "cannot-create" else parent
    if where == "cannot-enter":
        parent.chmod(0o700)
    cp = _run(list(nobody.python), command, nobody.env(home))
    code = NO_DAEMON if command[0] == "snapctl" and where == "cannot-create" else PermissionRefused.exit_code
    _one_clear_line(cp, home, code)
    assert os.stat(parent).st_uid == 0 and not (parent / "snapd").exists()


def test_a_daemon_killed_by_a_fault_leaves_its_stacks_in_its_log(tmp_path: Path) -> None:
    """SQLite's index of its log is a mapped file: when the store's disk fails, a write to it
    can fault, and the kernel kills the daemon with SIGBUS (docs/reliability.md). Nothing is
    lost, but the log must say what killed it and where: faulthandler is on in the daemon,
    writing to stderr (the journal) or, with ``--log-file``, to that file."""
    home = tmp_path / "snapd-home"
    env = base_env(home)
    env.pop("PYTHONFAULTHANDLER", None)  # the daemon's own doing, not the environment's
    d = start_daemon(home, env)
    log_file = tmp_path / "own.log"
    own = subprocess.Popen(
        [sys.executable, "-m", "snapd", "start", "--log-file", str(log_file)],
        env={**base_env(tmp_path / "other-home"), "PYTHONFAULTHANDLER": ""}, cwd="/",
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    try:
        wait_for(lambda: "daemon.started" in log_file.read_text() if log_file.exists() else False,
                 timeout=30, what="the second daemon is ready")
        for proc, text in ((d.proc, d.log), (own, log_file.read_text)):
            os.kill(proc.pid, signal.SIGBUS)
            assert proc.wait(15) == -signal.SIGBUS
            log = text()
            assert "Fatal Python error: Bus error" in log, log[-2000:]
            assert "Current thread" in log and "snapd/daemon/main.py" in log, log[-2000:]  # every stack
    finally:
        for proc in (d.proc, own):
            proc.kill()
            proc.wait(10)
