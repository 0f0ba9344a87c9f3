"""Logging set-up: events with fields, readable on a terminal, JSON lines everywhere else.

Only ``main()`` calls ``configure_logging``: library modules just ``structlog.get_logger()``
and log events such as ``log.info("mark.created", workspace=..., files=...)``. A daemon's log
usually goes to a file or a journal that tools parse, hence JSON unless a person is watching.
The standard ``logging`` module (used by watchdog and other libraries) is routed to the same
destination and level, so nothing is lost and nothing is printed twice.
"""

from __future__ import annotations

import io
import logging
import logging.handlers
import os
import sys
from pathlib import Path
from typing import Any

import structlog

from snapd.errors import PermissionRefused

_LEVELS = {
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "warning": logging.WARNING,
    "error": logging.ERROR,
    "critical": logging.CRITICAL,
}
MAX_LOG_BYTES = 10 << 20
LOG_BACKUPS = 3


class _PrivateRotatingFile(logging.handlers.RotatingFileHandler):
    """Size-rotated log file, created 0600: log lines name files and workspaces of this user."""

    def _open(self) -> io.TextIOWrapper:
        fd = os.open(self.baseFilename, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)
        return io.TextIOWrapper(io.FileIO(fd, "a"), encoding="utf-8", line_buffering=True)


def configure_logging(level: str = "info", json: bool | None = None, file: Path | None = None) -> None:
    """Configure structlog (and stdlib logging) process-wide.

    ``json=None`` chooses: a console renderer when the destination is a terminal, JSON lines
    otherwise. ``file`` sends everything to that file instead of stderr, rotated at
    ``MAX_LOG_BYTES`` with ``LOG_BACKUPS`` old files kept. Calling it again replaces the
    previous configuration (tests do). Everything goes through one stdlib handler, so
    structlog events and other libraries' log records share a destination and a format.
    """
    numeric = _LEVELS.get(level.lower())
    if numeric is None:
        raise ValueError(f"unknown log level {level!r}")
    handler: logging.Handler
    if file is not None:
        try:
            file.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            handler = _PrivateRotatingFile(file, maxBytes=MAX_LOG_BYTES, backupCount=LOG_BACKUPS)
        except OSError as e:
            why = f"the log file {file} cannot be written: {e.strerror}"
            raise PermissionRefused(why, path=str(file)) from None
        tty = False
    else:
        handler = logging.StreamHandler(sys.stderr)
        tty = sys.stderr.isatty()
    use_json = (not tty) if json is None else json

    shared: list[Any] = [
        structlog.contextvars.merge_contextvars,
        structlog.stdlib.add_logger_name,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
        structlog.processors.StackInfoRenderer(),
    ]
    renderer: Any
    if use_json:
        # Without locals: a frame's locals may hold file contents, which are never logged.
        shared.append(
            structlog.processors.ExceptionRenderer(
                structlog.tracebacks.ExceptionDictTransformer(show_locals=False)
            )
        )
        renderer = structlog.processors.JSONRenderer()
    else:
        renderer = structlog.dev.ConsoleRenderer(colors=tty)
    structlog.configure(
        processors=[*shared, structlog.stdlib.ProcessorFormatter.wrap_for_formatter],
        wrapper_class=structlog.make_filtering_bound_logger(numeric),
        logger_factory=structlog.stdlib.LoggerFactory(),
        # Not cached: modules bind loggers at import time, before main() configures them.
        cache_logger_on_first_use=False,
    )
    handler.setFormatter(
        structlog.stdlib.ProcessorFormatter(
            processors=[structlog.stdlib.ProcessorFormatter.remove_processors_meta, renderer],
            foreign_pre_chain=shared,
        )
    )
    root = logging.getLogger()
    for old in root.handlers:
        old.close()
    root.handlers[:] = [handler]
    root.setLevel(numeric)
