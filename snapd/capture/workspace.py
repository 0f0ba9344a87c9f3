"""One watched workspace: its life cycle, and what requests ask of it (captures, marks, status).

Flow: the watcher's reader thread hands event batches to :meth:`Workspace.on_events`, which
only records dirty paths (:mod:`snapd.capture.dirty`: cheap, under a small lock). A capture
thread per workspace (:mod:`snapd.capture.capture_thread`) captures them shortly after
(history between marks: every captured version is recorded). A mark runs on the request's
thread: barrier (cookie round trip through this workspace's inotify queue), then, under the
workspace lock, capture of everything still dirty and one durable commit
(:mod:`snapd.capture.recorder`).

A mark is O(changes since the last capture): only dirty paths are read, only their
directories' tree nodes rewritten. Full scans happen only when events cannot be trusted
(start-up, queue overflow, a barrier timeout, ignore rules changed, a watch shortfall or a
file system without events); they are stat walks against the stat cache, re-reading only
files whose (size, mtime, ctime, inode) differ or whose mtime is too recent to trust.

The parts: :class:`~snapd.capture.dirty.DirtySet`, :class:`~snapd.capture.liverules.LiveRules`
(the ignore rules in force), :class:`~snapd.capture.capturer.Capturer` (reads, the stat cache,
the skipped list), :class:`~snapd.capture.recorder.Recorder` (settle and commit) and
:class:`~snapd.capture.conditions.Conditions` (what is wrong now).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import structlog

from snapd import memtrim
from snapd.capture import ignore, roots
from snapd.capture.capture_thread import CaptureThread
from snapd.capture.capturer import Capturer
from snapd.capture.conditions import Conditions
from snapd.capture.cookies import remove_stale_cookies
from snapd.capture.dirty import DirtySet
from snapd.capture.events import Notify, WatchEvent
from snapd.capture.liverules import LiveRules
from snapd.capture.recorder import Recorder
from snapd.capture.scan import CountCallback
from snapd.capture.statcache import StatCache
from snapd.capture.watcher import Watcher
from snapd.config import CaptureSettings
from snapd.errors import SnapdError, WorkspaceRefused
from snapd.store import safeio
from snapd.store.records import Mark
from snapd.store.store import Store

log = structlog.get_logger(__name__)



def _no_events(kind: str, fields: dict[str, Any]) -> None:
    pass


def _claim_root(store: Store, ws_id: int, root: Path) -> str:
    """The identity of ``root`` now, recorded the first time; refused when the directory is
    not the one the workspace's history belongs to (:func:`roots.check_root`)."""
    known = store.root_id(ws_id)
    root_id = roots.check_root(root, known)
    if known is None:
        store.set_root_id(ws_id, root_id)
    return root_id


class Workspace:
    def __init__(
        self,
        store: Store,
        ws_id: int,
        root: Path,
        settings: CaptureSettings,
        recover: Callable[[Workspace], None] | None = None,
    ) -> None:
        """``recover`` runs once at start, watches in place and before the reconcile scan: the
        daemon passes the rollback layer's crash recovery (capture does not know rollbacks)."""
        self._recover = recover
        self.store, self.id, self.root, self.settings = store, ws_id, root, settings
        self.rootb = os.fsencode(root)
        self.lock = threading.RLock()  # captures, scans and marks of this workspace
        # Where this workspace announces what happens (docs/protocol.md, "Events"): the daemon
        # sets it; the fields hold plain values, bytes paths and Marks for it to put on the wire.
        self.notify: Notify = _no_events
        self.dirty = DirtySet()
        self.live_rules = LiveRules(root, settings.extra_ignore, settings.precious)
        self.conditions = Conditions(root, self._announce)
        self.capturer = Capturer(root, ws_id, settings.size_cap, self.live_rules, self._announce)
        self.recorder = Recorder(
            store, ws_id, self.dirty, self.live_rules, self.capturer, self.conditions, self._announce
        )
        self._thread = CaptureThread(
            root, self.dirty, self.lock, self.recorder.capture_dirty, self._announce, self._stop_if_lost
        )
        self.watcher: Watcher | None = None
        self.progress: tuple[int, int | None] | None = None  # (done, total) while starting
        self.root_id = ""
        self.recovered: dict[str, Any] | None = None  # what start-up recovery of a rollback did
        self.lost: str | None = None  # the root vanished or was replaced: capture stopped (why)

    def _announce(self, kind: str, fields: dict[str, Any]) -> None:
        self.notify(kind, fields)  # looked up at each call: the daemon sets it after __init__

    # -- life cycle --------------------------------------------------------------------------

    def start(self, progress: CountCallback | None = None) -> Mark | None:
        """Watch, then capture the baseline (first time) or reconcile with the disk.

        Returns the baseline mark when one was taken.
        """
        self.root_id = _claim_root(self.store, self.id, self.root)
        remove_stale_cookies(self.root)
        self.live_rules.load()
        kind = roots.fs_type(self.root)
        if not roots.delivers_events(kind, self.settings.scan_fs_types):
            self.recorder.scan_every_mark = True
            self.conditions.warn(
                f"{self.root} is on a {kind} file system, which delivers no change events: "
                "every mark scans the workspace"
            )
        known = self.store.head(self.id) is not None
        watcher = Watcher(
            self.root,
            self.on_events,
            self._watch_dir,
            max_watches=self.settings.watch_limit,
            counters=self.capturer.counters,
        )
        self.watcher = self.recorder.watcher = watcher  # a stop() during the load reaches it
        # A known workspace: its stat cache first, then the directories it names are watched
        # without listing them (on the watcher's thread, each before the reconcile scan looks
        # at any path below it: :mod:`snapd.capture.placement`); a new one: the root, and the
        # baseline's walk has each directory watched, then listed, as it reaches it.
        stats = StatCache.from_rows(self.store.load_stats(self.id)) if known else StatCache()
        self.capturer.stats = stats
        if known:
            watcher.start(stats.directories())
        else:
            watcher.start(walked=True)
        if self._recover is not None and safeio.exists(self.journal):
            # A rollback to finish. It writes: a known workspace's watches all in place first,
            # and a new one's baseline has yet to read anything. (Else the catch-up's scan
            # follows the placement, a chunk of paths behind it.)
            watcher.placement.wait_all()
            self._recover(self)

        def note(done: int, total: int | None) -> None:
            self.progress = (done, total)
            if progress is not None:
                progress(done, total)

        with self.lock:
            baseline = self.recorder.catch_up(note)
        if watcher.untrusted:
            self._watch_shortfall()
        self.progress = None
        if baseline is not None:
            self.store.forget_caches()
        memtrim.trim()  # the free heap a baseline or a reconcile left
        self._thread.start()
        watches = watcher.watch_count
        log.info("workspace.started", workspace=str(self.root), files=stats.files(), watches=watches)
        return baseline

    def _watch_dir(self, rel: bytes) -> bool:
        # A directory captured before was judged then: if the rules changed meanwhile, the
        # reconcile scan finds the changed rule file and re-applies them to the watches.
        return rel in self.capturer.stats or self.rules.dir_may_contain_captured(rel)

    def _watch_shortfall(self) -> None:
        assert self.watcher is not None
        self.recorder.scan_every_mark = True
        self.conditions.watch_shortfall(self.watcher, self.settings.watch_limit)

    def stop(self) -> None:
        self.dirty.stop()
        if self.watcher is not None:
            self.watcher.stop()
        self._thread.join()

    # -- events (watcher thread: keep it quick) -----------------------------------------------

    def on_events(self, events: list[WatchEvent]) -> None:
        self.dirty.add_events(events, self.rules.is_rule_file, self.capturer.stats.__contains__)

    def pending(self) -> int:
        return self.dirty.pending()

    def root_problem(self) -> str | None:
        """Why the root is unusable now (vanished, or another directory at its path), or
        None. Once capture stopped for that reason (:attr:`lost`), that reason stands."""
        if self.lost is not None:
            return self.lost
        try:
            return roots.replaced(self.root, self.root_id)
        except SnapdError as exc:  # NotFound: nothing is there
            return exc.message

    def _stop_if_lost(self) -> bool:
        """Capture thread, before each capture: a root that vanished or was replaced stops
        this workspace's capture for good. Its watches follow the old directory while the
        paths name whatever is at the root now, so capturing on would write another
        directory's state into this history. The history stays; the daemon says so once;
        `status` shows the reason; marks are refused; `snapctl watch ROOT` starts it again."""
        why = self.root_problem()
        if why is None:
            return False
        self.lost = why
        log.warning("workspace.lost", workspace=str(self.root), error=why)
        self.notify("warning", {"message": f"capture stopped: {why}"})
        self.dirty.take()
        if self.watcher is not None:
            self.watcher.stop()
        return True

    # -- requests ----------------------------------------------------------------------------

    def _barrier(self) -> None:
        """Every change completed before now is in the dirty set (or a full rescan is queued)."""
        if (why := roots.replaced(self.root, self.root_id)) is not None:
            raise WorkspaceRefused(why)
        if self.lost is not None:  # the directory is back, but capture stopped meanwhile
            raise WorkspaceRefused(
                f"snapd stopped capturing {self.root} ({self.lost}); `snapctl watch {self.root}` resumes it"
            )
        if self.watcher is not None and self.watcher.untrusted and not self.recorder.scan_every_mark:
            self._watch_shortfall()
        ok = self.watcher is not None and self.watcher.barrier(self.settings.barrier_timeout_s)
        with self.lock:  # the stat cache is the capture thread's
            changed_links = self.capturer.recheck_loose_links()
        self.dirty.add_paths(changed_links)
        if not ok:
            log.warning("workspace.barrier_failed", workspace=str(self.root))
            self.dirty.request_full("barrier_timeout")

    def capture_to_now(self) -> str:
        """Capture every change completed before this call (a barrier, then a capture); the
        captured tree. Takes the lock."""
        with self.lock:
            return self.capture_to_now_under_lock()

    def capture_to_now_under_lock(self, *, rescan: bool = False) -> str:
        """:meth:`capture_to_now` for a caller that holds :attr:`lock` (a rollback).

        ``rescan``: also compare every captured file with the stat cache (one ``lstat`` each),
        for changes no event reports: a file written through a hard link whose other name is
        ignored or outside the root, linked there since the last read (the link count changes
        on the inode, and inotify reports that to no watched directory). Files only: no other
        change escapes the watches (:func:`snapd.capture.scan.recheck_files`) — unless the
        watches cannot be trusted (:attr:`Recorder.scan_every_mark`): then everything is
        scanned, as for a mark, since a path made in an unwatched directory reaches no event."""
        self.finish_rollback()
        self._barrier()  # after: what finishing it wrote is in this capture
        if rescan and self.recorder.scan_every_mark:  # no event reports a new path either
            self.recorder.scan(b"")
        elif rescan:
            self.recorder.recheck()
        self.recorder.capture_dirty()
        assert self.tree is not None
        return self.tree

    def mark(self, label: str, **meta: Any) -> Mark:
        """A durable mark holding every change completed before this call (the barrier:
        docs/architecture.md). Takes the lock."""
        if safeio.exists(self.journal):
            with self.lock:
                self.finish_rollback()
        self._barrier()
        with self.lock:
            return self._mark_now(label, meta)

    def mark_under_lock(self, label: str, **meta: Any) -> Mark:
        """:meth:`mark` for a caller that holds :attr:`lock` (a rollback's pre-rollback mark)."""
        self._barrier()
        return self._mark_now(label, meta)

    def _mark_now(self, label: str, meta: dict[str, Any]) -> Mark:
        """Under :attr:`lock`: the mark, and its event published before the lock is let go, so
        subscribers see marks in the order of their seq (two marks' events never cross)."""
        mark = self.recorder.capture_and_mark(label, meta)
        log.info(
            "mark.created",
            workspace=str(self.root),
            mark=mark.id,
            label=label,
            changed=mark.summary.get("changed", 0),
        )
        self.notify("mark.created", {"mark": mark})
        return mark

    def hold(self, tree: str, paths: Sequence[bytes]) -> tuple[str, dict[bytes, str]]:
        """``tree`` plus the state on disk of ``paths`` (see :meth:`Recorder.hold`)."""
        return self.recorder.hold(tree, paths)

    def git_head(self) -> str | None:
        return self.live_rules.git_head()

    # -- rollbacks (the daemon hands the recovery in; capture does not know rollbacks) ---------

    @property
    def journal(self) -> Path:
        """Where a rollback of this workspace keeps its write-ahead journal."""
        return self.store.journal_path(self.id)

    def finish_rollback(self) -> None:
        """Finish a rollback that stopped part-way (its journal is still there), before a
        request reads or changes the workspace: the recovery the daemon handed in, as at
        start-up. The caller holds :attr:`lock`, and a barrier must follow, so the capture sees
        what this wrote. A failure is kept in :attr:`unfinished`, shown by status and marks."""
        if self._recover is not None and safeio.exists(self.journal):
            self._recover(self)

    def rollback_stopped(self, exc: SnapdError, why: str = "that stopped part-way") -> None:
        """A rollback (or the finishing of one) failed with its journal still there: say so
        in ``status`` and every mark until :meth:`finish_rollback` succeeds."""
        self.conditions.rollback_stopped(exc, why, self.journal)

    @property
    def unfinished(self) -> str | None:
        """A rollback stopped part-way, not finished yet: why."""
        return self.conditions.unfinished

    @unfinished.setter
    def unfinished(self, why: str | None) -> None:
        self.conditions.unfinished = why

    # -- state -------------------------------------------------------------------------------

    @property
    def tree(self) -> str | None:
        """The head tree as captured."""
        return self.recorder.tree

    @property
    def rules(self) -> ignore.IgnoreRules:
        """The ignore rules in force now."""
        return self.live_rules.current

    @property
    def warnings(self) -> list[str]:
        """Lasting conditions, in status and every mark (append to add one silently)."""
        return self.conditions.warnings

    def current_warnings(self) -> list[str]:
        """Everything wrong now, for ``status``: lasting conditions and refused directories."""
        return self.conditions.now(self.watcher)

    @property
    def skipped(self) -> dict[bytes, str]:
        """Paths on disk whose content is not captured (over the cap, unreadable, special)."""
        return dict(self.capturer.skipped)

    def status(self) -> dict[str, Any]:
        capturer, watcher = self.capturer, self.watcher
        precious = self.live_rules.precious_files(capturer.stats)
        return {
            "root": str(self.root),
            "files": capturer.stats.files(),
            "skipped": len(capturer.skipped),
            "skipped_examples": [os.fsdecode(p) for p in list(capturer.skipped)[:10]],
            "ignored": capturer.ignored.to_json(),
            "precious": len(precious),  # captured though git ignores them (config's precious)
            "precious_examples": [os.fsdecode(p) for p in precious[:10]],
            "pending": self.pending(),
            "watches": watcher.watch_count if watcher and watcher.running else 0,
            "watch_failures": watcher.watch_failures if watcher else 0,
            "overflows": watcher.overflowed if watcher else 0,
            "watch_resyncs": watcher.resynced if watcher else 0,
            "hardlinks_rechecked": len(capturer.stats.loose_links()),
            "scan_every_mark": self.recorder.scan_every_mark,
            "warnings": self.current_warnings(),
            "progress": self.progress,
            "counters": capturer.counters.to_json(),
            "recovered_rollback": self.recovered,
        }
