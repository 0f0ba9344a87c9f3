"""A remote repository on an S3-compatible server (AWS S3, MinIO, Ceph RGW, Garage, R2,
``rclone serve s3``), through ``obstore`` (chosen by bench/bench_s3_client.py). The only module
that imports ``obstore``; it is imported only by :func:`snapd.remote.backend.open_backend`.

Credentials, first found wins, keys always as one set (an access key from one place is never
paired with a secret or token from another):

1. the ``AWS_*`` values the client sent with the request (``credentials``);
2. the daemon's own environment;
3. the shared credentials file (``AWS_SHARED_CREDENTIALS_FILE`` or ``~/.aws/credentials``,
   INI), profile ``spec.profile``, else ``AWS_PROFILE``, else ``default``.

A profile named in the remote's config (``spec.profile``) skips 1 and 2: the user asked for
that profile. Endpoint and region: the spec's, else ``AWS_ENDPOINT_URL`` / ``AWS_REGION`` from
the same order, else the profile's region in ``~/.aws/config``, else ``us-east-1``. A custom
endpoint is addressed path-style (``http://host:port/BUCKET/KEY``), which every S3-compatible
server understands; plain ``http://`` is allowed only when the endpoint says so.

obstore retries 5xx answers, connection errors and timeouts with exponential backoff and
jitter, up to :class:`snapd.remote.spec.RetryPolicy`; a 403 or 404 is never retried. Each
failure becomes one of the :class:`RemoteError` classes, naming the remote and the object.
"""

from __future__ import annotations

import configparser
import os
import re
import threading
from collections.abc import Iterator, Mapping
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

import obstore
from obstore.exceptions import GenericError, PermissionDeniedError, UnauthenticatedError
from obstore.store import S3Store

from snapd.errors import ConfigError, RemoteDenied, RemoteError, RemoteFull, RemoteMissing, RemoteUnreachable
from snapd.remote.names import Listed, check_name, check_prefix, check_range
from snapd.remote.spec import (
    DEFAULT_RETRY,
    RemoteSpec,
    RetryPolicy,
    S3Location,
    check_endpoint,
    check_region,
    parse_url,
)

if TYPE_CHECKING:
    from obstore.store import ClientConfig, RetryConfig, S3Config

DEFAULT_REGION = "us-east-1"
SINGLE_PUT_MAX = 256 << 20  # larger objects go up in parts (S3 takes at most 5 GiB in one PUT)
MAX_BACKOFF = timedelta(seconds=10)
LIST_PAGE = 1000  # objects per listing request (S3's page): how listings are counted
_PRINTABLE = re.compile(r"[\x21-\x7e]+")  # what a key may hold: it goes into a header
_STATUS = re.compile(r"status(?: code)?: (\d{3})")
_UNANSWERED = (
    # words of obstore's error text and of its debug part ("kind: Timeout", "source: TimedOut");
    # not a bare "timeout": every retried error names its "retry_timeout"
    "error sending request", "connection refused", "kind: timeout", "timedout", "connection reset",
    "connect error", "dns error", "broken pipe", "incompletemessage", "connection closed",
)
# the error codes S3-compatible servers give a full disk or an exhausted quota (MinIO, Ceph RGW)
_FULL_CODES = ("XMinioStorageFull", "XMinioAdminBucketQuotaExceeded", "QuotaExceeded", "InsufficientStorage")


class Credentials(NamedTuple):
    """The keys and the place they came from (named in a :class:`RemoteDenied`)."""

    access_key_id: str
    secret_access_key: str
    session_token: str | None
    source: str
    region: str
    endpoint: str | None


def resolve(spec: RemoteSpec, sent: Mapping[str, str], environ: Mapping[str, str], home: Path) -> Credentials:
    """The credentials, region and endpoint for ``spec`` (the order: this module's docstring).
    :class:`RemoteDenied` when there are no keys anywhere."""
    layers: list[tuple[str, Mapping[str, str]]] = [
        ("the AWS_* variables snapctl sent", sent),
        ("snapd's own environment", environ),
    ]
    profile = spec.profile or sent.get("AWS_PROFILE") or environ.get("AWS_PROFILE") or "default"
    creds_file = Path(environ.get("AWS_SHARED_CREDENTIALS_FILE") or home / ".aws" / "credentials")
    found: tuple[str, Mapping[str, str]] | None = None
    for source, values in ([] if spec.profile else layers):
        if values.get("AWS_ACCESS_KEY_ID") and values.get("AWS_SECRET_ACCESS_KEY"):
            found = (source, values)
            break
    if found is None:  # the file is read only when needed: a broken one cannot spoil sent keys
        file_keys = _ini_section(creds_file, profile)
        if file_keys.get("aws_access_key_id") and file_keys.get("aws_secret_access_key"):
            found = (
                f"profile {profile!r} of {creds_file}",
                {
                    "AWS_ACCESS_KEY_ID": file_keys["aws_access_key_id"],
                    "AWS_SECRET_ACCESS_KEY": file_keys["aws_secret_access_key"],
                    "AWS_SESSION_TOKEN": file_keys.get("aws_session_token", ""),
                },
            )
    if found is None:
        raise RemoteDenied(
            f"{spec.url}: no S3 credentials: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (in snapctl's "
            f"or snapd's environment), or give profile {profile!r} keys in {creds_file}"
        )
    source, values = found

    def first(var: str) -> str | None:
        return next((v[var] for _, v in layers if v.get(var)), None)

    region = spec.region or first("AWS_REGION") or first("AWS_DEFAULT_REGION")
    endpoint = spec.endpoint or first("AWS_ENDPOINT_URL")
    if region is None or endpoint is None:
        config_file = Path(environ.get("AWS_CONFIG_FILE") or home / ".aws" / "config")
        conf = _ini_section(config_file, profile if profile == "default" else f"profile {profile}")
        region = region or conf.get("region")
        endpoint = endpoint or conf.get("endpoint_url")
    for var in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"):
        if values.get(var) and not _PRINTABLE.fullmatch(values[var]):
            raise ConfigError(f"{spec.url}: {var} from {source} has spaces or control characters")
    return Credentials(
        values["AWS_ACCESS_KEY_ID"],
        values["AWS_SECRET_ACCESS_KEY"],
        values.get("AWS_SESSION_TOKEN") or None,
        source,
        check_region(region or DEFAULT_REGION),
        check_endpoint(endpoint) if endpoint else None,
    )


def _ini_section(path: Path, section: str) -> dict[str, str]:
    """One section of an AWS INI file (empty when the file or the section is absent)."""
    parser = configparser.RawConfigParser()
    try:
        with open(path, encoding="utf-8") as f:
            parser.read_file(f)
    except FileNotFoundError:
        return {}
    except (OSError, UnicodeDecodeError, configparser.Error) as exc:
        raise ConfigError(f"cannot read the AWS file {path}: {exc}") from exc
    return dict(parser.items(section)) if parser.has_section(section) else {}


class S3Backend:
    """The objects of one repository under ``s3://BUCKET/PREFIX/`` (the contract:
    :mod:`snapd.remote.backend`)."""

    def __init__(
        self,
        spec: RemoteSpec,
        credentials: Mapping[str, str],
        retry: RetryPolicy = DEFAULT_RETRY,
        *,
        environ: Mapping[str, str] | None = None,
        home: Path | None = None,
    ) -> None:
        where = parse_url(spec.url)
        assert isinstance(where, S3Location), spec.url
        self.url = spec.url
        self.requests = 0
        self._count = threading.Lock()
        self._bucket = where.bucket
        self._prefix = f"{where.prefix}/" if where.prefix else ""
        # A server that answers a range request with the range but status 200 (rclone serve s3
        # 1.75 does) is refused by obstore: such a server is read whole objects at a time.
        self._ranges = True
        creds = resolve(spec, credentials, os.environ if environ is None else environ, home or Path.home())
        self.source = creds.source
        self._server = creds.endpoint or f"AWS S3 (region {creds.region})"
        flag = f" --endpoint-url {creds.endpoint}" if creds.endpoint else ""
        self._mb = f"aws s3 mb s3://{where.bucket}{flag}"  # how to make the bucket, for a message
        config: S3Config = {
            "access_key_id": creds.access_key_id,
            "secret_access_key": creds.secret_access_key,
            "region": creds.region,
        }
        if creds.session_token:
            config["session_token"] = creds.session_token
        client: ClientConfig = {
            "connect_timeout": timedelta(seconds=retry.connect_timeout_s),
            "timeout": timedelta(seconds=retry.request_timeout_s),
        }
        if creds.endpoint:
            config["endpoint"] = creds.endpoint
            config["virtual_hosted_style_request"] = False
            client["allow_http"] = creds.endpoint.startswith("http://")
        retries: RetryConfig = {
            "max_retries": retry.retries,
            "retry_timeout": timedelta(seconds=retry.timeout_s),
            "backoff": {"init_backoff": timedelta(seconds=retry.backoff_s), "max_backoff": MAX_BACKOFF},
        }
        self._store = S3Store(where.bucket, config=config, client_options=client, retry_config=retries)

    def _counted(self, n: int = 1) -> None:
        with self._count:
            self.requests += n

    def put(self, name: str, data: bytes) -> None:
        key = self._prefix + check_name(name)
        self._counted()
        try:
            obstore.put(self._store, key, data, use_multipart=len(data) > SINGLE_PUT_MAX)
        except BaseException as exc:
            if _passes(exc):
                raise
            error = self._error(exc, "write", name)
            # 500 alone: a 503 (SlowDown) is a busy server, not a full one
            if isinstance(error, RemoteUnreachable) and _status(str(exc)) == 500 and self._reads(name):
                error = RemoteFull(
                    f"{self.url}: {name}: the server answers but failed to store it ({len(data)} bytes) "
                    f"through every retry ({_server_says(str(exc))}): its disk is full or it cannot write "
                    "there (rclone serve s3 and other servers answer a full disk with a bare 500). Free "
                    "space there and push again; nothing half-written is trusted",
                    object=name,
                )
            raise error from exc

    def _reads(self, name: str) -> bool:
        """Whether the server still answers a listing (next to ``name``): after a write that
        failed with 5xx through every retry, a server that lists is one that cannot store."""
        self._counted()
        try:
            for _ in obstore.list(self._store, self._prefix + name.rpartition("/")[0], chunk_size=1):
                break
        except BaseException as exc:
            if _passes(exc):
                raise
            return False
        return True

    def get(self, name: str, start: int = 0, end: int | None = None) -> bytes:
        key = self._prefix + check_name(name)
        check_range(self.url, name, start, end)
        if end == start:
            return b""
        self._counted()
        try:
            if self._ranges and (start, end) != (0, None):
                try:
                    if end is None:
                        tail = obstore.get(self._store, key, options={"range": {"offset": start}})
                        return bytes(tail.bytes())
                    return bytes(obstore.get_range(self._store, key, start=start, end=end))
                except GenericError as exc:
                    if "non-partial" not in str(exc):
                        raise
                    self._ranges = False  # the server ignores ranges: whole objects from now on
                    self._counted()
            data = bytes(obstore.get(self._store, key).bytes())
        except BaseException as exc:
            if _passes(exc):
                raise
            raise self._error(exc, "read", name) from exc
        return data if (start, end) == (0, None) else data[start:end]

    def list(self, prefix: str) -> Iterator[Listed]:
        # obstore lists whole path segments ("data/a" lists data/a/*, not data/ab/*): list the
        # folder the prefix is in and keep the names that start with it
        folder = self._prefix + check_prefix(prefix).rpartition("/")[0]
        self._counted()
        seen = 0
        try:
            for chunk in obstore.list(self._store, folder or None, chunk_size=LIST_PAGE):
                for meta in chunk:
                    seen += 1
                    if seen % LIST_PAGE == 0:
                        self._counted()
                    name = meta["path"][len(self._prefix) :]
                    if name.startswith(prefix):
                        stamp = meta["last_modified"].timestamp()
                        yield Listed(name, meta["size"], int(stamp * 1e9))
        except BaseException as exc:
            if _passes(exc):
                raise
            raise self._error(exc, "list", f"{prefix}*") from exc

    def delete(self, name: str) -> None:
        key = self._prefix + check_name(name)
        self._counted()
        try:
            obstore.delete(self._store, key)
        except FileNotFoundError:
            return
        except BaseException as exc:
            if _passes(exc):
                raise
            raise self._error(exc, "delete", name) from exc

    def _error(self, exc: BaseException, what: str, name: str) -> RemoteError:
        """The user's error for an obstore failure while ``what``-ing object ``name``."""
        text = str(exc)
        detail = text.split("\n\nDebug source:", 1)[0].strip()
        where = f"{self.url}: {name}"
        code = _status(text)
        if not isinstance(exc, Exception):  # a panic in obstore (see _passes)
            return RemoteError(
                f"{where}: the S3 client broke down trying to {what} it ({_short(text)}): a bug", object=name
            )
        if "<Code>NoSuchBucket</Code>" in text:  # not an object missing: the repository's place
            return RemoteMissing(
                f"{self.url}: the bucket {self._bucket} does not exist on {self._server} (to {what} {name}): "
                f"create it first: `{self._mb}` (or your provider's console, `mc mb`, `rclone mkdir`); "
                "a bucket removed after the repository was made took its history with it",
                object=name,
                bucket=self._bucket,
                endpoint=self._server,
            )
        if isinstance(exc, FileNotFoundError):
            return RemoteMissing(f"{where} is not there", object=name)
        if code == 507 or _server_full(detail):  # before the 403s: Ceph's quota is a 403
            return RemoteFull(
                f"{where}: the server has no space left to {what} it: free space there (or raise the "
                f"bucket's quota) and push again; nothing half-written is trusted. {_server_says(detail)}",
                object=name,
            )
        if isinstance(exc, (PermissionDeniedError, UnauthenticatedError)) or code in (401, 403):
            return RemoteDenied(
                f"{where}: the server refused to {what} it: {_server_says(detail)}; the credentials came "
                f"from {self.source}",
                object=name,
                source=self.source,
            )
        if code is not None and code >= 500:
            return RemoteUnreachable(
                f"{where}: the server kept failing to {what} it (HTTP {code}) through every retry: "
                f"{_server_says(detail)}",
                object=name,
            )
        if code is None and _unanswered(text):
            return RemoteUnreachable(
                f"{where}: no answer from the server (to {what} it) through every retry: {_short(detail)}",
                object=name,
            )
        return RemoteError(f"{where}: could not {what} it: {_short(detail)}", object=name)


def _passes(exc: BaseException) -> bool:
    """Whether ``exc`` is no failure of the S3 client's but the process's own (an interrupt, a
    generator closed early): passed on as is. A panic in obstore's Rust code comes as a
    ``BaseException`` too; it becomes a :class:`RemoteError`, so a daemon thread survives it."""
    return not isinstance(exc, Exception) and type(exc).__name__ != "PanicException"


def _server_full(detail: str) -> bool:
    """Whether the server's error body says its storage is full."""
    code = re.search(r"<Code>([^<]*)</Code>", detail)
    message = re.search(r"<Message>([^<]*)</Message>", detail)
    return bool(code and code.group(1) in _FULL_CODES) or bool(
        message and "no space left" in message.group(1).lower()
    )


def _status(text: str) -> int | None:
    """The HTTP status an obstore error reports, if any."""
    found = _STATUS.search(text)
    return int(found.group(1)) if found else None


def _unanswered(text: str) -> bool:
    lowered = text.lower()
    return any(word in lowered for word in _UNANSWERED)


def _server_says(detail: str) -> str:
    """The server's own code and message when its XML error body is in ``detail``."""
    code = re.search(r"<Code>([^<]*)</Code>", detail)
    message = re.search(r"<Message>([^<]*)</Message>", detail)
    if code:
        return f"{code.group(1)}" + (f" ({message.group(1)})" if message else "")
    return _short(detail)


def _short(detail: str, limit: int = 300) -> str:
    line = " ".join(detail.split())
    return line if len(line) <= limit else line[: limit - 3] + "..."
