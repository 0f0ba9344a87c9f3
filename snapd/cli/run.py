"""``run``: a command wrapped in a turn. A ``turn-start`` mark before it, a ``turn-end`` mark
after it (with how it ended), so whatever it changed in the workspace is one turn that
``snapctl revert --turn`` takes back and ``log``/``show`` name by its command line.

Promises:

- The command runs only once its turn-start mark is taken: a daemon that does not answer is
  reported (with its exit code) and the command is not run.
- It runs as if started by the shell: the terminal's stdin, stdout and stderr, the current
  directory, the environment; the signal dispositions snapctl inherited (Python's own
  ignoring of SIGPIPE and SIGXFSZ undone, as :mod:`subprocess` does).
- SIGINT, SIGTERM, SIGHUP and SIGQUIT sent to snapctl reach the command. One the terminal sent
  (^C, ^\\, a hang-up) went to the whole foreground process group, the command included, so it
  is not sent twice: :func:`signal.sigwaitinfo` tells the kernel's signals (``SI_KERNEL``)
  from a ``kill`` (which is forwarded). Those signals (and SIGCHLD) are blocked and waited
  for in this one thread: no handler runs between the command's start and its end, and no
  other thread is there to take one (the client's ZeroMQ threads end with its context,
  before the command starts).
- snapctl exits with the command's status: its exit code, or 128+N when signal N ended it (a
  command that cannot be started: 127 when it is not found, 126 otherwise, as a shell says).
  The turn-end mark is taken in every case (a command ^C ended closes an interrupted turn, as
  an agent's does); when that fails the command's status still wins, and the failure is said
  on stderr (``end_error`` with ``--json``).
"""

from __future__ import annotations

import argparse
import os
import shlex
import signal
from typing import Any

from snapd.cli.output import emit, print_json
from snapd.cli.request import Env, client, where
from snapd.errors import SnapdError, UsageError

FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT)
SI_KERNEL = 0x80  # siginfo's si_code of a signal the kernel sent (a terminal's), not kill(2)
AGENT = "run"


def cmd_run(args: argparse.Namespace, env: Env) -> int:
    argv: list[str] = args.paths  # the words after "--"
    if not argv:
        raise UsageError("run: give the command after --, e.g. snapctl run -- make test")
    words = [_text(a) for a in argv]
    session = args.session or f"run-{os.urandom(4).hex()}"
    line = shlex.join(words)
    fields: dict[str, Any] = {
        "agent": AGENT, "session": session, "message": f"{args.label}: {line}" if args.label else line,
    }
    with client(args, env) as c:
        start = c.call("mark", label="turn-start", run=_run(words), **fields, **where(args))
    if not args.json:
        emit(f"snapctl run: turn-start {start['id']} (session {session}): {line}", err=True)
    status, code, sig = _wait(argv, env)
    fields["workspace"] = os.fsencode(start["workspace"])  # the same one, whatever CMD did to the cwd
    end: dict[str, Any] | None = None
    failed: SnapdError | None = None
    try:
        with client(args, env, quiet=True) as c:
            end = c.call("mark", label="turn-end", run=_run(words, code, sig), interrupted=sig == "SIGINT",
                         **fields)
    except SnapdError as exc:
        failed = exc
    if args.json:
        print_json({"start": start, "end": end, "exit": code, "signal": sig,
                    "status": status, **({"end_error": failed.to_wire()} if failed else {})})
    elif failed is not None:
        emit(f"snapctl run: the turn-end mark failed: {failed.message} (the command's status stands)",
             err=True)
    else:
        ended = f"killed by {sig}" if sig else f"exit {code}"
        assert end is not None
        emit(f"snapctl run: turn-end {end['id']} ({ended}); `snapctl revert --turn {start['id']}` "
             "takes back what it changed", err=True)
    return status


def _text(word: str) -> str:
    """An argument as text for the marks (one that is not UTF-8 shows its bytes as ``\\xNN``)."""
    return os.fsencode(word).decode("utf-8", "backslashreplace")


def _run(words: list[str], code: int | None = None, sig: str | None = None) -> dict[str, Any]:
    return {"argv": words, "exit": code, "signal": sig}


def _wait(argv: list[str], env: Env) -> tuple[int, int | None, str | None]:
    """Run ``argv`` to its end, forwarding signals (module docstring): the status to exit
    with, and its exit code or the name of the signal that ended it."""
    watched = {*FORWARDED, signal.SIGCHLD}
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, watched)
    try:
        try:
            pid = os.posix_spawnp(
                argv[0], argv, env, setsigmask=mask, setsigdef=(signal.SIGPIPE, signal.SIGXFSZ)
            )
        except OSError as exc:
            code = 127 if isinstance(exc, FileNotFoundError) else 126
            emit(f"snapctl run: {_text(argv[0])}: {exc.strerror}", err=True)
            return code, code, None
        while True:
            info = signal.sigwaitinfo(watched)
            if info.si_signo == signal.SIGCHLD:
                done, raw = os.waitpid(pid, os.WNOHANG)
                if done:
                    break
            elif not (info.si_code == SI_KERNEL and _same_group(pid)):
                try:
                    os.kill(pid, info.si_signo)
                except ProcessLookupError:  # it ended; its SIGCHLD is on the way
                    pass
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)
    code = os.waitstatus_to_exitcode(raw)
    if code >= 0:
        return code, code, None
    try:
        name = signal.Signals(-code).name
    except ValueError:  # a real-time signal has no name of its own
        name = f"signal {-code}"
    return 128 - code, None, name


def _same_group(pid: int) -> bool:
    """Whether the command is still in snapctl's process group (one a terminal signals whole)."""
    try:
        return os.getpgid(pid) == os.getpgrp()
    except ProcessLookupError:
        return False
