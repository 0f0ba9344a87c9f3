"""Object names of a remote repository, and what a listing yields (shared by every backend).

A name is checked before any I/O, so nothing a caller builds can escape the repository's
prefix (the rules: :mod:`snapd.remote.backend`)."""

from __future__ import annotations

import re
from typing import NamedTuple

from snapd.errors import UsageError

_NAME = re.compile(r"[A-Za-z0-9._-]+(/[A-Za-z0-9._-]+)*")
_PREFIX = re.compile(r"([A-Za-z0-9._-]+/)*[A-Za-z0-9._-]*")


class Listed(NamedTuple):
    """One object of a listing: its full name (relative to the repository), size and mtime."""

    name: str
    size: int
    mtime_ns: int


def check_name(name: str) -> str:
    """``name`` if it is an object name of the contract; else a :class:`UsageError` (a bug in
    the caller, or a name read from somewhere it should not have been)."""
    if not _NAME.fullmatch(name) or any(part in (".", "..") for part in name.split("/")):
        raise UsageError(f"{name!r} is not an object name of a remote repository")
    return name


def check_prefix(prefix: str) -> str:
    """``prefix`` if a listing may use it: "" (everything), or names' leading part."""
    if not _PREFIX.fullmatch(prefix) or any(part in (".", "..") for part in prefix.split("/")):
        raise UsageError(f"{prefix!r} is not a listing prefix of a remote repository")
    return prefix


def check_range(url: str, name: str, start: int, end: int | None) -> None:
    """A byte range ``[start, end)`` a ``get`` may ask for (``end`` None: to the end)."""
    if start < 0 or (end is not None and end < start):
        raise UsageError(f"{url}: bad byte range [{start}, {end}) of {name}")
