"""Ops that roll a workspace back: plan, apply, undo (the rules: docs/rollback.md).

A rollback acts on the live workspace (it captures first, under the workspace's lock): the
target is a mark or a time, or, for an undo, the newest ``pre-rollback`` mark. Each applied
rollback and undo is announced as an event.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from snapd.capture.workspace import Workspace
from snapd.daemon import heap
from snapd.daemon import history as daemon_history
from snapd.daemon.events import EventSink, emit, rollback_fields
from snapd.daemon.ops.remote import restore_from_remote
from snapd.daemon.registry import Registry, relative_path
from snapd.daemon.remotes import Remotes
from snapd.daemon.wire import mark_json, wire_paths
from snapd.errors import UsageError
from snapd.paths import encode_path
from snapd.rollback import live, report, restore
from snapd.rollback.running import Running
from snapd.store import history
from snapd.store.history import AtTime
from snapd.store.records import Mark
from snapd.store.store import Store


class RollbackOps:
    def __init__(
        self,
        store: Store,
        registry: Registry,
        events: EventSink,
        running: Running | None = None,
        remotes: Remotes | None = None,
    ) -> None:
        """``running``: the table of restores and rollbacks in flight that ``status`` shows;
        ``remotes``: where ``restore`` reads a mark pushed from anywhere (``from_remote``)."""
        self.store, self.registry, self.events = store, registry, events
        self.running = running or Running()
        self.remotes = remotes

    def _target(
        self,
        ws: Workspace,
        cwd: bytes | None,
        to: str | None,
        undo: bool,
        paths: list[bytes] | None,
        session: str | None,
        *,
        create: bool,
    ) -> tuple[Workspace, Mark, list[bytes], AtTime | None, str | None]:
        """For ``ws`` (:meth:`Registry.for_rollback`): the live workspace, the mark to return
        to, the paths the rollback is limited to, the time the target was built from (a time
        reference), and what became of the root (:meth:`Registry.adopt_root`: None, ``"new"``,
        ``"missing"``; ``create``: an apply, which makes a missing root again)."""
        at = None
        if undo:
            target = live.undo_target(ws)
        elif to is None:
            raise UsageError("say which mark (or time) to roll back to (--to MARK)")
        else:
            target, at = history.resolve(self.store, ws.id, to, session)
        only = [relative_path(ws.root, p, cwd) for p in paths or []]
        ws, root = self.registry.adopt_root(ws, create=create)  # once the target is known
        return ws, target, only, at, root

    def op_rollback_plan(
        self,
        workspace: bytes | None = None,
        cwd: bytes | None = None,
        to: str | None = None,
        undo: bool = False,
        paths: list[bytes] | None = None,
        force: bool = False,
        session: str | None = None,
    ) -> dict[str, Any]:
        asked = self.registry.for_rollback(workspace, cwd)
        with self.registry.resuming(asked):  # an unwatched one is resumed, unless nothing is there
            ws, target, only, at, root = self._target(asked, cwd, to, undo, paths, session, create=False)
            if root == "missing":  # nothing on disk to capture or touch: the apply makes it again
                proposed = live.propose_missing(ws, target, only, force)
            else:
                proposed = live.propose(ws, target, only, force)
        return daemon_history.time_fields(at, wire_paths(report.root_fields(ws.root, root, proposed)))

    def op_rollback_apply(
        self,
        workspace: bytes | None = None,
        cwd: bytes | None = None,
        to: str | None = None,
        undo: bool = False,
        paths: list[bytes] | None = None,
        force: bool = False,
        token: str | None = None,
        session: str | None = None,
    ) -> dict[str, Any]:
        asked = self.registry.for_rollback(workspace, cwd)
        with self.registry.resuming(asked):  # an unwatched one is resumed
            ws, target, only, at, root = self._target(asked, cwd, to, undo, paths, session, create=True)
        with self.running.one("undo" if undo else "rollback", ws.root, ws.root) as tracker:
            done = live.execute(ws, target, only, force, token, tracker)
        result: dict[str, Any] = daemon_history.time_fields(
            at, wire_paths(report.root_fields(ws.root, root, done))
        )
        emit(self.events, "undo.applied" if undo else "rollback.applied", ws.root, rollback_fields(result))
        return result

    def op_restore(
        self,
        mark: str,
        target: bytes,
        workspace: bytes | None = None,
        cwd: bytes | None = None,
        session: str | None = None,
        from_remote: str | None = None,
        host: str | None = None,
        password: str | None = None,
        credentials: dict[str, str] | None = None,
    ) -> dict[str, Any]:
        """The workspace as at ``mark`` (a mark or a time) written into ``target``, an absent
        or empty directory (:mod:`snapd.rollback.restore`). The workspace need not be watched,
        nor its root exist: the history is all a restore reads. ``from_remote``: the mark is
        one of that remote's (of ``host``; ``workspace``: the path it was pushed from), on a
        machine that may have no history of its own (:func:`.remote.restore_from_remote`)."""
        if from_remote is not None:
            if self.remotes is None:
                raise UsageError("restore: this daemon has no remotes")
            return restore_from_remote(
                self.remotes, self.running, self.registry.own_dirs, self.store.hasher, name=from_remote,
                ref=mark, target=target, host=host, workspace=workspace, password=password,
                credentials=credentials,
            )  # fmt: skip
        if host is not None or password is not None or credentials is not None:
            raise UsageError("restore: host, password and credentials go with a remote (from_remote)")
        ws_id, root = self.registry.stored(workspace, cwd)
        ref, at = history.resolve(self.store, ws_id, mark, session)
        dest = Path(os.fsdecode(target))
        with self.running.one("restore", root, dest) as progress, heap.paused():
            done = restore.write_tree(
                dest, ref.tree, ref.root_mode, self.store.load_node, self.store.get,
                self.store.hasher, self.registry.own_dirs, progress,
            )
        reply: dict[str, Any] = {
            "workspace": str(root),
            "target": str(done.target),
            "made": done.made,
            "mark": mark_json(ref) if at is None else None,
            "counts": done.counts,
            "written": done.counts["files"] + done.counts["symlinks"] + done.counts["dirs"],
            "not_restored": [{"path": encode_path(p), "reason": why} for p, why in done.not_restored],
            "conflicts": [{"path": encode_path(p), "reason": why} for p, why in done.conflicts],
            "ok": done.ok,
        }
        if at is not None:
            reply["time"] = history.describe(at)
        out: dict[str, Any] = wire_paths(reply)
        return out

    def op_undo(
        self,
        workspace: bytes | None = None,
        cwd: bytes | None = None,
        force: bool = False,
        token: str | None = None,
    ) -> dict[str, Any]:
        return self.op_rollback_apply(workspace, cwd, undo=True, force=force, token=token)
