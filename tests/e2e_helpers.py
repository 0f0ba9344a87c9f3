"""Helpers for the end-to-end tests: a real ``snapd start`` process driven by the real CLI.

The daemon runs as ``sys.executable -m snapd start`` with its own ``SNAPD_HOME`` and an isolated
``HOME``; the CLI runs as ``sys.executable -m snapd <command>``. Raw ZeroMQ frames (for the
malformed requests no well-behaved client can send) go through :func:`raw_call`.

Waiting is always poll-until-deadline (``wait_for``); a deadline that passes is a failure with
the daemon's log attached, never a silent pass.

Permissions can only be tested as another uid (root reads everything): :class:`OtherUser` runs
the daemon, the CLI and the test's own actions as that uid. A test that cannot set up what it
needs calls :func:`unavailable`: a failure under ``CI``, a skip elsewhere.

Trees are compared as :data:`Snap` maps (:func:`snapshot`): kind, permission bits, bytes and link
text of every path, read as this process (root reads what the workspace's owner may not).
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib.metadata
import json
import os
import pty
import re
import select
import shutil
import signal
import stat
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn

import pytest
import zmq

import snapd
from snapd.config import load_config, resolve_endpoint
from snapd.ipc.client import Client

Arg = str | bytes | os.PathLike[str]
Requests = Sequence[tuple[str, dict[str, Any]]]  # (op, args) pairs; paths as str
NOBODY = 65534
CRASH_LAUNCHER = Path(__file__).resolve().parent / "crash_launcher.py"


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


def unavailable(reason: str) -> NoReturn:
    """The test needs a condition this machine cannot give it: fail under CI, skip elsewhere."""
    if os.environ.get("CI"):
        pytest.fail(f"cannot run under CI: {reason}")
    pytest.skip(reason)


def run_ctl(
    env: dict[str, str],
    *args: Arg,
    cwd: Path | str | None = None,
    timeout: float = 30.0,
    input: bytes | None = None,
    python: Sequence[str] = (sys.executable,),
) -> subprocess.CompletedProcess[bytes]:
    """``python -m snapd ARGS`` (snapctl for everything but start); output as bytes."""
    argv: list[Arg] = [*python, "-m", "snapd", *args]
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
    python: Sequence[str] = (sys.executable,)  # how to run snapd (another uid: OtherUser.python)
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
        cp = run_ctl(self.env, *args, cwd=cwd, timeout=timeout, python=self.python)
        if check:
            assert cp.returncode == 0, describe(cp) + "\n--- daemon log ---\n" + self.log()[-4000:]
        return cp

    def ctl_json(self, *args: Arg, cwd: Path | str | None = None, timeout: float = 30.0) -> Any:
        cp = self.ctl(*args, "--json", cwd=cwd, timeout=timeout)
        return json.loads(cp.stdout)

    def client(self, timeout_s: float = 10.0) -> Client:
        """An in-process client over the real socket; closed at teardown. (A daemon of another
        uid refuses it: use :meth:`ctl`.)"""
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
        """``snapctl stop``, then wait; SIGKILL (and fail) if it does not exit. Returns its code.
        Stopping that fails on the way (a ``snapctl stop`` past its timeout) kills it too: the
        caller is usually a ``finally``, the last chance before the daemon outlives the test."""
        self.close_clients()
        if self.proc.poll() is None:
            try:
                os.kill(self.pid, signal.SIGCONT)  # a test that failed mid-SIGSTOP must not hang us
                run_ctl(self.env, "stop", timeout=20, python=self.python)
                self.wait_exit(15)
            finally:
                running = self.proc.poll() is None
                if running:
                    self.proc.kill()
                    self.proc.wait(10)
            if running:
                raise AssertionError(
                    "snapd did not exit after `snapctl stop`; killed it\n" + self.log()[-4000:]
                )
        return self.proc.returncode


# -- workspace steps the rollback tests share ----------------------------------------------------


def write(path: Path, data: str | bytes, mode: int = 0o644) -> None:
    """Write a file (parents made) and give it ``mode``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data.encode() if isinstance(data, str) else data)
    path.chmod(mode)


def cli_mark(d: Daemon, ws: Path, label: str, *extra: str) -> str:
    """``snapctl mark LABEL EXTRA…`` from inside ``ws``; the mark's id."""
    return str(d.ctl_json("mark", label, *extra, cwd=ws)["id"])


def cli_rollback(d: Daemon, ws: Path, *args: str, command: str = "rollback") -> tuple[int, dict[str, Any]]:
    """``snapctl rollback --yes --json ARGS`` (or ``undo``) from inside ``ws``: (exit, reply)."""
    cp = d.ctl(command, "--yes", "--json", *args, cwd=ws, check=False)
    try:
        return cp.returncode, json.loads(cp.stdout)
    except json.JSONDecodeError:
        raise AssertionError(describe(cp) + d.log()[-3000:]) from None


def cli_undo(d: Daemon, ws: Path) -> tuple[int, dict[str, Any]]:
    return cli_rollback(d, ws, command="undo")


def listed(entries: list[dict[str, Any]]) -> set[str]:
    """The paths of a reply's ``kept``/``left``/``conflicts`` list."""
    return {e["path"] for e in entries}


def summary_mismatches(store_dir: Path) -> list[str]:
    """Every mark whose summary's counts differ from a whole diff of its tree against the mark
    before it (the daemon diffs only the paths captured since: this is the check that it saw
    all). Workspaces that lost marks to eviction are skipped (their marks' predecessors are
    gone); so is each first mark (a baseline counts its walk, not a diff). Open after the
    daemon stopped."""
    from snapd.store import treediff
    from snapd.store.store import Store

    wrong = []
    with Store.open(store_dir) as store:
        evicted = {w for (w,) in store.catalog.read().execute("SELECT DISTINCT workspace FROM evictions")}
        for ws in store.workspaces():
            if ws.id in evicted:
                continue
            marks = sorted(store.marks(ws.id), key=lambda m: m.seq)
            for prev, mark in zip(marks, marks[1:], strict=False):
                counts: dict[str, int] = {}
                for d in treediff.diff(store.load_node, prev.tree, mark.tree):
                    counts[d.status] = counts.get(d.status, 0) + 1
                if counts != mark.summary.get("counts"):
                    said = mark.summary.get("counts")
                    wrong.append(f"{mark.label} ({mark.id}): summary {said}, trees {counts}")
    return wrong


def start_daemon(
    snapd_home: Path,
    env: dict[str, str] | None = None,
    *,
    timeout: float = 20.0,
    python: Sequence[str] = (sys.executable,),
    crash_after: str | None = None,
) -> Daemon:
    """Spawn ``snapd start``; return once ``status`` answers (fail with its log otherwise).

    ``crash_after`` (``PREFIX:N``): start it through ``tests/crash_launcher.py``, which arms the
    crash seam (the daemon exits with code 86 right after its N-th such operation)."""
    env = env or base_env(snapd_home)
    log_path = snapd_home.parent / f"{snapd_home.name}-daemon-{uuid.uuid4().hex[:6]}.log"
    launch = ["-m", "snapd"] if crash_after is None else [str(CRASH_LAUNCHER), crash_after]
    with open(log_path, "wb") as log_fh:
        proc = subprocess.Popen(
            [*python, *launch, "start", "--log-level", "debug", "--log-json"],
            env=env,
            stdout=log_fh,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            cwd="/",  # python -m puts the cwd first on sys.path: a "snapd" dir there would shadow us
        )
    d = Daemon(proc, env, snapd_home, log_path, "", tuple(python))

    def ready() -> bool:
        if proc.poll() is not None:
            raise AssertionError(f"snapd start exited with {proc.returncode}\n{d.log()}")
        if tuple(python) != (sys.executable,):  # another uid: it refuses our in-process client
            cp = run_ctl(env, "status", "--json", python=python, timeout=10)
            return cp.returncode == 0 and json.loads(cp.stdout).get("pid") == proc.pid
        try:
            with Client(resolve_endpoint(load_config(env)), 2.0) as c:
                st = c.call("status")
        except Exception:
            return False
        return st.get("pid") == proc.pid

    try:
        wait_for(ready, timeout, what="snapd answers status")
        d.endpoint = resolve_endpoint(load_config(env))
    except BaseException:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
        raise
    return d


def git(repo: Path, *args: str) -> str:
    """``git ARGS`` in ``repo`` with a fixed identity and none of the developer's config."""
    identity = ["-c", "user.name=t", "-c", "user.email=t@example.com", "-c", "init.defaultBranch=main"]
    cp = subprocess.run(
        ["git", *identity, *args],
        cwd=repo,
        capture_output=True,
        timeout=30,
        env=base_env(repo),
    )
    assert cp.returncode == 0, cp
    return cp.stdout.decode().strip()


# -- another uid -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class OtherUser:
    """Acting as another uid: ``setpriv`` with that uid, a gid that differs from it (so code that
    takes one for the other is caught) and no supplementary groups (so nothing is reachable
    through root's groups), the system Python of our version (the venv's
    interpreter lives under /root), and this checkout plus the venv's site-packages on
    PYTHONPATH. ``top`` is a 0755 directory it owns, outside pytest's 0700 temp root."""

    uid: int
    gid: int
    top: Path
    python: tuple[str, ...]
    pythonpath: str

    def env(self, snapd_home: Path) -> dict[str, str]:
        env = base_env(snapd_home)
        env["HOME"] = str(self.top / "home")
        env["PYTHONPATH"] = self.pythonpath
        return env

    def start_daemon(self, snapd_home: Path) -> Daemon:
        return start_daemon(snapd_home, self.env(snapd_home), python=self.python, timeout=40.0)

    def attempt(self, endpoint: str, paths: Sequence[Path], requests: Requests, wait: float) -> Any:
        """As this uid: read each of ``paths``, send each request (op, args) to ``endpoint``,
        then four raw frames no client sends; what happened to each (``ATTEMPTS``)."""
        targets = json.dumps([str(p) for p in paths])
        argv = [*self.python, "-c", ATTEMPTS, endpoint, targets, json.dumps(list(requests)), str(wait)]
        env = self.env(self.top / "home" / "snapd")
        cp = subprocess.run(argv, env=env, capture_output=True, timeout=120, cwd="/")
        assert cp.returncode == 0, describe(cp)
        return json.loads(cp.stdout)

    def run(self, *argv: Arg, cwd: Path | None = None) -> subprocess.CompletedProcess[bytes]:
        """A command (a test's own action) as this uid; it must succeed."""
        cp = subprocess.run([*self.python[:-1], *argv], cwd=cwd or self.top, capture_output=True, timeout=60)
        assert cp.returncode == 0, describe(cp)
        return cp

    def do(self, fn: Callable[..., object], *args: Any) -> str | None:
        """``fn(*args)`` (a test's own action, in Python) as this uid, in a forked child that
        switched to it first — far cheaper than a command per action. Returns the ``OSError`` or
        ``CalledProcessError`` it raised as text (None: none), like a user's command that failed;
        anything else it raises fails the test."""
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
            except BaseException as exc:
                os.write(wfd, f"{type(exc).__name__}: {exc}".encode())
                code = 2
            finally:
                os._exit(code)
        os.close(wfd)
        with os.fdopen(rfd, "rb") as fh:
            out = fh.read().decode(errors="replace")
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0, f"{fn.__name__}{args!r} as uid {self.uid}: {out}"
        return out or None


# Run as another uid by OtherUser.attempt: tries to read the given paths, then sends every request, then raw
# frames no client would send; prints what happened to each as JSON.
ATTEMPTS = r"""
import json, os, sys, zmq
from snapd.ipc.client import Client
from snapd.errors import SnapdError
endpoint, paths, requests = sys.argv[1], json.loads(sys.argv[2]), json.loads(sys.argv[3])
out = {"paths": {}, "requests": [], "raw": []}
for p in paths:
    try:
        if os.path.isdir(p) or p.endswith("/"):
            os.listdir(p)
        else:
            open(p, "rb").read(1)
        out["paths"][p] = "read"
    except OSError as e:
        out["paths"][p] = type(e).__name__
for op, args in requests:
    args = {k: v.encode() if k in ("workspace", "path") else v for k, v in args.items()}
    try:
        with Client(endpoint, float(sys.argv[4])) as c:
            c.call(op, **args)
        out["requests"].append([op, "ok", ""])
    except SnapdError as e:
        out["requests"].append([op, e.code, e.message])
ctx = zmq.Context()
for frames in ([b"not json"], [b"", b"{}"], [b"a", b"b", b"c"], [b'{"op": "stop", "id": "x", "version": 1}']):
    s = ctx.socket(zmq.DEALER)
    s.setsockopt(zmq.LINGER, 0)
    s.connect(endpoint)
    s.send_multipart(frames)
    if s.poll(int(float(sys.argv[4]) * 1000)):
        reply = json.loads(s.recv_multipart()[-1])
        out["raw"].append(reply.get("error", {}).get("code", "ok"))
    else:
        out["raw"].append("silence")
    s.close(0)
print(json.dumps(out))
"""


def install_for_others(dest: Path) -> str:
    """Copy snapd and its runtime dependencies into ``dest`` (readable by everyone) and return
    it as a PYTHONPATH: for another uid when this checkout or its venv is not readable to it
    (a CI checkout under a 0700 home)."""
    shutil.copytree(
        os.path.dirname(snapd.__file__), dest / "snapd", ignore=shutil.ignore_patterns("__pycache__")
    )
    for req in importlib.metadata.requires("snapd") or []:
        if "extra ==" in req:
            continue
        dist = importlib.metadata.distribution(re.split(r"[<>=!~;\[ ]", req, maxsplit=1)[0])
        for f in dist.files or []:
            src = Path(str(dist.locate_file(f)))
            if ".dist-info" in str(f) or "__pycache__" in str(f) or str(f).startswith(".."):
                continue
            out = dest / f
            out.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, out)
    for dirpath, _, filenames in os.walk(dest):
        os.chmod(dirpath, 0o755)
        for name in filenames:
            path = os.path.join(dirpath, name)
            os.chmod(path, 0o644 | (os.stat(path).st_mode & 0o111))  # readable; shared libraries run
    return str(dest)


def other_user(uid: int, top: Path, gid: int | None = None) -> OtherUser:
    """An :class:`OtherUser` for ``uid`` (with group ``gid``: one below ``uid`` unless given,
    never equal to it) in ``top`` (made 0755 and given to it), or
    :func:`unavailable` saying what is missing. Where it cannot read this checkout's code, a
    copy is installed for it in ``top`` (:func:`install_for_others`)."""
    exe = f"/usr/bin/python{sys.version_info.major}.{sys.version_info.minor}"
    if os.getuid() != 0:
        unavailable(f"acting as uid {uid} needs root (running as uid {os.getuid()})")
    setpriv = shutil.which("setpriv")
    if setpriv is None or not os.access(exe, os.X_OK):
        unavailable(f"acting as uid {uid} needs setpriv and {exe}")
    site = os.path.dirname(os.path.dirname(zmq.__file__))
    code = os.path.dirname(os.path.dirname(snapd.__file__))
    gid = uid - 1 if gid is None else gid
    who = OtherUser(
        uid,
        gid,
        top,
        (setpriv, f"--reuid={uid}", f"--regid={gid}", "--clear-groups", exe),
        os.pathsep.join([code, site]),
    )
    top.chmod(0o755)
    (top / "home").mkdir()
    os.chown(top, uid, gid)
    os.chown(top / "home", uid, gid)

    def probe(who: OtherUser) -> subprocess.CompletedProcess[bytes]:
        code = "import snapd.daemon.main, snapd.cli, zmq, xxhash, zstandard, watchdog, structlog, pathspec"
        env = who.env(top / "home" / "snapd")
        return subprocess.run([*who.python, "-c", code], env=env, capture_output=True, cwd="/")

    if probe(who).returncode != 0:
        who = dataclasses.replace(who, pythonpath=install_for_others(top / "py"))
        cp = probe(who)
        if cp.returncode != 0:
            unavailable(f"uid {uid} cannot import snapd's code or dependencies: {cp.stderr[-300:]!r}")
    return who


# -- trees as data --------------------------------------------------------------------------------

Entry = tuple[Any, ...]  # ("file", mode, bytes) | ("dir", mode) | ("link", text) | ("special", fmt)
Snap = dict[str, Entry]  # rel path -> entry


COOKIE = re.compile(r"\.snapd-[0-9]+-[0-9]+~")  # a barrier's: created and deleted at once


def snapshot(root: Path, *, with_root: bool = False) -> Snap:
    """Everything under ``root`` (``.git`` excepted), never following a symlink; with ``with_root``
    also the root's own entry, under ``"."``. A barrier cookie that vanishes while it is read is
    not there; anything else that is, is."""
    out: Snap = {}
    if with_root:
        out["."] = ("dir", stat.S_IMODE(os.lstat(root).st_mode))

    def walk(dirpath: str, rel: str) -> None:
        for entry in os.scandir(dirpath):
            if entry.name == ".git":
                continue
            r = f"{rel}{entry.name}"
            try:
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
            except FileNotFoundError:
                if not COOKIE.fullmatch(entry.name):
                    raise

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
    """A CLI run whose stdin, stdout and stderr are a terminal, except those that ``stdout``
    or ``stderr`` name a file to redirect to (as ``> file``, ``2> file`` in a shell); read
    until a prompt appears."""

    def __init__(
        self, env: dict[str, str], *args: str | Path, cwd: Path, stdout: Path | None = None,
        stderr: Path | None = None,
    ) -> None:
        self.master, slave = pty.openpty()
        with contextlib.ExitStack() as stack:
            out, err = (slave if p is None else stack.enter_context(open(p, "wb")) for p in (stdout, stderr))
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "snapd", *map(str, args)],
                env=env,
                cwd=cwd,
                stdin=slave,
                stdout=out,
                stderr=err,
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
