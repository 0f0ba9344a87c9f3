"""``snapctl events``: follow the daemon's live events (docs/protocol.md, "Events").

The endpoint and the daemon's instance come from ``status``, so a long ``SNAPD_HOME`` whose
socket moved to a short directory is found the same way as the control socket. Every event is
printed as it arrives; a jump in a workspace's ``seq`` is printed as a gap (events the daemon
dropped because this subscriber fell too far behind), a new ``instance`` as a restart (the
counters begin again). With ``--json`` each of them is one JSON object per line.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import Any

from snapd.cli.output import emit, path_text, summary_line
from snapd.cli.request import client
from snapd.errors import DaemonUnavailable, NotFound
from snapd.ipc.events import Notice, Sequencer, Subscriber


def _daemon(args: argparse.Namespace, env: dict[str, str]) -> dict[str, Any]:
    with client(args, env) as c:
        return c.call("status")


def _root_of(path: str, status: dict[str, Any]) -> str:
    """The workspace holding ``path``: the longest root at or above it."""
    real = os.path.realpath(path)
    roots = [w["root"] for w in status["workspaces"] if isinstance(w["root"], str)]
    holding = [r for r in roots if real == r or real.startswith(r.rstrip("/") + "/")]
    if not holding:
        raise NotFound(f"no workspace contains {real}: pass -w PATH, or `snapctl watch` it")
    return max(holding, key=len)


def cmd_events(args: argparse.Namespace, env: dict[str, str]) -> int:
    status = _daemon(args, env)
    info = status.get("events") or {}
    if not info.get("endpoint"):
        raise DaemonUnavailable("this snapd publishes no events; restart it with a newer version")
    roots = [_root_of(args.workspace, status)] if args.workspace else None
    sequencer = Sequencer(info.get("instance"))
    seen = 0
    with Subscriber(info["endpoint"], None if roots is None else [os.fsencode(r) for r in roots]) as sub:
        live = sub.connect()
        # Said once the subscription is on its way (or the wait gave up): a client reads the
        # current state (log, status) after this line, and applies events from then on.
        if args.json:
            _line({"notice": "subscribed", "instance": info.get("instance"), "connected": live})
        else:
            where = roots[0] if roots else "every workspace"
            emit(f"following {where} (daemon instance {info.get('instance')}); Ctrl-C stops", err=True)
        while args.count is None or seen < args.count:
            event = sub.receive(None)
            assert event is not None
            for notice in sequencer.check(event):
                _print_notice(notice, args.json)
            _print_event(event, args.json)
            seen += 1
    return 0


def _line(obj: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(obj, sort_keys=True) + "\n")
    sys.stdout.flush()


def _print_notice(n: Notice, as_json: bool) -> None:
    if n.kind == "restart":
        if as_json:
            _line({"notice": "restart", "old_instance": n.old_instance, "new_instance": n.new_instance})
        else:
            emit(f"-- the daemon restarted (instance {n.old_instance} -> {n.new_instance}): "
                 "events in between are unknown")
    elif as_json:
        _line({"notice": "gap", "workspace": n.workspace, "lost": n.lost, "first_missing": n.first_missing})
    else:
        where = path_text(n.workspace) if n.workspace is not None else "daemon"
        emit(f"-- gap: {n.lost} event(s) of {where} lost from seq {n.first_missing} "
             "(this subscriber fell too far behind)")
    sys.stdout.flush()


def _print_event(ev: dict[str, Any], as_json: bool) -> None:
    if as_json:
        _line(ev)
        return
    stamp = time.strftime("%H:%M:%S", time.localtime(float(ev.get("time", 0))))
    where = path_text(ev["workspace"]) if ev.get("workspace") is not None else "(daemon)"
    emit(f"{stamp} #{ev['seq']} {ev['event']} {where}: {_what(ev)}")
    sys.stdout.flush()


def _what(ev: dict[str, Any]) -> str:
    kind = ev["event"]
    if kind == "mark.created":
        m = ev["mark"]
        agent = f" agent {m['agent']}" if m.get("agent") else ""
        return f"{m['id']} {m['label']}{agent} ({summary_line(m.get('summary') or {})})"
    if kind in ("rollback.applied", "undo.applied", "revert.applied"):
        t = ev["target"]
        extra = "".join(f", {ev[k]} {k}" for k in ("conflicts", "kept") if ev.get(k))
        pre = f"; undo returns to {ev['pre_rollback']}" if ev.get("pre_rollback") else ""
        return f"to {t['id']} ({t['label']}): {ev['applied']} applied{extra}{pre}"
    if kind == "workspace.watched":
        if ev.get("resumed"):
            return "watched again (daemon start)"
        return f"watched, baseline {ev['baseline']['id']}" if ev.get("baseline") else "watched"
    if kind == "workspace.rescanned":
        return f"rescanned ({ev['reason']})"
    if kind == "capture.skipped":
        return f"not captured: {path_text(ev['path'])} ({ev['reason']})"
    if kind == "warning":
        return str(ev["message"])
    return "unwatched" if kind == "workspace.unwatched" else json.dumps(ev)
