"""The write-ahead journal of a rollback's apply: what it holds, how it is written and read.

One JSON document (``FORMAT``): the workspace root, the plan's token, ``force``, the ops each
with the temp name its write uses, the plan's kept and left paths, and the phase reached.
It is published with :func:`safeio.write_atomic` before the workspace is touched and at every
phase boundary, and deleted at the end, durably (:func:`remove`). Reading it back refuses
anything that is not exactly what was written: an unknown format, a bad op, a temp name that
is not one of snapd's, a journal of another root; the journal then stays where it is.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from snapd.errors import StoreError
from snapd.paths import decode_path, encode_path, is_snapd_name
from snapd.rollback.ops import Op, Plan, show
from snapd.store import safeio

FORMAT = "snapd-apply-1"


@dataclass(frozen=True)
class Journal:
    """A journal as read back: what recovery needs to finish the apply."""

    ops: list[Op]
    temps: list[str | None]
    kept: list[tuple[bytes, str]]
    left: list[tuple[bytes, str]]
    force: bool
    token: str


class Writer:
    """Publishes the journal of one apply; ``record(phase)`` after each phase."""

    def __init__(self, path: Path, root: Path, plan: Plan, temps: Sequence[str | None], force: bool) -> None:
        self.path = path
        self.doc: dict[str, Any] = {
            "format": FORMAT,
            "root": encode_path(os.fsencode(root)),
            "token": plan.token,
            "force": force,
            "ops": [dict(op.to_json(), temp=temp) for op, temp in zip(plan.ops, temps, strict=True)],
            "kept": [{"path": encode_path(p), "reason": r} for p, r in plan.kept],
            "left": [{"path": encode_path(p), "reason": r} for p, r in plan.left],
        }

    def record(self, phase: int) -> None:
        text = json.dumps(dict(self.doc, phase=phase), separators=(",", ":"))
        safeio.write_atomic(self.path, text.encode())


def remove(journal: Path) -> None:
    """Delete the journal of a finished apply, durably: a deletion still in the file system's
    memory is undone by a power cut, and the journal it brings back would have start-up
    finish that rollback again, long after, over the work done since."""
    safeio.remove_durably(journal)


def needs(journal: Path) -> set[str]:
    """The objects the journal at ``journal`` reads (none when there is none): what its writes
    write, and what its checks compare by content (a symlink's text, a file whose key is a
    collision variant: :class:`snapd.rollback.checks.Contents`). GC keeps them: a rollback
    stopped part-way (a full disk) waits in its journal, maybe past its target mark's and its
    pre-rollback mark's eviction. A journal that cannot be parsed needs nothing: :func:`read`
    refuses it."""
    try:
        raw = journal.read_bytes()
    except FileNotFoundError:
        return set()
    except OSError as exc:
        raise safeio.os_error(exc, "read the rollback journal", journal) from exc
    try:
        ops = [Op.from_json(o) for o in json.loads(raw)["ops"]]
    except (ValueError, KeyError, TypeError):
        return set()
    written = {op.entry.key for op in ops if op.kind in ("write", "symlink") and op.entry is not None}
    compared = {
        e.key
        for op in ops
        for e in (op.entry, op.expect)
        if e is not None and (e.kind == "symlink" or (e.kind == "file" and "." in e.key))
    }
    return written | compared


def read(journal: Path, root: Path) -> Journal | None:
    """The journal of ``root`` at ``journal`` (None when there is none); StoreError when it
    cannot be read, is not a journal snapd wrote, or belongs to another root."""
    try:
        raw = journal.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise safeio.os_error(exc, "read the rollback journal", journal) from exc
    try:
        doc = json.loads(raw)
        if doc.get("format") != FORMAT:
            raise ValueError(f"unknown format {doc.get('format')!r}")
        ops = [Op.from_json(o) for o in doc["ops"]]
        temps = [o.get("temp") for o in doc["ops"]]
        if any(t is not None and not (is_snapd_name(t) and "/" not in t) for t in temps):
            raise ValueError("a temp file name is not one of snapd's")
        kept = [(decode_path(k["path"]), str(k["reason"])) for k in doc["kept"]]
        left = [(decode_path(k["path"]), str(k["reason"])) for k in doc.get("left", [])]
        journal_root = decode_path(doc["root"])
    except (ValueError, KeyError, TypeError) as exc:
        raise StoreError(f"rollback journal {journal} is unreadable ({exc}); it was left in place") from exc
    if journal_root != os.fsencode(root):
        raise StoreError(f"rollback journal {journal} belongs to {show(journal_root)}, not {root}")
    return Journal(ops, temps, kept, left, bool(doc.get("force")), str(doc.get("token", "")))
