"""``revert``: take back the changes of a span (``A..B``), a turn (``--turn M``) or a session's
turns (``--session S``), keeping every change made since (docs/rollback.md, "Revert").

A revert is a rollback to a made-up target, so it goes through the rollback's flow
(:func:`snapd.cli.rollback.execute`): the plan shown is the plan applied (its token), asked
first unless ``--yes``, ``--dry-run`` and ``--plan-token`` as for a rollback, ``snapctl undo``
to return. What is its own: what is asked for, the plan's first lines (the spans), what it
merges, keeps and writes markers into, and a refusal: where a later change overlaps what it
takes back, nothing is written and each conflict is listed with its hunks (exit 13; with
``--json`` the error's ``details`` carry them).
"""

from __future__ import annotations

import argparse
import os
from typing import Any

from snapd.cli.output import emit, path_text, when
from snapd.cli.request import Env, where
from snapd.cli.rollback import Flow, execute, plan_body
from snapd.errors import RevertConflict, UsageError

HUNK_LINES = 400  # lines of conflict hunks shown (--json: all)


def cmd_revert(args: argparse.Namespace, env: Env) -> int:
    fields = _fields(args)

    def lines(r: dict[str, Any], seen: bool) -> list[str]:
        return plan_lines(r, kept=seen)

    flow = Flow(
        "revert_plan", "revert_apply", fields, lines, ("revert",), refusal="revert those changes",
        noun="revert", done="reverted", same="those changes are already taken back",
        target="the revert's result", tail=_tail,
    )
    try:
        return execute(args, env, flow)
    except RevertConflict as exc:
        if not args.json:  # with --json the error itself carries them (main prints it)
            for line in conflict_lines(exc.details.get("conflicts", [])):
                emit(line, tabs=True)
        raise


def _fields(args: argparse.Namespace) -> dict[str, Any]:
    """What to revert, as the ops take it (``--session`` here names the session whose turns
    are reverted, not the session a label is looked up in)."""
    if args.since is not None and args.session is None:
        raise UsageError("revert: --since goes with --session S (the session's turns started after it)")
    fields: dict[str, Any] = where(args)
    if args.turn is not None:
        fields["turn"] = args.turn
    elif args.session is not None:
        fields["session"] = args.session
        if args.since is not None:
            fields["since"] = args.since
    else:
        fields["from"] = args.from_mark
        if args.to_mark is not None:
            fields["to"] = args.to_mark
    if args.paths:
        fields["paths"] = [os.fsencode(p) for p in args.paths]
    fields["conflicts"] = args.conflicts
    return fields


def plan_lines(r: dict[str, Any], *, kept: bool) -> list[str]:
    """A revert's plan for people: what it takes back (each span), what each path becomes
    (merged or with markers: said after its line), the later work it keeps, the conflicts it
    leaves (markers mode)."""
    rv = r["revert"]
    spans = rv["spans"]
    head = [f"revert in {r['workspace']}: the changes of "
            + (_span(spans[0]) if len(spans) == 1 else f"{len(spans)} spans, newest first")]
    if len(spans) > 1:
        head += [f"  {_span(s)}" for s in spans]
    notes = {path_text(p): "merged with later edits" for p in rv["merged"]}
    notes.update({path_text(p): "conflict markers written" for p in rv["markers"]})
    paths = [path_text(op["path"]) for op in r["plan"]["ops"]]
    ops = [f"{line}  [{notes[p]}]" if p in notes else line for line, p in zip(r["lines"], paths, strict=True)]
    out = plan_body(r, head, ops, kept=kept, target="the revert's result")
    counts = out.pop()
    out += [f"  keeps: {path_text(k['path'])} ({k['reason']})" for k in rv["keeps"]]
    for s in rv.get("sessions_kept", []):
        agent = f" ({s['agent']})" if s.get("agent") else ""
        out.append(f"  keeps the later work of session {s['session']}{agent}")
    marked = {path_text(p) for p in rv["markers"]}
    out += [f"  conflict: {path_text(c['path'])}: {c['reason']} (left as it is)"
            for c in rv["conflicts"] if path_text(c["path"]) not in marked]
    out.append(counts)
    return out


def _span(s: dict[str, Any]) -> str:
    others = f" (other sessions' turns open: {', '.join(s['others'])})" if s.get("others") else ""
    return f"{_side(s['from'])} .. {_side(s['to'])}{others}"


def _side(m: dict[str, Any] | str | None) -> str:
    """One end of a span: a mark, a time (its instant as sent), or now."""
    if m is None:
        return "now"
    if isinstance(m, str):
        return m
    if "instant" in m:  # a time object (docs/protocol.md): the state captured then
        return f"the state at {when(m['instant'])}"
    return f"{m['id']} {m['label']} ({when(m['created'])})"


def _tail(res: dict[str, Any]) -> list[str]:
    """After the result's line: the files left with conflict markers to resolve."""
    marked = res.get("revert", {}).get("markers", [])
    return [f"  conflict markers in {path_text(p)}: resolve them (or `snapctl undo`)" for p in marked]


def conflict_lines(conflicts: list[dict[str, Any]], limit: int = HUNK_LINES) -> list[str]:
    """Each conflict and its hunks, diff3-style: the lines now, as the change left them (B),
    and as before it (A); ``line``: where the hunk starts in the file now."""
    out: list[str] = []
    for c in conflicts:
        out.append(f"conflict: {path_text(c['path'])}: {c['reason']}")
        for h in c.get("hunks", []):
            out.append(f"  at line {h['line']} of the file now:")
            out += _block("<<<<<<< now", h["ours"])
            out += _block("||||||| after the change (B)", h["base"])
            out += _block("=======", h["theirs"])
            out.append("  >>>>>>> before the change (A)")
    if len(out) > limit:
        out = [*out[:limit], f"… and {len(out) - limit} more lines (--json lists every conflict)"]
    return out


def _block(head: str, lines: list[str]) -> list[str]:
    return [f"  {head}", *(f"  {line.removesuffix(chr(10)).removesuffix(chr(13))}" for line in lines)]
