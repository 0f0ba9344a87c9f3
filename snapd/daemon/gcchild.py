"""GC's mark phase in a process of its own, for the daemon's GC runs.

The mark phase holds every key the store keeps for the length of a walk (``snapd.store.gcmark``
says why that must not happen in the daemon's heap). :class:`ChildMarkPhase` starts
``python -m snapd.store.gcmark STORE`` at its first step, sends it each step's arguments
and reads back the result; the process reads the store as committed, through a connection of
its own, while the daemon goes on capturing and marking on its other core.

Invariants:

- Only reads happen there. The sweep, and the holds that spare what batches in flight rely
  on, stay in the daemon: the caller enters ``holds.sweeping()`` before asking for the
  unreferenced objects, so anything a batch commits after the process read the catalog is
  spared, exactly as when the phase ran on the GC's own thread.
- A step the process answers with an error raises that error (its class from the wire code),
  as the step would have raised in the daemon.
- A process that cannot start, dies, or sends something unreadable loses nothing: that step
  and the rest of the run go on in the daemon (:class:`~snapd.store.gcmark.Here`), and
  :attr:`ChildMarkPhase.fallback` says why (the report and the log carry it).
- The process ends with the run (its stdin closed: it reads EOF and exits); if the daemon
  dies, the kernel kills it (``PR_SET_PDEATHSIG``: an orphan walking on kept the store's
  file system busy). The kernel's signal follows the *thread* that started the process, so
  the process is started, asked and closed on the GC run's own thread, which outlives it.
"""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
from types import TracebackType
from typing import Any

import structlog

from snapd.config import Retention
from snapd.errors import InternalError, from_wire
from snapd.store.gcmark import Here, Keys, Unreferenced
from snapd.store.repack import Conversion
from snapd.store.store import Store

log = structlog.get_logger(__name__)

# What a process that cannot start, dies, or sends something unreadable raises here.
_FAILED = (OSError, EOFError, pickle.UnpicklingError, ValueError, AttributeError, ImportError)


class ChildMarkPhase:
    """The steps of :class:`snapd.store.gcmark.MarkPhase`, answered by a child process
    over ``store`` (``argv``: the command, for tests; the store's directory is appended)."""

    def __init__(self, store: Store, argv: list[str] | None = None) -> None:
        self.store = store
        self.argv = argv if argv is not None else [sys.executable, "-m", "snapd.store.gcmark"]
        self._popen: subprocess.Popen[bytes] | None = None
        self.pid: int | None = None
        self.max_rss: int | None = None  # bytes, the process's peak (once it has ended)
        self.steps = 0  # answered by the process
        self.fallback: str | None = None  # why the daemon ran the rest itself

    def __enter__(self) -> ChildMarkPhase:
        return self

    def __exit__(self, *exc: type[BaseException] | BaseException | TracebackType | None) -> None:
        self.close()

    def summary(self) -> dict[str, Any]:
        """For ``snapctl gc --json`` and the log: where the mark phase ran."""
        return {"pid": self.pid, "steps": self.steps, "max_rss": self.max_rss, "fallback": self.fallback}

    def _call(self, step: str, *args: Any) -> Any:
        if self.fallback is None:
            try:
                return self._ask(step, args)
            except _FAILED as exc:
                self.fallback = f"GC's mark process failed ({type(exc).__name__}: {exc}); ran in the daemon"
                log.warning("gc.mark_process_failed", step=step, error=str(exc), pid=self.pid)
                self.close()
        return getattr(Here(self.store), step)(*args)

    def _ask(self, step: str, args: tuple[Any, ...]) -> Any:
        if self._popen is None:
            # cwd "/": ``-m`` puts the cwd first on sys.path, where a "snapd" directory would shadow us
            self._popen = subprocess.Popen(
                [*self.argv, os.fspath(self.store.dir), str(os.getpid())],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, cwd="/", close_fds=True,
            )
            self.pid = self._popen.pid
        assert self._popen.stdin is not None and self._popen.stdout is not None
        pickle.dump((step, args), self._popen.stdin, pickle.HIGHEST_PROTOCOL)
        self._popen.stdin.flush()
        reply = pickle.load(self._popen.stdout)
        if not isinstance(reply, tuple) or not reply or reply[0] not in ("ok", "error"):
            raise ValueError(f"an unreadable reply from GC's mark process: {reply!r:.200}")
        if reply[0] == "error":
            _, code, message = reply
            if code == "internal":
                raise InternalError(f"GC's mark process failed: {message}")
            raise from_wire({"code": code, "message": message})
        self.steps += 1
        return reply[1]

    def close(self) -> None:
        """Let the process end (stdin closed); one that does not within seconds is killed.
        Its peak memory is read first, while it waits for a step that will not come."""
        popen, self._popen = self._popen, None
        if popen is None:
            return
        self.max_rss = _peak_rss(popen.pid)
        for pipe in (popen.stdin, popen.stdout):
            try:
                if pipe is not None:
                    pipe.close()
            except OSError:
                pass
        try:
            popen.wait(10)
        except subprocess.TimeoutExpired:
            popen.kill()
            popen.wait()

    def unreferenced(self, policy: Retention, now: int, extra: Keys) -> Unreferenced:
        found = self._call("unreferenced", policy, now, extra)
        assert isinstance(found, Unreferenced)
        return found

    def kept_bytes(self, policy: Retention, now: int, extra: Keys) -> int:
        return int(self._call("kept_bytes", policy, now, extra))

    def fewest_to_fit(self, policy: Retention, now: int, young: int, cands: list[str], extra: Keys) -> int:
        return int(self._call("fewest_to_fit", policy, now, young, cands, extra))

    def repack_plan(self, since: int) -> list[Conversion]:
        found = self._call("repack_plan", since)
        assert isinstance(found, list)
        return found


def _peak_rss(pid: int) -> int | None:
    """The process's VmHWM in bytes (None if it is gone)."""
    try:
        with open(f"/proc/{pid}/status", "rb") as f:
            for line in f:
                if line.startswith(b"VmHWM:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None
