"""One function per ``snapctl`` command: build the request, call the daemon, render."""

from __future__ import annotations

import argparse
import base64
import os
import sys
import threading
from pathlib import Path
from typing import Any

from snapd.cli.output import print_json, progress_bar, size, summary_line, when
from snapd.client import Client
from snapd.config import load_config
from snapd.errors import Conflict, PlanChanged, UsageError
from snapd.protocol import display_path

Env = dict[str, str]


def _client(args: argparse.Namespace, env: Env, timeout: float | None = None) -> Client:
    config = load_config(env)
    client = Client.from_config(config)
    if args.timeout is not None:
        client.timeout_s = args.timeout
    elif timeout is not None:
        client.timeout_s = timeout
    return client


def _where(args: argparse.Namespace) -> dict[str, Any]:
    out: dict[str, Any] = {"cwd": os.fsencode(os.getcwd())}
    ws = getattr(args, "workspace", None)
    if ws:
        out["workspace"] = os.fsencode(os.path.abspath(ws))
    return out


def _shown(p: str | dict[str, str]) -> str:
    """A path from a reply (a string, or ``{"b64": ...}`` when not UTF-8), for a terminal."""
    return display_path(base64.b64decode(p["b64"]) if isinstance(p, dict) else p.encode())


def cmd_status(args: argparse.Namespace, env: Env) -> int:
    with _client(args, env, timeout=5.0) as c:
        st = c.call("status")
    if args.json:
        print_json(st)
        return 0
    print(f"snapd {st['version']} (pid {st['pid']}) at {st['endpoint']}")
    print(f"store: {st['store']['path']} ({size(st['store']['stored_bytes'])} stored)")
    if not st["workspaces"]:
        print("no workspaces: `snapctl watch PATH` adds one")
    for w in st["workspaces"]:
        state = w.get("state", "unwatched" if not w["watching"] else "?")
        line = f"  {w['root']}  [{state}]"
        if "files" in w:
            line += f"  {w['files']} files, {w['skipped']} skipped, {w['pending']} pending"
        last = w.get("last_mark")
        if last:
            line += f"  last mark {last['id']} {last['label']} {when(last['created'])}"
        print(line)
        for ex in w.get("skipped_examples", [])[:5]:
            print(f"      skipped: {_shown(ex)}")
        if line := _ignored_line(w):
            print(f"      ignored: {line}")
    for warning in st.get("warnings", []):
        print(f"warning: {warning}", file=sys.stderr)
    return 0


def _ignored_line(fields: dict[str, Any]) -> str:
    """"12 (gitignore 10, editor 2)" from a status or watch reply, or "" when nothing is."""
    ignored = fields.get("ignored") or {}
    if not ignored.get("total"):
        return ""
    by = ", ".join(f"{k} {n}" for k, n in sorted(ignored["counts"].items()))
    return f"{ignored['total']} ({by})"


def _watch_progress(args: argparse.Namespace, env: Env, root: str, done: threading.Event) -> None:
    """Draw a progress bar from ``status`` while the baseline runs (terminal only)."""
    with _client(args, env, timeout=2.0) as c:
        while not done.wait(0.25):
            try:
                st = c.call("status")
            except Exception:
                continue
            for w in st["workspaces"]:
                prog = w.get("progress")
                if w["root"] == root and prog:
                    sys.stderr.write("\r" + progress_bar(prog[0], prog[1]))
                    sys.stderr.flush()
    sys.stderr.write("\r" + " " * 60 + "\r")


def cmd_watch(args: argparse.Namespace, env: Env) -> int:
    root = os.path.realpath(args.path)
    done = threading.Event()
    bar = None
    if sys.stderr.isatty() and not args.json:
        bar = threading.Thread(target=_watch_progress, args=(args, env, root, done), daemon=True)
        bar.start()
    try:
        with _client(args, env, timeout=3600.0) as c:
            r = c.call("watch", path=os.fsencode(os.path.abspath(args.path)))
    finally:
        done.set()
        if bar is not None:
            bar.join(timeout=1)
    if args.json:
        print_json(r)
        return 0
    base = r.get("baseline")
    if base:
        print(f"watching {r['workspace']}: baseline {base['id']}, {summary_line(base['summary'])}")
    else:
        print(f"watching {r['workspace']} (already watched)")
    if r.get("skipped"):
        print(f"  {r['skipped']} paths skipped (see `snapctl status`)")
    if line := _ignored_line(r):
        print(f"  paths ignored: {line}")
    for w in r.get("warnings", []):
        print(f"warning: {w}", file=sys.stderr)
    return 0


def _ws_arg(args: argparse.Namespace) -> dict[str, Any]:
    out: dict[str, Any] = {"cwd": os.fsencode(os.getcwd())}
    if args.path:
        out["workspace"] = os.fsencode(os.path.abspath(args.path))
    return out


def cmd_unwatch(args: argparse.Namespace, env: Env) -> int:
    with _client(args, env) as c:
        r = c.call("unwatch", **_ws_arg(args))
    print_json(r) if args.json else print(f"stopped watching {r['workspace']} (history kept)")
    return 0


def cmd_forget(args: argparse.Namespace, env: Env) -> int:
    with _client(args, env, timeout=60.0) as c:
        r = c.call("forget", **_ws_arg(args))
    if args.json:
        print_json(r)
    else:
        print(
            f"forgot {r['workspace']}: {r['forgotten_marks']} marks deleted (`snapctl gc` reclaims the space)"
        )
    return 0


def cmd_mark(args: argparse.Namespace, env: Env) -> int:
    fields = {k: getattr(args, k) for k in ("message", "agent", "session") if getattr(args, k)}
    with _client(args, env, timeout=120.0) as c:
        m = c.call("mark", label=args.label, **fields, **_where(args))
    if args.json:
        print_json(m)
        return 0
    print(f"{m['id']} {m['label']}  {summary_line(m['summary'])}")
    for w in m["summary"].get("warnings", []):
        print(f"warning: {w}", file=sys.stderr)
    return 0


def cmd_log(args: argparse.Namespace, env: Env) -> int:
    fields = {k: getattr(args, k) for k in ("agent", "session") if getattr(args, k)}
    with _client(args, env) as c:
        r = c.call("log", limit=args.limit, **fields, **_where(args))
    if args.json:
        print_json(r)
        return 0
    for m in r["marks"]:
        who = " ".join(x for x in (m.get("agent"), m.get("session")) if x)
        pin = " [pinned]" if m["pinned"] else ""
        changed = m["summary"].get("changed", 0)
        line = f"{m['id']}  {when(m['created'])}  {m['label']:<16} {changed:>5} changed  {who}{pin}"
        print(line.rstrip())
    if r.get("pruned"):
        print(
            f"({r['pruned']} older marks were pruned by retention, "
            f"the newest from {when(r['pruned_newest'])})"
        )
    return 0


def cmd_show(args: argparse.Namespace, env: Env) -> int:
    with _client(args, env) as c:
        r = c.call("show", mark=args.mark, **_where(args))
    if args.json:
        print_json(r)
        return 0
    print(f"mark {r['id']}  {r['label']}  ({r['kind']})")
    print(f"  workspace {r['workspace']}\n  created   {when(r['created'])}")
    for k in ("message", "agent", "session", "git_head"):
        if r.get(k):
            print(f"  {k:<9} {r[k]}")
    print(f"  changes   {summary_line(r['summary'])}")
    for ch in r["changes"]:
        print(f"    {ch['status']:<8} {_shown(ch['path'])}")
    if r["changes_total"] > len(r["changes"]):
        print(f"    … and {r['changes_total'] - len(r['changes'])} more")
    return 0


def cmd_cat(args: argparse.Namespace, env: Env) -> int:
    with _client(args, env) as c:
        r = c.call("cat", at=args.mark, path=os.fsencode(args.path), **_where(args))
    sys.stdout.buffer.write(base64.b64decode(r["data_b64"]))
    sys.stdout.flush()
    return 0


def cmd_verify(args: argparse.Namespace, env: Env) -> int:
    with _client(args, env, timeout=3600.0) as c:
        r = c.call("verify", full=not args.sample)
    if args.json:
        print_json(r)
    else:
        print(f"checked {r['checked']} objects: " + ("clean" if r["clean"] else "PROBLEMS FOUND"))
        for what in ("missing", "corrupt"):
            for key, marks in r[what].items():
                print(f"  {what} {key}: affects marks {', '.join(marks) or '(none; history only)'}")
    return 0 if r["clean"] else 1


def cmd_gc(args: argparse.Namespace, env: Env) -> int:
    with _client(args, env, timeout=3600.0) as c:
        r = c.call("gc", dry_run=args.dry_run)
    if args.json:
        print_json(r)
        return 0
    if args.dry_run:
        print(f"would evict {len(r['would_evict'])} marks")
        for m in r["would_evict"]:
            print(f"  {m['id']} {m['label']} ({m['reason']})")
        return 0
    print(
        f"evicted {len(r['evicted'])} marks, deleted {r['objects_deleted']} objects, "
        f"freed {size(r['bytes_freed'])}; "
        f"store holds {size(r['stored_bytes'])}"
    )
    for w in r["warnings"]:
        print(f"warning: {w}", file=sys.stderr)
    return 0


def _pin(args: argparse.Namespace, env: Env, op: str) -> int:
    with _client(args, env) as c:
        r = c.call(op, mark=args.mark, **_where(args))  # type: ignore[arg-type]
    print_json(r) if args.json else print(
        f"{r['id']} {r['label']}: {'pinned' if r['pinned'] else 'unpinned'}"
    )
    return 0


def cmd_pin(args: argparse.Namespace, env: Env) -> int:
    return _pin(args, env, "pin")


def cmd_unpin(args: argparse.Namespace, env: Env) -> int:
    return _pin(args, env, "unpin")


def cmd_stop(args: argparse.Namespace, env: Env) -> int:
    with _client(args, env) as c:
        r = c.call("stop")
    print(f"snapd (pid {r['pid']}) is stopping")
    return 0


__all__ = ["print_json", "Path"]


# -- rollback, undo, diff -------------------------------------------------------------------


def _rollback_fields(args: argparse.Namespace, undo: bool) -> dict[str, Any]:
    fields: dict[str, Any] = {"undo": True} if undo else {"to": args.to}
    fields.update(_where(args))
    if args.paths:
        fields["paths"] = [os.fsencode(os.path.abspath(p)) for p in args.paths]
    return fields


def _print_plan(r: dict[str, Any], limit: int = 200) -> None:
    t = r["target"]
    print(f"rollback of {r['workspace']} to {t['id']} {t['label']} ({when(t['created'])})")
    lines = r["lines"]
    for line in lines[:limit]:
        print(f"  {line}")
    if len(lines) > limit:
        print(f"  … and {len(lines) - limit} more (--json lists them all)")
    for k in r["plan"]["kept"]:
        print(f"  kept: {_shown(k['path'])} ({k['reason']})")
    for k in r["plan"].get("left", []):
        print(f"  left: {_shown(k['path'])} ({k['reason']})")
    counts = ", ".join(f"{n} {k}" for k, n in sorted(r["plan"]["counts"].items()) if n)
    print(f"  {counts or 'nothing to change'}")
    for w in r.get("warnings", []):
        print(f"warning: {w}", file=sys.stderr)


def _confirm(question: str) -> bool:
    try:
        return input(question).strip().lower() in ("y", "yes")
    except EOFError:
        return False


def _rollback(args: argparse.Namespace, env: Env, undo: bool) -> int:
    fields = _rollback_fields(args, undo)
    with _client(args, env, timeout=3600.0) as c:
        r = c.call("rollback_plan", force=args.force, **fields)
        if args.dry_run:
            print_json(r) if args.json else _print_plan(r)
            return 0 if not r["plan"]["kept"] else Conflict.exit_code
        if not args.json:
            _print_plan(r)
        token: str | None = None  # with --yes nothing was confirmed: the fresh plan is applied
        if not args.yes:
            if not sys.stdin.isatty():
                print("snapctl: refusing to change files without confirmation: pass --yes", file=sys.stderr)
                return UsageError.exit_code
            if not _confirm("apply this rollback? [y/N] "):
                print("nothing changed")
                return 1
            token = r["plan"]["token"]
        while True:
            try:
                res = c.call("rollback_apply", force=args.force, token=token, **fields)
                break
            except PlanChanged as exc:
                new = exc.details
                print("the workspace changed since the plan was made; the plan is now different:")
                old_lines, new_lines = set(r["lines"]), set(new["lines"])
                for line in sorted(new_lines - old_lines):
                    print(f"  + {line}")
                for line in sorted(old_lines - new_lines):
                    print(f"  - no longer: {line}")
                if not _confirm("apply the new plan? [y/N] "):
                    print("nothing changed")
                    return 1
                r, token = new, new["plan"]["token"]
    if args.json:
        print_json(res)
    else:
        if res["pre_rollback"] is None:
            print("nothing to change: the workspace already matches the mark")
        else:
            print(f"rolled back: {res['applied']} paths; `snapctl undo` returns to {res['pre_rollback']}")
        for x in res["conflicts"]:
            print(f"  conflict: {_shown(x['path'])}: {x['reason']} (left as it is)", file=sys.stderr)
        for x in res["kept"]:
            print(f"  kept: {_shown(x['path'])}: {x['reason']}", file=sys.stderr)
    return 0 if res["ok"] else Conflict.exit_code


def cmd_rollback(args: argparse.Namespace, env: Env) -> int:
    return _rollback(args, env, undo=False)


def cmd_undo(args: argparse.Namespace, env: Env) -> int:
    return _rollback(args, env, undo=True)


def _colors(env: Env) -> dict[str, str]:
    if env.get("NO_COLOR") or not sys.stdout.isatty():
        return {k: "" for k in ("add", "del", "hunk", "head", "end")}
    return {"add": "\033[32m", "del": "\033[31m", "hunk": "\033[36m", "head": "\033[1m", "end": "\033[0m"}


def cmd_diff(args: argparse.Namespace, env: Env) -> int:
    fields: dict[str, Any] = {"from": args.from_mark, **_where(args)}
    if args.to_mark:
        fields["to"] = args.to_mark
    if args.paths:
        fields["paths"] = [os.fsencode(os.path.abspath(p)) for p in args.paths]
    with _client(args, env, timeout=600.0) as c:
        r = c.call("diff", stat=args.stat, **fields)
    if args.json:
        print_json(r)
        return 0
    col = _colors(env)
    for f in r["files"]:
        name = _shown(f["path"])
        if args.stat or f["status"] == "mode" or "binary" not in f:
            extra = f" +{f['added']} -{f['removed']}" if "added" in f else ""
            mode = (
                f" {f.get('old_mode', 0):04o} -> {f.get('new_mode', 0):04o}" if f["status"] == "mode" else ""
            )
            print(f"{f['status']:<9} {name}{extra}{mode}")
            continue
        print(f"{col['head']}diff {name} ({f['status']}){col['end']}")
        if f["binary"]:
            print(f"Binary file {name} differs ({f['old_size']} -> {f['new_size']} bytes)")
            continue
        for line in f["diff"].splitlines():
            if line.startswith(("+++", "---")):
                print(f"{col['head']}{line}{col['end']}")
            elif line.startswith("+"):
                print(f"{col['add']}{line}{col['end']}")
            elif line.startswith("-"):
                print(f"{col['del']}{line}{col['end']}")
            elif line.startswith("@@"):
                print(f"{col['hunk']}{line}{col['end']}")
            else:
                print(line)
    return 0
