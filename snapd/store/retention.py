"""Retention: which marks to evict, and the mark-and-sweep GC that reclaims their objects.

Policy (docs/operations.md, retention): marks older than the age window, or beyond the per-workspace
count, are evicted oldest first; when the store exceeds its disk budget, further marks are
evicted oldest first across workspaces until it fits. Never evicted: pinned marks, a
workspace's newest mark, a ``pre-rollback`` mark younger than the age window. When what must
be kept exceeds the budget, eviction stops and the report carries a warning. Every eviction
is recorded in the catalog so ``log`` can say that older marks were pruned.

GC is mark-and-sweep. Live: every object reachable from a remaining mark's tree or from a
workspace's head (its state captured since the last mark), every mark's rule inputs, every object
named by a version inside the age window, every object younger than the grace period, and
every key a batch in flight holds. Deletions run in short transactions so captures are never
blocked for long.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass, field

from snapd.store import safeio, trees
from snapd.store.records import Mark
from snapd.store.store import Store

DAY_NS = 86_400 * 10**9
SWEEP_CHUNK = 500


@dataclass(frozen=True)
class Policy:
    max_age_days: float = 14.0
    max_marks: int = 2000
    budget_bytes: int = 5 << 30
    grace_s: float = 900.0

    @property
    def max_age_ns(self) -> int:
        return int(self.max_age_days * DAY_NS)


@dataclass
class GcReport:
    evicted: list[tuple[str, str]] = field(default_factory=list)  # (mark id, reason)
    objects_deleted: int = 0
    bytes_freed: int = 0
    versions_deleted: int = 0
    stored_bytes: int = 0
    warnings: list[str] = field(default_factory=list)


def protected(mark: Mark, newest: dict[int, str], policy: Policy, now: int) -> bool:
    if mark.pinned or newest.get(mark.workspace) == mark.id:
        return True
    return mark.kind == "pre-rollback" and now - mark.created < policy.max_age_ns


def plan_evictions(marks: Iterable[Mark], policy: Policy, now: int) -> list[tuple[Mark, str]]:
    """Marks to evict for age and count (pure). Oldest first."""
    by_ws: dict[int, list[Mark]] = {}
    for m in marks:
        by_ws.setdefault(m.workspace, []).append(m)
    out: list[tuple[Mark, str]] = []
    for ms in by_ws.values():
        ms.sort(key=lambda m: m.seq)
        newest = {ms[-1].workspace: ms[-1].id}
        excess = len(ms) - policy.max_marks
        for m in ms:
            if protected(m, newest, policy, now):
                continue
            if now - m.created > policy.max_age_ns:
                out.append((m, "age"))
                excess -= 1
            elif excess > 0:
                out.append((m, "count"))
                excess -= 1
    out.sort(key=lambda p: p[0].created)
    return out


def newest_ids(marks: Iterable[Mark]) -> dict[int, str]:
    """Each workspace's newest mark id (never evicted)."""
    newest: dict[int, Mark] = {}
    for m in marks:
        if m.workspace not in newest or m.seq > newest[m.workspace].seq:
            newest[m.workspace] = m
    return {ws: m.id for ws, m in newest.items()}


def budget_candidates(marks: Iterable[Mark], policy: Policy, now: int) -> list[Mark]:
    """Marks that may go for the disk budget, oldest first (pure)."""
    ms = list(marks)
    ids = newest_ids(ms)
    return sorted((m for m in ms if not protected(m, ids, policy, now)), key=lambda m: m.created)


def evict(store: Store, doomed: list[tuple[Mark, str]], now: int) -> None:
    with store.catalog.write() as c:
        for m, reason in doomed:
            c.execute("DELETE FROM marks WHERE id=?", (m.id,))
            c.execute(
                "INSERT INTO evictions (workspace, mark, label, created, evicted, reason)"
                " VALUES (?,?,?,?,?,?)",
                (m.workspace, m.id, m.label, m.created, now, reason),
            )


def live_keys(store: Store, policy: Policy, now: int) -> set[str]:
    db = store.catalog.read()
    live: set[str] = set()
    for (tree,) in db.execute("SELECT DISTINCT tree FROM marks UNION SELECT head FROM workspaces"):
        if tree:
            trees.reachable(store.load_node, tree, live)
    for (key,) in db.execute("SELECT DISTINCT rules FROM marks WHERE rules IS NOT NULL"):
        live.add(key)
    cutoff = now - policy.max_age_ns
    for (key,) in db.execute(
        "SELECT DISTINCT object FROM versions WHERE time >= ? AND object IS NOT NULL", (cutoff,)
    ):
        live.add(key)
    return live


def sweep(store: Store, policy: Policy, now: int, report: GcReport) -> None:
    with store.holds.sweeping():  # from here on, every key a batch holds is spared
        live = live_keys(store, policy, now)
        young = now - int(policy.grace_s * 1e9)
        rows = store.catalog.read().execute("SELECT key, stored, external, created FROM objects").fetchall()
        dead = [(k, s, e) for k, s, e, created in rows if k not in live and created < young]
        for i in range(0, len(dead), SWEEP_CHUNK):
            chunk = dead[i : i + SWEEP_CHUNK]
            files = []
            with store.holds.lock, store.catalog.write() as c:
                for key, stored, external in chunk:
                    if store.holds.spared(key):
                        continue
                    c.execute("DELETE FROM objects WHERE key=?", (key,))
                    report.objects_deleted += 1
                    report.bytes_freed += stored
                    if external:
                        files.append(store.object_path(key))
            for p in files:  # after the commit: a crash before this leaves only orphan files
                safeio.unlink(p)
    remove_orphan_files(store, young)


def remove_orphan_files(store: Store, older_than: int) -> int:
    """Object and temp files no catalog row names (a crash before a commit, or after a sweep).

    Only files older than the grace period go: a batch in flight may be between writing a
    file and committing its row.
    """
    removed = 0
    db = store.catalog.read()
    top = store.dir / "objects"
    try:
        for shard in sorted(top.glob("*")):
            for p in shard.iterdir():
                if db.execute("SELECT 1 FROM objects WHERE key=? AND external=1", (p.name,)).fetchone():
                    continue
                try:
                    if p.stat().st_mtime_ns < older_than and safeio.unlink(p):
                        removed += 1
                except FileNotFoundError:
                    continue
    except OSError as exc:
        raise safeio.os_error(exc, "list object files in", top) from exc
    return removed


def _kept_bytes(store: Store, policy: Policy, now: int) -> int:
    """Bytes no budget eviction can free: what protected marks, workspace heads and versions
    inside the age window reference. If that alone exceeds the budget, evicting the other
    marks would empty the history and still not meet it."""
    marks = store.marks()
    ids = newest_ids(marks)
    db = store.catalog.read()
    roots = [m.tree for m in marks if protected(m, ids, policy, now)]
    roots += [h for (h,) in db.execute("SELECT head FROM workspaces WHERE head IS NOT NULL")]
    keep: set[str] = set()
    for root in roots:
        trees.reachable(store.load_node, root, keep)
    keep.update(k for (k,) in db.execute("SELECT DISTINCT rules FROM marks WHERE rules IS NOT NULL"))
    cutoff = now - policy.max_age_ns
    keep.update(
        k
        for (k,) in db.execute(
            "SELECT object FROM versions WHERE time >= ? AND object IS NOT NULL", (cutoff,)
        )
    )
    return sum(stored for key, stored in db.execute("SELECT key, stored FROM objects") if key in keep)


def _settled_bytes(store: Store, young: int) -> int:
    """Bytes of objects past the grace period: only those can be reclaimed by evicting marks."""
    row = (
        store.catalog.read()
        .execute("SELECT COALESCE(SUM(stored), 0) FROM objects WHERE created < ?", (young,))
        .fetchone()
    )
    return int(row[0])


def gc(store: Store, policy: Policy = Policy(), now: int | None = None) -> GcReport:
    """Apply the retention policy, then reclaim unreachable objects."""
    now = time.time_ns() if now is None else now
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
    sweep(store, policy, now, report)
    step = 1
    young = now - int(policy.grace_s * 1e9)
    kept: int | None = None
    while (settled := _settled_bytes(store, young)) > policy.budget_bytes:
        if kept is None:
            kept = _kept_bytes(store, policy, now)
        cands = budget_candidates(store.marks(), policy, now)
        if cands and kept <= policy.budget_bytes:
            batch = [(m, "budget") for m in cands[:step]]
            evict(store, batch, now)
            report.evicted += [(m.id, r) for m, r in batch]
            sweep(store, policy, now, report)
            step *= 2
            if _settled_bytes(store, young) < settled:
                continue
        # Nothing left to evict, or evicting freed nothing (what is left is held by newer
        # marks, pins or recent versions): stop rather than empty the history for no gain.
        report.warnings.append(
            f"the store holds {settled} bytes, over its budget of {policy.budget_bytes}, and what "
            "remains is held by marks and versions that must be kept (newest, pinned, recent "
            "pre-rollback, versions inside the age window): raise the budget or unpin marks"
        )
        break
    with store.catalog.write() as c:
        c.execute("PRAGMA incremental_vacuum")
    report.stored_bytes = store.stored_bytes()
    return report
