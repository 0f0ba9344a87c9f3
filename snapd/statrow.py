"""A stat-cache entry as one value, the same in memory and on disk.

What the daemon last saw of a captured path: ``st_mode``, size, mtime (ns), ctime (ns),
inode, and the time it was read (ns). The stat cache keeps each entry so
(:mod:`snapd.capture.statcache`), and the catalog stores it so (format 7: ``stats.sig``), so
a restart loads 10^5 entries as (path, bytes) pairs, with no Python int built per field. Here
because neither the capture side nor the store may import the other.

Two layouts, told apart by length; both begin with ``st_mode`` as a little-endian u32 (the
cache reads a row's file type from its first two bytes):

- :data:`ROW`, 44 bytes: every field but the mode as a signed 64-bit int. Nearly every entry:
  it holds times from 1677 to 2262 and inode numbers below 2^63.
- :data:`WIDE`, 84 bytes: each of those five fields as a signed 128-bit int (low u64, then
  high i64). Only for an entry a value of which does not fit :data:`ROW`: a file dated 2400
  or 1600 (``touch -d``), an inode number of 2^63 or more (some FUSE and NFS mounts). It holds
  every value ``lstat`` can give: a time is at most 2^63 seconds (under 2^93 ns), an inode or
  size 2^64.

A store written before the wide layout holds only :data:`ROW` rows, which read as before: the
wide layout needs no migration and no new format.
"""

from __future__ import annotations

import struct
from typing import Final

Fields = tuple[int, int, int, int, int, int]  # st_mode, size, mtime_ns, ctime_ns, inode, read ns

ROW: Final = struct.Struct("<I5q")  # st_mode, size, mtime_ns, ctime_ns, inode, read ns
WIDE: Final = struct.Struct("<I" + "Qq" * 5)  # st_mode, then each field as (low, high) halves
_LOW: Final = (1 << 64) - 1


def pack(mode: int, size: int, mtime: int, ctime: int, ino: int, read: int) -> bytes:
    """One entry as stored: :data:`ROW` when every value fits it, else :data:`WIDE`.

    A value not even :data:`WIDE` holds (no ``lstat`` gives one) is a :class:`ValueError`."""
    try:
        return ROW.pack(mode, size, mtime, ctime, ino, read)
    except struct.error:
        pass
    halves: list[int] = []
    for v in (size, mtime, ctime, ino, read):
        halves += (v & _LOW, v >> 64)
    try:
        return WIDE.pack(mode, *halves)
    except struct.error as exc:
        raise ValueError(f"stat values out of range: {(mode, size, mtime, ctime, ino, read)}") from exc


def unpack(row: bytes) -> Fields:
    """The fields of a row :func:`pack` made (either layout)."""
    if len(row) == ROW.size:
        return ROW.unpack(row)
    mode, *h = WIDE.unpack(row)
    return mode, h[0] | h[1] << 64, h[2] | h[3] << 64, h[4] | h[5] << 64, h[6] | h[7] << 64, h[8] | h[9] << 64
