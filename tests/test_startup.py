"""What a snapctl process loads and does beyond its work: the hook runs on every prompt an agent
submits and ``snapctl mark`` on every turn, so their start-up is held to a budget
(docs/benchmarks.md: at most 20 ms above ``python -c 'import zmq'``). Wall time on a shared
machine is too noisy to assert here; what it is made of is not. Each run below is a real
process doing a real call (a mark, a status) against a real daemon, then listing its modules.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from e2e_helpers import Daemon

#: Modules none of these commands may load: each cost milliseconds at import for nothing the
#: command does (dataclasses brings inspect, ast and dis; socket builds its enums; calendar
#: and base64 serve only some arguments; shutil, with bz2 and lzma, only sized argparse's help;
#: argparse is the commands', not the hook's).
NEVER = {
    "dataclasses", "inspect", "ast", "dis", "socket", "calendar", "base64", "difflib", "subprocess",
    "shutil",
}

#: A run of ``argv`` through the console script's entry point, then what it loaded.
PROBE = """
import gc, json, sys
from snapd.__main__ import ctl
code = ctl(sys.argv[1:])
print(json.dumps({"code": code, "modules": sorted(sys.modules), "frozen": gc.get_freeze_count()}),
      file=sys.stderr)
"""


def probe(d: Daemon, cwd: Path, *argv: str, stdin: bytes = b"") -> dict[str, Any]:
    cp = subprocess.run([sys.executable, "-c", PROBE, *argv], env=d.env, cwd=cwd, capture_output=True,
                        input=stdin, timeout=60)
    report: dict[str, Any] = json.loads(cp.stderr.decode().splitlines()[-1])
    assert report["code"] == 0, cp
    return report


def test_a_marking_hook_loads_no_parser_and_no_dataclasses(ws: Path, daemon: Daemon) -> None:
    """Codex's notify (its event in argv) and Claude Code's prompt (on stdin, with the notice)."""
    notify = json.dumps({"type": "agent-turn-complete", "thread-id": "t1", "cwd": str(ws)})
    prompt = json.dumps({"hook_event_name": "UserPromptSubmit", "session_id": "s1", "cwd": str(ws)})
    for argv, stdin, label in ((("hook", "codex", notify), b"", "turn-end"),
                               (("hook", "claude-code"), prompt.encode(), "turn-start")):
        loaded = set(probe(daemon, ws, *argv, stdin=stdin)["modules"])
        assert daemon.ctl_json("log", "-w", ws)["marks"][0]["label"] == label  # it did mark
        assert loaded & (NEVER | {"argparse", "snapd.cli"}) == set(), argv
        assert "zmq" in loaded


def test_a_command_builds_and_loads_only_its_own(ws: Path, daemon: Daemon) -> None:
    for argv, own in ((("mark", "t", "-w", str(ws)), "snapd.cli.marks"), (("status",), "snapd.cli.status")):
        loaded = set(probe(daemon, ws, *argv)["modules"])
        assert loaded & NEVER == set(), argv
        commands = {m for m in loaded if m.startswith("snapd.cli.")}
        assert own in commands and not commands & {"snapd.cli.rollback", "snapd.cli.events",
                                                   "snapd.cli.history", "snapd.cli.remote"}, commands


def test_the_remote_commands_leave_the_remote_library_to_the_daemon(ws: Path, daemon: Daemon) -> None:
    """snapctl only sends a remote command's request: the S3 client, the cryptography and
    snapd.remote itself are the daemon's to load (issue 32: their import cost stays off the CLI)."""
    loaded = set(probe(daemon, ws, "remote", "list")["modules"])
    heavy = {m for m in loaded if m.split(".")[0] in ("obstore", "cryptography", "boto3")
             or m == "snapd.remote" or m.startswith("snapd.remote.")}
    assert "snapd.cli.remote" in loaded and not heavy, heavy


def test_only_the_ui_command_loads_textual(ws: Path, daemon: Daemon) -> None:
    """`snapctl ui` (issue 35) is the one command that needs Textual and rich: `log` and `mark`,
    run on every turn, never load them, nor the app's package."""
    for argv in (("log", "-w", str(ws)), ("mark", "t", "-w", str(ws))):
        loaded = set(probe(daemon, ws, *argv)["modules"])
        ui = {m for m in loaded if m.split(".")[0] in ("textual", "textual_serve", "rich")
              or m == "snapd.ui" or m.startswith("snapd.ui.")}
        assert not ui, (argv, ui)


#: `snapctl ui` where Textual cannot be imported.
NO_TEXTUAL = """
import sys
sys.modules["textual"] = None  # what importing it finds: nothing (as when it is not installed)
from snapd.__main__ import ctl
sys.exit(ctl(sys.argv[1:]))
"""


def test_ui_without_textual_names_the_install_command(ws: Path, daemon: Daemon) -> None:
    cp = subprocess.run([sys.executable, "-c", NO_TEXTUAL, "ui", "-w", str(ws)], env=daemon.env, cwd=ws,
                        capture_output=True, timeout=60)
    assert cp.returncode == 1, cp
    assert "needs Textual" in cp.stderr.decode() and "pip install 'snapd[ui]'" in cp.stderr.decode(), cp


def test_the_process_ends_without_collecting_its_objects(ws: Path, daemon: Daemon) -> None:
    """The teardown's collections walked every module's objects once more: ~10 ms of CPU for
    a hook. The entry point freezes them out of the collector once the command is done."""
    assert probe(daemon, ws, "status")["frozen"] > 0
    assert probe(daemon, ws, "hook", "claude-code")["frozen"] > 0


#: The daemon's entry point (the ``snapd`` console script's module), then whether rich is loaded
#: and whether structlog found it.
DAEMON_PROBE = """
import json, sys
import snapd.daemon.main
import structlog.dev
loaded = {"rich": sys.modules.get("rich") is not None, "structlog_rich": structlog.dev.rich is not None}
print(json.dumps(loaded))
"""


def _installed(dist: str) -> bool:
    try:
        importlib.metadata.distribution(dist)
    except importlib.metadata.PackageNotFoundError:
        return False
    return True


def test_the_daemon_starts_without_rich(tmp_path: Path) -> None:
    """structlog imports rich when it is installed, for its console tracebacks only: time every
    daemon start paid before it answered (docs/benchmarks.md, session 17's A/B)."""
    # Asked of the installed distributions, not of the import system: a test that imported
    # snapd.daemon in this process has marked rich absent in sys.modules.
    if not _installed("rich"):  # then this test could not fail
        msg = "rich is not installed in this venv (import-linter brings it): nothing to keep out"
        if os.environ.get("CI"):
            pytest.fail(msg)
        pytest.skip(msg)
    cp = subprocess.run([sys.executable, "-c", DAEMON_PROBE], cwd=tmp_path, capture_output=True,
                        timeout=60, check=True)
    assert json.loads(cp.stdout) == {"rich": False, "structlog_rich": False}
