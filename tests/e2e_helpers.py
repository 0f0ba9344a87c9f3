"""Helpers for the end-to-end tests: a real ``snapd start`` process driven by the real CLI.

The daemon runs as ``sys.executable -m snapd start`` with its own ``SNAPD_HOME`` and an isolated
``HOME``; the CLI runs as ``sys.executable -m snapd <command>``. Raw ZeroMQ frames (for the
malformed requests no well-behaved client can send) go through :func:`raw_call`.

Waiting is always poll-until-deadline (``wait_for``); a deadline that passes is a failure with
the daemon's log attached, never a silent pass.

Another uid: root ignores file modes, so tests of permissions run the daemon, the CLI and the
file operations as uid 65534 (:func:`nobody`, a :class:`User`). A condition a test cannot set up
is a skip on a developer's machine and a failure under ``CI`` (:func:`need`), never a silent pass.

Trees are compared as :data:`Snap` maps (:func:`snapshot`): kind, permission bits, bytes, link
text of every path, read as this process (root reads what the workspace's owner may not).
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import zmq

from snapd.client import Client
from snapd.config import load_config, resolve_endpoint

Arg = str | bytes | os.PathLike[str]

NOBODY = 65534


def need(reason: str) -> None:
    """A condition this test cannot set up: fail under ``CI`` (never skip silently there), else skip."""
    if os.environ.get("CI"):
        pytest.fail(f"cannot set up: {reason} (CI is set, so this is a failure, not a skip)")
    pytest.skip(reason)


@dataclass(frozen=True)
class User:
    """Who runs a test's daemon, CLI and file operations: this process, or another uid.

    ``python`` and ``env`` (``PYTHONPATH``) are an interpreter and code that this uid can read;
    :meth:`do` runs a function in a forked child that switched to the uid first.
    """

    uid: int
    gid: int
    python: str
    env: Mapping[str, str] = field(default_factory=dict)

    @property
    def is_self(self) -> bool:
        return self.uid == os.getuid()

    def _switch(self) -> dict[str, Any]:
        return {} if self.is_self else {"user": self.uid, "group": self.gid, "extra_groups": []}

    def run(self, argv: Sequence[Arg], **kw: Any) -> subprocess.CompletedProcess[bytes]:
        return subprocess.run(list(argv), **self._switch(), **kw)

    def popen(self, argv: Sequence[Arg], **kw: Any) -> subprocess.Popen[bytes]:
        return subprocess.Popen(list(argv), **self._switch(), **kw)

    def do(self, fn: Callable[..., object], *args: Any, check: bool = True) -> str | None:
        """``fn(*args)`` as this user. With ``check`` an ``OSError``/``CalledProcessError`` fails the
        test; without, it is returned as text (None: no error) — a user's command that failed."""
        err = self._do(fn, *args)
        assert not (check and err), f"{fn.__name__}{args!r} as uid {self.uid}: {err}"
        return err

    def _do(self, fn: Callable[..., object], *args: Any) -> str | None:
        if self.is_self:
            try:
                fn(*args)
            except (OSError, subprocess.CalledProcessError) as exc:
                return f"{type(exc).__name__}: {exc}"
            return None
        rfd, wfd = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: switch, run, report, and never return into pytest
            code = 0
            try:
                os.close(rfd)
                os.setgroups([])
                os.setgid(self.gid)
                os.setuid(self.uid)
                fn(*args)
            except (OSError, subprocess.CalledProcessError) as exc:
                os.write(wfd, f"{type(exc).__name__}: {exc}".encode())
            except BaseException as exc:  # a bug in the test: say so loudly
                os.write(wfd, f"BUG {type(exc).__name__}: {exc}".encode())
                code = 2
            finally:
                os._exit(code)
        os.close(wfd)
        with os.fdopen(rfd, "rb") as fh:
            out = fh.read().decode(errors="replace")
        _, status = os.waitpid(pid, 0)
        if os.waitstatus_to_exitcode(status) != 0:
            raise AssertionError(f"{fn.__name__}{args!r} as uid {self.uid}: {out or status}")
        return out or None


def myself() -> User:
    return User(os.getuid(), os.getgid(), sys.executable)


_RUNTIME_PACKAGES = ("snapd", "zmq", "xxhash", "zstandard", "watchdog", "structlog", "pathspec")


def _probe(user: User) -> str:
    """Why ``user`` cannot run snapd with ``user.python`` and ``user.env`` ("" when it can)."""
    try:
        cp = user.run(
            [user.python, "-c", "import " + ", ".join(_RUNTIME_PACKAGES)],
            env={**os.environ, **user.env},
            capture_output=True,
            cwd="/",
            timeout=60,
        )
    except OSError as exc:
        return f"{user.python}: {exc}"
    return "" if cp.returncode == 0 else f"{user.python}: {cp.stderr.decode(errors='replace')[-400:]}"


def _readable_copy_of_packages() -> str:
    """snapd and its runtime packages copied to a world-readable directory (removed at exit)."""
    top = Path(tempfile.mkdtemp(prefix="snapd-code-"))
    for name in _RUNTIME_PACKAGES:
        src = Path(importlib.import_module(name).__file__ or "").parent
        shutil.copytree(src, top / src.name, ignore=shutil.ignore_patterns("__pycache__"))
        for libs in src.parent.glob(f"{name}*.libs"):  # bundled shared libraries (pyzmq.libs)
            if not (top / libs.name).exists():
                shutil.copytree(libs, top / libs.name)
    for dirpath, dirnames, filenames in os.walk(top):
        for n in dirnames + filenames + ["."]:
            p = os.path.join(dirpath, n)
            os.chmod(
                p,
                os.stat(p).st_mode
                | stat.S_IRUSR
                | stat.S_IRGRP
                | stat.S_IROTH
                | (stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH if os.path.isdir(p) else 0),
            )
    import atexit

    atexit.register(shutil.rmtree, top, True)
    return str(top)


@functools.cache
def _nobody_or_reason() -> User | str:
    if os.getuid() != 0:
        return "switching to uid 65534 needs root"
    here = os.pathsep.join(
        dict.fromkeys(
            str(Path(importlib.import_module(n).__file__ or "").parent.parent) for n in ("snapd", "zmq")
        )
    )
    system = f"/usr/bin/python{sys.version_info.major}.{sys.version_info.minor}"
    exes = [os.path.realpath(sys.executable)] + ([system] if os.access(system, os.X_OK) else [])
    reasons = []
    for copy in (False, True):  # the code where it is, else a world-readable copy of it
        path = _readable_copy_of_packages() if copy else here
        for exe in exes:
            user = User(NOBODY, NOBODY, exe, {"PYTHONPATH": path, "PYTHONDONTWRITEBYTECODE": "1"})
            why = _probe(user)
            if not why:
                return user
            reasons.append(why)
    return "no Python that uid 65534 can run with snapd's packages: " + " | ".join(reasons)


def nobody() -> User:
    """uid/gid 65534 with an interpreter and snapd's code it can read; else :func:`need` fails or skips.

    The venv's own interpreter may live where 65534 cannot enter (``/root/.pyenv``): then a system
    Python of the same version runs the venv's packages (binary wheels need the same version);
    when the code itself is unreadable, a world-readable copy of the runtime packages is used.
    """
    got = _nobody_or_reason()
    if isinstance(got, str):
        need(got)
        raise AssertionError("unreachable")  # need() raised
    return got


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
    user: User | None = None,
) -> subprocess.CompletedProcess[bytes]:
    """``python -m snapd ARGS`` (snapctl for everything but start) as ``user``; output as bytes."""
    user = user or myself()
    argv: list[Arg] = [user.python, "-m", "snapd", *args]
    return user.run(argv, env={**env, **user.env}, cwd=cwd, capture_output=True, timeout=timeout, input=input)


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
    user: User = field(default_factory=myself)
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
        cp = run_ctl(self.env, *args, cwd=cwd, timeout=timeout, user=self.user)
        if check:
            assert cp.returncode == 0, describe(cp) + "\n--- daemon log ---\n" + self.log()[-4000:]
        return cp

    def ctl_json(self, *args: Arg, cwd: Path | str | None = None, timeout: float = 30.0) -> Any:
        cp = self.ctl(*args, "--json", cwd=cwd, timeout=timeout)
        return json.loads(cp.stdout)

    def client(self, timeout_s: float = 10.0) -> Client:
        """An in-process client over the real socket; closed at teardown (same uid only)."""
        assert self.user.is_self, "the daemon refuses clients of another uid: use ctl()"
        c = Client(self.endpoint, timeout_s)
        self._clients.append(c)
        return c

    def call(self, op: str, **args: Any) -> dict[str, Any]:
        with Client(self.endpoint, 15.0) as c:
            return c.call(op, **args)  # type: ignore[arg-type]

    def answers(self) -> bool:
        if not self.user.is_self:
            return run_ctl(self.env, "status", timeout=5, user=self.user).returncode == 0
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
            with contextlib.suppress(PermissionError):  # (another uid's daemon is never stopped)
                os.kill(self.pid, signal.SIGCONT)  # a test that failed mid-SIGSTOP must not hang us
            run_ctl(self.env, "stop", timeout=20, user=self.user)
            code = self.wait_exit(15)
            if code is None:
                self.proc.kill()
                self.proc.wait(10)
                raise AssertionError(
                    "snapd did not exit after `snapctl stop`; killed it\n" + self.log()[-4000:]
                )
        return self.proc.returncode


def start_daemon(
    snapd_home: Path, env: dict[str, str] | None = None, *, timeout: float = 20.0, user: User | None = None
) -> Daemon:
    """Spawn ``snapd start`` as ``user``; return once ``status`` answers (fail with its log otherwise)."""
    user = user or myself()
    env = {**(env or base_env(snapd_home)), **user.env}
    log_path = snapd_home.parent / f"{snapd_home.name}-daemon-{uuid.uuid4().hex[:6]}.log"
    with open(log_path, "wb") as log_fh:
        proc = user.popen(
            [user.python, "-m", "snapd", "start", "--log-level", "debug", "--log-json"],
            env=env,
            stdout=log_fh,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            cwd="/",  # python -m puts the cwd first on sys.path: a "snapd" dir there would shadow us
        )
    endpoint = resolve_endpoint(load_config(env))
    d = Daemon(proc, env, snapd_home, log_path, endpoint, user)

    def ready() -> bool:
        if proc.poll() is not None:
            raise AssertionError(f"snapd start exited with {proc.returncode}\n{d.log()}")
        if not user.is_self:
            cp = run_ctl(env, "status", "--json", timeout=10, user=user)
            return cp.returncode == 0 and json.loads(cp.stdout).get("pid") == proc.pid
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


# -- trees as data --------------------------------------------------------------------------------

Entry = tuple[Any, ...]  # ("file", mode, bytes) | ("dir", mode) | ("link", text) | ("special", fmt)
Snap = dict[str, Entry]  # rel path -> entry


def snapshot(root: Path, *, with_root: bool = False) -> Snap:
    """Everything under ``root`` (``.git`` excepted), never following a symlink; with ``with_root``
    also the root's own entry, under ``"."``."""
    out: Snap = {}
    if with_root:
        out["."] = ("dir", stat.S_IMODE(os.lstat(root).st_mode))

    def walk(dirpath: str, rel: str) -> None:
        for entry in os.scandir(dirpath):
            if entry.name == ".git":
                continue
            r = f"{rel}{entry.name}"
            st_ = entry.stat(follow_symlinks=False)
            if stat.S_ISLNK(st_.st_mode):
                out[r] = ("link", os.readlink(entry.path))
            elif stat.S_ISDIR(st_.st_mode):
                out[r] = ("dir", stat.S_IMODE(st_.st_mode))
                walk(entry.path, r + "/")
            elif stat.S_ISREG(st_.st_mode):
                out[r] = ("file", stat.S_IMODE(st_.st_mode), Path(entry.path).read_bytes())
            else:
                out[r] = ("special", stat.S_IFMT(st_.st_mode))

    walk(str(root), "")
    return out


def show_entry(v: Entry | None) -> str:
    """One entry, short enough for a failure message."""
    if v is None:
        return "absent"
    if v[0] == "file":
        return f"file {v[1]:04o} {v[2][:30]!r}{'...' if len(v[2]) > 30 else ''} ({len(v[2])} bytes)"
    if v[0] == "dir":
        return f"dir {v[1]:04o}"
    return repr(v)


def snap_diff(got: Snap, want: Snap, limit: int = 20) -> str:
    lines = []
    for p in sorted(got.keys() | want.keys()):
        if got.get(p) != want.get(p):
            lines.append(f"  {p}: got {show_entry(got.get(p))} want {show_entry(want.get(p))}")
    return "\n".join(lines[:limit]) + (f"\n  ... {len(lines) - limit} more" if len(lines) > limit else "")


def world_dir(owner: User, prefix: str = "snapd-uid-") -> Path:
    """A fresh directory every uid can enter (pytest's own tmp root is 0700); the caller removes it.

    It belongs to ``owner``, and so does its ``home`` subdirectory (for a daemon's store).
    """
    top = Path(tempfile.mkdtemp(prefix=prefix)).resolve()
    top.chmod(0o755)
    (top / "home").mkdir()
    for p in (top, top / "home"):
        os.chown(p, owner.uid, owner.gid)
    return top
