"""Test helpers over the capture layer: a whole tree or a few paths captured straight into a
store as one mark, without a daemon or a watcher (store, apply and crash tests; the bench)."""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from snapd.capture.ignore import VCS_NAMES
from snapd.capture.ingest import Report, capture, summarize
from snapd.capture.reader import Ignored, walk
from snapd.config import CaptureSettings
from snapd.store.records import Mark
from snapd.store.store import Store


def vcs_only(rel: bytes, is_dir: bool) -> bool:
    return rel.rsplit(b"/", 1)[-1] in VCS_NAMES


@dataclass(frozen=True)
class IngestResult:
    files: int
    bytes: int
    tree: str
    mark_id: str
    report: Report


def ingest_tree(
    store: Store,
    ws: int,
    root: Path | str | bytes,
    *,
    ignored: Ignored = vcs_only,
    size_cap: int = CaptureSettings().size_cap,
    label: str = "baseline",
    kind: str = "baseline",
) -> IngestResult:
    """Capture the whole workspace as a new mark (the baseline)."""
    rootb = os.fsencode(root)
    report = Report()
    with store.batch() as batch:
        rels = [rel for rel, _ in walk(rootb, ignored)]  # before the readers start: no GIL contention
        changes = capture(batch, rootb, rels, report, size_cap=size_cap, ws=ws, parallel=True, from_walk=True)
        tree = batch.apply(None, changes)
        prev = store.latest_mark(ws)
        old = prev.tree if prev else None
        new_paths = [p for p, c in changes.items() if c is not None] if old is None else None
        summary = summarize(batch, old, tree, report, new_paths)
        batch.add_mark(ws, label, tree, kind=kind, summary=summary)
        (mark,) = batch.commit()
    return IngestResult(report.files, report.size, tree, mark.id, report)


def capture_paths(
    store: Store,
    ws: int,
    root: Path | str | bytes,
    paths: Iterable[bytes],
    label: str,
    *,
    size_cap: int = CaptureSettings().size_cap,
    kind: str = "user",
    **meta: Any,
) -> Mark:
    """A new durable mark: the previous mark's tree plus the current state of ``paths``."""
    rootb = os.fsencode(root)
    report = Report()
    prev = store.latest_mark(ws)
    base = prev.tree if prev else None
    with store.batch() as batch:
        changes = capture(batch, rootb, paths, report, size_cap=size_cap, ws=ws)
        tree = batch.apply(base, changes)
        summary = summarize(batch, base, tree, report)
        batch.add_mark(ws, label, tree, kind=kind, summary=summary, **meta)
        (mark,) = batch.commit()
    return mark
