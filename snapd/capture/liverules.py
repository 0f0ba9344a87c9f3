"""The ignore rules in force for one live workspace, and when to rebuild them.

Rule files inside the tree are watched: a change to one flags a rebuild (the dirty set's
``rules``). What lies outside the tree is not watched — git's index (the tracked set), the
common git dir's ``info/exclude`` (a linked worktree's is the main repository's) and, for a
root inside a work tree, the ``.gitignore`` files above it — so each capture stats those once
(:meth:`LiveRules.reload_if_changed`). A mark records the rules' outside inputs as one shared
object per distinct set (:meth:`LiveRules.record`).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterable, Sequence
from pathlib import Path

from snapd.capture import git, ignore, ingest, reader
from snapd.capture.statcache import StatCache
from snapd.store.batch import Batch
from snapd.store.store import Store

_Precious = tuple[ignore.IgnoreRules, StatCache, set[bytes]]
"""What :meth:`LiveRules.precious_files` judged last: the rules, the stat cache, the precious
files found (kept up to date in place)."""


class LiveRules:
    """``current``: the :class:`~snapd.capture.ignore.IgnoreRules` to judge paths by now."""

    def __init__(self, root: Path, extra: Sequence[str], precious: Sequence[str] = ()) -> None:
        self.root = root
        self._extra = tuple(extra)
        self._precious = tuple(precious)
        self.current = ignore.IgnoreRules.load(root, self._extra, precious=self._precious)
        self.git_top: Path | None = None
        self._head: git.HeadCache | None = None
        self._index: Path | None = None
        self._outside: list[Path] = []  # ignore.outside_rule_files, stat'ed with the index
        self._sig: tuple[int, ...] | None = None
        self._record: tuple[ignore.RuleInputs, bytes, str] | None = None  # inputs, bytes, digest
        self._precious_seen: _Precious | None = None
        self._precious_lock = threading.Lock()

    def load(self) -> None:
        """Find the repository (if any) and build the rules with git's tracked files."""
        self.git_top = git.git_toplevel(self.root)
        repo = git.find_repo(os.fsencode(self.root)) if self.git_top is not None else None
        self._index = Path(os.fsdecode(repo.gitdir)) / "index" if repo is not None else None
        self._head = git.HeadCache(self.root, repo) if repo is not None else None
        self._outside = [Path(os.fsdecode(p)) for p in ignore.outside_rule_files(self.root)]
        self._sig = self._outside_sig()
        self._rebuild()

    def _rebuild(self) -> None:
        tracked = git.git_tracked_files(self.root) if self.git_top else None
        self.current = ignore.IgnoreRules.load(self.root, self._extra, tracked, self._precious)

    def _outside_sig(self) -> tuple[int, ...] | None:
        """Signature of git's index and the rule files outside the tree: they are never
        watched, so the tracked set and those rules are re-read when these change (one stat
        each per capture)."""
        if self._index is None:
            return None
        sig: list[int] = []
        for path in (self._index, *self._outside):
            try:
                st = path.stat()
                sig += [st.st_mtime_ns, st.st_size, st.st_ino]
            except OSError:
                sig += [0, 0, 0]
        return tuple(sig)

    def reload_if_changed(self, rule_file_changed: bool) -> bool:
        """Rebuild the rules when a rule file in the tree or git's index (or a rule file
        outside the tree) changed; True when they were rebuilt (then rescan all)."""
        sig = self._outside_sig()
        if not rule_file_changed and sig == self._sig:
            return False
        self._sig = sig
        self._rebuild()
        return True

    def git_head(self) -> str | None:
        if self.git_top is None:
            return None
        return self._head.get() if self._head is not None else git.git_head(self.root)

    def is_ignored(self, rel: bytes, is_dir: bool) -> bool:
        return self.current.is_ignored(rel, is_dir)

    def tallying(self, tally: ingest.IgnoredTally) -> reader.Ignored:
        """An ignore predicate that also counts what it leaves out, by reason (for reports)."""

        def ignored(rel: bytes, is_dir: bool) -> bool:
            reason = self.current.reason(rel, is_dir)
            if reason is None:
                return False
            if reason != "snapd":  # snapd's own cookies are nobody's business
                tally.add(reason, rel)
            return True

        return ignored

    def precious_files(self, stats: StatCache) -> list[bytes]:
        """The files of ``stats`` captured only because they are precious (for status), in
        byte order. Judged whole when the rules or the cache are new to this call, else
        again only at the paths the cache set or removed since (:meth:`StatCache.take_touched`):
        a status after each mark of a 500,000-file workspace judged them all (0.45 s)."""
        with self._precious_lock:  # two requests' statuses at once: one judges, then the other
            return self._precious_files(stats)

    def _precious_files(self, stats: StatCache) -> list[bytes]:
        touched = stats.take_touched()  # first: what changes while judging is in the next one
        rules, seen = self.current, self._precious_seen
        whole = touched is None or b"" in touched  # the root itself removed: everything went
        if whole or seen is None or seen[0] is not rules or seen[1] is not stats:
            found = {p for p in stats.regular_files() if rules.is_precious(p)}
            self._precious_seen = (rules, stats, found)
            return sorted(found)
        found = seen[2]
        if touched:
            for p in touched:
                if stats.is_file(p) and rules.is_precious(p):
                    found.add(p)
                else:
                    found.discard(p)
            # A path removed took everything below it along; some may be back since.
            below = [p for p in found if any(a in touched for a in _above(p))]
            found.difference_update(p for p in below if not stats.is_file(p))
        return sorted(found)  # few: sorted each time rather than kept twice

    def record(self, store: Store, batch: Batch) -> str:
        """The key of the current rules' outside inputs, stored in ``batch`` (one object per
        distinct set, encoded once while the rules stay the same)."""
        inputs = self.current.inputs
        if self._record is None or self._record[0] is not inputs:
            data = inputs.encode()
            self._record = (inputs, data, store.hasher(data))
        _, data, digest = self._record
        return batch.put(data, digest)


def _above(path: bytes) -> Iterable[bytes]:
    """Each directory above ``path`` (``a/b/c``: ``a/b``, ``a``)."""
    while b"/" in path:
        path = path.rpartition(b"/")[0]
        yield path
