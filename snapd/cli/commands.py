"""One function per ``snapctl`` command: build the request, call the daemon, render.

Rules every command follows: text for people goes through :func:`output.emit` (escaped);
``--json`` prints the daemon's reply as is; a workspace is named with ``-w PATH`` (default:
the one holding the current directory); PATH arguments are sent as typed, with the current
directory, and the daemon applies the protocol's rule (relative to the current directory
inside the workspace, else to its root); anything that deletes asks on the terminal first
(:mod:`.prompt`) unless ``--yes``.
"""

from __future__ import annotations

import argparse
import base64
import os
import sys
import threading
from typing import Any

from snapd.cli import times
from snapd.cli.output import emit, path_text, print_json, progress_bar, size, summary_line, when
from snapd.cli.prompt import confirm
from snapd.config import load_config
from snapd.display import count
from snapd.errors import Conflict, PlanChanged, SnapdError, UsageError
from snapd.ipc.client import Client

Env = dict[str, str]

#: Each command's own deadline in seconds: what it usually needs on a large workspace.
#: ``client_timeout_s`` (config file or SNAPD_CLIENT_TIMEOUT_S) replaces it for every
#: command; ``--timeout`` replaces both. `snapctl --help` lists this table.
DEADLINES: dict[str, float] = {
    "status": 5, "watch": 3600, "unwatch": 10, "forget": 60, "mark": 120, "log": 10, "show": 10,
    "cat": 10, "verify": 3600, "gc": 3600, "pin": 10, "unpin": 10, "rollback": 3600,
    "undo": 3600, "diff": 600, "stop": 10, "history": 30,
}


def _client(args: argparse.Namespace, env: Env, *, quiet: bool = False) -> Client:
    # Lenient: a broken config.toml must not cut the client off from a running daemon.
    config = load_config(env, lenient=True)
    if not quiet:
        for warning in config.warnings:
            emit(f"snapctl: warning: {warning}", err=True)
    client = Client.from_config(config, DEADLINES[args.command])
    if args.timeout is not None:
        client.timeout_s = args.timeout
    return client


def _where(args: argparse.Namespace) -> dict[str, Any]:
    """``cwd`` always; ``workspace`` from ``-w`` (or the PATH argument of unwatch/forget)."""
    out: dict[str, Any] = {"cwd": os.fsencode(os.getcwd())}
    named = [p for p in (getattr(args, "workspace", None), getattr(args, "path", None)) if p]
    if len({os.path.abspath(p) for p in named}) > 1:
        raise UsageError("the workspace is named twice, differently: give either PATH or -w PATH")
    if named:
        out["workspace"] = os.fsencode(os.path.abspath(named[0]))
    return out


def call(args: argparse.Namespace, env: Env, op: str, **fields: Any) -> dict[str, Any]:
    """One request of the command ``args`` names, in its workspace (for the command modules
    beside this one, such as :mod:`.history`)."""
    with _client(args, env) as c:
        return c.call(op, **fields, **_ref_fields(args))  # type: ignore[arg-type]


def _ref_fields(args: argparse.Namespace) -> dict[str, Any]:
    fields = _where(args)
    if getattr(args, "session", None):
        fields["session"] = args.session
    return fields


def _human(args: argparse.Namespace, reply: dict[str, Any]) -> bool:
    """Print ``reply`` as JSON with --json; True when the caller should render it for people."""
    if args.json:
        print_json(reply)
        return False
    return True


def _warnings(warnings: list[str]) -> None:
    for w in warnings:
        emit(f"warning: {w}", err=True)


def cmd_status(args: argparse.Namespace, env: Env) -> int:
    try:
        with _client(args, env) as c:
            st = c.call("status")
    except SnapdError:
        if not args.json:  # the agents' hooks may say why, even with no daemon to ask
            _integration_lines(env)
        raise
    st["integrations"] = _integrations(env)
    if not _human(args, st):
        return 0
    emit(f"snapd {st['version']} (pid {st['pid']}) at {st['endpoint']}")
    emit(f"store: {st['store']['path']} ({size(st['store']['stored_bytes'])} stored)")
    if not st["workspaces"]:
        emit("no workspaces: `snapctl watch PATH` adds one")
    for w in st["workspaces"]:
        state = w.get("state", "unwatched" if not w["watching"] else "?")
        line = f"  {w['root']}  [{state}]"
        if "files" in w:
            line += f"  {count(w['files'], 'file')}, {w['skipped']} skipped, {w['pending']} pending"
        last = w.get("last_mark")
        if last:
            line += f"  last mark {last['id']} {last['label']} {when(last['created'])}"
        emit(line)  # its error, if any, is among the warnings below
        for ex in w.get("skipped_examples", [])[:5]:
            emit(f"      skipped: {path_text(ex)}")
        if line := _ignored_line(w):
            emit(f"      ignored: {line}")
        if work := w.get("counters"):
            emit(
                f"      since start: {count(work['full_scans'], 'full scan')}, "
                f"{count(work['lstats'], 'path')} lstat'ed, {count(work['files_read'], 'file')} read"
            )
    _integration_lines(env, st["integrations"])
    _warnings(st.get("warnings", []))
    return 0


def _integrations(env: Env) -> dict[str, Any]:
    """Each agent integration's last hook call and last failures (recorded by the hook)."""
    from snapd.integrations import health

    return health.load_all(load_config(env, lenient=True).locations.hooks_dir)


def _integration_lines(env: Env, records: dict[str, Any] | None = None) -> None:
    for agent, rec in sorted((records if records is not None else _integrations(env)).items()):
        last = rec.get("last_call") or {}
        emit(f"agent {agent}: last hook call {when(last.get('time'))} {last.get('event') or ''}: "
             f"{last.get('outcome') or '?'}")
        for f in (rec.get("failures") or [])[-3:]:
            emit(f"      failed {when(f.get('time'))} {f.get('event') or ''}: {f.get('message')}")


def _ignored_line(fields: dict[str, Any]) -> str:
    """"12 (gitignore 10, editor 2)" from a status or watch reply, or "" when nothing is."""
    ignored = fields.get("ignored") or {}
    if not ignored.get("total"):
        return ""
    by = ", ".join(f"{k} {n}" for k, n in sorted(ignored["counts"].items()))
    return f"{ignored['total']} ({by})"


def _watch_progress(args: argparse.Namespace, env: Env, root: str, done: threading.Event) -> None:
    """Draw a progress bar from ``status`` while the baseline runs (terminal only)."""
    with _client(args, env, quiet=True) as c:
        while not done.wait(0.25):
            try:
                st = c.call("status", timeout_s=2.0)
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
    with _client(args, env) as c:
        if sys.stderr.isatty() and not args.json:
            bar = threading.Thread(target=_watch_progress, args=(args, env, root, done), daemon=True)
            bar.start()
        try:
            r = c.call("watch", path=os.fsencode(os.path.abspath(args.path)))
        finally:
            done.set()
            if bar is not None:
                bar.join(timeout=1)
    if not _human(args, r):
        return 0
    base = r.get("baseline")
    if base:
        emit(f"watching {r['workspace']}: baseline {base['id']}, {summary_line(base['summary'])}")
    else:
        emit(f"watching {r['workspace']} (already watched)")
    if r.get("skipped"):
        emit(f"  {count(r['skipped'], 'path')} skipped (see `snapctl status`)")
    if line := _ignored_line(r):
        emit(f"  paths ignored: {line}")
    _warnings(r.get("warnings", []))
    return 0


def cmd_unwatch(args: argparse.Namespace, env: Env) -> int:
    with _client(args, env) as c:
        r = c.call("unwatch", **_where(args))
    if _human(args, r):
        emit(f"stopped watching {r['workspace']} (history kept)")
    return 0


def cmd_forget(args: argparse.Namespace, env: Env) -> int:
    where = _where(args)
    with _client(args, env) as c:
        if not args.yes:
            info = c.call("forget", dry_run=True, **where)
            what = [
                f"forget {info['workspace']}: stop watching it and delete its history: "
                f"{count(info['marks'], 'mark')} and {count(info['versions'], 'file version')} "
                f"({size(info['bytes'])} of file contents)"
            ]
            if not args.json:
                for line in what:
                    emit(line)
            if not confirm("delete this history? [y/N] ", what, shown_on_stdout=not args.json,
                           refusal="delete a workspace's history"):
                emit("nothing deleted", err=args.json)
                return 1
        r = c.call("forget", **where)
    if _human(args, r):
        emit(
            f"forgot {r['workspace']}: {count(r['forgotten_marks'], 'mark')} deleted "
            "(`snapctl gc` reclaims the space)"
        )
    return 0


def cmd_mark(args: argparse.Namespace, env: Env) -> int:
    fields = {k: getattr(args, k) for k in ("message", "agent", "session") if getattr(args, k)}
    with _client(args, env) as c:
        m = c.call("mark", label=args.label, **fields, **_where(args))
    if not _human(args, m):
        return 0
    emit(f"{m['id']} {m['label']}  {summary_line(m['summary'])}")
    _warnings(m["summary"].get("warnings", []))
    return 0


def cmd_log(args: argparse.Namespace, env: Env) -> int:
    fields: dict[str, Any] = {k: getattr(args, k) for k in ("agent", "session", "before") if getattr(args, k)}
    if args.only_path is not None:
        fields["path"] = os.fsencode(args.only_path)
    if args.all:
        fields["all"] = True
    elif args.limit is not None:
        fields["limit"] = args.limit
    with _client(args, env) as c:
        r = c.call("log", **fields, **_where(args))
    if not _human(args, r):
        return 0
    # A turn-start records the session's turn before it that never ended (daemon.turns).
    interrupted = {m["summary"].get("interrupted") for m in r["marks"]}
    for m in r["marks"]:
        who = " ".join(x for x in (m.get("agent"), m.get("session")) if x)
        pin = " [pinned]" if m["pinned"] else ""
        pin += " [interrupted]" if m["id"] in interrupted else ""
        pin += " [late]" if m["summary"].get("late") else ""
        changed = m["summary"].get("changed", 0)
        line = f"{m['id']}  {when(m['created'])}  {m['label']:<16} {changed:>5} changed  {who}{pin}"
        emit(line.rstrip())
    if r.get("more"):  # a hint, like the warnings: stdout stays one mark per line
        emit(f"(… {count(r['more'], 'older mark')}: `snapctl log --before {r['marks'][-1]['id']}`, or --all)",
             err=True)
    if r.get("pruned"):
        emit(
            f"({count(r['pruned'], 'older mark')} pruned by retention, "
            f"the newest from {when(r['pruned_newest'])})"
        )
    return 0


def cmd_show(args: argparse.Namespace, env: Env) -> int:
    with _client(args, env) as c:
        r = c.call("show", mark=args.mark, **_ref_fields(args))
    if not _human(args, r):
        return 0
    emit(f"mark {r['id']}  {r['label']}  ({r['kind']})")
    emit(f"  workspace {r['workspace']}")
    emit(f"  created   {when(r['created'])}")
    for k in ("message", "agent", "session", "git_head"):
        if r.get(k):
            emit(f"  {k:<9} {r[k]}")
    emit(f"  changes   {summary_line(r['summary'])}")
    for ch in r["changes"]:
        emit(f"    {ch['status']:<8} {path_text(ch['path'])}")
    if r["changes_total"] > len(r["changes"]):
        emit(f"    … and {r['changes_total'] - len(r['changes'])} more")
    return 0


def cmd_cat(args: argparse.Namespace, env: Env) -> int:
    with _client(args, env) as c:
        r = c.call("cat", at=args.mark, path=os.fsencode(args.file), **_ref_fields(args))
    if _human(args, r):  # the bytes themselves: this is the one output that is not text for people
        sys.stdout.buffer.write(base64.b64decode(r["data_b64"]))
        sys.stdout.flush()
    return 0


def cmd_verify(args: argparse.Namespace, env: Env) -> int:
    with _client(args, env) as c:
        r = c.call("verify", full=not args.sample)
    if _human(args, r):
        emit(f"checked {count(r['checked'], 'object')}: " + ("clean" if r["clean"] else "PROBLEMS FOUND"))
        for what in ("missing", "corrupt"):
            for key, marks in r[what].items():
                emit(f"  {what} {key}: affects marks {', '.join(marks) or '(none; history only)'}")
    return 0 if r["clean"] else 1


def cmd_gc(args: argparse.Namespace, env: Env) -> int:
    with _client(args, env) as c:
        r = c.call("gc", dry_run=args.dry_run)
    if not _human(args, r):
        return 0
    if args.dry_run:
        emit(f"would evict {count(len(r['would_evict']), 'mark')}")
        for m in r["would_evict"]:
            emit(f"  {m['id']} {m['label']} ({m['reason']})")
        return 0
    emit(
        f"evicted {count(len(r['evicted']), 'mark')}, deleted {count(r['objects_deleted'], 'object')}, "
        f"freed {size(r['bytes_freed'])}; store holds {size(r['stored_bytes'])}"
    )
    _warnings(r["warnings"])
    return 0


def _pin(args: argparse.Namespace, env: Env, op: str) -> int:
    with _client(args, env) as c:
        r = c.call(op, mark=args.mark, **_ref_fields(args))  # type: ignore[arg-type]
    if _human(args, r):
        emit(f"{r['id']} {r['label']}: {'pinned' if r['pinned'] else 'unpinned'}")
    return 0


def cmd_pin(args: argparse.Namespace, env: Env) -> int:
    return _pin(args, env, "pin")


def cmd_unpin(args: argparse.Namespace, env: Env) -> int:
    return _pin(args, env, "unpin")


def cmd_stop(args: argparse.Namespace, env: Env) -> int:
    with _client(args, env) as c:
        r = c.call("stop")
    if _human(args, r):
        emit(f"snapd (pid {r['pid']}) is stopping")
    return 0


# -- rollback, undo, diff -------------------------------------------------------------------


def _rollback_fields(args: argparse.Namespace, undo: bool) -> dict[str, Any]:
    fields: dict[str, Any] = {"undo": True} if undo else {"to": args.to}
    fields.update(_ref_fields(args))
    if args.paths:
        fields["paths"] = [os.fsencode(p) for p in args.paths]
    return fields


def _plan_lines(r: dict[str, Any], *, kept: bool, limit: int = 200) -> list[str]:
    """The plan for people; ``kept``: with the paths it leaves alone (else the result lists them)."""
    t = r["target"]
    out = [f"rollback of {r['workspace']} to {t['id']} {t['label']} ({when(t['created'])})"]
    lines = r["lines"]
    if "time" in r:  # a time target: what it was built from, and the version of each path
        out = times.target_lines(r)
        used = times.versions_used(r)
        paths = [path_text(op["path"]) for op in r["plan"]["ops"]]
        lines = [f"{line}  [{used[p]}]" if p in used else line for line, p in zip(lines, paths, strict=True)]
    out += [f"  {line}" for line in lines[:limit]]
    if len(lines) > limit:
        out.append(f"  … and {len(lines) - limit} more (--json lists them all)")
    if kept:
        out += [f"  kept: {path_text(k['path'])} ({k['reason']})" for k in r["plan"]["kept"]]
    out += [f"  left: {path_text(k['path'])} ({k['reason']})" for k in r["plan"].get("left", [])]
    counts = ", ".join(f"{n} {k}" for k, n in sorted(r["plan"]["counts"].items()) if n)
    out.append(f"  {counts or 'nothing to change'}")
    return out


def _plan_change(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """What differs between the plan the user saw and the new one (operations and kept paths)."""
    out = ["the plan is now different (a path in it changed since it was shown):"]
    old_lines, new_lines = set(old["lines"]), set(new["lines"])
    out += [f"  + {line}" for line in sorted(new_lines - old_lines)]
    out += [f"  - no longer: {line}" for line in sorted(old_lines - new_lines)]
    old_kept = {path_text(k["path"]): k["reason"] for k in old["plan"]["kept"]}
    new_kept = {path_text(k["path"]): k["reason"] for k in new["plan"]["kept"]}
    out += [f"  + kept: {p} ({why})" for p, why in sorted(new_kept.items()) if old_kept.get(p) != why]
    out += [f"  - no longer kept: {p}" for p in sorted(old_kept.keys() - new_kept.keys())]
    return out


def _rollback(args: argparse.Namespace, env: Env, undo: bool) -> int:
    fields = _rollback_fields(args, undo)
    what = "undo the last rollback" if undo else "roll the workspace back"
    with _client(args, env) as c:
        r = c.call("rollback_plan", force=args.force, **fields)
        # Kept paths are listed once: in the plan when it is confirmed or only shown, else
        # (--yes) in the result, which also names any the apply itself had to leave.
        plan_lists_kept = args.dry_run or not args.yes
        shown_plan = _plan_lines(r, kept=plan_lists_kept)
        if args.json and args.dry_run:
            print_json(r)
        elif not args.json:
            for line in shown_plan:
                emit(line)
        _warnings(r.get("warnings", []))
        if args.dry_run:
            return 0 if not r["plan"]["kept"] else Conflict.exit_code
        # With --yes nothing was confirmed here: the fresh plan is applied, unless --plan-token
        # names the plan another client (an editor) showed and had confirmed.
        token: str | None = args.plan_token
        if not args.yes:
            if not confirm("apply this rollback? [y/N] ", shown_plan, shown_on_stdout=not args.json,
                           refusal=what):
                emit("nothing changed", err=args.json)
                return 1
            token = r["plan"]["token"]
        while True:
            try:
                res = c.call("rollback_apply", force=args.force, token=token, **fields)
                break
            except PlanChanged as exc:
                if args.plan_token:  # its client confirmed that plan, not this one: it asks again
                    raise
                new = exc.details
                change = _plan_change(r, new)
                if not args.json:
                    for line in change:
                        emit(line)
                if not confirm("apply the new plan? [y/N] ", change, shown_on_stdout=not args.json,
                               refusal=what):
                    emit("nothing changed", err=args.json)
                    return 1
                r, token = new, new["plan"]["token"]
    if not _human(args, res):
        return 0 if res["ok"] else Conflict.exit_code
    if res["pre_rollback"] is None:
        emit("nothing to change: the workspace already matches the mark")
    else:
        emit(f"rolled back: {count(res['applied'], 'path')}; `snapctl undo` returns to {res['pre_rollback']}")
    for x in res["conflicts"]:
        emit(f"  conflict: {path_text(x['path'])}: {x['reason']} (left as it is)", err=True)
    listed = {path_text(k["path"]) for k in r["plan"]["kept"]} if plan_lists_kept else set()
    for x in res["kept"]:
        if (p := path_text(x["path"])) not in listed:
            listed.add(p)
            emit(f"  kept: {p}: {x['reason']}", err=True)
    if res["kept"]:
        emit(f"  {count(len(listed), 'path')} kept as they are (--force replaces them)", err=True)
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
    fields: dict[str, Any] = {"from": args.from_mark, **_ref_fields(args)}
    if args.to_mark:
        fields["to"] = args.to_mark
    if args.paths:
        fields["paths"] = [os.fsencode(p) for p in args.paths]
    with _client(args, env) as c:
        r = c.call("diff", stat=args.stat, **fields)
    if not _human(args, r):
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
