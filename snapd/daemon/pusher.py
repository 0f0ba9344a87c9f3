"""On-mark pushing: a background thread that pushes each new mark to the remotes configured
with ``push = "on-mark"`` (docs/remote.md, "Daemon and on-mark pushing").

The mark op only wakes it (:meth:`Pusher.wake`: an event set, after the mark is committed and
its reply built), so a slow, dead or stopped server never delays a mark's reply. The thread then
pushes every mark of the watched workspaces that the repository lacks: the queue is the store's
``pushed`` table (:mod:`snapd.store.pushed`), not a list in memory, so marks taken while the
server was away, or before a restart, go with the next push. It also looks every ``TICK_S``
(marks taken by other ops: a rollback's pre-rollback mark, a baseline).

A failed push is retried after a delay that doubles from ``FIRST_DELAY_S`` up to ``MAX_DELAY_S``;
a success resets it. A mark a push skipped (its objects damaged in the local store: the others
are pushed) is not tried again by this thread: it is shown once, as the remote's last error,
and ``snapctl push`` tries it again. The outcome (last push, last error) is each remote's
:class:`snapd.daemon.remotes.PushRecord`, which ``status`` shows with the pending count.
"""

from __future__ import annotations

import threading
import time

import structlog

from snapd.daemon.remotes import Remotes
from snapd.errors import SnapdError

log = structlog.get_logger("snapd.pusher")

TICK_S = 60.0
FIRST_DELAY_S = 1.0
MAX_DELAY_S = 60.0


class Pusher:
    def __init__(self, remotes: Remotes, tick_s: float = TICK_S) -> None:
        self.remotes, self.tick_s = remotes, tick_s
        self._wake = threading.Event()
        self._stopping = threading.Event()
        self._delay: dict[str, float] = {}  # remote -> its current retry delay
        self._retry_at: dict[str, float] = {}  # remote -> time.monotonic() of its next try
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """Start the thread, which pushes what is pending at once (marks from before a restart)."""
        self._thread = threading.Thread(target=self._run, name="snapd-pusher", daemon=True)
        self._thread.start()

    def wake(self) -> None:
        """A mark was committed: push it (never blocks)."""
        self._wake.set()

    def stop(self, timeout: float = 2.0) -> None:
        """Ask the thread to end; a push stuck on a silent server is abandoned, not waited for
        (what it sent is journaled: the next start resumes it, docs/remote.md)."""
        self._stopping.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout)

    def _run(self) -> None:
        while not self._stopping.is_set():
            self._wake.clear()
            names = self.remotes.on_mark()
            for gone in set(self._retry_at) - set(names):  # removed, or no longer on-mark
                self._retry_at.pop(gone, None)
                self._delay.pop(gone, None)
            for name in names:
                if self._stopping.is_set():
                    return
                if self._retry_at.get(name, 0.0) <= time.monotonic():
                    self._push(name)
            self._wake.wait(self._sleep())

    def _push(self, name: str) -> None:
        try:
            if self.remotes.pending(name, queued=True) != 0:  # not the marks a push skipped
                watched = [w for w in self.remotes.store.workspaces() if w.watching]
                self.remotes.push(name, watched, wait=False)
        except SnapdError:  # recorded by Remotes.push (status shows it): retry later
            self._later(name)
            return
        except Exception:  # a bug, or the store closing under a stop: the thread lives on
            log.exception("pusher.crashed", remote=name)
            self._later(name)
            return
        self._delay.pop(name, None)  # pushed, or nothing to push (another push sent it)
        self._retry_at.pop(name, None)

    def _later(self, name: str) -> None:
        delay = min(self._delay.get(name, FIRST_DELAY_S / 2) * 2, MAX_DELAY_S)
        self._delay[name] = delay
        self._retry_at[name] = time.monotonic() + delay

    def _sleep(self) -> float:
        """Until the next tick, or the next retry due, whichever is first."""
        now = time.monotonic()
        due = [at - now for at in self._retry_at.values()]
        return max(0.0, min([self.tick_s, *due]))
