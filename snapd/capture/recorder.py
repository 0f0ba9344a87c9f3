"""Recording one workspace into the store: the dirty set settled, read, and committed.

Every capture first *settles* the dirty set: rebuilds the ignore rules if a rule file or
git's index changed (then judges every name again), re-lists the directories queued for a
subtree scan, and runs the full scans that are due (an overflow, a barrier timeout, a mark in
scan-every-mark mode) until no new overflow arrived meanwhile, or the re-check of every file
that a new name gone unseen calls for (:mod:`snapd.capture.births`). Then it reads the dirty
paths, with the captured names of the inodes new hard links were seen with, and commits one
batch: objects, a version row for each path, the new head tree and, for a
mark, the mark row — one SQLite transaction. A failed commit forgets what the stat cache
learnt and puts the paths back in the dirty set, so nothing is lost.

The caller holds the workspace lock for every method here: captures, scans and marks of one
workspace are serialised.
"""

from __future__ import annotations

import os
import stat
import time
from collections.abc import Sequence
from typing import Any

from snapd.capture import ignore, ingest, reader
from snapd.capture.capturer import Capturer
from snapd.capture.conditions import Conditions
from snapd.capture.dirty import Dirty, DirtySet
from snapd.capture.events import Notify
from snapd.capture.liverules import LiveRules
from snapd.capture.scan import CountCallback
from snapd.capture.watcher import Watcher
from snapd.errors import StoreError
from snapd.store import ignored, treediff, trees
from snapd.store.batch import Batch
from snapd.store.records import Mark, State
from snapd.store.store import Store

SINCE_MARK_PATHS = 1 << 14
"""Past this many paths changed since the last mark, the next mark's summary diffs the whole
tree (as cheap by then) and the set is dropped (~100 bytes a path)."""


class Recorder:
    """``tree``: the workspace's head tree as committed; ``watcher``: set once watching (its
    watches follow rule changes; its refused directories go into marks)."""

    def __init__(
        self,
        store: Store,
        ws_id: int,
        dirty: DirtySet,
        rules: LiveRules,
        capturer: Capturer,
        conditions: Conditions,
        announce: Notify,
    ) -> None:
        self._store, self._id, self._dirty = store, ws_id, dirty
        self._rules, self._capturer, self._conditions = rules, capturer, conditions
        self._announce = announce
        self.tree: str | None = None
        # (the latest mark's id, every path at which the head may differ from its tree since):
        # a mark's summary diffs only those (None: unknown, after a restart: the whole tree)
        self._since_mark: tuple[str, set[bytes]] | None = None
        self.watcher: Watcher | None = None
        self.scan_every_mark = False  # events cannot be trusted: every mark scans everything
        # (rule inputs, root mode) as the last commit recorded them (None: none yet)
        self._recorded: tuple[object, int | None] | None = None
        self._scanned_all = False  # a full scan ran since the last commit: its state is complete

    def scan(self, top: bytes, progress: CountCallback | None = None, *, trust_listings: bool = True) -> None:
        """Queue what differs from the stat cache under ``top`` (b"" = all), reading no file."""
        self._scanned_all |= top == b""
        self._queue_found(self._capturer.scan(top, progress, trust_listings=trust_listings))

    def recheck(self) -> None:
        """Queue every captured file whose ``lstat`` differs with no event (a rollback's
        re-check), as a scan's finds are queued: a rule file among them rebuilds the rules."""
        self._queue_found(self._capturer.recheck_files())

    def _queue_found(self, found: set[bytes]) -> None:
        # A rule file changed while unobserved: the rules are rebuilt at the next settle.
        self._dirty.add_paths(found, rules=any(self._rules.current.is_rule_file(p) for p in found))

    def capture_dirty(self) -> None:
        """Capture everything dirty (the capture thread, a barrier'd capture). With nothing to
        read, a commit still records a new state when what a mark would record beside its tree
        changed (the rules, the root's mode, the ignored names): a time after it must be judged
        by them."""
        try:
            paths = self._settle(for_mark=False)
            if paths or self._state_changed():
                self._commit_or_requeue(paths, None, {})
        finally:
            self._scanned_all = False  # a later capture sees only what events report

    def capture_and_mark(self, label: str, meta: dict[str, Any]) -> Mark:
        """Capture everything dirty and commit a mark with it (a full scan first in
        scan-every-mark mode)."""
        mark = self._commit_or_requeue(self._settle(for_mark=True), label, dict(meta))
        assert mark is not None
        return mark

    def _settle(self, *, for_mark: bool) -> list[bytes]:
        """Take the dirty set, run the rule reload and the scans it calls for; the paths to
        read."""
        d = self._dirty.take()
        refreshed = self._rules.reload_if_changed(d.rules)
        if refreshed:
            d, _ = self._rejudge(d)
        # Scan until a pass brings in nothing more to scan. What the reader thread delivers
        # meanwhile is merged in, and may ask for scans of its own: a directory replaced while
        # we scanned (its old children go only by a scan), an overflow or a barrier timeout
        # (lost events, which only a full scan recovers; it covers every subtree too).
        full = d.full or (for_mark and self.scan_every_mark)
        reasons = sorted(d.why) or ["scan_every_mark"]
        tops, recheck = d.scan_dirs, d.recheck
        while full or tops or recheck:
            if full:  # every captured path is stat'ed: a re-check of files too
                self.scan(b"")
                for reason in reasons:
                    self._announce("workspace.rescanned", {"reason": reason})
            else:
                for top in tops:
                    self.scan(top)
                if recheck:  # a new name went unseen: it may have been a link to any file
                    self.recheck()
            new = self._dirty.take()
            full, reasons, tops, recheck = new.full, sorted(new.why), new.scan_dirs, new.recheck
            d = d | new
            if new.rules and not refreshed:
                # The scans found a rule file no event told of: a directory moved within the
                # tree brings its .gitignore along (its own path gets no event). The rules in
                # force judged what it holds without it (they may even know its new path as
                # holding none: IgnoreRules.lacks_rule_file), so rebuild them and judge every
                # name again now, before this capture reads (a mark must hold what its own
                # rules capture: a rollback deletes what they capture and it lacks).
                refreshed = self._rules.reload_if_changed(True)
                d, new = self._rejudge(d)
                full, reasons, tops, recheck = new.full, sorted(new.why), new.scan_dirs, new.recheck
        # New names seen as hard links: their files' captured names, whatever became of them.
        d.paths |= self._capturer.stats.names_of(ino for _, ino in d.inodes)
        return sorted(p for p in d.paths if self._capturer.wanted(p))

    def _rejudge(self, d: Dirty) -> tuple[Dirty, Dirty]:
        """After a rebuild of the rules: re-apply them to the watches and scan everything
        again; ``d`` merged with what that queued, and what it queued."""
        if self.watcher is not None:
            self.watcher.rescan_watches(self._rules.current.dir_may_contain_captured)
        self.scan(b"", trust_listings=False)  # judge every name again under the new rules
        self._announce("workspace.rescanned", {"reason": "rules_changed"})
        new = self._dirty.take()
        d = d | new
        d.full = new.full  # this scan covered any earlier overflow, not one reported since
        d.why = new.why
        d.recheck = new.recheck  # and it stat'ed every file
        return d, new

    def _commit_or_requeue(self, paths: list[bytes], label: str | None, meta: dict[str, Any]) -> Mark | None:
        try:
            return self._commit(paths, label, meta)
        except BaseException:
            # Nothing was committed: read it all again.
            self._dirty.add_paths([*paths, *self._capturer.uncommitted()])
            raise

    def _commit(self, paths: list[bytes], label: str | None, meta: dict[str, Any]) -> Mark | None:
        hold: Sequence[bytes] = meta.pop("hold", ())
        note: dict[str, Any] = meta.pop("note", None) or {}  # facts the caller adds to the summary
        capturer = self._capturer
        # The state's time is the capture's start, as its versions' times are: typing a
        # version's time back (@T) must name a state that holds it.
        start = time.time_ns()
        with self._store.batch() as batch:
            changes = capturer.capture(batch, paths)
            state = self._mark_state(batch)
            tree = batch.apply(self.tree, changes) if changes else self.tree
            assert tree is not None
            mark = None
            told = self._conditions.told
            since = self._since_mark
            held: dict[bytes, trees.Change] = {}
            if since is not None:
                since[1].update(changes)
                if len(since[1]) > SINCE_MARK_PATHS:
                    since = self._since_mark = None
            if label is None:
                batch.set_head(self._id, tree)
                # Between marks, a workspace whose events cannot be trusted saw only part of
                # the tree (only a mark scans it all): a time then is judged by the last mark.
                partial = self.scan_every_mark and not self._scanned_all
                batch.add_state(State(self._id, start, tree, partial=partial, **state))
            else:
                head = tree
                if hold:
                    held = capturer.read_held(batch, hold)[0]
                if held:  # the mark also holds these, whatever today's rules (a pre-rollback mark)
                    tree = batch.apply(tree, held)
                prev = self._store.latest_mark(self._id)
                where = None
                if since is not None and prev is not None and prev.id == since[0]:
                    where = treediff.only(since[1].union(held))
                summary = ingest.summarize(
                    batch, prev.tree if prev else None, tree, capturer.since_mark, where=where
                )
                summary["warnings"], told = self._conditions.for_mark(self.watcher)
                summary["ignored"] = capturer.ignored.to_json()
                summary.update(note)
                mark = batch.add_mark(
                    self._id,
                    label,
                    tree,
                    git_head=self._rules.git_head(),
                    summary=summary,
                    **state,
                    **meta,
                )
                batch.set_head(self._id, head)
                batch.add_state(State(self._id, start, head, **state))
                tree = head
            capturer.stage_stats(batch)
            committed = batch.commit()
        capturer.committed()
        self.tree = tree
        self._conditions.told = told
        self._recorded = (self._rules.current.inputs, state["root_mode"])
        self._scanned_all = False
        if mark is not None:
            capturer.since_mark = ingest.Report()
            self._since_mark = (committed[0].id, set(held))
            return committed[0]
        return None

    def catch_up(self, progress: CountCallback | None) -> Mark | None:
        """At start: the baseline of a new workspace (returned; its walk places the watches
        below the root as it goes, :meth:`baseline`), or a known one, its known directories
        watched as its scan goes, reconciled with the disk (what changed while snapd was down is captured;
        :mod:`snapd.capture.placement`)."""
        self.tree = self._store.head(self._id)
        if self.tree is None:
            return self.baseline(progress)
        assert self.watcher is not None
        present = self._capturer.present
        try:
            names = ignored.load(self._store, self._store.live_ignored(self._id))
        except (StoreError, ValueError):  # unreadable: learnt again below, as after an upgrade
            names = None
        if names is not None:
            present.load(names)  # what the catch-up finds changed corrects it
        self._queue_found(self._capturer.catch_up_scan(progress, self.watcher.placement))
        if not present.known or self._rules_changed_while_down():
            self.scan(b"", trust_listings=False)  # every name judged again, listed or not
        self._announce("workspace.rescanned", {"reason": "startup"})
        stats = self._capturer.stats
        found = [p for p in self._dirty.paths() if not stats.is_directory(p)]
        # Directories that appeared while snapd was down (new paths, or captured ones that
        # were something else: no known directory, so not placed): watch them, then list
        # them (what their listing finds is dirty too), so nothing slips between the two.
        new = self.watcher.watch_new(found)
        self._dirty.add_events(new, self._rules.current.is_rule_file, stats.__contains__)
        self.capture_dirty()
        return None

    def _rules_changed_while_down(self) -> bool:
        """Whether the rule inputs outside the tree differ from those last recorded (the
        ``precious`` or ``extra_ignore`` setting changed, an upgrade brought new defaults):
        a name in a directory whose listing did not change may be judged otherwise now. No
        names recorded (a store from before format 8) lists everything anyway."""
        key = self._store.live_rules(self._id)
        if key is None:
            return False
        try:
            recorded = ignore.RuleInputs.decode(self._store.get(key))
        except (StoreError, ValueError):
            return True
        return not self._rules.current.same_outside(recorded)

    def baseline(self, progress: CountCallback | None) -> Mark:
        """Read the whole root and commit it as the ``baseline`` mark (a new workspace, its
        watcher started with only the root watched: ``Watcher.start(walked=True)``).

        One pass: the walk has the watcher watch each directory, then list it, as it reaches
        it (parents first), and the files it finds are read while it goes on, in the reader
        processes; so whatever changes in a directory after its listing reaches its watch,
        and the readers are not idle while the watches are placed (they were, placed first:
        1.4-1.5 s of an 8.9 s baseline at django-100k)."""
        report = ingest.Report()
        start = time.time_ns()
        walk = self._capturer.walk_all(self._watched_listing)
        with self._store.batch() as batch:
            changes = self._capturer.read_walk(batch, walk, report, progress)
            tree = batch.apply(None, changes)
            added = (p for p, c in changes.items() if c is not None)
            summary = ingest.summarize(batch, None, tree, report, added)
            del changes, added  # 10^5 entries: not held through the commit
            summary["warnings"], told = self._conditions.for_mark(self.watcher)
            summary["ignored"] = self._capturer.ignored.to_json()
            state = self._mark_state(batch)
            batch.add_mark(
                self._id,
                "baseline",
                tree,
                kind="baseline",
                summary=summary,
                git_head=self._rules.git_head(),
                **state,
            )
            batch.add_state(State(self._id, start, tree, **state))
            self._capturer.stage_stats(batch)
            (mark,) = batch.commit()
        self._capturer.committed()
        self._conditions.told = told
        self.tree = tree
        self._since_mark = (mark.id, set())
        self._recorded = (self._rules.current.inputs, state["root_mode"])
        return mark

    def _watched_listing(self, rel_dir: bytes) -> reader.Listing | None:
        """A directory the baseline's walk reached, watched then listed (None: the walk lists
        it itself). A listing without a ``.gitignore`` spares the rules an attempt to open one
        (one failed ``open`` per directory: 7% of a baseline's request thread at django-100k,
        by py-spy); a file made there after the listing reaches the watch as a rule change."""
        assert self.watcher is not None
        entries = self.watcher.watch_and_list(rel_dir)
        if entries is None:
            return None
        if all(rel.rpartition(b"/")[2] != ignore.RULE_FILE_NAME for rel, _ in entries):
            self._rules.current.lacks_rule_file(rel_dir)
        return entries

    def hold(self, tree: str, paths: Sequence[bytes]) -> tuple[str, dict[bytes, str]]:
        """``tree`` plus the state on disk of ``paths``, which today's rules leave out (a
        rollback holds every path it touches), and the paths that could not be
        read. The objects are stored; no mark or head changes."""
        if not paths:
            return tree, {}
        with self._store.batch() as batch:
            changes, skipped = self._capturer.read_held(batch, paths)
            held = batch.apply(tree, changes)
            batch.commit()
        return held, skipped

    def _root_mode(self) -> int | None:
        try:
            return stat.S_IMODE(os.stat(self._capturer.rootb).st_mode)
        except OSError:
            return None  # the barrier reports a vanished root; nothing to restore here

    def _state_changed(self) -> bool:
        """Whether the rules, the root's mode or the ignored names differ from those the last
        commit recorded."""
        changed = self._recorded != (self._rules.current.inputs, self._root_mode())
        return changed or self._capturer.present.unrecorded

    def _mark_state(self, batch: Batch) -> dict[str, Any]:
        """What a mark records beside its tree, and every commit's state with it: the rule inputs
        that live outside the tree and the names of the top-most ignored entries present (one
        shared object per distinct set each), and the root's own mode (a rollback restores it)."""
        return {
            "rules": self._rules.record(self._store, batch),
            "root_mode": self._root_mode(),
            "ignored": self._capturer.present.record(self._store, batch, self._id),
        }
