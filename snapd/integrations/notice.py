"""The rollback notice: what an agent's model is told at the start of a turn.

Without it, a model whose edits were rolled back between two turns keeps believing its edits
are still there. The ``turn-start`` reply lists the rollbacks and undos applied in the
workspace since the session's previous mark (:mod:`snapd.daemon.turns`); this module turns
them into a few factual lines: which paths were restored, recreated and deleted, to which
mark. Names come from the workspace and may hold anything, so every one goes through
:func:`snapd.display.shown` (control bytes escaped), and the whole text is capped: a notice
must not flood the model's context.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from snapd.display import shown
from snapd.errors import BadRequest
from snapd.paths import decode_path

MAX_CHARS = 2000
PATHS_PER_KIND = 10


def _path(p: object) -> str:
    try:
        return shown(decode_path(p))
    except BadRequest:
        return "?"


def _list(obj: dict[str, Any], key: str) -> list[Any]:
    value = obj.get(key)
    return value if isinstance(value, list) else []


def _ago(created: object, now: float) -> str:
    if not isinstance(created, int | float):
        return ""
    minutes = int(max(0.0, now - created) // 60)
    if minutes < 1:
        return " (less than a minute ago)"
    if minutes >= 120:
        return f" ({minutes // 60} hours ago)"
    return f" ({minutes} minute{'s' if minutes != 1 else ''} ago)"


def _kind(verb: str, paths: Sequence[object], total: int) -> str:
    shown_paths = [_path(p) for p in paths[:PATHS_PER_KIND]]
    more = total - len(shown_paths)
    return f"{verb} {', '.join(shown_paths)}" + (f" and {more} more" if more > 0 else "")


def rollback_line(r: dict[str, Any], now: float) -> str:
    target = f"mark {shown(str(r.get('to', '?')))} ({shown(str(r.get('label', '?')))})"
    what = "undo: back to the state before an earlier rollback" if r.get("undo") else f"rollback to {target}"
    if isinstance(r.get("revert"), str):  # one span taken back, the work after it kept
        what = f"{shown(r['revert'])} (the changes after it were kept)"
    counts = r.get("counts")
    parts = []
    for key in ("restored", "recreated", "deleted"):
        paths = _list(r, key)
        total = counts.get(key) if isinstance(counts, dict) else None
        total = total if isinstance(total, int) else len(paths)
        if total:
            parts.append(_kind(key, paths, total))
    return f"- {what}{_ago(r.get('created'), now)}: " + ("; ".join(parts) or "no file changed")


def render(reply: dict[str, Any], now: float | None = None) -> str:
    """The notice for a ``turn-start`` reply, or "" when there is nothing to tell."""
    now = time.time() if now is None else now
    lines: list[str] = []
    rollbacks = _list(reply, "rollbacks")
    if rollbacks:
        lines.append(
            "snapd: the workspace was rolled back since your previous turn; files there are not "
            "as you left them:"
        )
        lines += [rollback_line(r, now) for r in rollbacks if isinstance(r, dict)]
        lines.append("Read a file again before relying on an earlier edit of it.")
    for m in _list(reply, "late_marks"):
        if isinstance(m, dict):
            lines.append(
                f"snapd: its {shown(str(m.get('label')))} mark {shown(str(m.get('id')))} was taken late, "
                "after the turn had begun: it may include that turn's first edits."
            )
    text = "\n".join(lines)
    if len(text) > MAX_CHARS:
        text = text[: MAX_CHARS - 40].rsplit("\n", 1)[0] + "\n(… more; `snapctl log` lists them)"
    return text
