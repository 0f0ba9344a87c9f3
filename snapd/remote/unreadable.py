"""Marks a push leaves behind because the local store cannot read what they need (bit rot, a
lost object file): docs/remote.md, "Push".

A damaged object must not stop the marks that do not need it: a push reads the objects it
sends through :func:`read`, which keeps the ones that fail instead of raising, and sends the
rest. Which marks need a failed object is then found in their trees
(:func:`snapd.store.damage.finder`), not guessed from the walk: a mark walked against another
of the same push does not list the objects they share, and needs them all the same. Those
marks get no record (a record says every object of the tree is in the repository); each is
reported as a :class:`Skipped`, naming the paths that need the damaged objects. Everything
here but :func:`read`'s first attempt runs on the error path only.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from typing import NamedTuple

from snapd.display import shown
from snapd.errors import CorruptObject, MissingObject
from snapd.paths import encode_path
from snapd.store import damage
from snapd.store.records import Mark
from snapd.store.store import Store

ReadError = CorruptObject | MissingObject
EXAMPLES = 5  # paths a reason names


class Skipped(NamedTuple):
    """A mark not pushed: ``reason`` names the paths (``paths``, wire form, all of them) whose
    objects the local store cannot read; ``problem``: ``corrupt`` or ``missing``."""

    mark: str
    label: str
    workspace: bytes
    reason: str
    problem: str
    paths: tuple[str | dict[str, str], ...]


def read(store: Store, keys: Sequence[str], bad: dict[str, ReadError]) -> dict[str, bytes]:
    """The contents of ``keys``; those that cannot be read are left out and put in ``bad``
    (key -> the read's error) instead of raising."""
    try:
        return dict(store.get_many(keys))
    except (CorruptObject, MissingObject):
        pass  # which ones: read them one at a time
    out: dict[str, bytes] = {}
    for key in keys:
        try:
            out[key] = store.get(key)
        except (CorruptObject, MissingObject) as exc:
            bad[key] = exc
    return out


def failed_key(exc: ReadError) -> str:
    """The object whose read failed (not the damaged link of its delta chain)."""
    return str(exc.details.get("object") or exc.details.get("key") or "?")


def skipped(
    store: Store,
    marks: Iterable[Mark],
    bad: Mapping[str, ReadError],
    roots: Mapping[str, bytes],
    walk_failed: Collection[str] = (),
) -> list[Skipped]:
    """The marks of ``marks`` whose tree (or recorded rule inputs) needs a ``bad`` object,
    and those of ``walk_failed`` (ids: their tree could not be walked), each with the paths."""
    if not bad and not walk_failed:
        return []
    under = damage.finder(store, set(bad))
    out = []
    for mark in marks:
        found = list(under(mark.tree))  # a copy: the finder memoizes its lists
        recorded = ((mark.rules, "rules"), (mark.ignored, "ignored"))
        found += [(b"", k, kind) for k, kind in recorded if k is not None and k in bad]
        if not found and mark.id not in walk_failed:
            continue
        lines = [f"{damage.where(p, kind)}: {_why(bad, key, kind)}" for p, key, kind in found[:EXAMPLES]]
        more = f" and {len(found) - EXAMPLES} more" if len(found) > EXAMPLES else ""
        named = "; ".join(lines) + more if lines else "its tree could not be read"
        problems = {"missing" if isinstance(bad.get(k), MissingObject) else "corrupt" for _, k, _ in found}
        reason = (
            f"the local store cannot read what it needs: {named}. It was not pushed (`snapctl verify` "
            "lists every path and mark the damage affects)"
        )
        problem = "corrupt" if "corrupt" in problems or not problems else "missing"
        paths = tuple(encode_path(path) for path, _, _ in found)
        out.append(Skipped(mark.id, mark.label, roots[mark.id], reason, problem, paths))
    return out


def _why(bad: Mapping[str, ReadError], key: str, kind: str) -> str:
    exc = bad.get(key)
    if exc is None:  # a node under it failed when the finder read it
        return f"its directory's tree node {key} cannot be read"
    what = "its tree node" if kind == "dir" else "its stored content"
    return damage.Unreadable.of(exc)._replace(what=what).reason


def describe(skips: Sequence[Skipped]) -> str:
    """One line for a push's log and ``status``'s last error."""
    first = skips[0]
    more = f" (and {len(skips) - 1} more marks)" if len(skips) > 1 else ""
    where = f"mark {first.mark} ({shown(first.label)}) of {shown(first.workspace)}"
    return f"{where} was not pushed{more}: {first.reason}"
