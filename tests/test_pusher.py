"""On-mark pushing (snapd/daemon/pusher.py, docs/remote.md "Daemon and on-mark pushing"): a real
daemon with a remote configured ``push = "on-mark"`` against a real ``rclone serve s3``.

The promises: a mark's reply never waits for the remote (the server is stopped with SIGSTOP,
so every request to it hangs, while marks are taken); ``status`` shows what is pending and the
last error; the marks land once the server answers again; and the queue is the store's, so a
daemon restarted with marks pending pushes them.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from e2e_helpers import Daemon, base_env, describe, run_ctl, start_daemon, wait_for, write
from remote_server import S3Server

from snapd.daemon.pusher import FIRST_DELAY_S, Pusher
from snapd.errors import RemoteUnreachable

pytestmark = [pytest.mark.remote, pytest.mark.timeout(240)]

PASSWORD = "correct horse battery staple"
PROMPT_S = 3.0  # a mark on this tiny workspace takes tens of ms; a push to a hung server, minutes


@pytest.fixture
def home(tmp_path: Path) -> Path:
    h = tmp_path / "snapd-home"
    h.mkdir()
    return h


def _env(home: Path, server: S3Server, **extra: str) -> dict[str, str]:
    """The daemon's environment: the server's keys (its own AWS_*), as a service would have."""
    env = base_env(home)
    env.update(server.credentials)
    env.update(extra)
    return env


def _add_on_mark(d: Daemon, server: S3Server, tmp_path: Path, name: str = "r") -> dict[str, Any]:
    spec = server.spec(bucket="snapd", prefix=f"pusher-{name}")
    password_file = tmp_path / f"{name}.pass"
    password_file.write_text(PASSWORD + "\n")
    return d.call(
        "remote_add", name=name, url=spec.url, endpoint=server.endpoint, region=spec.region,
        password_file=os.fsencode(password_file), push="on-mark",
    )  # fmt: skip


def _remote(d: Daemon, name: str = "r") -> dict[str, Any]:
    (entry,) = [r for r in d.call("status")["remotes"] if r["name"] == name]
    return entry


def _pending_is(d: Daemon, n: int, timeout: float = 60.0) -> None:
    wait_for(lambda: _remote(d)["pending"] == n, timeout, interval=0.1,
             what=f"status shows {n} pending: {_remote(d)}")


def _mark(d: Daemon, ws: Path, label: str) -> float:
    """Edit a file, take a mark; how long its reply took."""
    write(ws / "notes.txt", f"{label}\n")
    started = time.monotonic()
    d.call("mark", workspace=os.fsencode(ws), label=label)
    return time.monotonic() - started


def _labels(d: Daemon) -> set[str]:
    return {m["label"] for m in d.call("remote_log", name="r", password=PASSWORD)["marks"]}


@pytest.fixture
def daemons() -> Iterator[list[Daemon]]:
    started: list[Daemon] = []
    yield started
    for d in started:
        d.stop()


def test_a_mark_is_never_delayed_by_a_stopped_server(
    s3_server: S3Server, home: Path, tmp_path: Path, daemons: list[Daemon]
) -> None:
    ws = tmp_path / "ws"
    write(ws / "notes.txt", "start\n")
    d = start_daemon(home, _env(home, s3_server))
    daemons.append(d)
    d.call("watch", path=os.fsencode(ws))
    added = _add_on_mark(d, s3_server, tmp_path)
    assert added["created"] and added["push"] == "on-mark"
    _pending_is(d, 0)  # the baseline went on its own
    assert _remote(d)["last_push"]["marks"] >= 1
    s3_server.pause()  # every request to it hangs from now on
    try:
        took = [_mark(d, ws, f"offline-{i}") for i in range(3)]
        assert max(took) < PROMPT_S, took
        started = time.monotonic()
        entry = _remote(d)  # status does not wait for the push either
        assert time.monotonic() - started < PROMPT_S
        assert entry["pending"] == 3 and entry["pushing"], entry
    finally:
        s3_server.resume()
    _pending_is(d, 0)
    assert {"offline-0", "offline-1", "offline-2"} <= _labels(d)
    entry = _remote(d)
    assert entry["last_error"] is None and entry["last_push"]["marks"] >= 1, entry


def test_a_restarted_daemon_pushes_the_marks_left_pending(
    s3_server: S3Server, home: Path, tmp_path: Path, daemons: list[Daemon]
) -> None:
    ws = tmp_path / "ws"
    write(ws / "notes.txt", "start\n")
    d = start_daemon(home, _env(home, s3_server))
    d.call("watch", path=os.fsencode(ws))
    _add_on_mark(d, s3_server, tmp_path)
    _pending_is(d, 0)
    s3_server.kill()  # nothing answers: the pushes fail (and retry) while marks are taken
    for label in ("while-down-1", "while-down-2"):
        assert _mark(d, ws, label) < PROMPT_S
    _pending_is(d, 2, timeout=5)
    assert d.stop() == 0  # promptly, and cleanly, though a push is still retrying
    s3_server.start()
    # the password from the remote's password_file, the keys from the daemon's environment
    d = start_daemon(home, _env(home, s3_server))
    daemons.append(d)
    _pending_is(d, 0, timeout=30)  # at start, not at the next tick (pusher.TICK_S)
    assert {"while-down-1", "while-down-2"} <= _labels(d)


def test_status_shows_the_last_error_and_the_queue_waits(
    s3_server: S3Server, home: Path, tmp_path: Path, daemons: list[Daemon]
) -> None:
    """Keys the server refuses (a 403, not retried): the error shows, the marks wait, and the
    next push that can (a client's, with good keys) sends them all."""
    ws = tmp_path / "ws"
    write(ws / "notes.txt", "start\n")
    bad = {"AWS_SECRET_ACCESS_KEY": "not-the-secret-key-at-all-0123456789"}
    d = start_daemon(home, _env(home, s3_server, **bad))
    daemons.append(d)
    d.call("watch", path=os.fsencode(ws))
    spec = s3_server.spec(bucket="snapd", prefix="refused")
    password_file = tmp_path / "r.pass"
    password_file.write_text(PASSWORD)
    # remote add with the client's (good) keys: the daemon keeps them in memory only
    d.call("remote_add", name="r", url=spec.url, endpoint=s3_server.endpoint, region=spec.region,
           password_file=os.fsencode(password_file), push="on-mark", credentials=s3_server.credentials)
    _pending_is(d, 0)
    d.stop()
    d = start_daemon(home, _env(home, s3_server, **bad))  # now only the bad keys are known
    daemons.append(d)
    assert _mark(d, ws, "refused-1") < PROMPT_S
    wait_for(lambda: _remote(d)["last_error"], 30, what=f"status shows the error: {_remote(d)}")
    entry = _remote(d)
    error = entry["last_error"]
    assert error["code"] == "remote_denied" and "s3://snapd/refused" in error["message"], error
    assert entry["pending"] == 1 and error["time"] > 0, entry
    pushed = d.call("push", name="r", credentials=s3_server.credentials, password=PASSWORD)
    assert pushed["marks"] == 1, pushed
    assert _remote(d)["pending"] == 0 and _remote(d)["last_error"] is None


def test_a_mark_rotten_here_is_skipped_shown_once_and_the_rest_pushed(
    s3_server: S3Server, home: Path, tmp_path: Path, daemons: list[Daemon]
) -> None:
    """A mark whose content rotted in the local store (tests/test_bitrot.py's flip) does not
    block the queue: the on-mark pusher pushes every other mark, shows the skipped one once as
    the last error (naming its path), does not try it again, and goes on with later marks;
    ``snapctl push`` tries it, reports it (``skipped``) and exits 10."""
    from test_bitrot import entry_at, flip

    ws = tmp_path / "ws"
    write(ws / "notes.txt", "start\n")
    d = start_daemon(home, _env(home, s3_server))
    daemons.append(d)
    d.call("watch", path=os.fsencode(ws))
    write(ws / "rots.bin", os.urandom(600))
    rotten = d.call("mark", workspace=os.fsencode(ws), label="rotten")["id"]
    write(ws / "rots.bin", os.urandom(700))  # the later marks hold another version
    d.call("mark", workspace=os.fsencode(ws), label="fine")
    key = entry_at(d, rotten, b"rots.bin").key
    flip(d, key)
    _add_on_mark(d, s3_server, tmp_path)  # the pusher starts at once
    wait_for(lambda: _remote(d)["last_error"], 30, what=f"status shows the skipped mark: {_remote(d)}")
    _pending_is(d, 1)  # baseline and fine pushed; rotten left
    error = _remote(d)["last_error"]
    assert error["code"] == "corrupt_object" and rotten in error["message"], error
    assert "rots.bin" in error["message"] and key in error["message"], error
    assert _labels(d) == {"baseline", "fine"}
    assert _mark(d, ws, "after") < PROMPT_S  # the queue goes on past it
    wait_for(lambda: "after" in _labels(d), 30, what="the next mark is pushed")
    _pending_is(d, 1)
    assert _remote(d)["last_error"] == error  # shown once: not re-dated by each push
    assert d.log().count("remote.push_skipped") == 1, d.log()[-3000:]
    env = {**_env(home, s3_server), "SNAPD_REMOTE_PASSWORD": PASSWORD}
    cp = run_ctl(env, "push", "r", "--json")
    assert cp.returncode == 10, describe(cp)
    (skip,) = json.loads(cp.stdout)["skipped"]
    assert (skip["mark"], skip["workspace"]) == (rotten, str(ws)), skip
    assert "rots.bin" in skip["reason"] and skip["paths"] == ["rots.bin"], skip
    human = run_ctl(env, "push", "r")
    assert human.returncode == 10 and b"not pushed: mark " + rotten.encode() in human.stderr, describe(human)
    assert b"rots.bin" in human.stderr and b"Traceback" not in human.stderr, describe(human)
    assert _labels(d) == {"baseline", "fine", "after"} and d.answers()
    flip(d, key)  # the same byte flipped back: repaired
    cp = run_ctl(env, "push", "r", "--json")
    assert cp.returncode == 0 and json.loads(cp.stdout)["skipped"] == [], describe(cp)
    assert _labels(d) == {"baseline", "rotten", "fine", "after"}
    assert _remote(d)["last_error"] is None and _remote(d)["pending"] == 0, _remote(d)


class _Flaky:
    """What the pusher needs of :class:`Remotes`, failing its first push: to count how often the
    pusher looks (a retry schedule that forgets to settle spins on ``pending``)."""

    def __init__(self) -> None:
        self.names, self.looks, self.left = ["r"], 0, 1

    class store:  # noqa: N801 - the attribute the pusher reads
        @staticmethod
        def workspaces() -> list[Any]:
            return []

    def on_mark(self) -> list[str]:
        self.looks += 1  # one round of the pusher's loop
        return list(self.names)

    def pending(self, name: str, *, queued: bool = False) -> int:
        return self.left

    def push(self, name: str, workspaces: Any, wait: bool) -> None:
        raise RemoteUnreachable("s3://b/p: no answer")


@pytest.mark.parametrize("then", ["sent by another push", "remote removed"])
def test_a_failed_push_is_retried_later_and_then_the_pusher_rests(then: str) -> None:
    flaky = _Flaky()
    pusher = Pusher(flaky, tick_s=60.0)  # type: ignore[arg-type]
    pusher.start()
    try:
        wait_for(lambda: flaky.looks >= 1, 5, what="the pusher tries at start")
        if then == "sent by another push":
            flaky.left = 0
        else:
            flaky.names = []
        pusher.wake()
        time.sleep(FIRST_DELAY_S * 2.5)  # the retry is due, then nothing more is
        settled = flaky.looks
        time.sleep(1.0)
        assert flaky.looks == settled <= 6, (then, flaky.looks)
    finally:
        pusher.stop()


def _loaded(pid: int) -> set[str]:
    """Which of the remote tier's native libraries process ``pid`` has mapped."""
    maps = Path(f"/proc/{pid}/maps").read_text()
    return {lib for lib in ("obstore", "cryptography") if f"/{lib}/" in maps}


def test_the_daemon_loads_the_remote_library_only_for_a_remote_op(
    s3_server: S3Server, home: Path, tmp_path: Path, daemons: list[Daemon]
) -> None:
    """`snapd start` (with a remote configured, not on-mark) and its status never load the S3
    client nor the cryptography: the remote ops import them when first used."""
    spec = s3_server.spec(bucket="snapd", prefix="lazy")
    (home / "config.toml").write_text(
        f'[remotes.r]\nurl = "{spec.url}"\nendpoint = "{s3_server.endpoint}"\n'
    )
    d = start_daemon(home, _env(home, s3_server))
    daemons.append(d)
    assert [r["name"] for r in d.call("status")["remotes"]] == ["r"]
    assert _loaded(d.pid) == set()
    d.call("remote_remove", name="r")
    d.call("remote_add", name="r", url=spec.url, endpoint=s3_server.endpoint, password=PASSWORD)
    assert _loaded(d.pid) == {"obstore", "cryptography"}


def test_the_daemon_keeps_the_repository_open_so_a_10_file_mark_costs_3_requests(
    s3_server: S3Server, home: Path, tmp_path: Path, daemons: list[Daemon]
) -> None:
    """The issue's budget for an incremental push (PUT pack, PUT index, PUT record) holds only
    if the daemon keeps each repository's view between pushes, as it does."""
    ws = tmp_path / "ws"
    for i in range(40):
        write(ws / "src" / f"f{i}.txt", f"file {i}\n" * 20)
    d = start_daemon(home, _env(home, s3_server))
    daemons.append(d)
    d.call("watch", path=os.fsencode(ws))
    spec = s3_server.spec(bucket="snapd", prefix="cost")
    d.call("remote_add", name="r", url=spec.url, endpoint=s3_server.endpoint, password=PASSWORD)
    first = d.call("push", name="r")
    assert first["marks"] == 1, first
    for i in range(10):
        write(ws / "src" / f"f{i}.txt", f"changed {i}\n")
    d.call("mark", workspace=os.fsencode(ws), label="ten-files")
    second = d.call("push", name="r")
    assert second["marks"] == 1 and second["objects"] >= 10, second
    assert second["requests"] <= 3, second


def test_a_store_upgraded_from_format_8_pushes_its_whole_history_on_mark(
    s3_server: S3Server, home: Path, tmp_path: Path, daemons: list[Daemon]
) -> None:
    """tests/fixtures/store-format8 (written by the release before the pushed table) under a
    daemon with an on-mark remote: the upgrade queues every old mark, and they all land."""
    import json
    import shutil

    fixture = Path(__file__).parent / "fixtures" / "store-format8"
    marks = set(json.loads((fixture / "manifest.json").read_text()))
    spec = s3_server.spec(bucket="snapd", prefix="upgraded")
    maker_home = tmp_path / "maker"
    maker_home.mkdir()
    maker = start_daemon(maker_home, _env(maker_home, s3_server))  # makes the repository
    daemons.append(maker)
    maker.call("remote_add", name="r", url=spec.url, endpoint=s3_server.endpoint, password=PASSWORD)
    shutil.copytree(fixture / "store", home / "store")
    password_file = tmp_path / "r.pass"
    password_file.write_text(PASSWORD)
    (home / "config.toml").write_text(
        f'[remotes.r]\nurl = "{spec.url}"\nendpoint = "{s3_server.endpoint}"\n'
        f'password_file = "{password_file}"\npush = "on-mark"\n'
    )
    d = start_daemon(home, _env(home, s3_server))
    daemons.append(d)
    _pending_is(d, 0, timeout=30)
    pushed = {m["id"] for m in d.call("remote_log", name="r")["marks"]}
    assert marks <= pushed, marks - pushed


def test_the_daemon_stops_promptly_while_a_push_hangs(
    s3_server: S3Server, home: Path, tmp_path: Path, daemons: list[Daemon]
) -> None:
    """A push stuck on a server that answers nothing is abandoned at stop (what it sent is
    journaled): `snapd stop` neither waits for it nor exits unclean."""
    ws = tmp_path / "ws"
    write(ws / "notes.txt", "start\n")
    d = start_daemon(home, _env(home, s3_server))
    d.call("watch", path=os.fsencode(ws))
    _add_on_mark(d, s3_server, tmp_path)
    _pending_is(d, 0)
    s3_server.pause()
    try:
        _mark(d, ws, "hanging")
        wait_for(lambda: _remote(d)["pushing"], 10, what="the on-mark push has started")
        started = time.monotonic()
        assert d.stop() == 0
        assert time.monotonic() - started < 10, time.monotonic() - started
    finally:
        s3_server.resume()
