"""Ops on the daemon and the store as a whole: ping, stop, status, verify, gc."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from snapd import __version__
from snapd.daemon.events import EventSink
from snapd.daemon.maintenance import Maintenance
from snapd.daemon.registry import Registry
from snapd.daemon.remotes import Remotes
from snapd.daemon.wire import mark_json, wire_paths
from snapd.ipc import protocol
from snapd.rollback.running import Running
from snapd.store.store import Store
from snapd.store.verify import verify


class DaemonOps:
    def __init__(
        self,
        store: Store,
        registry: Registry,
        maintenance: Maintenance,
        events: EventSink,
        endpoint: str,
        request_stop: Callable[[], None],
        config_warnings: tuple[str, ...] = (),
        running: Running | None = None,
        remotes: Remotes | None = None,
    ) -> None:
        """``config_warnings``: what the daemon's own configuration load reported (unknown
        ``SNAPD_*`` names in its environment): the user's to fix, so ``status`` repeats them
        for as long as the daemon runs with them, not only once in its log."""
        self.store, self.registry, self.maintenance, self.events = store, registry, maintenance, events
        self.endpoint, self._request_stop = endpoint, request_stop
        self.config_warnings = [f"the daemon's configuration: {w}" for w in config_warnings]
        self.started = time.time()
        self.running = running or Running()  # restores and rollbacks in flight (their progress bars)
        self.remotes = remotes  # their pending marks, last push and last error

    def op_ping(self) -> dict[str, Any]:
        return {"pong": True, "version": __version__, "protocol": protocol.PROTOCOL_VERSION,
                "ops": protocol.capabilities()}

    def op_stop(self) -> dict[str, Any]:
        self._request_stop()
        return {"stopping": True, "pid": os.getpid()}

    def op_status(self) -> dict[str, Any]:
        live, errors, ready = self.registry.states()
        spaces = []
        warnings: list[str] = []
        for w in self.store.workspaces():
            root = Path(os.fsdecode(w.root))
            entry: dict[str, Any] = {"id": w.id, "root": str(root), "watching": w.watching}
            ws = live.get(w.id)
            if ws is not None:
                entry["state"] = "error" if w.id in errors else ("ready" if ready.get(w.id) else "starting")
                entry.update(wire_paths(ws.status()))
                warnings += [f"{root}: {x}" for x in ws.current_warnings()]
            if w.id in errors:
                entry["error"] = errors[w.id]
                warnings.append(f"{root}: {errors[w.id]}")
            latest = self.store.latest_mark(w.id)
            entry["last_mark"] = mark_json(latest) if latest else None
            spaces.append(entry)
        return {
            "pid": os.getpid(),
            "version": __version__,
            "protocol": protocol.PROTOCOL_VERSION,
            "endpoint": self.endpoint,
            "events": {"endpoint": self.events.endpoint or None, "instance": self.events.instance or None},
            "uptime_s": time.time() - self.started,
            "store": {"path": str(self.store.dir), "stored_bytes": self.store.stored_bytes()},
            "workspaces": spaces,
            "pending": sum(ws.pending() for ws in live.values()),
            "warnings": self.config_warnings + warnings + self.maintenance.warnings,
            "running": self.running.now(),
            "remotes": self.remotes.status() if self.remotes is not None else [],
        }

    def op_verify(self, full: bool = True) -> dict[str, Any]:
        report = verify(self.store, sample=None if full else 0.1)
        roots = {w.id: w.root for w in self.store.workspaces()}
        return {
            "clean": report.ok,
            "checked": report.checked,
            "missing": report.missing,
            "corrupt": report.corrupt,
            "damaged": [
                {"object": d.key, "problem": d.problem, "paths": [r.to_wire(roots) for r in d.refs]}
                for d in report.damage
            ],
        }

    def op_gc(self, dry_run: bool = False) -> dict[str, Any]:
        if dry_run:
            doomed = self.maintenance.would_evict()
            return {
                "dry_run": True,
                "would_evict": [{"id": m.id, "label": m.label, "reason": r} for m, r in doomed],
            }
        rep = self.maintenance.collect()
        return {
            "evicted": [{"id": i, "reason": r} for i, r in rep.evicted],
            "objects_deleted": rep.objects_deleted,
            "bytes_freed": rep.bytes_freed,
            "stored_bytes": rep.stored_bytes,
            "waiting_objects": rep.waiting,
            "waiting_bytes": rep.waiting_bytes,
            "waiting_until": rep.waiting_until / 1e9 if rep.waiting_until is not None else None,
            "grace_s": self.maintenance.policy.grace_s,
            "warnings": rep.warnings,
            "mark_phase": rep.mark_phase,
        }
