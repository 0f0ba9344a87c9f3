"""Errors users see.

Each class carries a stable machine-readable ``code`` (sent over the protocol), a process
exit code, and a message written for the person at the terminal. They are raised close to the
cause and caught once: in ``main()`` for the command-line tools, in the request loop for the
daemon (which turns them into ``{"ok": false, "error": {"code": ..., "message": ...}}``); the
client raises the same class again from the code in the reply. Anything that is not a
``SnapdError`` is a bug and keeps its traceback.

Each class registers itself under its ``code`` when it is defined (``__init_subclass__``), and
has a one-line docstring saying when it is raised.
"""

from __future__ import annotations

from typing import Any, ClassVar

ALL_ERRORS: dict[str, type[SnapdError]] = {}
"""Every error class by its wire ``code``: filled as each class is defined, so no class can be
missing from the table the client rebuilds errors with."""


class SnapdError(Exception):
    """Base class: a failure with a message meant for the user."""

    code: ClassVar[str] = "error"
    exit_code: ClassVar[int] = 1

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if cls.code in ALL_ERRORS:
            taken = ALL_ERRORS[cls.code].__name__
            raise TypeError(f"error code {cls.code!r} of {cls.__name__} is taken by {taken}")
        ALL_ERRORS[cls.code] = cls

    def __init__(self, message: str, **details: Any) -> None:
        super().__init__(message)
        self.message = message
        self.details = details

    def to_wire(self) -> dict[str, Any]:
        out: dict[str, Any] = {"code": self.code, "message": self.message}
        if self.details:
            out["details"] = self.details
        return out


ALL_ERRORS[SnapdError.code] = SnapdError


class UsageError(SnapdError):
    """A command line or argument that cannot be used as given."""

    code = "usage"
    exit_code = 2


class ConfigError(SnapdError):
    """A config file, ``SNAPD_*`` variable or flag that cannot be used as given."""

    code = "config"
    exit_code = 2


class BadRequest(SnapdError):
    """A request that is malformed, mistyped, unknown or too large."""

    code = "bad_request"
    exit_code = 2


class ProtocolMismatch(SnapdError):
    """Client and daemon speak different protocol versions."""

    code = "protocol_mismatch"
    exit_code = 3


class DaemonUnavailable(SnapdError):
    """No daemon answers at the endpoint."""

    code = "daemon_unavailable"
    exit_code = 3


class AlreadyRunning(SnapdError):
    """Another daemon of this user already holds the instance lock."""

    code = "already_running"
    exit_code = 4


class PermissionRefused(SnapdError):
    """A peer, file or directory that is not the user's own."""

    code = "permission"
    exit_code = 5


class NotFound(SnapdError):
    """No such workspace, mark or path."""

    code = "not_found"
    exit_code = 6


class Ambiguous(SnapdError):
    """A mark reference that names more than one mark."""

    code = "ambiguous"
    exit_code = 6


class WorkspaceRefused(SnapdError):
    """A root that cannot be watched (a home, a VCS directory, a pseudo file system...)."""

    code = "workspace_refused"
    exit_code = 7


class TargetRefused(SnapdError):
    """A restore's target that may not be written: not empty, not a directory, snapd's own."""

    code = "target_refused"
    exit_code = 7


class StoreError(SnapdError):
    """The store cannot do what was asked (I/O failure, bad state)."""

    code = "store"
    exit_code = 8


class StoreFormatError(StoreError):
    """A store written by a snapd this one cannot read."""

    code = "store_format"


class CorruptObject(StoreError):
    """An object whose bytes no longer match its key."""

    code = "corrupt_object"


class MissingObject(StoreError):
    """An object a mark needs is not in the store."""

    code = "missing_object"


class DiskFull(StoreError):
    """No space left where the store or a workspace is written."""

    code = "disk_full"


class Timeout(SnapdError):
    """The daemon did not answer in time."""

    code = "timeout"
    exit_code = 9


class Busy(SnapdError):
    """The daemon has too many requests in flight; retrying later is safe."""

    code = "busy"
    exit_code = 9


class Conflict(SnapdError):
    """Paths a rollback left alone because they changed under it."""

    code = "conflict"
    exit_code = 10


class PlanChanged(Conflict):
    """The workspace changed since the plan the user confirmed: details carry the new plan."""

    code = "plan_changed"


class RevertConflict(SnapdError):
    """A revert refused, nothing written: later changes overlap what it takes back (``details``)."""

    code = "revert_conflict"
    exit_code = 13


class IntegrationRefused(SnapdError):
    """An agent's configuration snapctl integrate will not rewrite (comments, a foreign file)."""

    code = "integration"
    exit_code = 11


class RemoteError(SnapdError):
    """A remote repository (S3 or a directory) that cannot do what was asked."""

    code = "remote"
    exit_code = 12


class RemoteUnreachable(RemoteError):
    """No answer from the remote's server after the retries (refused, timed out, cut)."""

    code = "remote_unreachable"


class RemoteDenied(RemoteError):
    """The remote refused the credentials (403, bad signature, unknown key): names their source."""

    code = "remote_denied"


class RemoteFull(RemoteError):
    """The remote's server has no space left for an object."""

    code = "remote_full"


class RemoteMissing(RemoteError):
    """An object the remote should hold is not there (404)."""

    code = "remote_missing"


class RemoteCorrupt(RemoteError):
    """A remote object whose authentication or hash fails: tampered with or damaged."""

    code = "remote_corrupt"


class RemoteLocked(RemoteError):
    """Another prune holds the remote repository's lock (the message names its host, pid, time)."""

    code = "remote_locked"


class WrongPassword(RemoteError):
    """No key file of the remote repository opens with the password given."""

    code = "wrong_password"
    exit_code = 5


class InternalError(SnapdError):
    """A bug in the daemon: the reply says so and the traceback is in the daemon's log."""

    code = "internal"
    exit_code = 70


def from_wire(error: dict[str, Any]) -> SnapdError:
    """Rebuild the error class a daemon reply names (unknown codes become ``SnapdError``)."""
    cls = ALL_ERRORS.get(str(error.get("code", "")), SnapdError)
    details = error.get("details") or {}
    exc = cls(str(error.get("message", "unknown error")), **(details if isinstance(details, dict) else {}))
    return exc
