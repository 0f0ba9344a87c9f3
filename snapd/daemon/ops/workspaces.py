"""Ops that start and end the watching of a workspace: watch, unwatch, forget."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from snapd.daemon.events import EventSink, emit
from snapd.daemon.maintenance import Maintenance
from snapd.daemon.registry import Registry
from snapd.daemon.wire import mark_json, wire_paths
from snapd.store.store import Store


class WorkspaceOps:
    def __init__(self, store: Store, registry: Registry, events: EventSink, maintenance: Maintenance) -> None:
        self.store, self.registry, self.events = store, registry, events
        self.maintenance = maintenance  # when a forgotten workspace's space comes back

    def op_watch(self, path: bytes) -> dict[str, Any]:
        ws, baseline = self.registry.register(Path(os.fsdecode(path)))
        out = {"workspace": str(ws.root), **wire_paths(ws.status())}
        if baseline is not None:
            out["baseline"] = mark_json(baseline, ws.root)
        return out

    def op_unwatch(self, workspace: bytes | None = None, cwd: bytes | None = None) -> dict[str, Any]:
        ws_id, root = self.registry.stored(workspace, cwd)
        self.registry.unwatch(ws_id, root)
        emit(self.events, "workspace.unwatched", root, {})
        return {"workspace": str(root), "watching": False}

    def op_forget(
        self, workspace: bytes | None = None, cwd: bytes | None = None, dry_run: bool = False
    ) -> dict[str, Any]:
        ws_id, root = self.registry.stored(workspace, cwd)
        footprint = self.store.footprint(ws_id)
        if dry_run:  # what the client asks the user to confirm
            return {"workspace": str(root), "dry_run": True, **footprint}
        self.op_unwatch(os.fsencode(root))
        marks = self.store.forget_workspace(ws_id)
        # Its objects go at the next GC once past the grace period (store.gc), not at once.
        when = {"grace_s": self.maintenance.policy.grace_s, "gc_interval_s": self.maintenance.interval_s}
        return {"workspace": str(root), "forgotten_marks": marks, **footprint, **when}
