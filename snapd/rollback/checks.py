"""Does a path hold what the plan says? The comparisons an apply makes right before each change
(``expect``) and when it recognises work already done (``entry``, by content).

A file matches by kind, mode, size and content (its hash, or its bytes for a key of the
collision variant); a symlink by its link text; a directory by kind, and by mode only when
``exact``. Nothing here changes the disk.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable, Sequence

from snapd.display import count
from snapd.rollback.ops import Op
from snapd.store import safeio
from snapd.store.objects import parse_key
from snapd.store.trees import Entry

Get = Callable[[str], bytes]
Hasher = Callable[[bytes], str]

_KINDS = {stat.S_IFDIR: "directory", stat.S_IFLNK: "symlink", stat.S_IFREG: "file"}


def describe_state(st: os.stat_result | None) -> str:
    """What a path is now, for a conflict's reason."""
    if st is None:
        return "it is gone"
    kind = _KINDS.get(stat.S_IFMT(st.st_mode), "special file")
    return f"it is now a {kind} (mode {stat.S_IMODE(st.st_mode):04o}, {count(st.st_size, 'byte')})"


class Contents:
    """Compares paths on disk with entries, reading stored content through ``get``."""

    def __init__(self, get: Get, hasher: Hasher) -> None:
        self.get, self.hasher = get, hasher

    def holds(self, fd: int, name: bytes, st: os.stat_result | None, e: Entry | None, exact: bool) -> bool:
        """Does ``name`` hold ``e``? Directories: kind only unless ``exact`` (their mode too)."""
        if e is None or st is None:
            return e is None and st is None
        if e.kind == "dir":
            return stat.S_ISDIR(st.st_mode) and (not exact or stat.S_IMODE(st.st_mode) == e.mode)
        if e.kind == "symlink":
            return stat.S_ISLNK(st.st_mode) and os.readlink(name, dir_fd=fd) == self.get(e.key)
        if not stat.S_ISREG(st.st_mode) or stat.S_IMODE(st.st_mode) != e.mode or st.st_size != e.size:
            return False
        data = safeio.read_file_at(fd, name, st)
        if data is None:
            return False
        digest, size = parse_key(e.key)
        if len(data) != size:
            return False
        return data == self.get(e.key) if "." in e.key else self.hasher(data) == digest  # collision variant

    def done(self, fd: int, name: bytes, st: os.stat_result | None, follow: Sequence[Op]) -> bool:
        """Does the path already hold the result of this op or of a later op on it?"""
        for op in follow:
            if op.kind in ("remove", "rmdir"):
                ok = st is None
            elif op.kind == "mkdir":
                ok = st is not None and stat.S_ISDIR(st.st_mode)
            else:
                ok = self.holds(fd, name, st, op.entry, exact=True)
            if ok:
                return True
        return False
