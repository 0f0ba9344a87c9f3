"""The commands about the daemon and its store as a whole: ``status``, ``stop``,
``verify``, ``gc``. ``status`` also shows the agents' hook health, which the hooks record
on disk, so it has something to say even when no daemon answers.
"""

from __future__ import annotations

import argparse
from typing import Any

from snapd.cli.output import duration, emit, path_text, size, when
from snapd.cli.request import Env, client, human, show_warnings
from snapd.cli.workspaces import ignored_line
from snapd.config import load_config
from snapd.display import count
from snapd.errors import SnapdError, UsageError


def cmd_status(args: argparse.Namespace, env: Env) -> int:
    try:
        with client(args, env) as c:
            st = c.call("status")
    except SnapdError:
        if not args.json:  # the agents' hooks may say why, even with no daemon to ask
            _integration_lines(env)
        raise
    st["integrations"] = _integrations(env)
    if not human(args, st):
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
        if line := ignored_line(w):
            emit(f"      ignored: {line}")
        if n := w.get("precious"):  # a daemon older than the CLI counts none
            shown = ", ".join(path_text(p) for p in w["precious_examples"][:5]) + (", ..." if n > 5 else "")
            emit(f"      precious: {count(n, 'file')} git ignores, kept: {shown}")
        if work := w.get("counters"):
            listings = work.get("listings")  # a daemon older than the CLI has no such counter
            listed = "" if listings is None else f"{count(listings, 'directory', 'directories')} listed, "
            emit(
                f"      since start: {count(work['full_scans'], 'full scan')}, {listed}"
                f"{count(work['lstats'], 'path')} lstat'ed, {count(work['files_read'], 'file')} read"
            )
    if st.get("remotes"):  # a daemon older than the CLI has none
        from snapd.cli.remote import status_lines

        for line in status_lines(st["remotes"]):
            emit(line)
    _integration_lines(env, st["integrations"])
    show_warnings(st.get("warnings", []))
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


def cmd_verify(args: argparse.Namespace, env: Env) -> int:
    from snapd.cli import remote  # loaded already: verify's parser takes its flags

    if args.remote:
        return remote.verify(args, env)
    if args.sample not in (None, remote.SAMPLE):
        raise UsageError("verify --sample P takes a share only with --remote: the local sample is 10%")
    with client(args, env) as c:
        r = c.call("verify", full=not args.sample)
    if human(args, r):
        emit(f"checked {count(r['checked'], 'object')}: " + ("clean" if r["clean"] else "PROBLEMS FOUND"))
        if "damaged" not in r:  # a daemon older than this snapctl: objects only
            for what in ("missing", "corrupt"):
                for key, marks in r[what].items():
                    emit(f"  {what} {key}: affects marks {', '.join(marks) or '(none; history only)'}")
        for d in r.get("damaged", []):
            paths = _by_path(d["paths"])
            emit(f"  {d['problem']} object {d['object']}: needed by {count(len(paths), 'path')}")
            for ref in paths[:VERIFY_PATHS]:
                emit(f"    {_reference(ref)}")
            if len(paths) > VERIFY_PATHS:
                emit(f"    … and {len(paths) - VERIFY_PATHS} more (--json lists them all)")
    return 0 if r["clean"] else 1


VERIFY_PATHS = 10  # paths shown per damaged object (--json: all)
VERIFY_MARKS = 5  # marks shown per path


def _by_path(refs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The references of one damaged object merged by path (a path may need several of the
    objects stored through it: one version per mark)."""
    out: dict[tuple[str, str, str], dict[str, Any]] = {}
    for ref in refs:
        key = (path_text(ref["workspace"]), path_text(ref["path"]), ref["kind"])
        seen = out.setdefault(key, {**ref, "marks": []})
        seen["marks"] += [m for m in ref["marks"] if m not in seen["marks"]]
        seen["latest"] = seen["latest"] or ref["latest"]
        seen["history"] = seen["history"] or ref["history"]
    return list(out.values())


def _reference(ref: dict[str, Any]) -> str:
    """One path that needs a damaged object, and where: marks, the latest capture, history."""
    kind = ref["kind"]
    if kind == "rules":
        what = "the ignore-rule inputs recorded"
    elif not ref["path"]:
        what = "the workspace root"
    else:
        what = ("directory " if kind == "dir" else "") + path_text(ref["path"])
    marks = ref["marks"]
    where = [f"{count(len(marks), 'mark')} ({', '.join(marks[:VERIFY_MARKS])}"
             + (", …)" if len(marks) > VERIFY_MARKS else ")")] if marks else []
    where += ["the latest capture"] * ref["latest"] + ["history between marks"] * ref["history"]
    return f"{what} in {path_text(ref['workspace'])}: {', '.join(where) or 'no mark'}"


def cmd_gc(args: argparse.Namespace, env: Env) -> int:
    with client(args, env) as c:
        r = c.call("gc", dry_run=args.dry_run)
    if not human(args, r):
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
    if r.get("waiting_objects"):
        emit(
            f"  kept for now: {count(r['waiting_objects'], 'object')} ({size(r['waiting_bytes'])}) no mark "
            f"needs any more, written less than {duration(r['grace_s'])} ago (the grace period: a "
            f"capture in flight may still need them); `snapctl gc` after {when(r['waiting_until'])} "
            "reclaims them"
        )
    show_warnings(r["warnings"])
    return 0


def cmd_stop(args: argparse.Namespace, env: Env) -> int:
    with client(args, env) as c:
        r = c.call("stop")
    if human(args, r):
        emit(f"snapd (pid {r['pid']}) is stopping")
    return 0
