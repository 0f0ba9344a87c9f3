"""WAL checkpoints on a thread of their own, not inside the commit of a mark.

SQLite checkpoints a WAL database automatically in the ``COMMIT`` that takes the log past its
threshold: that commit — often a mark the user's agent is waiting for — then also copies every
page of the log into the database file and fsyncs it. At 100k files a mark adds ~100 pages
(new tree nodes and contents land on random pages of the ``objects`` index), so every tenth
mark or so paid a checkpoint of ~1,000 scattered pages: the slow tail of the mark's time.

Here the writer's automatic checkpoint is raised to a backstop (:data:`BACKSTOP_PAGES`, which
still bounds the log if this thread falls behind or fails), and the :class:`Checkpointer`,
poked after every commit, runs a ``PASSIVE`` checkpoint on its own connection once the log
holds :data:`WAL_PAGES` pages. ``PASSIVE`` waits for no reader or writer: commits go on while
it copies.

The log's file keeps :data:`WAL_PAGES` pages' worth of length between checkpoints
(``journal_size_limit``, set by the catalog to :func:`log_limit`): when SQLite starts the log
over, its commits overwrite blocks the file already has, and a commit's ``fdatasync`` flushes
only data. Truncating the log at every restart (``journal_size_limit=0``) made every commit
*extend* the file, so its flush also committed the file system's journal (the new length and
blocks): about twice the commit's time at the median, measured in a loop of 60-row commits.

Durability is unchanged. A transaction is durable when its ``COMMIT`` returns: in WAL mode
with ``synchronous=FULL`` its frames are fsynced to the log first. A checkpoint only copies
committed frames into the database file and fsyncs that file before SQLite reuses the log, so
when a checkpoint runs, or whether it ran at all before a crash, changes nothing that survives
it: opening the database replays the log.
"""

from __future__ import annotations

import os
import sqlite3
import threading
from collections.abc import Callable
from pathlib import Path

from snapd.errors import StoreError

WAL_PAGES = 1000  # SQLite's own default threshold, now reached off the committing thread
BACKSTOP_PAGES = 8000  # the writer checkpoints itself past this (the thread is behind or failing)


def log_limit(page_size: int) -> int:
    """The length, in bytes, the log's file keeps when SQLite starts it over (its
    ``journal_size_limit``)."""
    return WAL_PAGES * page_size


def log_is_long(size: int, page_size: int) -> bool:
    """Whether a log file of ``size`` bytes is due for a checkpoint: longer than
    :func:`log_limit`. A file SQLite cut back to that length is not (or every commit after it
    would checkpoint)."""
    return size > log_limit(page_size)


class Checkpointer:
    """Checkpoints the database at ``path`` when its log is long, on a daemon thread.

    ``connect`` opens a connection to the database (the catalog's own settings)."""

    def __init__(self, path: Path, connect: Callable[[Path], sqlite3.Connection], page_size: int) -> None:
        self._wal = Path(f"{path}-wal")
        self._connect, self._path = connect, path
        self._page_size = page_size
        self._wake = threading.Event()
        self._stop = False
        self._thread = threading.Thread(target=self._run, name="snapd-checkpoint", daemon=True)
        self._thread.start()

    def poke(self) -> None:
        """A commit happened: check the log's length soon."""
        self._wake.set()

    def close(self) -> None:
        """Stop the thread (a checkpoint under way finishes first)."""
        self._stop = True
        self._wake.set()
        self._thread.join()

    def _long(self) -> bool:
        """Whether the log holds more than WAL_PAGES pages. Its file's length says so because
        the writer's ``journal_size_limit`` is :func:`log_limit`: when SQLite starts the log
        over after a checkpoint, it cuts a longer file back to that length, and the file grows
        past it only once the frames written since fill it. (The log's own files are only
        ``stat``ed here, never opened: closing a descriptor of a file SQLite locks would drop
        this process's POSIX locks on it.)"""
        try:
            return log_is_long(os.stat(self._wal).st_size, self._page_size)
        except OSError:
            return False  # no log (yet, or any more)

    def _run(self) -> None:
        conn: sqlite3.Connection | None = None
        try:
            while True:
                self._wake.wait()
                self._wake.clear()
                if self._stop:
                    return
                if not self._long():
                    continue
                try:
                    if conn is None:
                        conn = self._connect(self._path)
                    conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
                except (sqlite3.Error, StoreError):
                    # A failing disk: the commits report it to their callers; the writer's
                    # backstop still bounds the log. Try again at the next commit.
                    pass
        finally:
            if conn is not None:
                conn.close()
