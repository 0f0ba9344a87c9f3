"""GC, the sweep: apply the retention policy to the store and reclaim what nothing needs.

The policy (:mod:`snapd.store.retention`) picks the marks; this module evicts them, records
every eviction in the catalog (so ``log`` can say that older marks were pruned), deletes the
versions older than the age window, and sweeps. When what must be kept exceeds the budget,
eviction stops and the report carries a warning.

GC is mark-and-sweep. Live: every object reachable from a remaining mark's tree or from a
workspace's head (its state captured since the last mark), every mark's rule inputs, every object
named by a version inside the age window, every object younger than the grace period, and
every key a batch in flight holds. Deletions run in short transactions so captures are never
blocked for long. Whatever is live keeps its delta bases (and theirs) live: no object is ever
deleted while a kept object is stored against it (:func:`with_bases`).
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass, field

from snapd.config import Retention
from snapd.store import nodes, objects, safeio
from snapd.store.records import Mark
from snapd.store.repack import repack
from snapd.store.retention import budget_candidates, newest_ids, plan_evictions, protected
from snapd.store.store import Store

SWEEP_CHUNK = 500


@dataclass
class GcReport:
    evicted: list[tuple[str, str]] = field(default_factory=list)  # (mark id, reason)
    objects_deleted: int = 0
    bytes_freed: int = 0
    versions_deleted: int = 0
    repacked: int = 0  # objects stored whole converted to deltas (snapd.store.repack)
    repack_saved: int = 0  # payload bytes that saved
    stored_bytes: int = 0
    # Objects nothing needs any more but younger than the grace period, kept by the last
    # sweep: a batch in flight may still rely on them. The last passes the grace at ``waiting_until``.
    waiting: int = 0
    waiting_bytes: int = 0
    waiting_until: int | None = None
    warnings: list[str] = field(default_factory=list)


def evict(store: Store, doomed: list[tuple[Mark, str]], now: int) -> None:
    with store.catalog.write() as c:
        for m, reason in doomed:
            c.execute("DELETE FROM marks WHERE id=?", (m.id,))
            c.execute(
                "INSERT INTO evictions (workspace, mark, label, created, evicted, reason)"
                " VALUES (?,?,?,?,?,?)",
                (m.workspace, m.id, m.label, m.created, now, reason),
            )


Keys = set[bytes | str]
"""Object keys as the catalog stores them (:func:`objects.db_key`): GC compares every object
row's key with the live set, and converting 10^5-10^6 keys to text and back cost more than
the comparisons."""


def with_bases(store: Store, keys: Keys) -> Keys:
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
    store: Store,
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
    return _held_by(store, roots, policy, now, extra)


def _held_by(
    store: Store, roots: Iterable[str | None], policy: Retention, now: int, extra: Iterable[bytes | str] = ()
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


def sweep(
    store: Store, policy: Retention, now: int, report: GcReport, extra: Iterable[bytes | str] = ()
) -> None:
    with store.holds.sweeping():  # from here on, every key a batch holds is spared
        live = live_keys(store, policy, now, extra=extra)
        young = now - int(policy.grace_s * 1e9)
        rows = store.catalog.read().execute("SELECT key, stored, external, created FROM objects")
        dead, report.waiting, report.waiting_bytes, report.waiting_until = [], 0, 0, None
        for k, s, e, created in rows:
            if k in live:
                continue
            if created < young:
                dead.append((k, s, e))
            else:  # unreferenced, but within the grace: said, so a user knows when it goes
                report.waiting += 1
                report.waiting_bytes += s
                ends = created + int(policy.grace_s * 1e9)
                report.waiting_until = max(report.waiting_until or ends, ends)
        for i in range(0, len(dead), SWEEP_CHUNK):
            chunk = dead[i : i + SWEEP_CHUNK]
            files = []
            with store.holds.lock, store.catalog.write() as c:
                for db_key, stored, external in chunk:
                    key = objects.py_key(db_key)
                    if store.holds.spared(key):
                        continue
                    c.execute("DELETE FROM objects WHERE key=?", (db_key,))
                    store.recent.forget(key)  # under the holds lock: see deltas.Recent
                    store.catalog.stored_changed(-stored)
                    report.objects_deleted += 1
                    report.bytes_freed += stored
                    if external:
                        files.append((key, store.object_path(key)))
            # After the commit (a crash before this leaves only orphan files), each under the
            # holds lock and only if no batch holds its key: a batch that found the row gone
            # stores the content again at the same path, holding the key before it writes.
            for key, p in files:
                with store.holds.lock:
                    if not store.holds.spared(key):
                        safeio.unlink(p)
    remove_orphan_files(store, young)


def remove_orphan_files(store: Store, older_than: int) -> int:
    """Object and temp files no catalog row names (a crash before a commit, or after a sweep).

    Only files older than the grace period go: a batch in flight may be between writing a
    file and committing its row. Each file is judged and removed under the holds lock, and
    spared while a batch holds its key: a batch storing that content again holds the key
    before it writes the file, and until its row is committed.
    """
    removed = 0
    db = store.catalog.read()
    top = store.dir / "objects"
    try:
        for shard in sorted(top.glob("*")):
            for p in shard.iterdir():
                with store.holds.lock:
                    if store.holds.spared(p.name) or db.execute(
                        "SELECT 1 FROM objects WHERE key=? AND external=1", (objects.db_key(p.name),)
                    ).fetchone():
                        continue
                    try:
                        if p.stat().st_mtime_ns < older_than and safeio.unlink(p):
                            removed += 1
                    except FileNotFoundError:
                        continue
    except OSError as exc:
        raise safeio.os_error(exc, "list object files in", top) from exc
    return removed


def _kept_bytes(store: Store, policy: Retention, now: int, extra: Keys) -> int:
    """Bytes no budget eviction can free: what protected marks, workspace heads and versions
    inside the age window reference. If that alone exceeds the budget, evicting the other
    marks would empty the history and still not meet it."""
    marks = store.marks()
    ids = newest_ids(marks)
    db = store.catalog.read()
    roots = [m.tree for m in marks if protected(m, ids, policy, now)]
    roots += [h for (h,) in db.execute("SELECT head FROM workspaces WHERE head IS NOT NULL")]
    keep = _held_by(store, roots, policy, now, extra)
    rows = db.execute("SELECT key, stored FROM objects")
    return sum(stored for key, stored in rows if key in keep)


def _fewest_to_fit(
    store: Store, policy: Retention, now: int, young: int, cands: list[Mark], extra: Keys
) -> int:
    """How many of ``cands`` (oldest first) must go for the settled objects still referenced to
    fit the budget: the fewest, so no mark is evicted that the budget did not need gone.

    What evicting the first k frees is computed, not tried: the settled bytes the remaining
    marks, heads and recent versions still reference. That only shrinks as k grows, so a
    binary search finds the least k (one reachability walk per step, no sweep). With every
    candidate gone only what must be kept remains, which the caller checked fits."""
    db = store.catalog.read()
    rows = db.execute("SELECT key, stored FROM objects WHERE created < ?", (young,)).fetchall()

    def fits(k: int) -> bool:
        live = live_keys(store, policy, now, frozenset(m.id for m in cands[:k]), extra)
        return int(sum(stored for key, stored in rows if key in live)) <= policy.budget_bytes

    lo, hi = 1, len(cands)
    while lo < hi:
        mid = (lo + hi) // 2
        if fits(mid):
            hi = mid
        else:
            lo = mid + 1
    return lo


def _settled_bytes(store: Store, young: int) -> int:
    """Bytes of objects past the grace period: only those can be reclaimed by evicting marks."""
    row = (
        store.catalog.read()
        .execute("SELECT COALESCE(SUM(stored), 0) FROM objects WHERE created < ?", (young,))
        .fetchone()
    )
    return int(row[0])


def run(
    store: Store, policy: Retention, now: int | None = None, unfinished: Iterable[str] = ()
) -> GcReport:
    """Apply the retention policy, then reclaim unreachable objects. ``unfinished``: what
    rollbacks stopped part-way still have to write (their journals; the store cannot read
    them), kept whatever mark was evicted."""
    now = time.time_ns() if now is None else now
    extra: Keys = {objects.db_key(k) for k in unfinished}
    report = GcReport()
    doomed = plan_evictions(store.marks(), policy, now)
    if doomed:
        evict(store, doomed, now)
        report.evicted += [(m.id, r) for m, r in doomed]
    cutoff = now - policy.max_age_ns
    with store.catalog.write() as c:
        # Where history now starts, for `history` and time references: every workspace that
        # existed before the cutoff has lost whatever versions it had from before it.
        c.execute(
            "UPDATE workspaces SET pruned_before=MAX(COALESCE(pruned_before, 0), ?) WHERE created < ?",
            (cutoff, cutoff),
        )
        report.versions_deleted = c.execute("DELETE FROM versions WHERE time < ?", (cutoff,)).rowcount
        c.execute("DELETE FROM states WHERE time < ?", (cutoff,))
    sweep(store, policy, now, report, extra)
    young = now - int(policy.grace_s * 1e9)
    settled = _settled_bytes(store, young)
    if settled > policy.budget_bytes:
        cands = budget_candidates(store.marks(), policy, now)
        if cands and _kept_bytes(store, policy, now, extra) <= policy.budget_bytes:
            batch = [(m, "budget") for m in cands[: _fewest_to_fit(store, policy, now, young, cands, extra)]]
            evict(store, batch, now)
            report.evicted += [(m.id, r) for m, r in batch]
            sweep(store, policy, now, report, extra)
            settled = _settled_bytes(store, young)
    if settled > policy.budget_bytes:
        # Nothing left to evict, or what is left is held by marks and versions that must be
        # kept: stop rather than empty the history for no gain.
        report.warnings.append(
            f"the store holds {settled} bytes, over its budget of {policy.budget_bytes}, and what "
            "remains is held by marks and versions that must be kept (newest, pinned, recent "
            "pre-rollback, versions inside the age window): raise the budget or unpin marks"
        )
    report.repacked, report.repack_saved = repack(store)
    with store.catalog.write() as c:
        # Python's sqlite3 steps a statement that returns no columns once, and each step of
        # incremental_vacuum frees one page: one call per free page gives them all back.
        for _ in range(c.execute("PRAGMA freelist_count").fetchone()[0]):
            c.execute("PRAGMA incremental_vacuum")
    report.stored_bytes = store.stored_bytes()
    return report
