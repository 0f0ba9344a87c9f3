"""Rendering replies for people: times, sizes, paths with undecodable bytes as ``\\xNN``."""

from __future__ import annotations

import json
import sys
import time
from typing import Any


def print_json(obj: Any) -> None:
    json.dump(obj, sys.stdout, indent=2, sort_keys=True)
    sys.stdout.write("\n")


def when(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(seconds))


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


def progress_bar(done: int, total: int, width: int = 30) -> str:
    frac = done / total if total else 0.0
    fill = int(frac * width)
    return f"[{'#' * fill}{'.' * (width - fill)}] {done}/{total} files"
