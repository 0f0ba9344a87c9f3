"""GC's mark phase: what every kept thing references, and so what nothing does.

Live: every object reachable from a remaining mark's tree or from a workspace's head (its
state captured since the last mark), every mark's rule inputs and ignored names, every object
named by a version or a state inside the age window, and what unfinished rollbacks still have
to write (``extra``). Whatever is live keeps its delta bases (and theirs) live
(:func:`with_bases`): no object is ever deleted while a kept object is stored against it.

The live set is every key the store keeps, 10^5-10^6 of them, held in sets and a dict of
every delta's base for the length of one walk. Made in the daemon, those transient objects
shared the small-object allocator's arenas with the marks made meanwhile, and the arenas
stayed when the keys went (issue 33, docs/benchmarks.md: 100 → 436 MB over a day). So the
daemon runs this phase in a process of its own (:func:`serve`, started by
:mod:`snapd.daemon.gcchild`), which reads the store through a
:class:`~snapd.store.reading.StoreReader` and hands back only the results: the objects to
delete, or a byte count. Its memory ends with it.

The repack's plan (:func:`snapd.store.repack.plan`) is made there too: it reads every
object's row and every version's name to pair contents, a transient as large as the live set
(the daemon's Python peak in a GC stayed at 139.5 MB with the live set moved out, 2,500 marks
into the soak), and it sends back only the conversions, which the daemon re-checks as it
makes them.

The steps GC asks of it (:class:`MarkPhase`) only read; the sweep's deletions and the
repack's conversions, and the holds that spare what batches in flight rely on, stay with the
caller (:mod:`snapd.store.gc`).
:class:`Here` runs them on the caller's thread (tests, and the fallback when the process
cannot run).
"""

from __future__ import annotations

import os
import pickle
import sys
import traceback
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Protocol

from snapd.config import Retention
from snapd.errors import SnapdError
from snapd.store import nodes, objects
from snapd.store.reading import StoreReader
from snapd.store.repack import Conversion, plan
from snapd.store.retention import newest_ids, protected

Keys = set[bytes | str]
"""Object keys as the catalog stores them (:func:`objects.db_key`): GC compares every object
row's key with the live set, and converting 10^5-10^6 keys to text and back cost more than
the comparisons."""


@dataclass
class Unreferenced:
    """The objects no kept thing references: past the grace period (to delete), as (key as
    the catalog stores it, stored bytes, external); and those still inside it, counted."""

    dead: list[tuple[bytes | str, int, int]] = field(default_factory=list)
    waiting: int = 0
    waiting_bytes: int = 0
    waiting_until: int | None = None  # when the last of the waiting passes the grace (ns)


def with_bases(store: StoreReader, keys: Keys) -> Keys:
    """``keys`` and, transitively, the bases of those stored as deltas (in place; returned)."""
    rows = store.catalog.read().execute("SELECT key, base FROM objects WHERE base IS NOT NULL")
    bases: dict[bytes | str, bytes | str] = dict(rows)
    todo = [k for k in keys if k in bases]
    while todo:
        base = bases[todo.pop()]
        if base not in keys:
            keys.add(base)
            if base in bases:
                todo.append(base)
    return keys


def live_keys(
    store: StoreReader,
    policy: Retention,
    now: int,
    without: frozenset[str] = frozenset(),
    extra: Iterable[bytes | str] = (),
) -> Keys:
    """Every key something kept references; ``without``: as if those marks were evicted;
    ``extra``: keys kept besides (what unfinished rollbacks still have to write)."""
    db = store.catalog.read()
    roots = {t for i, t in db.execute("SELECT id, tree FROM marks") if i not in without}
    roots.update(h for (h,) in db.execute("SELECT head FROM workspaces"))
    return held_by(store, roots, policy, now, extra)


def held_by(
    store: StoreReader,
    roots: Iterable[str | None],
    policy: Retention,
    now: int,
    extra: Iterable[bytes | str] = (),
) -> Keys:
    """What the trees ``roots`` reach, every mark's rule inputs and ignored names (and each
    workspace's current ones), every object a version or a state inside the age window names
    (a state's tree, rule inputs and ignored names) and ``extra``, with the bases of all of
    those."""
    db = store.catalog.read()
    held: Keys = set(extra)
    cutoff = now - policy.max_age_ns
    # The states inside the age window, as its versions: a time there is rebuilt from them.
    states = db.execute("SELECT tree, rules, ignored FROM states WHERE time >= ?", (cutoff,)).fetchall()
    trees = {r for r in roots if r} | {t for t, _, _ in states}
    nodes.reachable(store.get_many, sorted(trees), held)
    rules = db.execute("SELECT DISTINCT rules FROM marks WHERE rules IS NOT NULL")
    held.update(objects.db_key(key) for (key,) in rules)
    names = db.execute(  # the ignored names of every mark, and each workspace's current ones
        "SELECT ignored FROM marks WHERE ignored IS NOT NULL UNION SELECT ignored FROM workspaces"
        " WHERE ignored IS NOT NULL"
    )
    held.update(objects.db_key(key) for (key,) in names)
    held.update(objects.db_key(k) for _, r, n in states for k in (r, n) if k)
    versions = db.execute(
        "SELECT DISTINCT object FROM versions WHERE time >= ? AND object IS NOT NULL", (cutoff,)
    )
    held.update(key for (key,) in versions)
    return with_bases(store, held)


def unreferenced(store: StoreReader, policy: Retention, now: int, extra: Keys) -> Unreferenced:
    """Every object nothing kept references, sorted by the grace period (``policy.grace_s``)."""
    live = live_keys(store, policy, now, extra=extra)
    grace = int(policy.grace_s * 1e9)
    found = Unreferenced()
    rows = store.catalog.read().execute("SELECT key, stored, external, created FROM objects")
    for k, s, e, created in rows:
        if k in live:
            continue
        if created < now - grace:
            found.dead.append((k, s, e))
        else:  # unreferenced, but within the grace: said, so a user knows when it goes
            found.waiting += 1
            found.waiting_bytes += s
            found.waiting_until = max(found.waiting_until or created + grace, created + grace)
    return found


def kept_bytes(store: StoreReader, policy: Retention, now: int, extra: Keys) -> int:
    """Bytes no budget eviction can free: what protected marks, workspace heads and versions
    inside the age window reference. If that alone exceeds the budget, evicting the other
    marks would empty the history and still not meet it."""
    marks = store.marks()
    ids = newest_ids(marks)
    db = store.catalog.read()
    roots = [m.tree for m in marks if protected(m, ids, policy, now)]
    roots += [h for (h,) in db.execute("SELECT head FROM workspaces WHERE head IS NOT NULL")]
    keep = held_by(store, roots, policy, now, extra)
    rows = db.execute("SELECT key, stored FROM objects")
    return sum(stored for key, stored in rows if key in keep)


def fewest_to_fit(
    store: StoreReader, policy: Retention, now: int, young: int, cands: list[str], extra: Keys
) -> int:
    """How many of the marks ``cands`` (ids, oldest first) must go for the settled objects
    still referenced to fit the budget: the fewest, so no mark is evicted that the budget did
    not need gone.

    What evicting the first k frees is computed, not tried: the settled bytes the remaining
    marks, heads and recent versions still reference. That only shrinks as k grows, so a
    binary search finds the least k (one reachability walk per step, no sweep). With every
    candidate gone only what must be kept remains, which the caller checked fits."""
    db = store.catalog.read()
    rows = db.execute("SELECT key, stored FROM objects WHERE created < ?", (young,)).fetchall()

    def fits(k: int) -> bool:
        live = live_keys(store, policy, now, frozenset(cands[:k]), extra)
        return int(sum(stored for key, stored in rows if key in live)) <= policy.budget_bytes

    lo, hi = 1, len(cands)
    while lo < hi:
        mid = (lo + hi) // 2
        if fits(mid):
            hi = mid
        else:
            lo = mid + 1
    return lo


class MarkPhase(Protocol):
    """Where GC's mark phase runs: each step reads the store as committed when it starts."""

    def unreferenced(self, policy: Retention, now: int, extra: Keys) -> Unreferenced: ...

    def kept_bytes(self, policy: Retention, now: int, extra: Keys) -> int: ...

    def fewest_to_fit(
        self, policy: Retention, now: int, young: int, cands: list[str], extra: Keys
    ) -> int: ...

    def repack_plan(self, since: int) -> list[Conversion]: ...


class Here:
    """The mark phase on the caller's own thread, over ``store``."""

    def __init__(self, store: StoreReader) -> None:
        self.store = store

    def unreferenced(self, policy: Retention, now: int, extra: Keys) -> Unreferenced:
        return unreferenced(self.store, policy, now, extra)

    def kept_bytes(self, policy: Retention, now: int, extra: Keys) -> int:
        return kept_bytes(self.store, policy, now, extra)

    def fewest_to_fit(self, policy: Retention, now: int, young: int, cands: list[str], extra: Keys) -> int:
        return fewest_to_fit(self.store, policy, now, young, cands, extra)

    def repack_plan(self, since: int) -> list[Conversion]:
        return plan(self.store, since)


STEPS = frozenset({"unreferenced", "kept_bytes", "fewest_to_fit", "repack_plan"})


def serve(directory: Path, requests: IO[bytes], replies: IO[bytes]) -> None:
    """Answer GC's steps over pipes: each request a pickled ``(step, args)``, each reply a
    pickled ``("ok", result)`` or ``("error", code, message)`` (a :class:`SnapdError`'s wire
    code; ``internal`` for anything else). Ends at the end of the requests (the daemon closed
    the pipe, or is gone)."""
    phase = Here(StoreReader.reading(directory))
    while True:
        try:
            step, args = pickle.load(requests)
        except EOFError:
            return
        reply: tuple[Any, ...]
        try:
            if step not in STEPS:
                raise SnapdError(f"GC's mark phase has no step {step!r}")
            reply = ("ok", getattr(phase, step)(*args))
        except SnapdError as exc:
            reply = ("error", exc.code, exc.message)
        except Exception:  # a bug: the daemon reports it as one, with this traceback
            reply = ("error", "internal", traceback.format_exc())
        pickle.dump(reply, replies, pickle.HIGHEST_PROTOCOL)
        replies.flush()


def _die_with_the_daemon() -> None:
    """Be killed when the daemon's thread that started this process ends (the daemon killed):
    an orphan would go on walking for minutes with the store's files open, keeping its file
    system busy (an unmount after a crash fails). Linux only; elsewhere EOF ends it later."""
    try:
        import ctypes
        import signal

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        return


def main() -> int:
    """``python -m snapd.store.gcmark STORE_DIR PARENT_PID``: :func:`serve` on stdin and stdout."""
    _die_with_the_daemon()
    if len(sys.argv) > 2 and os.getppid() != int(sys.argv[2]):
        return 1  # the daemon died before the line above took effect
    try:
        serve(Path(sys.argv[1]), sys.stdin.buffer, sys.stdout.buffer)
    except BrokenPipeError:  # the daemon went while this step ran
        return 1
    except SnapdError as exc:  # the store cannot be opened: the daemon reads EOF, runs it itself
        print(f"snapd GC mark phase: {exc.message}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    # Through the module's own name: the results must pickle as snapd.store.gcmark's classes,
    # not __main__'s, for the daemon to read them.
    from snapd.store import gcmark

    sys.exit(gcmark.main())
