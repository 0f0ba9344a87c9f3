"""``snapctl history PATH``: every captured version of a file, newest first.

Each line starts with the version's capture time in local time, rounded *up* to the
millisecond: typed back as a time reference (``snapctl cat @'2026-11-30 14:05:01.343' PATH``)
it names that very version, since the next one is captured at least a debounce later. Scripts
and editors use ``--json``, whose ``ref`` field is the exact instant.
"""

from __future__ import annotations

import argparse
import os
import time
from typing import Any

from snapd.cli import request
from snapd.cli.output import emit, path_text, print_json, size, when
from snapd.display import count

MS = 1_000_000


def version_time(ns: int) -> str:
    """Local time to the millisecond, rounded up (see the module docstring)."""
    ms = -(-ns // MS)
    secs, frac = divmod(ms, 1000)
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(secs)) + f".{frac:03d}"


def _where_it_stands(v: dict[str, Any]) -> str:
    m = v["mark"]
    if m is None:
        return "since the last mark"
    return f"{'in' if v['in_mark'] else 'before'} mark {m['id']} {m['label']}"


def _line(v: dict[str, Any]) -> str:
    status = v["status"]
    extra = []
    if v["kind"] is not None:
        if v["size"] is not None:
            extra.append(size(v["size"]))
        extra.append(f"{v['mode']:04o}" + ("" if v["kind"] == "file" else f" {v['kind']}"))
    if v["renamed_from"] is not None:
        extra.append(f"renamed from {path_text(v['renamed_from'])}")
    if v["renamed_to"] is not None:
        extra.append(f"renamed to {path_text(v['renamed_to'])}")
    if v["via"] is not None:
        extra.append(f"with its directory {path_text(v['via'])}")
    extra.append(_where_it_stands(v))
    who = ", ".join(" ".join(x for x in (s["agent"], s["session"]) if x) for s in v["sessions"])
    if who:
        extra.append(f"turn of {who}")
    status = "oldest kept" if status == "oldest_kept" else status  # retention pruned what was before
    return f"{version_time(v['time_ns'])}  {status:<9}  " + "  ".join(extra)


def cmd_history(args: argparse.Namespace, env: dict[str, str]) -> int:
    r = request.call(args, env, "history", path=os.fsencode(args.file))
    if args.json:
        print_json(r)
        return 0
    emit(f"history of {path_text(r['path'])} in {r['workspace']}, newest first:")
    for v in r["versions"]:
        emit(f"  {_line(v)}")
    if not r["versions"]:
        emit("  (no captured version)")
    if r["pruned_before"] is not None:
        emit(
            f"  (versions captured before {when(r['pruned_before'])} were pruned by retention, "
            f"which keeps {count(float(r['retention_days']), 'day')}"
            + (f"; {count(r['marks_pruned'], 'mark')} pruned too)" if r["marks_pruned"] else ")")
        )
    elif r["marks_pruned"]:
        emit(f"  ({count(r['marks_pruned'], 'older mark')} pruned by retention; every version is kept)")
    return 0
