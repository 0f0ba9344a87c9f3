"""GC holds: the keys a sweep must spare, shared by write batches and the sweep.

A batch relies on objects it has found present (deduplication) or is writing; the sweep
deletes objects no mark or head reaches. Both run at once, so:

- a batch holds every key it relies on until it ends (:meth:`GcHolds.hold`, ``release``);
- while a sweep runs (:meth:`GcHolds.sweeping`), every key any batch holds is also
  remembered as *touched* and spared to the sweep's end, even once the batch has committed
  and let go: the sweep's live set was computed before that commit named the key;
- touched keys are kept compact (:class:`_Touched`): while the mark phase walks, an 8-byte
  digest per hold appended to one buffer (a GC beside back-to-back marks saw 367,707 holds
  in one sweep, and the key strings kept alive for it held 30 MB of the daemon's small-object
  arenas after it ended); once the sweep knows its candidates (:meth:`GcHolds.narrow`), only
  the touched keys among them are kept. A digest that collides spares one object more, never
  one less;
- "is it present? then hold it" (batch) and "is it held? else delete it" (sweep) are each one
  step under :attr:`GcHolds.lock`, so neither can slip between the other's check and act.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterable, Iterator
from contextlib import contextmanager

from snapd.store.objects import xxh3_64_digest


class _Touched:
    """The keys batches held during one sweep: digests in a buffer until :meth:`narrow`, then
    only the digests of the sweep's candidates."""

    def __init__(self) -> None:
        self._walk: bytearray | None = bytearray()  # 8-byte digests, before the candidates are known
        self._candidates: set[bytes] = set()
        self._kept: set[bytes] = set()  # touched candidates

    def add(self, key: str) -> None:
        d = xxh3_64_digest(key)
        if self._walk is not None:
            self._walk += d
        elif d in self._candidates:
            self._kept.add(d)

    def narrow(self, candidates: Iterable[str]) -> None:
        if self._walk is None:
            raise RuntimeError("a sweep's candidates are known once")
        self._candidates = {xxh3_64_digest(k) for k in candidates}
        walk, self._walk = memoryview(self._walk), None
        # One digest at a time, kept only if a candidate: a set of every touched digest first
        # was a transient of ~30 MB at 367,707 holds (VmHWM 137 -> 185 MB at a GC's end).
        wanted = self._candidates
        self._kept = {d for i in range(0, len(walk), 8) if (d := walk[i : i + 8].tobytes()) in wanted}

    def __contains__(self, key: str) -> bool:
        d = xxh3_64_digest(key)
        if self._walk is None:
            return d in self._kept
        walk = memoryview(self._walk)
        return any(walk[i : i + 8] == d for i in range(0, len(walk), 8))


class GcHolds:
    """Counts of keys held by batches, and the keys touched during a running sweep."""

    def __init__(self) -> None:
        self.lock = threading.Lock()  # object lookups and holds vs. GC deletions
        self._held: Counter[str] = Counter()
        self._touched: _Touched | None = None

    def hold(self, key: str, *, again: bool = False) -> None:
        """One more holder of ``key`` (``again``: the caller already holds it; a running sweep
        still learns it is in use). The caller holds :attr:`lock`."""
        if not again:
            self._held[key] += 1
        if self._touched is not None:
            self._touched.add(key)

    def release(self, keys: Iterable[str]) -> None:
        """One holder fewer for each of ``keys``."""
        with self.lock:
            self._held.subtract(keys)
            # Only positive counts kept, in a new Counter: a dict never shrinks as keys go,
            # and a baseline held 10^4 keys at once (1 MB at django-100k).
            self._held = +self._held

    def spared(self, key: str) -> bool:
        """A sweep must not delete ``key`` (the caller holds :attr:`lock`)."""
        return bool(self._held.get(key)) or (self._touched is not None and key in self._touched)

    def narrow(self, candidates: Iterable[str]) -> None:
        """The running sweep deletes at most ``candidates``: from now on the touched keys kept
        are those among them."""
        with self.lock:
            if self._touched is not None:
                self._touched.narrow(candidates)

    @contextmanager
    def sweeping(self) -> Iterator[None]:
        """While the block runs, every key a batch holds is spared until it ends."""
        with self.lock:
            if self._touched is not None:  # the second would clear the first's touched keys
                raise RuntimeError("a sweep is running already: GC runs one at a time")
            self._touched = _Touched()
        try:
            yield
        finally:
            with self.lock:
                self._touched = None
