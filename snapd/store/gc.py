"""GC, the sweep: apply the retention policy to the store and reclaim what nothing needs.

The policy (:mod:`snapd.store.retention`) picks the marks; this module evicts them, records
every eviction in the catalog (so ``log`` can say that older marks were pruned), deletes the
versions older than the age window, and sweeps. When what must be kept exceeds the budget,
eviction stops and the report carries a warning.

GC is mark-and-sweep. The mark phase (:mod:`snapd.store.gcmark`: what every kept mark, head,
rule input and version in the age window references, with their delta bases) only reads, and
the daemon runs it in a process of its own. The sweep spares besides every object younger than
the grace period and every key a batch in flight holds (:mod:`snapd.store.holds`), and deletes
in short transactions so captures are never blocked for long.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from snapd.config import Retention
from snapd.store import objects, safeio
from snapd.store.gcmark import Here, Keys, MarkPhase
from snapd.store.records import MarkHead
from snapd.store.repack import repack
from snapd.store.retention import budget_candidates, plan_evictions
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
    # Where the mark phase ran, when not on the GC's thread (snapd.daemon.gcchild: its pid,
    # the steps it answered, its peak memory, and why the daemon ran any itself).
    mark_phase: dict[str, Any] = field(default_factory=dict)


def evict(store: Store, doomed: list[tuple[MarkHead, str]], now: int) -> None:
    with store.catalog.write() as c:
        for m, reason in doomed:
            c.execute("DELETE FROM marks WHERE id=?", (m.id,))
            c.execute(
                "INSERT INTO evictions (workspace, mark, label, created, evicted, reason)"
                " VALUES (?,?,?,?,?,?)",
                (m.workspace, m.id, m.label, m.created, now, reason),
            )


def sweep(store: Store, policy: Retention, now: int, report: GcReport, mark: MarkPhase, extra: Keys) -> None:
    with store.holds.sweeping():  # from here on, every key a batch holds is spared
        found = mark.unreferenced(policy, now, extra)
        dead = found.dead
        store.holds.narrow(objects.py_key(k) for k, _, _ in dead)  # only these may need sparing now
        report.waiting, report.waiting_bytes, report.waiting_until = (
            found.waiting, found.waiting_bytes, found.waiting_until
        )
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
    remove_orphan_files(store, now - int(policy.grace_s * 1e9))


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


def _settled_bytes(store: Store, young: int) -> int:
    """Bytes of objects past the grace period: only those can be reclaimed by evicting marks."""
    row = (
        store.catalog.read()
        .execute("SELECT COALESCE(SUM(stored), 0) FROM objects WHERE created < ?", (young,))
        .fetchone()
    )
    return int(row[0])


def run(
    store: Store,
    policy: Retention,
    now: int | None = None,
    unfinished: Iterable[str] = (),
    mark: MarkPhase | None = None,
) -> GcReport:
    """Apply the retention policy, then reclaim unreachable objects. ``unfinished``: what
    rollbacks stopped part-way still have to write (their journals; the store cannot read
    them), kept whatever mark was evicted. ``mark``: where the mark phase runs (the daemon's
    is a process of its own, :mod:`snapd.daemon.gcchild`); on this thread by default."""
    mark = Here(store) if mark is None else mark
    now = time.time_ns() if now is None else now
    extra: Keys = {objects.db_key(k) for k in unfinished}
    report = GcReport()
    doomed = plan_evictions(store.mark_heads(), policy, now)
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
    sweep(store, policy, now, report, mark, extra)
    young = now - int(policy.grace_s * 1e9)
    settled = _settled_bytes(store, young)
    if settled > policy.budget_bytes:
        cands = budget_candidates(store.mark_heads(), policy, now)
        if cands and mark.kept_bytes(policy, now, extra) <= policy.budget_bytes:
            k = mark.fewest_to_fit(policy, now, young, [m.id for m in cands], extra)
            batch = [(m, "budget") for m in cands[:k]]
            evict(store, batch, now)
            report.evicted += [(m.id, r) for m, r in batch]
            sweep(store, policy, now, report, mark, extra)
            settled = _settled_bytes(store, young)
    if settled > policy.budget_bytes:
        # Nothing left to evict, or what is left is held by marks and versions that must be
        # kept: stop rather than empty the history for no gain.
        report.warnings.append(
            f"the store holds {settled} bytes, over its budget of {policy.budget_bytes}, and what "
            "remains is held by marks and versions that must be kept (newest, pinned, recent "
            "pre-rollback, versions inside the age window): raise the budget or unpin marks"
        )
    report.repacked, report.repack_saved = repack(store, mark.repack_plan)
    with store.catalog.write() as c:
        # Python's sqlite3 steps a statement that returns no columns once, and each step of
        # incremental_vacuum frees one page: one call per free page gives them all back.
        for _ in range(c.execute("PRAGMA freelist_count").fetchone()[0]):
            c.execute("PRAGMA incremental_vacuum")
    report.stored_bytes = store.stored_bytes()
    return report
