"""A stat-cache entry as one value, the same in memory and on disk.

What the daemon last saw of a captured path: ``st_mode``, size, mtime (ns), ctime (ns),
inode, and the time it was read (ns), packed little-endian in 44 bytes. The stat cache keeps
each entry so (:mod:`snapd.capture.statcache`), and the catalog stores it so (format 7:
``stats.sig``), so a restart loads 10^5 entries as (path, bytes) pairs, with no Python int
built per field. Here because neither the capture side nor the store may import the other.
"""

from __future__ import annotations

import struct
from typing import Final

ROW: Final = struct.Struct("<I5q")  # st_mode, size, mtime_ns, ctime_ns, inode, read ns
