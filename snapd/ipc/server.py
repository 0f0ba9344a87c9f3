"""The control server: the daemon's only ZeroMQ code.

One loop thread owns the ROUTER socket (ZeroMQ sockets are not thread-safe): it receives
requests, checks the peer's uid, validates them, and hands each one to a thread pool, so a slow
request (a barrier, a baseline) never holds up another client. Workers never touch the socket:
they put finished replies on a queue and wake the loop through a pipe, and the loop sends them.

Every bad request gets an error reply and the loop keeps serving; an exception that is not a
``SnapdError`` becomes an ``internal`` error reply and a logged traceback. Requests carry ids:
a retry of an id gets the first result (or waits for it, if it is still running), so a retried
mark is never taken twice.

Peer credentials: on ``ipc://`` libzmq reads ``SO_PEERCRED`` when it accepts a connection and
exposes it on every received frame as the ``Peer-Address`` property, ``"<addr>:<uid>:<gid>:<pid>"``
(libzmq 4.x on Linux). We parse that and refuse other uids with an error reply that says why.
``ZMQ_IPC_FILTER_UID`` would drop such connections earlier, but silently: the other user would
only see a timeout. The socket's 0700 directory is the first line of defence either way.
"""

from __future__ import annotations

import contextlib
import os
import queue
import sys
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import structlog
import zmq

from snapd.config import remove_socket, socket_identity, write_endpoint_file
from snapd.errors import (
    BadRequest,
    Busy,
    DaemonUnavailable,
    InternalError,
    PermissionRefused,
    SnapdError,
)
from snapd.ipc import protocol
from snapd.ipc.publisher import bind_private
from snapd.ipc.timing import RequestTimings

log = structlog.get_logger("snapd.server")


def _peer_address(frame: zmq.Frame) -> str | None:
    try:
        value = frame.get("Peer-Address")
    except zmq.ZMQError:  # not every transport or build sets it
        return None
    return value if isinstance(value, str) else None


Handler = Callable[[protocol.Request, protocol.PeerInfo], dict[str, Any]]


def peer_from_address(address: str | None) -> protocol.PeerInfo:
    """Parse libzmq's ``Peer-Address`` property; the credentials are its last three fields."""
    if address:
        parts = address.rsplit(":", 3)
        if len(parts) == 4 and all(p.isdigit() for p in parts[1:]):
            return protocol.PeerInfo(int(parts[1]), int(parts[2]), int(parts[3]))
    return protocol.PeerInfo(None, None, None)


def check_peer(peer: protocol.PeerInfo, own_uid: int, *, require_credentials: bool) -> None:
    """Refuse any uid but ours, root included: a daemon writes files as its own user and must
    not do it on another user's behalf."""
    if peer.uid is None:
        if require_credentials:
            raise PermissionRefused("snapd could not read the peer's credentials; refusing")
        return
    if peer.uid != own_uid:
        raise PermissionRefused(
            f"this snapd belongs to uid {own_uid} and refuses requests from uid {peer.uid}; "
            "run snapctl as that user, or start your own daemon", peer_uid=peer.uid)


@dataclass
class _Entry:
    """One request id in the dedup cache: waiting envelopes until done, then the reply."""

    fingerprint: str
    waiters: list[list[bytes]] = field(default_factory=list)
    reply: bytes | None = None
    done_at: float = 0.0
    op: str = ""
    received_at: float = 0.0


class ControlServer:
    """Serves requests at an ``ipc://`` endpoint until ``stop()``."""

    def __init__(
        self,
        endpoint: str,
        handler: Handler,
        *,
        workers: int = 32,
        max_bytes: int = 1 << 20,
        max_pending: int = 256,
        dedup_entries: int = 1024,
        dedup_ttl_s: float = 600.0,
        own_uid: int | None = None,
        require_credentials: bool = sys.platform.startswith("linux"),
        endpoint_file_dir: Path | None = None,
        timings: RequestTimings | None = None,
    ) -> None:
        if not endpoint.startswith("ipc://"):
            raise ValueError(f"snapd listens on ipc:// endpoints only, not {endpoint!r}")
        self.endpoint = endpoint
        self._handler = handler
        self._max_bytes = max_bytes
        self._max_pending = max_pending
        self._dedup_entries = dedup_entries
        self._dedup_ttl_s = dedup_ttl_s
        self._own_uid = os.getuid() if own_uid is None else own_uid
        self._require_creds = require_credentials
        self._endpoint_file_dir = endpoint_file_dir
        # Receipt-to-reply time of every request, per op (docs/protocol.md, status `requests`).
        self.timings = RequestTimings() if timings is None else timings
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="snapd-req")
        self._done: queue.SimpleQueue[tuple[str, bytes]] = queue.SimpleQueue()
        self._cache: OrderedDict[str, _Entry] = OrderedDict()
        self._pending = 0
        self._stopping = threading.Event()
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_w, False)
        self._ctx = zmq.Context()
        self._sock: zmq.Socket[bytes] | None = None
        self._bound: tuple[int, int] | None = None  # the socket file we bound (we remove only it)
        self._thread: threading.Thread | None = None
        self._drain_s = 30.0
        self._received_at = 0.0  # when the loop took the message being handled off the socket

    # -- life cycle ---------------------------------------------------------------------------

    def start(self) -> None:
        """Bind (in a private directory) and start serving. Errors surface here, not later."""
        # libzmq drops (and disconnects) a peer that sends a bigger frame before we see it.
        opts = {zmq.MAXMSGSIZE: self._max_bytes}
        self._sock = bind_private(self._ctx, zmq.ROUTER, self.endpoint, opts, "listen")
        self._bound = socket_identity(Path(self.endpoint[len("ipc://"):]))
        if self._endpoint_file_dir is not None:
            write_endpoint_file(self._endpoint_file_dir, self.endpoint)
        self._thread = threading.Thread(target=self._loop, name="snapd-server", daemon=True)
        self._thread.start()
        log.info("server.listening", endpoint=self.endpoint)

    @property
    def alive(self) -> bool:
        """The loop thread is serving (for the systemd watchdog)."""
        return self._thread is not None and self._thread.is_alive() and not self._stopping.is_set()

    def request_stop(self) -> None:
        """Ask the loop to stop; safe from any thread, including a handler (the "stop" op)."""
        self._stopping.set()
        self._wake()

    def stop(self, drain_timeout_s: float = 30.0) -> None:
        """Stop taking requests, finish the ones in flight (up to ``drain_timeout_s``), close."""
        self._drain_s = drain_timeout_s
        self.request_stop()
        if self._thread is None:  # never started: nothing to drain
            self._ctx.term()
            os.close(self._wake_r)
            os.close(self._wake_w)
            self._thread = threading.Thread()  # makes a second stop() a no-op
        elif self._thread.ident is not None:
            self._thread.join()
        self._pool.shutdown(wait=False, cancel_futures=True)

    def __enter__(self) -> ControlServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- loop thread --------------------------------------------------------------------------

    def _loop(self) -> None:
        assert self._sock is not None
        sock = self._sock
        poller = zmq.Poller()
        poller.register(sock, zmq.POLLIN)
        poller.register(self._wake_r, zmq.POLLIN)
        drain_deadline: float | None = None
        try:
            while True:
                if self._stopping.is_set() and drain_deadline is None:
                    drain_deadline = time.monotonic() + self._drain_s
                    log.info("server.stopping", in_flight=self._pending)
                if drain_deadline is not None and self._pending == 0:
                    break
                if drain_deadline is not None and time.monotonic() >= drain_deadline:
                    log.warning("server.drain_timeout", abandoned=self._pending)
                    break
                events = dict(poller.poll(200))
                if self._wake_r in events:
                    with contextlib.suppress(BlockingIOError):
                        os.read(self._wake_r, 4096)
                self._send_finished(sock)
                self._expire_cache()
                if sock in events:
                    self._receive_all(sock)
        finally:
            self._close(sock)

    def _close(self, sock: zmq.Socket[bytes]) -> None:
        # A bounded linger flushes the replies just sent without ever blocking shutdown long;
        # LINGER=0 here would discard the very replies the drain waited for.
        sock.close(linger=500)
        self._ctx.term()
        os.close(self._wake_r)
        os.close(self._wake_w)
        if self._endpoint_file_dir is not None:
            with contextlib.suppress(OSError):
                (self._endpoint_file_dir / "endpoint").unlink()
        remove_socket(Path(self.endpoint[len("ipc://"):]), self._bound)
        log.info("server.stopped", endpoint=self.endpoint)

    def _receive_all(self, sock: zmq.Socket[bytes]) -> None:
        # Bounded batch: a flood of requests must not starve the replies of finished ones.
        for _ in range(128):
            try:
                frames = sock.recv_multipart(zmq.NOBLOCK, copy=False)
            except zmq.Again:
                return
            self._received_at = time.monotonic()
            try:
                self._on_message(sock, frames)
            except Exception:  # a bug in the loop must not stop the daemon serving
                log.exception("request.loop_error")

    def _on_message(self, sock: zmq.Socket[bytes], frames: list[zmq.Frame]) -> None:
        # ROUTER prepends the peer's routing id. DEALER clients send [json]; REQ sockets add an
        # empty delimiter: [b"", json]. The reply mirrors whichever envelope arrived.
        envelope = [frames[0].bytes]
        body = [f.bytes for f in frames[1:]]
        if body and body[0] == b"":
            envelope.append(b"")
            body = body[1:]
        # The id is salvaged first so that even a refusal reaches the caller's pending call.
        rid = protocol.salvage_id(body[-1]) if body else None
        try:
            peer_address = _peer_address(frames[-1])
            check_peer(peer_from_address(peer_address), self._own_uid,
                       require_credentials=self._require_creds)
            if len(body) != 1:
                raise BadRequest(f"expected one JSON frame after the envelope, got {len(body)}")
            request = protocol.parse_request(body[0], self._max_bytes)
            if self._stopping.is_set() and request.id not in self._cache:
                raise DaemonUnavailable("snapd is shutting down; retry once it has restarted")
            self._dispatch(sock, envelope, request, peer_address)
        except SnapdError as e:
            log.info("request.refused", code=e.code, message=e.message)
            self._send(sock, envelope, protocol.encode_error_reply(rid, e))

    def _dispatch(self, sock: zmq.Socket[bytes], envelope: list[bytes],
                  request: protocol.Request, peer_address: str | None) -> None:
        fingerprint = request.fingerprint()
        entry = self._cache.get(request.id)
        if entry is not None:
            if entry.fingerprint != fingerprint:
                raise BadRequest(f"request id {request.id!r} was already used for another request")
            self._cache.move_to_end(request.id)
            if entry.reply is not None:
                self._send(sock, envelope, entry.reply)
            else:
                entry.waiters.append(envelope)
            log.debug("request.retry", id=request.id, op=request.op)
            return
        if self._pending >= self._max_pending:
            raise Busy(f"snapd has {self._pending} requests in flight; retry shortly")
        self._cache[request.id] = _Entry(fingerprint, waiters=[envelope], op=request.op,
                                         received_at=self._received_at)
        self._pending += 1
        self._pool.submit(self._run, request, peer_from_address(peer_address))

    def _send_finished(self, sock: zmq.Socket[bytes]) -> None:
        while True:
            try:
                rid, reply = self._done.get_nowait()
            except queue.Empty:
                return
            self._pending -= 1
            entry = self._cache.get(rid)
            if entry is None:  # cannot happen: pending entries are never evicted
                continue
            entry.reply, entry.done_at = reply, time.monotonic()
            # recorded before the reply leaves: a client that has its reply finds it counted
            self.timings.record(entry.op, entry.done_at - entry.received_at)
            for envelope in entry.waiters:
                self._send(sock, envelope, reply)
            entry.waiters.clear()

    def _send(self, sock: zmq.Socket[bytes], envelope: list[bytes], reply: bytes) -> None:
        try:
            # ROUTER silently drops replies to peers that went away, and NOBLOCK means a peer
            # that stopped reading (full queue) costs us its reply, never the loop.
            sock.send_multipart([*envelope, reply], zmq.NOBLOCK)
        except zmq.ZMQError as e:
            log.warning("reply.dropped", error=str(e))

    def _expire_cache(self) -> None:
        # Oldest-used first; in-flight entries are never evicted (their waiters need them).
        now, victims = time.monotonic(), list[str]()
        excess = len(self._cache) - self._dedup_entries
        for rid, entry in self._cache.items():
            if entry.reply is None:
                continue
            if len(victims) < excess or now - entry.done_at > self._dedup_ttl_s:
                victims.append(rid)
            else:
                break
        for rid in victims:
            del self._cache[rid]

    # -- worker threads -----------------------------------------------------------------------

    def _run(self, request: protocol.Request, peer: protocol.PeerInfo) -> None:
        started = time.monotonic()
        try:
            result = self._handler(request, peer)
            if not isinstance(result, dict):
                raise TypeError(f"handler returned {type(result).__name__}, not dict")
            reply = protocol.encode_json(protocol.ok_reply(request.id, **result))
        except SnapdError as e:
            reply = self._encode_error(request, e)
        except Exception:
            reply = self._encode_error(request, None)
        log.debug("request.done", op=request.op, id=request.id,
                  ms=round((time.monotonic() - started) * 1000, 1))
        self._done.put((request.id, reply))
        self._wake()

    @staticmethod
    def _encode_error(request: protocol.Request, error: SnapdError | None) -> bytes:
        """Encode an error reply; a failure to do so (details JSON cannot hold) or a non-
        ``SnapdError`` becomes ``internal``, so every request gets some reply."""
        if error is not None:
            try:
                return protocol.encode_error_reply(request.id, error)
            except (TypeError, ValueError):
                pass
        log.exception("request.crashed", op=request.op, id=request.id)
        err = InternalError(f"internal error in snapd while handling {request.op!r}; "
                            "the daemon log has the details")
        return protocol.encode_error_reply(request.id, err)

    def _wake(self) -> None:
        with contextlib.suppress(BlockingIOError, OSError):
            os.write(self._wake_w, b"x")
