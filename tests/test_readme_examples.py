"""The READMEs' examples, run as written against a real daemon, so they cannot rot.

- README.md's quick start, line by line (``snapd start`` is the test's daemon, ``cd`` its
  workspace; rollback and undo get ``--yes``, there being no terminal to ask on): every command
  succeeds, and the turn it opens it also closes, so a change made afterwards is nobody's turn
  (its ``turn-end`` had no ``--agent/--session``: every later rollback warned about "session 42");
- clients/README.md's Python example, extracted and run by this venv's interpreter (it
  imported ``snapd.client``, which does not exist: it is ``snapd.ipc.client``).
"""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from e2e_helpers import Daemon, describe, write

pytestmark = pytest.mark.timeout(120)

TOP = Path(__file__).resolve().parent.parent


def code_block(readme: Path, lang: str, after: str) -> str:
    """The first ```lang block after the line ``after`` in ``readme``."""
    text = readme.read_text()
    start = text.index(after)
    m = re.search(rf"```{lang}\n(.*?)```", text[start:], re.S)
    assert m, f"no {lang} block after {after!r} in {readme}"
    return m.group(1)


def commands(line: str) -> list[list[str]]:
    """The commands of one shell line: comments dropped, split at ``;``."""
    out: list[list[str]] = [[]]
    for token in shlex.split(line, comments=True):
        out[-1].append(token.removesuffix(";"))
        if token.endswith(";"):
            out.append([])
    return out


def test_the_quick_start_runs_as_written_and_closes_its_turn(daemon: Daemon, tmp_path: Path) -> None:
    ws = tmp_path / "myproject"
    write(ws / "src" / "app.py", "print('v1')\n")
    ran = []
    for line in code_block(TOP / "README.md", "sh", "## Quick start").splitlines():
        if "the agent edits files" in line:
            write(ws / "src" / "app.py", "print('the agent was here')\n")
            continue
        for argv in commands(line):
            part = shlex.join(argv)
            if not argv or argv[0] in ("snapd", "cd"):
                continue
            assert argv[0] == "snapctl", line
            # "." is the project; a path the README puts in /tmp (restore's target) goes under
            # this test's own directory, never into the machine's /tmp
            args = [str(ws) if a == "." else str(tmp_path / a[5:]) if a.startswith("/tmp/") else a
                    for a in argv[1:]]
            if args[0] in ("rollback", "undo"):
                args.insert(1, "--yes")
            cp = daemon.ctl(*args, cwd=ws, check=False)
            assert cp.returncode == 0, f"{part}\n{describe(cp)}"
            ran.append((part, cp))
    assert len(ran) >= 15, [p for p, _ in ran]
    marks = daemon.ctl_json("log", cwd=ws)["marks"]
    start = next(m for m in marks if m["label"] == "turn-start")
    end = next(m for m in marks if m["label"] == "turn-end")
    assert (end["agent"], end["session"]) == (start["agent"], start["session"]) == ("claude", "42")

    # After the turn: a change by hand is nobody's turn, and rolling it back names no session.
    write(ws / "src" / "app.py", "print('my own edit')\n")
    cp = daemon.ctl("rollback", "--to", "turn-end", "--yes", cwd=ws)
    out = cp.stdout + cp.stderr
    # (the session and agent as a plan names them: a mark id may hold the digits "42" by chance)
    assert b"session 42" not in out and b"claude" not in out, describe(cp)


def test_the_clients_python_example_runs(daemon: Daemon, tmp_path: Path) -> None:
    ws = tmp_path / "proj"
    write(ws / "a.txt", "hello\n")
    code = code_block(TOP / "clients" / "README.md", "python", "## From a program")
    cp = subprocess.run([sys.executable, "-c", code], cwd=ws, env=daemon.env, capture_output=True, timeout=60)
    assert cp.returncode == 0, describe(cp)
    mark_id = cp.stdout.split()[0].decode()
    marks = daemon.ctl_json("log", cwd=ws)["marks"]
    assert any(m["id"] == mark_id and m["label"] == "turn-start" and m["agent"] == "my-agent" for m in marks)
