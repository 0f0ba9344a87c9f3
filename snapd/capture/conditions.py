"""What is wrong with one workspace now, for ``status`` and every mark.

Three kinds: lasting conditions (a file system without events, a watch shortfall: said once
as a ``warning`` event, then in status and every mark), a rollback that stopped part-way (until
it is finished), and directories the watcher may not watch (``Permission denied: PATH``, the
real cause, never the watch limit): each such directory is told in the first mark that finds
it so, not again while nothing about it changes.
"""

from __future__ import annotations

import os
from pathlib import Path

import structlog

from snapd.capture.events import Notify
from snapd.capture.watcher import Watcher
from snapd.display import count, shown
from snapd.errors import SnapdError
from snapd.store import safeio

log = structlog.get_logger(__name__)



class Conditions:
    """``warnings``: the lasting conditions; ``unfinished``: why a rollback is not finished."""

    def __init__(self, root: Path, announce: Notify) -> None:
        self.root = root
        self._announce = announce
        self.warnings: list[str] = []
        self.unfinished: str | None = None
        self.told: dict[bytes, int] = {}  # refused directories some mark's summary reported

    def warn(self, message: str) -> None:
        """A lasting condition: in status and every mark from now on, and announced once."""
        self.warnings.append(message)
        self._announce("warning", {"message": message})

    def watch_shortfall(self, watcher: Watcher, limit: int | None) -> None:
        """Directories went unwatched for lack of watches, or are mounted at two paths (every
        mark scans from now on)."""
        for rel, other in sorted(watcher.aliased.items())[:1]:
            self.warn(
                f"{os.fsdecode(rel) or '.'} is also mounted at {os.fsdecode(other) or '.'} in {self.root}: "
                "inotify reports its changes under one of the two names only, "
                "so every mark scans the workspace"
            )
        if not watcher.limit_failures:
            return
        dirs = count(watcher.limit_failures, "directory", "directories")
        if limit is not None and watcher.watch_count >= limit:  # our own setting, not the kernel's
            self.warn(
                f"{dirs} could not be watched: snapd's watch_limit setting ({limit} per workspace) "
                "was reached; every mark scans the workspace. Raise watch_limit in config.toml "
                "(or SNAPD_WATCH_LIMIT), then restart snapd"
            )
            return
        self.warn(
            f"{dirs} could not be watched (inotify watch limit): "
            "every mark scans the workspace; raise the limit with "
            "`sudo sysctl fs.inotify.max_user_watches=524288` (and in /etc/sysctl.d/; in a container, its "
            "user namespace's /proc/sys/user/max_inotify_watches), then restart snapd"
        )

    def rollback_stopped(self, exc: SnapdError, why: str, journal: Path) -> None:
        """A rollback (or the finishing of one) failed with its ``journal`` still there: say so
        until it is finished."""
        try:
            left = safeio.exists(journal)
        except SnapdError:
            left = True  # the disk cannot tell: assume the worst, and say so
        if left:
            self.unfinished = f"a rollback {why} is not finished yet: {exc.message}"
            log.error("rollback.unfinished", workspace=str(self.root), error=exc.message)

    def now(self, watcher: Watcher | None) -> list[str]:
        """Everything wrong now, for ``status``: lasting conditions and refused directories."""
        return [*self.warnings, *self._pending(), *_refusals(watcher).values()]

    def for_mark(self, watcher: Watcher | None) -> tuple[list[str], dict[bytes, int]]:
        """A mark's warnings: the lasting conditions, and each refused directory once. Also
        what is told by then, for :attr:`told` once the mark is committed."""
        refused = watcher.refused_dirs() if watcher is not None else {}
        news = _refusals(watcher)
        fresh = [news[rel] for rel, err in refused.items() if self.told.get(rel) != err and rel in news]
        return [*self.warnings, *self._pending(), *fresh], refused

    def _pending(self) -> list[str]:
        return [self.unfinished] if self.unfinished else []


def _refusals(watcher: Watcher | None) -> dict[bytes, str]:
    """Directories that cannot be watched for a reason of their own, with what to tell the
    user: the real cause (``Permission denied: PATH``), never the watch limit."""
    refused = watcher.refused_dirs() if watcher is not None else {}
    return {
        rel: f"{os.strerror(err)}: {shown(rel)} (snapd cannot watch this "
        "directory; changes inside it are not captured while it stays so)"
        for rel, err in sorted(refused.items())
    }
