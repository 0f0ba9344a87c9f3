"""GC holds: the keys a sweep must spare, shared by write batches and the sweep.

A batch relies on objects it has found present (deduplication) or is writing; the sweep
deletes objects no mark or head reaches. Both run at once, so:

- a batch holds every key it relies on until it ends (:meth:`GcHolds.hold`, ``release``);
- while a sweep runs (:meth:`GcHolds.sweeping`), every key any batch holds is also
  remembered as *touched* and spared to the sweep's end, even once the batch has committed
  and let go: the sweep's live set was computed before that commit named the key;
- "is it present? then hold it" (batch) and "is it held? else delete it" (sweep) are each one
  step under :attr:`GcHolds.lock`, so neither can slip between the other's check and act.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterable, Iterator
from contextlib import contextmanager


class GcHolds:
    """Counts of keys held by batches, and the keys touched during a running sweep."""

    def __init__(self) -> None:
        self.lock = threading.Lock()  # object lookups and holds vs. GC deletions
        self._held: Counter[str] = Counter()
        self._touched: set[str] | None = None

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

    @contextmanager
    def sweeping(self) -> Iterator[None]:
        """While the block runs, every key a batch holds is spared until it ends."""
        with self.lock:
            self._touched = set()
        try:
            yield
        finally:
            with self.lock:
                self._touched = None
