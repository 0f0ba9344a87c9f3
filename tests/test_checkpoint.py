"""The catalog's write-ahead log between checkpoints (snapd.store.checkpoint), on a real catalog.

What a mark's commit costs depends on it: a commit that overwrites blocks the log's file
already has flushes data only; one that extends the file also commits the file system's
journal. And the checkpoint thread must neither fall silent (the log would grow to the
writer's backstop) nor checkpoint after every commit.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from e2e_helpers import wait_for

from snapd.store.catalog import Catalog
from snapd.store.checkpoint import WAL_PAGES, log_is_long, log_limit

pytestmark = pytest.mark.timeout(60)

PAGE = 4096


def commit_rows(cat: Catalog, n: int, size: int) -> None:
    """One transaction of ``n`` rows of ``size`` random bytes each."""
    with cat.write() as c:
        c.executemany(
            "INSERT INTO meta (key, value) VALUES (?, ?)",
            [(os.urandom(16).hex(), os.urandom(size).hex()) for _ in range(n)],
        )


def test_commits_after_a_checkpoint_overwrite_the_log_instead_of_extending_it(tmp_path: Path) -> None:
    cat = Catalog(tmp_path / "catalog.sqlite")
    try:
        assert int(cat.read().execute("PRAGMA page_size").fetchone()[0]) == PAGE
        wal = Path(f"{cat.path}-wal")
        limit = log_limit(PAGE)
        # Past the limit: the checkpoint thread checkpoints, and SQLite starts the log over at
        # a later commit, cutting the file back to the limit (not to nothing).
        while wal.stat().st_size <= limit:
            commit_rows(cat, 50, 1000)

        def started_over() -> bool:
            commit_rows(cat, 1, 100)
            return wal.stat().st_size == limit

        wait_for(started_over, what="the log started over at its kept length")
        for _ in range(20):  # small commits fill the file from its start: its length stays
            commit_rows(cat, 2, 100)
            assert wal.stat().st_size == limit
    finally:
        cat.close()


def test_a_log_cut_back_to_its_kept_length_is_not_due_for_a_checkpoint() -> None:
    limit = log_limit(PAGE)
    assert limit == WAL_PAGES * PAGE
    assert not log_is_long(limit, PAGE)  # else every commit after a restart would checkpoint
    assert log_is_long(limit + 1, PAGE)
    assert not log_is_long(0, PAGE)
