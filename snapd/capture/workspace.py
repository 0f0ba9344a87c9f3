"""One watched workspace: events in, dirty paths, captures, barriers and marks.

Flow: the watcher's reader thread hands event batches to :meth:`Workspace.on_events`, which
only records dirty paths (cheap, under a small lock). A capture thread per workspace reads
them shortly after (history between marks: every captured version is recorded). A mark runs
on the request's thread: barrier (cookie round trip through this workspace's inotify queue),
then, under the workspace lock, capture of everything still dirty and one durable commit.

A mark is O(changes since the last capture): only dirty paths are read, only their
directories' tree nodes rewritten. Full scans happen only when events cannot be trusted
(start-up, queue overflow, a barrier timeout, ignore rules changed, a watch shortfall or a
file system without events); they are stat walks against the stat cache, re-reading only
files whose (size, mtime, ctime, inode) differ or whose mtime is too recent to trust.
"""

from __future__ import annotations

import ctypes
import os
import stat
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import structlog

from snapd import paths
from snapd.capture import git, ignore, ingest, reader, roots, scan
from snapd.capture.counters import Counters
from snapd.capture.statcache import StatCache
from snapd.capture.watcher import Watcher, WatchEvent, remove_stale_cookies
from snapd.config import CaptureSettings
from snapd.display import count, shown
from snapd.errors import SnapdError, WorkspaceRefused
from snapd.store import safeio, trees
from snapd.store.batch import Batch
from snapd.store.records import Mark
from snapd.store.store import Store

log = structlog.get_logger(__name__)

DEBOUNCE_S = 0.05

Progress = Callable[[int, int], None]
Notify = Callable[[str, dict[str, Any]], None]


def _no_events(kind: str, fields: dict[str, Any]) -> None:
    pass


def trim_memory() -> None:
    """Give freed heap back to the system after a big capture (glibc keeps it otherwise:
    a 100k-file baseline leaves ~250 MB of free heap in the process)."""
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass  # not glibc: nothing to do


@dataclass
class _Dirty:
    paths: set[bytes] = field(default_factory=set)
    scan_dirs: set[bytes] = field(default_factory=set)
    full: bool = False
    rules: bool = False
    why: set[str] = field(default_factory=set)  # why a full scan is due (the rescanned event's reason)


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
        self._dirty = _Dirty()
        self._dirty_lock = threading.Condition()
        self._stats = StatCache()
        self._skipped: dict[bytes, str] = {}
        self._since_mark = ingest.Report()
        self.ignored = ingest.IgnoredTally()  # as of the last walk that judged every name
        self.tree: str | None = None
        self.warnings: list[str] = []  # lasting conditions, in status and every mark
        self._told: dict[bytes, int] = {}  # refused directories some mark's summary reported
        self.scan_every_mark = False
        self.git_top: Path | None = None
        self._git_index: Path | None = None
        self._git_index_sig: tuple[int, ...] | None = None
        self._outside_rules: list[Path] = []  # ignore.outside_rule_files, stat'ed with the index
        self.rules = ignore.IgnoreRules.load(root, settings.extra_ignore)
        self._rules_record: tuple[ignore.RuleInputs, bytes, str] | None = None  # inputs, bytes, digest
        self.watcher: Watcher | None = None
        self._thread: threading.Thread | None = None
        self._stopping = False
        self.events_seen = 0
        self.progress: tuple[int, int] | None = None  # (done, total) while starting
        self.counters = Counters()  # full scans, lstats, files read: the cost of captures, counted
        self.root_id = ""
        self.recovered: dict[str, Any] | None = None  # what start-up recovery of a rollback did
        self.unfinished: str | None = None  # a rollback stopped part-way, not finished yet: why
        self.lost: str | None = None  # the root vanished or was replaced: capture stopped (why)
        self._root_event = False  # the root itself was deleted, moved or unmounted: check it
        # Where this workspace announces what happens (docs/protocol.md, "Events"): the daemon
        # sets it; the fields hold plain values, bytes paths and Marks for it to put on the wire.
        self.notify: Notify = _no_events

    # -- life cycle --------------------------------------------------------------------------

    def start(self, progress: Progress | None = None) -> Mark | None:
        """Watch, then capture the baseline (first time) or reconcile with the disk.

        Returns the baseline mark when one was taken.
        """
        self.root_id = self._check_root()
        known = self.store.root_id(self.id)
        if known is None:
            self.store.set_root_id(self.id, self.root_id)
        elif known != self.root_id:
            raise WorkspaceRefused(
                f"the directory {self.root} was replaced by another one since snapd captured it; its "
                f"history belongs to the old directory: `snapctl forget {self.root}`, then "
                f"`snapctl watch {self.root}` to start a new history"
            )
        remove_stale_cookies(self.root)
        self._load_git()
        kind = roots.fs_type(self.root)
        if not roots.delivers_events(kind, self.settings.scan_fs_types):
            self.scan_every_mark = True
            self._warn(
                f"{self.root} is on a {kind} file system, which delivers no change events: "
                "every mark scans the workspace"
            )
        self._stats = StatCache(self.store.load_stats(self.id))

        def watch_dir(rel: bytes) -> bool:
            # A directory captured last time was judged then: skip re-judging 10^4-10^5 names
            # at start-up. If the rules changed meanwhile, the reconcile scan finds the changed
            # rule file and re-applies them to the watches.
            return rel in self._stats or self.rules.dir_may_contain_captured(rel)

        self.watcher = Watcher(self.root, self.on_events, watch_dir, max_watches=self.settings.watch_limit)
        # A known workspace: watch the directories captured last time without listing them
        # (the reconcile scan finds new ones, watched below); a new one: list everything.
        known_dirs = self._stats.directories() if len(self._stats) else None
        self.watcher.start(known_dirs)

        if self._recover is not None:
            self._recover(self)

        def note(done: int, total: int) -> None:
            self.progress = (done, total)
            if progress is not None:
                progress(done, total)

        baseline = None
        with self.lock:
            self.tree = self.store.head(self.id)
            if self.tree is None:
                baseline = self._baseline(note)
            else:
                self._scan(b"", note)
                self.notify("workspace.rescanned", {"reason": "startup"})
                with self._dirty_lock:
                    found = [p for p in self._dirty.paths if p not in self._stats]
                # Directories that appeared while snapd was down: watch them, then list them
                # (what their listing finds is dirty too), so nothing slips between the two.
                self.on_events(self.watcher.watch_new(found))
                self._flush()
        if self.watcher.limit_failures:
            self._watch_shortfall()
        self.progress = None
        trim_memory()
        self._thread = threading.Thread(
            target=self._capture_loop, name=f"snapd-capture:{self.root}", daemon=True
        )
        self._thread.start()
        watches = self.watcher.watch_count
        log.info("workspace.started", workspace=str(self.root), files=self._stats.files(), watches=watches)
        return baseline

    def _watch_shortfall(self) -> None:
        assert self.watcher is not None
        self.scan_every_mark = True
        dirs = count(self.watcher.limit_failures, "directory", "directories")
        limit = self.settings.watch_limit
        if limit is not None and self.watcher.watch_count >= limit:  # our own setting, not the kernel's
            self._warn(
                f"{dirs} could not be watched: snapd's watch_limit setting ({limit} per workspace) "
                "was reached; every mark scans the workspace. Raise watch_limit in config.toml "
                "(or SNAPD_WATCH_LIMIT), then restart snapd"
            )
            return
        self._warn(
            f"{dirs} could not be watched (inotify watch limit): "
            "every mark scans the workspace; raise the limit with "
            "`sudo sysctl fs.inotify.max_user_watches=524288` (and in /etc/sysctl.d/; in a container, its "
            "user namespace's /proc/sys/user/max_inotify_watches), then restart snapd"
        )

    def _warn(self, message: str) -> None:
        """A lasting condition: in status and every mark from now on, and announced once."""
        self.warnings.append(message)
        self.notify("warning", {"message": message})

    def _refusals(self) -> dict[bytes, str]:
        """Directories that cannot be watched for a reason of their own, with what to tell the
        user: the real cause (``Permission denied: PATH``), never the watch limit."""
        refused = self.watcher.refused_dirs() if self.watcher is not None else {}
        return {
            rel: f"{os.strerror(err)}: {shown(rel)} (snapd cannot watch this "
            "directory; changes inside it are not captured while it stays so)"
            for rel, err in sorted(refused.items())
        }

    def rollback_stopped(self, exc: SnapdError, why: str = "that stopped part-way") -> None:
        """A rollback (or the finishing of one) failed with its journal still there: say so
        in ``status`` and every mark until :meth:`finish_rollback` succeeds."""
        try:
            left = safeio.exists(self.journal)
        except SnapdError:
            left = True  # the disk cannot tell: assume the worst, and say so
        if left:
            self.unfinished = f"a rollback {why} is not finished yet: {exc.message}"
            log.error("rollback.unfinished", workspace=str(self.root), error=exc.message)

    def finish_rollback(self) -> None:
        """Finish a rollback that stopped part-way (its journal is still there), before a
        request reads or changes the workspace: the recovery the daemon handed in, as at
        start-up. The caller holds :attr:`lock`, and a barrier must follow, so the capture sees
        what this wrote. A failure is kept in :attr:`unfinished`, shown by status and marks."""
        if self._recover is not None and safeio.exists(self.journal):
            self._recover(self)

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
        with self._dirty_lock:
            self._root_event = False
        why = self.root_problem()
        if why is None:
            return False
        self.lost = why
        log.warning("workspace.lost", workspace=str(self.root), error=why)
        self.notify("warning", {"message": f"capture stopped: {why}"})
        with self._dirty_lock:
            self._dirty = _Dirty()
        if self.watcher is not None:
            self.watcher.stop()
        return True

    def current_warnings(self) -> list[str]:
        """Everything wrong now, for ``status``: lasting conditions and refused directories."""
        pending = [self.unfinished] if self.unfinished else []
        return [*self.warnings, *pending, *self._refusals().values()]

    def _mark_warnings(self) -> tuple[list[str], dict[bytes, int]]:
        """A mark's warnings: the lasting conditions, and each refused directory once — in the
        first mark that finds it so, not again while nothing about it changes. Also what is
        told by then, to keep once the mark is committed."""
        refused = self.watcher.refused_dirs() if self.watcher is not None else {}
        news = self._refusals()
        fresh = [news[rel] for rel, err in refused.items() if self._told.get(rel) != err and rel in news]
        pending = [self.unfinished] if self.unfinished else []
        return [*self.warnings, *pending, *fresh], refused

    def stop(self) -> None:
        self._stopping = True
        with self._dirty_lock:
            self._dirty_lock.notify_all()
        if self.watcher is not None:
            self.watcher.stop()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=10)

    # -- events (watcher thread: keep it quick) -----------------------------------------------

    def on_events(self, events: list[WatchEvent]) -> None:
        with self._dirty_lock:
            d = self._dirty
            for ev in events:
                self.events_seen += 1
                if ev.kind == "overflow":
                    d.full = True
                    d.why.add("overflow")
                    continue
                if ev.path == b"":
                    self._root_event = ev.kind == "deleted" or self._root_event
                    continue  # the root itself: the capture thread checks it
                for path in (ev.path, ev.dest):
                    if path is None:
                        continue
                    if self.rules.is_rule_file(path):
                        d.rules = True
                    d.paths.add(path)
                if ev.is_dir:
                    # A directory's contents get no events of their own when it moves or is
                    # replaced: re-list both ends, so the cached children of the old one go
                    # and the new one's are found ("mv build old && mkdir build").
                    if ev.kind == "moved" and ev.dest is not None:
                        d.scan_dirs.update((ev.path, ev.dest))
                    elif ev.kind == "deleted" or (ev.kind == "created" and ev.path in self._stats):
                        d.scan_dirs.add(ev.path)
            self._dirty_lock.notify_all()

    def pending(self) -> int:
        with self._dirty_lock:
            return len(self._dirty.paths) + len(self._dirty.scan_dirs) + int(self._dirty.full)

    def _take_dirty(self) -> _Dirty:
        with self._dirty_lock:
            d, self._dirty = self._dirty, _Dirty()
            return d

    def _capture_loop(self) -> None:
        while not self._stopping:
            with self._dirty_lock:
                while not self._stopping and not (
                    self._dirty.paths or self._dirty.scan_dirs or self._dirty.full or self._root_event
                ):
                    self._dirty_lock.wait()
            if self._stopping:
                return
            time.sleep(DEBOUNCE_S)  # let a burst (a save, a checkout) settle into one capture
            if self._stop_if_lost():
                return
            try:
                with self.lock:
                    self._flush()
            except SnapdError as exc:  # a full or failing disk: kept dirty, tried again
                log.warning("workspace.capture_failed", workspace=str(self.root), error=exc.message)
                self.notify("warning", {"message": f"capture failed (kept dirty, retried): {exc.message}"})
                time.sleep(1.0)
            except Exception:
                log.exception("workspace.capture_failed", workspace=str(self.root))
                time.sleep(1.0)

    # -- capture -----------------------------------------------------------------------------

    def _load_git(self) -> None:
        self.git_top = git.git_toplevel(self.root)
        repo = git.find_repo(self.rootb) if self.git_top is not None else None
        self._git_index = Path(os.fsdecode(repo.gitdir)) / "index" if repo is not None else None
        self._outside_rules = [Path(os.fsdecode(p)) for p in ignore.outside_rule_files(self.root)]
        self._git_index_sig = self._index_sig()
        tracked = git.git_tracked_files(self.root) if self.git_top else None
        self.rules = ignore.IgnoreRules.load(self.root, self.settings.extra_ignore, tracked)

    def _index_sig(self) -> tuple[int, ...] | None:
        """Signature of git's index and the rule files outside the tree (the common git dir's
        info/exclude, .gitignore files above a root inside a work tree): they are never watched,
        so the tracked set and those rules are re-read when these change (one stat each per
        capture)."""
        if self._git_index is None:
            return None
        sig: list[int] = []
        for path in (self._git_index, *self._outside_rules):
            try:
                st = path.stat()
                sig += [st.st_mtime_ns, st.st_size, st.st_ino]
            except OSError:
                sig += [0, 0, 0]
        return tuple(sig)

    def _refresh_rules_if_needed(self, d: _Dirty) -> bool:
        """Rebuild ignore rules when a rule file or git's index changed (then rescan all)."""
        sig = self._index_sig()
        if not d.rules and sig == self._git_index_sig:
            return False
        self._git_index_sig = sig
        tracked = git.git_tracked_files(self.root) if self.git_top else None
        self.rules = ignore.IgnoreRules.load(self.root, self.settings.extra_ignore, tracked)
        if self.watcher is not None:
            self.watcher.rescan_watches(self.rules.dir_may_contain_captured)
        return True

    def _ignored(self, rel: bytes, is_dir: bool) -> bool:
        return self.rules.is_ignored(rel, is_dir)

    def _tallying(self, tally: ingest.IgnoredTally) -> reader.Ignored:
        """An ignore predicate that also counts what it leaves out, by reason (for reports)."""

        def ignored(rel: bytes, is_dir: bool) -> bool:
            reason = self.rules.reason(rel, is_dir)
            if reason is None:
                return False
            if reason != "snapd":  # snapd's own cookies are nobody's business
                tally.add(reason, rel)
            return True

        return ignored

    def _baseline(self, progress: Progress | None) -> Mark:
        report = ingest.Report()
        descend = self.rules.dir_may_contain_captured
        tally = ingest.IgnoredTally()

        unlistable: dict[bytes, str] = {}

        def unreadable(rel: bytes, why: str) -> None:  # recorded as unlisted below, and reported
            unlistable[rel] = why

        walked = reader.walk(
            self.rootb, self._tallying(tally), descend=descend, unreadable=unreadable, counters=self.counters
        )
        rels = [rel for rel, _ in walked]
        self.ignored = tally
        done = [0]

        def counted() -> Iterator[bytes]:
            for rel in rels:
                done[0] += 1
                if progress is not None and done[0] % 500 == 0:
                    progress(done[0], len(rels))
                yield rel

        with self.store.batch() as batch:
            changes = ingest.capture(
                batch,
                self.rootb,
                counted(),
                report,
                size_cap=self.settings.size_cap,
                ws=self.id,
                parallel=True,
                on_read=self._note_read,
                from_walk=True,
                counters=self.counters,
            )
            for rel, why in unlistable.items():  # a listing failed where access() said it would not
                change = changes.get(rel)
                if isinstance(change, trees.Dir) and change.listed:
                    changes[rel] = trees.Dir(change.mode, listed=False)
                    report.skip(rel, why)
                    self._skip(rel, why)
            tree = batch.apply(None, changes)
            added = [p for p, c in changes.items() if c is not None]
            summary = ingest.summarize(batch, None, tree, report, added)
            summary["warnings"], told = self._mark_warnings()
            summary["ignored"] = self.ignored.to_json()
            batch.add_mark(
                self.id,
                "baseline",
                tree,
                kind="baseline",
                summary=summary,
                git_head=self._git_head(),
                **self._mark_state(batch),
            )
            self._stage_stats(batch)
            (mark,) = batch.commit()
        if progress is not None:
            progress(len(rels), len(rels))
        self._told = told
        self.tree = tree
        return mark

    def _note_read(self, r: reader.Read) -> None:
        """Keep the stat cache and the skipped list in step with what a capture read."""
        was = self._stats.get(r.rel)
        if was is not None and stat.S_ISDIR(was[0][0]) and r.kind != "dir" and self._skipped:
            for gone in [p for p in self._skipped if paths.strictly_below(p, r.rel)]:
                del self._skipped[gone]  # its directory went: so did what could not be read in it
        if r.kind == "skipped":
            self._skip(r.rel, r.reason)
            if r.sig is None:
                self._stats.remove(r.rel)
            else:  # the tree holds it (uncaptured): scans must see it go; read time 0: always re-read
                self._stats.set(r.rel, r.sig, 0)
            return
        self._skipped.pop(r.rel, None)
        if r.kind == "dir" and not r.listed:  # its contents are unknown: a rollback keeps them
            self._skip(r.rel, r.reason)
        if r.kind == "missing" or r.sig is None:
            self._stats.remove(r.rel)
        else:
            # An unstable file gets read time 0: never trusted, so the next scan reads it again.
            self._stats.set(r.rel, r.sig, 0 if r.unstable else time.time_ns())
            if r.kind == "file":
                self._stats.note_links(r.rel, (r.dev, r.sig[4]), r.nlink)

    def _skip(self, rel: bytes, reason: str) -> None:
        """``rel`` is on disk but its content is not captured; announced when that is news."""
        if self._skipped.get(rel) != reason:
            self._skipped[rel] = reason
            self.notify("capture.skipped", {"path": rel, "reason": reason})

    def _stage_stats(self, batch: Batch) -> None:
        for path, entry in self._stats.take_changes().items():
            batch.set_stat(self.id, path, entry)

    def _scan(self, top: bytes, progress: Progress | None = None, *, trust_listings: bool = True) -> None:
        """Queue what differs from the stat cache under ``top`` (b"" = all), reading no file."""
        tally = ingest.IgnoredTally()
        full = not top and not trust_listings  # every name is judged: a complete count
        dirty = scan.scan(
            self.rootb,
            top,
            self._stats,
            self._tallying(tally) if full else self._ignored,
            self.rules.dir_may_contain_captured,
            trust_listings=trust_listings,
            progress=progress,
            counters=self.counters,
        )
        if full:
            self.ignored = tally
        with self._dirty_lock:
            self._dirty.paths |= dirty
            if any(self.rules.is_rule_file(p) for p in dirty):
                self._dirty.rules = True  # a rule file changed while unobserved

    def _flush(self, label: str | None = None, **meta: Any) -> Mark | None:
        """Capture everything dirty; with ``label``, also commit a mark. Caller holds the lock."""
        d = self._take_dirty()
        refreshed = self._refresh_rules_if_needed(d)
        if refreshed:
            self._scan(b"", trust_listings=False)  # judge every name again under the new rules
            self.notify("workspace.rescanned", {"reason": "rules_changed"})
            new = self._take_dirty()
            d = _merge(d, new)
            d.full = new.full  # this scan covered any earlier overflow, not one reported since
            d.why = new.why
        for top in d.scan_dirs:
            self._scan(top)
        if d.scan_dirs:
            d = _merge(d, self._take_dirty())
        # Last, and again whenever a merge brought one in: an overflow (or a barrier timeout)
        # reported while we scanned means lost events, which only a full scan recovers.
        full = d.full or (label is not None and self.scan_every_mark)
        reasons = sorted(d.why) or ["scan_every_mark"]
        while full:
            self._scan(b"")
            for reason in reasons:
                self.notify("workspace.rescanned", {"reason": reason})
            new = self._take_dirty()
            full = new.full  # another overflow while we scanned: scan again
            reasons = sorted(new.why)
            d = _merge(d, new)
            d.full = False
        if d.rules and not refreshed:  # a rule file changed during the scans: next flush
            with self._dirty_lock:
                self._dirty.rules = self._dirty.full = True
                self._dirty.why.add("rules_changed")
                self._dirty_lock.notify_all()
        paths = sorted(p for p in d.paths if self._wanted(p))
        if not paths and label is None:
            return None
        try:
            return self._commit(paths, label, **meta)
        except BaseException:
            # Nothing was committed: forget what the cache learnt and read it all again.
            for path in self._stats.take_changes():
                self._stats.remove(path)
            with self._dirty_lock:
                self._dirty.paths.update(paths)
            raise

    def _wanted(self, rel: bytes) -> bool:
        """Capture ``rel``: not ignored, or ignored now but still in the tree (to drop it)."""
        try:  # lstat: a symlink named like an ignored directory ("build/") is not a directory
            is_dir = stat.S_ISDIR(reader.lstat(self.rootb + b"/" + rel, self.counters).st_mode)
        except OSError:
            is_dir = False
        return not self._ignored(rel, is_dir) or rel in self._stats

    def _capture(self, batch: Batch, paths: list[bytes]) -> dict[bytes, trees.Change]:
        """Read ``paths`` into ``batch``, and with each file that has other links, its other
        captured names: a write through one name changed them all, and only that name had an
        event."""
        linked: list[bytes] = []

        def on_read(r: reader.Read) -> None:
            self._note_read(r)
            if r.kind == "file" and r.nlink > 1:
                linked.append(r.rel)

        captured: dict[bytes, trees.Change] = {}
        todo = paths
        while todo:
            captured.update(
                ingest.capture(
                    batch,
                    self.rootb,
                    todo,
                    self._since_mark,
                    size_cap=self.settings.size_cap,
                    ws=self.id,
                    on_read=on_read,
                    counters=self.counters,
                )
            )
            todo = sorted({o for p in linked for o in self._stats.linked(p)} - captured.keys())
            linked.clear()
        return captured

    def _commit(self, paths: list[bytes], label: str | None, **meta: Any) -> Mark | None:
        hold: Sequence[bytes] = meta.pop("hold", ())
        note: dict[str, Any] = meta.pop("note", None) or {}  # facts the caller adds to the summary
        with self.store.batch() as batch:
            changes: dict[bytes, trees.Change] = {}
            captured = self._capture(batch, paths)
            for rel, change in captured.items():
                if change is not None and self._ignored(rel, isinstance(change, trees.Dir)):
                    change = None  # now ignored (rules changed): no longer captured
                    self._stats.remove(rel)
                changes[rel] = change
            tree = batch.apply(self.tree, changes) if changes else self.tree
            assert tree is not None
            mark = None
            told = self._told
            if label is None:
                batch.set_head(self.id, tree)
            else:
                head = tree
                if hold:  # the mark also holds these, whatever today's rules (a pre-rollback mark)
                    tree = batch.apply(tree, self._read_held(batch, hold)[0])
                prev = self.store.latest_mark(self.id)
                summary = ingest.summarize(batch, prev.tree if prev else None, tree, self._since_mark)
                summary["warnings"], told = self._mark_warnings()
                summary["ignored"] = self.ignored.to_json()
                summary.update(note)
                mark = batch.add_mark(
                    self.id,
                    label,
                    tree,
                    git_head=self._git_head(),
                    summary=summary,
                    **self._mark_state(batch),
                    **meta,
                )
                batch.set_head(self.id, head)
                tree = head
            self._stage_stats(batch)
            committed = batch.commit()
        self.tree = tree
        self._told = told
        if mark is not None:
            self._since_mark = ingest.Report()
            return committed[0]
        return None

    def _read_held(
        self, batch: Batch, paths: Sequence[bytes]
    ) -> tuple[dict[bytes, trees.Change], dict[bytes, str]]:
        """Read ``paths`` (and their parents) into ``batch`` whatever today's ignore rules: the
        changes, and why each path that could not be read was skipped."""
        wanted = set(paths)
        for p in paths:
            parts = p.split(b"/")
            wanted.update(b"/".join(parts[:i]) for i in range(1, len(parts)))
        skipped: dict[bytes, str] = {}

        def note(r: reader.Read) -> None:
            if r.kind == "skipped":
                skipped[r.rel] = r.reason

        changes = ingest.capture(
            batch,
            self.rootb,
            sorted(wanted, key=lambda p: p.split(b"/")),
            ingest.Report(),
            size_cap=self.settings.size_cap,
            on_read=note,
            counters=self.counters,
        )
        return changes, skipped

    def hold(self, tree: str, paths: Sequence[bytes]) -> tuple[str, dict[bytes, str]]:
        """``tree`` plus the state on disk of ``paths``, which today's rules leave out (a
        rollback holds every path it touches), and the paths that could not be
        read. The objects are stored; no mark or head changes."""
        if not paths:
            return tree, {}
        with self.store.batch() as batch:
            changes, skipped = self._read_held(batch, paths)
            held = batch.apply(tree, changes)
            batch.commit()
        return held, skipped

    def _mark_state(self, batch: Batch) -> dict[str, Any]:
        """What a mark records beside its tree: the rule inputs that live outside the tree (one
        shared object per distinct set) and the root's own mode (a rollback restores it)."""
        inputs = self.rules.inputs
        if self._rules_record is None or self._rules_record[0] is not inputs:
            data = inputs.encode()
            self._rules_record = (inputs, data, self.store.hasher(data))
        _, data, digest = self._rules_record
        try:
            root_mode: int | None = stat.S_IMODE(os.stat(self.rootb).st_mode)
        except OSError:
            root_mode = None  # the barrier reports a vanished root; nothing to restore here
        return {"rules": batch.put(data, digest), "root_mode": root_mode}

    def git_head(self) -> str | None:
        return self._git_head()

    def _git_head(self) -> str | None:
        return git.git_head(self.root) if self.git_top is not None else None

    # -- marks -------------------------------------------------------------------------------

    def _check_root(self) -> str:
        return roots.identity(self.root)

    def _barrier(self) -> None:
        """Every change completed before now is in the dirty set (or a full rescan is queued)."""
        if (why := roots.replaced(self.root, self.root_id)) is not None:
            raise WorkspaceRefused(why)
        if self.lost is not None:  # the directory is back, but capture stopped meanwhile
            raise WorkspaceRefused(
                f"snapd stopped capturing {self.root} ({self.lost}); `snapctl watch {self.root}` resumes it"
            )
        if self.watcher is not None and self.watcher.limit_failures and not self.scan_every_mark:
            self._watch_shortfall()
        ok = self.watcher is not None and self.watcher.barrier(self.settings.barrier_timeout_s)
        with self.lock:  # the stat cache is the capture thread's
            changed_links = self._recheck_loose_links()
        with self._dirty_lock:
            self._dirty.paths.update(changed_links)
            if not ok:
                log.warning("workspace.barrier_failed", workspace=str(self.root))
                self._dirty.full = True
                self._dirty.why.add("barrier_timeout")

    def _recheck_loose_links(self) -> list[bytes]:
        """Files with a name outside the root (or ignored) were maybe written through it, which
        no watch of ours reports: re-stat them; those that differ from the cache are dirty."""
        now = time.time_ns()
        changed = []
        for rel in self._stats.loose_links():
            try:
                sig = reader.sig_of(reader.lstat(self.rootb + b"/" + rel, self.counters))
            except OSError:
                sig = None
            if sig is None or not self._stats.is_clean(rel, sig, now):
                changed.append(rel)
        return changed

    def sync(self) -> str:
        """Capture everything changed before this call; the captured tree. Takes the lock."""
        with self.lock:
            return self.sync_locked()

    def sync_locked(self, *, rescan: bool = False) -> str:
        """:meth:`sync` for a caller that holds :attr:`lock` (a rollback).

        ``rescan``: also compare every captured path with the stat cache (one ``lstat`` each),
        for changes no event reports: a file written through a hard link whose other name is
        ignored or outside the root, linked there since the last read (the link count changes
        on the inode, and inotify reports that to no watched directory)."""
        self.finish_rollback()
        self._barrier()  # after: what finishing it wrote is in this capture
        if rescan:
            with self._dirty_lock:
                self._dirty.full = True
        self._flush()
        assert self.tree is not None
        return self.tree

    def mark(self, label: str, *, locked: bool = False, **meta: Any) -> Mark:
        """A durable mark holding every change completed before this call (the barrier: docs/architecture.md).

        ``locked``: the caller already holds :attr:`lock` (a rollback's pre-rollback mark).
        """
        if not locked and safeio.exists(self.journal):
            with self.lock:
                self.finish_rollback()
        self._barrier()
        if locked:
            return self._flush_mark(label, meta)
        with self.lock:
            return self._flush_mark(label, meta)

    def _flush_mark(self, label: str, meta: dict[str, Any]) -> Mark:
        """Under :attr:`lock`: the mark, and its event published before the lock is let go, so
        subscribers see marks in the order of their seq (two marks' events never cross)."""
        mark = self._flush(label, **meta)
        assert mark is not None
        log.info(
            "mark.created",
            workspace=str(self.root),
            mark=mark.id,
            label=label,
            changed=mark.summary.get("changed", 0),
        )
        self.notify("mark.created", {"mark": mark})
        return mark

    @property
    def skipped(self) -> dict[bytes, str]:
        """Paths on disk whose content is not captured (over the cap, unreadable, special)."""
        return dict(self._skipped)

    @property
    def journal(self) -> Path:
        """Where a rollback of this workspace keeps its write-ahead journal."""
        return self.store.dir / "journal" / f"workspace-{self.id}.json"

    def status(self) -> dict[str, Any]:
        examples = [os.fsdecode(p) for p in list(self._skipped)[:10]]
        return {
            "root": str(self.root),
            "files": self._stats.files(),
            "skipped": len(self._skipped),
            "skipped_examples": examples,
            "ignored": self.ignored.to_json(),
            "pending": self.pending(),
            "watches": self.watcher.watch_count if self.watcher and self.watcher.running else 0,
            "watch_failures": self.watcher.watch_failures if self.watcher else 0,
            "overflows": self.watcher.overflowed if self.watcher else 0,
            "hardlinks_rechecked": len(self._stats.loose_links()),
            "scan_every_mark": self.scan_every_mark,
            "warnings": self.current_warnings(),
            "progress": self.progress,
            "counters": self.counters.to_json(),
            "recovered_rollback": self.recovered,
        }


def _merge(a: _Dirty, b: _Dirty) -> _Dirty:
    return _Dirty(
        a.paths | b.paths, a.scan_dirs | b.scan_dirs, a.full or b.full, a.rules or b.rules, a.why | b.why
    )
