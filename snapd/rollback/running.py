"""The long operations in flight — restores, rollbacks, undos and reverts, and a remote's pushes,
verifies and prunes — and how far each has come, for ``status``: a terminal's progress bar
polls it (as ``watch``'s polls a workspace's baseline ``progress``). One table, one wire form,
one bar in the CLI, whatever the operation.

An entry is ``{"op", "workspace", "target", "phase", "done", "total"}``: ``phase`` says what
is being done before anything can be counted (``total`` None), then ``done`` of ``total``
counts what the bar names — a restore's files and symlinks written, a rollback's changes
(one a line of its plan) applied, a push's objects sent. For a remote's op, ``target`` is the
remote's name and ``workspace`` its URL (docs/protocol.md, "status").
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Literal

Progress = Callable[[int, int], None]  # (done, how many in all)
Op = Literal["restore", "rollback", "undo", "revert", "push", "verify", "prune"]


#: The phase an entry shows while its work is counted, by op (default: "writing").
COUNTING = {"push": "sending", "verify": "checking", "prune": "pruning"}


class Tracker:
    """One entry of :class:`Running`: called as ``tracker(done, total)``, or told its phase."""

    def __init__(self, lock: threading.Lock, entry: dict[str, object]) -> None:
        self._lock, self._entry = lock, entry
        self._counting = COUNTING.get(str(entry["op"]), "writing")

    def __call__(self, done: int, total: int) -> None:
        with self._lock:
            self._entry.update(done=done, total=total, phase=self._counting)

    def phase(self, what: str) -> None:
        """What is being done now, before its work can be counted (the bar shows the words)."""
        with self._lock:
            self._entry.update(phase=what, done=0, total=None)


class Running:
    """The table ``status`` shows as ``running``."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._now: dict[int, dict[str, object]] = {}
        self._n = 0

    @contextmanager
    def one(self, op: Op, workspace: Path | str, target: Path | str) -> Iterator[Tracker]:
        """Record ``op`` for as long as it runs; the tracker it yields tells its progress."""
        entry: dict[str, object] = {
            "op": op, "workspace": str(workspace), "target": str(target), "phase": "starting",
            "done": 0, "total": None,
        }
        with self._lock:
            self._n += 1
            n = self._n
            self._now[n] = entry
        try:
            yield Tracker(self._lock, entry)
        finally:
            with self._lock:
                del self._now[n]

    def now(self) -> list[dict[str, object]]:
        with self._lock:
            return [dict(v) for v in self._now.values()]
