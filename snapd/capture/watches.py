"""The watch table of one root: which directory each inotify watch is on, and what failed.

Watches belong to directories, not names. The watches of a directory whose IN_MOVED_FROM is
read are *detached* at once: taken off the path tables and held by the pending move. Its
IN_MOVED_TO re-attaches them under the new name (:meth:`WatchTable.reattach`); a move resolved
as leaving the tree removes only those still detached (:meth:`WatchTable.release`). So
whatever arrives under the old name in between — another directory renamed there
(``mv out /x && mv out.new out``), or the same directory moved back (the kernel hands back the
same watch descriptors) — keeps its watches.

A rename *onto* a watched directory's name *displaces* that directory: its watches are set
aside as well (:meth:`WatchTable.displace`), since the name now belongs to the arrival. The
same rename(2) then says which way it went, before anything else can touch that name: an
empty directory renamed over gets an ``IN_ATTRIB`` of its own (its link count: it is dead,
:meth:`WatchTable.replaced`), while ``renameat2(RENAME_EXCHANGE)`` queues a second move whose
``IN_MOVED_FROM`` names the displaced directory's old place (``MOVED_FROM a, MOVED_TO b,
MOVED_FROM b, MOVED_TO a``, two cookies): :meth:`WatchTable.detach` then takes the displaced
watches, not the arrival's, and the second ``IN_MOVED_TO`` re-attaches them at the other name.

A directory is watched first and listed second, so nothing created in between is missed.
Failures are counted: those due to the kernel's limits (:data:`LIMITS`) apart, since where they
lie is anyone's guess; the others (``EACCES``...) are *refused* directories, kept by name until
a watch on them is placed again. A directory watched already keeps its watch when placing it
again is refused (made unreadable since: the kernel checks permission at placing only). Not
thread-safe: the watcher's lock guards it.
"""

from __future__ import annotations

import errno
import os
from collections import deque
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Final

import structlog

from snapd.capture import inotify
from snapd.capture.counters import Counters
from snapd.capture.reader import Listing, entry_is_dir
from snapd.errors import WorkspaceRefused
from snapd.paths import at_or_below, is_cookie_name, join

log = structlog.get_logger(__name__)

# Watch failures that are not races with the tree changing under us.
_RACES: Final = frozenset({errno.ENOENT, errno.ENOTDIR, errno.ELOOP})
# ... that are the kernel's limits (fs.inotify.max_user_watches, memory), not the directory's.
LIMITS: Final = frozenset({errno.ENOSPC, errno.ENOMEM})

class WatchTable:
    """inotify watches of one root by watch descriptor and by path, on one inotify instance.

    ``should_watch_dir(rel_dir)`` is asked before a directory below the root gets a watch
    (the root is always watched). ``max_watches`` is snapd's ``watch_limit`` setting: past
    it a directory is refused as at the kernel's limit (``ENOSPC``). ``counters`` counts the
    directories listed.
    """

    def __init__(
        self,
        root: Path,
        should_watch_dir: Callable[[bytes], bool],
        max_watches: int | None,
        counters: Counters | None = None,
    ) -> None:
        self.root = root
        self._counters = counters
        self._root_b = os.fsencode(root)
        self.should_watch_dir = should_watch_dir
        self._max_watches = max_watches
        self.fd = -1
        self.root_wd = -1
        self._wd_path: dict[int, bytes] = {}
        self._path_wd: dict[bytes, int] = {}
        # Watches of directories moved away whose move is not resolved yet:
        # wd -> (the move's cookie, path relative to the moved directory, b"" for itself).
        # A displaced directory's are held under a key of its own below zero (no cookie is).
        self._detached: dict[int, tuple[int, bytes]] = {}
        # Names a rename just took from a watched (or refused) directory -> its key above.
        self._displaced: dict[bytes, int] = {}
        self._last_key = 0
        # The disk was found ahead of the records read so far (a name they give a directory
        # now holds another): names may be off until :meth:`resync`, which trusts the disk.
        self.behind = False
        self._trust_disk = False
        self.failures = 0
        self.limit_failures = 0
        self.failed_dirs: deque[tuple[bytes, int]] = deque(maxlen=32)
        # Directories left unwatched for a reason of their own (EACCES...), until watched again.
        self.refused: dict[bytes, int] = {}
        # Directories that are another watched directory, mounted there too (bind mounts) ->
        # that directory: inotify has one watch per directory, so one name gets its events.
        self.aliased: dict[bytes, bytes] = {}

    def __len__(self) -> int:
        return len(self._path_wd)

    def __contains__(self, rel: bytes) -> bool:
        return rel in self._path_wd

    def path_of(self, wd: int) -> bytes | None:
        """The directory ``wd`` watches, None for a removed or detached watch."""
        return self._wd_path.get(wd)

    def open(self, *, whole_tree: bool) -> None:
        """A new inotify instance with the root watched and, with ``whole_tree``, every
        directory below it (watched, then listed); else the caller places the others: the
        directories a previous run captured (:meth:`place`), or a new workspace's, one at a
        time as its baseline walks them (:meth:`watch_and_list`)."""
        self.fd = inotify.open_instance(self.root)
        try:
            self.root_wd = self.add(b"", root=True)
            if whole_tree:
                self.add_tree(b"", None)
        except BaseException:
            os.close(self.fd)
            self.fd = -1
            self._path_wd.clear()
            self._wd_path.clear()
            raise

    def place(self, dirs: Iterable[bytes]) -> None:
        """Watch, unlisted, each of ``dirs`` (parents before children) whose parent is
        watched: directories a previous run captured, whose listing the reconcile scan
        checks (:mod:`snapd.capture.placement`). They are not judged again: they were when
        captured, and if the rules changed since, the reconcile scan finds the changed rule
        file and the watches are re-judged (:meth:`resync`)."""
        for rel in dirs:
            parent = rel.rpartition(b"/")[0]
            if parent == b"" or parent in self._path_wd:
                self.add(rel)

    def close(self) -> None:
        """Forget every watch and close the instance (which drops them in the kernel)."""
        self._path_wd.clear()
        self._wd_path.clear()
        self._detached.clear()
        self._displaced.clear()
        self.refused.clear()
        os.close(self.fd)
        self.fd = -1

    def watch_found(self, dirs: Iterable[bytes], found: Listing) -> None:
        """Watch directories found after :meth:`open` (and everything below them) whose parent
        is watched; append what their listings find."""
        for rel in sorted(dirs, key=lambda p: p.count(b"/")):
            parent = rel.rpartition(b"/")[0]
            if rel in self._path_wd or (parent and parent not in self._path_wd):
                continue
            full = os.path.join(self._root_b, rel)
            if os.path.isdir(full) and not os.path.islink(full):
                self.add_tree(rel, found)

    def should_watch(self, rel: bytes) -> bool:
        if rel == b"":
            return True
        try:
            return bool(self.should_watch_dir(rel))
        except Exception:  # a bug in the predicate must not cost us changes
            log.exception("watcher.predicate_failed", path=rel.decode("utf-8", "backslashreplace"))
            return True

    def add(self, rel: bytes, *, root: bool = False, vanished: list[bytes] | None = None) -> int:
        """Watch directory ``rel``; returns its wd, or -1 after counting a failure (with
        ``vanished``, a directory gone or no longer one is appended to it instead)."""
        full = self._root_b + b"/" + rel if rel else self._root_b
        if (
            self._max_watches is not None
            and rel not in self._path_wd
            and len(self._path_wd) >= self._max_watches
        ):
            wd, err = -1, errno.ENOSPC
        else:
            wd, err = inotify.add_watch(self.fd, full)
        if wd < 0:
            if root:
                raise WorkspaceRefused(
                    f"cannot watch {self.root}: {os.strerror(err)}"
                    + (" (raise fs.inotify.max_user_watches)" if err == errno.ENOSPC else ""),
                    errno=err,
                )
            if err not in _RACES and err not in LIMITS and rel in self._path_wd and not self.behind:
                # Placed again (a resync) on a directory watched already, now unreadable: the
                # kernel checks permission only when placing a watch, so the one it has still
                # reports. Removing it would blind us to what changes inside.
                return self._path_wd[rel]
            if err in _RACES and vanished is not None:
                vanished.append(rel)
            elif err not in _RACES and self.refused.get(rel) != err:  # each refusal counts once
                self.failures += 1
                if err in LIMITS:
                    self.limit_failures += 1
                else:
                    self.refused[rel] = err
                self.failed_dirs.append((rel, err))
                report = log.warning if self.failures <= 5 else log.debug
                report(
                    "watcher.add_failed", path=rel.decode("utf-8", "backslashreplace"), error=os.strerror(err)
                )
            return -1
        old = self._wd_path.get(wd)
        if old == rel:
            old = None
        elif old is not None and _same_directory(self._root_b, old, full):  # a bind mount
            self.aliased.setdefault(rel, old)
            return -1  # its events come under ``old`` only; nothing below it is walked
        other = self._path_wd.get(rel)
        if other == wd:
            other = None
        if (old is not None or other is not None) and not self._trust_disk:
            # The records read so far have this directory at ``old``, or another one here:
            # the disk has moved on past them.
            return self._ahead()
        if old is not None and self._path_wd.get(old) == wd:
            del self._path_wd[old]  # same directory under a stale name (renamed)
        if other is not None:
            self._wd_path.pop(other, None)  # watched afresh wherever it is now, if anywhere
            inotify.rm_watch(self.fd, other)
        self._wd_path[wd] = rel
        self._path_wd[rel] = wd
        self.refused.pop(rel, None)
        # A detached directory back in the tree (the kernel gives an inode its old wd): it is
        # watched here now, whatever becomes of the move that took it away.
        self._detached.pop(wd, None)
        return wd

    def _ahead(self) -> int:
        """The disk has moved on past the records read so far (renames whose records are
        still queued): a name from it would be wrong, so the table is left as the records
        have it, until :meth:`resync`."""
        self.behind = True
        return -1

    def dropped(self, wd: int) -> None:
        """The kernel dropped watch ``wd`` (IN_IGNORED: its directory was deleted...)."""
        held = self._detached.pop(wd, None)
        if held is not None and held[1] == b"":
            self._forget_displaced(held[0])
        gone = self._wd_path.pop(wd, None)
        if gone is not None and self._path_wd.get(gone) == wd:
            del self._path_wd[gone]

    def drop(self, top: bytes) -> None:
        """Remove the watches of ``top`` and everything below it."""
        for wd, path in list(self._wd_path.items()):
            if not at_or_below(path, top):
                continue
            del self._wd_path[wd]
            if self._path_wd.get(path) == wd:
                del self._path_wd[path]
            inotify.rm_watch(self.fd, wd)

    def deleted(self, rel: bytes) -> None:
        """Directory ``rel`` was deleted (its parent's IN_DELETE): its watch names it no more,
        though the kernel keeps the watch while the directory is held open (IN_IGNORED comes
        at its last close), so a rename onto the name finds nothing to displace. Deleted, it
        is empty: what was below it went first, each with a record of its own."""
        wd = self._path_wd.pop(rel, None)
        if wd is not None:
            if self._wd_path.get(wd) == rel:
                del self._wd_path[wd]
            inotify.rm_watch(self.fd, wd)
        self.forget_refused(rel)

    def forget_refused(self, top: bytes) -> None:
        """``top`` was deleted or moved: its refusals went with it (a move's arrival is tried
        again under its new name)."""
        for rel in [r for r in self.refused if at_or_below(r, top)]:
            del self.refused[rel]

    def detach(self, top: bytes, cookie: int) -> None:
        """Take the watches of directory ``top`` (moved away by the rename ``cookie``) off the
        path tables, and its refusals with it; :meth:`reattach` or :meth:`release` decides
        their fate. If a rename just displaced a directory from ``top``, that one is leaving
        (the second half of an exchange): its watches go with ``cookie``, and the directory
        that arrived at ``top`` keeps its own."""
        key = self._displaced.pop(top, None)
        if key is not None:
            for wd, (k, suffix) in list(self._detached.items()):
                if k == key:
                    self._detached[wd] = (cookie, suffix)
            return
        self._set_aside(top, cookie)
        self.forget_refused(top)

    def _set_aside(self, top: bytes, key: int) -> bool:
        """Move the watches at and below ``top`` off the path tables, held under ``key``;
        whether there were any."""
        paths = [p for p in self._path_wd if at_or_below(p, top)]
        for path in paths:
            wd = self._path_wd.pop(path)
            if self._wd_path.get(wd) == path:
                del self._wd_path[wd]
            self._detached[wd] = (key, path[len(top) :])
        return bool(paths)

    def displace(self, rel: bytes) -> None:
        """A rename is arriving at ``rel`` (its ``IN_MOVED_TO``): set aside the directory the
        table has there (its watches, its refusals), which is either dead (:meth:`replaced`)
        or on its way to the exchange's other name (:meth:`detach`); the name is the arrival's."""
        if rel not in self._path_wd and rel not in self.refused:
            return  # a file's name, a new one, or an unwatched directory's: nothing to set aside
        self._last_key -= 1
        refusals = [r for r in self.refused if at_or_below(r, rel)]
        for r in refusals:
            del self.refused[r]  # tried again wherever the directory lands
        if self._set_aside(rel, self._last_key) or refusals:
            self._displaced[rel] = self._last_key

    def replaced(self, wd: int) -> None:
        """A record about set-aside watch ``wd`` itself: if ``IN_ATTRIB`` of a displaced
        directory (the link count of a directory renamed over), that directory is dead."""
        held = self._detached.get(wd)
        if held is not None and held[0] < 0 and held[1] == b"":
            self._forget_displaced(held[0])
            self.release(held[0])

    def settle_displaced(self) -> None:
        """Every rename queued so far is read whole (a barrier cookie, an overflow): a
        displaced directory no second half took is gone; remove its watches."""
        keys = set(self._displaced.values())
        self._displaced.clear()
        for key in keys:
            self.release(key)

    def _forget_displaced(self, key: int) -> None:
        for name in [n for n, k in self._displaced.items() if k == key]:
            del self._displaced[name]

    def release(self, cookie: int) -> None:
        """The rename ``cookie`` left the tree (or the displaced directory held under that key
        is dead): remove the watches it took that are still detached (none came back into the
        tree)."""
        for wd, (c, _) in list(self._detached.items()):
            if c == cookie:
                del self._detached[wd]
                inotify.rm_watch(self.fd, wd)

    def reattach(self, cookie: int, dest: bytes) -> None:
        """Re-attach the watches detached by the rename ``cookie`` under ``dest``, then
        re-apply the predicate at the new place (it may now be ignored, or no longer)."""
        for wd, (c, suffix) in list(self._detached.items()):
            if c == cookie:
                del self._detached[wd]
                self._path_wd[dest + suffix] = wd
                self._wd_path[wd] = dest + suffix
        for path in sorted(p for p in self._path_wd if at_or_below(p, dest)):
            if path in self._path_wd and not self.should_watch(path):
                self.drop(path)
        self.add_tree(dest, None)

    def add_tree(
        self, top: bytes, found: Listing | None, *, vanished: list[bytes] | None = None
    ) -> set[bytes]:
        """Watch ``top`` and the directories below it that ``should_watch_dir`` allows,
        watch first and list second, so nothing created in between is missed. With ``found``,
        append every entry listed (cookies aside). ``vanished`` gets the directories gone
        before their watch was placed. Returns the directories watched."""
        watched: set[bytes] = set()
        stack = [top]
        while stack:
            rel = stack.pop()
            children = self._watch_listed(rel, watched, vanished)
            if children is None:
                continue
            if found is not None:
                found.extend(children)
            stack.extend(child for child, is_dir in children if is_dir)
        return watched

    def watch_and_list(self, rel: bytes) -> Listing | None:
        """Watch directory ``rel`` (a walk's: its parent reached before it), then list it: its
        entries as (relative path, is_dir), cookies aside. None when it is not to be watched,
        its watch failed, it could not be listed, or its parent has no watch under its name
        (none is placed below a failed one, as :meth:`add_tree` places none: a watch there
        could be a moved directory's under a name the records have not caught up with, seen
        through a symlink left at its old place as a bind mount). The caller lists it itself
        then, and reports why it cannot."""
        if rel and rel.rpartition(b"/")[0] not in self._path_wd:
            return None
        return self._watch_listed(rel, set(), None)

    def _watch_listed(self, rel: bytes, watched: set[bytes], vanished: list[bytes] | None) -> Listing | None:
        """One directory of :meth:`add_tree`: watched (added to ``watched``), then listed."""
        if rel != b"" and not self.should_watch(rel):
            return None
        if self.add(rel, vanished=vanished) < 0:
            return None
        watched.add(rel)
        if self._counters is not None:
            self._counters.listed()
        try:
            with os.scandir(os.path.join(self._root_b, rel) if rel else self._root_b) as it:
                entries = [(e.name, entry_is_dir(e)) for e in it]
        except (FileNotFoundError, NotADirectoryError):
            if vanished is not None:
                vanished.append(rel)  # gone between its watch and its listing
            return None
        except OSError:
            # A walker lists it again, and reports why it cannot. The watches below it
            # that we have (it became unreadable after they were placed) still report.
            watched.update(p for p in self._path_wd if at_or_below(p, rel))
            return None
        return [(join(rel, name), is_dir) for name, is_dir in entries if rel or not is_cookie_name(name)]

    def resync(self) -> None:
        """Re-apply ``should_watch_dir`` to the whole tree: add missing watches, drop the
        watches of directories no longer to be watched (or gone). The disk is the truth here:
        a directory's watch takes the name it has now."""
        self._trust_disk = True
        try:
            watched = self.add_tree(b"", None)
        finally:
            self._trust_disk = False
        self.behind = False
        for path in [p for p in self._path_wd if p not in watched]:
            wd = self._path_wd.pop(path)
            if self._wd_path.get(wd, path) == path:  # not the watch of a directory found elsewhere
                self._wd_path.pop(wd, None)
                inotify.rm_watch(self.fd, wd)


def _same_directory(root: bytes, old: bytes, full: bytes) -> bool:
    """Whether the directory at ``full`` is still at ``old`` too (a bind mount, not a rename)."""
    try:
        a, b = os.lstat(root + b"/" + old if old else root), os.lstat(full)
    except OSError:
        return False
    return (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino)
