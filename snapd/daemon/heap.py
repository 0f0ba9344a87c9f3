"""The daemon's heap and Python's cyclic garbage collector: long-lived state out of its walks.

A watched workspace keeps structures of 10^5 entries for as long as it is watched (its stat
cache and directory index, the watcher's maps). The collector walks every object of each
generation it collects, in whichever thread allocated last — usually a request's. Measured
in-process at django-100k (``gc.callbacks``): right after a workspace started, while those
structures were still young, single collections took 30–100 ms inside marks, and a full
collection of that heap 70–170 ms: the tail of a mark's time.

So once a workspace has started (baseline or reconcile done), what is alive is moved to the
collector's permanent generation (``gc.freeze``): later collections walk only what was made
since. Frozen objects are still freed by reference counting when dropped; only reference
cycles among them wait. So when a workspace stops for good (unwatch, forget, a re-register),
everything is unfrozen, collected once (its cycles go), and frozen again.

A restore builds, at once, records of every path of a tree (its plan: 10^5 ops and entries,
none of them in a reference cycle) while its fill and the remote's readers allocate more. The
collector runs as the count of objects grows, and each full collection walks all of them:
measured on mixed-83k (122k entries), the plan from nothing took 2.4-5.2 s with the collector
running and 1.7 s without it. So such work runs :func:`paused`: no collection while it does;
cycles made meanwhile (by it or by any thread) wait until it ends, when collection resumes.

Giving freed memory back to the system (glibc keeps it) is :mod:`snapd.memtrim`'s, below the
store, which tells it of every commit.

The policy is the daemon process's, chosen by its ``main`` (:func:`manage`): in any other
process (tests that run the service in-process) :func:`settle` and :func:`release` do nothing.
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from contextlib import contextmanager

_lock = threading.Lock()
_managed = False
_pausing = 0  # works running paused: the collector is off while there is one


def manage(on: bool = True) -> None:
    """Apply the policy in this process (the daemon's ``main``), or stop applying it."""
    global _managed
    with _lock:
        _managed = on


def settle() -> None:
    """A workspace has started: keep what is alive now out of every later collection."""
    with _lock:
        if _managed:
            gc.freeze()


def release() -> None:
    """A workspace has stopped for good: let the collector reclaim its cycles (one full
    collection, in the caller's thread), then freeze the rest again."""
    with _lock:
        if _managed:
            gc.unfreeze()
            gc.collect()
            gc.freeze()


@contextmanager
def paused() -> Iterator[None]:
    """No cyclic collection while the block runs (nor while any other paused block does): for
    work that makes 10^5 acyclic records at once. Collection resumes when the last one ends."""
    global _pausing
    with _lock:
        managed = _managed
        if managed:
            _pausing += 1
            gc.disable()
    try:
        yield
    finally:
        if managed:
            with _lock:
                _pausing -= 1
                if _pausing == 0:
                    gc.enable()
