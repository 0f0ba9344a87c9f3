"""The daemon's operations: one method per protocol op, over the store and live workspaces.

Requests arrive on the server's worker threads, so a slow operation (a baseline, a barrier,
a GC) never blocks another client, and one workspace's lock never blocks another's marks.
Every failure a user can cause is a :class:`SnapdError`, which the server turns into an
error reply; the daemon keeps serving.

Workspace roots are real paths (see :mod:`snapd.capture.roots`); refused are ``/``, the home
directory itself, anything holding snapd's own directories or inside them, a root that
overlaps another workspace, one inside a VCS directory and one on a pseudo file system
(``roots``). A mark sent from inside a repository's ``.git`` registers the work tree around
it, never ``.git``.
"""

from __future__ import annotations

import base64
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import structlog

from snapd import __version__
from snapd.capture import git, ignore, roots
from snapd.capture.workspace import Settings, Workspace
from snapd.daemon import history as daemon_history
from snapd.daemon import textdiff, turns
from snapd.daemon.events import EventSink, NoEvents, emit, rollback_fields, workspace_notifier
from snapd.display import shown
from snapd.errors import Busy, NotFound, SnapdError, UsageError, WorkspaceRefused
from snapd.ipc import protocol
from snapd.ipc.protocol import PeerInfo, Request
from snapd.paths import at_or_below, encode_path
from snapd.rollback import live
from snapd.rollback.recovery import finish_interrupted
from snapd.store import history, retention, trees
from snapd.store.history import AtTime
from snapd.store.records import Mark
from snapd.store.store import Store
from snapd.store.verify import verify

log = structlog.get_logger(__name__)

READY_WAIT_S = 300.0
LOG_LIMIT = 20  # marks in one page of `log` when the request gives no limit


@dataclass(frozen=True)
class ServiceConfig:
    homes: tuple[Path, ...]  # the user's home directory ($HOME and the passwd entry): never a workspace
    own_dirs: tuple[Path, ...]  # snapd's store, state and socket directories
    endpoint: str
    settings: Settings
    policy: retention.Policy
    gc_interval_s: float = 3600.0  # retention and GC run this often (first run after a tenth)


def wire_paths(obj: Any) -> Any:
    """Summaries and status hold paths as ``os.fsdecode`` strings; one with an undecodable
    byte (a lone surrogate) cannot be sent as JSON text, so it travels as ``{"b64": ...}``,
    as every path in the protocol does."""
    if isinstance(obj, str):
        try:
            obj.encode("utf-8")
        except UnicodeEncodeError:
            return encode_path(os.fsencode(obj))
        return obj
    if isinstance(obj, list):
        return [wire_paths(v) for v in obj]
    if isinstance(obj, dict):
        return {k: wire_paths(v) for k, v in obj.items()}
    return obj


def mark_json(m: Mark, root: Path | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {
        "id": m.id,
        "label": m.label,
        "kind": m.kind,
        "created": m.created / 1e9,
        "created_ns": m.created,
        "message": m.message,
        "agent": m.agent,
        "session": m.session,
        "git_head": m.git_head,
        "pinned": m.pinned,
        "seq": m.seq,
        "summary": wire_paths(m.summary),
    }
    if root is not None:
        out["workspace"] = str(root)
    return out


class Service:
    def __init__(
        self,
        store: Store,
        config: ServiceConfig,
        request_stop: Callable[[], None],
        events: EventSink | None = None,
    ) -> None:
        self.store, self.config, self._request_stop = store, config, request_stop
        self.events: EventSink = events or NoEvents()
        self._live: dict[int, Workspace] = {}
        self._ready: dict[int, threading.Event] = {}
        self._errors: dict[int, str] = {}
        self._lock = threading.RLock()  # registration and the tables above
        self._started = threading.Event()  # set once start() has listed the stored workspaces
        self._stopping = threading.Event()
        self.gc_warnings: list[str] = []  # from the last periodic GC (e.g. over budget)
        self.started = time.time()

    # -- life cycle ---------------------------------------------------------------------------

    def start(self) -> None:
        """Bring every watched workspace back, each in its own thread (a big one is slow), and
        start the retention thread."""
        for w in self.store.workspaces():
            if w.watching:
                root = Path(os.fsdecode(w.root))
                # Listed as live (starting) before any thread runs: a request that arrives
                # while it starts waits for it instead of hearing "not watched".
                workspace, ready = self._add_live(w.id, root)
                threading.Thread(
                    target=self._start_ws, args=(workspace, ready), daemon=True, name=f"snapd-start:{root}"
                ).start()
        threading.Thread(target=self._maintain, daemon=True, name="snapd-gc").start()
        self._started.set()

    def _maintain(self) -> None:
        """Apply retention and GC periodically: history must not grow without bound just
        because nobody ran `snapctl gc`. Its warnings (over budget) show in `status`."""
        wait = self.config.gc_interval_s / 10
        while not self._stopping.wait(wait):
            wait = self.config.gc_interval_s
            try:
                rep = retention.gc(self.store, self.config.policy)
            except SnapdError as exc:
                log.warning("gc.failed", error=exc.message)
                continue
            except Exception:
                log.exception("gc.failed")
                continue
            self._gc_done(rep)
            log.info(
                "gc.done",
                evicted=len(rep.evicted),
                objects_deleted=rep.objects_deleted,
                bytes_freed=rep.bytes_freed,
                stored_bytes=rep.stored_bytes,
            )

    def _gc_done(self, rep: retention.GcReport) -> None:
        """A GC's warnings (over budget) are status's until the next GC, periodic or
        `snapctl gc`: one that brings the store under its budget clears them."""
        for warning in set(rep.warnings) - set(self.gc_warnings):
            emit(self.events, "warning", None, {"message": warning})
        self.gc_warnings = list(rep.warnings)

    def stop(self) -> None:
        self._stopping.set()
        with self._lock:
            live = list(self._live.values())
        for ws in live:
            ws.stop()

    def _workspace(self, ws_id: int, root: Path) -> Workspace:
        workspace = Workspace(self.store, ws_id, root, self.config.settings, finish_interrupted)
        workspace.notify = workspace_notifier(self.events, root, _event_fields)
        return workspace

    def _add_live(self, ws_id: int, root: Path) -> tuple[Workspace, threading.Event]:
        ready = threading.Event()
        workspace = self._workspace(ws_id, root)
        with self._lock:
            self._live[ws_id] = workspace
            self._ready[ws_id] = ready
            self._errors.pop(ws_id, None)
        return workspace, ready

    def _start_ws(self, workspace: Workspace, ready: threading.Event) -> Workspace | None:
        ws_id, root = workspace.id, workspace.root
        try:
            self._recheck_place(ws_id, root)
            workspace.start()
            emit(self.events, "workspace.watched", root, {"resumed": True, "baseline": None})
            return workspace
        except SnapdError as exc:
            self._errors[ws_id] = exc.message
            log.warning("workspace.unavailable", workspace=str(root), error=exc.message)
            emit(self.events, "warning", root, {"message": f"not watched: {exc.message}"})
            return None
        except Exception as exc:
            self._errors[ws_id] = f"internal error: {exc}"
            log.exception("workspace.start_failed", workspace=str(root))
            return None
        finally:
            ready.set()

    def _recheck_place(self, ws_id: int, root: Path) -> None:
        """A stored root that an older snapd accepted but that is refused now (inside a VCS
        directory, on a pseudo file system) is not watched any more: its history stays until
        `snapctl forget`, and status says why."""
        try:
            roots.check_place(root)
        except WorkspaceRefused:
            with self._lock:
                self._live.pop(ws_id, None)
            self.store.set_watching(ws_id, False)
            raise

    # -- dispatch -----------------------------------------------------------------------------

    def handle(self, req: Request, peer: PeerInfo) -> dict[str, Any]:
        method = getattr(self, "op_" + req.op)  # the protocol admits only ops that have one
        result: dict[str, Any] = method(**req.args)
        return result

    # -- workspaces ---------------------------------------------------------------------------

    def _validate_root(self, path: Path) -> Path:
        others = [(Path(os.fsdecode(w.root)), w.watching) for w in self.store.workspaces()]
        return roots.validate(path, self.config.homes, self.config.own_dirs, others)

    def _register(self, path: Path) -> tuple[Workspace, Mark | None]:
        """Watch ``path`` (validated); capture its baseline the first time. Idempotent."""
        with self._lock:
            root = self._validate_root(path)
            existing = next((ws for ws in self._live.values() if ws.root == root), None)
            restart = None
            if existing is not None and (existing.lost is not None or existing.id in self._errors):
                existing.stop()
                restart = self._add_live(existing.id, existing.root)
            elif existing is None:
                ws_id = self.store.add_workspace(os.fsencode(root))
                workspace = self._workspace(ws_id, root)
                ready = threading.Event()
                self._live[ws_id], self._ready[ws_id] = workspace, ready
                self._errors.pop(ws_id, None)
        if restart is not None:
            return self._restart(*restart)
        if existing is not None:
            self._wait_ready(existing.id)
            return existing, None
        try:
            baseline = workspace.start()
        except SnapdError as exc:
            with self._lock:
                self._errors[ws_id] = exc.message
                self._live.pop(ws_id, None)
            self.store.set_watching(ws_id, False)
            workspace.stop()
            raise
        finally:
            ready.set()
        log.info("workspace.watched", workspace=str(root), baseline=baseline.id if baseline else None)
        emit(self.events, "workspace.watched", root,
             {"resumed": False, "baseline": mark_json(baseline) if baseline else None})
        return workspace, baseline

    def _restart(self, workspace: Workspace, ready: threading.Event) -> tuple[Workspace, None]:
        """`snapctl watch ROOT` of a workspace in error (its root vanished or was replaced
        while watched, or it failed to start), already swapped for a fresh one: start it, as a
        restart of the daemon would. The same directory back (moved back, remounted) resumes
        with a reconcile scan; another one is refused as at start-up, and stays in error."""
        try:
            workspace.start()
        except SnapdError as exc:
            with self._lock:
                self._errors[workspace.id] = exc.message
            raise
        finally:
            ready.set()
        log.info("workspace.resumed", workspace=str(workspace.root))
        emit(self.events, "workspace.watched", workspace.root, {"resumed": True, "baseline": None})
        return workspace, None

    def _find(
        self, workspace: bytes | None, cwd: bytes | None, *, register: bool = False
    ) -> tuple[Workspace, Mark | None]:
        """The live workspace a request means: ``workspace`` if given, else the one holding ``cwd``."""
        where = workspace if workspace is not None else cwd
        if where is None:
            raise UsageError("no workspace given: pass -w PATH or run from inside a workspace")
        path = Path(os.fsdecode(where))
        # The server answers before start() has listed the stored workspaces as live: a
        # request in that moment must find its workspace starting, not "not watched".
        self._started.wait(30)
        try:
            real = path.resolve(strict=False)
        except (OSError, RuntimeError) as exc:
            raise NotFound(f"cannot resolve {path}: {exc}") from exc
        with self._lock:
            candidates = [ws for ws in self._live.values() if ws.root == real or ws.root in real.parents]
        if candidates:
            ws = max(candidates, key=lambda w: len(str(w.root)))
            self._wait_ready(ws.id)
            return ws, None
        if workspace is not None and not register:
            known = [w for w in self.store.workspaces() if Path(os.fsdecode(w.root)) == real]
            if known:
                raise NotFound(f"{real} is not being watched (`snapctl watch {real}` resumes it)")
            raise NotFound(f"{real} is not a watched workspace (`snapctl watch {real}` adds it)")
        if not register:
            raise NotFound(f"no watched workspace contains {real}: pass -w PATH, or `snapctl watch` it")
        return self._register(self._auto_root(real))

    @staticmethod
    def _auto_root(where: Path) -> Path:
        """The workspace a mark from unwatched ``where`` registers: the enclosing git work
        tree's top, else ``where`` itself. From inside a ``.git`` (or ``.hg``...) directory, the
        directory holding it: git answers no work-tree question from in there, and the VCS
        directory itself is never a workspace. (Inside a git directory found by its shape
        alone — bare, or separate — there is no work tree to find: validation refuses it.)"""
        vcs = roots.vcs_dir_holding(where)
        if vcs is not None and os.fsencode(vcs.name) in ignore.VCS_NAMES:
            where = vcs.parent
        top = git.git_toplevel(where) if where.is_dir() else None
        return top or where

    def _wait_ready(self, ws_id: int) -> None:
        """Wait (bounded) for a workspace that is starting: its baseline or reconcile."""
        ready = self._ready.get(ws_id)
        if ready is not None and not ready.wait(READY_WAIT_S):
            raise Busy(
                f"the workspace is still capturing its baseline after {READY_WAIT_S:.0f} s "
                "(`snapctl status` shows its progress); retry when it is ready"
            )
        if ws_id in self._errors:
            raise NotFound(self._errors[ws_id])

    def _ws_id(self, workspace: bytes | None, cwd: bytes | None) -> tuple[int, Path]:
        """A workspace id for read-only ops: live or not, named or holding ``cwd``."""
        where = workspace if workspace is not None else cwd
        if where is None:
            raise UsageError("no workspace given: pass -w PATH or run from inside a workspace")
        real = Path(os.fsdecode(where)).resolve(strict=False)
        best: tuple[int, Path] | None = None
        for w in self.store.workspaces():
            root = Path(os.fsdecode(w.root))
            if (root == real or root in real.parents) and (
                best is None or len(str(root)) > len(str(best[1]))
            ):
                best = (w.id, root)
        if best is None:
            raise NotFound(f"no workspace contains {real}: pass -w PATH, or `snapctl watch` it")
        return best

    # -- ops ----------------------------------------------------------------------------------

    def op_ping(self) -> dict[str, Any]:
        return {"pong": True, "version": __version__, "protocol": protocol.PROTOCOL_VERSION}

    def op_stop(self) -> dict[str, Any]:
        self._request_stop()
        return {"stopping": True, "pid": os.getpid()}

    def op_watch(self, path: bytes) -> dict[str, Any]:
        ws, baseline = self._register(Path(os.fsdecode(path)))
        out = {"workspace": str(ws.root), **wire_paths(ws.status())}
        if baseline is not None:
            out["baseline"] = mark_json(baseline, ws.root)
        return out

    def op_unwatch(self, workspace: bytes | None = None, cwd: bytes | None = None) -> dict[str, Any]:
        ws_id, root = self._ws_id(workspace, cwd)
        with self._lock:
            ready = self._ready.get(ws_id)
            if ready is not None and not ready.is_set():
                # Its baseline (or reconcile) is being written: stopping it now would leave a
                # half-started watcher, and forgetting it would pull rows from under the commit.
                raise Busy(f"{root} is still starting (capturing its baseline); retry when it is ready")
            ws = self._live.pop(ws_id, None)
            self._ready.pop(ws_id, None)
        if ws is not None:
            ws.stop()
        self.store.set_watching(ws_id, False)
        emit(self.events, "workspace.unwatched", root, {})
        return {"workspace": str(root), "watching": False}

    def op_forget(
        self, workspace: bytes | None = None, cwd: bytes | None = None, dry_run: bool = False
    ) -> dict[str, Any]:
        ws_id, root = self._ws_id(workspace, cwd)
        footprint = self.store.footprint(ws_id)
        if dry_run:  # what the client asks the user to confirm
            return {"workspace": str(root), "dry_run": True, **footprint}
        self.op_unwatch(os.fsencode(root))
        marks = self.store.forget_workspace(ws_id)
        return {"workspace": str(root), "forgotten_marks": marks, **footprint}

    def op_mark(
        self,
        label: str,
        workspace: bytes | None = None,
        cwd: bytes | None = None,
        message: str | None = None,
        agent: str | None = None,
        session: str | None = None,
        register: bool = True,
        late_after_s: float | None = None,
    ) -> dict[str, Any]:
        """A mark; ``register=False``: only in a workspace already watched. With a ``session``,
        the reply also says what happened since the session's previous mark (:mod:`.turns`).
        ``late_after_s``: the caller stops waiting after this long; a mark taken later (behind
        a baseline) is flagged ``late``."""
        from snapd.store.refs import validate_label

        validate_label(label)
        started = time.monotonic()
        ws, _ = self._find(workspace, cwd, register=register)
        before = self.store.marks(ws.id) if session else []
        previous = turns.session_last(before, session) if session else None
        note = turns.interrupted_note(label, previous)
        if late_after_s is not None and time.monotonic() - started > late_after_s:
            note["late"] = True
        mark = ws.mark(label, message=message, agent=agent, session=session, note=note)
        out = mark_json(mark, ws.root)
        if session:
            marks = [mark, *before]
            out["rollbacks"] = wire_paths(turns.rollbacks_between(marks, previous, mark))
            out["late_marks"] = turns.late_in_last_turn(marks, session, mark)
        return out

    def op_log(
        self,
        workspace: bytes | None = None,
        cwd: bytes | None = None,
        limit: int | None = None,
        agent: str | None = None,
        session: str | None = None,
        all: bool = False,
        before: str | None = None,
        path: bytes | None = None,
    ) -> dict[str, Any]:
        """One page of marks, newest first: ``limit`` of them (default ``LOG_LIMIT``; ``all``:
        no limit) older than the mark ``before`` names; ``more`` says how many follow. With
        ``path``, only the marks whose turn changed it (or anything under it)."""
        if limit is not None and limit < 1:
            raise UsageError(f"log: a limit must be at least 1, got {limit} (`all` lists every mark)")
        ws_id, root = self._ws_id(workspace, cwd)
        marks = self.store.marks(ws_id)
        changing = None
        if path is not None:
            rel = _relative(root, path, cwd)
            changing = {m.id for m in history.marks_changing(self.store.load_node, marks, rel)}
        if before is not None:
            start = self.store.resolve(ws_id, before, session)
            marks = marks[next(i for i, m in enumerate(marks) if m.id == start.id) + 1 :]
        if agent is not None:
            marks = [m for m in marks if m.agent == agent]
        if session is not None:
            marks = [m for m in marks if m.session == session]
        if changing is not None:
            marks = [m for m in marks if m.id in changing]
        page = marks if all else marks[: limit or LOG_LIMIT]
        evictions = self.store.evictions(ws_id)
        return {
            "workspace": str(root),
            "marks": [mark_json(m) for m in page],
            "more": len(marks) - len(page),
            "pruned": len(evictions),
            "pruned_newest": evictions[0]["created"] / 1e9 if evictions else None,
        }

    def op_show(
        self, mark: str, workspace: bytes | None = None, cwd: bytes | None = None, session: str | None = None
    ) -> dict[str, Any]:
        ws_id, root = self._ws_id(workspace, cwd)
        m = self.store.resolve(ws_id, mark, session)
        prev = self.store.marks(ws_id)
        older = [p for p in prev if p.seq < m.seq]
        base = older[0].tree if older else None
        changes = [
            {"path": encode_path(d.path), "status": d.status}
            for d in trees.diff(self.store.load_node, base, m.tree)
        ]
        return {**mark_json(m, root), "changes": changes[:1000], "changes_total": len(changes)}

    def op_pin(
        self, mark: str, workspace: bytes | None = None, cwd: bytes | None = None, session: str | None = None
    ) -> dict[str, Any]:
        return self._set_pin(mark, workspace, cwd, session, True)

    def op_unpin(
        self, mark: str, workspace: bytes | None = None, cwd: bytes | None = None, session: str | None = None
    ) -> dict[str, Any]:
        return self._set_pin(mark, workspace, cwd, session, False)

    def _set_pin(
        self, ref: str, workspace: bytes | None, cwd: bytes | None, session: str | None, pinned: bool
    ) -> dict[str, Any]:
        ws_id, root = self._ws_id(workspace, cwd)
        m = self.store.resolve(ws_id, ref, session)
        self.store.set_pinned(m.id, pinned)
        return {"id": m.id, "label": m.label, "pinned": pinned, "workspace": str(root)}

    def op_verify(
        self, workspace: bytes | None = None, cwd: bytes | None = None, full: bool = True
    ) -> dict[str, Any]:
        report = verify(self.store, sample=None if full else 0.1)
        return {
            "clean": report.ok,
            "checked": report.checked,
            "missing": report.missing,
            "corrupt": report.corrupt,
        }

    def op_gc(
        self, workspace: bytes | None = None, cwd: bytes | None = None, dry_run: bool = False
    ) -> dict[str, Any]:
        if dry_run:
            doomed = retention.plan_evictions(self.store.marks(), self.config.policy, time.time_ns())
            return {
                "dry_run": True,
                "would_evict": [{"id": m.id, "label": m.label, "reason": r} for m, r in doomed],
            }
        rep = retention.gc(self.store, self.config.policy)
        self._gc_done(rep)
        return {
            "evicted": [{"id": i, "reason": r} for i, r in rep.evicted],
            "objects_deleted": rep.objects_deleted,
            "bytes_freed": rep.bytes_freed,
            "stored_bytes": rep.stored_bytes,
            "warnings": rep.warnings,
        }

    # -- rollback and diff ----------------------------------------------------------------------

    def _rollback_args(
        self,
        workspace: bytes | None,
        cwd: bytes | None,
        to: str | None,
        undo: bool,
        paths: list[bytes] | None,
        session: str | None,
    ) -> tuple[Workspace, Mark, list[bytes], AtTime | None]:
        ws, _ = self._find(workspace, cwd)
        at = None
        if undo:
            target = live.undo_target(ws)
        elif to is None:
            raise UsageError("say which mark (or time) to roll back to (--to MARK)")
        else:
            target, at = history.resolve(self.store, ws.id, to, session)
        only = [_relative(ws.root, p, cwd) for p in paths or []]
        return ws, target, only, at

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
        ws, target, only, at = self._rollback_args(workspace, cwd, to, undo, paths, session)
        return daemon_history.time_fields(at, wire_paths(live.propose(ws, target, only, force)))

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
        ws, target, only, at = self._rollback_args(workspace, cwd, to, undo, paths, session)
        result: dict[str, Any] = daemon_history.time_fields(
            at, wire_paths(live.execute(ws, target, only, force, token))
        )
        emit(self.events, "undo.applied" if undo else "rollback.applied", ws.root, rollback_fields(result))
        return result

    def op_undo(
        self,
        workspace: bytes | None = None,
        cwd: bytes | None = None,
        force: bool = False,
        token: str | None = None,
    ) -> dict[str, Any]:
        return self.op_rollback_apply(workspace, cwd, undo=True, force=force, token=token)

    def op_diff(
        self,
        workspace: bytes | None = None,
        cwd: bytes | None = None,
        paths: list[bytes] | None = None,
        stat: bool = False,
        session: str | None = None,
        **refs: str | None,
    ) -> dict[str, Any]:
        ws_id, root = self._ws_id(workspace, cwd)
        frm, to = refs.get("from"), refs.get("to")
        if frm is None:
            raise UsageError("say which mark to diff from")
        old, old_at = history.resolve(self.store, ws_id, frm, session)
        new_at = None
        if to is None:  # the live workspace: capture it first
            ws, _ = self._find(workspace, cwd)
            new_tree, new_name = ws.sync(), "the workspace now"
        else:
            new, new_at = history.resolve(self.store, ws_id, to, session)
            new_tree, new_name = new.tree, f"{new.id} ({new.label})"
        only = [_relative(root, p, cwd) for p in paths or []]
        files = []
        for d in trees.diff(self.store.load_node, old.tree, new_tree):
            if only and not any(at_or_below(d.path, p) for p in only):
                continue
            record: dict[str, Any] = {"path": encode_path(d.path), "status": d.status}
            if d.old is not None:
                record["old_mode"] = d.old.mode
            if d.new is not None:
                record["new_mode"] = d.new.mode
            contents = [e for e in (d.old, d.new) if e is not None and e.kind != "dir"]
            if any(trees.is_uncaptured(e) for e in contents):  # no bytes to compare on that side
                record["not_captured"] = [
                    trees.uncaptured_reason(e) for e in contents if trees.is_uncaptured(e)
                ]
            elif contents and d.status != "mode":
                a = self.store.get(d.old.key) if d.old is not None and d.old.kind != "dir" else None
                b = self.store.get(d.new.key) if d.new is not None and d.new.kind != "dir" else None
                record.update(textdiff.file_diff(d.path, d.status, a, b))
                if stat:
                    record.pop("diff", None)  # --stat: line counts only
            files.append(record)
        out: dict[str, Any] = {
            "workspace": str(root),
            "from": {"id": old.id, "label": old.label},
            "to": new_name,
            "files": files,
        }
        for key, at in (("from_time", old_at), ("to_time", new_at)):
            if at is not None:
                out[key] = history.describe(at)
        return out

    def op_cat(
        self,
        path: bytes,
        workspace: bytes | None = None,
        cwd: bytes | None = None,
        at: str | None = None,
        session: str | None = None,
    ) -> dict[str, Any]:
        ws_id, root = self._ws_id(workspace, cwd)
        rel = _relative(root, path, cwd)
        tree = history.resolve(self.store, ws_id, at, session)[0].tree if at else self.store.head(ws_id)
        entry = trees.lookup(self.store.load_node, tree, rel) if tree else None
        if entry is None or entry.kind == "dir":
            raise NotFound(f"{shown(rel)} is not a captured file at {at or 'the latest capture'}")
        if trees.is_uncaptured(entry):
            why = trees.uncaptured_reason(entry)
            where = at or "the latest capture"
            raise NotFound(f"{shown(rel)} was there at {where}, but not captured ({why})")
        data = self.store.get(entry.key)
        return {
            "kind": entry.kind,
            "mode": entry.mode,
            "size": len(data),
            "data_b64": base64.b64encode(data).decode(),
        }

    def op_history(
        self, path: bytes, workspace: bytes | None = None, cwd: bytes | None = None
    ) -> dict[str, Any]:
        ws_id, root = self._ws_id(workspace, cwd)
        rel = _relative(root, path, cwd)
        return daemon_history.history_reply(self.store, ws_id, str(root), rel, self.config.policy)

    def op_status(self, workspace: bytes | None = None, cwd: bytes | None = None) -> dict[str, Any]:
        with self._lock:
            live = dict(self._live)
            errors = dict(self._errors)
            ready = {k: v.is_set() for k, v in self._ready.items()}
        for ws_id, running in live.items():
            if ready.get(ws_id) and ws_id not in errors and (why := running.root_problem()):
                errors[ws_id] = why
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
            "endpoint": self.config.endpoint,
            "events": {"endpoint": self.events.endpoint or None, "instance": self.events.instance or None},
            "uptime_s": time.time() - self.started,
            "store": {"path": str(self.store.dir), "stored_bytes": self.store.stored_bytes()},
            "workspaces": spaces,
            "pending": sum(ws.pending() for ws in live.values()),
            "warnings": warnings + self.gc_warnings,
        }


def _event_fields(fields: dict[str, Any]) -> dict[str, Any]:
    """A workspace's event fields on the wire: marks as mark objects, paths as protocol paths."""
    return {
        k: mark_json(v) if isinstance(v, Mark) else encode_path(v) if isinstance(v, bytes) else wire_paths(v)
        for k, v in fields.items()
    }


def _relative(root: Path, path: bytes, cwd: bytes | None = None) -> bytes:
    """``path`` as a path relative to ``root``, or a usage error if it lies outside.

    The protocol's rule (docs/protocol.md, "Paths"): an absolute path is taken as it is; a
    relative one from ``cwd`` when the caller's directory is inside the workspace (as git
    does), else from the workspace root (a caller outside that named it with ``-w``)."""
    p = Path(os.fsdecode(path))
    if not p.is_absolute() and cwd is not None:
        here = Path(os.fsdecode(cwd)).resolve(strict=False)
        if here == root or root in here.parents:
            p = here / p
    if p.is_absolute():
        try:
            p = p.relative_to(root)
        except ValueError:
            raise UsageError(f"{p} is outside the workspace {root}") from None
    rel = os.fsencode(os.path.normpath(p))
    if rel in (b".", b"") or rel.startswith(b"../") or rel == b"..":
        raise UsageError(f"{os.fsdecode(path)} is outside the workspace {root}")
    return rel
