"""Reading one workspace's paths into store batches, and keeping what was seen in step.

What was last seen of each captured path is the stat cache (:mod:`snapd.capture.statcache`);
what is on disk but not captured (over the cap, unreadable, special) is the skipped list;
what the captures since the last mark did is their report. Every read goes through
:meth:`Capturer.note_read`, so the three never disagree with what a batch holds. Scans compare
the disk with the stat cache and read nothing; the workspace turns what they find into dirty
paths.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import stat
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from snapd import paths
from snapd.capture import ingest, reader, readers, scan
from snapd.capture.counters import Counters
from snapd.capture.events import Notify
from snapd.capture.ignorednow import IgnoredNow
from snapd.capture.liverules import LiveRules
from snapd.capture.placement import Placement
from snapd.capture.scan import CountCallback
from snapd.capture.statcache import Changes, StatCache
from snapd.store import trees
from snapd.store.batch import Batch


@dataclass
class Walk:
    """A walk of the whole root, made as it is read: iterating it yields the paths to capture
    (each directory is listed as the walk reaches it); meanwhile it counts what it found, for a
    baseline's progress, and ``unlistable`` gathers the directories that could not be listed
    (why)."""

    walked: Iterator[tuple[bytes, bool]]  # reader.walk's (path, is_dir)
    unlistable: dict[bytes, str]
    files: int = 0  # paths found that are not directories: what a baseline's progress counts
    complete: bool = False  # the walk is over: ``files`` is the total

    def __iter__(self) -> Iterator[bytes]:
        for rel, is_dir in self.walked:
            self.files += not is_dir
            yield rel
        self.complete = True


class Capturer:
    """``stats``: the stat cache; ``since_mark``: what the captures since the last mark did;
    ``ignored``: what the ignore rules leave out, as of the last walk that judged every name;
    ``present``: the top-most ignored entries on disk, kept in step by every listing and every
    dirty path judged (what a mark records of them)."""

    def __init__(self, root: Path, ws_id: int, size_cap: int, rules: LiveRules, announce: Notify) -> None:
        self.rootb = os.fsencode(root)
        self._id = ws_id
        self._size_cap = size_cap
        self._rules = rules
        self._announce = announce
        self.stats = StatCache()
        self.skipped: dict[bytes, str] = {}
        self.since_mark = ingest.Report()
        self.ignored = ingest.IgnoredTally()
        self.counters = Counters()  # full scans, lstats, files read: the cost of captures, counted
        self.present = IgnoredNow(self.rootb, self.counters)
        self._staged: Changes | None = None  # stat rows in a batch not yet committed
        # Paths a failed commit held that the cache no longer names (removed, or dropped as
        # ignored now): still in the committed tree, maybe, so captured even if ignored.
        self._unsettled: set[bytes] = set()

    def scan(
        self, top: bytes, progress: CountCallback | None = None, *, trust_listings: bool = True
    ) -> set[bytes]:
        """What differs from the stat cache under ``top`` (b"" = all), reading no file."""
        tally = ingest.IgnoredTally()
        full = not top and not trust_listings  # every name is judged: a complete count
        rules = self._rules
        if full:
            self.present.reset()
        found = scan.scan(
            self.rootb,
            top,
            self.stats,
            rules.tallying(tally) if full else rules.is_ignored,
            rules.current.dir_may_contain_captured,
            trust_listings=trust_listings,
            progress=progress,
            counters=self.counters,
            left_out=self.present.listed,
        )
        if full:
            self.ignored = tally
        return found

    def recheck_files(self) -> set[bytes]:
        """Captured files whose ``lstat`` differs from the stat cache (a rollback's re-check)."""
        return scan.recheck_files(self.rootb, self.stats, self.counters)

    def catch_up_scan(self, progress: CountCallback | None, placement: Placement) -> set[bytes]:
        """:meth:`scan` of everything at start-up, the known directories watched
        (:func:`snapd.capture.scan.catch_up`)."""
        rules = self._rules
        with contextlib.ExitStack() as stack:
            restat = None
            if len(self.stats) >= readers.RESTAT_FROM:
                procs = stack.enter_context(
                    readers.ReaderProcesses(self.rootb, 0, False, None, self.counters)
                )
                stack.callback(ingest.log_failures, procs)
                restat = procs.restat
            return scan.catch_up(
                self.rootb,
                self.stats,
                rules.is_ignored,
                rules.current.dir_may_contain_captured,
                progress=progress,
                counters=self.counters,
                left_out=self.present.listed,
                restat=restat,
                placement=placement,
            )

    def wanted(self, rel: bytes) -> bool:
        """Capture ``rel``: not ignored, or ignored now but still in the tree (to drop it).
        The ignored entries present learn what it is now."""
        try:  # lstat: a symlink named like an ignored directory ("build/") is not a directory
            st: os.stat_result | None = reader.lstat(self.rootb + b"/" + rel, self.counters)
        except OSError:
            st = None
        rules = self._rules.current
        ignored = rules.is_ignored(rel, st is not None and stat.S_ISDIR(st.st_mode))
        self.present.saw(rel, st, ignored, rules)
        return not ignored or rel in self.stats or rel in self._unsettled

    def capture(self, batch: Batch, todo: list[bytes]) -> dict[bytes, trees.Change]:
        """Read ``todo`` into ``batch``, and with each file that has other links, its other
        captured names: a write through one name changed them all, and only that name had an
        event. So too the other names a linked file had when a name of it is found gone or
        replaced: it may have been written through before (``ln a b; echo x >> b; rm b``).
        A path now ignored (rules changed) is dropped from the tree and the cache."""
        linked: list[bytes] = []
        others: set[bytes] = set()  # the other names of files whose linked name went

        def on_read(r: reader.Read) -> None:
            others.update(self.stats.linked(r.rel))  # before the read replaces what was known
            self.note_read(r)
            if r.kind == "file" and r.nlink > 1:
                linked.append(r.rel)

        captured: dict[bytes, trees.Change] = {}
        while todo:
            captured.update(
                ingest.capture(
                    batch,
                    self.rootb,
                    todo,
                    self.since_mark,
                    size_cap=self._size_cap,
                    ws=self._id,
                    on_read=on_read,
                    counters=self.counters,
                )
            )
            todo = sorted(({o for p in linked for o in self.stats.linked(p)} | others) - captured.keys())
            linked.clear()
            others.clear()
        changes: dict[bytes, trees.Change] = {}
        for rel, change in captured.items():
            if change is not None and self._rules.is_ignored(rel, isinstance(change, trees.Dir)):
                change = None  # now ignored (rules changed): no longer captured
                self.stats.remove(rel)
            changes[rel] = change
        return changes

    def read_held(
        self, batch: Batch, held: Sequence[bytes]
    ) -> tuple[dict[bytes, trees.Change], dict[bytes, str]]:
        """Read ``held`` (and their parents) into ``batch`` whatever today's ignore rules: the
        changes, and why each path that could not be read was skipped."""
        wanted = set(held)
        for p in held:
            parts = p.split(b"/")
            wanted.update(b"/".join(parts[:i]) for i in range(1, len(parts)))
        skipped: dict[bytes, str] = {}

        def note(r: reader.Read) -> None:
            if r.kind in ("skipped", "hidden"):
                skipped[r.rel] = r.reason

        changes = ingest.capture(
            batch,
            self.rootb,
            sorted(wanted, key=lambda p: p.split(b"/")),
            ingest.Report(),
            size_cap=self._size_cap,
            on_read=note,
            counters=self.counters,
        )
        return changes, skipped

    def walk_all(self, lister: Callable[[bytes], reader.Listing | None] | None = None) -> Walk:
        """Walk the whole root (a baseline): every path captured, and the directories whose
        listing failed. Counts what the rules leave out. ``lister`` lists each directory as
        the walk reaches it, after watching it (:func:`reader.walk`'s ``listed``)."""
        tally = ingest.IgnoredTally()
        unlistable: dict[bytes, str] = {}

        def unreadable(rel: bytes, why: str) -> None:  # recorded as unlisted, and reported
            unlistable[rel] = why

        self.present.reset()
        walked = reader.walk(
            self.rootb,
            self._rules.tallying(tally),
            descend=self._rules.current.dir_may_contain_captured,
            unreadable=unreadable,
            counters=self.counters,
            listed=lister,
            left_out=self.present.listed,
        )
        self.ignored = tally
        return Walk(walked, unlistable)

    def read_walk(
        self, batch: Batch, walk: Walk, report: ingest.Report, progress: CountCallback | None
    ) -> dict[bytes, trees.Change]:
        """Read what :meth:`walk_all` finds into ``batch``, in parallel, while it walks.
        ``progress`` counts what the bar says, files (and symlinks) read, not directories, of a
        total unknown (None) until the walk is over, and ends at its total."""
        # reader processes for a big tree only: starting them costs ~0.1 s
        paths = iter(walk)
        first = list(itertools.islice(paths, readers.FROM_PATHS))
        rels = itertools.chain(first, paths)
        done = 0

        def read(r: reader.Read) -> None:
            nonlocal done
            self.note_read(r)
            if progress is not None and r.kind != "dir":
                done += 1
                if done % 500 == 0:
                    progress(min(done, walk.files), walk.files if walk.complete else None)

        changes = ingest.capture(
            batch,
            self.rootb,
            rels,
            report,
            size_cap=self._size_cap,
            ws=self._id,
            parallel=True,
            on_read=read,
            from_walk=True,
            counters=self.counters,
            processes=len(first) >= readers.FROM_PATHS,
        )
        for rel, why in walk.unlistable.items():  # a listing failed where access() said it would not
            change = changes.get(rel)
            if isinstance(change, trees.Dir) and change.listed:
                changes[rel] = trees.Dir(change.mode, listed=False)
                report.skip(rel, why)
                self.skip(rel, why)
        if progress is not None:
            progress(walk.files, walk.files)
        return changes

    def note_read(self, r: reader.Read) -> None:
        """Keep the stat cache and the skipped list in step with what a capture read."""
        was = self.stats.get(r.rel)
        if was is not None and stat.S_ISDIR(was[0][0]) and r.kind != "dir" and self.skipped:
            for gone in [p for p in self.skipped if paths.strictly_below(p, r.rel)]:
                del self.skipped[gone]  # its directory went: so did what could not be read in it
        if r.kind == "skipped":
            self.skip(r.rel, r.reason)
            if r.sig is None:
                self.stats.remove(r.rel)
            else:  # the tree holds it (uncaptured): scans must see it go; read time 0: always re-read
                self.stats.set(r.rel, r.sig, 0)
            return
        self.skipped.pop(r.rel, None)
        if r.kind == "dir" and not r.listed:  # its contents are unknown: a rollback keeps them
            self.skip(r.rel, r.reason)
        if r.kind == "missing" or r.sig is None:
            self.stats.remove(r.rel)
        else:
            # An unstable file gets read time 0: never trusted, so the next scan reads it again.
            self.stats.set(r.rel, r.sig, 0 if r.unstable else time.time_ns())
            if r.kind == "file":
                self.stats.note_links(r.rel, (r.dev, r.sig[4]), r.nlink)

    def skip(self, rel: bytes, reason: str) -> None:
        """``rel`` is on disk but its content is not captured; announced when that is news."""
        if self.skipped.get(rel) != reason:
            self.skipped[rel] = reason
            self._announce("capture.skipped", {"path": rel, "reason": reason})

    def stage_stats(self, batch: Batch) -> None:
        """Put what the cache learnt since the last commit into ``batch``; until
        :meth:`committed` says it was written, :meth:`uncommitted` still names its paths."""
        self._staged = self.stats.take_changes()
        batch.set_stats(self._id, self._staged)

    def committed(self) -> None:
        """The batch :meth:`stage_stats` filled was committed."""
        self._staged = None
        self._unsettled.clear()
        self.present.committed()

    def uncommitted(self) -> list[bytes]:
        """A commit failed: the paths whose reads it held (staged in the failed batch or
        learnt since), for the caller to queue, so they are read again. Not only the paths it
        was asked to read: the other names of a linked file (``ln a b; echo x >> b; rm b``:
        ``a`` was read because ``b`` went) are read again only so. The cache keeps what it
        learnt (a queued path is read whatever its entry says, and the read sets it again):
        an entry dropped instead left a directory out of its parent's children, where a scan
        trusting the parent's listing never reached it, and out of the rules' captured paths
        (a directory ignored since stayed in the tree). A path the cache no longer names is
        captured until a commit succeeds, ignored or not (:meth:`wanted`): the failed batch
        may have been the one dropping it from the tree."""
        staged, self._staged = self._staged, None
        paths = set(staged if staged is not None else ()) | set(self.stats.take_changes())
        # Dropped from the cache (gone, or ignored since: the rules that said so are current
        # now, and no rule change brings it back to be judged): the tree may still hold it.
        self._unsettled.update(p for p in paths if p not in self.stats)
        return sorted(paths)

    def recheck_loose_links(self) -> list[bytes]:
        """Files with a name outside the root (or ignored) were maybe written through it, which
        no watch of ours reports: re-stat them; those that differ from the cache are dirty."""
        now = time.time_ns()
        changed = []
        for rel in self.stats.loose_links():
            try:
                sig = reader.sig_of(reader.lstat(self.rootb + b"/" + rel, self.counters))
            except OSError:
                sig = None
            if sig is None or not self.stats.is_clean(rel, sig, now):
                changed.append(rel)
        return changed
