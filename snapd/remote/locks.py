"""The repository's exclusive lock: ``locks/<random hex>``, taken by prune, the one op that deletes.

Pushes take no lock (they never delete or overwrite; docs/remote.md, "Retention"). Prune takes
one so two prunes never judge the same packs at once. An object store has no compare-and-swap,
so the lock is a protocol over plain objects:

1. list ``locks/``: a live lock (younger than :data:`STALE_S`) held by another refuses, naming
   its host, pid and time; a stale one is deleted (taken over) and reported;
2. PUT our own lock file;
3. list ``locks/`` again: if another live lock is there now, the two were written at about the
   same time, and the rival may have listed before ours landed (seeing only its own: it holds
   the lock). So whoever sees another withdraws its own, waits a random moment and starts
   again at 1 (a few times, then refuses): two prunes may both back off, never both go on.

A lock file is sealed (aad ``b"lock"``) JSON ``{"host", "pid", "time": ns, "op"}``. One that does
not open (another repository's key, damage) still counts, aged by its listing's mtime: an
unreadable lock is never ignored, only outlived.
"""

from __future__ import annotations

import os
import random
import secrets
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import NamedTuple

from snapd.errors import RemoteCorrupt, RemoteLocked, RemoteMissing
from snapd.remote import crypto, fields
from snapd.remote.backend import Backend

PREFIX = "locks/"
STALE_S = 3600.0
"""A lock older than this is a dead prune's: taken over (and said so)."""
ATTEMPTS = 3
"""Tries at a lock a rival wrote at the same time as ours (each after a random wait)."""
_AAD = b"lock"


class Lock(NamedTuple):
    name: str  # locks/<hex>
    host: str
    pid: int
    time: int  # ns since the epoch
    op: str

    def describe(self) -> str:
        when = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(self.time / 1e9))
        return f"{self.op} by pid {self.pid} on {self.host or '?'} since {when} ({self.name})"


class Held:
    """Our lock, and the stale locks deleted to take it. :meth:`renew` keeps a long prune's
    lock from going stale under it."""

    def __init__(self, backend: Backend, master: crypto.MasterKey, lock: Lock, took_over: list[Lock]) -> None:
        self.backend, self.master = backend, master
        self.lock = lock
        self.took_over = took_over

    def renew(self) -> None:
        """Once the lock is a quarter of :data:`STALE_S` old, write it again with the time of
        now (a new file first, then the old one deleted: never a moment without one)."""
        now = time.time_ns()
        if now - self.lock.time < STALE_S / 4 * 1e9:
            return
        # Stalled past STALE_S (a suspended machine, a hung request), our lock may have been
        # taken over as a dead prune's, and another prune may be working: stop, delete nothing.
        if not any(lock.name == self.lock.name for lock in read_locks(self.backend, self.master)):
            raise RemoteLocked(
                f"{self.backend.url}: this prune's lock ({self.lock.name}, taken "
                f"{(now - self.lock.time) / 3.6e12:.1f} h ago) was taken over as stale meanwhile; it "
                "stopped before deleting anything more: run it again",
                host=self.lock.host,
                pid=self.lock.pid,
                time=self.lock.time,
            )
        old, self.lock = self.lock, _write(self.backend, self.master, self.lock.host, self.lock.op, now)
        self.backend.delete(old.name)


def read_locks(backend: Backend, master: crypto.MasterKey) -> list[Lock]:
    """Every lock file listed (an unreadable one as host ``?``, aged by its mtime)."""
    found: list[Lock] = []
    for listed in backend.list(PREFIX):
        try:
            raw = crypto.open_sealed(master, backend.get(listed.name), _AAD, listed.name)
            doc = fields.load_object(raw, listed.name)
            found.append(
                Lock(listed.name, doc.string("host"), doc.number("pid"), doc.number("time"), doc.string("op"))
            )
        except RemoteMissing:
            continue  # released between the listing and the read
        except RemoteCorrupt:
            found.append(Lock(listed.name, "?", 0, listed.mtime_ns, "unreadable lock"))
    return found


def _live(lock: Lock, now: int) -> bool:
    return now - lock.time < STALE_S * 1e9


def acquire(backend: Backend, master: crypto.MasterKey, host: str, op: str = "prune") -> Held:
    """Take the repository's lock, or raise :class:`RemoteLocked` naming who holds it.

    Once our lock is written, any other live lock listed with it means a rival wrote its own
    at about the same time, and it may already have listed only its own and gone on: no rule
    of ours (not the older time) may then hold as well. So we withdraw ours, wait a random
    moment and try once more from the start (where a rival that won is a lock like any other);
    two that keep meeting are both refused, never both let in."""
    took_over: list[Lock] = []
    for attempt in range(ATTEMPTS):
        now = time.time_ns()
        for lock in read_locks(backend, master):
            if _live(lock, now):
                raise RemoteLocked(
                    f"{backend.url} is locked: {lock.describe()}; try again once it is done "
                    f"(a lock older than {STALE_S / 3600:g} h is taken over)",
                    host=lock.host,
                    pid=lock.pid,
                    time=lock.time,
                )
            backend.delete(lock.name)
            took_over.append(lock)
        mine = _write(backend, master, host, op, now)
        now = time.time_ns()
        rivals = [lock for lock in read_locks(backend, master) if lock.name != mine.name and _live(lock, now)]
        if not rivals:
            return Held(backend, master, mine, took_over)
        backend.delete(mine.name)
        if attempt + 1 == ATTEMPTS:
            rival = rivals[0]
            raise RemoteLocked(
                f"{backend.url} is locked: {rival.describe()} (taken at the same time as ours; try again)",
                host=rival.host,
                pid=rival.pid,
                time=rival.time,
            )
        time.sleep(random.uniform(0.05, 0.5))
    raise AssertionError("unreachable")


def _write(backend: Backend, master: crypto.MasterKey, host: str, op: str, now: int) -> Lock:
    lock = Lock(f"{PREFIX}{secrets.token_hex(16)}", host, os.getpid(), now, op)
    doc = {"host": lock.host, "pid": lock.pid, "time": lock.time, "op": lock.op}
    backend.put(lock.name, crypto.seal(master, fields.dump_json(doc), _AAD))
    return lock


def release(backend: Backend, held: Held) -> None:
    backend.delete(held.lock.name)  # absent (taken over as stale) is no error


@contextmanager
def holding(backend: Backend, master: crypto.MasterKey, host: str, op: str = "prune") -> Iterator[Held]:
    held = acquire(backend, master, host, op)
    try:
        yield held
    finally:
        release(backend, held)
