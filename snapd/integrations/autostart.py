"""Starting the daemon from an agent's hook, when none is running.

A user who integrated an agent expects marks without having started anything. The hook starts
the daemon through the systemd user unit when it is installed (``snapd install-service``) for
the same store (the unit's ``SNAPD_HOME`` and ``XDG_DATA_HOME`` are the hook's), so the service
manager owns it; otherwise it runs this installation's own interpreter,
``sys.executable -m snapd start --background`` — never a ``snapd`` found on PATH, which may be
Ubuntu's snap daemon — in a new session (``setsid``: the agent's terminal and process group
are not its own), from ``/`` (it must not hold the agent's directory busy), with a scrubbed
environment: the daemon needs no API key, token or the agent's other variables, and a
long-lived process must not keep them. The daemon's instance lock makes two hooks starting it
at once harmless. ``auto_start = false`` in the config turns this off.

A start that fails (a config file that is not valid TOML, a state directory it cannot write)
must not cost the agent the hook's whole wait on every turn, nor hide its cause: the hook
watches the process it started (:class:`Launch`), not only the socket, and as soon as it exits
without a daemon, says that process's own error.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Mapping
from typing import IO

from snapd.config import SERVICE_UNIT, service_environment, user_unit_dirs

#: Variables a daemon started from a hook keeps: where things are, the locale, PATH (git).
KEPT = frozenset(
    {"HOME", "USER", "LOGNAME", "PATH", "LANG", "LANGUAGE", "TZ", "TMPDIR", "XDG_RUNTIME_DIR",
     "XDG_DATA_HOME", "XDG_CONFIG_HOME", "DBUS_SESSION_BUS_ADDRESS"}
)


def scrubbed(env: Mapping[str, str]) -> dict[str, str]:
    """The part of ``env`` a daemon may inherit: :data:`KEPT`, the locale, and snapd's own
    settings (``config.service_environment``)."""
    out = {k: v for k, v in env.items() if k in KEPT or k.startswith("LC_")}
    out.update(service_environment(env))
    return out


#: The variables that choose the store (and so the socket): a unit written with other values
#: serves another store, and starting it would leave this hook waiting on the wrong one.
STORE_VARIABLES = ("SNAPD_HOME", "XDG_DATA_HOME")


def unit_environment(text: str) -> dict[str, str]:
    """The ``Environment="NAME=VALUE"`` lines ``snapd install-service`` wrote, unquoted."""
    out = {}
    for line in text.splitlines():
        if line.startswith('Environment="') and line.endswith('"'):
            body = re.sub(r"\\(.)", r"\1", line[len('Environment="'):-1]).replace("%%", "%")
            name, _, value = body.partition("=")
            out[name] = value
    return out


def unit_serves(env: Mapping[str, str]) -> bool:
    """Whether the installed unit serves the store this hook's environment names."""
    for unit_dir in user_unit_dirs(env):
        try:
            text = (unit_dir / SERVICE_UNIT).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            continue
        written = unit_environment(text)
        return all(written.get(k, "") == env.get(k, "") for k in STORE_VARIABLES)
    return False


class Launch:
    """A daemon being started: how (for the warning), and the process to watch while it comes up
    (``snapd start --background`` exits 0 once its daemon answers, non-zero with the reason on
    stderr when it cannot start; none when systemd started the unit)."""

    def __init__(self, how: str, child: subprocess.Popen[bytes] | None = None,
                 errors: IO[bytes] | None = None) -> None:
        self.how, self.child, self.errors = how, child, errors

    def failure(self) -> str | None:
        """The start's own error once it has exited without a daemon, else None (still starting,
        or started)."""
        if self.child is None or self.child.poll() is None or self.child.returncode == 0:
            return None
        text = ""
        if self.errors is not None:
            self.errors.seek(0)
            text = self.errors.read(64 * 1024).decode("utf-8", "replace")
        return first_error(text) or f"it exited with status {self.child.returncode}"


def first_error(text: str) -> str:
    """The line that says why a start failed: snapd's own ``snapd: …`` line (its prefix left
    out), else the last line (a traceback's exception)."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    for line in lines:
        if line.startswith("snapd: "):  # (the starter quotes its daemon's line, prefix and all)
            return line.removeprefix("snapd: ").replace(": snapd: ", ": ")[:500]
    return lines[-1][:500] if lines else ""


def start(env: Mapping[str, str], timeout_s: float) -> Launch:
    """Start a daemon; does not wait for it to answer."""
    clean = scrubbed(env)
    systemctl = shutil.which("systemctl", path=env.get("PATH"))
    if systemctl and unit_serves(env):
        try:
            done = subprocess.run(
                [systemctl, "--user", "start", SERVICE_UNIT], env=clean, cwd="/", timeout=timeout_s,
                stdin=subprocess.DEVNULL, capture_output=True, check=False,
            )
            if done.returncode == 0:
                return Launch(f"systemctl --user start {SERVICE_UNIT}")
        except (OSError, subprocess.SubprocessError):
            pass  # the user manager is not reachable (no session bus): start it ourselves
    # Its stderr goes to an unlinked file, not a pipe: a hook that returns first must not leave
    # the starter writing into a closed pipe.
    errors = tempfile.TemporaryFile()
    child = subprocess.Popen(
        [sys.executable, "-m", "snapd", "start", "--background"],
        env=clean, cwd="/", start_new_session=True, close_fds=True,
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=errors,
    )
    return Launch(f"{sys.executable} -m snapd start --background", child, errors)
