"""Errors users see.

Each class carries a stable machine-readable ``code`` (sent over the protocol), a process
exit code, and a message written for the person at the terminal. They are raised close to the
cause and caught once: in ``main()`` for the command-line tools, in the request loop for the
daemon (which turns them into ``{"ok": false, "error": {"code": ..., "message": ...}}``); the
client raises the same class again from the code in the reply. Anything that is not a
``SnapdError`` is a bug and keeps its traceback.
"""

from __future__ import annotations

from typing import Any, ClassVar


class SnapdError(Exception):
    """Base class: a failure with a message meant for the user."""

    code: ClassVar[str] = "error"
    exit_code: ClassVar[int] = 1

    def __init__(self, message: str, **details: Any) -> None:
        super().__init__(message)
        self.message = message
        self.details = details

    def to_wire(self) -> dict[str, Any]:
        out: dict[str, Any] = {"code": self.code, "message": self.message}
        if self.details:
            out["details"] = self.details
        return out


class UsageError(SnapdError):
    code = "usage"
    exit_code = 2


class BadRequest(SnapdError):
    """A request that is malformed, mistyped, unknown or too large."""

    code = "bad_request"
    exit_code = 2


class ProtocolMismatch(SnapdError):
    code = "protocol_mismatch"
    exit_code = 3


class DaemonUnavailable(SnapdError):
    code = "daemon_unavailable"
    exit_code = 3


class AlreadyRunning(SnapdError):
    code = "already_running"
    exit_code = 4


class PermissionRefused(SnapdError):
    code = "permission"
    exit_code = 5


class NotFound(SnapdError):
    code = "not_found"
    exit_code = 6


class Ambiguous(SnapdError):
    code = "ambiguous"
    exit_code = 6


class WorkspaceRefused(SnapdError):
    code = "workspace_refused"
    exit_code = 7


class StoreError(SnapdError):
    code = "store"
    exit_code = 8


class StoreFormatError(StoreError):
    code = "store_format"


class CorruptObject(StoreError):
    code = "corrupt_object"


class MissingObject(StoreError):
    code = "missing_object"


class DiskFull(StoreError):
    code = "disk_full"


class Timeout(SnapdError):
    code = "timeout"
    exit_code = 9


class Conflict(SnapdError):
    code = "conflict"
    exit_code = 10


class PlanChanged(Conflict):
    """The workspace changed since the plan the user confirmed: details carry the new plan."""

    code = "plan_changed"


ALL_ERRORS: dict[str, type[SnapdError]] = {}


def _register(cls: type[SnapdError]) -> None:
    ALL_ERRORS.setdefault(cls.code, cls)
    for sub in cls.__subclasses__():
        _register(sub)


_register(SnapdError)


def from_wire(error: dict[str, Any]) -> SnapdError:
    """Rebuild the error class a daemon reply names (unknown codes become ``SnapdError``)."""
    cls = ALL_ERRORS.get(str(error.get("code", "")), SnapdError)
    details = error.get("details") or {}
    exc = cls(str(error.get("message", "unknown error")), **(details if isinstance(details, dict) else {}))
    return exc


# Added with the config/protocol/server layer. Registered explicitly because the
# ``_register(SnapdError)`` walk above ran before these classes existed.


class ConfigError(SnapdError):
    """A config file, ``SNAPD_*`` variable or flag that cannot be used as given."""

    code = "config"
    exit_code = 2


class Busy(SnapdError):
    """The daemon has too many requests in flight; retrying later is safe."""

    code = "busy"
    exit_code = 9


class InternalError(SnapdError):
    """A bug in the daemon: the reply says so and the traceback is in the daemon's log."""

    code = "internal"
    exit_code = 70


for _cls in (ConfigError, Busy, InternalError):
    _register(_cls)
