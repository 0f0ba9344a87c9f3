"""The GC schedule: retention and GC, applied by the daemon itself.

History must not grow without bound just because nobody ran `snapctl gc`: a thread
(``snapd-gc``) applies the retention policy and sweeps every ``gc_interval_s``, the first
time after a tenth of it. A failure is logged and the next round runs as planned. The
warnings of the last run, periodic or `snapctl gc` (a store over its budget), show in
`status` until the next run, and a new one is announced once as a ``warning`` event. The
mark phase runs in a process of its own (:mod:`snapd.daemon.gcchild`).
"""

from __future__ import annotations

import threading
import time

import structlog

from snapd.config import Retention
from snapd.daemon.events import EventSink, emit
from snapd.daemon.gcchild import ChildMarkPhase
from snapd.errors import SnapdError
from snapd.rollback import journal
from snapd.store import gc, retention
from snapd.store.records import MarkHead
from snapd.store.store import Store

log = structlog.get_logger(__name__)


class Maintenance:
    def __init__(self, store: Store, policy: Retention, interval_s: float, events: EventSink) -> None:
        self.store, self.policy, self.interval_s, self.events = store, policy, interval_s, events
        self.warnings: list[str] = []  # from the last GC (e.g. over budget)
        self._stopping = threading.Event()
        self._collecting = threading.Lock()  # one GC at a time: `snapctl gc` during a periodic run waits

    def start(self) -> None:
        threading.Thread(target=self._loop, daemon=True, name="snapd-gc").start()

    def stop(self) -> None:
        self._stopping.set()

    def collect(self) -> gc.GcReport:
        """Apply retention and GC now (`snapctl gc`, and each periodic run); its warnings
        replace the ones `status` shows. A run that fails says so there until one succeeds:
        a store that cannot be collected (a rollback journal it cannot read, a full disk)
        grows, and the periodic run's error would be in the log alone. One run at a time: a
        second sweep beside the first would drop the keys the first must spare."""
        with self._collecting:
            return self._collect()

    def _collect(self) -> gc.GcReport:
        store = self.store
        try:
            unfinished = {k for w in store.workspaces() for k in journal.needs(store.journal_path(w.id))}
            with ChildMarkPhase(store) as phase:
                rep = gc.run(store, self.policy, unfinished=unfinished, mark=phase)
            rep.mark_phase = phase.summary()
        except SnapdError as exc:
            self._show([f"the last GC failed, and nothing was collected: {exc.message}"])
            raise
        self._show(rep.warnings)
        return rep

    def _show(self, warnings: list[str]) -> None:
        for warning in set(warnings) - set(self.warnings):
            emit(self.events, "warning", None, {"message": warning})
        self.warnings = list(warnings)

    def would_evict(self) -> list[tuple[MarkHead, str]]:
        """The marks retention would evict now, with the reason (`snapctl gc --dry-run`)."""
        return retention.plan_evictions(self.store.mark_heads(), self.policy, time.time_ns())

    def _loop(self) -> None:
        wait = self.interval_s / 10
        while not self._stopping.wait(wait):
            wait = self.interval_s
            try:
                rep = self.collect()
            except SnapdError as exc:
                log.warning("gc.failed", error=exc.message)
                continue
            except Exception:
                log.exception("gc.failed")
                continue
            log.info(
                "gc.done",
                evicted=len(rep.evicted),
                objects_deleted=rep.objects_deleted,
                bytes_freed=rep.bytes_freed,
                stored_bytes=rep.stored_bytes,
                mark_phase=rep.mark_phase,
            )
