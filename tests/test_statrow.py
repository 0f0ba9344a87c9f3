"""A stat-cache row holds every value ``lstat`` can give (issue 30, 4): the encoding's
round trip over each field's whole range, and the stat cache over rows of both layouts.

An inode number of 2^63 or more (some FUSE and NFS mounts) cannot be given to a real file
here: that case is covered by these tests of the encoding only. Far times on real files,
directories and symlinks are tests/test_far_times.py.
"""

from __future__ import annotations

import os
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from snapd import statrow
from snapd.capture.statcache import RACY_NS, StatCache

S = 10**9
FILE, DIR, LINK = 0o100644, 0o040755, 0o120777
TIME_MAX = (2**63 - 1) * S + S - 1  # a timespec's tv_sec is an int64, tv_nsec below 10^9
TIME_MIN = -(2**63) * S

modes = st.integers(0, 2**32 - 1)  # st_mode: a u32
inodes = st.integers(0, 2**64 - 1)  # st_ino: a u64
sizes = st.integers(-(2**63), 2**64 - 1)  # st_size: an off_t (a FUSE size past 2^63 reads negative)
# Any time a timespec holds, weighted to the edges of the 44-byte row's int64.
times = st.one_of(
    st.integers(TIME_MIN, TIME_MAX),
    st.integers(-(2**63) - 3, -(2**63) + 3),
    st.integers(2**63 - 3, 2**63 + 3),
    st.integers(-(2**127), 2**127 - 1),  # and beyond: all a wide row holds
)


@settings(max_examples=2000, deadline=None)
@given(mode=modes, size=sizes, mtime=times, ctime=times, ino=inodes, read=times)
def test_a_row_gives_back_every_value(
    mode: int, size: int, mtime: int, ctime: int, ino: int, read: int
) -> None:
    fields = (mode, size, mtime, ctime, ino, read)
    row = statrow.pack(*fields)
    assert statrow.unpack(row) == fields
    narrow = all(-(2**63) <= v < 2**63 for v in fields[1:])
    assert len(row) == (statrow.ROW.size if narrow else statrow.WIDE.size)
    assert int.from_bytes(row[:4], "little") == mode  # the cache reads the type from here


def test_the_common_row_is_the_44_bytes_stores_hold() -> None:
    """A store written before the wide layout reads as it did: no migration."""
    fields = (FILE, 12, 1_700 * S, 1_700 * S, 4242, 1_800 * S)
    old = struct.Struct("<I5q").pack(*fields)
    assert statrow.pack(*fields) == old and len(old) == 44
    assert statrow.unpack(old) == fields


def test_a_value_no_row_holds_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="out of range"):
        statrow.pack(FILE, 0, 2**127, 0, 0, 0)
    with pytest.raises(ValueError, match="out of range"):
        statrow.pack(2**32, 0, 0, 0, 0, 0)


def _stat(sig: tuple[int, int, int, int, int], nlink: int = 1) -> os.stat_result:
    mode, size, mtime, ctime, ino = sig
    return os.stat_result((mode, ino, 1, nlink, 0, 0, size, 0, 0, 0, 0.0, 0.0, 0.0, 0, mtime, ctime))


far = st.sampled_from([TIME_MAX, TIME_MIN, 2**63, 2**63 - 1, -(2**63), -(2**63) - 1, 0, 1_000 * S])
small = st.integers(0, 3)
kinds = st.sampled_from([FILE, DIR, LINK])
numbers = st.sampled_from([1, 2**63, 2**64 - 1])


@settings(max_examples=500, deadline=None)
@given(
    was=st.tuples(kinds, small, far, far, numbers),
    now=st.tuples(kinds, small, far, far, numbers),
    read=st.sampled_from([1_000 * S, 1_000 * S + RACY_NS, 2**63 + 5]),
    clock=st.sampled_from([1_000 * S, 1_000 * S + 3 * RACY_NS]),
)
def test_the_scan_judges_far_values_as_is_clean_does(
    was: tuple[int, int, int, int, int],
    now: tuple[int, int, int, int, int],
    read: int,
    clock: int,
) -> None:
    """The reconcile scan's one-step check (:meth:`StatCache.seen`), whose common case
    compares packed bytes, judges an entry of either layout against a stat of either as
    :meth:`is_clean` and :meth:`listing_trusted` do; a row that went through the catalog
    (:meth:`from_rows`) the same as one set in memory."""
    for cache in (StatCache({b"p": (was, read)}), StatCache.from_rows([(b"p", statrow.pack(*was, read))])):
        assert cache.get(b"p") == (was, read)
        assert cache.seen(b"p", _stat(now), clock) == (
            cache.is_clean(b"p", now, clock),
            cache.listing_trusted(b"p", now, clock),
        )
    cache = StatCache({b"p": (was, read)})
    assert cache.seen(b"p", _stat(was), clock)[0] == cache.is_clean(b"p", was, clock)


def test_hard_links_of_files_with_inode_numbers_past_2_63() -> None:
    """The inode index (a file's other names) and the written rows hold u64 inode numbers."""
    big = 2**64 - 2
    cache = StatCache()
    cache.set(b"a", (FILE, 1, 2**70, 5, big), 1)
    cache.set(b"b", (FILE, 1, -(2**70), 5, big), 1)
    cache.set(b"c", (FILE, 1, 0, 5, big - 1), 1)
    cache.note_links(b"a", (7, big), 2)
    assert cache.linked(b"a") == {b"b"}
    rows = dict(cache.take_changes().rows())
    assert StatCache.from_rows(rows.items()).get(b"b") == ((FILE, 1, -(2**70), 5, big), 1)
    assert len(rows[b"a"]) == statrow.WIDE.size and cache.files() == 3


@settings(max_examples=300, deadline=None)
@given(mode=st.integers(0, 0o7777), size=sizes, ino=inodes, mtime=times)
def test_a_path_not_captured_is_recorded_whatever_its_stat_said(
    mode: int, size: int, ino: int, mtime: int
) -> None:
    """A tree node records an uncaptured path's stat (inode, mtime, size) whatever the values:
    its encoding round-trips, and an unchanged stat gives an equal entry."""
    from snapd.store import nodes, trees

    e = trees.uncaptured("special file", mode, size, (ino, mtime))
    assert e == trees.uncaptured("special file", mode, size, (ino, mtime))
    assert nodes.decode_node(nodes.encode_node({b"p": e})) == {b"p": e}
    assert trees.uncaptured_reason(e) == "special file"
    assert e != trees.uncaptured("special file", mode, size, (ino, mtime + 1))
