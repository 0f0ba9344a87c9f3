"""The ``snapd`` command: run the daemon (foreground or background), stop it, install it as a
systemd user service and uninstall it.

:class:`Daemon` owns the process life cycle, uvicorn-style: instance lock -> store -> control
socket -> ``READY=1`` -> workspaces, then wait for SIGTERM/SIGINT or a ``stop`` request, then
the reverse: stop taking requests, finish those in flight, stop the watchers, close the
store, exit 0.

One daemon per ``SNAPD_HOME``, and one per socket path: ZeroMQ's ``ipc://`` bind silently takes
over an endpoint that another process is bound to, so the instance lock is taken before
anything else, then the socket guard (daemons of two stores may share a runtime directory;
:mod:`snapd.daemon.lock`).
"""

from __future__ import annotations

import argparse
import faulthandler
import logging
import os
import pwd
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import IO

import structlog

from snapd import __version__, memtrim
from snapd.config import Config, ensure_private_dir, load_config
from snapd.daemon import heap
from snapd.daemon.lock import acquire_instance_lock, acquire_socket_guard
from snapd.daemon.logs import configure_logging
from snapd.daemon.notify import Notifier
from snapd.daemon.service import Service
from snapd.errors import DaemonUnavailable, SnapdError
from snapd.ipc.events import events_endpoint
from snapd.ipc.publisher import Publisher
from snapd.ipc.server import ControlServer
from snapd.ipc.timing import RequestTimings, with_timings_in_status
from snapd.store.store import Store

log = structlog.get_logger("snapd.daemon")

BACKGROUND_LOG = "snapd.log"


@dataclass(frozen=True)
class ProcessEnv:
    """What the daemon takes from its environment (read by ``main`` only)."""

    homes: tuple[Path, ...]
    notify_socket: str | None = None
    watchdog_usec: int | None = None
    remote_password: str | None = field(default=None, repr=False)  # SNAPD_REMOTE_PASSWORD: on-mark pushes


class Daemon:
    def __init__(self, config: Config, penv: ProcessEnv) -> None:
        self.config = config
        self.penv = penv
        self._stop = threading.Event()
        self.notifier = Notifier(penv.notify_socket, penv.watchdog_usec)
        #: remote operations left waiting on a server at stop: their requests' threads cannot
        #: be cancelled, and an exit that joined them would wait for the server (main's os._exit)
        self.abandoned = 0

    def request_stop(self) -> None:
        self._stop.set()

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        log.info("daemon.signal", signal=signal.Signals(signum).name)
        self._stop.set()

    def run(self) -> int:
        memtrim.limit_arenas()  # before any thread of the daemon's starts
        loc = self.config.locations
        lock = acquire_instance_lock(loc.state_dir)
        guard = acquire_socket_guard(loc.runtime_dir)  # held until both sockets are gone
        store = Store.open(loc.store_dir)
        events = Publisher(events_endpoint(self.config.endpoint), hwm=self.config.events_queue)
        service = Service(
            store, self.config, self.penv.homes, self.request_stop, events, self.penv.remote_password
        )
        timings = RequestTimings()
        server = ControlServer(
            self.config.endpoint,
            with_timings_in_status(service.handle, timings),
            max_bytes=self.config.request_max_bytes,
            endpoint_file_dir=loc.state_dir,
            timings=timings,
        )
        try:
            events.start()
            server.start()
            signal.signal(signal.SIGTERM, self._on_signal)
            signal.signal(signal.SIGINT, self._on_signal)
            heap.manage()  # long-lived workspace state kept out of the collector's walks
            service.start()
            self.notifier.ready(f"serving at {self.config.endpoint}")
            log.info(
                "daemon.started",
                pid=os.getpid(),
                version=__version__,
                endpoint=self.config.endpoint,
                store=str(loc.store_dir),
            )
            self._serve(server)
            log.info("daemon.stopping")
            self.notifier.stopping()
        finally:
            server.stop(drain_timeout_s=10.0)
            service.stop()
            events.stop()
            self.abandoned = service.remotes.in_flight()
            store.close()
            guard.release()
            lock.release()
        if self.abandoned:
            log.warning("daemon.remote_abandoned", operations=self.abandoned)
        log.info("daemon.stopped")
        return 0

    def _serve(self, server: ControlServer) -> None:
        """Wait for a stop; meanwhile answer systemd's watchdog while the server is healthy."""
        interval = self.notifier.interval_s
        tick = min(1.0, interval) if interval else 1.0
        last = time.monotonic()
        while not self._stop.wait(tick):
            if interval is not None and server.alive and time.monotonic() - last >= interval:
                self.notifier.watchdog()
                last = time.monotonic()


def start_background(config: Config, argv_extra: list[str]) -> int:
    """Detach a daemon (own session, log in the state directory) and return once it answers."""
    from snapd.ipc.client import Client

    log_file = config.log_file or config.locations.state_dir / BACKGROUND_LOG
    # From "/" with -P (no script or current directory on sys.path): ``-m snapd`` run where the
    # user stands would import a "snapd" package found there instead of this one, and a
    # long-lived daemon must not hold that directory busy. Its paths are absolute (config).
    cmd = [sys.executable, "-P", "-m", "snapd", "start", "--log-file", str(log_file), *argv_extra]
    ensure_private_dir(config.locations.state_dir)
    with open(os.devnull, "rb") as devnull, open(os.devnull, "wb") as sink:
        child = subprocess.Popen(
            cmd, stdin=devnull, stdout=sink, stderr=subprocess.PIPE, start_new_session=True, close_fds=True,
            cwd="/",
        )
    deadline = time.monotonic() + 60
    with Client(config.endpoint, timeout_s=2.0) as client:
        while time.monotonic() < deadline:
            if child.poll() is not None:
                err = child.stderr.read().decode(errors="replace").strip() if child.stderr else ""
                err = err.removeprefix("snapd: ")  # its own one-line error, said once
                print(f"snapd: the daemon exited at start-up: {err or f'see {log_file}'}", file=sys.stderr)
                return child.returncode or 1
            try:
                reply = client.call("status", timeout_s=1.0)
            except DaemonUnavailable:
                time.sleep(0.1)
                continue
            if reply.get("pid") != child.pid:  # another daemon answers: ours will exit "already running"
                time.sleep(0.1)
                continue
            if child.stderr:
                child.stderr.close()
            print(
                f"snapd {reply.get('version')} started in the background (pid {child.pid}); log: {log_file}"
            )
            return 0
    print(f"snapd: the daemon did not answer within 60 s; see {log_file}", file=sys.stderr)
    return 1


def _stacks_on_a_fault(log_file: Path | None) -> None:
    """Have a fault that kills the daemon at once leave every thread's stack in its log: the
    log file (appended to; after a rotation, the rotated file), else stderr (the journal).
    SIGBUS is the one expected: SQLite's index of its log is a mapped file, and a write to it
    on a store's disk that has failed faults (docs/reliability.md)."""
    global _fault_log
    try:
        if log_file is not None:
            _fault_log = open(log_file, "a")  # noqa: SIM115 - open for the daemon's whole life
        faulthandler.enable(file=_fault_log or sys.stderr, all_threads=True)
    except (OSError, RuntimeError, ValueError) as exc:  # no stderr, an unwritable file
        log.warning("daemon.no_stacks_on_a_fault", error=str(exc))


_fault_log: IO[str] | None = None  # faulthandler's file (kept open: it holds only the descriptor)


def _homes(env: dict[str, str]) -> tuple[Path, ...]:
    """The user's home as $HOME says and as the passwd database says (they can differ)."""
    homes = [Path(env["HOME"])] if env.get("HOME") else []
    try:
        homes.append(Path(pwd.getpwuid(os.getuid()).pw_dir))
    except KeyError:
        pass
    return tuple(homes)


def _int(value: str | None) -> int | None:
    try:
        return int(value) if value else None
    except ValueError:
        return None


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="snapd", description="snapd: rollback history for workspaces (daemon)"
    )
    parser.add_argument("--version", action="version", version=f"snapd {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    start = sub.add_parser("start", help="run the daemon (in the foreground, as systemd expects)")
    start.add_argument("--background", action="store_true", help="detach; log to the state directory")
    start.add_argument(
        "--log-level", choices=["debug", "info", "warning", "error"], help="the least severe events logged"
    )
    start.add_argument("--log-file", help="append logs to this file (rotated) instead of stderr")
    start.add_argument("--log-json", action="store_true", help="JSON log lines even on a terminal")
    sub.add_parser("stop", help="ask the running daemon to exit")
    inst = sub.add_parser("install-service", help="install and start the systemd user service")
    inst.add_argument("--no-start", action="store_true", help="write the unit only")
    sub.add_parser(
        "uninstall-service",
        help="stop and disable the systemd user service and remove the unit install-service wrote",
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    env = dict(os.environ)
    try:
        overrides: dict[str, object] = {}
        if getattr(args, "log_level", None):
            overrides["log_level"] = args.log_level
        if getattr(args, "log_file", None):
            overrides["log_file"] = os.path.abspath(args.log_file)
        # Only the daemon itself needs every setting right; `stop` and `install-service` must
        # work with a config file that a running daemon predates (see snapd.config).
        config = load_config(env, overrides, lenient=args.command != "start")
        foreground = args.command == "start" and not args.background
        # Each warning is said once: a daemon in the foreground says it in its log (stderr,
        # the journal or --log-file) and in `snapctl status`; every other command prints it.
        for warning in () if foreground else config.warnings:
            print(f"snapd: warning: {warning}", file=sys.stderr)
        if args.command == "start":
            if args.background:
                extra = [f"--log-level={args.log_level}"] if args.log_level else []
                return start_background(config, extra)
            configure_logging(config.log_level, json=True if args.log_json else None, file=config.log_file)
            _stacks_on_a_fault(config.log_file)
            for warning in config.warnings:
                log.warning("config.warning", warning=warning)
            penv = ProcessEnv(
                _homes(env), env.get("NOTIFY_SOCKET"), _int(env.get("WATCHDOG_USEC")),
                env.get("SNAPD_REMOTE_PASSWORD") or None,
            )
            daemon = Daemon(config, penv)
            code = daemon.run()
            if daemon.abandoned:  # a push to a server that answers nothing: what it sent is journaled
                logging.shutdown()
                sys.stdout.flush()
                sys.stderr.flush()
                os._exit(code)
            return code
        if args.command == "install-service":
            from snapd.daemon.service_unit import install_service

            return install_service(env, start=not args.no_start)
        if args.command == "uninstall-service":
            from snapd.daemon.service_unit import uninstall_service

            return uninstall_service(env)
        from snapd.ipc.client import Client

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
