"""A least-recently-used map bounded both by its count and by the total size of its values.

The store keeps tree nodes, and their encodings, in two of these: a node's size is its entry
count, so a few versions of a directory of 10^4 entries cannot fill the daemon's memory where
thousands of small nodes would fit. Not thread-safe: the owner holds its own lock.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from typing import Generic, TypeVar

V = TypeVar("V")


class BoundedLru(Generic[V]):
    def __init__(self, count: int, total: int, size: Callable[[V], int]) -> None:
        self._items: OrderedDict[str, V] = OrderedDict()
        self._count, self._total, self._size = count, total, size
        self._held = 0  # the sizes of the values held, summed

    def __len__(self) -> int:
        return len(self._items)

    def get(self, key: str) -> V | None:
        """The value of ``key``, without making it recent."""
        return self._items.get(key)

    def touch(self, key: str) -> V | None:
        """The value of ``key``, made the most recent."""
        value = self._items.get(key)
        if value is not None:
            self._items.move_to_end(key)
        return value

    def put(self, key: str, value: V) -> None:
        """Hold ``value`` as the most recent; drop the oldest past either bound, but never the
        newest, however large."""
        old = self._items.pop(key, None)
        self._items[key] = value
        self._held += self._size(value) - (0 if old is None else self._size(old))
        while len(self._items) > 1 and (len(self._items) > self._count or self._held > self._total):
            self._held -= self._size(self._items.popitem(last=False)[1])
