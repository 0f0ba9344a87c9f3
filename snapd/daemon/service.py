"""The daemon's service: the protocol's ops over the store and the live workspaces.

It puts the parts together and dispatches: the workspace registry (:mod:`.registry`), the GC
schedule (:mod:`.maintenance`), and the ops, grouped by subject (:mod:`.ops`). Every op is one
method ``op_NAME`` of one group; :class:`Service` checks at start-up that the groups cover
exactly the protocol's ops.

Requests arrive on the server's worker threads, so a slow operation (a baseline, a barrier,
a GC) never blocks another client, and one workspace's lock never blocks another's marks.
Every failure a user can cause is a :class:`SnapdError`, which the server turns into an
error reply; the daemon keeps serving.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from snapd.config import Config
from snapd.daemon.events import EventSink, NoEvents
from snapd.daemon.maintenance import Maintenance
from snapd.daemon.ops.daemon import DaemonOps
from snapd.daemon.ops.files import FileOps
from snapd.daemon.ops.marks import MarkOps
from snapd.daemon.ops.remote import RemoteOps
from snapd.daemon.ops.revert import RevertOps
from snapd.daemon.ops.rollback import RollbackOps
from snapd.daemon.ops.workspaces import WorkspaceOps
from snapd.daemon.pusher import Pusher
from snapd.daemon.registry import Registry
from snapd.daemon.remotes import Remotes
from snapd.ipc import protocol
from snapd.ipc.protocol import PeerInfo, Request
from snapd.rollback.running import Running
from snapd.store.store import Store


class Service:
    def __init__(
        self,
        store: Store,
        config: Config,
        homes: tuple[Path, ...],
        request_stop: Callable[[], None],
        events: EventSink | None = None,
        remote_password: str | None = None,
    ) -> None:
        """``homes``: the user's home directory ($HOME and the passwd entry), never a workspace.
        ``remote_password``: the daemon's own ``SNAPD_REMOTE_PASSWORD`` (on-mark pushes)."""
        sink: EventSink = events or NoEvents()
        self.registry = Registry(store, config.capture, homes, config.locations.own_dirs, sink)
        self.maintenance = Maintenance(store, config.retention, config.gc_interval_s, sink)
        running = Running()  # restores, rollbacks and remote ops in flight: status shows them
        loc = config.locations
        self.remotes = Remotes(store, config.remotes, loc.config_file, loc.data_dir, running, remote_password)
        self.pusher = Pusher(self.remotes)
        self.daemon = DaemonOps(
            store, self.registry, self.maintenance, sink, config.endpoint, request_stop, config.warnings,
            running, self.remotes,
        )
        self.workspaces = WorkspaceOps(store, self.registry, sink, self.maintenance)
        self.marks = MarkOps(store, self.registry, self.pusher.wake)
        self.rollback = RollbackOps(store, self.registry, sink, running, self.remotes)
        self.revert = RevertOps(store, self.registry, sink, running)
        self.files = FileOps(store, self.registry, config.retention)
        self.remote = RemoteOps(store, self.registry, self.remotes, self.pusher, running)
        #: op name -> its handler: the bound method ``op_NAME`` of one group
        self.ops: dict[str, Callable[..., dict[str, Any]]] = {
            name.removeprefix("op_"): getattr(group, name)
            for group in (
                self.daemon, self.workspaces, self.marks, self.rollback, self.revert, self.files, self.remote
            )
            for name in dir(group)
            if name.startswith("op_")
        }
        if set(self.ops) != protocol.OPS:
            odd = set(self.ops) ^ protocol.OPS
            raise AssertionError(f"ops without a handler, or handlers of no op: {sorted(odd)}")

    def start(self) -> None:
        """Bring every watched workspace back, and start the GC schedule and the on-mark pusher."""
        self.registry.start()
        self.maintenance.start()
        self.pusher.start()

    def stop(self) -> None:
        self.pusher.stop()
        self.maintenance.stop()
        self.registry.stop()

    def handle(self, req: Request, peer: PeerInfo) -> dict[str, Any]:
        """Run one validated request: its arguments are exactly what the op declares."""
        return self.ops[req.op](**req.args)
