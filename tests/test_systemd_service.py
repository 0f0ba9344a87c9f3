"""snapd under a real systemd user manager: ``snapd install-service``, and an agent hook starting
the daemon through the unit.

A test machine has no user session, so the test starts one of its own: ``systemd --user`` (the
real program) in a private mount namespace where a tmpfs on ``/run/systemd`` holds the
``system`` directory by which systemd knows it was booted; ``XDG_RUNTIME_DIR`` and ``HOME`` are
the test's. Commands that talk to the manager (``systemctl --user``, ``install-service``, the
hook, which runs ``systemctl --user start``) run in that namespace (``nsenter``); ``snapctl``
reaches the daemon through its socket from anywhere.

Proven here, with a fresh manager and store:

- ``install-service`` writes the unit (carrying ``SNAPD_HOME``), reloads the manager and starts
  the service; the daemon answers, and it is the unit's main process (Type=notify: the unit is
  active only once the daemon said it was ready);
- with the unit installed and the daemon stopped, an agent's hook starts it through
  ``systemctl --user start`` (the unit owns it), and the turn is marked;
- a shell whose XDG_CONFIG_HOME the manager does not share gets the unit where the manager
  reads units, told why, and its hooks still find it.

Needs root (a mount namespace) and systemd's binaries; fails with the reason under CI without them.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from e2e_helpers import base_env, describe, git, run_ctl, unavailable, wait_for

pytestmark = pytest.mark.timeout(120)

SYSTEMD = next((p for p in ("/lib/systemd/systemd", "/usr/lib/systemd/systemd") if os.path.exists(p)),
              None)
MANAGER = """\
mkdir -p /run/systemd
mount -t tmpfs tmpfs /run/systemd
mkdir -p /run/systemd/system
exec "$0" --user
"""


class UserManager:
    def __init__(self, proc: subprocess.Popen[bytes], env: dict[str, str]) -> None:
        self.proc, self.env = proc, env

    def run(
        self, *argv: str, input: bytes | None = None, env: dict[str, str] | None = None
    ) -> subprocess.CompletedProcess[bytes]:
        """``argv`` in the manager's mount namespace, with the test's environment (or ``env``)."""
        return subprocess.run(
            ["nsenter", "-t", str(self.proc.pid), "-m", *argv], env=env or self.env, input=input,
            capture_output=True, timeout=60,
        )

    def systemctl(self, *args: str) -> str:
        return self.run("systemctl", "--user", *args).stdout.decode().strip()


@pytest.fixture
def manager(tmp_path: Path) -> Iterator[UserManager]:
    problem = None
    if os.geteuid() != 0:
        problem = "a private mount namespace for systemd --user needs root"
    elif SYSTEMD is None or not shutil.which("systemctl") or not shutil.which("nsenter"):
        problem = "systemd, systemctl or nsenter is not installed"
    if problem:
        unavailable(problem)
    runtime = tmp_path / "xdg-runtime"
    runtime.mkdir(mode=0o700)
    env = base_env(tmp_path / "snapd-home")
    env.update(HOME=str(tmp_path / "home"), XDG_RUNTIME_DIR=str(runtime))
    env.pop("XDG_CONFIG_HOME", None)
    (tmp_path / "home").mkdir(exist_ok=True)
    proc = subprocess.Popen(
        ["unshare", "-m", "--propagation", "private", "sh", "-c", MANAGER, SYSTEMD],
        env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        start_new_session=True,
    )
    um = UserManager(proc, env)
    try:
        state = wait_for(
            lambda: um.systemctl("is-system-running") in {"running", "degraded"} or proc.poll() is not None,
            30, what="systemd --user running",
        )
        if proc.poll() is not None:
            unavailable(f"systemd --user exited {proc.returncode}: {proc.stderr.read().decode()[-500:]}")  # type: ignore[union-attr]
        assert state
        yield um
    finally:
        um.systemctl("stop", "snapd.service")
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def test_install_service_runs_snapd_under_systemd_and_a_hook_starts_it_through_the_unit(
    tmp_path: Path, manager: UserManager
) -> None:
    env = manager.env
    done = manager.run(sys.executable, "-m", "snapd", "install-service")
    assert done.returncode == 0 and b"running as a user service" in done.stdout, describe(done)
    unit = Path(env["HOME"]) / ".config" / "systemd" / "user" / "snapd.service"
    assert f'Environment="SNAPD_HOME={env["SNAPD_HOME"]}"' in unit.read_text()
    assert manager.systemctl("is-active", "snapd.service") == "active"
    main_pid = int(manager.systemctl("show", "-p", "MainPID", "--value", "snapd.service"))
    status = json.loads(run_ctl(env, "status", "--json").stdout)
    assert status["pid"] == main_pid, (status, main_pid)  # the unit's own process serves

    manager.systemctl("stop", "snapd.service")
    assert run_ctl(env, "status").returncode != 0
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q")
    (repo / "a.txt").write_text("one\n")
    event = {"session_id": "s1", "cwd": str(repo), "hook_event_name": "UserPromptSubmit", "prompt": "go"}
    payload = json.dumps(event).encode()
    hooked = manager.run(sys.executable, "-m", "snapd", "hook", "claude-code", input=payload)
    assert hooked.returncode == 0, describe(hooked)
    assert b"started one (systemctl --user start snapd.service)" in hooked.stderr, describe(hooked)
    assert manager.systemctl("is-active", "snapd.service") == "active"
    marks = json.loads(run_ctl(env, "log", "--json", "-w", str(repo)).stdout)["marks"]
    assert [(m["label"], m["session"]) for m in marks[:1]] == [("turn-start", "s1")], marks
    assert json.loads(run_ctl(env, "status", "--json").stdout)["pid"] == int(
        manager.systemctl("show", "-p", "MainPID", "--value", "snapd.service")
    )

    # A hook whose SNAPD_HOME names another store must not start the unit (it serves the first
    # store, and the hook would wait on a socket nobody opens): it starts its own daemon.
    other = dict(env, SNAPD_HOME=str(tmp_path / "other-store"))
    hooked = manager.run(sys.executable, "-m", "snapd", "hook", "claude-code", input=payload, env=other)
    try:
        assert hooked.returncode == 0, describe(hooked)
        assert b"-m snapd start --background" in hooked.stderr, describe(hooked)
        marks = json.loads(run_ctl(other, "log", "--json", "-w", str(repo)).stdout)["marks"]
        assert [m["label"] for m in marks[:1]] == ["turn-start"], marks
    finally:
        run_ctl(other, "stop")


def test_uninstall_service_stops_disables_and_removes_the_unit(tmp_path: Path, manager: UserManager) -> None:
    """Issue 31, point 12: the inverse of install-service. The service stops (the daemon
    exits), is no longer enabled, its unit file is gone and the manager no longer knows it."""
    env = manager.env
    done = manager.run(sys.executable, "-m", "snapd", "install-service")
    assert done.returncode == 0, describe(done)
    unit = Path(env["HOME"]) / ".config" / "systemd" / "user" / "snapd.service"
    assert manager.systemctl("is-active", "snapd.service") == "active"
    assert manager.systemctl("is-enabled", "snapd.service") == "enabled"
    gone = manager.run(sys.executable, "-m", "snapd", "uninstall-service")
    assert gone.returncode == 0, describe(gone)
    assert f"removed {unit}".encode() in gone.stdout, describe(gone)
    assert b"no longer a user service" in gone.stdout, describe(gone)
    assert not unit.exists()
    assert manager.systemctl("is-active", "snapd.service") in {"inactive", "unknown"}
    assert manager.systemctl("is-enabled", "snapd.service") in {"not-found", ""}
    assert run_ctl(env, "status").returncode == 3  # the daemon it ran has exited
    assert not (Path(env["HOME"]) / ".config/systemd/user/default.target.wants/snapd.service").exists()


def test_install_service_writes_the_unit_where_the_manager_reads_it(
    tmp_path: Path, manager: UserManager
) -> None:
    """A user manager reads ``$XDG_CONFIG_HOME/systemd/user`` only when its own environment sets
    XDG_CONFIG_HOME (man systemd.unit, "User Unit Search Path"). Here the shell sets it and the
    manager does not: the unit goes where the manager reads (~/.config/systemd/user), the output
    says why, the service runs with the shell's settings, and a hook from that shell starts it
    through the unit."""
    config_home = tmp_path / "elsewhere-config"
    env = {**manager.env, "XDG_CONFIG_HOME": str(config_home)}
    done = manager.run(sys.executable, "-m", "snapd", "install-service", env=env)
    assert done.returncode == 0 and b"running as a user service" in done.stdout, describe(done)
    unit = Path(env["HOME"]) / ".config" / "systemd" / "user" / "snapd.service"
    assert f'Environment="XDG_CONFIG_HOME={config_home}"' in unit.read_text()
    assert not (config_home / "systemd" / "user" / "snapd.service").exists()
    assert f"does not read {config_home}/systemd/user".encode() in done.stdout, describe(done)
    assert manager.systemctl("is-active", "snapd.service") == "active"
    main_pid = int(manager.systemctl("show", "-p", "MainPID", "--value", "snapd.service"))
    assert json.loads(run_ctl(env, "status", "--json").stdout)["pid"] == main_pid

    manager.systemctl("stop", "snapd.service")
    repo = tmp_path / "repo"
    repo.mkdir()
    event = {"session_id": "s1", "cwd": str(repo), "hook_event_name": "UserPromptSubmit", "prompt": "go"}
    payload = json.dumps(event).encode()
    hooked = manager.run(sys.executable, "-m", "snapd", "hook", "claude-code", input=payload, env=env)
    assert hooked.returncode == 0, describe(hooked)
    assert b"started one (systemctl --user start snapd.service)" in hooked.stderr, describe(hooked)


@pytest.mark.powercut
def test_the_unit_file_survives_a_power_cut_whole(tmp_path: Path) -> None:
    """install-service wrote the unit with a plain write: a power cut once something else on the
    disk forced its log (here: another file's fsync) left an empty unit, which systemd
    rejects. It is written like every file snapd replaces: a temp file fsynced, renamed,
    its directory fsynced."""
    from disks import xfs_disk

    from snapd.daemon import service_unit

    with xfs_disk(tmp_path) as disk:
        home = disk.mount / "home"
        env = {"HOME": str(home), "XDG_CONFIG_HOME": str(home / ".config"), "PATH": os.environ["PATH"]}
        service_unit.install_service(env, start=False)
        unit = home / ".config" / "systemd" / "user" / service_unit.UNIT_NAME
        wrote = unit.read_text()
        assert "ExecStart=" in wrote
        fd = os.open(disk.mount / "other", os.O_WRONLY | os.O_CREAT, 0o644)
        try:
            os.fsync(fd)  # something else on the disk forces its log
        finally:
            os.close(fd)
        disk.cut()
        disk.remount()
        assert unit.read_text() == wrote, "the unit file did not survive the power cut whole"
