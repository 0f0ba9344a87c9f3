"""The daemon's PUB socket (docs/protocol.md, "Events"), and the one way snapd binds a socket.

:func:`bind_private` makes the socket's directory private (0700: the directory is the access
check) before binding; the control socket (:mod:`snapd.ipc.server`) and the events socket both
bind through it. The rules every event follows (topic frame, ``seq`` per topic and instance)
are in :mod:`snapd.ipc.events`, which clients load; this module is the daemon's side, with
its logging.
"""

from __future__ import annotations

import os
import socket
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import structlog
import zmq

from snapd.config import ensure_private_dir, remove_socket, socket_identity
from snapd.errors import AlreadyRunning, SnapdError
from snapd.ipc import protocol
from snapd.ipc.events import KINDS, topic
from snapd.paths import encode_path

log = structlog.get_logger("snapd.events")


def bind_private(
    ctx: zmq.Context[zmq.Socket[bytes]],
    kind: int,
    endpoint: str,
    options: dict[zmq.SocketOption, int],
    what: str,
) -> zmq.Socket[bytes]:
    """A ``kind`` socket bound at the ipc ``endpoint``, whose directory is made private first
    (0700: the directory is the access check). ``what`` names the failure: "cannot WHAT at".

    ZeroMQ's bind silently takes an ipc path over from whoever listens there. The instance
    lock keeps two daemons of one store apart; a path that answers a connection belongs to a
    live daemon of another store (same runtime directory, other data directory) and is
    refused. A socket file nobody answers on (a daemon killed with -9) is taken over."""
    path = Path(endpoint[len("ipc://"):])
    ensure_private_dir(path.parent)
    _refuse_if_answered(path)
    sock = ctx.socket(kind)
    sock.setsockopt(zmq.LINGER, 0)
    for option, value in options.items():
        sock.setsockopt(option, value)
    try:
        sock.bind(endpoint)
    except zmq.ZMQError as e:
        sock.close(0)
        raise SnapdError(f"cannot {what} at {endpoint}: {e}") from None
    return sock


def _refuse_if_answered(path: Path) -> None:
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
    probe.settimeout(2.0)
    try:
        probe.connect(os.fsencode(path))
    except OSError:
        return  # no socket there, or nobody behind it
    finally:
        probe.close()
    raise AlreadyRunning(
        f"another snapd is listening at {path}: a daemon of another store that uses the same "
        "runtime directory. Stop it first, or give each store its own (SNAPD_HOME, or "
        "XDG_RUNTIME_DIR)", path=str(path))


class Publisher:
    """The daemon's PUB socket. ``publish`` is safe from any thread and never blocks."""

    def __init__(self, endpoint: str, hwm: int = 10_000) -> None:
        self.endpoint = endpoint
        self.instance = uuid.uuid4().hex
        self._hwm = hwm
        self._lock = threading.Lock()
        self._seq: dict[bytes, int] = {}
        self._ctx: zmq.Context[zmq.Socket[bytes]] | None = None
        self._sock: zmq.Socket[bytes] | None = None
        self._bound: tuple[int, int] | None = None  # the socket file we bound (we remove only it)

    def start(self) -> None:
        self._ctx = zmq.Context()
        opts = {zmq.SNDHWM: self._hwm}
        self._sock = bind_private(self._ctx, zmq.PUB, self.endpoint, opts, "publish events")
        self._bound = socket_identity(Path(self.endpoint[len("ipc://"):]))
        log.info("events.publishing", endpoint=self.endpoint, instance=self.instance, hwm=self._hwm)

    def publish(self, kind: str, workspace: str | None, fields: dict[str, Any]) -> None:
        """Send one event about ``workspace`` (a root, or None: the daemon as a whole)."""
        if kind not in KINDS:
            raise ValueError(f"unknown event kind {kind!r}")
        key = topic(None if workspace is None else os.fsencode(workspace))
        with self._lock:
            if self._sock is None:
                return  # not started, or stopped: nobody can be listening
            seq = self._seq.get(key, 0) + 1
            self._seq[key] = seq
            body = {"event": kind, "instance": self.instance,
                    "workspace": None if workspace is None else encode_path(os.fsencode(workspace)),
                    "seq": seq, "time": time.time(), **fields}
            try:
                self._sock.send_multipart([key, protocol.encode_json(body)], zmq.NOBLOCK)
            except zmq.Again:  # PUB drops rather than blocks; kept for other libzmq builds
                pass
            except zmq.ZMQError as e:
                log.warning("events.send_failed", kind=kind, error=str(e))

    def stop(self) -> None:
        with self._lock:
            sock, self._sock = self._sock, None
        if sock is None:
            return
        sock.close(linger=0)
        assert self._ctx is not None
        self._ctx.term()
        remove_socket(Path(self.endpoint[len("ipc://"):]), self._bound)
