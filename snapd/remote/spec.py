"""A remote as the user configured it (:class:`RemoteSpec`), and its URL taken apart.

Two kinds of URL: ``s3://BUCKET/PREFIX`` (any S3-compatible server; the endpoint, region and
profile are the spec's other fields) and ``file:///DIR`` (a directory, local or mounted). The
URL is checked here, before any I/O, so a typo is a :class:`UsageError` at ``remote add``
rather than a request to a bucket nobody meant.
"""

from __future__ import annotations

import re
import urllib.parse
from pathlib import Path
from typing import Literal, NamedTuple

from snapd.errors import UsageError

PushMode = Literal["manual", "on-mark"]
PUSH_MODES: tuple[PushMode, ...] = ("manual", "on-mark")

# S3's rules for bucket names (3-63 characters: lower-case letters, digits, dots and hyphens,
# starting and ending with a letter or digit). Servers that accept more (rclone's folders) are
# held to them too, so a repository can move between servers.
_BUCKET = re.compile(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]")
_SEGMENT_BAD = re.compile(r"[\x00-\x1f\x7f\\]")
_HOST = re.compile(r"[A-Za-z0-9]([A-Za-z0-9.-]*[A-Za-z0-9])?|\[[0-9A-Fa-f:.]+\]")
_REGION = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")


class RemoteSpec(NamedTuple):
    """One ``[remotes.NAME]`` of the config: where the repository is and how it is reached."""

    name: str
    url: str  # as the user gave it: s3://BUCKET/PREFIX or file:///DIR
    endpoint: str | None = None  # http(s)://host:port for a server other than AWS
    region: str | None = None
    profile: str | None = None  # of the shared credentials file (~/.aws/credentials)
    password_file: str | None = None
    push: PushMode = "manual"


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


class S3Location(NamedTuple):
    """``s3://BUCKET/PREFIX``: the prefix has no leading or trailing slash ("" for the bucket's top)."""

    bucket: str
    prefix: str


class DirLocation(NamedTuple):
    """``file:///DIR``: an absolute directory."""

    path: Path


def parse_url(url: str) -> S3Location | DirLocation:
    """Take a remote's URL apart; :class:`UsageError` saying what is wrong with anything else."""
    scheme, sep, rest = url.partition("://")
    if not sep:
        raise UsageError(f"remote URL {url!r} has no scheme: use s3://BUCKET/PREFIX or file:///DIR")
    if scheme == "s3":
        return _s3(url, rest)
    if scheme == "file":
        return _dir(url, rest)
    raise UsageError(f"remote URL {url!r}: scheme {scheme!r} is not supported (use s3:// or file://)")


def _s3(url: str, rest: str) -> S3Location:
    bucket, _, prefix = rest.partition("/")
    if not _BUCKET.fullmatch(bucket) or ".." in bucket:
        raise UsageError(
            f"remote URL {url!r}: {bucket!r} is not a bucket name (3-63 characters: lower-case "
            "letters, digits, dots and hyphens, starting and ending with a letter or digit)"
        )
    prefix = prefix.strip("/")
    for segment in prefix.split("/") if prefix else ():
        if segment in ("", ".", "..") or _SEGMENT_BAD.search(segment) or "?" in segment or "#" in segment:
            raise UsageError(
                f"remote URL {url!r}: the prefix {prefix!r} has an empty, '.', '..' or control-character "
                "part, a backslash, '?' or '#'"
            )
    return S3Location(bucket, prefix)


def _dir(url: str, rest: str) -> DirLocation:
    host, slash, path = rest.partition("/")
    if host not in ("", "localhost") or not slash:
        raise UsageError(f"remote URL {url!r}: a file URL names a local directory: file:///DIR")
    path = "/" + path
    if _SEGMENT_BAD.search(path) or "?" in path or "#" in path:
        raise UsageError(f"remote URL {url!r}: the path has a control character, a backslash, '?' or '#'")
    parts = [p for p in path.split("/") if p]
    if any(p in (".", "..") for p in parts) or not parts:
        raise UsageError(f"remote URL {url!r}: the directory must be absolute, not '/', with no '.' or '..'")
    return DirLocation(Path("/" + "/".join(parts)))


def check_endpoint(endpoint: str) -> str:
    """``http(s)://HOST[:PORT]`` without a trailing slash; :class:`UsageError` for anything else
    (the S3 client would fail on it at the first request, or worse)."""
    try:
        parts = urllib.parse.urlsplit(endpoint)
        port = parts.port
    except ValueError as exc:
        raise UsageError(f"S3 endpoint {endpoint!r}: {exc}") from exc
    host = parts.netloc.rpartition("@")[2].rsplit(":", 1)[0] if port is not None else parts.netloc
    if (
        parts.scheme not in ("http", "https")
        or not _HOST.fullmatch(host)
        or "@" in parts.netloc
        or parts.path not in ("", "/")
        or parts.query
        or parts.fragment
    ):
        raise UsageError(
            f"S3 endpoint {endpoint!r} is not http://HOST[:PORT] or https://HOST[:PORT] "
            "(for example http://127.0.0.1:9000 or https://s3.example.net)"
        )
    return endpoint.rstrip("/")


def check_region(region: str) -> str:
    """A region name (``eu-west-3``, or a custom one a MinIO or Garage server uses)."""
    if not _REGION.fullmatch(region):
        raise UsageError(f"S3 region {region!r}: letters, digits, '.', '_' and '-' only")
    return region
