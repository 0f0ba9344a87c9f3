"""Start the daemon so that two started together race on their socket path: the socket-guard
test's launcher, never the product's.

``python tests/bind_race_launcher.py AT DELAY start ARGS…`` imports snapd, waits until the
wall-clock instant AT (so two launchers begin within about a millisecond, their imports done),
and delays every ZeroMQ bind by DELAY seconds. That widens the moment between a daemon's
check that nobody listens at its socket path and its bind — microseconds, too narrow for two
real starts to meet by chance — so two daemons that share a path always meet in it, unless
something serialises them. ``snapd start`` itself reads no test switch.
"""

from __future__ import annotations

import sys
import time
from typing import Any

import zmq

from snapd.daemon.main import main


def slow_binds(delay_s: float) -> None:
    bind = zmq.Socket.bind

    def delayed(self: zmq.Socket[Any], addr: str) -> Any:
        time.sleep(delay_s)
        return bind(self, addr)

    zmq.Socket.bind = delayed  # type: ignore[method-assign]


if __name__ == "__main__":
    at, delay = float(sys.argv[1]), float(sys.argv[2])
    slow_binds(delay)
    time.sleep(max(0.0, at - time.time()))
    sys.exit(main(sys.argv[3:]))
