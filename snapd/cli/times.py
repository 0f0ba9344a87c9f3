"""Time references on the command line: turned into absolute UTC instants before sending, and
what a time target was built from, for people.

Every argument that takes a mark reference takes a time too (``--to``, ``FROM``/``TO``, ``cat``'s
``MARK``…). :func:`absolute_times` rewrites each one that starts with ``@`` into its wire form
(``@…Z``, :func:`snapd.timeref.wire`) with this process's clock and local zone (the C
library's, which honours ``TZ``), so the daemon never guesses a zone; a local time that a
clock change makes ambiguous or nonexistent is refused here, before any request.
"""

from __future__ import annotations

import argparse
import time
from typing import Any

from snapd import timeref
from snapd.cli.output import path_text, when

#: The arguments that hold a mark reference (and so may hold a time).
REF_ARGS = ("to", "mark", "from_mark", "to_mark", "before", "since")


def local_offset(t: int) -> int:
    """Seconds east of UTC of the local zone at instant ``t`` (s)."""
    return time.localtime(t).tm_gmtoff


def absolute_times(args: argparse.Namespace, now_ns: int, offset: timeref.Offset = local_offset) -> None:
    """Rewrite every time reference among ``args`` into its absolute wire form."""
    for name in REF_ARGS:
        value = getattr(args, name, None)
        if isinstance(value, str) and timeref.is_time(value):
            setattr(args, name, timeref.wire(timeref.resolve(value, now_ns, offset)))


def exact(ns: int) -> str:
    """A capture time for people: local, to the second (the ``ref`` field has it to the ns)."""
    return when(ns / 1e9)


def history_note(asked: str | None, t: dict[str, Any] | None) -> str | None:
    """What to say when ``asked`` (a time reference as sent) came before the workspace's
    history: the daemon then answers for its baseline, an instant later than the one sent
    (docs/rollback.md, "Time targets"). None: it answered for the instant asked."""
    if not asked or t is None or not timeref.is_time(asked) or t["instant_ns"] <= timeref.parse_wire(asked):
        return None
    return (
        f"the workspace's history starts at {exact(t['instant_ns'])}: using its baseline "
        f"({t['base']['id']}) for {asked}"
    )


def target_lines(r: dict[str, Any], asked: str | None = None) -> list[str]:
    """The first lines of a rollback plan to a time: the instant and what it was built from
    (``asked``: the time reference sent, for :func:`history_note`)."""
    t = r["time"]
    base = t["base"]
    built = (
        f"  built from mark {base['id']} {base['label']} ({when(base['created'])})"
        f" and the {t['replayed']} version(s) captured after it up to that instant"
    )
    note = history_note(asked, t)
    partial = (
        ["  (events could not be trusted then, so the whole tree was captured only at marks:"
         " this is the workspace as at that mark; docs/rollback.md)"]
        if t.get("partial")
        else []
    )
    return [
        f"rollback of {r['workspace']} to the workspace as captured at {exact(t['instant_ns'])} ({t['ref']})",
        *([f"  note: {note}"] if note else []),
        built,
        *partial,
        "  (capture times: a change made while snapd was not running carries the time of the "
        "restart that found it; docs/rollback.md)",
    ]


def versions_used(r: dict[str, Any]) -> dict[str, str]:
    """For a plan to a time: each planned path's version, as shown after its line."""
    out = {}
    for v in r["time"]["versions"]:
        ns = v["captured_ns"]
        out[path_text(v["path"])] = f"version captured {exact(ns)}" if ns is not None else "as at the mark"
    return out
