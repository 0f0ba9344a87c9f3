"""Recovery of a rollback: a workspace whose journal is still there is finished (rolled
forward, every path re-checked) before capture goes on, so the tree it captures is the one
the rollback meant. The journal survives a crash (finished at start-up, before the reconcile
scan) and a rollback stopped part-way by a full or failing disk (finished by the next request
for the workspace: a mark, a rollback, a diff).

The live workspace (capture layer) knows nothing of rollbacks: the daemon hands it
:func:`finish_interrupted`, which the workspace runs at start-up, watches in place, and before
a request whenever the journal is there. What it did is kept on the workspace (``recovered``,
``warnings``, ``unfinished`` while it cannot finish) for status and marks.
"""

from __future__ import annotations

import os

import structlog

from snapd.capture.workspace import Workspace
from snapd.display import count
from snapd.errors import SnapdError
from snapd.rollback.apply import recover

log = structlog.get_logger(__name__)


def finish_interrupted(ws: Workspace) -> None:
    """Finish the rollback whose journal is still there; say what happened, or why not."""
    why = "that stopped part-way" if ws.unfinished else "interrupted by a crash"
    try:
        result = recover(ws.root, ws.journal, ws.store.get, ws.store.hasher)
    except SnapdError as exc:
        ws.rollback_stopped(exc, why)
        return
    ws.unfinished = None
    if result is None:
        return
    note = (
        f"a rollback {why} was finished: {count(len(result.applied), 'path')} restored, "
        f"{count(len(result.conflicts), 'conflict')}, {count(result.temps_removed, 'temp file')} removed"
    )
    if result.damaged:
        shown = ", ".join(os.fsdecode(p) for p, _ in result.damaged[:5])
        note += f"; {count(len(result.damaged), 'path')} not restored (stored content damaged): {shown}"
    ws.warnings.append(note)
    ws.recovered = {
        "applied": len(result.applied),
        "conflicts": [[os.fsdecode(p), reason] for p, reason in result.conflicts],
        "damaged": [[os.fsdecode(p), u.reason] for p, u in result.damaged],
        "temps_removed": result.temps_removed,
    }
    log.warning(
        "rollback.recovered",
        workspace=str(ws.root),
        token=result.token,
        applied=len(result.applied),
        conflicts=[[os.fsdecode(p), reason] for p, reason in result.conflicts[:10]],
    )
