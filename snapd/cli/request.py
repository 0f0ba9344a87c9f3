"""What every ``snapctl`` command shares: its client, its workspace, its output mode.

- The client loads the configuration leniently: a broken ``config.toml`` is a warning, never
  a reason to lose the running daemon (only ``snapd start`` refuses it).
- Its deadline follows one rule (docs/operations.md, "Client deadlines"): ``--timeout``, else
  ``client_timeout_s`` (config file or ``SNAPD_CLIENT_TIMEOUT_S``), else the command's own
  entry in :data:`DEADLINES`.
- A workspace is named the same way by every command: ``-w PATH`` (any path inside it), else
  the current directory; the commands that also took a positional PATH keep it as a synonym.
- ``--json`` prints the daemon's reply as is; text for people goes through :func:`output.emit`.
- Anything that deletes asks on the terminal first (:mod:`.prompt`) unless ``--yes``.
"""

from __future__ import annotations

import argparse
import os
from typing import Any

from snapd.cli.output import emit, print_json
from snapd.config import load_config
from snapd.errors import UsageError
from snapd.ipc.client import Client

Env = dict[str, str]

#: Each command's own deadline in seconds: what it usually needs on a large workspace.
#: ``client_timeout_s`` (config file or SNAPD_CLIENT_TIMEOUT_S) replaces it for every
#: command; ``--timeout`` replaces both. `snapctl --help` lists this table.
DEADLINES: dict[str, float] = {
    "status": 5, "watch": 3600, "unwatch": 10, "forget": 60, "mark": 120, "log": 10, "show": 10,
    "cat": 10, "verify": 3600, "gc": 3600, "pin": 10, "unpin": 10, "rollback": 3600,
    "undo": 3600, "restore": 3600, "diff": 600, "stop": 10, "history": 30, "events": 5,
    "remote": 3600, "push": 3600, "revert": 3600, "run": 120,
}


def client(args: argparse.Namespace, env: Env, *, quiet: bool = False) -> Client:
    # Lenient: a broken config.toml must not cut the client off from a running daemon.
    config = load_config(env, lenient=True)
    if not quiet:
        for warning in config.warnings:
            emit(f"snapctl: warning: {warning}", err=True)
    c = Client.from_config(config, DEADLINES[args.command])
    if args.timeout is not None:
        c.timeout_s = args.timeout
    return c


def named_workspace(args: argparse.Namespace) -> str | None:
    """The absolute path ``-w PATH`` gives, or the positional PATH of watch, unwatch and
    forget (the same thing, kept for those who type it); None when neither is given."""
    named = {absolute(p) for p in (getattr(args, "workspace", None), getattr(args, "path", None)) if p}
    if len(named) > 1:
        raise UsageError("the workspace is named twice, differently: give either PATH or -w PATH")
    return named.pop() if named else None


def absolute(path: str) -> str:
    """``os.path.abspath``, which needs the current directory only for a relative path."""
    if os.path.isabs(path):
        return os.path.normpath(path)
    try:
        return os.path.abspath(path)
    except FileNotFoundError:
        raise UsageError(
            f"{path} is relative, and the current directory no longer exists: give an absolute path"
        ) from None


def where(args: argparse.Namespace) -> dict[str, Any]:
    """``cwd`` (unless the current directory was deleted: a workspace root that is gone must
    still be named, with ``-w``); ``workspace`` when one is named (:func:`named_workspace`)."""
    out: dict[str, Any] = {}
    try:
        out["cwd"] = os.fsencode(os.getcwd())
    except FileNotFoundError:
        pass
    named = named_workspace(args)
    if named is not None:
        out["workspace"] = os.fsencode(named)
    elif "cwd" not in out:
        raise UsageError(
            "the current directory no longer exists (deleted?): name the workspace with -w PATH "
            "(`snapctl rollback --to MARK -w PATH` recreates a deleted workspace)"
        )
    return out


def call(args: argparse.Namespace, env: Env, op: str, **fields: Any) -> dict[str, Any]:
    """One request of the command ``args`` names, in its workspace (for the command modules
    beside this one, such as :mod:`.history`)."""
    with client(args, env) as c:
        return c.call(op, **fields, **ref_fields(args))  # type: ignore[arg-type]


def ref_fields(args: argparse.Namespace) -> dict[str, Any]:
    fields = where(args)
    if getattr(args, "session", None):
        fields["session"] = args.session
    return fields


def human(args: argparse.Namespace, reply: dict[str, Any]) -> bool:
    """Print ``reply`` as JSON with --json; True when the caller should render it for people."""
    if args.json:
        print_json(reply)
        return False
    return True


def show_warnings(warnings: list[str]) -> None:
    for w in warnings:
        emit(f"warning: {w}", err=True)
