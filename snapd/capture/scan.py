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

import bisect
import functools
import os
import stat
import time
from collections.abc import Callable, Iterator

from snapd.capture import statcache
from snapd.capture.counters import Counters
from snapd.capture.placement import DONE, Placement
from snapd.capture.reader import Ignored, LeftOut, list_dir, lstat
from snapd.capture.statcache import Restated, Row, StatCache

# (done, total): how far a scan or baseline has come; total None while a baseline's walk is
# still finding what there is
CountCallback = Callable[[int, "int | None"], None]


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
    with statcache.root_opened(root) as top:
        if top is None:  # the root gone: every file is
            found = {rel for rel, _ in rows}
        else:
            found = cache.files_changed(rows, os.lstat, top, now)
    if counters is not None:
        counters.stat(len(rows))
        counters.rechecked()
    return found


ROWS_CHUNK = 16_384  # stat-cache rows judged at a time (a reader process's message)
Restat = Callable[[int, Iterator[list[Row]]], Iterator[list[Restated]]]
"""Judge chunks of stat-cache rows at time ``now_ns`` (:func:`snapd.capture.statcache.restat`
each), answers in their order: in reader processes, or here (the default of :func:`catch_up`)."""


def catch_up(
    root: bytes,
    cache: StatCache,
    ignored: Ignored,
    descend: Callable[[bytes], bool],
    *,
    progress: CountCallback | None = None,
    counters: Counters | None = None,
    left_out: LeftOut | None = None,
    restat: Restat | None = None,
    placement: Placement = DONE,
) -> set[bytes]:
    """:func:`scan` of everything at start-up, each path once the watches of the known
    directories sorted before it were attempted (``placement``; why that keeps the catch-up
    exact: :mod:`snapd.capture.placement`): what differs from ``cache`` or vanished.

    Every cached path is stat'ed and judged against its entry, in path order and in chunks,
    by ``restat`` (reader processes: at 500,000 files the ``lstat`` s alone took 2.2 s of one
    thread; default: here), which reports only the paths to look at again. No index of each
    directory's children is needed when nothing changed. Then the root and every directory
    whose listing cannot be trusted are listed: names not cached are new (scanned whole),
    cached names missing from the listing are dirty. Below a path that vanished every cached
    path is dirty; below one that is no longer a directory nothing counts (it was stat'ed
    through whatever is there now, maybe a symlink: not looked at)."""
    now = time.time_ns()
    if counters is not None:
        counters.scanned_all()
    if restat is None:
        restat = functools.partial(_restat_here, root)
    dirty: set[bytes] = set()
    relist: list[bytes] = [b""]  # directories to list
    cut: dict[bytes, bool] = {}  # path -> True: vanished (below: dirty); False: not a directory
    paths = sorted(cache.paths())
    total = len(paths)

    def chunks() -> Iterator[list[Row]]:
        for i in range(0, total, ROWS_CHUNK):
            part = paths[i : i + ROWS_CHUNK]
            placement.wait_past(part[-1])  # its directories watched (snapd.capture.placement)
            yield cache.rows(part)

    done = 0
    for reports in restat(now, chunks()):
        for r in reports:
            rel = r.path
            if cut and _cut_above(rel, cut) is not None:
                continue  # below a vanished path (dirty, below) or a non-directory (not looked at)
            if r.mode is None:
                dirty.add(rel)
                cut[rel] = True
                continue
            if stat.S_ISREG(r.mode):
                cache.note_links(rel, (r.dev, r.ino), r.nlink)  # links are not persisted
            if not r.same:
                dirty.add(rel)
            if not stat.S_ISDIR(r.mode):
                if not r.same:
                    cut[rel] = False
            elif not r.same_listing:
                relist.append(rel)
        if progress is not None:
            done = min(total, done + ROWS_CHUNK)
            progress(done, total)
    if counters is not None:
        counters.stat(total)
    # Every directory's watch was attempted by now: each is a cached path, at or before the
    # last chunk's last path.
    for top, vanished in cut.items():
        if vanished:
            lo, hi = _below(paths, top)
            dirty.update(paths[lo:hi])
    for d in relist:
        known = _children(paths, d)
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


def _restat_here(root: bytes, now_ns: int, chunks: Iterator[list[Row]]) -> Iterator[list[Restated]]:
    """:data:`Restat` in this thread (a cache too small for reader processes to pay)."""
    for rows in chunks:
        yield statcache.restat(root, rows, now_ns)


def _cut_above(rel: bytes, cut: dict[bytes, bool]) -> bool | None:
    """The verdict of the nearest cut path above ``rel`` (None: none is)."""
    while rel:
        rel = rel.rpartition(b"/")[0]
        below = cut.get(rel)
        if below is not None:
            return below
    return None


def _below(paths: list[bytes], top: bytes) -> tuple[int, int]:
    """Where the paths below ``top`` lie in sorted ``paths`` (all of them for b""), found by
    bisection ("/" is 0x2f, "0" the next byte)."""
    if not top:
        return 0, len(paths)
    return bisect.bisect_left(paths, top + b"/"), bisect.bisect_left(paths, top + b"0")


def _children(paths: list[bytes], d: bytes) -> list[bytes]:
    """The paths of sorted ``paths`` directly below ``d``: each child met, and each
    subtree met skipped by one bisection (the root's names of 739,170 paths: a few thousand
    steps, not a pass over all of them). A child's subtree need not follow it at once:
    "a", "a.d", "a.d/x", "a/y" is sorted."""
    prefix = d + b"/" if d else b""
    i, hi = _below(paths, d)
    out: list[bytes] = []
    while i < hi:
        p = paths[i]
        slash = p.find(b"/", len(prefix))
        if slash < 0:
            out.append(p)
            i += 1
        else:  # below a child: past its subtree
            i = bisect.bisect_left(paths, p[:slash] + b"0", i, hi)
    return out


_UNLISTABLE: list[bytes] = []


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
