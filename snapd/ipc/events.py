"""Live events, the subscriber's side and the shared rules (docs/protocol.md, "Events"): the
event kinds, the topic frame, the gap and restart rule, and a SUB socket. The daemon's PUB
socket is :mod:`snapd.ipc.publisher`. This module is what clients load (``snapctl events``), so
it imports no logging library: the CLI's start-up cost is paid on every command.

Invariants:

- The PUB socket sits beside the control socket, in the same 0700 directory: that directory is
  its access check (a SUB socket cannot report who connected, so there is no second one).
- Every event is two frames: a topic (the workspace root's bytes followed by a NUL, or a lone
  NUL for daemon-wide events, so ZeroMQ's prefix match can filter one workspace exactly) and
  a UTF-8 JSON object with ``event``, ``instance``, ``workspace``, ``seq`` and ``time``.
- ``seq`` counts 1, 2, 3… per topic and per daemon instance, assigned under the same lock as
  the send, so sequence order is send order. A PUB socket never blocks the daemon: a
  subscriber more than ``hwm`` events behind loses events (ZeroMQ drops them), and sees that
  as a jump in ``seq``. A new ``instance`` means the daemon restarted and the counters began
  again. :class:`Sequencer` turns both into notices; it is pure, and the protocol's rule.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import zmq

from snapd.config import EVENTS_SOCKET_NAME
from snapd.errors import BadRequest
from snapd.ipc import protocol

Kind = Literal[
    "mark.created",
    "rollback.applied",
    "undo.applied",
    "revert.applied",
    "workspace.watched",
    "workspace.unwatched",
    "workspace.rescanned",
    "capture.skipped",
    "warning",
]
KINDS: tuple[str, ...] = Kind.__args__  # type: ignore[attr-defined]
DAEMON_TOPIC = b"\0"  # events that concern no single workspace


def events_endpoint(control_endpoint: str) -> str:
    """The PUB endpoint beside ``control_endpoint`` (same private directory)."""
    if not control_endpoint.startswith("ipc://"):
        raise ValueError(f"snapd listens on ipc:// endpoints only, not {control_endpoint!r}")
    return "ipc://" + str(Path(control_endpoint[len("ipc://"):]).parent / EVENTS_SOCKET_NAME)


def topic(workspace: bytes | None) -> bytes:
    """The topic frame of ``workspace`` (a root's bytes), or of daemon-wide events."""
    return DAEMON_TOPIC if workspace is None else workspace + b"\0"


# -- the subscriber side ------------------------------------------------------------------------


@dataclass(frozen=True)
class Notice:
    """What a subscriber learns besides the events: ``gap`` (``lost`` events missed) or ``restart``."""

    kind: Literal["gap", "restart"]
    workspace: Any
    lost: int = 0
    first_missing: int = 0
    old_instance: str | None = None
    new_instance: str | None = None


class Sequencer:
    """The gap and restart rule (docs/protocol.md): per workspace, the next event must carry the
    last ``seq`` + 1 from the same ``instance``. The first event seen of a workspace only sets
    the baseline (a subscriber cannot know what it missed before it connected)."""

    def __init__(self, instance: str | None = None) -> None:
        """``instance``: the daemon's as ``status`` gave it before subscribing, if known."""
        self._last: dict[str, tuple[str, int]] = {}
        self._instance = instance

    def check(self, event: dict[str, Any]) -> list[Notice]:
        instance, seq, ws = str(event["instance"]), int(event["seq"]), event.get("workspace")
        notices = []
        if self._instance is not None and instance != self._instance:
            notices.append(Notice("restart", ws, old_instance=self._instance, new_instance=instance))
            self._last.clear()
        self._instance = instance
        key = json.dumps(ws)
        last = self._last.get(key)
        if last is not None and seq > last[1] + 1:
            notices.append(Notice("gap", ws, lost=seq - last[1] - 1, first_missing=last[1] + 1))
        self._last[key] = (instance, seq)
        return notices


def parse_event(frames: Sequence[bytes]) -> dict[str, Any]:
    """One received message as an event object; BadRequest when it is not one."""
    if len(frames) != 2:
        raise BadRequest(f"an event is two frames (topic, JSON), got {len(frames)}")
    event = protocol.decode_json(frames[1])
    if not isinstance(event, dict) or not all(k in event for k in ("event", "instance", "seq")):
        raise BadRequest("an event must be a JSON object with event, instance and seq")
    return event


class Subscriber:
    """A SUB socket on the daemon's events. ``workspaces``: the roots to follow (their bytes);
    None follows everything. Daemon-wide events always come through. Call :meth:`connect`."""

    def __init__(self, endpoint: str, workspaces: Sequence[bytes] | None = None, hwm: int = 100_000) -> None:
        self._ctx: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
        self._sock = self._ctx.socket(zmq.SUB)
        self._sock.setsockopt(zmq.LINGER, 0)
        self._sock.setsockopt(zmq.RCVHWM, hwm)
        topics = [b""] if workspaces is None else [DAEMON_TOPIC, *(topic(w) for w in workspaces)]
        for t in topics:
            self._sock.setsockopt(zmq.SUBSCRIBE, t)
        self._endpoint = endpoint

    def connect(self, timeout_s: float = 2.0) -> bool:
        """Connect, and wait (up to ``timeout_s``) until the subscription is on its way: what
        is published after this returns True reaches us. False: no handshake yet (no daemon at
        that path, or a slow one); the socket keeps trying by itself."""
        monitor = self._sock.get_monitor_socket(zmq.EVENT_HANDSHAKE_SUCCEEDED)
        try:
            self._sock.connect(self._endpoint)
            return bool(monitor.poll(int(timeout_s * 1000), zmq.POLLIN))
        finally:
            self._sock.disable_monitor()
            monitor.close(linger=0)

    def receive(self, timeout_s: float | None) -> dict[str, Any] | None:
        """The next event, or None when ``timeout_s`` passes first (None: wait forever)."""
        if not self._sock.poll(None if timeout_s is None else max(0, int(timeout_s * 1000)), zmq.POLLIN):
            return None
        return parse_event(self._sock.recv_multipart())

    def follow(self, poll_s: float = 1.0) -> Iterator[dict[str, Any] | None]:
        """Events as they come; None every ``poll_s`` of silence (a chance to check on the daemon)."""
        while True:
            yield self.receive(poll_s)

    def close(self) -> None:
        self._sock.close(linger=0)
        self._ctx.term()

    def __enter__(self) -> Subscriber:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
