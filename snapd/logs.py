"""Logging set-up: events with fields, readable on a terminal, JSON lines everywhere else.

Only ``main()`` calls ``configure_logging``: library modules just ``structlog.get_logger()``
and log events such as ``log.info("mark.created", workspace=..., files=...)``. A daemon's log
usually goes to a file or a journal that tools parse, hence JSON unless a person is watching.
The standard ``logging`` module (used by watchdog and other libraries) is routed to the same
destination and level, so nothing is lost and nothing is printed twice.
"""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path
from typing import Any, TextIO

import structlog

_LEVELS = {
    "debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING,
    "error": logging.ERROR, "critical": logging.CRITICAL,
}
_open_file: TextIO | None = None


def _open_private(path: Path) -> TextIO:
    """Append-only, created 0600: log lines name files and workspaces of this user."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)
    return os.fdopen(fd, "a", buffering=1, encoding="utf-8")


def configure_logging(level: str = "info", json: bool | None = None,
                      file: Path | None = None) -> None:
    """Configure structlog (and stdlib logging) process-wide.

    ``json=None`` chooses: a console renderer when the destination is a terminal, JSON lines
    otherwise. ``file`` sends everything to that file (appended) instead of stderr. Calling it
    again replaces the previous configuration (tests do).
    """
    global _open_file
    numeric = _LEVELS.get(level.lower())
    if numeric is None:
        raise ValueError(f"unknown log level {level!r}")
    if _open_file is not None:
        _open_file.close()
        _open_file = None
    stream: TextIO = sys.stderr
    if file is not None:
        stream = _open_file = _open_private(file)
    use_json = (not stream.isatty()) if json is None else json

    shared: list[Any] = [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
        structlog.processors.StackInfoRenderer(),
    ]
    renderer: Any
    if use_json:
        # Without locals: a frame's locals may hold file contents, which are never logged.
        shared.append(structlog.processors.ExceptionRenderer(
            structlog.tracebacks.ExceptionDictTransformer(show_locals=False)))
        renderer = structlog.processors.JSONRenderer()
    else:
        renderer = structlog.dev.ConsoleRenderer(colors=stream.isatty())
    structlog.configure(
        processors=[*shared, renderer],
        wrapper_class=structlog.make_filtering_bound_logger(numeric),
        logger_factory=structlog.PrintLoggerFactory(stream),
        # Not cached: modules bind loggers at import time, before main() configures them.
        cache_logger_on_first_use=False,
    )

    handler = logging.StreamHandler(stream)
    handler.setFormatter(structlog.stdlib.ProcessorFormatter(
        processors=[structlog.stdlib.ProcessorFormatter.remove_processors_meta, renderer],
        foreign_pre_chain=[
            structlog.stdlib.add_logger_name,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
        ],
    ))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(numeric)
