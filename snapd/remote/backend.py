"""What a remote repository is stored on: the :class:`Backend` contract, one implementation
per medium (:mod:`snapd.remote.s3`, :mod:`snapd.remote.files`), chosen by :func:`open_backend`.

The contract, which every backend keeps and tests/test_remote_backend.py checks against each:

- Names are relative to the repository's prefix, ``/``-separated, made of ASCII letters,
  digits, ``.``, ``_`` and ``-``, checked before any I/O (:mod:`snapd.remote.names`): the
  repository format never needs more, so nothing a caller builds can escape the prefix.
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

from collections.abc import Iterator, Mapping
from typing import Protocol

from snapd.remote.names import Listed
from snapd.remote.spec import DEFAULT_RETRY, DirLocation, RemoteSpec, RetryPolicy, parse_url

__all__ = ["Backend", "Listed", "RetryPolicy", "open_backend"]

CREDENTIAL_VARIABLES = (
    "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE", "AWS_REGION",
    "AWS_ENDPOINT_URL",
)
"""The variables of the client's environment a request carries for a remote (and nothing else)."""


class Backend(Protocol):
    """Objects under one repository's prefix (the contract: this module's docstring)."""

    url: str
    requests: int

    def put(self, name: str, data: bytes) -> None: ...

    def get(self, name: str, start: int = 0, end: int | None = None) -> bytes: ...

    def list(self, prefix: str) -> Iterator[Listed]: ...

    def delete(self, name: str) -> None: ...


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


