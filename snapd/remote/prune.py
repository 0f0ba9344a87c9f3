"""``remote prune``: retention on a remote repository, the only operation that deletes.

Pushes never delete or overwrite, and take no lock; prune holds the repository's lock
(:mod:`snapd.remote.locks`) against other prunes, and keeps pushes safe with two phases a grace
period apart (docs/remote.md, "Retention (prune), locks and the bucket policy", argues it):

0. the policy (``keep_last`` newest and everything younger than ``keep_within_s``, per (host,
   workspace); a mark either rule keeps is kept) picks the marks to drop; their records are
   deleted. Every object the kept marks need is gathered by walking their trees.
1. every pack of the live indexes that holds no needed object, and is not doomed yet, is named
   in a new ``doomed/`` list stamped with the time. From then on pushers treat its objects as
   absent: they upload them again rather than refer to them.
2. every doomed list at least ``grace_s`` old is settled against the marks listed *now* (after
   that time, so they include any mark a pusher wrote while its view predated the list): a pack
   whose needed objects are all held by packs that stay is deleted; one still needed is kept (the
   list goes, so it is doomed no more). Deleting means: one new index that supersedes every index
   naming a deleted pack and lists their other packs; then the packs; then the superseded indexes
   and the doomed list. A prune killed between two of these steps leaves nothing a reader
   trusts wrongly, and the next prune finishes the job.

Packs no live index names, older than the grace period (a dead push's, or left by a killed
prune), are deleted too, and so are index files another listed index supersedes.
``dry_run`` reads only: no lock, no write, no delete; the result says what a run would do.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import NamedTuple

from snapd.errors import UsageError
from snapd.remote import fetch, locks
from snapd.remote.packs import Blob, pack_name
from snapd.remote.records import MarkRecord
from snapd.remote.repo import GRACE_S, Repository, parallel
from snapd.store import fan, trees

Progress = Callable[[int, int], None]
Blobs = list[Blob]
DEFAULT_GRACE_S = GRACE_S
"""Prune's default grace period: the repository's (pushers refresh their view within half of it)."""


class PrunePolicy(NamedTuple):
    keep_last: int | None = None  # the newest N marks of each (host, workspace)
    keep_within_s: float | None = None  # and every mark younger than this


@dataclass
class PruneResult:
    dry_run: bool
    marks_kept: int = 0
    marks_dropped: list[str] = field(default_factory=list)  # mark ids
    packs_doomed: list[str] = field(default_factory=list)  # phase 1 of this run
    packs_waiting: int = 0  # doomed, their grace period not over
    packs_rescued: list[str] = field(default_factory=list)  # doomed, needed again: kept
    packs_deleted: list[str] = field(default_factory=list)  # phase 2 and leftovers
    leftovers: list[str] = field(default_factory=list)  # of packs_deleted: in no index
    bytes_freed: int = 0
    indexes_written: list[str] = field(default_factory=list)
    indexes_deleted: list[str] = field(default_factory=list)
    took_over: list[str] = field(default_factory=list)  # stale locks taken over, described


def dropped(records: Iterable[MarkRecord], policy: PrunePolicy, now_ns: int) -> list[MarkRecord]:
    """The marks ``policy`` does not keep (pure)."""
    if policy.keep_last is None and policy.keep_within_s is None:
        raise UsageError("a prune policy needs keep_last or keep_within (or both): it would keep nothing")
    if (policy.keep_last or 0) < 0 or (policy.keep_within_s or 0) < 0:
        raise UsageError("keep_last and keep_within cannot be negative")
    groups: dict[tuple[str, bytes], list[MarkRecord]] = {}
    for record in records:
        groups.setdefault((record.host, record.workspace), []).append(record)
    out: list[MarkRecord] = []
    for group in groups.values():
        group.sort(key=lambda r: (r.mark.created, r.mark.seq), reverse=True)
        for n, record in enumerate(group):
            last = policy.keep_last is not None and n < policy.keep_last
            within = (
                policy.keep_within_s is not None
                and now_ns - record.mark.created <= policy.keep_within_s * 1e9
            )
            if not (last or within):
                out.append(record)
    return out


def prune(
    repo: Repository,
    policy: PrunePolicy,
    grace_s: float = DEFAULT_GRACE_S,
    dry_run: bool = False,
    progress: Progress | None = None,
    host: str | None = None,
) -> PruneResult:
    if grace_s < 0:
        raise UsageError("the grace period cannot be negative")
    if dry_run:
        return _Pruner(repo, policy, grace_s, True, progress, lambda: None).run()
    with locks.holding(repo.backend, repo.master, host or socket.gethostname()) as held:
        result = _Pruner(repo, policy, grace_s, False, progress, held.renew).run()
        result.took_over = [lock.describe() for lock in held.took_over]
        return result


class _Pruner:
    def __init__(
        self,
        repo: Repository,
        policy: PrunePolicy,
        grace_s: float,
        dry_run: bool,
        progress: Progress | None,
        keep_alive: Callable[[], None],
    ):
        self.repo, self.policy, self.dry_run, self.progress = repo, policy, dry_run, progress
        self.keep_alive = keep_alive  # renews the lock as the work goes on
        self.grace_ns = int(grace_s * 1e9)
        self.result = PruneResult(dry_run)
        self.walked: set[str] = set()  # nodes walked
        self.needed: set[str] = set()  # every object a kept mark needs
        self.walked_marks: set[str] = set()

    def refresh(self) -> None:
        """The repository listed again; refused (RemoteCorrupt, nothing more deleted) while an
        index file that does not open is listed: the packs it names, if it was a real one,
        would look like a dead push's and be deleted."""
        self.repo.refresh()
        self.repo.refuse_damaged_indexes("prune deletes nothing")

    def run(self) -> PruneResult:
        repo, r = self.repo, self.result
        self.refresh()
        records = repo.marks()
        drop = dropped(records, self.policy, time.time_ns())
        names = {record.name for record in drop}
        self.need(record for record in records if record.name not in names)  # a failure: nothing deleted
        r.marks_dropped = [record.mark.id for record in drop]
        for record in drop:
            self.delete(record.name)
        if drop and not self.dry_run:
            self.refresh()
        kept = [record for record in repo.marks() if record.name not in names]
        self.need(kept)  # and the marks pushed meanwhile
        r.marks_kept = len(kept)

        # phase 1: doom the packs no kept mark needs
        live = self.live_packs()
        doomed = {list_id: (d.time, set(d.packs)) for list_id, d in repo.doomed_lists().items()}
        already = set().union(*(packs for _, packs in doomed.values()))
        new = sorted(p for p, blobs in live.items() if p not in already and not self.any_needed(blobs))
        if new:
            r.packs_doomed = new
            list_id = "(dry run)" if self.dry_run else repo.write_doomed(new)
            doomed[list_id] = (time.time_ns(), set(new))

        # phase 2: settle the lists at least a grace period old, against the marks listed now
        now = time.time_ns()
        ripe = {list_id: packs for list_id, (at, packs) in doomed.items() if now - at >= self.grace_ns}
        r.packs_waiting = sum(len(packs) for list_id, (_, packs) in doomed.items() if list_id not in ripe)
        if ripe and not self.dry_run:
            self.refresh()
            self.need(repo.marks())
            live = self.live_packs()
        all_doomed = set().union(*(packs for _, packs in doomed.values()))
        staying = {key for pack, blobs in live.items() if pack not in all_doomed for key, _, _ in blobs}
        going: set[str] = set()
        for packs in ripe.values():
            for pack in packs:
                blobs = live.get(pack, [])
                if all(key in staying or key not in self.needed for key, _, _ in blobs):
                    going.add(pack)
                else:
                    r.packs_rescued.append(pack)
        listing = list(repo.backend.list("data/"))
        sizes = {x.name: x.size for x in listing}
        old_indexes = self.supersede(going)
        self.delete_packs(sorted(p for p in going if pack_name(p) in sizes), sizes)  # some: gone already
        for index_id in old_indexes:
            self.delete(f"index/{index_id}")
            r.indexes_deleted.append(index_id)
        for list_id in ripe:
            self.delete(f"doomed/{list_id}")

        # packs in no live index (a dead push's, a killed prune's), older than the grace period
        if self.dry_run:
            live = {pack: blobs for pack, blobs in live.items() if pack not in going}
        else:
            self.refresh()  # a push's index written meanwhile names its packs: not leftovers
            live = self.live_packs()
        cutoff = time.time_ns() - self.grace_ns
        r.leftovers = sorted(
            pack
            for pack, listed in ((x.name.rsplit("/", 1)[-1], x) for x in listing)
            if pack not in live and pack not in going and listed.mtime_ns <= cutoff
        )
        self.delete_packs(r.leftovers, sizes)
        r.packs_rescued.sort()
        return r

    def need(self, records: Iterable[MarkRecord]) -> None:
        """Add every object the marks ``records`` need to :attr:`needed`: their trees walked
        level by level, the nodes of a level read in parallel, each node once however many
        marks share it. A node that cannot be read stops the prune (RemoteCorrupt or
        RemoteMissing naming it): what it needs is unknown, so nothing may be judged unneeded."""
        level: list[str] = []
        for record in records:
            if record.name in self.walked_marks:
                continue
            self.walked_marks.add(record.name)
            self.needed.update(k for k in (record.mark.rules, record.mark.ignored) if k)
            if record.mark.tree not in self.walked:
                self.walked.add(record.mark.tree)
                level.append(record.mark.tree)
        while level:
            self.keep_alive()
            self.needed.update(level)
            below: list[str] = []
            for node in self.load_nodes(level):
                if isinstance(node, fan.FanNode):  # a wide directory: its parts are live too
                    self.needed.update(node.parts)
                for entry in node.values():
                    if entry.kind == "dir":
                        if entry.key not in self.walked:
                            self.walked.add(entry.key)
                            below.append(entry.key)
                    elif trees.holds_object(entry):
                        self.needed.add(entry.key)
            level = below

    def load_nodes(self, keys: list[str]) -> Iterator[trees.Node]:
        """The nodes ``keys`` (one level of the trees), read as a restore reads them: the blobs
        grouped by pack, neighbours coalesced into one ranged GET, a few GETs at once."""
        repo = self.repo
        spans = fetch.plan_spans(repo, keys)
        for span, data in zip(spans, parallel(lambda s: fetch.read_span(repo, s), spans), strict=True):
            for key in span.keys:
                yield repo.decode_node(key, repo.read_blob(key, fetch.blob_of(repo, span, data, key)))

    def any_needed(self, blobs: Blobs) -> bool:
        return any(key in self.needed for key, _, _ in blobs)

    def index_view(self) -> tuple[dict[str, Mapping[str, Blobs]], set[str]]:
        """The live index files (id -> their packs), and the ids of the superseded ones."""
        files = self.repo.index_files()
        superseded = {old for index in files.values() for old in index.supersedes}
        return {i: f.packs for i, f in files.items() if i not in superseded}, superseded & set(files)

    def live_packs(self) -> dict[str, Blobs]:
        live, _ = self.index_view()
        return {pack: list(blobs) for packs in live.values() for pack, blobs in packs.items()}

    def supersede(self, going: set[str]) -> list[str]:
        """Write one new index in place of every live index naming a pack in ``going`` (with
        the others of their packs); return the index files now superseded, to delete once the
        packs are gone (with those a killed prune superseded and did not get to delete)."""
        live, superseded = self.index_view()
        old = sorted(i for i, packs in live.items() if going & set(packs))
        if old:
            kept = {pack: list(blobs) for i in old for pack, blobs in live[i].items() if pack not in going}
            if self.dry_run:
                self.result.indexes_written.append("(dry run)")
            else:
                self.result.indexes_written.append(self.repo.write_index(kept, old))
        return sorted(superseded | set(old))

    def delete_packs(self, packs: list[str], sizes: Mapping[str, int]) -> None:
        for n, pack in enumerate(packs):
            self.delete(pack_name(pack))
            self.result.packs_deleted.append(pack)
            self.result.bytes_freed += sizes.get(pack_name(pack), 0)
            if self.progress is not None:
                self.progress(n + 1, len(packs))

    def delete(self, name: str) -> None:
        self.keep_alive()
        if not self.dry_run:
            self.repo.backend.delete(name)
