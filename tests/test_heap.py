"""The daemon's collector policy (snapd.daemon.heap) on a real service, in-process: a started
workspace's long-lived state is out of the collector's walks, and a workspace that stops for
good is reclaimed, not kept frozen."""

from __future__ import annotations

import gc
import os
import weakref
from collections.abc import Iterator
from pathlib import Path

import pytest

from snapd.config import load_config
from snapd.daemon import heap
from snapd.daemon.service import Service
from snapd.store.store import Store

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def service(tmp_path: Path) -> Iterator[Service]:
    store = Store.open(tmp_path / "store")
    config = load_config({}, {"home": str(tmp_path / "snapd")})
    svc = Service(store, config, (tmp_path / "home",), lambda: None)
    heap.manage()
    svc.start()
    try:
        yield svc
    finally:
        heap.manage(False)
        gc.unfreeze()  # the rest of the test session is not the daemon
        svc.stop()
        store.close()


def tracked(obj: object) -> bool:
    """Whether the collector's generations (not its permanent one) hold ``obj``."""
    return any(o is obj for o in gc.get_objects())


def workspace_tree(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    for i in range(50):
        (root / f"d{i % 5}").mkdir(parents=True, exist_ok=True)
        (root / f"d{i % 5}" / f"f{i}.txt").write_text(f"content {i}\n")
    return root


def test_a_started_workspace_is_kept_out_of_the_collectors_walks(tmp_path: Path, service: Service) -> None:
    root = workspace_tree(tmp_path)
    service.ops["watch"](path=os.fsencode(root))
    ws, _ = service.registry.find(os.fsencode(root), None)
    assert not tracked(ws) and not tracked(ws.capturer)
    assert gc.get_freeze_count() > 0
    service.ops["mark"](label="turn", workspace=os.fsencode(root))  # still serves


def test_a_workspace_unwatched_is_reclaimed_not_kept_frozen(tmp_path: Path, service: Service) -> None:
    root = workspace_tree(tmp_path)
    service.ops["watch"](path=os.fsencode(root))
    ws, _ = service.registry.find(os.fsencode(root), None)
    gone = weakref.ref(ws)
    del ws
    service.ops["unwatch"](workspace=os.fsencode(root))
    gc.collect()
    assert gone() is None
