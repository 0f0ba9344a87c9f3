"""What changed between two rollback plans, one line each: a test helper.

The plan tests use it to say exactly how a re-plan differs (an op's state changed, a path
is kept now). It used to be ``Plan.difference`` in production, but nothing there called it:
the client that shows a stale plan cannot import the rollback package (an import contract)
and compares the two plans' JSON itself, and the daemon holds only the confirmed token, not
the plan, so it has nothing to compare with.
"""

from __future__ import annotations

from collections.abc import Iterable

from snapd.rollback.ops import Op, Plan, parts, show


def _by_path(ops: Iterable[Op]) -> dict[bytes, tuple[Op, ...]]:
    out: dict[bytes, tuple[Op, ...]] = {}
    for op in ops:
        out[op.path] = out.get(op.path, ()) + (op,)
    return out


def difference(old: Plan, new: Plan) -> list[str]:
    """What changed from ``old`` to ``new``, one line each (empty: identical)."""
    lines: list[str] = []
    mine, theirs = _by_path(old.ops), _by_path(new.ops)
    for path in sorted(mine.keys() | theirs.keys(), key=parts):
        a, b = mine.get(path, ()), theirs.get(path, ())
        if a == b:
            continue
        if not a:
            lines.extend(f"+ {op.describe()}" for op in b)
        elif not b:
            lines.extend(f"- no longer: {op.describe()}" for op in a)
        else:
            was = "; ".join(op.describe() for op in a)
            now = "; ".join(op.describe() for op in b)
            why = f" (was: {was})" if was != now else " (its state changed)"
            lines.append(f"~ {show(path)}: {now}{why}")
    old_kept, new_kept = dict(old.kept), dict(new.kept)
    for path in sorted(old_kept.keys() | new_kept.keys(), key=parts):
        if old_kept.get(path) == new_kept.get(path):
            continue
        if path in new_kept:
            lines.append(f"+ keep {show(path)}: {new_kept[path]}")
        else:
            lines.append(f"- no longer kept: {show(path)}")
    return lines
