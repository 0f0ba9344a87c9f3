"""The daemon's collector policy (snapd.daemon.heap) on a real service, in-process: a started
workspace's long-lived state is out of the collector's walks, and a workspace that stops for
good is reclaimed, not kept frozen."""

from __future__ import annotations

import gc
import os
import weakref
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from snapd.config import load_config
from snapd.daemon import heap
from snapd.daemon.service import Service
from snapd.rollback import apply, restore
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


def test_a_restore_runs_with_the_collector_paused_and_it_resumes(
    tmp_path: Path, service: Service, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A restore makes records of every path at once (its plan): no cyclic collection walks
    them from its plan's start to its fill's end; collection is back on once it ends (and
    stays off while another paused work still runs)."""
    root = workspace_tree(tmp_path)
    for i in range(3000):  # enough records that a collection would run without the pause
        (root / f"d{i % 60}").mkdir(exist_ok=True)
        (root / f"d{i % 60}" / f"g{i}.txt").write_text(f"more {i}\n")
    service.ops["watch"](path=os.fsencode(root))
    mark = service.ops["mark"](label="turn", workspace=os.fsencode(root))
    during: list[int] = []
    running = False
    plan, fill = restore.plan_of, apply.fill

    def planning(*args: Any, **kwargs: Any) -> Any:
        nonlocal running
        running = True
        return plan(*args, **kwargs)

    def filling(*args: Any, **kwargs: Any) -> Any:
        nonlocal running
        try:
            return fill(*args, **kwargs)
        finally:
            running = False

    def seen(phase: str, info: dict[str, int]) -> None:
        if phase == "start" and running:
            during.append(info["generation"])

    monkeypatch.setattr(restore, "plan_of", planning)
    monkeypatch.setattr(apply, "fill", filling)
    gc.callbacks.append(seen)
    try:
        copy = os.fsencode(tmp_path / "copy")
        service.ops["restore"](mark=mark["id"], workspace=os.fsencode(root), target=copy)
    finally:
        gc.callbacks.remove(seen)
    assert (tmp_path / "copy" / "d0" / "g0.txt").read_text() == "more 0\n"
    assert during == [], f"collections (of these generations) while the restore ran: {during}"
    assert gc.isenabled()
    with heap.paused():
        with heap.paused():
            assert not gc.isenabled()
        assert not gc.isenabled(), "another paused work still runs"
    assert gc.isenabled()
