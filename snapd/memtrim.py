"""Freed heap given back to the system: after a big capture, and once the daemon is quiet.

glibc keeps what a process frees: a 100k-file baseline leaves ~250 MB of free heap behind,
and marks of wide directories (whose nodes are encoded and hashed whole, a megabyte or two
each) leave tens of MB more, so the resident set of a daemon that has gone idle stays at its
high-water mark. ``malloc_trim`` hands the free pages back. It costs milliseconds
(``bench/profile_memory.py --marks``) and holds malloc's lock meanwhile, so it runs
neither inside a mark nor after each one: :class:`IdleTrim`, told of every commit, trims
once the commits have stopped for :data:`IDLE_S`, and at least every :data:`BUSY_S` while they
go on. An agent that marks back to back all day never leaves the daemon quiet for a second,
and a periodic GC leaves its working set behind as free heap (150 MB after one at 2,500 marks
of 5k files, ``bench/bench_soak.py --in-process --gc-at``; a trim gave it back).

Trimming is only about memory: nothing that is kept depends on it, and on a C library other
than glibc it does nothing.
"""

from __future__ import annotations

import ctypes
import threading
import time
from collections.abc import Callable

IDLE_S = 1.0  # quiet this long after a commit: trim
ARENAS = 2  # malloc arenas the daemon's threads share (limit_arenas)
M_ARENA_MAX = -8  # glibc's mallopt parameter for it (malloc.h)
BUSY_S = 30.0  # committing without such a quiet spell this long: trim all the same


def trim() -> None:
    """Give the free heap back to the system now (glibc's ``malloc_trim``; elsewhere nothing)."""
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass  # not glibc: nothing to do


def limit_arenas(arenas: int = ARENAS) -> bool:
    """At most ``arenas`` malloc arenas from now on (glibc's ``mallopt``; elsewhere nothing):
    whether it was applied. glibc gives a thread that finds the arenas busy one of its own, up
    to 8 per core, and what a thread frees stays in its arena for that arena's next
    allocations. The daemon's threads (requests, capture, the GC's sweep, ZeroMQ's) each left
    their transient heap in an arena of its own: 92-96 MB after 6,000 marks of the soak
    (``bench/bench_soak.py``) against 85-87 with two. Call it before the threads start: arenas
    already made stay."""
    try:
        return bool(ctypes.CDLL("libc.so.6").mallopt(M_ARENA_MAX, arenas))
    except (OSError, AttributeError):
        return False  # not glibc


class IdleTrim:
    """Trims (``trim``) once :meth:`wrote` has not been called for ``idle_s``, and every
    ``busy_s`` while it keeps being called; a daemon thread, started by the first call."""

    def __init__(
        self, idle_s: float = IDLE_S, trim: Callable[[], None] = trim, busy_s: float = BUSY_S
    ) -> None:
        self._idle_s, self._busy_s, self._trim = idle_s, busy_s, trim
        self._wrote = threading.Event()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    def wrote(self) -> None:
        """Something was committed: trim after the next quiet spell."""
        self._wrote.set()
        if self._thread is None:
            with self._lock:
                if self._thread is None:
                    self._thread = threading.Thread(target=self._run, name="snapd-heap-trim", daemon=True)
                    self._thread.start()

    def _run(self) -> None:
        while True:
            self._wrote.wait()
            self._wrote.clear()
            busy_until = time.monotonic() + self._busy_s
            while self._wrote.wait(self._idle_s):  # written again meanwhile: wait on, for a while
                self._wrote.clear()
                if time.monotonic() >= busy_until:
                    break
            self._trim()


after_writes = IdleTrim()
"""The process's one: memory is per process, whichever store or workspace freed it."""
