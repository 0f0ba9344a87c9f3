"""The top-most ignored entries present in a live workspace, kept in step as captures judge names.

What a mark records of its ignored paths (:mod:`snapd.store.ignored`): their names, so a
rollback can tell an ignored path that existed at the mark from one that did not. Kept up to
date from what the capture side sees anyway, never by a walk of its own:

- every listing of a directory (a baseline's walk, a scan's re-listing, a subtree scan) judges
  each name in it; the names it leaves out as ignored replace what was known of that
  directory (:meth:`IgnoredNow.listed`);
- every dirty path (an event, or what a scan found) is judged when the capture asks whether
  to read it (:meth:`IgnoredNow.saw`): an ignored entry there now is added, anything else
  removed, and a path that is no longer a directory takes what was known below it along;
- a rules change re-judges every name (a scan that lists everything: :meth:`IgnoredNow.reset`
  first).

So the set costs O(changes) like the rest of a capture. A directory whose listing a scan
trusts (its signature unchanged) gained and lost no entry, ignored ones included.

"Top-most": the rules ignore the entry and walk its parent (the root, a captured directory, or
an ignored one that holds tracked files). VCS directories and snapd's own files are never in
it: no rules ever capture them. The set is recorded beside the head tree at each commit that
changed it and by every mark (:meth:`IgnoredNow.record`), and loaded back at a restart.
"""

from __future__ import annotations

import os
import stat

from snapd.capture import ignore, reader
from snapd.capture.counters import Counters
from snapd.paths import is_integration_file, is_snapd_name
from snapd.store.batch import Batch
from snapd.store.ignored import IgnoredNames
from snapd.store.store import Store


def _worth(rel: bytes) -> bool:
    """Not a VCS directory nor snapd's own file: no rules ever capture those (what
    :meth:`~snapd.capture.ignore.IgnoreRules.reason` calls "vcs" and "snapd" of an entry whose
    parent is walked)."""
    name = rel.rpartition(b"/")[2]
    return name not in ignore.VCS_NAMES and not is_snapd_name(name) and not is_integration_file(rel)


class IgnoredNow:
    """``known``: False until the set was learnt (loaded, or built by a walk that judged every
    name); a mark records none meanwhile."""

    def __init__(self, rootb: bytes, counters: Counters | None = None) -> None:
        self._root = rootb
        self._counters = counters
        self._by_dir: dict[bytes, set[bytes]] = {}  # parent directory -> its ignored entries
        self._holding: dict[bytes, int] = {}  # directory -> how many keys of _by_dir lie at or below it
        self.known = False
        self._version = 0  # bumped at every change
        self._record: tuple[int, bytes, str] | None = None  # (version, bytes, digest) last encoded
        self._committed = -1  # the version the workspace row holds
        self._put: int | None = None  # the version put into the batch being committed

    # -- what the capture side tells ------------------------------------------------------------

    def reset(self) -> None:
        """Every name is about to be judged again (a walk or scan that lists everything)."""
        if self._by_dir:
            self._version += 1
        self._by_dir.clear()
        self._holding.clear()
        self.known = True

    def load(self, names: IgnoredNames) -> None:
        """Start from a recorded set (a restart: the reconcile scan corrects it from there)."""
        self.reset()
        for rel in names.names:
            self._add(rel)
        self._committed = self._version

    def listed(self, rel_dir: bytes, left_out: list[tuple[bytes, bool]]) -> None:
        """A fresh listing of ``rel_dir`` left ``left_out`` out as ignored: they are its ignored
        entries now (what it held before and lacks now went)."""
        now = {rel for rel, _ in left_out if _worth(rel)}
        was = self._by_dir.get(rel_dir, set())
        if now == was:
            return
        for rel in was - now:
            self._remove(rel)
        for rel in now - was:
            self._add(rel)

    def saw(self, rel: bytes, st: os.stat_result | None, ignored: bool, rules: ignore.IgnoreRules) -> None:
        """``rel`` is dirty and was just ``lstat``'ed (``st``; None: gone), and ``rules``
        ignore it (``ignored``) or not: judge it."""
        is_dir = st is not None and stat.S_ISDIR(st.st_mode)
        if not is_dir and rel in self._holding:  # what was known below a directory went with it
            for d in [d for d in self._by_dir if d == rel or d.startswith(rel + b"/")]:
                for gone in list(self._by_dir.get(d, ())):
                    self._remove(gone)
        parent = rel.rpartition(b"/")[0]
        if ignored and st is not None and rel in self._by_dir.get(parent, ()):
            return  # still there (an ignored log written to): nothing more to look at
        present = (
            st is not None
            and ignored
            and _worth(rel)
            and (not parent or rules.dir_may_contain_captured(parent))
            and not (is_dir and rules.dir_may_contain_captured(rel))
            and reader.parents_real(self._root, rel, self._counters)
        )
        if present:
            self._add(rel)
        else:
            self._remove(rel)

    # -- what a commit records -------------------------------------------------------------------

    @property
    def unrecorded(self) -> bool:
        """Whether the set changed since the last commit recorded it (a capture that reads no
        path commits for it alone: an ignored file made, or removed)."""
        return self.known and self._version != self._committed

    def names(self) -> IgnoredNames:
        return IgnoredNames.of(rel for entries in self._by_dir.values() for rel in entries)

    def record(self, store: Store, batch: Batch, ws: int) -> str | None:
        """The key of the current set, stored in ``batch`` (None while unknown): every commit's
        state holds it, and the workspace row takes it when it changed. The set is encoded only
        when it changed since the last encoding: a commit whose set did not change shares its
        object with the last."""
        if not self.known:
            return None
        if self._record is None or self._record[0] != self._version:
            data = self.names().encode()
            if self._counters is not None:
                self._counters.encoded_ignored_names()
            self._record = (self._version, data, store.hasher(data))
        version, data, digest = self._record
        key = batch.put(data, digest)
        if version != self._committed:
            batch.set_ignored(ws, key)
        self._put = version
        return key

    def committed(self) -> None:
        """The batch :meth:`record` last put the set into committed (the workspace lock held
        throughout: the set did not change in between)."""
        if self._put is not None:
            self._committed, self._put = self._put, None

    # -- internals -------------------------------------------------------------------------------

    def _add(self, rel: bytes) -> None:
        parent = rel.rpartition(b"/")[0]
        entries = self._by_dir.get(parent)
        if entries is None:
            entries = self._by_dir[parent] = set()
            for d in (parent, *_holders(parent)):
                self._holding[d] = self._holding.get(d, 0) + 1
        if rel not in entries:
            entries.add(rel)
            self._version += 1

    def _remove(self, rel: bytes) -> None:
        parent = rel.rpartition(b"/")[0]
        entries = self._by_dir.get(parent)
        if entries is None or rel not in entries:
            return
        entries.discard(rel)
        self._version += 1
        if not entries:
            del self._by_dir[parent]
            for d in (parent, *_holders(parent)):
                n = self._holding[d] - 1
                if n:
                    self._holding[d] = n
                else:
                    del self._holding[d]


def _holders(rel_dir: bytes) -> list[bytes]:
    """The directories holding ``rel_dir``, the root (``b""``) included unless it is the root."""
    out = []
    while rel_dir:
        rel_dir = rel_dir.rpartition(b"/")[0]
        out.append(rel_dir)
    return out
