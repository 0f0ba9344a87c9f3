"""``rollback`` and ``undo``: show the plan, ask (:mod:`.prompt`), apply exactly that plan;
``restore``: a mark written into another directory (nothing there is replaced: no question).

The plan shown is the plan applied: its token goes with the apply, and if the workspace
changed so that the daemon's plan differs, the difference is shown and asked about again.
With ``--yes`` nothing was shown for confirmation, so the fresh plan is applied (or, with
``--plan-token``, the plan another client showed).
"""

from __future__ import annotations

import argparse
import base64
import os
from collections.abc import Callable
from typing import Any, NamedTuple

from snapd.cli import request, times
from snapd.cli.output import emit, path_text, print_json, size, when
from snapd.cli.progress import Bar, Find
from snapd.cli.prompt import confirm
from snapd.cli.request import Env, client, human, named_workspace, ref_fields, show_warnings
from snapd.display import count
from snapd.errors import Conflict, PlanChanged, SnapdError, UsageError
from snapd.ipc.client import Client
from snapd.ipc.protocol import Op
from snapd.paths import at_or_below


def _rollback_fields(args: argparse.Namespace, undo: bool) -> dict[str, Any]:
    fields: dict[str, Any] = {"undo": True} if undo else {"to": args.to}
    fields.update(ref_fields(args))
    if args.paths:
        fields["paths"] = [os.fsencode(p) for p in args.paths]
    return fields


class Flow(NamedTuple):
    """What a command that rewrites the workspace by a plan sends and says (rollback, undo,
    revert); :func:`execute` does the rest, the same for each."""

    plan_op: Op  # the op that plans ("rollback_plan")
    apply_op: Op  # the op that applies ("rollback_apply")
    fields: dict[str, Any]  # what both are sent
    #: The plan for people: ``seen`` the plan asked about (kept paths and notes included),
    #: else the plan an apply with --yes replied, printed after it (its result lists the kept).
    lines: Callable[[dict[str, Any], bool], list[str]]
    running: tuple[str, ...]  # its ops in the status's ``running`` table (the progress bar)
    refusal: str  # what is refused with no terminal to ask on: "roll the workspace back"
    noun: str  # "apply this rollback?"
    done: str  # "rolled back: 3 paths"
    same: str  # "nothing to change: <same>"
    target: str = "the mark"  # what the workspace is rolled back to, in "differs from <target>"
    applied: Callable[[Client, dict[str, Any]], None] = lambda c, res: None  # told the apply's reply
    tail: Callable[[dict[str, Any]], list[str]] = lambda res: []  # said after the result's line


def plan_lines(r: dict[str, Any], *, kept: bool, asked: str | None = None, limit: int = 200) -> list[str]:
    """A rollback's plan for people; ``kept``: with the paths it leaves alone (else the result
    lists them); ``asked``: the target as sent (a time before the workspace's history is noted)."""
    t = r["target"]
    head = [f"rollback of {r['workspace']} to {t['id']} {t['label']} ({when(t['created'])})"]
    lines = r["lines"]
    if "time" in r:  # a time target: what it was built from, and the version of each path
        head = times.target_lines(r, asked)
        used = times.versions_used(r)
        paths = [path_text(op["path"]) for op in r["plan"]["ops"]]
        lines = [f"{line}  [{used[p]}]" if p in used else line for line, p in zip(lines, paths, strict=True)]
    return plan_body(r, head, lines, kept=kept, limit=limit)


def plan_body(
    r: dict[str, Any], head: list[str], lines: list[str], *, kept: bool, limit: int = 200,
    target: str = "the mark",
) -> list[str]:
    """A plan (a rollback's, a revert's) for people: ``head``, what it is; ``lines``, its
    operations as shown; then what it leaves and its counts. ``kept``: with the paths it leaves
    alone (else the result lists them); ``target``: what it puts the workspace back to."""
    out = head[:1]
    if "root_note" in r:  # the root is gone, or another directory: said before anything else
        out.append(f"  {r['root_note']}")
    out += head[1:]
    out += [f"  {line}" for line in lines[:limit]]
    if len(lines) > limit:
        out.append(f"  … and {len(lines) - limit} more (--json lists them all)")
    if kept:
        out += [f"  kept: {path_text(k['path'])} ({k['reason']})" for k in r["plan"]["kept"]]
    out += [f"  left: {path_text(k['path'])} ({k['reason']})" for k in r["plan"].get("left", [])]
    counts = ", ".join(f"{n} {k}" for k, n in sorted(r["plan"]["counts"].items()) if n)
    if not counts and r["plan"]["kept"]:  # it differs, but only where nothing may be changed
        n = count(len(r["plan"]["kept"]), "path")
        counts = f"nothing can be changed: {n} differing from {target} kept as they are"
    out.append(f"  {counts or 'nothing to change'}")
    return out


def _plan_change(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """What differs between the plan the user saw and the new one (operations and kept paths)."""
    out = ["the plan is now different (a path in it changed since it was shown):"]
    old_lines, new_lines = set(old["lines"]), set(new["lines"])
    out += [f"  + {line}" for line in sorted(new_lines - old_lines)]
    out += [f"  - no longer: {line}" for line in sorted(old_lines - new_lines)]
    # the same words, another op: what the path holds now changed again (the op's ``expect``)
    old_ops = dict(zip(old["lines"], old["plan"]["ops"], strict=True))
    new_ops = dict(zip(new["lines"], new["plan"]["ops"], strict=True))
    out += [f"  ~ {line} (the path changed again since the plan was shown)"
            for line in sorted(old_lines & new_lines) if old_ops[line] != new_ops[line]]
    old_kept = {path_text(k["path"]): k["reason"] for k in old["plan"]["kept"]}
    new_kept = {path_text(k["path"]): k["reason"] for k in new["plan"]["kept"]}
    out += [f"  + kept: {p} ({why})" for p, why in sorted(new_kept.items()) if old_kept.get(p) != why]
    out += [f"  - no longer kept: {p}" for p in sorted(old_kept.keys() - new_kept.keys())]
    return out


def _applying(args: argparse.Namespace, env: Env, flow: Flow) -> Bar:
    """The bar of this apply: the changes of its plan, made."""
    here = os.path.realpath(named_workspace(args) or os.getcwd())
    return Bar(args, env, _running(flow.running, {here}, below=True), "change")


def _rollback(args: argparse.Namespace, env: Env, undo: bool) -> int:
    fields = _rollback_fields(args, undo)

    def lines(r: dict[str, Any], seen: bool) -> list[str]:
        shown = plan_lines(r, kept=seen, asked=fields.get("to"))
        return shown + _hooks_kept_lines(r, env) if seen else shown

    return execute(args, env, Flow(
        "rollback_plan", "rollback_apply", fields, lines, ("rollback", "undo"),
        refusal="undo the last rollback" if undo else "roll the workspace back", noun="rollback",
        done="rolled back", same="the workspace already matches the mark",
        applied=lambda c, res: _keep_hooks(c, res, env),
    ))


def execute(args: argparse.Namespace, env: Env, flow: Flow) -> int:
    """Plan, show, ask, apply exactly the plan shown (module docstring); with ``--yes``, one
    request (:func:`_apply_unseen`). The exit: the result's, or 1 when the answer was no."""
    with client(args, env) as c:
        if args.yes and not args.dry_run:
            return _apply_unseen(args, env, c, flow)
        r = c.call(flow.plan_op, force=args.force, **flow.fields)
        shown_plan = flow.lines(r, True)
        if args.json and args.dry_run:
            print_json(r)
        elif not args.json:
            for line in shown_plan:
                emit(line)
        show_warnings(r.get("warnings", []))
        if args.dry_run:
            return 0 if not r["plan"]["kept"] else Conflict.exit_code
        if not confirm(f"apply this {flow.noun}? [y/N] ", shown_plan, shown_on_stdout=not args.json,
                       refusal=flow.refusal):
            emit("nothing changed", err=args.json)
            return 1
        token = r["plan"]["token"]
        while True:
            try:
                with _applying(args, env, flow):
                    res = c.call(flow.apply_op, force=args.force, token=token, **flow.fields)
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
                               refusal=flow.refusal):
                    emit("nothing changed", err=args.json)
                    return 1
                r, token = new, new["plan"]["token"]
        flow.applied(c, res)
    # Kept paths are listed once: in the plan confirmed, else (--yes) in the result, which
    # also names any the apply itself had to leave.
    return _result(args, res, {path_text(k["path"]) for k in r["plan"]["kept"]}, flow)


def _apply_unseen(args: argparse.Namespace, env: Env, c: Client, flow: Flow) -> int:
    """``--yes``: nothing is shown before, so nothing is planned apart: one request, which
    plans, marks and applies under the workspace's lock (one re-stat of the workspace, not
    two), and whose reply describes the plan it applied — printed after, kept paths with the
    result. With ``--plan-token`` a plan that changed is refused (its client asks again).
    With ``--yes`` nothing was confirmed here: the fresh plan is applied, unless
    ``--plan-token`` names the plan another client (an editor) showed and had confirmed."""
    with _applying(args, env, flow):
        res = c.call(flow.apply_op, force=args.force, token=args.plan_token, **flow.fields)
    flow.applied(c, res)
    if not args.json:
        for line in flow.lines(res, False):
            emit(line)
    show_warnings(res.get("warnings", []))
    return _result(args, res, set(), flow)


def _hooks_kept_lines(r: dict[str, Any], env: Env) -> list[str]:
    """The plan's word that snapd's project hooks in a settings file it restores stay."""
    from snapd.integrations import remerge

    return [f"  snapd's {x['agent']} hooks in {x['path']} stay: merged back in after the rollback"
            for x in remerge.to_keep(r, env)]


def _keep_hooks(c: Client, res: dict[str, Any], env: Env) -> None:
    """Merge snapd's project hooks back into agent settings files the rollback restored
    without them (:mod:`snapd.integrations.remerge`, which says why here); the reply lists
    them as ``hooks_merged_back``."""
    from snapd.integrations import remerge

    def cat(path: bytes, mark: str) -> bytes | None:
        try:
            got = c.call("cat", path=path, at=mark, workspace=os.fsencode(res["workspace"]))
        except SnapdError:
            return None
        return base64.b64decode(got["data_b64"]) if got.get("kind") == "file" else None

    res["hooks_merged_back"] = remerge.after_rollback(res, env, cat)


def _result(args: argparse.Namespace, res: dict[str, Any], listed: set[str], flow: Flow) -> int:
    """What the apply did; ``listed``: kept paths the confirmed plan already named."""
    if not human(args, res):
        return 0 if res["ok"] else Conflict.exit_code
    if res["pre_rollback"] is None and (res["kept"] or res["conflicts"]):
        emit(f"nothing changed: the workspace differs from {flow.target} only in paths that are kept as "
             "they are")
    elif res["pre_rollback"] is None:
        emit(f"nothing to change: {flow.same}")
    else:
        emit(f"{flow.done}: {count(res['applied'], 'path')}; `snapctl undo` returns to {res['pre_rollback']}")
    for line in flow.tail(res):
        emit(line)
    for x in res.get("hooks_merged_back", []):
        if "error" in x:
            emit(f"  snapd's {x['agent']} hooks in {x['path']} could not be merged back: {x['error']} "
                 f"(`snapctl integrate {x['agent']} --project DIR`)", err=True)
        else:
            emit(f"  kept snapd's {x['agent']} hooks in {x['path']}: the rollback restored your content, "
                 "then snapd's hooks were merged back in")
    for x in res["conflicts"]:
        emit(f"  conflict: {path_text(x['path'])}: {x['reason']} (left as it is)", err=True)
    damaged = res.get("damaged", [])
    hurt = {path_text(x["path"]) for x in damaged}  # in ``kept`` too: said below, with their cause
    kept = [x for x in res["kept"] if path_text(x["path"]) not in hurt]
    for x in kept:
        if (p := path_text(x["path"])) not in listed:
            listed.add(p)
            emit(f"  kept: {p}: {x['reason']}", err=True)
    if kept:
        emit(f"  {count(len(listed), 'path')} kept as they are ({_kept_why(args)})", err=True)
    for x in damaged[:DAMAGED_LINES]:
        emit(f"  damaged: {path_text(x['path'])}: {x['reason']} (left as it is)", err=True)
    if len(damaged) > DAMAGED_LINES:
        emit(f"  … and {len(damaged) - DAMAGED_LINES} more damaged (--json lists them all)", err=True)
    if damaged:
        emit(f"  {count(len(damaged), 'path')} not restored: the store cannot read what they held "
             "at the mark; `snapctl verify` lists every path and mark it affects", err=True)
    return 0 if res["ok"] else Conflict.exit_code


DAMAGED_LINES = 200  # damaged paths a result shows (--json: all)


def _kept_why(args: argparse.Namespace) -> str:
    """What would change the kept paths: each line's reason says why it is kept; --force
    replaces only what snapd could not capture now, never what it has nothing to restore from."""
    if getattr(args, "force", False):
        return "even with --force: see each reason"
    return "each for the reason given; --force replaces the files snapd could not capture now"


def cmd_rollback(args: argparse.Namespace, env: Env) -> int:
    return _rollback(args, env, undo=False)


def cmd_undo(args: argparse.Namespace, env: Env) -> int:
    return _rollback(args, env, undo=True)


def _running(ops: tuple[str, ...], names: set[str], *, below: bool = False) -> Find:
    """The progress of the restore or rollback (``ops``) writing into one of ``names``
    (``below``: a directory at or below its target: where a rollback was asked from)."""

    def find(st: dict[str, Any]) -> tuple[int, int] | str | None:
        for r in st.get("running", []):
            target = os.fsencode(r["target"])
            if r["op"] in ops and any(
                at_or_below(os.fsencode(n), target) if below else os.fsencode(n) == target for n in names
            ):
                return (r["done"], r["total"]) if r.get("total") else f"{r['op']}: {r['phase']}"
        return None

    return find


def cmd_restore(args: argparse.Namespace, env: Env) -> int:
    """``restore MARK --target DEST``: DEST (absolute here, relative to the current directory)
    must be absent or empty; what was not captured at MARK is listed, and the exit is then 10."""
    dest = request.absolute(args.target)
    bar = Bar(args, env, _running(("restore",), {dest, os.path.realpath(dest)}), "file")
    if args.from_remote:
        from snapd.cli import remote  # loaded already: restore's parser takes its flags

        fields = remote.restore_fields(args, env)
    elif args.host or args.password_file:
        raise UsageError("restore: --host and --password-file go with --from NAME (a remote)")
    else:
        fields = ref_fields(args)
    with client(args, env) as c, bar:
        res = c.call("restore", mark=args.mark, target=os.fsencode(dest), **fields)
    if not human(args, res):
        return 0 if res["ok"] else Conflict.exit_code
    n = res["counts"]
    what = f"the workspace at {res['time']['ref']}" if res.get("time") else (
        f"mark {res['mark']['id']} {res['mark']['label']}")
    if args.from_remote:
        what += f" (remote {args.from_remote}" + (f", host {res['host']})" if res.get("host") else ")")
    dirs = count(n["dirs"], "directory", "directories")
    emit(f"restored {what} of {res['workspace']} into {res['target']}: {count(n['files'], 'file')}, "
         f"{count(n['symlinks'], 'symlink')}, {dirs} ({size(n['bytes'])})")
    for x in res["not_restored"]:
        emit(f"  not restored: {path_text(x['path'])}: {x['reason']}", err=True)
    for x in res["conflicts"]:
        emit(f"  conflict: {path_text(x['path'])}: {x['reason']} (left as it is)", err=True)
    return 0 if res["ok"] else Conflict.exit_code
