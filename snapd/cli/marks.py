"""The commands about marks: take one (``mark``), list them (``log``), look inside one
(``show``, ``cat``, ``diff``), keep one (``pin``, ``unpin``).

A mark reference is resolved by the daemon; ``--session`` limits a label to one session's
marks for every command that takes a reference.
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys
from typing import Any

from snapd.cli.output import emit, path_text, summary_line, when
from snapd.cli.request import Env, client, human, ref_fields, show_warnings, where
from snapd.cli.times import history_note
from snapd.display import count


def cmd_mark(args: argparse.Namespace, env: Env) -> int:
    fields = {k: getattr(args, k) for k in ("message", "agent", "session") if getattr(args, k)}
    with client(args, env) as c:
        m = c.call("mark", label=args.label, **fields, **where(args))
    if not human(args, m):
        return 0
    emit(f"{m['id']} {m['label']}  {summary_line(m['summary'])}")
    show_warnings(m["summary"].get("warnings", []))
    return 0


def cmd_log(args: argparse.Namespace, env: Env) -> int:
    fields: dict[str, Any] = {k: getattr(args, k) for k in ("agent", "session", "before") if getattr(args, k)}
    if args.only_path is not None:
        fields["path"] = os.fsencode(args.only_path)
    if args.all:
        fields["all"] = True
    elif args.limit is not None:
        fields["limit"] = args.limit
    with client(args, env) as c:
        r = c.call("log", **fields, **where(args))
    if not human(args, r):
        return 0
    # A turn-start records the session's turn before it that never ended (daemon.turns).
    interrupted = {m["summary"].get("interrupted") for m in r["marks"]}
    for m in r["marks"]:
        who = " ".join(x for x in (m.get("agent"), m.get("session")) if x)
        pin = " [pinned]" if m["pinned"] else ""
        pin += " [interrupted]" if m["id"] in interrupted else ""
        pin += " [late]" if m["summary"].get("late") else ""
        pin += f" [{ended}]" if (ended := _run_end(m["summary"].get("run"))) else ""
        changed = m["summary"].get("changed", 0)
        line = f"{m['id']}  {when(m['created'])}  {m['label']:<16} {changed:>5} changed  {who}{pin}"
        emit(line.rstrip())
    if r.get("more"):  # a hint, like the warnings: stdout stays one mark per line
        emit(f"(… {count(r['more'], 'older mark')}: `{_next_page(args, r['marks'][-1]['id'])}`, or --all)",
             err=True)
    if r.get("pruned"):
        emit(
            f"({count(r['pruned'], 'older mark')} pruned by retention, "
            f"the newest from {when(r['pruned_newest'])})"
        )
    return 0


def _run_end(run: dict[str, Any] | None) -> str | None:
    """How the command ``snapctl run`` wrapped ended (its turn-end mark), for people; None for
    a mark that is no run's end."""
    if not run or (run["exit"] is None and run["signal"] is None):
        return None
    return f"killed by {run['signal']}" if run["signal"] else f"exit {run['exit']}"


def _next_page(args: argparse.Namespace, last: str) -> str:
    """The command that lists the next page: this one (same workspace, filters and page
    size), before the last mark shown."""
    words = ["snapctl", "log"]
    for flag, value in (("-w", args.workspace), ("-n", args.limit), ("--agent", args.agent),
                        ("--session", args.session), ("--path", args.only_path)):
        if value is not None:
            words += [flag, str(value)]
    return shlex.join([*words, "--before", last])


def cmd_show(args: argparse.Namespace, env: Env) -> int:
    with client(args, env) as c:
        r = c.call("show", mark=args.mark, **ref_fields(args))
    if not human(args, r):
        return 0
    emit(f"mark {r['id']}  {r['label']}  ({r['kind']})")
    emit(f"  workspace {r['workspace']}")
    emit(f"  created   {when(r['created'])}")
    for k in ("message", "agent", "session", "git_head"):
        if r.get(k):
            emit(f"  {k:<9} {r[k]}")
    if run := r["summary"].get("run"):
        emit(f"  run       {shlex.join(run['argv'])}" + (f"  ({ended})" if (ended := _run_end(run)) else ""))
    emit(f"  changes   {summary_line(r['summary'])}")
    for ch in r["changes"]:
        emit(f"    {ch['status']:<8} {path_text(ch['path'])}")
    if r["changes_total"] > len(r["changes"]):
        emit(f"    … and {r['changes_total'] - len(r['changes'])} more")
    return 0


def cmd_cat(args: argparse.Namespace, env: Env) -> int:
    with client(args, env) as c:
        r = c.call("cat", at=args.mark, path=os.fsencode(args.file), **ref_fields(args))
    if note := history_note(args.mark, r.get("time")):
        emit(f"note: {note}", err=True)
    if human(args, r):  # the bytes themselves: this is the one output that is not text for people
        import base64  # deferred: `mark`, which every turn runs, lives in this module too

        sys.stdout.buffer.write(base64.b64decode(r["data_b64"]))
        sys.stdout.flush()
    return 0


def _pin(args: argparse.Namespace, env: Env, op: str) -> int:
    with client(args, env) as c:
        r = c.call(op, mark=args.mark, **ref_fields(args))  # type: ignore[arg-type]
    if human(args, r):
        emit(f"{r['id']} {r['label']}: {'pinned' if r['pinned'] else 'unpinned'}")
    return 0


def cmd_pin(args: argparse.Namespace, env: Env) -> int:
    return _pin(args, env, "pin")


def cmd_unpin(args: argparse.Namespace, env: Env) -> int:
    return _pin(args, env, "unpin")


def _colors(env: Env) -> dict[str, str]:
    if env.get("NO_COLOR") or not sys.stdout.isatty():
        return {k: "" for k in ("add", "del", "hunk", "head", "end")}
    return {"add": "\033[32m", "del": "\033[31m", "hunk": "\033[36m", "head": "\033[1m", "end": "\033[0m"}


def cmd_diff(args: argparse.Namespace, env: Env) -> int:
    fields: dict[str, Any] = {"from": args.from_mark, **ref_fields(args)}
    if args.to_mark:
        fields["to"] = args.to_mark
    if args.paths:
        fields["paths"] = [os.fsencode(p) for p in args.paths]
    with client(args, env) as c:
        r = c.call("diff", stat=args.stat, **fields)
    for asked, key in ((args.from_mark, "from_time"), (args.to_mark, "to_time")):
        if note := history_note(asked, r.get(key)):
            emit(f"note: {note}", err=True)
    if not human(args, r):
        return 0
    col = _colors(env)
    for f in r["files"]:
        name = path_text(f["path"])
        if args.stat or f["status"] == "mode" or "binary" not in f:
            extra = f" +{f['added']} -{f['removed']}" if "added" in f else ""
            if f.get("not_captured"):
                extra += f" (not captured: {', '.join(f['not_captured'])})"
            mode = (
                f" {f.get('old_mode', 0):04o} -> {f.get('new_mode', 0):04o}" if f["status"] == "mode" else ""
            )
            emit(f"{f['status']:<9} {name}{extra}{mode}")
            continue
        emit(f"diff {name} ({f['status']})", color=(col["head"], col["end"]))
        if f["binary"]:
            emit(f"Binary file {name} differs ({f['old_size']} -> {f['new_size']} bytes)")
            continue
        for line in f["diff"].splitlines():
            if line.startswith(("+++", "---")):
                key = "head"
            elif line.startswith("+"):
                key = "add"
            elif line.startswith("-"):
                key = "del"
            elif line.startswith("@@"):
                key = "hunk"
            else:
                key = ""
            emit(line, tabs=True, color=(col[key], col["end"]) if key else ("", ""))
    return 0
