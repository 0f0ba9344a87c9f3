"""Rendering replies for people: every line goes through :func:`snapd.display.shown`.

``emit`` is the only way the CLI prints text for a person, so no label, message, agent name or
path from a reply (or an error message quoting one) reaches the terminal with its control
bytes; undecodable bytes show as ``\\xNN``. ``print_json`` is for scripts: JSON escapes
control characters itself.
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any

from snapd.display import count, shown


def print_json(obj: Any) -> None:
    json.dump(obj, sys.stdout, indent=2, sort_keys=True)
    sys.stdout.write("\n")


def emit(line: str = "", *, err: bool = False, tabs: bool = False, color: tuple[str, str] = ("", "")) -> None:
    """Print one line for a person (stderr with ``err``): escaped, then coloured."""
    print(f"{color[0]}{shown(line, tabs=tabs)}{color[1]}", file=sys.stderr if err else sys.stdout)


def wire_bytes(p: str | dict[str, str]) -> bytes:
    """A path from a reply: a string, or ``{"b64": ...}`` when its bytes are not UTF-8."""
    if isinstance(p, dict):
        import base64  # deferred: few names need it, and every command loads this module

        return base64.b64decode(p["b64"])
    return p.encode("utf-8", "surrogateescape")


def path_text(p: str | dict[str, str]) -> str:
    """A path from a reply, ready to be shown."""
    return shown(wire_bytes(p))


def when(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(seconds))


def duration(seconds: float) -> str:
    """A length of time for people: ``90 s``, ``15 min``, ``1 h``, ``14 d``."""
    for unit, length in (("d", 86_400), ("h", 3600), ("min", 60)):
        if seconds >= 2 * length or (seconds >= length and seconds % length == 0):
            return f"{round(seconds / length, 1):g} {unit}"
    return f"{round(seconds, 1):g} s"


def size(n: int) -> str:
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{n} B"


def summary_line(summary: dict[str, Any]) -> str:
    counts = summary.get("counts") or {}
    parts = [f"{n} {k}" for k, n in sorted(counts.items())] or ["no changes"]
    if summary.get("skipped_count"):
        parts.append(f"{summary['skipped_count']} skipped")
    if summary.get("unstable"):
        parts.append(f"{len(summary['unstable'])} unstable")
    return ", ".join(parts)


def progress_bar(done: int, total: int, unit: str = "file", width: int = 30) -> str:
    """``[####......] 120/400 files``: ``unit`` names what is counted (and only that)."""
    frac = done / total if total else 0.0
    fill = int(frac * width)
    return f"[{'#' * fill}{'.' * (width - fill)}] {done}/{count(total, unit)}"
