"""What a rollback plan looks at: the differences between the captured tree and the mark's
(all of them, or those at and below the ``only`` paths plus the parents they need), and where
the paths the current tree could not capture lie.

Pure: trees are read through ``load``; nothing on disk is touched.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from snapd.errors import UsageError
from snapd.paths import ancestors, at_or_below, strictly_below
from snapd.rollback.ops import Op, parts, show
from snapd.store import treediff, trees
from snapd.store.treediff import Difference
from snapd.store.trees import Entry


def _status(old: Entry | None, new: Entry | None) -> treediff.Status | None:
    """treediff.diff's judgement for one path (a directory's own key is not a change)."""
    if old == new:
        return None
    if old is None:
        return "added"
    if new is None:
        return "removed"
    if old.kind != new.kind:
        return "type"
    if old.kind != "dir" and (old.key != new.key or old.size != new.size):
        return "modified"
    return "mode" if old.mode != new.mode else None


def differences(
    load: trees.Load, current: str | None, target: str, only: Sequence[bytes]
) -> list[Difference]:
    """What differs from ``current`` to ``target``: everywhere, or within ``only`` (tops, see
    :func:`normalize_only`) plus the parent directories those need, as they are at M."""
    if not only and current is None:  # from nothing (a restore): every path is added, in walk order
        return [Difference(path, "added", None, entry) for path, entry in trees.walk(load, target)]
    if not only:
        return list(treediff.diff(load, current, target))

    def at(root: str | None, path: bytes) -> Entry | None:
        return trees.lookup(load, root, path) if root is not None else None

    found: dict[bytes, Difference] = {}
    for top in only:
        cur, tgt = at(current, top), at(target, top)
        if tgt is not None:  # its parents must be directories, as they are at M
            for anc in ancestors(top):
                ca, ta = at(current, anc), at(target, anc)
                if ca is None or ca.kind != "dir":
                    found.setdefault(anc, Difference(anc, "added" if ca is None else "type", ca, ta))
        status = _status(cur, tgt)
        if status is not None:
            found[top] = Difference(top, status, cur, tgt)
        sub_old = cur.key if cur is not None and cur.kind == "dir" else None
        sub_new = tgt.key if tgt is not None and tgt.kind == "dir" else None
        if sub_old is not None or sub_new is not None:
            for d in treediff.diff(load, sub_old, sub_new, top + b"/"):
                found[d.path] = d
    return sorted(found.values(), key=lambda d: parts(d.path))


def listed_dir(e: Entry | None) -> bool:
    return e is not None and e.kind == "dir" and not trees.unlisted(e)


def uncaptured_now(found: Iterable[Difference]) -> dict[bytes, str]:
    """The paths of the current tree whose content it could not hold, with why."""
    return {d.path: trees.uncaptured_reason(d.old) for d in found if trees.is_uncaptured(d.old)}


def normalize_only(only: Sequence[bytes]) -> list[bytes]:
    """The ``only`` paths, checked and sorted, without those below another (the tops)."""
    tops: list[bytes] = []
    for p in sorted(set(only), key=parts):
        try:
            trees.split_path(p)
        except ValueError:
            raise UsageError(f"{show(p)!r} is not a path inside the workspace") from None
        if not any(at_or_below(p, q) for q in tops):
            tops.append(p)
    return tops


class Uncaptured:
    """Where the paths the pre-rollback mark could not hold lie, for quick questions."""

    def __init__(self, reasons: Mapping[bytes, str]) -> None:
        self.reasons = dict(reasons)
        self.below: dict[bytes, list[bytes]] = {}  # directory -> uncaptured paths under it
        for u in sorted(self.reasons, key=parts):
            for anc in ancestors(u):
                self.below.setdefault(anc, []).append(u)

    def at_or_above(self, path: bytes) -> bytes | None:
        for p in [*ancestors(path), path]:
            if p in self.reasons:
                return p
        return None

    def blocker(self, op: Op) -> bytes | None:
        """The uncaptured path ``op`` would overwrite or delete, if any (chmod never does)."""
        if op.kind == "chmod" or not self.reasons:
            return None
        hit = self.at_or_above(op.path)
        if hit is None and op.kind in ("remove", "rmdir") and op.path in self.below:
            hit = self.below[op.path][0]
        return hit

    def why(self, path: bytes, u: bytes) -> str:
        if u == path:
            return self.reasons[u]
        if strictly_below(u, path):
            return f"holds {show(u)}, not captured: {self.reasons[u]}"
        return f"inside {show(u)}, not captured: {self.reasons[u]}"
