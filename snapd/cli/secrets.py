"""The secrets a remote command sends with its request (docs/remote.md, "Commands"), never in
argv and never written by snapd: the repository password, from ``--password-file`` (its text
less one line end; refused when every user may read it, a warning when its group may) or else
``SNAPD_REMOTE_PASSWORD``; and the ``AWS_*`` variables of this environment (``credentials``),
so a daemon started elsewhere reaches the bucket as the user who typed the command. Neither is
sent when absent: the daemon then uses what it was sent before, its own environment, and the
remote's ``password_file`` and ``profile``.
"""

from __future__ import annotations

import argparse
import os
import stat
from typing import Any

from snapd.cli.output import emit
from snapd.cli.request import Env
from snapd.errors import UsageError

PASSWORD_ENV = "SNAPD_REMOTE_PASSWORD"


def secret_flags(sp: argparse.ArgumentParser) -> None:
    sp.add_argument(
        "--password-file", metavar="FILE",
        help=f"read the repository password from FILE (default: ${PASSWORD_ENV}, else the remote's "
        "password_file); a file other users may read is refused",
    )


def read_password_file(path: str) -> str:
    """The password in ``path``: its text, less one line end. Refused when other users may
    read it (they would hold every byte of the repository); a group may, with a warning."""
    try:
        with open(path, "rb") as f:
            mode = os.fstat(f.fileno()).st_mode
            raw = f.read(64 * 1024)
    except OSError as exc:
        raise UsageError(f"--password-file {path}: {exc.strerror}") from None
    if mode & stat.S_IROTH:
        raise UsageError(
            f"--password-file {path} can be read by every user of this machine (mode "
            f"{stat.S_IMODE(mode):04o}); the password opens the whole repository: chmod 600 it"
        )
    if mode & stat.S_IRGRP:
        emit(f"snapctl: warning: --password-file {path} can be read by its group (mode "
             f"{stat.S_IMODE(mode):04o}): chmod 600 it", err=True)
    try:
        text = raw.decode("utf-8").removesuffix("\n").removesuffix("\r")
    except UnicodeDecodeError:
        raise UsageError(f"--password-file {path} is not UTF-8 text") from None
    if not text:
        raise UsageError(f"--password-file {path} is empty")
    return text


def secrets(args: argparse.Namespace, env: Env) -> dict[str, Any]:
    """The ``password`` and ``credentials`` arguments of a remote request (each when known)."""
    out: dict[str, Any] = {}
    if getattr(args, "password_file", None):
        out["password"] = read_password_file(args.password_file)
    elif PASSWORD_ENV in env:
        if not env[PASSWORD_ENV]:
            raise UsageError(f"{PASSWORD_ENV} is set but empty")
        out["password"] = env[PASSWORD_ENV]
    aws = {k: v for k, v in env.items() if k.startswith("AWS_")}
    if aws:
        out["credentials"] = aws
    return out


def ask_password(question: str) -> str:
    """A new password, typed twice on the terminal (never echoed)."""
    if not os.isatty(0):
        raise UsageError("no terminal to ask for the new password on: give --new-password-file FILE")
    import getpass  # deferred: only a password change asks

    first = getpass.getpass(question)
    if not first:
        raise UsageError("the new password is empty: nothing changed")
    if getpass.getpass("the same again: ") != first:
        raise UsageError("the two passwords differ: nothing changed")
    return first
