"""Processes a test session leaves behind: finding them and ending them.

Every process a test starts for snapd is given a ``SNAPD_HOME`` below pytest's temporary root
(``basetemp``), which belongs to this session alone; the process keeps it, and so do the daemons
that ``snapd start --background`` and the hooks' auto-start detach into sessions of their own,
whose pids no test knows. Once the session is over, a process whose ``SNAPD_HOME`` lies under
that root is a leftover, whoever started it. (The ``nobody`` and ``root_daemon`` fixtures put
their homes outside it, where another uid can enter: those are not covered.)

Two callers:

- conftest's end-of-session check reports each leftover, ends it, and fails the run;
- the reaper, ``python tests/leftovers.py ROOT``, started with the session in a session of its
  own (a kill of pytest's process group does not reach it), reads its stdin, a pipe only pytest
  writes to, until EOF: pytest is gone, however it ended. When it ended without running the
  tests' ``finally`` blocks (SIGKILL, SIGTERM or SIGHUP to its pid alone, the OOM killer),
  every daemon running at that moment would otherwise live on with ppid 1.

Processes are held by pidfd from the moment they are found, so a pid reused in between is
never signalled.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

HOME_VAR = b"SNAPD_HOME="
TERM_GRACE_S = 5.0  # between SIGTERM (a daemon removes its sockets) and SIGKILL


@dataclass(frozen=True)
class Leftover:
    pid: int
    cmdline: str
    snapd_home: str

    def __str__(self) -> str:
        return f"pid {self.pid}: {self.cmdline}\n    SNAPD_HOME={self.snapd_home}"


def _read(pid: int) -> tuple[bytes, bytes]:
    with open(f"/proc/{pid}/environ", "rb") as e, open(f"/proc/{pid}/cmdline", "rb") as c:
        return e.read(), c.read()


def _under(root: Path) -> list[tuple[int, Leftover]]:
    """Every other process whose SNAPD_HOME lies under ``root``, with a pidfd for each."""
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == os.getpid():
            continue
        try:
            fd = os.pidfd_open(int(name))
        except ProcessLookupError:
            continue
        try:
            environ, cmdline = _read(int(name))
            signal.pidfd_send_signal(fd, 0)  # what was read is the opened process's: no reused pid
        except (FileNotFoundError, ProcessLookupError, PermissionError):
            os.close(fd)
            continue
        home = next((v[len(HOME_VAR) :] for v in environ.split(b"\0") if v.startswith(HOME_VAR)), None)
        if home is None or not Path(os.fsdecode(home)).is_relative_to(root):
            os.close(fd)
            continue
        shown = cmdline.rstrip(b"\0").replace(b"\0", b" ").decode(errors="replace")
        found.append((fd, Leftover(int(name), shown, os.fsdecode(home))))
    return found


def _running(fds: list[int], timeout_s: float) -> list[int]:
    """Those of ``fds`` whose process still runs after up to ``timeout_s`` (a pidfd reads
    ready once its process has exited)."""
    deadline = time.monotonic() + timeout_s
    while fds and (left := deadline - time.monotonic()) > 0:
        ready, _, _ = select.select(fds, [], [], left)
        fds = [fd for fd in fds if fd not in ready]
    return fds


def _signal(fds: list[int], signum: int) -> None:
    for fd in fds:
        with contextlib.suppress(ProcessLookupError):
            signal.pidfd_send_signal(fd, signum)


def reap(root: Path, grace_s: float) -> list[Leftover]:
    """End every process left under ``root``; return them. One that exits within ``grace_s``
    by itself (a daemon finishing a stop it was asked for) is not a leftover; the others get
    SIGTERM, then SIGKILL."""
    found = dict(_under(root))
    try:
        stuck = _running(list(found), grace_s)
        _signal(stuck, signal.SIGTERM)
        _signal(_running(stuck, TERM_GRACE_S), signal.SIGKILL)
        _running(stuck, TERM_GRACE_S)
        return [found[fd] for fd in stuck]
    finally:
        for fd in found:
            os.close(fd)


def start_reaper(root: Path) -> tuple[subprocess.Popen[bytes], int]:
    """Start the reaper of ``root``. Returns it and the write end of its pipe: hold that open
    (never write to it) until this process ends. The pipe is not inheritable, so no child
    of this process keeps the reaper waiting."""
    r, w = os.pipe()
    try:
        proc = subprocess.Popen(
            [sys.executable, __file__, os.fspath(root)], stdin=r, cwd="/", start_new_session=True
        )
    finally:
        os.close(r)
    return proc, w


if __name__ == "__main__":
    swept = Path(sys.argv[1])
    sys.stdin.buffer.read()  # returns at EOF: the session's pytest is gone
    for p in reap(swept, grace_s=0.0):
        print(f"leftovers.py: ended a process the test session at {swept} left running: {p}", file=sys.stderr)
