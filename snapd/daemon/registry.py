"""The workspaces the daemon serves: the table of live ones, and which one a request means.

A live workspace is listed from the moment it starts (its baseline or reconcile may take
minutes): a request for it waits until it is ready (bounded, then ``busy``) instead of
hearing "not watched", and one that failed to start answers with its reason. The server
answers before :meth:`Registry.start` has listed the stored workspaces, so a request in that
moment waits for the listing too.

Workspace roots are real paths (see :mod:`snapd.capture.roots`); refused are ``/``, the home
directory itself, anything holding snapd's own directories or inside them, a root that
overlaps another workspace, one inside a VCS directory and one on a pseudo file system
(``roots``). A mark sent from inside a repository's ``.git`` registers the work tree around
it, never ``.git``.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import structlog

from snapd.capture import git, ignore, roots
from snapd.capture.workspace import Workspace
from snapd.config import CaptureSettings
from snapd.daemon import heap
from snapd.daemon.events import EventSink, emit, workspace_notifier
from snapd.daemon.wire import event_fields, mark_json
from snapd.errors import Busy, NotFound, SnapdError, UsageError, WorkspaceRefused
from snapd.rollback.apply import make_root
from snapd.rollback.recovery import finish_interrupted
from snapd.store.records import Mark
from snapd.store.store import Store

log = structlog.get_logger(__name__)

READY_WAIT_S = 300.0


class Registry:
    def __init__(
        self,
        store: Store,
        settings: CaptureSettings,
        homes: tuple[Path, ...],
        own_dirs: tuple[Path, ...],
        events: EventSink,
    ) -> None:
        """``homes``: the user's home directory ($HOME and the passwd entry), never a
        workspace; ``own_dirs``: snapd's store, state and socket directories."""
        self.store, self.settings, self.events = store, settings, events
        self.homes, self.own_dirs = homes, own_dirs
        self._live: dict[int, Workspace] = {}
        self._ready: dict[int, threading.Event] = {}
        self._errors: dict[int, str] = {}
        self._dormant: set[int] = set()  # listed by _revive for a rollback, not started yet
        self._lock = threading.RLock()  # registration and the tables above
        self._started = threading.Event()  # set once start() has listed the stored workspaces

    # -- life cycle ---------------------------------------------------------------------------

    def start(self) -> None:
        """Bring every watched workspace back, each in its own thread (a big one is slow)."""
        for w in self.store.workspaces():
            if w.watching:
                root = Path(os.fsdecode(w.root))
                # Listed as live (starting) before any thread runs: a request that arrives
                # while it starts waits for it instead of hearing "not watched".
                workspace, ready = self._add_live(w.id, root)
                threading.Thread(
                    target=self._resume, args=(workspace, ready), daemon=True, name=f"snapd-start:{root}"
                ).start()
        self._started.set()

    def stop(self) -> None:
        with self._lock:
            live = list(self._live.values())
        for ws in live:
            ws.stop()

    def _workspace(self, ws_id: int, root: Path) -> Workspace:
        workspace = Workspace(self.store, ws_id, root, self.settings, finish_interrupted)
        workspace.notify = workspace_notifier(self.events, root, event_fields)
        return workspace

    def _add_live(self, ws_id: int, root: Path) -> tuple[Workspace, threading.Event]:
        ready = threading.Event()
        workspace = self._workspace(ws_id, root)
        with self._lock:
            self._live[ws_id] = workspace
            self._ready[ws_id] = ready
            self._errors.pop(ws_id, None)
        return workspace, ready

    def _resume(self, workspace: Workspace, ready: threading.Event) -> Workspace | None:
        ws_id, root = workspace.id, workspace.root
        try:
            self._recheck_place(ws_id, root)
            workspace.start()
            heap.settle()
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

    # -- registration -------------------------------------------------------------------------

    def register(self, path: Path) -> tuple[Workspace, Mark | None]:
        """Watch ``path`` (validated); capture its baseline the first time. Idempotent."""
        with self._lock:
            others = [(Path(os.fsdecode(w.root)), w.watching) for w in self.store.workspaces()]
            try:
                root = roots.validate(path, self.homes, self.own_dirs, others)
            except NotFound:  # a known workspace's root that went: say what brings it back
                real = path.resolve(strict=False)
                for w in self.store.workspaces():
                    if Path(os.fsdecode(w.root)) == real:
                        roots.check_root(real, self.store.root_id(w.id))
                raise
            existing = next((ws for ws in self._live.values() if ws.root == root), None)
            restart = None
            # Its root is checked here too, not only by its capture thread: a root replaced a
            # moment ago (its watches already dropped by the kernel) is not "already watched".
            if existing is not None and (
                existing.id in self._errors or existing.root_problem() is not None
            ):
                self._awaken(existing.id)
                existing.stop()
                restart = self._add_live(existing.id, existing.root)
                existing = None  # stopped for good: _restart lets the collector reclaim it
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
        heap.settle()
        log.info("workspace.watched", workspace=str(root), baseline=baseline.id if baseline else None)
        emit(self.events, "workspace.watched", root,
             {"resumed": False, "baseline": mark_json(baseline) if baseline else None})
        return workspace, baseline

    def _restart(self, workspace: Workspace, ready: threading.Event) -> tuple[Workspace, None]:
        """`snapctl watch ROOT` of a workspace in error (its root vanished or was replaced
        while watched, or it failed to start), already swapped for a fresh one: start it, as a
        restart of the daemon would. The same directory back (moved back, remounted) resumes
        with a reconcile scan; another one is refused as at start-up, and stays in error."""
        heap.release()  # the workspace this one replaces
        try:
            workspace.start()
        except SnapdError as exc:
            with self._lock:
                self._errors[workspace.id] = exc.message
            raise
        finally:
            ready.set()
        heap.settle()
        log.info("workspace.resumed", workspace=str(workspace.root))
        emit(self.events, "workspace.watched", workspace.root, {"resumed": True, "baseline": None})
        return workspace, None

    def unwatch(self, ws_id: int, root: Path) -> None:
        """Stop watching a workspace (its history stays); ``busy`` while it is starting."""
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
        del ws  # held here, it would survive the collection that reclaims it
        heap.release()
        self.store.set_watching(ws_id, False)

    # -- which workspace a request means ----------------------------------------------------------

    def find(
        self, workspace: bytes | None, cwd: bytes | None, *, register: bool = False
    ) -> tuple[Workspace, Mark | None]:
        """The live workspace a request means: ``workspace`` if given, else the one holding ``cwd``."""
        real, ws = self._live_holding(workspace, cwd)
        if ws is not None:
            self._wait_ready(ws.id)
            return ws, None
        if workspace is not None and not register:
            known = [w for w in self.store.workspaces() if Path(os.fsdecode(w.root)) == real]
            if known:
                try:
                    roots.check_root(real, self.store.root_id(known[0].id))
                except SnapdError as exc:  # `watch` would refuse: say what does bring it back
                    raise NotFound(f"{real} is not being watched: {exc.message}") from None
                raise NotFound(f"{real} is not being watched (`snapctl watch {real}` resumes it)")
            raise NotFound(f"{real} is not a watched workspace (`snapctl watch {real}` adds it)")
        if not register:
            raise NotFound(f"no watched workspace contains {real}: pass -w PATH, or `snapctl watch` it")
        return self.register(_auto_root(real))

    def _live_holding(self, workspace: bytes | None, cwd: bytes | None) -> tuple[Path, Workspace | None]:
        """The real path a request names, and the live workspace holding it (or None)."""
        where = workspace if workspace is not None else cwd
        if where is None:
            raise UsageError("no workspace given: pass -w PATH or run from inside a workspace")
        path = Path(os.fsdecode(where))
        # The server answers before start() has listed the stored workspaces as live: a
        # request in that moment must find its workspace starting, not "not watched".
        self._started.wait(30)
        try:
            real = path.resolve(strict=False)  # a root that is gone resolves as written
        except (OSError, RuntimeError) as exc:
            raise NotFound(f"cannot resolve {path}: {exc}") from exc
        real = _linked_worktree(real) or real
        with self._lock:
            candidates = [ws for ws in self._live.values() if ws.root == real or ws.root in real.parents]
        return real, max(candidates, key=lambda w: len(str(w.root))) if candidates else None

    def for_rollback(self, workspace: bytes | None, cwd: bytes | None) -> Workspace:
        """The live workspace a rollback means, whatever became of its root (its capture may
        have stopped: :meth:`adopt_root` brings the root back under it)."""
        real, ws = self._live_holding(workspace, cwd)
        if ws is None:
            ws = self._revive(real)
        if ws is None:
            return self.find(workspace, cwd)[0]  # says why it is not watched
        ready = self._ready.get(ws.id)
        if ready is not None and not ready.wait(READY_WAIT_S):
            self._wait_ready(ws.id)  # busy
        return ws

    def _revive(self, real: Path) -> Workspace | None:
        """A stored workspace holding ``real`` that is not watched, for a rollback, which
        resumes it as `watch` would: listed but not started, as one whose root went while
        watched, for :meth:`adopt_root` to start on its root (its own, new or made again); None
        if there is none. Refused, nothing changed, where `watch` refuses the place."""
        try:
            ws_id, root = self.stored(os.fsencode(real), None)
        except NotFound:
            return None
        if roots.root_state(root, self.store.root_id(ws_id)) != "missing":
            roots.check_place(root)
        with self._lock:
            if ws_id in self._live:  # resumed by a concurrent request
                return self._live[ws_id]
            workspace, ready = self._add_live(ws_id, root)
            self._errors[ws_id] = f"{root} is not being watched"
            self._dormant.add(ws_id)
            ready.set()
        return workspace

    @contextmanager
    def resuming(self, ws: Workspace) -> Iterator[None]:
        """Around a rollback of ``ws``: if :meth:`_revive` listed it and it was not started
        after all (its target refused, or a plan of a missing root), it is unlisted again."""
        try:
            yield
        finally:
            with self._lock:
                dormant = ws.id in self._dormant and self._live.get(ws.id) is ws
                if dormant:
                    self._dormant.discard(ws.id)
                    del self._live[ws.id], self._ready[ws.id], self._errors[ws.id]
            if dormant:
                ws.stop()

    def _awaken(self, ws_id: int) -> None:
        """A workspace :meth:`_revive` listed is started: it is watched from now on."""
        if ws_id in self._dormant:
            self._dormant.discard(ws_id)
            self.store.set_watching(ws_id, True)

    def adopt_root(self, ws: Workspace, *, create: bool) -> tuple[Workspace, str | None]:
        """``ws`` ready for a rollback, and what became of its root (docs/rollback.md, "A deleted
        or re-made root"): None when it is the directory the history belongs to; ``"new"`` when
        another directory is at its path: that one is adopted (the history goes on there,
        re-baselined: the reconcile scan captures what it holds, which the pre-rollback mark
        then keeps); ``"missing"`` when nothing is there: with ``create`` (an apply) the root is
        made again first and adopted the same way, else (a plan) it is left alone. A root on a
        file system that is not mounted is refused (mount it back). A workspace whose capture
        stopped while its own root was away is started again."""
        with self._lock:
            live = self._live.get(ws.id)
            if live is not ws and live is not None:  # swapped by a concurrent request: that one
                return self.adopt_root(live, create=create)
            state = roots.root_state(ws.root, self.store.root_id(ws.id))
            if state is None and ws.lost is None and ws.id not in self._errors:
                return ws, None
            if state == "missing" and not create:
                return ws, state
            if state == "missing":
                make_root(ws.root)
            self._awaken(ws.id)
            ws.stop()
            restart = self._add_live(ws.id, ws.root)
            if state is not None:
                self.store.set_root_id(ws.id, roots.identity(ws.root))
                log.warning("workspace.adopted", workspace=str(ws.root), was=state)
        del ws
        return self._restart(*restart)[0], state

    def stored(self, workspace: bytes | None, cwd: bytes | None) -> tuple[int, Path]:
        """A workspace id for read-only ops: live or not, named or holding ``cwd``."""
        where = workspace if workspace is not None else cwd
        if where is None:
            raise UsageError("no workspace given: pass -w PATH or run from inside a workspace")
        real = Path(os.fsdecode(where)).resolve(strict=False)
        real = _linked_worktree(real) or real
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

    # -- status -------------------------------------------------------------------------------

    def states(self) -> tuple[dict[int, Workspace], dict[int, str], dict[int, bool]]:
        """The live workspaces, why each unavailable one is (a failed start, or a root that
        vanished or was replaced since), and which are ready."""
        with self._lock:
            live = dict(self._live)
            errors = dict(self._errors)
            ready = {k: v.is_set() for k, v in self._ready.items()}
        for ws_id, running in live.items():
            if ready.get(ws_id) and ws_id not in errors and (why := running.root_problem()):
                errors[ws_id] = why
        return live, errors, ready


def _linked_worktree(real: Path) -> Path | None:
    """The linked work tree whose git dir (``.git/worktrees/NAME``) holds ``real``, if it does:
    the workspace such a directory means (:func:`snapd.capture.git.linked_worktree`)."""
    if "worktrees" not in real.parts:  # the common case, without a read
        return None
    top = git.linked_worktree(os.fsencode(real))
    return Path(os.fsdecode(top)) if top is not None else None


def _auto_root(where: Path) -> Path:
    """The workspace a mark from unwatched ``where`` registers: the enclosing git work
    tree's top, else ``where`` itself. From inside a ``.git`` (or ``.hg``...) directory, the
    directory holding it: git answers no work-tree question from in there, and the VCS
    directory itself is never a workspace. (Inside a git directory found by its shape
    alone — bare, or separate — there is no work tree to find: validation refuses it.)"""
    vcs = roots.vcs_dir_holding(where)
    if vcs is not None and (linked := _linked_worktree(where)) is not None:
        return linked  # a linked worktree's own git dir: that work tree, not the main one
    if vcs is not None and os.fsencode(vcs.name) in ignore.VCS_NAMES:
        where = vcs.parent
    top = git.git_toplevel(where) if where.is_dir() else None
    return top or where


def relative_path(root: Path, path: bytes, cwd: bytes | None = None, *, whole: str = "") -> bytes:
    """``path`` as a path relative to ``root``, or a usage error if it lies outside or is the
    root itself (a directory, not a path in it: ``whole`` says what to run for all of it).

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
    if rel in (b".", b""):
        raise UsageError(
            f"{os.fsdecode(path)} is the workspace's root directory {root}, not a path in it: "
            "name a file or a directory below it" + (f" ({whole})" if whole else "")
        )
    if rel.startswith(b"../") or rel == b"..":
        raise UsageError(f"{os.fsdecode(path)} is outside the workspace {root}")
    return rel
