"""The ignored names of a workspace at a mark: which top-most ignored entries were present.

A mark captures no ignored path, so its tree alone cannot tell "ignored and there" from
"ignored and absent". From store format 8 on, each mark also records the *names* of the
top-most ignored entries present when it was taken (an entry the rules ignore whose parent
directory they do not: ``build``, ``src/__pycache__``, ``.env``; never their contents, never
what lies below them, never VCS directories or snapd's own files). A rollback deletes a path
its target's rules ignore that did not exist then, as ``git checkout`` would, and leaves one
that did (docs/rollback.md).

The set is one content-addressed object, like the rule inputs: marks with the same set share
it, and a mark whose set did not change since the last one stores nothing new. The
workspace's current set is recorded beside its head tree the same way, so a restart starts
from it (``workspaces.ignored``).

:func:`at_mark` is the one lookup: the names of a mark, or None for a mark written before
they were recorded (format 7 and older: the rollback keeps its old rule, docs/rollback.md).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Protocol

from snapd.paths import ancestors
from snapd.store.records import Mark

_MAGIC = b"snapd-ignored-1\n"


@dataclass(frozen=True)
class IgnoredNames:
    """The top-most ignored entries present at one moment, as relative paths."""

    names: frozenset[bytes] = frozenset()

    def encode(self) -> bytes:
        """Canonical bytes: equal sets give equal bytes, so one object per distinct set."""
        return _MAGIC + b"\0".join(sorted(self.names))

    @classmethod
    def decode(cls, data: bytes) -> IgnoredNames:
        if not data.startswith(_MAGIC):
            raise ValueError("not an ignored-names record")
        return cls(frozenset(n for n in data[len(_MAGIC) :].split(b"\0") if n))

    @classmethod
    def of(cls, names: Iterable[bytes]) -> IgnoredNames:
        return cls(frozenset(names))

    def covers(self, path: bytes) -> bool:
        """Whether ``path`` was there as an ignored entry, or lay below one (what an ignored
        directory held is unknown: anything may have been there)."""
        names = self.names
        return path in names or any(a in names for a in ancestors(path))


class Objects(Protocol):
    """What a lookup needs of the store (:class:`snapd.store.store.Store`): verified reads.
    Rollback planning stays free of the catalog."""

    def get(self, key: str) -> bytes: ...


def at_mark(store: Objects, mark: Mark) -> IgnoredNames | None:
    """The ignored names ``mark`` recorded; None when it recorded none (an older store's)."""
    return load(store, mark.ignored)


def load(store: Objects, key: str | None) -> IgnoredNames | None:
    """The ignored names stored under ``key`` (None: not recorded)."""
    return None if key is None else IgnoredNames.decode(store.get(key))
