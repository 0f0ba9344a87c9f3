"""Tree diffing: what differs between two trees, path by path, parents before children.

Pure, like :mod:`snapd.store.trees`: nodes are read through the ``load`` callable passed in.
A subtree whose key is equal on both sides is skipped unread (Merkle trees: equal key, equal
contents), so a diff reads only the directories that differ. With ``where`` (:func:`only`) it
also compares only the names on the paths known to have changed, not every name of each
directory on them (a mark's summary, where a directory may hold 20,000 names). That shortcut
is sound only for trees that differ nowhere else, and there it must find exactly what a whole
diff finds, in the same order.

A directory's own key is no change (its contents are diffed instead); a directory added or
removed is reported with every path under it, so a caller gets each changed path without
walking a tree itself.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Literal

from snapd.store.nodes import PackedNode
from snapd.store.trees import Entry, Load, Node, split_path

Status = Literal["added", "removed", "modified", "mode", "type"]


@dataclass(frozen=True, slots=True)
class Difference:
    path: bytes
    status: Status
    old: Entry | None
    new: Entry | None


Only = dict[bytes, "Only | None"]
"""Where a diff looks (:func:`only`): the names to compare in a directory, each with where to
look below it; None: everything below."""


def only(paths: Iterable[bytes]) -> Only:
    """The :data:`Only` of ``paths``: a diff that looks there sees every difference between
    two trees that differ at most at those paths (and, implied, at their parents: a change
    may create or drop the directories above it)."""
    top: Only = {}
    for path in paths:
        level = top
        parts = split_path(path)
        for part in parts[:-1]:
            below = level.setdefault(part, {})
            if below is None:
                break  # everything under an ancestor is looked at already
            level = below
        else:
            level[parts[-1]] = None
    return top


def diff(
    load: Load, old: str | None, new: str | None, prefix: bytes = b"", where: Only | None = None
) -> Iterator[Difference]:
    """Differences from ``old`` to ``new``, parents before children.

    A directory added or removed yields itself and every path under it; a path that changed
    kind yields ``type`` and, for a directory side, its contents as added or removed.
    ``where``: look only there (:func:`only`), for trees known to differ nowhere else: the same
    differences, for the cost of the paths instead of every name of each directory on them
    (a mark's summary, where a directory may hold 20,000 names).
    """
    if old == new:
        return
    a = load(old) if old is not None else {}
    b = load(new) if new is not None else {}
    for name in _candidates(a, b, where):
        ea, eb = a.get(name), b.get(name)
        path = prefix + name
        if ea == eb:
            continue
        if ea is None:
            yield Difference(path, "added", None, eb)
        elif eb is None:
            yield Difference(path, "removed", ea, None)
        elif ea.kind != eb.kind:
            yield Difference(path, "type", ea, eb)
        elif ea.kind != "dir" and (ea.key != eb.key or ea.size != eb.size):
            yield Difference(path, "modified", ea, eb)
        elif ea.mode != eb.mode:
            yield Difference(path, "mode", ea, eb)
        sub_old = ea.key if ea is not None and ea.kind == "dir" else None
        sub_new = eb.key if eb is not None and eb.kind == "dir" else None
        if sub_old is not None or sub_new is not None:
            below = where.get(name) if where is not None else None
            yield from diff(load, sub_old, sub_new, path + b"/", below)


def _candidates(a: Node, b: Node, where: Only | None) -> list[bytes]:
    """The names that may differ between two nodes, in byte order: for two packed nodes (the
    store's), those whose records differ, no entry decoded; else those whose entries are not
    the same object (an edited node shares its unchanged entries with its base)."""
    if isinstance(a, PackedNode) and isinstance(b, PackedNode):
        if where is None:
            return a.changed_names(b)
        return sorted(n for n in where if a.record(n) != b.record(n))
    names = a.keys() | b.keys() if where is None else where.keys()
    return sorted(n for n in names if a.get(n) is not b.get(n))
