"""Crash recovery of a rollback: a workspace whose journal survived a crash is finished at
start-up, before capture resumes, so the tree it captures is the one the rollback meant.

The live workspace (capture layer) knows nothing of rollbacks: the daemon hands it
:func:`finish_interrupted` to run once its watches are in place and before its reconcile scan.
What recovery did is kept on the workspace (``recovered``, ``warnings``) for status and marks.
"""

from __future__ import annotations

import os

import structlog

from snapd.capture.workspace import Workspace
from snapd.errors import SnapdError
from snapd.rollback.apply import recover

log = structlog.get_logger(__name__)


def finish_interrupted(ws: Workspace) -> None:
    """Finish a rollback that a crash interrupted (its journal is still there)."""
    try:
        result = recover(ws.root, ws.journal, ws.store.get, ws.store.hasher)
    except SnapdError as exc:
        ws.warnings.append(f"an interrupted rollback could not be finished: {exc.message}")
        log.error("rollback.recovery_failed", workspace=str(ws.root), error=exc.message)
        return
    if result is None:
        return
    note = (
        f"a rollback interrupted by a crash was finished at start-up: {len(result.applied)} paths "
        f"restored, {len(result.conflicts)} conflicts, {result.temps_removed} temp files removed"
    )
    ws.warnings.append(note)
    ws.recovered = {
        "applied": len(result.applied),
        "conflicts": [[os.fsdecode(p), why] for p, why in result.conflicts],
        "temps_removed": result.temps_removed,
    }
    log.warning("rollback.recovered", workspace=str(ws.root), applied=len(result.applied))
