"""Work counters of one workspace: how much of the disk its captures touched.

A mark promises O(changes since the last mark), never O(workspace). Timing cannot prove that
on a loaded machine; counting can. The counts are taken where the work happens — the scanner
counts its full scans and ``lstat`` calls, the reader its ``lstat`` calls and file reads, the
walks, scans and the watcher each directory they list — and ``status`` shows them, so a test
(or a person) can check that a mark of one changed file did no full scan and read one file, or
that a baseline listed each directory once.

Counts only grow, from the daemon's start; readers may run in a thread pool, hence the lock
(reader processes count on their side, and the daemon adds their counts).
"""

from __future__ import annotations

import threading


class Counters:
    """Full scans, re-checks of every file, directories listed, paths ``lstat``ed and files
    read, since the workspace started."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.full_scans = 0  # stat walks (or the baseline walk) of the whole workspace
        self.lstats = 0  # lstat calls on workspace paths, by scans and reads
        self.files_read = 0  # regular files whose bytes were read (a re-read counts again)
        self.listings = 0  # directories listed, by walks, scans and the watcher placing watches
        self.rechecks = 0  # re-checks of every captured file (a rollback; a new name gone unseen)
        self.ignored_names = 0  # ignored-name sets encoded (a commit whose set had changed)

    def scanned_all(self) -> None:
        with self._lock:
            self.full_scans += 1

    def rechecked(self) -> None:
        with self._lock:
            self.rechecks += 1

    def stat(self, n: int = 1) -> None:
        with self._lock:
            self.lstats += n

    def read(self, n: int = 1) -> None:
        with self._lock:
            self.files_read += n

    def listed(self, n: int = 1) -> None:
        with self._lock:
            self.listings += n

    def encoded_ignored_names(self) -> None:
        with self._lock:
            self.ignored_names += 1

    def to_json(self) -> dict[str, int]:
        with self._lock:
            return {
                "full_scans": self.full_scans,
                "lstats": self.lstats,
                "files_read": self.files_read,
                "listings": self.listings,
                "rechecks": self.rechecks,
                "ignored_names": self.ignored_names,
            }
