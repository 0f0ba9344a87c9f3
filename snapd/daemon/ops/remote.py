"""Ops on remote repositories (docs/remote.md): remote_add, remote_list, remote_remove,
remote_log, remote_prune, remote_passwd, push, remote_verify.

Skeleton: the bodies land in the next commit.
"""

from __future__ import annotations

from typing import Any

from snapd.errors import UsageError


def _not_yet(op: str) -> UsageError:
    return UsageError(f"{op}: not available in this build yet")


class RemoteOps:
    def op_remote_add(
        self,
        name: str,
        url: str,
        password: str | None = None,
        credentials: dict[str, str] | None = None,
        endpoint: str | None = None,
        region: str | None = None,
        profile: str | None = None,
        password_file: bytes | None = None,
        push: str | None = None,
    ) -> dict[str, Any]:
        raise _not_yet("remote_add")

    def op_remote_list(self) -> dict[str, Any]:
        raise _not_yet("remote_list")

    def op_remote_remove(self, name: str) -> dict[str, Any]:
        raise _not_yet("remote_remove")

    def op_remote_log(
        self,
        name: str,
        password: str | None = None,
        credentials: dict[str, str] | None = None,
        host: str | None = None,
        workspace: bytes | None = None,
    ) -> dict[str, Any]:
        raise _not_yet("remote_log")

    def op_remote_prune(
        self,
        name: str,
        password: str | None = None,
        credentials: dict[str, str] | None = None,
        keep_last: int | None = None,
        keep_within_s: float | None = None,
        grace_s: float | None = None,
        dry_run: bool = False,
    ) -> dict[str, Any]:
        raise _not_yet("remote_prune")

    def op_remote_passwd(
        self,
        name: str,
        new_password: str,
        password: str | None = None,
        credentials: dict[str, str] | None = None,
    ) -> dict[str, Any]:
        raise _not_yet("remote_passwd")

    def op_push(
        self,
        name: str | None = None,
        workspace: bytes | None = None,
        cwd: bytes | None = None,
        password: str | None = None,
        credentials: dict[str, str] | None = None,
    ) -> dict[str, Any]:
        raise _not_yet("push")

    def op_remote_verify(
        self,
        name: str,
        password: str | None = None,
        credentials: dict[str, str] | None = None,
        sample: float | None = None,
    ) -> dict[str, Any]:
        raise _not_yet("remote_verify")
