"""Unified diffs of file versions, for ``snapctl diff`` (pure: bytes in, records out).

Text is what a revert merges (:func:`snapd.rollback.merge.text_lines`: UTF-8, no NUL byte, at
most 1 MiB); anything else is summarised by size and never dumped.
"""

from __future__ import annotations

import difflib
from typing import Any

from snapd.display import shown
from snapd.rollback.merge import text_lines


def _text(data: bytes | None) -> list[str] | None:
    if data is None:
        return []
    lines = text_lines(data)
    return None if lines is None else [line.decode("utf-8") for line in lines]


def file_diff(path: bytes, status: str, old: bytes | None, new: bytes | None) -> dict[str, Any]:
    """One file's change: a unified diff for text, a size summary for binary content."""
    name = shown(path)
    a, b = _text(old), _text(new)
    if a is None or b is None:
        return {
            "binary": True,
            "old_size": None if old is None else len(old),
            "new_size": None if new is None else len(new),
        }
    lines = list(
        difflib.unified_diff(
            a,
            b,
            fromfile="/dev/null" if old is None else f"a/{name}",
            tofile="/dev/null" if new is None else f"b/{name}",
        )
    )
    added = sum(1 for x in lines if x.startswith("+") and not x.startswith("+++"))
    removed = sum(1 for x in lines if x.startswith("-") and not x.startswith("---"))
    text = "".join(x if x.endswith("\n") else x + "\n\\ No newline at end of file\n" for x in lines)
    return {"binary": False, "diff": text, "added": added, "removed": removed}
