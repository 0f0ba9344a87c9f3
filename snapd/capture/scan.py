"""Reconciliation scans: compare a workspace on disk with its stat cache, without reading files.

Used whenever events cannot be trusted: at start-up (changes made while snapd was down),
after an inotify overflow or a barrier timeout, when ignore rules change, and at every mark
in the degraded modes. The result is the set of paths to capture; nothing is read here but
directory listings and ``lstat``.

Cost on an unchanged tree is one ``lstat`` per captured path. A directory whose signature is
unchanged (outside the racy window) gained and lost no entry, so its cached children stand
in for a listing, and ignore rules are not re-judged for it. With ``trust_listings=False``
(ignore rules changed) every directory is listed and every name judged again. A directory
that cannot be listed has its captured children checked by name (no watch can be placed in
it, so only scans see what changes there).
"""

from __future__ import annotations

import functools
import os
import stat
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from snapd.capture.counters import Counters
from snapd.capture.reader import Ignored, LeftOut, list_dir, lstat
from snapd.capture.statcache import StatCache

# (done, total): how far a scan or baseline has come; total None while a baseline's walk is
# still finding what there is
CountCallback = Callable[[int, "int | None"], None]
_ROOT = os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC  # what recheck_files stats each name from


def scan(
    root: bytes,
    top: bytes,
    cache: StatCache,
    ignored: Ignored,
    descend: Callable[[bytes], bool],
    *,
    trust_listings: bool = True,
    progress: CountCallback | None = None,
    counters: Counters | None = None,
    left_out: LeftOut | None = None,
) -> set[bytes]:
    """Paths under ``top`` (b"" = everything) that differ from ``cache`` or vanished.

    ``counters`` counts a scan of everything as a full scan, and every ``lstat``;
    ``left_out`` is told what each directory listed leaves out as ignored."""
    now = time.time_ns()
    dirty: set[bytes] = set()
    done = 0
    # (directory, whether its listing may come from the cache)
    stack: list[tuple[bytes, bool]] = []
    if top:
        try:
            st = lstat(root + b"/" + top, counters)
        except OSError:
            st = None
        if st is None or not stat.S_ISDIR(st.st_mode):
            dirty.add(top)
            dirty.update(cache.under(top))
            return dirty
        same, same_listing = cache.seen(top, st, now)
        if not same:
            dirty.add(top)
        stack.append((top, trust_listings and same_listing))
    else:
        if counters is not None:
            counters.scanned_all()
        stack.append((b"", False))
    while stack:
        d, trusted = stack.pop()
        known = cache.children(d)
        if trusted:
            names: list[bytes] = list(known)
        else:
            listed = _list(root, d, ignored, descend, counters, left_out)
            if listed is None:
                dirty.add(d)
                continue
            if listed is _UNLISTABLE:  # what it holds is unknown: check what was captured, by name
                names = list(known)
            else:
                names = listed
                dirty.update(known - set(listed))  # vanished, or ignored now
        checked = 0
        for rel in names:
            done += 1
            if progress is not None and done % 5000 == 0:
                progress(done, len(cache))
            checked += 1
            try:
                st = os.lstat(root + b"/" + rel)
            except OSError:
                dirty.add(rel)
                if rel in known:
                    dirty.update(cache.under(rel))
                continue
            # links are not persisted: seen() notes them, so a restart's scan finds them
            same, same_listing = cache.seen(rel, st, now)
            if not same:
                dirty.add(rel)
            if stat.S_ISDIR(st.st_mode):
                stack.append((rel, trust_listings and same_listing))
        if counters is not None and checked:
            counters.stat(checked)  # once per directory: a lock per lstat is felt at 10^5 paths
    return dirty


def recheck_files(root: bytes, cache: StatCache, counters: Counters | None = None) -> set[bytes]:
    """Captured regular files whose ``lstat`` differs from ``cache``, or that vanished: the
    changes no event reports, before a rollback plans (docs/rollback.md, "Hard links").

    Only regular files can change without an event to a watched directory: their content can
    be written through another hard link, outside the root or under an ignored directory, and
    linking them there changes only the inode, which inotify reports to no watched directory.
    A directory has one name, so every entry made or removed in it, and every change of its
    mode, is reported to its own watch; a symlink's target never changes. So no directory is
    listed or stat'ed here and no ignore rule judged: one ``lstat`` per captured file, about
    two thirds of a full :func:`scan`'s at 10^5 paths and none of its listing and judging.

    Each ``lstat`` is of a name relative to the root, opened once (``O_PATH``): the kernel
    walks only the name's own components, not the root's again for every file; the root
    gone, every file is. The verdicts are :meth:`StatCache.files_changed`'s: one pack and one
    byte comparison per unchanged file."""
    now = time.time_ns()
    rows = cache.file_rows()
    with _root_opened(root) as top:
        if top is None:  # the root gone: every file is
            found = {rel for rel, _ in rows}
        else:
            found = cache.files_changed(rows, os.lstat, top, now)
    if counters is not None:
        counters.stat(len(rows))
        counters.rechecked()
    return found


def catch_up(
    root: bytes,
    cache: StatCache,
    ignored: Ignored,
    descend: Callable[[bytes], bool],
    *,
    progress: CountCallback | None = None,
    counters: Counters | None = None,
    left_out: LeftOut | None = None,
) -> set[bytes]:
    """:func:`scan` of everything at start-up, once every known directory's watch was
    attempted (why that keeps the catch-up exact: :mod:`snapd.capture.placement`): what
    differs from ``cache`` or vanished.

    The cached paths are visited in sorted order, not directory by directory: no index of
    each directory's children is needed when nothing changed. Then
    the root and every directory whose listing cannot be trusted are listed: names not cached
    are new (scanned whole), cached names missing from the listing are dirty. Below a path
    that vanished every cached path is dirty; below one that is no longer a directory
    nothing is looked at (not through a symlink)."""
    now = time.time_ns()
    if counters is not None:
        counters.scanned_all()
    seen = cache.seen
    dirty: set[bytes] = set()
    # Directories to list, with their cached children (collected as the pass meets them).
    relist: dict[bytes, list[bytes]] = {b"": []}
    cut: dict[bytes, bool] = {}  # path -> True: vanished (below: dirty); False: not a directory
    paths = sorted(cache.paths())
    total = checked = len(paths)
    with _root_opened(root) as top:  # each name stat'ed relative to it, as recheck_files does
        if top is not None:
            stat_of: Callable[[bytes], os.stat_result] = functools.partial(os.lstat, dir_fd=top)
        else:  # by whole paths, then: each fails as the root's absence says

            def by_whole_path(rel: bytes) -> os.stat_result:
                return os.lstat(root + b"/" + rel)

            stat_of = by_whole_path
        for done, rel in enumerate(paths, 1):
            parent = rel.rpartition(b"/")[0]
            if cut:
                below = cut.get(parent)
                if below is not None:
                    cut[rel] = below
                    checked -= 1
                    if below:
                        dirty.add(rel)
                    continue
            kids = relist.get(parent)
            if kids is not None:
                kids.append(rel)
            if progress is not None and done % 5000 == 0:
                progress(done, total)
            try:
                st = stat_of(rel)
            except OSError:
                dirty.add(rel)
                cut[rel] = True
                continue
            same, same_listing = seen(rel, st, now)
            if not same:
                dirty.add(rel)
            if not stat.S_ISDIR(st.st_mode):
                if not same:
                    cut[rel] = False
            elif not same_listing:
                relist[rel] = []
    if counters is not None:
        counters.stat(checked)
    for d, known in relist.items():
        listed = _list(root, d, ignored, descend, counters, left_out)
        if listed is None:
            dirty.add(d)
        elif listed is not _UNLISTABLE:  # else its cached children were checked by name
            dirty.update(set(known) - set(listed))  # vanished, or ignored now
            for rel in listed:
                if rel not in cache:
                    found = scan(root, rel, cache, ignored, descend, counters=counters, left_out=left_out)
                    dirty.update(found)
    return dirty


_UNLISTABLE: list[bytes] = []


@contextmanager
def _root_opened(root: bytes) -> Iterator[int | None]:
    """``root`` opened to stat names relative to it (``O_PATH``: the kernel then walks only
    each name's own components), closed after; None when it cannot be opened."""
    try:
        top = os.open(root, _ROOT)
    except OSError:
        yield None
        return
    try:
        yield top
    finally:
        os.close(top)


def _list(
    root: bytes,
    d: bytes,
    ignored: Ignored,
    descend: Callable[[bytes], bool],
    counters: Counters | None,
    left_out: LeftOut | None = None,
) -> list[bytes] | None:
    """One directory's captured names; None when it is gone, :data:`_UNLISTABLE` (compare with
    ``is``) when it cannot be listed."""
    try:
        return [rel for rel, _ in list_dir(root, d, ignored, descend, counters, left_out)]
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError:
        return _UNLISTABLE
