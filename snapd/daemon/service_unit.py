"""The systemd user unit: its text (one template, also checked in as systemd/snapd.service),
``snapd install-service``, which writes it, reloads the user manager and starts it, and
``snapd uninstall-service``, the inverse: stops and disables it, removes the unit file it wrote
(only one that starts with the template's first line: a unit of the same name the user wrote
is left, and said so), reloads the manager.

Hardening keeps every workspace reachable: the user's home and /tmp stay readable and
writable (no ProtectHome, no PrivateTmp — a workspace under /tmp must work), and nothing
here needs privileges it gives up.

The service must use the store that ``snapd start`` in the installing shell would use: the
user manager does not see that shell's environment, so the variables that choose the store,
the config file and the settings (``SNAPD_HOME``, ``SNAPD_CONFIG``, ``SNAPD_*`` settings,
``XDG_DATA_HOME``, ``XDG_CONFIG_HOME``) are written into the unit as ``Environment=`` lines.

The unit goes where the *manager* reads units, which its own environment decides, not this
shell's (:func:`choose_unit_dir`): a unit written under a ``XDG_CONFIG_HOME`` the manager does
not share would never be found (``enable`` fails: "Unit file snapd.service does not exist").
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

from snapd.config import SERVICE_UNIT, service_environment, user_unit_dirs
from snapd.errors import ConfigError
from snapd.integrations import jsonfile

UNIT_NAME = SERVICE_UNIT
REPO_EXEC = "/usr/bin/env python3 -m snapd"

UNIT_TEMPLATE = """\
# snapd: rollback history for workspaces (marks over ZeroMQ). A systemd *user* unit:
# install with `snapd install-service` (or copy to ~/.config/systemd/user/ and edit ExecStart).
[Unit]
Description=snapd workspace rollback daemon

[Service]
Type=notify
NotifyAccess=main
ExecStart={exec} start
Restart=on-failure
RestartSec=2s
TimeoutStopSec=20s
WatchdogSec=30s
UMask=0077
Environment=PYTHONUNBUFFERED=1
{environment}NoNewPrivileges=yes
LockPersonality=yes
RestrictRealtime=yes
RestrictSUIDSGID=yes
SystemCallArchitectures=native

[Install]
WantedBy=default.target
"""


def _environment_line(name: str, value: str) -> str:
    """``Environment="NAME=VALUE"`` quoted for systemd: in a double-quoted word ``\\`` and
    ``"`` are escaped, and ``%`` is a specifier unless doubled. A line break cannot be written."""
    if any(c in value for c in "\n\r\0"):
        raise ConfigError(f"{name} holds a line break or NUL: it cannot be written into a systemd unit")
    quoted = value.replace("\\", "\\\\").replace('"', '\\"').replace("%", "%%")
    return f'Environment="{name}={quoted}"\n'


def render(exec_command: str, environment: Mapping[str, str] | None = None) -> str:
    lines = "".join(_environment_line(k, v) for k, v in sorted((environment or {}).items()))
    return UNIT_TEMPLATE.format(exec=exec_command, environment=lines)


def _user_manager_running() -> bool:
    if shutil.which("systemctl") is None:
        return False
    done = subprocess.run(
        ["systemctl", "--user", "is-system-running"], capture_output=True, text=True, timeout=10, check=False
    )
    return done.stdout.strip() in {"running", "degraded", "starting", "initializing"}


def _manager_unit_path() -> list[Path]:
    """The directories the running user manager loads units from, in its order (its
    ``UnitPath``, computed from the manager's own environment at its start)."""
    done = subprocess.run(
        ["systemctl", "--user", "show", "--property=UnitPath", "--value"],
        capture_output=True, text=True, timeout=10, check=False,
    )
    return [Path(p) for p in shlex.split(done.stdout)] if done.returncode == 0 else []


def choose_unit_dir(env: Mapping[str, str], search: list[Path]) -> tuple[Path, str | None]:
    """Where to write the unit, and a note when that is not where this shell points.

    ``search``: the running user manager's unit path (empty: no manager to ask). A user
    manager reads ``$XDG_CONFIG_HOME/systemd/user`` only if *its own* environment sets
    ``XDG_CONFIG_HOME`` (man systemd.unit, "User Unit Search Path"; it reads its environment
    once, at its start): a value set in this shell alone does not reach it. So: this shell's
    directory when the manager reads it (or there is none to ask), else the first
    ``systemd/user`` directory of the manager's path under the home directory — the manager's
    own configuration directory, ``~/.config/systemd/user`` unless it was told otherwise."""
    dirs = user_unit_dirs(env)
    mine, default = dirs[0], dirs[-1]
    if not search:
        return mine, None if mine == default else (
            f"a systemd user manager reads {mine} only if its own environment sets "
            f"XDG_CONFIG_HOME={mine.parent.parent} (without it, it reads {default}); once one "
            "runs, run `snapd install-service` again: it asks the manager where it reads units"
        )
    resolved = [p.resolve() for p in search]
    if mine.resolve() in resolved:
        return mine, None
    home = Path(env.get("HOME") or os.path.expanduser("~")).resolve()
    for place, real in zip(search, resolved, strict=True):
        if place.parts[-2:] == ("systemd", "user") and home in real.parents:
            return place, (
                f"the systemd user manager does not read {mine} (its own environment has another "
                f"XDG_CONFIG_HOME, or none), so the unit goes to {place}, which it reads"
            )
    raise ConfigError(
        f"the systemd user manager reads units only from {' '.join(map(str, search))}: neither "
        f"{mine} nor any directory under {home}. Give the manager XDG_CONFIG_HOME when it "
        "starts (through PAM, say: `systemctl --user set-environment` comes too late) and log "
        "in again, or run snapd without systemd: `snapd start --background`"
    )


def install_service(env: dict[str, str], *, start: bool = True) -> int:
    manager = _user_manager_running()
    unit_dir, why = choose_unit_dir(env, _manager_unit_path() if manager else [])
    unit_dir.mkdir(parents=True, exist_ok=True)
    unit = unit_dir / UNIT_NAME
    exec_command = f"{shlex.quote(sys.executable)} -m snapd"
    carried = service_environment(env)
    jsonfile.write_text(unit, render(exec_command, carried))  # durable: an empty unit fails to load
    print(f"wrote {unit} (ExecStart={exec_command} start)")
    if why:
        print(f"  note: {why}")
    for name, value in sorted(carried.items()):
        print(f"  with {name}={value} (from this shell: the service uses the same store and settings)")
    commands = [
        ["systemctl", "--user", "daemon-reload"],
        ["systemctl", "--user", "enable", "--now", UNIT_NAME],
    ]
    if not start:
        commands = commands[:1]
    if not manager:
        print("no systemd user manager is running here; when there is one, run:")
        for cmd in commands:
            print("  " + shlex.join(cmd))
        print("or run the daemon without systemd: snapd start --background")
        return 0
    for cmd in commands:
        print("$ " + shlex.join(cmd))
        done = subprocess.run(cmd, timeout=60, check=False)
        if done.returncode != 0:
            print(f"snapd: `{shlex.join(cmd)}` failed (exit {done.returncode})", file=sys.stderr)
            return 1
    print("snapd is running as a user service: `systemctl --user status snapd`;")
    print("its logs: `journalctl --user -u snapd`")
    return 0


#: The template's first line: how uninstall-service knows a unit file is the one it wrote.
UNIT_SIGNATURE = UNIT_TEMPLATE.splitlines()[0]


def _run_shown(cmd: list[str]) -> int:
    print("$ " + shlex.join(cmd))
    return subprocess.run(cmd, timeout=60, check=False).returncode


def uninstall_service(env: dict[str, str]) -> int:
    """Stop and disable the user unit when a manager runs, remove every unit file
    install-service may have written for this shell (where the manager reads units, and this
    shell's own directories), reload the manager. Nothing installed is not an error."""
    manager = _user_manager_running()
    places = list(user_unit_dirs(env))
    if manager:
        try:
            places.insert(0, choose_unit_dir(env, _manager_unit_path())[0])
        except ConfigError:
            pass  # the manager reads none of our directories: only ours can hold our unit
    units = [d / UNIT_NAME for d in dict.fromkeys(places)]
    ours: list[Path] = []
    foreign: list[Path] = []
    for unit in units:
        try:
            first = unit.read_text(encoding="utf-8", errors="replace").splitlines()[:1]
        except FileNotFoundError:
            continue
        except OSError as e:
            raise ConfigError(f"{unit} cannot be read: {e.strerror}") from None
        (ours if first == [UNIT_SIGNATURE] else foreign).append(unit)
    for unit in foreign:
        print(f"left {unit}: snapd install-service did not write it (remove it yourself if it is snapd's)")
    if not ours:
        looked = ", ".join(str(u.parent) for u in units)
        print(f"no snapd service unit is installed (looked in {looked}); nothing to do")
        return 0
    failed = False
    if manager:
        failed = _run_shown(["systemctl", "--user", "disable", "--now", UNIT_NAME]) != 0
    for unit in ours:
        try:
            unit.unlink()
        except OSError as e:
            raise ConfigError(f"{unit} cannot be removed: {e.strerror}") from None
        print(f"removed {unit}")
    if not manager:
        print("no systemd user manager is running here: nothing was running under it to stop")
        print("(a daemon started by hand or by a hook keeps running: stop it with `snapd stop`)")
        return 0
    failed = _run_shown(["systemctl", "--user", "daemon-reload"]) != 0 or failed
    if failed:
        print("snapd: a systemctl command failed (see above); the unit file is removed", file=sys.stderr)
        return 1
    print("snapd is no longer a user service: it is stopped and will not start at login;")
    print("agent hooks now start it with `snapd start --background` when they need it")
    return 0
