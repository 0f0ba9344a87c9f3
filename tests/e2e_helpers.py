"""Helpers for the end-to-end tests: a real ``snapd start`` process driven by the real CLI.

The daemon runs as ``sys.executable -m snapd start`` with its own ``SNAPD_HOME`` and an isolated
``HOME``; the CLI runs as ``sys.executable -m snapd <command>``. Raw ZeroMQ frames (for the
malformed requests no well-behaved client can send) go through :func:`raw_call`.

Waiting is always poll-until-deadline (``wait_for``); a deadline that passes is a failure with
the daemon's log attached, never a silent pass.
"""

from __future__ import annotations

import contextlib
import json
import os
import pty
import select
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import zmq

from snapd.client import Client
from snapd.config import load_config, resolve_endpoint

Arg = str | bytes | os.PathLike[str]


def wait_for(
    predicate: Callable[[], object], timeout: float = 10.0, interval: float = 0.02, what: str = ""
) -> object:
    """Poll until ``predicate()`` is truthy; fail with a clear message at the deadline."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout}s: {what or predicate}")
        time.sleep(interval)


def base_env(snapd_home: Path) -> dict[str, str]:
    """The test process's environment (already isolated by conftest) plus ``SNAPD_HOME``."""
    env = dict(os.environ)
    env["SNAPD_HOME"] = str(snapd_home)
    env.pop("SNAPD_CONFIG", None)
    env["PYTHONUNBUFFERED"] = "1"
    # Git must neither read the developer's config nor prompt.
    env["GIT_CONFIG_NOSYSTEM"] = "1"
    env["GIT_CONFIG_GLOBAL"] = os.devnull
    env["GIT_TERMINAL_PROMPT"] = "0"
    return env


def run_ctl(
    env: dict[str, str],
    *args: Arg,
    cwd: Path | str | None = None,
    timeout: float = 30.0,
    input: bytes | None = None,
) -> subprocess.CompletedProcess[bytes]:
    """``python -m snapd ARGS`` (snapctl for everything but start); output as bytes."""
    argv: list[Arg] = [sys.executable, "-m", "snapd", *args]
    return subprocess.run(argv, env=env, cwd=cwd, capture_output=True, timeout=timeout, input=input)


def describe(cp: subprocess.CompletedProcess[bytes]) -> str:
    return (
        f"argv={cp.args!r} rc={cp.returncode}\nstdout={cp.stdout.decode(errors='replace')}"
        f"\nstderr={cp.stderr.decode(errors='replace')}"
    )


@dataclass
class Daemon:
    """One running ``snapd start`` and everything needed to talk to it."""

    proc: subprocess.Popen[bytes]
    env: dict[str, str]
    snapd_home: Path
    log_path: Path
    endpoint: str
    _clients: list[Client] = field(default_factory=list)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return "(no log)"

    def ctl(
        self, *args: Arg, cwd: Path | str | None = None, timeout: float = 30.0, check: bool = True
    ) -> subprocess.CompletedProcess[bytes]:
        cp = run_ctl(self.env, *args, cwd=cwd, timeout=timeout)
        if check:
            assert cp.returncode == 0, describe(cp) + "\n--- daemon log ---\n" + self.log()[-4000:]
        return cp

    def ctl_json(self, *args: Arg, cwd: Path | str | None = None, timeout: float = 30.0) -> Any:
        cp = self.ctl(*args, "--json", cwd=cwd, timeout=timeout)
        return json.loads(cp.stdout)

    def client(self, timeout_s: float = 10.0) -> Client:
        """An in-process client over the real socket; closed at teardown."""
        c = Client(self.endpoint, timeout_s)
        self._clients.append(c)
        return c

    def call(self, op: str, **args: Any) -> dict[str, Any]:
        with Client(self.endpoint, 15.0) as c:
            return c.call(op, **args)  # type: ignore[arg-type]

    def answers(self) -> bool:
        try:
            with Client(self.endpoint, 2.0) as c:
                c.call("ping")
            return True
        except Exception:
            return False

    def alive(self) -> bool:
        return self.proc.poll() is None

    def close_clients(self) -> None:
        for c in self._clients:
            c.close()
        self._clients.clear()

    def wait_exit(self, timeout: float = 15.0) -> int | None:
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return None

    def stop(self) -> int:
        """``snapctl stop``, then wait; SIGKILL (and fail) if it does not exit. Returns its code."""
        self.close_clients()
        if self.proc.poll() is None:
            os.kill(self.pid, signal.SIGCONT)  # a test that failed mid-SIGSTOP must not hang us
            run_ctl(self.env, "stop", timeout=20)
            code = self.wait_exit(15)
            if code is None:
                self.proc.kill()
                self.proc.wait(10)
                raise AssertionError(
                    "snapd did not exit after `snapctl stop`; killed it\n" + self.log()[-4000:]
                )
        return self.proc.returncode


def start_daemon(snapd_home: Path, env: dict[str, str] | None = None, *, timeout: float = 20.0) -> Daemon:
    """Spawn ``snapd start``; return once ``status`` answers (fail with its log otherwise)."""
    env = env or base_env(snapd_home)
    log_path = snapd_home.parent / f"{snapd_home.name}-daemon-{uuid.uuid4().hex[:6]}.log"
    with open(log_path, "wb") as log_fh:
        proc = subprocess.Popen(
            [sys.executable, "-m", "snapd", "start", "--log-level", "debug", "--log-json"],
            env=env,
            stdout=log_fh,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            cwd="/",  # python -m puts the cwd first on sys.path: a "snapd" dir there would shadow us
        )
    endpoint = resolve_endpoint(load_config(env))
    d = Daemon(proc, env, snapd_home, log_path, endpoint)

    def ready() -> bool:
        if proc.poll() is not None:
            raise AssertionError(f"snapd start exited with {proc.returncode}\n{d.log()}")
        try:
            with Client(resolve_endpoint(load_config(env)), 2.0) as c:
                st = c.call("status")
        except Exception:
            return False
        return st.get("pid") == proc.pid

    try:
        wait_for(ready, timeout, what="snapd answers status")
    except BaseException:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
        raise
    d.endpoint = resolve_endpoint(load_config(env))
    return d


# -- raw protocol --------------------------------------------------------------------------------


def raw_call(endpoint: str, frames: Sequence[bytes], timeout: float = 10.0) -> list[bytes] | None:
    """Send ``frames`` on a fresh DEALER socket; the reply's frames, or None on silence."""
    ctx: zmq.Context[zmq.Socket[bytes]] = zmq.Context.instance()
    sock = ctx.socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    try:
        sock.connect(endpoint)
        sock.send_multipart(list(frames))
        if not sock.poll(int(timeout * 1000), zmq.POLLIN):
            return None
        return list(sock.recv_multipart())
    finally:
        sock.close(0)


def raw_json(endpoint: str, payload: bytes, timeout: float = 10.0) -> dict[str, Any]:
    frames = raw_call(endpoint, [payload], timeout)
    assert frames is not None, f"no reply to {payload[:200]!r}"
    assert len(frames) == 1, frames
    reply = json.loads(frames[0])
    assert isinstance(reply, dict)
    return reply


def request(op: Any, args: Any = None, *, version: Any = 1, rid: Any = None, **extra: Any) -> bytes:
    obj: dict[str, Any] = {"op": op, "id": rid or uuid.uuid4().hex, "version": version}
    if args is not None:
        obj["args"] = args
    obj.update(extra)
    return json.dumps(obj).encode()


def no_cookies(root: Path) -> list[str]:
    """Barrier cookies (``.snapd-*~``) anywhere under ``root``."""
    found = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if d != ".git"]
        for name in filenames + dirnames:
            if name.startswith(".snapd-") and name.endswith("~"):
                found.append(os.path.join(dirpath, name))
    return found


# -- a real terminal ---------------------------------------------------------------------------


class Pty:
    """A CLI run whose stdin, stderr (and stdout, unless ``stdout`` names a file to redirect
    it to, as ``> file`` in a shell) are a terminal; read until a prompt appears."""

    def __init__(self, env: dict[str, str], *args: str | Path, cwd: Path, stdout: Path | None = None) -> None:
        self.master, slave = pty.openpty()
        with contextlib.ExitStack() as stack:
            out = stack.enter_context(open(stdout, "wb")) if stdout is not None else slave
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "snapd", *map(str, args)],
                env=env,
                cwd=cwd,
                stdin=slave,
                stdout=out,
                stderr=slave,
            )
        os.close(slave)
        self.out = b""

    def read_until(self, needle: bytes, timeout: float = 30.0) -> bytes:
        deadline = time.monotonic() + timeout
        while needle not in self.out:
            left = deadline - time.monotonic()
            assert left > 0, f"no {needle!r} in {self.out!r}"
            ready, _, _ = select.select([self.master], [], [], left)
            if ready:
                try:
                    chunk = os.read(self.master, 4096)
                except OSError:  # EIO: the other side closed
                    chunk = b""
                if not chunk:
                    assert needle in self.out, f"EOF before {needle!r}: {self.out!r}"
                self.out += chunk
        return self.out

    def send(self, text: bytes) -> None:
        os.write(self.master, text)

    def finish(self, timeout: float = 30.0) -> int:
        try:
            while True:
                ready, _, _ = select.select([self.master], [], [], 0.5)
                if ready:
                    chunk = os.read(self.master, 4096)
                    if not chunk:
                        break
                    self.out += chunk
                elif self.proc.poll() is not None:
                    break
        except OSError:
            pass
        code = self.proc.wait(timeout)
        os.close(self.master)
        return code


# -- another uid ---------------------------------------------------------------------------------

NOBODY = 65534


def fail_or_skip(reason: str) -> None:
    """A test that cannot set up its real condition fails under CI (never a quiet skip there)."""
    import pytest

    if os.environ.get("CI"):
        pytest.fail(f"cannot set up this test's real condition: {reason}")
    pytest.skip(reason)


@dataclass
class OtherUid:
    """A ``snapd start`` running as uid 65534 (root ignores file modes, so permission tests
    need another uid), with a home and a workspace that uid owns under ``top``."""

    top: Path
    ws: Path
    exe: str
    env: dict[str, str]
    proc: subprocess.Popen[bytes] | None = None

    @property
    def log_path(self) -> Path:
        return self.top / "daemon.log"

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return "(no log)"

    def run(
        self, argv: Sequence[Arg], *, cwd: Path | None = None, timeout: float = 60.0
    ) -> subprocess.CompletedProcess[bytes]:
        return subprocess.run(
            list(argv),
            env=self.env,
            user=NOBODY,
            group=NOBODY,
            extra_groups=[],
            capture_output=True,
            cwd=cwd or self.ws,
            timeout=timeout,
        )

    def sh(self, script: str) -> None:
        """Run a shell script as uid 65534 in the workspace (files it makes belong to that uid)."""
        cp = self.run(["/bin/sh", "-ec", script])
        assert cp.returncode == 0, describe(cp)

    def ctl(
        self, *args: Arg, check: bool = True, cwd: Path | None = None
    ) -> subprocess.CompletedProcess[bytes]:
        cp = self.run([self.exe, "-m", "snapd", *args], cwd=cwd)
        assert not check or cp.returncode == 0, describe(cp) + "\n--- daemon log ---\n" + self.log()[-3000:]
        return cp

    def ctl_json(self, *args: Arg) -> Any:
        return json.loads(self.ctl(*args, "--json").stdout)

    def start(self) -> None:
        with open(self.log_path, "wb") as fh:
            self.proc = subprocess.Popen(
                [self.exe, "-m", "snapd", "start", "--log-level", "debug"],
                env=self.env,
                user=NOBODY,
                group=NOBODY,
                extra_groups=[],
                stdout=fh,
                stderr=subprocess.STDOUT,
                cwd="/",
                stdin=subprocess.DEVNULL,
            )
        wait_for(lambda: self.ctl("status", check=False).returncode == 0, 30, 0.1, "daemon as uid 65534")

    def stop(self) -> int:
        assert self.proc is not None
        self.ctl("stop", check=False)
        try:
            return self.proc.wait(20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)
            log = self.log()[-3000:]
            raise AssertionError("snapd as uid 65534 did not stop; killed it\n" + log) from None


def other_uid() -> OtherUid:
    """Set up (not start) a daemon as uid 65534: a system Python of this version that can import
    snapd and its dependencies from this checkout and venv, and a world-enterable top directory
    (pytest's own temp root is 0700). Fails under CI, skips elsewhere, when that cannot be done."""
    import tempfile

    import zmq

    import snapd

    exe = f"/usr/bin/python{sys.version_info.major}.{sys.version_info.minor}"
    if os.getuid() != 0:
        fail_or_skip("switching to uid 65534 needs root")
    if not os.access(exe, os.X_OK):
        fail_or_skip(f"{exe} (a Python that uid 65534 can run) is missing")
    top = Path(tempfile.mkdtemp(prefix="snapd-uid-"))
    top.chmod(0o755)
    home, ws = top / "home", top / "ws"
    home.mkdir()
    ws.mkdir()
    os.chown(home, NOBODY, NOBODY)
    os.chown(ws, NOBODY, NOBODY)
    env = base_env(home / "snapd")
    env["HOME"] = str(home)
    site = os.path.dirname(os.path.dirname(zmq.__file__))
    env["PYTHONPATH"] = os.pathsep.join([os.path.dirname(os.path.dirname(snapd.__file__)), site])
    o = OtherUid(top, ws, exe, env)
    probe = o.run([exe, "-c", "import snapd, zmq, xxhash, zstandard, watchdog, structlog"], cwd=Path("/"))
    if probe.returncode != 0:
        import shutil

        shutil.rmtree(top, ignore_errors=True)
        fail_or_skip(f"{exe} cannot import snapd's dependencies as uid 65534: {probe.stderr[-300:]!r}")
    return o
