"""What the daemon announces on its events socket, and the seam between the ops and that socket.

The service never sees ZeroMQ: it holds an :class:`EventSink` (the daemon passes
:class:`snapd.ipc.publisher.Publisher`; tests and embedders may pass :class:`NoEvents`) and calls
the helpers below, which shape each event's fields as docs/protocol.md ("Events") lists them.
A capture-layer :class:`~snapd.capture.workspace.Workspace` reports through a plain callable
(:func:`workspace_notifier`), since capture must not import the daemon.

Events are announcements after the fact: publishing never fails an operation and never waits.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

import structlog

log = structlog.get_logger(__name__)


class EventSink(Protocol):
    endpoint: str
    instance: str

    def publish(self, kind: str, workspace: str | None, fields: dict[str, Any]) -> None: ...


class NoEvents:
    """A sink that drops everything: a service with no events socket."""

    endpoint = ""
    instance = ""

    def publish(self, kind: str, workspace: str | None, fields: dict[str, Any]) -> None:
        pass


def emit(sink: EventSink, kind: str, workspace: Path | None, fields: dict[str, Any]) -> None:
    """Publish, logging (never raising) a failure: an event is not worth a failed operation."""
    try:
        sink.publish(kind, None if workspace is None else str(workspace), fields)
    except Exception:
        log.exception("events.publish_failed", kind=kind)


def rollback_fields(result: dict[str, Any]) -> dict[str, Any]:
    """``rollback.applied`` / ``undo.applied`` from a ``rollback_apply`` result."""
    target = result.get("target") or {}
    return {
        "target": {"id": target.get("id"), "label": target.get("label")},
        "pre_rollback": result.get("pre_rollback"),
        "applied": result.get("applied", 0),
        "conflicts": len(result.get("conflicts", [])),
        "kept": len(result.get("kept", [])),
        "damaged": len(result.get("damaged", [])),
        "ok": bool(result.get("ok")),
    }


def workspace_notifier(
    sink: EventSink, root: Path, convert: Callable[[dict[str, Any]], dict[str, Any]]
) -> Callable[[str, dict[str, Any]], None]:
    """The callable a workspace reports through; ``convert`` makes its fields wire-ready."""

    def notify(kind: str, fields: dict[str, Any]) -> None:
        try:
            wire = convert(fields)
        except Exception:  # a capture or a mark must never fail over its announcement
            log.exception("events.publish_failed", kind=kind)
            return
        emit(sink, kind, root, wire)

    return notify
