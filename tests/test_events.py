"""Live events (docs/protocol.md, "Events"): a real daemon, real ZeroMQ, `snapctl events` as a
process. Order and no gaps under load; a gap shown to a subscriber that fell behind; a restart
noticed; every documented kind published; uid 65534 cannot subscribe."""

from __future__ import annotations

import json
import os
import queue
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from e2e_helpers import Daemon, OtherUser, base_env, start_daemon, write

from snapd.ipc.events import Sequencer


class Follower:
    """`snapctl events ARGS` running; its stdout lines queued by a reader thread."""

    def __init__(self, d: Daemon, *args: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "snapd", "events", *args], env=d.env, cwd="/",
            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        )
        self.lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for raw in self.proc.stdout:
            self.lines.put(raw.decode())

    def next(self, timeout: float = 10.0) -> str | None:
        try:
            return self.lines.get(timeout=timeout)
        except queue.Empty:
            return None

    def until(self, found: Callable[[str], bool], poke: Callable[[], object] | None = None,
              timeout: float = 30.0) -> list[str]:
        """Lines up to the first one ``found`` accepts; ``poke`` runs between waits (to make events
        while the subscription is still being set up: ZeroMQ's late joiner)."""
        seen: list[str] = []
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if poke is not None:
                poke()
            line = self.next(0.3)
            while line is not None:
                seen.append(line)
                if found(line):
                    return seen
                line = self.next(0.05)
        raise AssertionError(f"not seen within {timeout}s; got {seen[-20:]}\nstderr: {self.stop()}")

    def stop(self) -> str:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)
            self.proc.terminate()
        self.proc.wait(10)
        assert self.proc.stderr is not None
        return self.proc.stderr.read().decode(errors="replace")


def events_of(lines: list[str]) -> list[dict[str, Any]]:
    return [json.loads(line) for line in lines]


def is_kind(kind: str, **want: Any) -> Callable[[str], bool]:
    def check(line: str) -> bool:
        ev = json.loads(line)
        return bool(ev.get("event") == kind and all(ev.get(k) == v for k, v in want.items()))
    return check


def mark(d: Daemon, ws: Path, label: str) -> dict[str, Any]:
    with d.client(timeout_s=60) as c:  # a loaded CI machine: marks from 8 threads queue up
        return c.call("mark", label=label, workspace=os.fsencode(ws))


def test_events_arrive_in_order_with_no_gaps_under_load(daemon: Daemon, ws: Path) -> None:
    """200 marks from 8 threads at once: the subscriber sees every one, seq 1 apart, in the
    order the daemon took them (the marks' own seq), and no gap notice."""
    f = Follower(daemon, "-w", str(ws), "--json")
    try:
        f.until(is_kind("mark.created"), poke=lambda: mark(daemon, ws, "warm-up"))
        with ThreadPoolExecutor(8) as pool:
            made = list(pool.map(lambda i: mark(daemon, ws, f"load-{i}"), range(200)))
        labels = {m["label"] for m in made}
        got: list[dict[str, Any]] = []
        while sum(e.get("event") == "mark.created" and e["mark"]["label"] in labels for e in got) < 200:
            line = f.next(60)
            assert line is not None, f"only {len(got)} events arrived: {got[-3:]}"
            got.append(json.loads(line))
        assert not [e for e in got if "notice" in e], got
        seqs = [e["seq"] for e in got]
        assert seqs == list(range(seqs[0], seqs[0] + len(seqs))), seqs
        mark_seqs = [e["mark"]["seq"] for e in got if e["event"] == "mark.created"]
        assert mark_seqs == sorted(mark_seqs)
        assert {e["instance"] for e in got} == {daemon.call("status")["events"]["instance"]}
        assert {e["workspace"] for e in got} == {str(ws)}
    finally:
        f.stop()


@pytest.mark.timeout(180)
def test_a_subscriber_that_falls_behind_is_told_of_the_gap(tmp_path: Path) -> None:
    """A stopped subscriber (SIGSTOP: its ZeroMQ thread too) while thousands of events go out:
    the daemon drops what does not fit its queue (events_queue) and never waits; once running
    again, the subscriber reports the gap as a seq jump, with how many it lost."""
    home = tmp_path / "snapd-home"
    env = base_env(home) | {"SNAPD_EVENTS_QUEUE": "20"}
    d = start_daemon(home, env)
    f: Follower | None = None
    try:
        root = tmp_path / "ws"
        root.mkdir()
        d.ctl("watch", root)
        f = Follower(d, "-w", str(root), "--json")
        f.until(is_kind("mark.created"), poke=lambda: mark(d, root, "warm-up"))
        f.proc.send_signal(signal.SIGSTOP)
        # Each special file is a capture.skipped event of ~300 bytes: 3000 of them are far more
        # than the kernel's socket buffer plus a queue of 20.
        for i in range(3000):
            os.mkfifo(root / f"fifo-{i:05d}-{'x' * 150}")
        mark(d, root, "after-the-flood")  # captures them all: the events are out (or dropped)
        f.proc.send_signal(signal.SIGCONT)
        # Its own mark.created was dropped too, most likely: mark until one arrives after the drops.
        lines = f.until(is_kind("mark.created"), poke=lambda: mark(d, root, "awake"), timeout=60)
        got = events_of(lines)
        notices = [e for e in got if e.get("notice") == "gap"]
        assert notices, "no gap reported"
        assert all(n["workspace"] == str(root) and n["lost"] > 0 for n in notices)
        skipped = [e for e in got if e.get("event") == "capture.skipped"]
        assert len(skipped) < 3000 <= len(skipped) + sum(n["lost"] for n in notices)
        seqs = [e["seq"] for e in got if "seq" in e]
        assert seqs == sorted(seqs)
    finally:
        if f is not None:
            f.stop()
        assert d.stop() == 0, d.log()[-3000:]


def test_a_daemon_restart_is_noticed(tmp_path: Path) -> None:
    """The subscriber reconnects by itself; the first event of the new daemon carries another
    instance id, which `snapctl events` reports as a restart (counters begin again)."""
    home = tmp_path / "snapd-home"
    d = start_daemon(home)
    root = tmp_path / "ws"
    root.mkdir()
    d.ctl("watch", root)
    first = d.call("status")["events"]["instance"]
    f = Follower(d, "-w", str(root))
    try:
        f.until(lambda line: "mark.created" in line, poke=lambda: mark(d, root, "before"))
        assert d.stop() == 0
        d = start_daemon(home)
        second = d.call("status")["events"]["instance"]
        assert second != first
        lines = f.until(lambda line: "mark.created" in line and "after" in line,
                        poke=lambda: mark(d, root, "after"))
        restarts = [line for line in lines if "the daemon restarted" in line]
        assert restarts and f"{first} -> {second}" in restarts[0], lines
    finally:
        f.stop()
        assert d.stop() == 0, d.log()[-3000:]


def test_every_kind_is_published(tmp_path: Path) -> None:
    """watched (with its baseline), capture.skipped, mark.created (the pre-rollback mark too),
    rollback.applied, undo.applied, rescanned (rules changed; every mark when watches run
    short), warning (the watch shortfall), unwatched: all of one daemon, in one feed."""
    home = tmp_path / "snapd-home"
    d = start_daemon(home, base_env(home) | {"SNAPD_WATCH_LIMIT": "2"})
    root = tmp_path / "ws"
    (root / "a" / "b").mkdir(parents=True)
    f = Follower(d, "--json")
    try:
        probe = tmp_path / "probe"
        probe.mkdir()
        d.ctl("watch", probe)  # something to mark until the subscription is up
        f.until(is_kind("mark.created"), poke=lambda: mark(d, probe, "warm-up"))
        d.ctl("watch", root)
        write(root / "f.txt", "one\n")
        os.mkfifo(root / "pipe")
        m1 = mark(d, root, "one")
        write(root / "f.txt", "two\n")
        d.ctl("rollback", "-w", root, "--to", m1["id"], "-y", check=False)
        d.ctl("undo", "-w", root, "-y", check=False)
        write(root / ".gitignore", "*.log\n")
        lines = f.until(is_kind("workspace.rescanned", reason="rules_changed", workspace=str(root)))
        d.ctl("unwatch", root)
        lines += f.until(is_kind("workspace.unwatched", workspace=str(root)))
    finally:
        f.stop()
        assert d.stop() == 0, d.log()[-3000:]
    mine = [e for e in events_of(lines) if e.get("workspace") == str(root)]
    kinds = [e["event"] for e in mine]
    watched = next(e for e in mine if e["event"] == "workspace.watched")
    assert watched["baseline"]["kind"] == "baseline" and watched["resumed"] is False
    assert {"path": "pipe", "reason": "special file"}.items() <= next(
        e for e in mine if e["event"] == "capture.skipped").items()
    assert any("could not be watched" in e["message"] for e in mine if e["event"] == "warning")
    assert {"scan_every_mark"} <= {e["reason"] for e in mine if e["event"] == "workspace.rescanned"}
    created = [e["mark"] for e in mine if e["event"] == "mark.created"]
    assert [m["kind"] for m in created] == ["user", "pre-rollback", "pre-rollback"], created
    rb = next(e for e in mine if e["event"] == "rollback.applied")
    assert rb["target"] == {"id": m1["id"], "label": "one"} and rb["applied"] == 1
    assert rb["pre_rollback"] == created[1]["id"]
    undo = next(e for e in mine if e["event"] == "undo.applied")
    assert undo["target"]["id"] == created[1]["id"]
    assert kinds.index("rollback.applied") < kinds.index("undo.applied") < kinds.index("workspace.unwatched")
    seqs = [e["seq"] for e in mine]
    assert seqs == list(range(1, len(seqs) + 1)), seqs


def test_the_sequencer_rule() -> None:
    """The pure rule clients share: first event sets the baseline, a jump is a gap of the
    missing count, another instance is a restart (and starts the count again)."""
    s = Sequencer("i1")
    ev = lambda inst, seq, ws="/w": {"event": "warning", "instance": inst, "seq": seq, "workspace": ws}  # noqa: E731
    assert s.check(ev("i1", 5)) == []
    assert s.check(ev("i1", 6)) == []
    assert s.check(ev("i1", 4, "/other")) == []
    (gap,) = s.check(ev("i1", 9))
    assert (gap.kind, gap.lost, gap.first_missing) == ("gap", 2, 7)
    (restart,) = s.check(ev("i2", 1))
    assert (restart.kind, restart.old_instance, restart.new_instance) == ("restart", "i1", "i2")
    assert s.check(ev("i2", 1, "/other")) == []


def _connect_unix(path: str) -> None:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.connect(path)


SUBSCRIBE_AS_OTHER = r"""
import sys, zmq
ctx = zmq.Context()
s = ctx.socket(zmq.SUB)
s.setsockopt(zmq.LINGER, 0)
s.setsockopt(zmq.SUBSCRIBE, b"")
s.connect(sys.argv[1])
print("received" if s.poll(4000) else "nothing")
"""


def test_another_uid_cannot_subscribe(root_daemon: tuple[Daemon, Path], nobody: OtherUser) -> None:
    """The events socket's 0700 directory is its access check: with every directory above it
    open, uid 65534 still cannot even connect, and a SUB socket of its own receives nothing
    while marks are being taken."""
    d, top = root_daemon
    root = top / "ws"
    root.mkdir()
    d.ctl("watch", root)
    (top / "home").chmod(0o711)  # only the socket's own directory is left as the wall
    endpoint = d.call("status")["events"]["endpoint"]
    assert Path(endpoint[len("ipc://"):]).parent == top / "home" / "run"
    err = nobody.do(_connect_unix, endpoint[len("ipc://"):])
    assert err is not None and err.startswith("PermissionError"), err
    stop = threading.Event()

    def marks() -> None:
        while not stop.wait(0.1):
            mark(d, root, "while-nobody-listens")

    t = threading.Thread(target=marks)
    t.start()
    try:
        cp = subprocess.run([*nobody.python, "-c", SUBSCRIBE_AS_OTHER, endpoint], cwd="/", timeout=60,
                            env=nobody.env(nobody.top / "home" / "snapd"), capture_output=True)
    finally:
        stop.set()
        t.join()
    assert cp.stdout.decode().strip() == "nothing", cp
    assert d.answers()


def test_events_command_is_documented(daemon: Daemon) -> None:
    """In --help (with --json), and in docs/protocol.md and docs/operations.md."""
    top = daemon.ctl("--help").stdout.decode()
    assert "events" in top
    sub = daemon.ctl("events", "--help").stdout.decode()
    assert "--json" in sub and "-w" in sub and "--count" in sub
    docs = Path(__file__).resolve().parent.parent / "docs"
    protocol = (docs / "protocol.md").read_text()
    for kind in ("mark.created", "rollback.applied", "undo.applied", "workspace.watched",
                 "workspace.unwatched", "workspace.rescanned", "capture.skipped", "warning"):
        assert f"`{kind}`" in protocol, kind
    assert "snapctl events" in (docs / "operations.md").read_text()


def test_events_with_count_exits_and_no_daemon_is_an_error(tmp_path: Path) -> None:
    cp = subprocess.run([sys.executable, "-m", "snapd", "events", "--json"], env=base_env(tmp_path / "h"),
                        capture_output=True, timeout=30, cwd="/")
    assert cp.returncode == 3
    assert json.loads(cp.stdout)["error"]["code"] == "daemon_unavailable"


def test_publishing_never_fails_the_operation() -> None:
    """An event is an announcement: a sink that raises, or fields that cannot be converted, are
    logged and dropped; the mark or rollback that announced them goes on."""
    from snapd.daemon.events import emit, workspace_notifier

    class Broken:
        endpoint, instance = "", ""

        def publish(self, kind: str, workspace: str | None, fields: dict[str, Any]) -> None:
            raise RuntimeError("socket gone")

    emit(Broken(), "warning", None, {"message": "x"})

    def bad_convert(fields: dict[str, Any]) -> dict[str, Any]:
        raise TypeError("cannot encode")

    workspace_notifier(Broken(), Path("/w"), bad_convert)("warning", {"message": "x"})
    workspace_notifier(Broken(), Path("/w"), dict)("warning", {"message": "x"})
