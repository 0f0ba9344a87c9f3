"""What this store has pushed to remote repositories, and the store's own id (format 9 on).

A remote repository (:mod:`snapd.remote`) names each mark record after the store that wrote
it and the mark's id, so the store needs an id that no other store shares: ``meta.store_id``,
32 random hex digits made the first time anything asks (an upgraded store has none until
then), and kept for the store's life.

``pushed`` holds one row per (repository id, mark id) whose record has landed in that
repository. A push records its marks only once their records are written, so what is not in
the table is what remains to push: the on-mark pusher's queue is a query, not a list of its
own, and it survives a restart (or a crash between the upload and the row: the next push finds
the record already listed and only records the row).
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Iterable, Sequence

from snapd.store.catalog import Catalog
from snapd.store.records import MARK_COLUMNS, Mark, mark_from_row


def store_id(catalog: Catalog) -> str:
    """This store's id, made (and committed) at the first call."""
    row = catalog.read().execute("SELECT value FROM meta WHERE key='store_id'").fetchone()
    if row is not None:
        return str(row[0])
    with catalog.write() as c:  # two first callers at once: the second keeps the first's id
        c.execute("INSERT OR IGNORE INTO meta (key, value) VALUES ('store_id', ?)", (secrets.token_hex(16),))
        made = c.execute("SELECT value FROM meta WHERE key='store_id'").fetchone()
    return str(made[0])


def pushed(catalog: Catalog, repo: str) -> set[str]:
    """The ids of the marks recorded as landed in repository ``repo``."""
    rows = catalog.read().execute("SELECT mark FROM pushed WHERE repo=?", (repo,))
    return {str(r[0]) for r in rows}


def record_pushed(catalog: Catalog, repo: str, marks: Iterable[str], at: int | None = None) -> None:
    """Record ``marks`` as landed in ``repo`` (at ``at`` ns, default now); again is harmless.
    The rows of marks the store no longer holds (retention evicted them, a workspace was
    forgotten) go at the same time, so the table stays the size of the history."""
    when = time.time_ns() if at is None else at
    with catalog.write() as c:
        c.executemany(
            "INSERT OR IGNORE INTO pushed (repo, mark, at) VALUES (?, ?, ?)",
            [(repo, m, when) for m in marks],
        )
        c.execute("DELETE FROM pushed WHERE repo=? AND mark NOT IN (SELECT id FROM marks)", (repo,))


def unpushed(catalog: Catalog, repo: str, workspaces: Sequence[int]) -> list[Mark]:
    """The marks of ``workspaces`` not recorded in ``repo``, oldest first per workspace (the
    order they are pushed in: a mark's parent lands before it)."""
    if not workspaces:
        return []
    slots = ",".join("?" * len(workspaces))
    sql = (
        f"SELECT {MARK_COLUMNS} FROM marks WHERE workspace IN ({slots})"
        " AND id NOT IN (SELECT mark FROM pushed WHERE repo=?) ORDER BY workspace, seq"
    )
    return [mark_from_row(r) for r in catalog.read().execute(sql, (*workspaces, repo))]
