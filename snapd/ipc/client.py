"""The client side of the control protocol: one blocking call per request, never a hang.

Every call has a deadline (``timeout_s=None`` must be asked for explicitly) and sockets use
``LINGER=0``, because in ZeroMQ connecting to an ipc path nobody listens on "succeeds" and a
default close can block forever. A call that gets no answer is sent once more with the same id
on a fresh connection (the daemon may have restarted); the daemon's dedup cache makes that
safe for marks. ``zmq`` is imported on first use, so ``snapctl --help`` and other commands that
never reach the daemon do not pay its ~20 ms import.

A ``Client`` is not thread-safe: use one per thread.
"""

from __future__ import annotations

import _socket  # not socket: its enums cost ~2.5 ms at import, on every hook and command
import errno
import os
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from snapd.config import Config, resolve_endpoint
from snapd.errors import (
    BadRequest,
    DaemonUnavailable,
    PermissionRefused,
    ProtocolMismatch,
    SnapdError,
    Timeout,
    UsageError,
    from_wire,
)
from snapd.ipc import protocol

if TYPE_CHECKING:
    import zmq

ProgressMessageHandler = Callable[[dict[str, Any]], None]
"""Told each progress message the daemon sends before its reply (``call(on_progress=...)``)."""
LIVENESS_MS = 1000  # while waiting for a reply, check this often that the daemon still listens
#: The ping that tells "busy" from "hung" after a missed deadline gets at least this long, even
#: past a shorter deadline: an idle daemon must not be called hung for missing a 1 ms deadline.
DIAGNOSIS_MIN_S = 0.5
DEFAULT_TIMEOUT_S = 10.0


def _check_deadline(timeout_s: float | None) -> None:
    # 0, a negative number, NaN or infinity cannot be waited out: every call would either
    # give up before sending or never, and report a live daemon as absent.
    if timeout_s is not None and not 0 < timeout_s < float("inf"):
        raise UsageError(f"a deadline must be a positive number of seconds, got {timeout_s!r}")


class _Default:
    pass


DEFAULT = _Default()


def _ipc_path(endpoint: str) -> str | None:
    if not endpoint.startswith("ipc://"):
        return None
    path = endpoint[len("ipc://"):]
    return "\0" + path[1:] if path.startswith("@") else path  # Linux abstract namespace


def probe_listener(endpoint: str) -> bool | None:
    """Is anything accepting connections at this ipc endpoint? ``None`` when we cannot tell.

    A plain Unix connect fails at once with ENOENT or ECONNREFUSED where ZeroMQ would queue
    the request and wait out the whole deadline, so "no daemon" is reported immediately.
    """
    path = _ipc_path(endpoint)
    if path is None:
        return None
    s = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
    try:
        s.settimeout(1.0)
        s.connect(path)
    except (FileNotFoundError, ConnectionRefusedError, NotADirectoryError):
        return False
    except PermissionError:
        raise PermissionRefused(
            f"not allowed to connect to {endpoint}: it belongs to another user") from None
    except OSError as e:
        return False if e.errno in (errno.ENOENT, errno.ECONNREFUSED) else None
    finally:
        s.close()
    return True


class Client:
    """A connection to one daemon. ``timeout_s`` is the default deadline of each call."""

    def __init__(self, endpoint: str, timeout_s: float = DEFAULT_TIMEOUT_S, max_bytes: int = 1 << 20) -> None:
        _check_deadline(timeout_s)
        self.endpoint = endpoint
        self.timeout_s = timeout_s
        self.max_bytes = max_bytes
        self._ctx: zmq.Context[zmq.Socket[bytes]] | None = None
        self._sock: zmq.Socket[bytes] | None = None

    @classmethod
    def from_config(cls, config: Config, default_timeout_s: float = DEFAULT_TIMEOUT_S) -> Client:
        """A client for the daemon ``config`` describes. Its deadline is ``client_timeout_s``
        when that is set (file or ``SNAPD_CLIENT_TIMEOUT_S``), else ``default_timeout_s``: the
        caller's own default for what it is about to do."""
        timeout = config.client_timeout_s if config.client_timeout_s is not None else default_timeout_s
        return cls(resolve_endpoint(config), timeout, config.request_max_bytes)

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._drop_socket()
        if self._ctx is not None:
            self._ctx.term()
            self._ctx = None

    def call(
        self,
        op: protocol.Op,
        /,
        *,
        timeout_s: float | None | _Default = DEFAULT,
        on_progress: ProgressMessageHandler | None = None,
        **args: Any,
    ) -> dict[str, Any]:
        """Send one request and return its ``result``; raise the daemon's error class.

        Paths may be passed as ``bytes``. ``timeout_s=None`` waits without a deadline (for
        operations that report progress); the default is the client's ``timeout_s``.
        """
        timeout = self.timeout_s if isinstance(timeout_s, _Default) else timeout_s
        _check_deadline(timeout)
        rid = os.urandom(16).hex()  # a request id (not uuid: a module every command would load)
        payload = protocol.build_request(op, rid, args)
        if len(payload) > self.max_bytes:  # ZeroMQ would drop it silently: say so here
            raise BadRequest(
                f"this request is {len(payload)} bytes; snapd accepts at most {self.max_bytes} "
                "(give fewer paths, or raise request_max_bytes in the daemon's config)"
            )
        if timeout is None:
            reply = self._attempt(payload, rid, None, on_progress)
            assert reply is not None
            return self._result(reply)
        start = time.monotonic()
        # Two attempts share the deadline, leaving a slice to tell "busy" from "absent".
        probe_s = min(1.0, timeout * 0.2)
        per_attempt = (timeout - probe_s) / 2
        for n in (1, 2):
            reply = self._attempt(payload, rid, start + per_attempt * n, on_progress)
            if reply is not None:
                return self._result(reply)
        if self._answers_ping(max(start + timeout, time.monotonic() + DIAGNOSIS_MIN_S)):
            raise Timeout(
                f"snapd at {self.endpoint} is running but did not finish {op!r} within "
                f"{timeout:g} s; it may still complete (see `snapctl log`)", op=op)
        if probe_listener(self.endpoint):
            # The socket accepts connections (the kernel does that for a listening socket
            # even while its process is stopped), but nothing answers, not even a ping.
            raise Timeout(
                f"snapd at {self.endpoint} accepts connections but answered nothing within "
                f"{timeout:g} s, not even a ping: it is hung or stopped (e.g. by SIGSTOP or a "
                "debugger); see its log, or restart it", op=op, endpoint=self.endpoint)
        raise DaemonUnavailable(
            f"no snapd daemon is answering at {self.endpoint}; start it with `snapd start`",
            endpoint=self.endpoint)

    # -- internals ----------------------------------------------------------------------------

    def _socket(self) -> zmq.Socket[bytes]:
        if self._sock is None:
            if probe_listener(self.endpoint) is False:
                raise DaemonUnavailable(
                    f"no snapd daemon is answering at {self.endpoint}; "
                    "start it with `snapd start`", endpoint=self.endpoint)
            import zmq  # deferred: see the module docstring

            if self._ctx is None:
                self._ctx = zmq.Context()
            sock = self._ctx.socket(zmq.DEALER)
            sock.setsockopt(zmq.LINGER, 0)
            sock.connect(self.endpoint)
            self._sock = sock
        return self._sock

    def _drop_socket(self) -> None:
        if self._sock is not None:
            self._sock.close(linger=0)
            self._sock = None

    def _attempt(self, payload: bytes, rid: str, deadline: float | None,
                 on_progress: ProgressMessageHandler | None) -> dict[str, Any] | None:
        """Send once and wait for the reply to ``rid`` until ``deadline``; None on silence.
        A silent connection is dropped so the retry goes out on a fresh one."""
        import zmq

        sock = self._socket()
        try:
            sock.send(payload, zmq.NOBLOCK)
        except zmq.Again:
            self._drop_socket()
            return None
        while True:
            remaining = None if deadline is None else deadline - time.monotonic()
            if remaining is not None and remaining <= 0:
                self._drop_socket()
                return None
            # Wait in slices: a long call (a baseline, a rollback) must notice a daemon that died
            # under it instead of waiting out its whole deadline.
            wait_ms = LIVENESS_MS if remaining is None else max(1, min(LIVENESS_MS, int(remaining * 1000)))
            if not sock.poll(wait_ms, zmq.POLLIN):
                if probe_listener(self.endpoint) is False:
                    self._drop_socket()
                    raise DaemonUnavailable(
                        f"snapd at {self.endpoint} went away while handling this request (it exited "
                        "or was killed); see its log, and `snapctl status` after restarting it",
                        endpoint=self.endpoint,
                    )
                continue
            reply = self._decode(sock.recv())
            if reply.get("id") != rid:
                continue  # a late answer to an earlier call that had timed out
            if "ok" not in reply and isinstance(reply.get("progress"), dict):
                if on_progress is not None:
                    on_progress(reply["progress"])
                continue
            return reply

    def _answers_ping(self, deadline: float) -> bool:
        rid = os.urandom(16).hex()  # a request id (not uuid: a module every command would load)
        try:
            payload = protocol.build_request("ping", rid, {})
            return self._attempt(payload, rid, deadline, None) is not None
        except DaemonUnavailable:
            return False

    @staticmethod
    def _decode(raw: bytes) -> dict[str, Any]:
        try:
            reply = protocol.decode_json(raw)
        except SnapdError:
            reply = None
        if not isinstance(reply, dict):
            raise SnapdError("the daemon sent a malformed reply (not a JSON object)")
        return reply

    @staticmethod
    def _result(reply: dict[str, Any]) -> dict[str, Any]:
        error = reply.get("error")
        if reply.get("ok") is False and isinstance(error, dict):
            raise from_wire(error)
        version = reply.get("version")
        if version != protocol.PROTOCOL_VERSION:
            raise ProtocolMismatch(protocol.mismatch_message(version, protocol.PROTOCOL_VERSION))
        result = reply.get("result")
        if reply.get("ok") is not True or not isinstance(result, dict):
            raise SnapdError("the daemon sent a malformed reply (no result)")
        return result
