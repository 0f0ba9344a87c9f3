"""A rollback's re-check of every captured file (docs/rollback.md, "Hard links"), exactly.

:func:`snapd.capture.scan.recheck_files` is the one place a write through a hard link made
outside the watches is found before a rollback plans. It is also the rollback's largest cost at
10^5 files (docs/benchmarks.md, "Session 21"), so it does less than a scan per file: names
stat'ed relative to the root, and most of them judged inside :meth:`StatCache.files_changed`'s
loop instead of by :meth:`StatCache.seen`.
These tests hold it to the same answers: on real files, a change wherever it sits in the
cache's order, of every kind an event may miss, and none when nothing changed; on made-up
stats, the very verdicts and link notes of :meth:`StatCache.seen`; and through a real daemon,
a rollback that restores a file written only through a link outside the root.
"""

from __future__ import annotations

import os
import random
import time
from pathlib import Path

import pytest
from e2e_helpers import Daemon, cli_mark, cli_rollback, write
from hypothesis import example, given, settings
from hypothesis import strategies as st

from snapd.capture.scan import recheck_files
from snapd.capture.statcache import StatCache
from snapd.statrow import ROW

pytestmark = pytest.mark.timeout(120)

S = 10**9
FILE, DIR, LINK = 0o100644, 0o040755, 0o120777
OLD_NS = 1_600_000_000 * S  # every file's mtime: far outside the racy window
N = 240  # files, in nested directories


def _root(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    for i in range(N):
        write(root / f"d{i % 7}" / f"e{i % 3}" / f"f{i:03}", f"file {i}\n")
    for p in root.rglob("*"):
        if p.is_file():
            os.utime(p, ns=(OLD_NS, OLD_NS))
    (root / "d1" / "link").symlink_to("e0")  # no file: not re-checked (docs/rollback.md)
    return root


def _cache(root: Path) -> StatCache:
    """What the daemon knows of ``root``: every path as it is now, read now."""
    cache = StatCache()
    now = time.time_ns()
    paths = sorted(root.rglob("*"))
    random.Random(N).shuffle(paths)  # the cache's order is not the disk's
    for p in paths:
        s = os.lstat(p)
        sig = (s.st_mode, s.st_size, s.st_mtime_ns, s.st_ctime_ns, s.st_ino)
        cache.set(os.fsencode(p.relative_to(root)), sig, now)
    return cache


def _order(cache: StatCache) -> list[bytes]:
    return [p for p, _ in cache.file_rows()]


def _recheck(root: Path, cache: StatCache) -> set[bytes]:
    return recheck_files(os.fsencode(root), cache)


def _rewrite_keeping_size_and_mtime(path: Path, data: bytes) -> None:
    """Same size, same mtime, same inode: only the ctime tells."""
    before = os.lstat(path)
    assert len(data) == before.st_size
    with open(path, "r+b") as fh:
        fh.write(data)
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))


def test_nothing_changed_finds_nothing(tmp_path: Path) -> None:
    root = _root(tmp_path)
    cache = _cache(root)
    assert len(_order(cache)) == N
    assert _recheck(root, cache) == set()
    assert _recheck(root, cache) == set(), "a re-check changes nothing it reads"


@pytest.mark.parametrize("where", [0, 1, N // 4, N // 2, 3 * N // 4, N - 2, N - 1])
def test_a_change_is_found_wherever_it_sits_in_the_order(tmp_path: Path, where: int) -> None:
    """A write in place through another name (same size, same mtime: only the ctime moved), at
    each position of the order the re-check walks: first, last, in each quarter."""
    root = _root(tmp_path)
    cache = _cache(root)
    rel = _order(cache)[where]
    path = root / os.fsdecode(rel)
    _rewrite_keeping_size_and_mtime(path, path.read_bytes().upper())
    assert _recheck(root, cache) == {rel}


def test_every_kind_of_change_is_found_and_only_those(tmp_path: Path) -> None:
    root = _root(tmp_path)
    cache = _cache(root)
    order = _order(cache)
    picked = {
        k: order[i]
        for i, k in enumerate(
            ["gone", "replaced", "chmod", "grown", "touched", "dir", "symlink", "racy"], start=1
        )
    }
    paths = {k: root / os.fsdecode(rel) for k, rel in picked.items()}
    paths["gone"].unlink()
    # A new inode of the same size and mtime renamed over it (what an editor's save through
    # another directory leaves): only the inode and ctime differ.
    new = tmp_path / "new"
    data = paths["replaced"].read_bytes()
    new.write_bytes(data[::-1])
    os.utime(new, ns=(OLD_NS, OLD_NS))
    os.rename(new, paths["replaced"])
    paths["chmod"].chmod(0o600)
    with open(paths["grown"], "ab") as fh:
        fh.write(b"more")
    os.utime(paths["grown"], ns=(OLD_NS, OLD_NS))
    os.utime(paths["touched"], ns=(OLD_NS, OLD_NS + 1))
    paths["dir"].unlink()
    paths["dir"].mkdir()
    paths["symlink"].unlink()
    paths["symlink"].symlink_to("elsewhere")
    os.utime(paths["racy"], ns=(OLD_NS, time.time_ns()))  # a second write could hide in its tick
    assert _recheck(root, cache) == set(picked.values())


def test_a_root_gone_is_every_file_gone(tmp_path: Path) -> None:
    root = _root(tmp_path)
    cache = _cache(root)
    os.rename(root, tmp_path / "away")
    assert _recheck(root, cache) == set(_order(cache))
    root.write_bytes(b"")  # a file in its place: no name below it
    assert _recheck(root, cache) == set(_order(cache))


def test_a_link_made_outside_is_found_and_noted(tmp_path: Path) -> None:
    """``ln ws/f /outside/f``: the file's ctime moved (found) and it now has a name snapd
    cannot see (noted: re-checked at each mark from then on); the link gone, no longer."""
    root = _root(tmp_path)
    cache = _cache(root)
    rel = _order(cache)[N // 3]
    outside = tmp_path / "outside"
    os.link(root / os.fsdecode(rel), outside)
    assert _recheck(root, cache) == {rel}
    assert cache.loose_links() == [rel]
    outside.unlink()
    _recheck(root, cache)
    assert cache.loose_links() == []


# -- the verdicts of StatCache.seen, exactly ---------------------------------------------------

_FAR = (2**63, -(2**63) - 1, 2**64)  # past a 44-byte row's range: a wide row, or no row at all
# Times 1 s apart over 20 s (the racy window is 2 s), one in ~70 far; sizes and inodes alike.
_times = st.integers(0, 212).map(lambda x: 1_000 * S + x // 10 * S if x < 210 else _FAR[x - 210])
_small = st.integers(0, 31).map(lambda x: x % 3 if x < 30 else (2**63, 2**64 - 1)[x - 30])


_keep = st.sampled_from([True, True, True, False])  # a field as cached, mostly
T = 1_000 * S


@settings(max_examples=500, deadline=None)
@given(
    was=st.tuples(_small, _times, _times, _small),
    other=st.tuples(_small, _times, _times, _small),
    keep=st.tuples(_keep, _keep, _keep, _keep),
    mode=st.sampled_from([FILE, FILE, DIR, LINK]),
    nlink=st.integers(1, 3),
    read_after=st.integers(-3, 6),
    now_after=st.integers(-3, 6),
    linked_before=st.booleans(),
)
# Unchanged but for the ctime; unchanged with a second link; unchanged, read in its mtime's tick.
@example((1, T, T, 5), (1, T, T + 1, 5), (True, True, False, True), FILE, 1, 5, 5, False)
@example((1, T, T, 5), (1, T, T, 5), (True, True, True, True), FILE, 2, 5, 5, False)
@example((1, T, T, 5), (1, T, T, 5), (True, True, True, True), FILE, 1, 1, 5, True)
# A stat past a narrow row's range (a file dated before 1677) against a narrow row.
@example((1, T, T, 5), (1, -(2**63) - 1, T, 5), (True, False, True, True), FILE, 1, 5, 5, False)
# A wide row whose first bytes are a narrow row's signature of the stat found (size 5, mtime
# 0, ctime T, inode 1 against size 5, mtime 2^64 + T): never read as a narrow row.
@example((5, 2**64 + T, T, 9), (5, 0, T, 1), (True, False, False, False), FILE, 1, 5, 5, False)
# A link noted before, and the file now with one link: noted again (its note dropped).
@example((1, T, T, 5), (1, T, T, 5), (True, True, True, True), FILE, 1, 5, 5, True)
def test_files_changed_is_seen(
    was: tuple[int, int, int, int],
    other: tuple[int, int, int, int],
    keep: tuple[bool, bool, bool, bool],
    mode: int,
    nlink: int,
    read_after: int,
    now_after: int,
    linked_before: bool,
) -> None:
    """For every row a regular file can have (44 or 84 bytes) and every ``lstat`` found in
    its place (each field the cached one or another): the same verdict as
    :meth:`StatCache.seen`, and the same links noted. It was read, and is seen now, a few
    seconds before or after its mtime: in the racy window or out of it."""
    read, clock = was[1] + read_after * S, was[1] + now_after * S
    entry = ((FILE, *was), read)
    caches = StatCache({b"p": entry, b"q": entry}), StatCache({b"p": entry, b"q": entry})
    if linked_before:  # a link noted before: every file's count is noted again
        for c in caches:
            c.note_links(b"q", (1, 7), 2)
            c.note_links(b"p", (1, 9), 2)
    size, mtime, ctime, ino = (v if k else o for v, o, k in zip(was, other, keep, strict=True))
    fake = os.stat_result((mode, ino, 1, nlink, 0, 0, size, 0, 0, 0, 0.0, 0.0, 0.0, 0, mtime, ctime))
    rows = caches[1].file_rows()
    assert rows[0][0] == b"p" and len(rows[0][1]) in (ROW.size, 84)

    def lstat(path: bytes, *, dir_fd: int) -> os.stat_result:
        assert dir_fd == 7
        return fake

    found = caches[1].files_changed(rows[:1], lstat, 7, clock)
    assert (b"p" not in found) == caches[0].seen(b"p", fake, clock)[0] and found <= {b"p"}
    assert caches[1].loose_links() == caches[0].loose_links()


# -- through a real daemon ------------------------------------------------------------------------


def test_rollback_restores_a_file_written_only_through_a_link_outside(daemon: Daemon, tmp_path: Path) -> None:
    """``ln ws/f /outside/f`` after the mark, then a write through ``/outside/f`` that keeps
    size and mtime: no event reaches any watch, and the re-check must find it for the rollback
    to put the marked bytes back."""
    ws = (tmp_path / "ws").resolve()
    for i in range(50):
        write(ws / f"d{i % 4}" / f"f{i:02}", f"file {i:02}\n")
        os.utime(ws / f"d{i % 4}" / f"f{i:02}", ns=(OLD_NS, OLD_NS))  # not racy: trusted
    daemon.ctl("watch", ws)
    cli_mark(daemon, ws, "base")
    target = ws / "d1" / "f25"
    outside = tmp_path / "outside"
    os.link(target, outside)
    _rewrite_keeping_size_and_mtime(outside, b"FILE 25\n")
    assert target.read_bytes() == b"FILE 25\n"
    code, reply = cli_rollback(daemon, ws, "--to", "base")
    assert code == 0 and reply["ok"], reply
    assert target.read_bytes() == b"file 25\n"
    assert [op["kind"] for op in reply["plan"]["ops"]] == ["write"], reply["plan"]
