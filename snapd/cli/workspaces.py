"""The commands that add and remove workspaces: ``watch``, ``unwatch``, ``forget``.

``forget`` deletes history, so it asks first (:mod:`.prompt`), naming what goes: marks, file
versions, bytes. With no terminal to ask on it needs ``--yes``.
"""

from __future__ import annotations

import argparse
import os
from typing import Any

from snapd.cli.output import duration, emit, size, summary_line
from snapd.cli.progress import Bar, Find
from snapd.cli.prompt import confirm
from snapd.cli.request import Env, client, human, named_workspace, show_warnings, where
from snapd.display import count


def ignored_line(fields: dict[str, Any]) -> str:
    """"12 (gitignore 10, editor 2)" from a status or watch reply, or "" when nothing is."""
    ignored = fields.get("ignored") or {}
    if not ignored.get("total"):
        return ""
    by = ", ".join(f"{k} {n}" for k, n in sorted(ignored["counts"].items()))
    return f"{ignored['total']} ({by})"


def _baseline(root: str) -> Find:
    """The baseline's progress of the workspace at ``root``, from ``status``: files read of
    the total, or, while the walk is still finding files (no total yet), how many were read."""

    def find(st: dict[str, Any]) -> tuple[int, int] | str | None:
        for w in st["workspaces"]:
            if w["root"] == root and w.get("progress"):
                done, total = w["progress"]
                if total is None:
                    return f"{count(done, 'file')} read, finding the rest"
                return done, total
        return None

    return find


def cmd_watch(args: argparse.Namespace, env: Env) -> int:
    path = named_workspace(args) or os.getcwd()
    root = os.path.realpath(path)
    with client(args, env) as c, Bar(args, env, _baseline(root), "file") as bar:
        r = c.call("watch", path=os.fsencode(path))
        if r.get("baseline"):
            bar.ends_at(r["files"])  # the total, which the last poll may not have seen yet
    if not human(args, r):
        return 0
    base = r.get("baseline")
    if base:
        emit(f"watching {r['workspace']}: baseline {base['id']}, {summary_line(base['summary'])}")
    else:
        emit(f"watching {r['workspace']} (already watched)")
    if r.get("skipped"):
        emit(f"  {count(r['skipped'], 'path')} skipped (see `snapctl status`)")
    if line := ignored_line(r):
        emit(f"  paths ignored: {line}")
    show_warnings(r.get("warnings", []))
    return 0


def cmd_unwatch(args: argparse.Namespace, env: Env) -> int:
    with client(args, env) as c:
        r = c.call("unwatch", **where(args))
    if human(args, r):
        emit(f"stopped watching {r['workspace']} (history kept)")
    return 0


ABANDONED = (
    "a rollback of it stopped part-way and is not finished: forgetting abandons it, and the "
    "files stay as it left them (`snapctl status` says why it stopped)"
)


def cmd_forget(args: argparse.Namespace, env: Env) -> int:
    named = where(args)
    with client(args, env) as c:
        if not args.yes:
            info = c.call("forget", dry_run=True, **named)
            what = [
                f"forget {info['workspace']}: stop watching it and delete its history: "
                f"{count(info['marks'], 'mark')} and {count(info['versions'], 'file version')} "
                f"({size(info['bytes'])} of file contents)",
                f"(`snapctl restore MARK --target DIR -w {info['workspace']}` keeps a copy of a mark first)",
            ]
            if info.get("unfinished_rollback"):
                what.append(ABANDONED)
            if not args.json:
                for line in what:
                    emit(line)
            if not confirm("delete this history? [y/N] ", what, shown_on_stdout=not args.json,
                           refusal="delete a workspace's history"):
                emit("nothing deleted", err=args.json)
                return 1
        r = c.call("forget", **named)
    if human(args, r):
        grace, every = duration(r["grace_s"]), duration(r["gc_interval_s"])
        emit(
            f"forgot {r['workspace']}: {count(r['forgotten_marks'], 'mark')} deleted, with "
            f"{count(r['versions'], 'file version')} ({size(r['bytes'])})"
        )
        emit(
            f"  its space comes back at the first GC after the {grace} grace period (contents "
            f"written less than {grace} ago are kept that long: a capture in flight may still "
            f"need them): `snapctl gc` reclaims what is older now; the daemon runs GC every {every}"
        )
        if r.get("unfinished_rollback"):
            emit("abandoned an unfinished rollback of it: the files stay as it left them")
    return 0

