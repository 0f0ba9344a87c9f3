"""The commands about remote repositories (docs/remote.md): ``remote add|list|remove|log|prune|
passwd`` and ``push``; ``restore --from`` and ``verify --remote`` come here from their own
commands (:mod:`.rollback`, :mod:`.status`).

Every request to a repository carries the secrets :mod:`.secrets` gathers (the password, the
``AWS_*`` credentials); the daemon does the remote work and answers in counts.

This module is loaded only by the commands it serves: none of ``mark``'s start-up cost.
"""

from __future__ import annotations

import argparse
import os
import re
from typing import Any

from snapd.cli import options
from snapd.cli.output import emit, path_text, size, when
from snapd.cli.progress import Bar, Find
from snapd.cli.prompt import confirm
from snapd.cli.request import Env, absolute, client, human, named_workspace, show_warnings
from snapd.cli.secrets import PASSWORD_ENV, ask_password, read_password_file, secret_flags, secrets
from snapd.display import count
from snapd.errors import Conflict, UsageError

LOST_PASSWORD = (
    "keep this password safe: everything in the repository is encrypted with it, and a lost "
    "password is an unrecoverable loss (nobody, snapd included, can read the history without it)"
)
_DURATION = re.compile(r"(\d+(?:\.\d+)?)([smhd]?)")
_UNITS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86_400}
SAMPLE = 0.1  # verify --sample without a share: as the local sample, 10 %


def duration(text: str) -> float:
    """``--keep-within 30d``, ``--grace 24h``: a number of seconds, or with s, m, h or d."""
    m = _DURATION.fullmatch(text.strip())
    if m is None:
        raise argparse.ArgumentTypeError(f"must be a duration such as 90s, 15m, 24h or 30d, got {text!r}")
    return float(m.group(1)) * _UNITS[m.group(2)]


def percent(text: str) -> float:
    """``--sample 10`` or ``10%``: the share of the repository to read back, as a fraction."""
    try:
        value = float(text.strip().removesuffix("%"))
    except ValueError:
        value = -1.0
    if not 0 < value <= 100:
        raise argparse.ArgumentTypeError(f"must be a percentage above 0 and at most 100, got {text!r}")
    return value / 100


def add_parsers(sub: Any, wanted: Any) -> None:
    """``remote`` (with its own commands) and ``push`` on ``sub``, the ones ``wanted`` names."""
    from snapd.cli import _at_least_one  # the package's own: built by build_parser, which calls this
    if wanted("remote"):
        rp = sub.add_parser("remote", help="S3 repositories that keep history off this machine",
                            description="Repositories marks are pushed to (docs/remote.md).")
        options.add_common(rp)
        rsub = rp.add_subparsers(dest="remote_command", required=True, metavar="COMMAND")

        def add(name: str, help: str, *, secrets: bool = True) -> argparse.ArgumentParser:
            sp: argparse.ArgumentParser = rsub.add_parser(name, help=help, description=help)
            sp.add_argument("name", metavar="NAME", help="the remote's name")
            if secrets:
                secret_flags(sp)
            options.add_common(sp)
            return sp

        sp = add("add", "add a remote: opens the repository there, or creates one in an empty prefix")
        sp.add_argument("url", metavar="URL", help="s3://BUCKET/PREFIX (or file:///DIR)")
        sp.add_argument("--endpoint", metavar="URL", help="the S3 endpoint (MinIO, R2...: http://host:9000)")
        sp.add_argument("--region", help="the bucket's region")
        sp.add_argument("--profile", help="the AWS profile whose credentials to use (~/.aws/credentials)")
        sp.add_argument("--push", choices=("manual", "on-mark"), default=None,
                        help="on-mark: push each mark in the background as it is taken (default manual)")
        lp = rsub.add_parser("list", help="the remotes, their pending marks and last push",
                             description="the remotes, their pending marks and last push")
        options.add_common(lp)
        add("remove", "forget a remote (the repository itself is left as it is)", secrets=False)
        sp = add("log", "every machine's marks in the repository, newest first")
        sp.add_argument("--host", help="only the marks pushed from this host")
        sp.add_argument("-w", "--workspace", metavar="PATH",
                        help="only the marks of the workspace at PATH (as the pushing machine named it)")
        sp = add("prune", "delete marks the policy drops, then the data no mark needs (takes a lock)")
        sp.add_argument("--keep-last", type=_at_least_one, metavar="N",
                        help="keep each workspace's newest N marks (per host)")
        sp.add_argument("--keep-within", type=duration, metavar="AGE",
                        help="keep the marks younger than AGE (30d)")
        sp.add_argument("--grace", type=duration, metavar="AGE",
                        help="delete unreferenced data only after it has been doomed this long (default 24h)")
        sp.add_argument("--dry-run", action="store_true", help="say what would be deleted, delete nothing")
        sp.add_argument("-y", "--yes", action="store_true",
                        help="delete without asking (needed with no terminal)")
        sp = add("passwd", "change the repository password (adds a key file, removes the old one)")
        sp.add_argument("--new-password-file", metavar="FILE",
                        help="read the new password from FILE (default: asked twice on the terminal)")
    if wanted("push"):
        sp = sub.add_parser("push", help="send every mark not yet in the remote (objects, then records)",
                            description="send every mark not yet in the remote (objects, then records)")
        sp.add_argument("name", metavar="NAME", nargs="?", help="the remote (default: the only one)")
        sp.add_argument("-w", "--workspace", metavar="PATH",
                        help="only this workspace's marks (default: every workspace's)")
        secret_flags(sp)
        options.add_common(sp)


# -- progress -----------------------------------------------------------------------------------


def running(op: str, name: str | None) -> Find:
    """The progress of ``op`` on the remote ``name`` (any remote when None) in ``status``."""

    def find(st: dict[str, Any]) -> tuple[int, int] | str | None:
        for r in st.get("running", []):
            if r.get("op") == op and (name is None or name in (r.get("target"), r.get("remote"))):
                return (r["done"], r["total"]) if r.get("total") else f"{op}: {r.get('phase', '')}"
        return None

    return find


# -- commands -----------------------------------------------------------------------------------


def _add(args: argparse.Namespace, env: Env) -> int:
    fields: dict[str, Any] = {"name": args.name, "url": args.url, **secrets(args, env)}
    for key in ("endpoint", "region", "profile", "push"):
        if getattr(args, key):
            fields[key] = getattr(args, key)
    if args.password_file:
        fields["password_file"] = os.fsencode(absolute(args.password_file))
    if "password" not in fields:
        raise UsageError(
            f"remote add needs the repository password: set {PASSWORD_ENV} or give --password-file FILE"
        )
    with client(args, env) as c:
        r = c.call("remote_add", **fields)
    if not human(args, r):
        return 0
    repo = r.get("repo_id", "")
    if r.get("created"):
        emit(f"remote {r['name']}: created a new, empty repository {repo} at {r['url']}")
        emit(f"  {r.get('warning') or LOST_PASSWORD}")
    else:
        emit(f"remote {r['name']}: opened the repository {repo} at {r['url']} (the password is right)")
    emit(f"  `snapctl push {r['name']}` sends this machine's marks")
    show_warnings(r.get("warnings", []))
    return 0


def _list(args: argparse.Namespace, env: Env) -> int:
    with client(args, env) as c:
        r = c.call("remote_list")
    if not human(args, r):
        return 0
    if not r["remotes"]:
        emit("no remotes: `snapctl remote add NAME s3://BUCKET/PREFIX` adds one")
    for x in r["remotes"]:
        where = f" (endpoint {x['endpoint']})" if x.get("endpoint") else ""
        emit(f"{x['name']}  {x['url']}{where}  push {x.get('push', 'manual')}")
        summary, error = _state(x)
        emit(f"  {summary}")
        if error:
            emit(f"  {error}", err=True)
    return 0


def _state(x: dict[str, Any]) -> tuple[str, str | None]:
    """A remote's state for people (``remote list``, ``status``): pending marks and the last
    push; then its last error, if any."""
    pending = x.get("pending")
    line = "? marks pending" if pending is None else f"{count(pending, 'mark')} pending"
    if x.get("pushing"):
        line += ", pushing now"
    if last := x.get("last_push"):
        line += (f"; last push {when(last.get('time'))}: {count(last.get('marks', 0), 'mark')}, "
                 f"{count(last.get('objects', 0), 'object')} ({size(last.get('bytes', 0))})")
    error = x.get("last_error")
    if not error:
        return line, None
    text = error.get("message", "") if isinstance(error, dict) else str(error)
    at = f" {when(error['time'])}" if isinstance(error, dict) and error.get("time") else ""
    return line, f"last error{at}: {text}"


def status_lines(remotes: list[dict[str, Any]]) -> list[str]:
    """``status``'s lines about the remotes."""
    out = []
    for x in remotes:
        summary, error = _state(x)
        out.append(f"remote {x['name']} ({x.get('url', '?')}, push {x.get('push', 'manual')}): {summary}")
        out += [f"      {error}"] if error else []
    return out


def _remove(args: argparse.Namespace, env: Env) -> int:
    with client(args, env) as c:
        r = c.call("remote_remove", name=args.name)
    if human(args, r):
        emit(f"removed remote {args.name}: the repository itself is left as it is")
    return 0


def _log(args: argparse.Namespace, env: Env) -> int:
    fields: dict[str, Any] = {"name": args.name, **secrets(args, env)}
    if args.host:
        fields["host"] = args.host
    if args.workspace:
        fields["workspace"] = os.fsencode(absolute(args.workspace))
    with client(args, env) as c:
        r = c.call("remote_log", **fields)
    if not human(args, r):
        return 0
    for m in r["marks"]:
        who = " ".join(x for x in (m.get("agent"), m.get("session")) if x)
        emit(f"{m['id']}  {when(m['created'])}  {m['label']:<16} {m['host']} {str(m['store'])[:8]} "
             f"{path_text(m['workspace'])}  {who}".rstrip())
    hosts = {(m["host"], m["store"]) for m in r["marks"]}
    emit(f"({count(len(r['marks']), 'mark')} from {count(len(hosts), 'store')})", err=True)
    return 0


def _prune(args: argparse.Namespace, env: Env) -> int:
    if args.keep_last is None and args.keep_within is None:
        raise UsageError("remote prune needs a policy: --keep-last N and/or --keep-within AGE")
    fields: dict[str, Any] = {"name": args.name, **secrets(args, env)}
    for key, value in (("keep_last", args.keep_last), ("keep_within_s", args.keep_within),
                       ("grace_s", args.grace)):
        if value is not None:
            fields[key] = value
    with client(args, env) as c:
        if not args.dry_run and not args.yes:
            plan = c.call("remote_prune", dry_run=True, **fields)
            lines = _prune_lines(plan, would=True)
            for line in lines if not args.json else ():
                emit(line)
            if not confirm("prune the repository? [y/N] ", lines, shown_on_stdout=not args.json,
                           refusal="prune the repository"):
                emit("nothing deleted", err=args.json)
                return 1
        with Bar(args, env, running("prune", args.name), "pack"):
            r = c.call("remote_prune", dry_run=args.dry_run, **fields)
    if human(args, r):
        for line in _prune_lines(r, would=args.dry_run):
            emit(line)
        show_warnings(r.get("warnings", []))
    return 0


def _prune_lines(r: dict[str, Any], *, would: bool) -> list[str]:
    """What a prune did (or, ``would``, would do): marks, then packs and bytes."""
    verb = "would delete" if would else "deleted"
    dropped = r.get("marks_dropped", [])
    out = [f"{verb} {count(len(dropped), 'mark record')} ({', '.join(dropped[:10])}"
           + (", …)" if len(dropped) > 10 else ")") if dropped else f"{verb} no mark record"]
    out[0] += f"; kept {count(r.get('marks_kept', 0), 'mark')}"
    out.append(f"  packs: {_n(r.get('packs_deleted'))} {verb} ({size(r.get('bytes_freed', 0))}), "
               f"{_n(r.get('packs_doomed'))} doomed now, {_n(r.get('packs_waiting'))} waiting for the grace "
               "period to end (a later prune deletes them)")
    if r.get("packs_rescued"):
        out.append(f"  {count(_n(r['packs_rescued']), 'doomed pack')} needed again by a newer mark: kept")
    out += [f"  took over a stale lock: {x}" for x in r.get("took_over", [])]
    return out


def _n(value: Any) -> int:
    return len(value) if isinstance(value, list) else int(value or 0)


def _passwd(args: argparse.Namespace, env: Env) -> int:
    if args.new_password_file:
        new = read_password_file(args.new_password_file)
    else:
        new = ask_password(f"new password for remote {args.name}: ")
    with client(args, env) as c:
        r = c.call("remote_passwd", name=args.name, new_password=new, **secrets(args, env))
    if human(args, r):
        emit(f"remote {args.name}: the password is changed (the old one no longer opens it)")
        emit(f"  {LOST_PASSWORD}")
    return 0


def cmd_remote(args: argparse.Namespace, env: Env) -> int:
    run = {"add": _add, "list": _list, "remove": _remove, "log": _log, "prune": _prune, "passwd": _passwd}
    return run[args.remote_command](args, env)


def cmd_push(args: argparse.Namespace, env: Env) -> int:
    fields: dict[str, Any] = secrets(args, env)
    if args.name:
        fields["name"] = args.name
    if (ws := named_workspace(args)) is not None:
        fields["workspace"] = os.fsencode(ws)
    with client(args, env) as c, Bar(args, env, running("push", args.name), "object"):
        r = c.call("push", **fields)
    partial = Conflict.exit_code if r.get("skipped") else 0  # marks left: their objects are damaged here
    if not human(args, r):
        return partial
    name = r.get("name", args.name)
    for x in r.get("skipped", []):
        what = f"mark {x['mark']} ({x.get('label', '')}) of {path_text(x['workspace'])}"
        emit(f"not pushed: {what}: {x['reason']}", err=True)
    if not r["marks"] and not r.get("objects"):
        spaces = count(len(r.get("workspaces", [])), "workspace")
        if not partial:
            emit(f"nothing to push: {name} has every mark of {spaces}")
        return partial
    emit(f"pushed {count(r['marks'], 'mark')} to {name}: {count(r.get('objects', 0), 'new object')} "
         f"({size(r.get('bytes', 0))}) in {count(r.get('packs', 0), 'pack')}, "
         f"{count(r.get('requests', 0), 'request')}; {count(r.get('present', 0), 'mark')} already there")
    if r.get("resumed"):
        emit(f"  resumed: {count(_n(r['resumed']), 'pack')} an interrupted push had sent were indexed, "
             "not sent again")
    show_warnings(r.get("warnings", []))
    return partial


def restore_fields(args: argparse.Namespace, env: Env) -> dict[str, Any]:
    """``restore --from NAME``'s arguments: the remote, ``--host``, the secrets; ``-w PATH``
    names a workspace as the pushing machine named it (to tell apart marks of one label)."""
    fields: dict[str, Any] = {"from_remote": args.from_remote, **secrets(args, env)}
    if args.host:
        fields["host"] = args.host
    if args.workspace:
        fields["workspace"] = os.fsencode(absolute(args.workspace))
    if args.session:
        fields["session"] = args.session
    return fields


def verify(args: argparse.Namespace, env: Env) -> int:
    """``verify --remote NAME [--sample P]``: read back the repository (or a share of its packs)."""
    fields: dict[str, Any] = {"name": args.remote, **secrets(args, env)}
    if args.sample is not None:
        fields["sample"] = args.sample
    with client(args, env) as c, Bar(args, env, running("verify", args.remote), "pack"):
        r = c.call("remote_verify", **fields)
    if human(args, r):
        read = f"{count(r.get('packs_read', 0), 'pack')} of {r.get('packs', 0)}"
        emit(f"checked {args.remote}: {read}, {count(r.get('marks', 0), 'mark record')}, "
             f"{count(r.get('blobs', 0), 'object')} ({size(r.get('bytes_read', 0))} read): "
             + ("clean" if r["ok"] else "PROBLEMS FOUND"))
        for p in r.get("problems", []):
            emit(f"  {p.get('problem', 'damaged')} {p.get('object', '')}: {p.get('message', '')}")
            for ref in p.get("refs", [])[:VERIFY_PATHS]:
                emit(f"    mark {ref['mark']} ({ref.get('host', '?')}:{path_text(ref['workspace'])}) "
                     f"{path_text(ref['path']) or '/'}")
        if r.get("leftovers"):
            emit(f"  {count(len(r['leftovers']), 'pack')} in no index (an interrupted push's: its resume "
                 "indexes them, or prune deletes them after the grace period)")
    return 0 if r["ok"] else 1


VERIFY_PATHS = 10  # paths shown per problem (--json: all)
