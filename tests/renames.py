"""``renameat2(2)`` for the tests: the atomic exchange of two paths (``mv --exchange`` in
coreutils 9.5+), called through libc with ctypes, since Python's ``os`` has no binding."""

from __future__ import annotations

import ctypes
import os
from typing import Final

RENAME_EXCHANGE: Final = 2
_AT_FDCWD: Final = -100
_libc = ctypes.CDLL(None, use_errno=True)


def exchange(a: str | bytes | os.PathLike[str], b: str | bytes | os.PathLike[str]) -> None:
    """Swap what ``a`` and ``b`` name, both at once (both must exist); OSError as rename(2)."""
    if _libc.renameat2(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), RENAME_EXCHANGE) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err), os.fsdecode(a), None, os.fsdecode(b))
