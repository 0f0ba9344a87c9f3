"""A rollback's re-plan after its pre-rollback mark (``snapd.rollback.live``), in process.

``execute`` plans, then takes the barrier'd pre-rollback mark; when that mark captured a change
the plan was not made from, it plans again, and the new plan must still be the one the user
confirmed (its token) or nothing is applied. The change lands exactly in that window: the
workspace's real ``mark_under_lock`` (real store, real inotify, real barrier) is wrapped so a
concurrent writer changes a file just before the mark is taken.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from snapd.capture.workspace import Workspace
from snapd.config import CaptureSettings
from snapd.errors import PlanChanged
from snapd.rollback import live
from snapd.store.store import Store

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def ws(tmp_path: Path) -> Iterator[Workspace]:
    root = tmp_path / "ws"
    root.mkdir()
    store = Store.open(tmp_path / "store")
    w = Workspace(store, store.add_workspace(os.fsencode(root)), root, CaptureSettings())
    try:
        w.start()
        yield w
    finally:
        w.stop()
        store.close()


def test_a_change_the_pre_rollback_mark_captures_is_checked_against_the_confirmed_token(
    ws: Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    a, b = ws.root / "a.txt", ws.root / "b.txt"
    a.write_text("a at M\n")
    b.write_text("b at M\n")
    target = ws.mark("m")
    a.write_text("a now\n")
    token = live.propose(ws, target)["plan"]["token"]

    real, calls = ws.mark_under_lock, []

    def mark_after_a_write(label: str, **meta: Any) -> Any:
        if not calls:  # a concurrent writer, after the plan and before the mark's barrier
            b.write_text("b written after the plan was confirmed\n")
        calls.append(label)
        return real(label, **meta)

    monkeypatch.setattr(ws, "mark_under_lock", mark_after_a_write)
    with pytest.raises(PlanChanged) as info:
        live.execute(ws, target, (), False, token)
    assert calls == ["pre-rollback"]
    assert b.read_text() == "b written after the plan was confirmed\n", "applied a plan nobody confirmed"
    assert a.read_text() == "a now\n"
    new = info.value.details["plan"]
    assert new["token"] != token and {op["path"] for op in new["ops"]} == {"a.txt", "b.txt"}
