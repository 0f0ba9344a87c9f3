"""The wire form of what the ops reply and announce: marks as mark objects, paths as
protocol paths (docs/protocol.md, "Paths" and "mark object").

Invariant: everything a reply or an event carries is JSON text. Summaries and status hold
paths as ``os.fsdecode`` strings; one with an undecodable byte (a lone surrogate) cannot be
sent as JSON text, so it travels as ``{"b64": ...}``, as every path in the protocol does.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from snapd.paths import encode_path
from snapd.store.records import Mark


def wire_paths(obj: Any) -> Any:
    """``obj`` with every string that is not UTF-8 text turned into a protocol path."""
    if isinstance(obj, str):
        try:
            obj.encode("utf-8")
        except UnicodeEncodeError:
            return encode_path(os.fsencode(obj))
        return obj
    if isinstance(obj, list):
        return [wire_paths(v) for v in obj]
    if isinstance(obj, dict):
        return {k: wire_paths(v) for k, v in obj.items()}
    return obj


def mark_json(m: Mark, root: Path | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {
        "id": m.id,
        "label": m.label,
        "kind": m.kind,
        "created": m.created / 1e9,
        "created_ns": m.created,
        "message": m.message,
        "agent": m.agent,
        "session": m.session,
        "git_head": m.git_head,
        "pinned": m.pinned,
        "seq": m.seq,
        "summary": wire_paths(m.summary),
    }
    if root is not None:
        out["workspace"] = str(root)
    return out


def event_fields(fields: dict[str, Any]) -> dict[str, Any]:
    """A workspace's event fields on the wire: marks as mark objects, paths as protocol paths."""
    return {
        k: mark_json(v) if isinstance(v, Mark) else encode_path(v) if isinstance(v, bytes) else wire_paths(v)
        for k, v in fields.items()
    }
