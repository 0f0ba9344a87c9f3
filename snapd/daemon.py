"""The ``snapd`` command: run the daemon in the foreground, or ask a running one to stop.

:class:`Daemon` owns the process life cycle, uvicorn-style: instance lock -> store -> control
socket -> workspaces, then wait for SIGTERM/SIGINT or a ``stop`` request, then the reverse:
stop taking requests, finish those in flight, stop the watchers, close the store, exit 0.

One daemon per ``SNAPD_HOME``: ZeroMQ's ``ipc://`` bind silently takes over an endpoint that
another process is bound to, so the lock file is taken before anything else.
"""

from __future__ import annotations

import argparse
import os
import pwd
import signal
import sys
import threading
from collections.abc import Sequence
from pathlib import Path
from types import FrameType

import structlog

from snapd import __version__, retention
from snapd.config import Config, load_config
from snapd.errors import SnapdError
from snapd.logs import configure_logging
from snapd.server import ControlServer, acquire_instance_lock
from snapd.service import Service, ServiceConfig
from snapd.store import Store
from snapd.workspace import Settings

log = structlog.get_logger("snapd.daemon")


def service_config(config: Config, homes: tuple[Path, ...]) -> ServiceConfig:
    loc = config.locations
    r = config.retention
    return ServiceConfig(
        homes=homes,
        own_dirs=tuple({loc.state_dir, loc.data_dir, loc.runtime_dir, loc.store_dir}),
        endpoint=config.endpoint,
        settings=Settings(
            size_cap=config.size_cap,
            extra_ignore=config.extra_ignore,
            barrier_timeout_s=config.barrier_timeout_s,
        ),
        policy=retention.Policy(
            max_age_days=r.max_age_days, max_marks=r.max_marks, budget_bytes=r.budget_bytes
        ),
    )


class Daemon:
    def __init__(self, config: Config, homes: tuple[Path, ...]) -> None:
        self.config = config
        self.homes = homes
        self._stop = threading.Event()

    def request_stop(self) -> None:
        self._stop.set()

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        log.info("daemon.signal", signal=signal.Signals(signum).name)
        self._stop.set()

    def run(self) -> int:
        loc = self.config.locations
        lock = acquire_instance_lock(loc.state_dir)
        store = Store.open(loc.store_dir)
        service = Service(store, service_config(self.config, self.homes), self.request_stop)
        server = ControlServer(
            self.config.endpoint,
            service.handle,
            max_bytes=self.config.request_max_bytes,
            endpoint_file_dir=loc.state_dir,
        )
        try:
            server.start()
            signal.signal(signal.SIGTERM, self._on_signal)
            signal.signal(signal.SIGINT, self._on_signal)
            service.start()
            log.info(
                "daemon.started",
                pid=os.getpid(),
                version=__version__,
                endpoint=self.config.endpoint,
                store=str(loc.store_dir),
            )
            while not self._stop.wait(1.0):
                pass
            log.info("daemon.stopping")
        finally:
            server.stop(drain_timeout_s=10.0)
            service.stop()
            store.close()
            lock.release()
        log.info("daemon.stopped")
        return 0


def _homes(env: dict[str, str]) -> tuple[Path, ...]:
    """The user's home as $HOME says and as the passwd database says (they can differ)."""
    homes = [Path(env["HOME"])] if env.get("HOME") else []
    try:
        homes.append(Path(pwd.getpwuid(os.getuid()).pw_dir))
    except KeyError:
        pass
    return tuple(homes)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="snapd", description="snapd: rollback history for workspaces (daemon)"
    )
    parser.add_argument("--version", action="version", version=f"snapd {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    start = sub.add_parser("start", help="run the daemon in the foreground")
    start.add_argument("--log-level", choices=["debug", "info", "warning", "error"])
    start.add_argument("--log-json", action="store_true", help="JSON log lines even on a terminal")
    sub.add_parser("stop", help="ask the running daemon to exit")
    args = parser.parse_args(argv)
    env = dict(os.environ)
    try:
        overrides = {"log_level": args.log_level} if getattr(args, "log_level", None) else {}
        config = load_config(env, overrides)
        if args.command == "start":
            configure_logging(config.log_level, json=True if args.log_json else None, file=config.log_file)
            return Daemon(config, _homes(env)).run()
        from snapd.client import Client

        with Client.from_config(config) as client:
            reply = client.call("stop")
        print(f"snapd (pid {reply.get('pid')}) is stopping")
        return 0
    except SnapdError as exc:
        print(f"snapd: {exc.message}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
