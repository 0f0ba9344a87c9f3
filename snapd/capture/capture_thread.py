"""The capture thread of one workspace (``snapd-capture:ROOT``): history between marks.

It wakes when paths are dirty (or the root itself had an event), waits :data:`DEBOUNCE_S` so
a burst (a save, a checkout) settles into one capture, asks whether the root is still the
directory it captures (``lost``: if not, the thread ends), then captures under the workspace
lock. A full or failing disk
leaves the paths dirty, says so once per failure (a ``warning`` event), and is tried again a
second later; the thread never dies of a failed capture.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path

import structlog

from snapd.capture.dirty import DirtySet
from snapd.capture.events import Notify
from snapd.errors import SnapdError

log = structlog.get_logger(__name__)

DEBOUNCE_S = 0.05



class CaptureThread:
    """``capture`` is called under ``lock`` whenever ``dirty`` has something, until it stops."""

    def __init__(
        self,
        root: Path,
        dirty: DirtySet,
        lock: threading.RLock,
        capture: Callable[[], None],
        announce: Notify,
        lost: Callable[[], bool],
    ) -> None:
        self._root, self._dirty, self._lock = root, dirty, lock
        self._capture, self._announce, self._lost = capture, announce, lost
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name=f"snapd-capture:{self._root}", daemon=True)
        self._thread.start()

    def join(self) -> None:
        """Wait for the thread to end (after the dirty set was stopped); not from itself."""
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=10)

    def _run(self) -> None:
        while self._dirty.wait():
            time.sleep(DEBOUNCE_S)  # let a burst (a save, a checkout) settle into one capture
            if self._lost():
                return
            try:
                with self._lock:
                    self._capture()
            except SnapdError as exc:  # a full or failing disk: kept dirty, tried again
                log.warning("workspace.capture_failed", workspace=str(self._root), error=exc.message)
                self._announce("warning", {"message": f"capture failed (kept dirty, retried): {exc.message}"})
                time.sleep(1.0)
            except Exception:
                log.exception("workspace.capture_failed", workspace=str(self._root))
                time.sleep(1.0)
