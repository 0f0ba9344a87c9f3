"""The systemd user unit: its text (one template, also checked in as systemd/snapd.service)
and ``snapd install-service``, which writes it, reloads the user manager and starts it.

Hardening keeps every workspace reachable: the user's home and /tmp stay readable and
writable (no ProtectHome, no PrivateTmp — a workspace under /tmp must work), and nothing
here needs privileges it gives up.

The service must use the store that ``snapd start`` in the installing shell would use: the
user manager does not see that shell's environment, so the variables that choose the store,
the config file and the settings (``SNAPD_HOME``, ``SNAPD_CONFIG``, ``SNAPD_*`` settings,
``XDG_DATA_HOME``, ``XDG_CONFIG_HOME``) are written into the unit as ``Environment=`` lines.
"""

from __future__ import annotations

import shlex
import shutil
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

from snapd.config import SERVICE_UNIT, service_environment
from snapd.errors import ConfigError

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


def install_service(env: dict[str, str], *, start: bool = True) -> int:
    config_home = Path(env.get("XDG_CONFIG_HOME") or Path(env.get("HOME", "~")).expanduser() / ".config")
    unit_dir = config_home / "systemd" / "user"
    unit_dir.mkdir(parents=True, exist_ok=True)
    unit = unit_dir / UNIT_NAME
    exec_command = f"{shlex.quote(sys.executable)} -m snapd"
    carried = service_environment(env)
    unit.write_text(render(exec_command, carried))
    print(f"wrote {unit} (ExecStart={exec_command} start)")
    for name, value in sorted(carried.items()):
        print(f"  with {name}={value} (from this shell: the service uses the same store and settings)")
    commands = [
        ["systemctl", "--user", "daemon-reload"],
        ["systemctl", "--user", "enable", "--now", UNIT_NAME],
    ]
    if not start:
        commands = commands[:1]
    if not _user_manager_running():
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
