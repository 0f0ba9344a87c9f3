"""The systemd notification protocol (``sd_notify``), without a library: one datagram each.

With ``Type=notify`` systemd waits for ``READY=1`` before it considers the service started,
so clients started after snapd find the socket bound. With ``WatchdogSec=``, systemd sets
``WATCHDOG_USEC`` and expects ``WATCHDOG=1`` at least that often, and restarts a daemon that
hangs. ``NOTIFY_SOCKET`` is a path, or an abstract socket name when it starts with ``@``.
Without ``NOTIFY_SOCKET`` (not under systemd) every call does nothing.
"""

from __future__ import annotations

import socket

import structlog

log = structlog.get_logger(__name__)


class Notifier:
    def __init__(self, notify_socket: str | None, watchdog_usec: int | None) -> None:
        self.address = notify_socket or None
        if self.address and self.address.startswith("@"):
            self.address = "\0" + self.address[1:]
        # Pet twice per period, as sd_watchdog_enabled(3) advises.
        self.interval_s = watchdog_usec / 2e6 if watchdog_usec else None

    def send(self, state: str) -> bool:
        if not self.address:
            return False
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as sock:
                sock.sendto(state.encode(), self.address)
            return True
        except OSError as exc:
            log.warning("notify.failed", state=state, error=str(exc))
            return False

    def ready(self, status: str = "") -> None:
        self.send("READY=1" + (f"\nSTATUS={status}" if status else ""))

    def watchdog(self) -> None:
        """Tell systemd we are alive; the daemon's main loop calls this after checking health."""
        self.send("WATCHDOG=1")

    def stopping(self) -> None:
        self.send("STOPPING=1")
