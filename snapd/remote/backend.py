"""What a remote repository is stored on: the :class:`Backend` contract, one implementation
per medium (:mod:`snapd.remote.s3`, :mod:`snapd.remote.files`), chosen by :func:`open_backend`.

The contract, which every backend keeps and tests/test_remote_backend.py checks against each:

- Names are relative to the repository's prefix, ``/``-separated, made of ASCII letters,
  digits, ``.``, ``_`` and ``-`` (:func:`check_name`, before any I/O): the repository format
  never needs more, so nothing a caller builds can escape the prefix.
- ``put`` publishes a whole object: a reader sees it absent or complete, never a part. The
  repository never rewrites an object, so a ``put`` racing another to the same name writes the
  same bytes.
- ``get`` reads the object or the byte range ``[start, end)`` of it; an absent object is
  :class:`RemoteMissing`.
- ``list`` yields every object whose name starts with ``prefix``, by full name; the order is
  not specified.
- ``delete`` of an absent object is not an error (S3's own rule).
- Every failure is a :class:`RemoteError` naming the remote's URL and the object:
  :class:`RemoteUnreachable` once bounded retries gave up, :class:`RemoteDenied` (never
  retried) naming where the credentials came from, :class:`RemoteFull`, :class:`RemoteMissing`.
- ``requests`` counts the requests made, for tests and the benchmark (a listing: one per page
  of 1000; the S3 client's own retries are not counted).
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from typing import NamedTuple, Protocol

from snapd.errors import UsageError
from snapd.remote.spec import DirLocation, RemoteSpec, parse_url

_NAME = re.compile(r"[A-Za-z0-9._-]+(/[A-Za-z0-9._-]+)*")
_PREFIX = re.compile(r"([A-Za-z0-9._-]+/)*[A-Za-z0-9._-]*")

CREDENTIAL_VARIABLES = (
    "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE", "AWS_REGION",
    "AWS_ENDPOINT_URL",
)
"""The variables of the client's environment a request carries for a remote (and nothing else)."""


class Listed(NamedTuple):
    """One object of a listing: its full name (relative to the repository), size and mtime."""

    name: str
    size: int
    mtime_ns: int


class RetryPolicy(NamedTuple):
    """How long an S3 backend keeps trying a request that met a 5xx, a timeout or a refused
    connection (exponential backoff with jitter from ``backoff_s``): at most ``retries`` more
    times, and never past ``timeout_s`` after the first try. Tests lower it."""

    retries: int = 8
    timeout_s: float = 60.0
    backoff_s: float = 0.1
    connect_timeout_s: float = 5.0
    request_timeout_s: float = 120.0  # one request, a 16 MiB pack on a slow link included


DEFAULT_RETRY = RetryPolicy()


class Backend(Protocol):
    """Objects under one repository's prefix (the contract: this module's docstring)."""

    url: str
    requests: int

    def put(self, name: str, data: bytes) -> None: ...

    def get(self, name: str, start: int = 0, end: int | None = None) -> bytes: ...

    def list(self, prefix: str) -> Iterator[Listed]: ...

    def delete(self, name: str) -> None: ...


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
    if start < 0 or (end is not None and end < start):
        raise UsageError(f"{url}: bad byte range [{start}, {end}) of {name}")


def open_backend(
    spec: RemoteSpec, credentials: Mapping[str, str], retry: RetryPolicy = DEFAULT_RETRY
) -> Backend:
    """The backend for ``spec``'s URL. ``credentials``: the ``AWS_*`` values the client sent
    (:data:`CREDENTIAL_VARIABLES`; may be empty). The S3 client is imported only here, only
    for an ``s3://`` URL."""
    where = parse_url(spec.url)
    if isinstance(where, DirLocation):
        from snapd.remote.files import FileBackend

        return FileBackend(where.path, url=spec.url)
    from snapd.remote.s3 import S3Backend

    return S3Backend(spec, credentials, retry)


