"""The systemd user unit: its text (one template, also checked in as systemd/snapd.service)
and ``snapd install-service``, which writes it, reloads the user manager and starts it.

Hardening keeps every workspace reachable: the user's home and /tmp stay readable and
writable (no ProtectHome, no PrivateTmp — a workspace under /tmp must work), and nothing
here needs privileges it gives up.
"""

from __future__ import annotations

import shlex
import shutil
import subprocess
import sys
from pathlib import Path

UNIT_NAME = "snapd.service"
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
NoNewPrivileges=yes
LockPersonality=yes
RestrictRealtime=yes
RestrictSUIDSGID=yes
SystemCallArchitectures=native

[Install]
WantedBy=default.target
"""


def render(exec_command: str) -> str:
    return UNIT_TEMPLATE.format(exec=exec_command)


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
    unit.write_text(render(exec_command))
    print(f"wrote {unit} (ExecStart={exec_command} start)")
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
