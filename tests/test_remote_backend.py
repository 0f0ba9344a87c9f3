"""The backend contract (snapd/remote/backend.py) against a real ``rclone serve s3`` and a
directory, and the S3 backend's errors for what real servers do: wrong keys (403), a killed
server, a full disk (rclone: a bare 500), 5xx answers, ranges answered with status 200."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from e2e_helpers import wait_for
from remote_server import ACCESS_KEY, SECRET_KEY, MakeServer, S3Server

from snapd.errors import (
    ConfigError,
    RemoteDenied,
    RemoteError,
    RemoteFull,
    RemoteMissing,
    RemoteUnreachable,
    UsageError,
)
from snapd.remote.backend import Backend, open_backend
from snapd.remote.files import FileBackend
from snapd.remote.s3 import S3Backend, resolve
from snapd.remote.spec import DirLocation, RemoteSpec, RetryPolicy, S3Location, parse_url

pytestmark = [pytest.mark.remote, pytest.mark.timeout(90)]

QUICK = RetryPolicy(retries=3, timeout_s=3.0, backoff_s=0.05, connect_timeout_s=1.0, request_timeout_s=10.0)


def _s3(server: S3Server, retry: RetryPolicy = QUICK, **creds: str) -> Backend:
    return open_backend(server.spec(), {**server.credentials, **creds}, retry)


@pytest.fixture(params=["s3", "file"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Backend:
    if request.param == "s3":
        server: S3Server = request.getfixturevalue("s3_server")
        return _s3(server)
    return open_backend(RemoteSpec("dir", (tmp_path / "repo").as_uri()), {})


def test_round_trip(backend: Backend) -> None:
    """put / get (whole, ranges) / list / delete keep the contract on every backend."""
    big = os.urandom(3 << 20)
    backend.put("data/ab/abcd", big)
    backend.put("data/cd/cdef", b"small")
    backend.put("index/0001", b"index")
    backend.put("config", b"cfg")
    assert backend.get("data/ab/abcd") == big
    assert backend.get("data/ab/abcd", 100, 200) == big[100:200]
    assert backend.get("data/ab/abcd", len(big) - 4) == big[-4:]
    assert backend.get("data/cd/cdef", 2, 2) == b""
    assert backend.get("config") == b"cfg"
    assert sorted((x.name, x.size) for x in backend.list("data/")) == [
        ("data/ab/abcd", len(big)),
        ("data/cd/cdef", 5),
    ]
    assert [x.name for x in backend.list("data/a")] == ["data/ab/abcd"]  # a prefix inside a segment
    everything = ["config", "data/ab/abcd", "data/cd/cdef", "index/0001"]
    assert sorted(x.name for x in backend.list("")) == everything
    assert all(abs(x.mtime_ns - time.time_ns()) < 600e9 for x in backend.list(""))
    backend.put("config", b"cfg")  # the same bytes again: allowed
    backend.delete("data/cd/cdef")
    backend.delete("data/cd/cdef")  # absent: not an error
    assert sorted(x.name for x in backend.list("data/")) == ["data/ab/abcd"]
    with pytest.raises(RemoteMissing, match=r"data/cd/cdef"):
        backend.get("data/cd/cdef")
    assert list(backend.list("locks/")) == []


def test_names_checked_before_any_request(backend: Backend) -> None:
    before = backend.requests
    for bad in ("../escape", "/abs", "a//b", "a/./b", "", "a b", "data/x\n"):
        with pytest.raises(UsageError):
            backend.put(bad, b"x")
        with pytest.raises(UsageError):
            backend.get(bad)
    with pytest.raises(UsageError):
        list(backend.list("../"))
    assert backend.requests == before


def test_s3_ranges_read_as_ranges_where_the_server_can(s3_servers: MakeServer) -> None:
    """A server whose range answers are 206 (AWS) is read by range; rclone's 200 answers are
    noticed once (one extra request), then objects are read whole and sliced."""
    server = s3_servers(proxy=True)
    assert server.proxy is not None
    data = os.urandom(1 << 20)
    server.proxy.fix_ranges = True
    like_aws = _s3(server)
    like_aws.put("data/aa/pack", data)
    for start, end in ((10, 20), (len(data) - 100, None), (0, 5)):
        before, sent = like_aws.requests, server.proxy.sent
        assert like_aws.get("data/aa/pack", start, end) == data[start:end]
        assert like_aws.requests - before == 1
        assert server.proxy.sent - sent == len(data[start:end])  # only the range crossed the wire
    server.proxy.fix_ranges = False
    like_rclone = _s3(server)
    before = like_rclone.requests
    assert like_rclone.get("data/aa/pack", 10, 20) == data[10:20]
    assert like_rclone.requests - before == 2  # the range refused by obstore, then the whole object
    assert like_rclone.get("data/aa/pack", 30, 40) == data[30:40]
    assert like_rclone.requests - before == 3


def test_requests_are_counted(backend: Backend) -> None:
    before = backend.requests
    backend.put("marks/m1", b"1")
    backend.get("marks/m1")
    list(backend.list("marks/"))
    backend.delete("marks/m1")
    assert backend.requests - before == 4


def test_s3_prefix_confines_the_repository(s3_server: S3Server) -> None:
    """Two prefixes of one bucket do not see each other's objects, and a name lands at
    BUCKET/PREFIX/NAME in the server's folder."""
    a = open_backend(s3_server.spec("snapd", "one"), s3_server.credentials, QUICK)
    b = open_backend(s3_server.spec("snapd", "one-more"), s3_server.credentials, QUICK)
    a.put("keys/k", b"A")
    b.put("keys/k", b"B")
    assert [x.name for x in a.list("")] == ["keys/k"]
    assert a.get("keys/k") == b"A" and b.get("keys/k") == b"B"
    assert (s3_server.folder / "snapd" / "one" / "keys" / "k").read_bytes() == b"A"


def test_s3_missing_bucket_is_remote_missing_naming_bucket_and_endpoint(s3_server: S3Server) -> None:
    """A bucket that does not exist (never made, or removed since) is no missing object: every
    request says which bucket, on which server, and how to create it."""
    spec = s3_server.spec("snapd", "repo")._replace(url="s3://no-such-bucket/repo")
    backend = open_backend(spec, s3_server.credentials, QUICK)
    for attempt in (lambda: list(backend.list("")), lambda: backend.get("config"),
                    lambda: backend.put("config", b"x")):  # fmt: skip
        with pytest.raises(RemoteMissing) as caught:
            attempt()
        message = caught.value.message
        for text in ("bucket no-such-bucket does not exist", s3_server.endpoint, "create it first"):
            assert text in message, (text, message)
        assert "<Error>" not in message and "Generic S3 error" not in message, message
        assert caught.value.details["bucket"] == "no-such-bucket"
    assert not (s3_server.folder / "no-such-bucket").exists()  # nothing made it


def test_s3_wrong_secret_is_denied_naming_its_source(s3_server: S3Server) -> None:
    backend = _s3(s3_server, AWS_SECRET_ACCESS_KEY="not-the-secret-key-0123456789abcdef")
    with pytest.raises(RemoteDenied) as caught:
        backend.put("config", b"x")
    message = caught.value.message
    assert "s3://snapd/repo" in message and "config" in message
    assert "SignatureDoesNotMatch" in message
    assert "the AWS_* variables snapctl sent" in message
    assert not (s3_server.folder / "snapd" / "repo" / "config").exists()
    with pytest.raises(RemoteDenied, match=r"SignatureDoesNotMatch.*snapctl sent"):
        list(backend.list("marks/"))  # a listing's 403 comes from obstore as a generic error


def test_s3_unknown_key_from_credentials_file_is_denied_naming_the_file(
    s3_server: S3Server, tmp_path: Path
) -> None:
    """Keys from the shared credentials file work, and a wrong one there is named as such."""
    home = tmp_path / "awshome"
    (home / ".aws").mkdir(parents=True)
    creds = home / ".aws" / "credentials"
    creds.write_text(
        f"[default]\naws_access_key_id = {ACCESS_KEY}\naws_secret_access_key = {SECRET_KEY}\n\n"
        "[stale]\naws_access_key_id = AKIASTALEKEY00000000\n"
        "aws_secret_access_key = stale-secret-0123456789abcdef\n"
    )
    spec = s3_server.spec()
    good = S3Backend(spec, {}, QUICK, environ={}, home=home)
    good.put("config", b"ok")
    assert good.get("config") == b"ok"
    stale = S3Backend(spec._replace(profile="stale"), s3_server.credentials, QUICK, environ={}, home=home)
    with pytest.raises(RemoteDenied, match=r"InvalidAccessKeyId.*profile 'stale' of .*credentials"):
        stale.get("config")


def test_credentials_order(tmp_path: Path) -> None:
    """The request's keys, then snapd's environment, then the file; keys always as one set; a
    profile named in the config skips both environments."""
    home = tmp_path / "h"
    (home / ".aws").mkdir(parents=True)
    (home / ".aws" / "credentials").write_text(
        "[default]\naws_access_key_id = FILEKEY\naws_secret_access_key = FILESECRET\n"
        "[work]\naws_access_key_id = WORKKEY\naws_secret_access_key = WORKSECRET\naws_session_token = TOK\n"
    )
    (home / ".aws" / "config").write_text("[profile work]\nregion = eu-west-3\n")
    spec = RemoteSpec("r", "s3://bucket/p")
    sent = {"AWS_ACCESS_KEY_ID": "SENT", "AWS_SECRET_ACCESS_KEY": "SENTSECRET", "AWS_REGION": "ap-south-1"}
    env = {"AWS_ACCESS_KEY_ID": "ENV", "AWS_SECRET_ACCESS_KEY": "ENVSECRET", "AWS_SESSION_TOKEN": "ENVTOKEN"}
    got = resolve(spec, sent, env, home)
    assert (got.access_key_id, got.session_token, got.region) == ("SENT", None, "ap-south-1")
    got = resolve(spec, {"AWS_ACCESS_KEY_ID": "HALF"}, env, home)  # no secret sent: not mixed
    assert (got.access_key_id, got.secret_access_key, got.session_token) == ("ENV", "ENVSECRET", "ENVTOKEN")
    assert got.source == "snapd's own environment" and got.region == "us-east-1"
    got = resolve(spec, {}, {}, home)
    assert (got.access_key_id, got.source) == ("FILEKEY", f"profile 'default' of {home}/.aws/credentials")
    got = resolve(spec, {"AWS_PROFILE": "work"}, {}, home)
    assert (got.access_key_id, got.session_token, got.region) == ("WORKKEY", "TOK", "eu-west-3")
    named = spec._replace(profile="work", region="us-west-2", endpoint="http://h:9000")
    got = resolve(named, sent, env, home)
    assert (got.access_key_id, got.region, got.endpoint) == ("WORKKEY", "us-west-2", "http://h:9000")
    with pytest.raises(RemoteDenied, match=r"no S3 credentials.*profile 'nope'"):
        resolve(spec._replace(profile="nope"), sent, env, home)
    (home / ".aws" / "credentials").write_text("not an ini file\n")
    with pytest.raises(ConfigError, match="credentials"):
        resolve(spec, {}, {}, home)
    assert resolve(spec, sent, {}, home).access_key_id == "SENT"  # a broken file unread when not needed


def test_s3_killed_server_is_unreachable_after_bounded_retries(s3_server: S3Server) -> None:
    backend = _s3(s3_server)
    backend.put("config", b"x")
    s3_server.kill()
    started = time.monotonic()
    with pytest.raises(RemoteUnreachable, match=r"s3://snapd/repo: index/0001: no answer from the server"):
        backend.put("index/0001", b"y")
    with pytest.raises(RemoteUnreachable, match=r"config"):
        backend.get("config")
    assert time.monotonic() - started < 2 * (QUICK.timeout_s + QUICK.connect_timeout_s) + 2
    s3_server.restart()
    backend.put("index/0001", b"y")  # the same backend works again once the server is back
    assert backend.get("index/0001") == b"y"


def test_s3_5xx_is_retried(s3_servers: MakeServer) -> None:
    server = s3_servers(proxy=True)
    assert server.proxy is not None
    backend = _s3(server)
    server.proxy.fail_next = 2
    backend.put("data/aa/one", b"payload")
    assert server.proxy.failed == 2 and server.proxy.seen == 3
    server.proxy.fail_next = 2
    assert backend.get("data/aa/one") == b"payload"
    assert server.proxy.failed == 4
    server.proxy.fail_next = 1000  # a server that keeps failing: bounded, then a clear error
    kept_failing = r"data/aa/two: the server kept failing to write it \(HTTP 503\)"
    with pytest.raises(RemoteUnreachable, match=kept_failing):
        backend.put("data/aa/two", b"x")
    assert server.proxy.failed - 4 <= 2 * (QUICK.retries + 1)  # the put's tries, then the listing's


def test_s3_slow_server_times_out(s3_servers: MakeServer) -> None:
    """A server slower than the request timeout: retried, then unreachable, in bounded time."""
    server = s3_servers(proxy=True)
    assert server.proxy is not None
    slow = RetryPolicy(retries=1, timeout_s=2.0, backoff_s=0.05, connect_timeout_s=1.0, request_timeout_s=0.5)
    backend = _s3(server, slow)
    backend.put("config", b"x")
    server.proxy.delay_s = 2.0
    started = time.monotonic()
    with pytest.raises(RemoteUnreachable, match=r"s3://snapd/repo: config: no answer from the server"):
        backend.get("config")
    assert time.monotonic() - started < 6
    assert server.proxy.seen >= 3  # the put, the get and its retry


def test_s3_hung_server_is_unreachable_until_it_resumes(s3_server: S3Server) -> None:
    """A server that accepts connections but answers nothing (SIGSTOP)."""
    hung = RetryPolicy(retries=1, timeout_s=2.0, backoff_s=0.05, connect_timeout_s=1.0, request_timeout_s=0.5)
    backend = _s3(s3_server, hung)
    backend.put("config", b"x")
    s3_server.pause()
    try:
        with pytest.raises(RemoteUnreachable, match=r"config: no answer from the server"):
            backend.get("config")
    finally:
        s3_server.resume()
    assert backend.get("config") == b"x"


def test_s3_put_cut_short_leaves_no_object(s3_server: S3Server) -> None:
    """rclone writes a PUT to a hidden temporary file and renames it: a server killed in the
    middle of one leaves no object a listing or a reader would see (the write order relies on
    this); the next PUT of the name lands whole."""
    backend = _s3(s3_server, RetryPolicy(retries=0, timeout_s=1.0, connect_timeout_s=1.0))
    data = os.urandom(256 << 20)
    folder = s3_server.folder / "snapd" / "repo" / "data" / "aa"
    failed: list[BaseException] = []

    def push() -> None:
        try:
            backend.put("data/aa/big", data)
        except BaseException as exc:  # noqa: BLE001 - handed to the test thread
            failed.append(exc)

    pusher = threading.Thread(target=push)
    pusher.start()
    try:
        wait_for(lambda: folder.is_dir() and any(p.stat().st_size > 0 for p in folder.iterdir()),
                 20, 0.002, "rclone's temporary file of the PUT, partly written")
        s3_server.kill()
    finally:
        pusher.join(30)
    assert failed and isinstance(failed[0], RemoteUnreachable), failed
    left = [p.name for p in folder.iterdir()]
    assert left and all(name.startswith(".rclone_temp_put_") for name in left), left
    s3_server.restart()
    assert list(backend.list("")) == []
    with pytest.raises(RemoteMissing):
        backend.get("data/aa/big")
    small = os.urandom(1 << 20)
    backend.put("data/aa/big", small)
    assert backend.get("data/aa/big") == small


@pytest.mark.parametrize(("status", "code"), [(507, "InsufficientStorage"), (403, "QuotaExceeded")])
def test_s3_full_answers_are_remote_full(s3_servers: MakeServer, status: int, code: str) -> None:
    """A 507, or a quota refused with 403 (Ceph RGW), is a full remote, not a credentials problem."""
    server = s3_servers(proxy=True)
    assert server.proxy is not None
    backend = _s3(server)
    server.proxy.fail_next, server.proxy.fail_status, server.proxy.fail_code = 1000, status, code
    with pytest.raises(RemoteFull, match=rf"data/aa/one: the server has no space left.*{code}"):
        backend.put("data/aa/one", b"x")


def test_s3_busy_server_is_not_taken_for_a_full_one(s3_servers: MakeServer) -> None:
    """PUTs refused with 503 (SlowDown) while reads work: a busy server, not a full disk."""
    server = s3_servers(proxy=True)
    assert server.proxy is not None
    backend = _s3(server)
    server.proxy.fail_next, server.proxy.fail_method, server.proxy.fail_code = 1000, "PUT", "SlowDown"
    busy = r"kept failing to write it \(HTTP 503\) through every retry: SlowDown"
    with pytest.raises(RemoteUnreachable, match=busy):
        backend.put("data/aa/one", b"x")


def test_s3_403_is_not_retried(s3_servers: MakeServer) -> None:
    server = s3_servers(proxy=True)
    assert server.proxy is not None
    backend = _s3(server, AWS_SECRET_ACCESS_KEY="not-the-secret-key-0123456789abcdef")
    with pytest.raises(RemoteDenied):
        backend.get("config")
    assert server.proxy.seen == 1


def test_s3_full_disk_is_remote_full(s3_servers: MakeServer) -> None:
    """rclone answers a write to a full disk with a bare 500: the backend tells it from a
    broken server (it still lists) and says the disk is full; nothing partial is left."""
    server = s3_servers(tmpfs=4 << 20)
    backend = _s3(server)
    backend.put("data/aa/first", os.urandom(3 << 20))
    with pytest.raises(RemoteFull, match=r"s3://snapd/repo: data/bb/second: .*disk is full"):
        backend.put("data/bb/second", os.urandom(3 << 20))
    assert [x.name for x in backend.list("data/")] == ["data/aa/first"]
    backend.delete("data/aa/first")
    backend.put("data/bb/second", b"fits now")
    assert backend.get("data/bb/second") == b"fits now"


def test_file_backend_full_disk_is_remote_full(tmp_path: Path) -> None:
    from disks import tmpfs

    with tmpfs(tmp_path / "small", 1 << 20) as mount:
        backend = FileBackend(mount / "repo")
        with pytest.raises(RemoteFull, match=r"data/aa/big"):
            backend.put("data/aa/big", os.urandom(2 << 20))
        assert list(backend.list("")) == []  # no temp file, no partial object
        assert [p.name for p in (mount / "repo" / "data" / "aa").iterdir()] == []


def test_file_backend_never_creates_the_roots_parent(tmp_path: Path) -> None:
    """A repository on a disk that is not mounted must not land on the disk below: the root is
    created in an existing parent, never the parent itself."""
    with pytest.raises(RemoteUnreachable, match=r"is the disk mounted"):
        FileBackend(tmp_path / "mnt" / "usb" / "repo").put("config", b"x")
    assert not (tmp_path / "mnt").exists()
    FileBackend(tmp_path / "repo").put("config", b"x")  # the root itself is made
    assert (tmp_path / "repo" / "config").read_bytes() == b"x"


def test_file_backend_skips_temp_files(tmp_path: Path) -> None:
    """A crash between write and rename leaves a ``.snapd-*~`` temp: never listed."""
    backend = FileBackend(tmp_path / "repo")
    backend.put("index/one", b"1")
    (tmp_path / "repo" / "index" / ".snapd-0123456789ab~").write_bytes(b"half")
    assert [x.name for x in backend.list("index/")] == ["index/one"]


def test_s3_client_loaded_only_for_s3(tmp_path: Path) -> None:
    """obstore is imported for an s3:// remote only, when its backend is opened."""
    code = (
        "import sys\n"
        "from snapd.remote.backend import open_backend\n"
        "from snapd.remote.spec import RemoteSpec\n"
        f"open_backend(RemoteSpec('d', {(tmp_path / 'r').as_uri()!r}), {{}}).put('config', b'x')\n"
        "assert 'obstore' not in sys.modules, 'file:// loaded obstore'\n"
        "open_backend(RemoteSpec('s', 's3://bucket/p', endpoint='http://127.0.0.1:9'),\n"
        "             {'AWS_ACCESS_KEY_ID': 'k', 'AWS_SECRET_ACCESS_KEY': 's'})\n"
        "assert 'obstore' in sys.modules\n"
    )
    cp = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd="/")
    assert cp.returncode == 0, cp.stderr


@pytest.mark.parametrize(
    ("field", "value", "error"),
    [
        ("endpoint", "localhost:9000", UsageError),  # obstore panics on it at the first request
        ("endpoint", "http://h:9000/path", UsageError),
        ("region", "eu west", UsageError),
        ("key", "AKIA KEY", ConfigError),
        ("key", "AKIA\nKEY", ConfigError),
    ],
)
def test_s3_settings_checked_before_any_request(field: str, value: str, error: type[Exception]) -> None:
    spec = RemoteSpec("r", "s3://bucket/p", endpoint="http://127.0.0.1:9")
    creds = {"AWS_ACCESS_KEY_ID": "AKIAKEY", "AWS_SECRET_ACCESS_KEY": "secret"}
    if field == "key":
        creds["AWS_ACCESS_KEY_ID"] = value
    else:
        spec = spec._replace(**{field: value})
    with pytest.raises(error, match=r"endpoint|region|AWS_ACCESS_KEY_ID"):
        open_backend(spec, creds, QUICK)


def test_s3_client_panic_is_a_remote_error(s3_server: S3Server, monkeypatch: pytest.MonkeyPatch) -> None:
    """A panic in obstore's Rust code arrives as a BaseException (pyo3's PanicException): it
    becomes a RemoteError, so the daemon thread that met it lives on; an interrupt passes."""
    import obstore

    class PanicException(BaseException):  # pyo3_runtime's, by name: it cannot be imported
        pass

    backend = _s3(s3_server)

    def panics(*args: object, **kwargs: object) -> None:
        raise PanicException("request valid: InvalidUri")

    monkeypatch.setattr(obstore, "get", panics)
    with pytest.raises(RemoteError, match=r"config: the S3 client broke down trying to read it"):
        backend.get("config")

    def interrupted(*args: object, **kwargs: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(obstore, "get", interrupted)
    with pytest.raises(KeyboardInterrupt):
        backend.get("config")


@pytest.mark.parametrize(
    ("url", "want"),
    [
        ("s3://my-bucket/a/b/", S3Location("my-bucket", "a/b")),
        ("s3://my-bucket", S3Location("my-bucket", "")),
        ("file:///srv/snapd/", DirLocation(Path("/srv/snapd"))),
    ],
)
def test_parse_url(url: str, want: object) -> None:
    assert parse_url(url) == want


@pytest.mark.parametrize(
    "url",
    ["my-bucket/x", "http://host/x", "s3://My_Bucket/x", "s3://b/x", "s3://bucket/a/../b", "file://host/dir",
     "file:///", "file:///a/../b", "gs://bucket/x"],
)
def test_parse_url_refuses(url: str) -> None:
    with pytest.raises(UsageError, match="remote URL"):
        parse_url(url)
