"""Regressions found by adversarial review: each test failed before its fix."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
from e2e_helpers import start_daemon

from snapd.config import DAY_NS, Retention
from snapd.errors import UsageError
from snapd.store import gc, gcmark, trees
from snapd.store.refs import parse_ref
from snapd.store.store import Store
from snapd.store.verify import verify

pytestmark = pytest.mark.timeout(120)


def test_directory_moved_out_and_recreated_stays_watched(tmp_path: Path) -> None:
    root = tmp_path / "ws"
    (root / "cache").mkdir(parents=True)
    (root / "cache" / "a").write_text("old\n")
    outside = tmp_path / "outside"
    outside.mkdir()
    d = start_daemon(tmp_path / "snapd-home")
    try:
        d.ctl("watch", str(root))
        os.rename(root / "cache", outside / "cache")
        (root / "cache").mkdir()  # same name, before the move-out is resolved
        time.sleep(0.2)  # past the watcher's move-pairing grace: the case that went blind
        (root / "cache" / "b").write_text("new\n")
        d.ctl("mark", "m1", "-w", str(root))
        assert d.ctl("cat", "m1", "cache/b", "-w", str(root)).stdout == b"new\n"
        (root / "cache" / "c").write_text("more\n")
        d.ctl("mark", "m2", "-w", str(root))
        assert d.ctl("cat", "m2", "cache/c", "-w", str(root)).stdout == b"more\n"
        assert d.ctl("cat", "m2", "cache/a", "-w", str(root), check=False).returncode != 0
    finally:
        assert d.stop() == 0


def test_directory_swapped_for_a_new_one_drops_old_children(tmp_path: Path) -> None:
    root = tmp_path / "ws"
    (root / "build").mkdir(parents=True)
    (root / "build" / "artifact").write_text("A\n")
    d = start_daemon(tmp_path / "snapd-home")
    try:
        d.ctl("watch", str(root))
        d.ctl("mark", "before", "-w", str(root))
        os.rename(root / "build", root / "x")
        (root / "build").mkdir()
        for p in (root / "x").iterdir():
            p.unlink()
        (root / "x").rmdir()
        d.ctl("mark", "after", "-w", str(root))
        assert d.ctl("cat", "after", "build/artifact", "-w", str(root), check=False).returncode != 0
        d.ctl("rollback", "--to", "before", "--yes", "-w", str(root))
        assert (root / "build" / "artifact").read_text() == "A\n"
    finally:
        assert d.stop() == 0


def test_gc_spares_an_old_object_a_concurrent_mark_reuses(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    s = Store.open(tmp_path / "store")
    ws = s.add_workspace(b"/x")
    old, new = os.urandom(5000), os.urandom(5000)
    with s.batch() as b:
        k = b.put(old)
        t0 = b.apply(None, {b"f": trees.Entry("file", 0o644, len(old), k)})
        b.add_mark(ws, "old", t0, created=time.time_ns() - 30 * DAY_NS)
    with s.batch() as b:
        k2 = b.put(new)
        t1 = b.apply(t0, {b"f": trees.Entry("file", 0o644, len(new), k2)})
        b.add_mark(ws, "new", t1)
    real_live = gcmark.live_keys

    def live_then_a_mark_reusing_the_old_content(*args: object, **kwargs: object) -> set[str]:
        live = real_live(*args, **kwargs)  # type: ignore[arg-type]
        with s.batch() as b:  # the user reverts f while GC runs: the mark reuses a dead object
            key = b.put(old)
            b.add_mark(ws, "revert", b.apply(t1, {b"f": trees.Entry("file", 0o644, len(old), key)}))
        return live

    monkeypatch.setattr(gcmark, "live_keys", live_then_a_mark_reusing_the_old_content)
    gc.run(s, Retention(grace_s=0))
    assert verify(s).ok
    revert = s.resolve(ws, "revert")
    assert s.get(trees.lookup(s.load_node, revert.tree, b"f").key) == old
    s.close()


def test_budget_never_evicts_marks_when_kept_data_alone_exceeds_it(tmp_path: Path) -> None:
    s = Store.open(tmp_path / "store")
    ws = s.add_workspace(b"/x")
    tree = None
    for i in range(6):
        data = os.urandom(200_000)
        with s.batch() as b:
            key = b.put(data)
            e = trees.Entry("file", 0o644, len(data), key)
            tree = b.apply(tree, {b"f": e})
            b.add_version(ws, b"f", time.time_ns(), e)  # versions in the age window keep every byte
            b.add_mark(ws, f"m{i}", tree)
    rep = gc.run(s, Retention(budget_bytes=500_000, grace_s=0))
    assert rep.evicted == [] and rep.warnings
    assert len(s.marks(ws)) == 6
    s.close()


def test_absurd_back_reference_is_a_usage_error() -> None:
    with pytest.raises(UsageError):
        parse_ref("m1~99999999999999999999")
    assert parse_ref("m1~3").back == 3


def test_forget_while_the_baseline_runs_is_refused_clearly(tmp_path: Path) -> None:
    import threading

    from e2e_helpers import wait_for

    from snapd.errors import Busy
    from snapd.ipc.client import Client

    root = tmp_path / "ws"
    for i in range(40):
        sub = root / f"d{i}"
        sub.mkdir(parents=True)
        for j in range(500):
            (sub / f"f{j}").write_text(f"{i}-{j}\n" * 20)
    d = start_daemon(tmp_path / "snapd-home")
    try:
        result: dict[str, object] = {}

        def watch() -> None:
            with Client(d.endpoint, 300) as c:
                result["watch"] = c.call("watch", path=os.fsencode(root))

        t = threading.Thread(target=watch)
        t.start()

        def starting() -> bool:
            st = d.call("status")
            return any(w["root"] == str(root) and w.get("state") == "starting" for w in st["workspaces"])

        wait_for(starting, 30)
        with Client(d.endpoint, 30) as c, pytest.raises(Busy, match="still starting"):
            c.call("forget", workspace=os.fsencode(root))
        t.join(300)
        assert "watch" in result
        d.ctl("forget", "--yes", str(root))  # once ready, forgetting works (--yes: no terminal here)
    finally:
        assert d.stop() == 0


def test_an_overflow_reported_during_a_flush_still_gets_its_full_scan(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Found by CI under load: a subtree scan merged in a later overflow flag and dropped it."""
    from snapd.capture.events import OVERFLOW, WatchEvent
    from snapd.capture.workspace import Workspace
    from snapd.config import CaptureSettings

    root = tmp_path / "ws"
    for d in ("a", "b"):
        (root / d).mkdir(parents=True)
        (root / d / "f").write_text(d)
    store = Store.open(tmp_path / "store")
    ws = Workspace(store, store.add_workspace(os.fsencode(root)), root, CaptureSettings())
    ws.start()
    try:
        with ws.lock:  # keep the capture thread out while the scene is set up
            (root / "a" / "f").unlink()
            (root / "a").rmdir()
            (root / "b" / "f").unlink()  # its event is "lost" in the overflow
            real_scan = ws.recorder.scan
            injected = []

            def scan_then_overflow(top: bytes, *args: object, **kw: object) -> None:
                real_scan(top, *args, **kw)  # type: ignore[arg-type]
                if top == b"a" and not injected:  # the overflow arrives mid-flush
                    injected.append(True)
                    ws.on_events([OVERFLOW])

            monkeypatch.setattr(ws.recorder, "scan", scan_then_overflow)
            ws.on_events([WatchEvent("deleted", b"a", None, True)])
            ws.dirty.take()  # only what the test injects below counts
            ws.on_events([WatchEvent("deleted", b"a", None, True)])
            ws.recorder.capture_dirty()
        assert injected
        files = {p for p, e in trees.walk(store.load_node, ws.tree) if e.kind == "file"} if ws.tree else set()
        assert files == set(), files  # b/f is gone too: the overflow's full scan ran
    finally:
        ws.stop()
        store.close()


def test_a_directory_replaced_during_a_flush_still_gets_its_subtree_scan(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Found by CI under load (seeded directory-move bursts): a directory replaced while the
    capture thread scanned another one had its subtree-scan request merged into that capture
    and dropped, so the old directory's children stayed in the tree (and in marks) for good."""
    from snapd.capture.events import WatchEvent
    from snapd.capture.workspace import Workspace
    from snapd.config import CaptureSettings

    root = tmp_path / "ws"
    for d in ("a", "b"):
        (root / d).mkdir(parents=True)
        (root / d / "f").write_text(d)
    (root / "b" / "old").write_text("old")
    store = Store.open(tmp_path / "store")
    ws = Workspace(store, store.add_workspace(os.fsencode(root)), root, CaptureSettings())
    ws.start()
    try:
        with ws.lock:  # keep the capture thread out while the scene is set up
            (root / "a" / "new").write_text("new")
            real_scan = ws.recorder.scan
            injected = []

            def scan_then_replace(top: bytes, *args: object, **kw: object) -> None:
                real_scan(top, *args, **kw)  # type: ignore[arg-type]
                if top == b"a" and not injected:  # b is replaced while a is scanned
                    injected.append(True)
                    os.rename(root / "b", tmp_path / "b.gone")
                    (tmp_path / "fresh").mkdir()
                    (tmp_path / "fresh" / "f").write_text("fresh")
                    os.rename(tmp_path / "fresh", root / "b")
                    ws.on_events(
                        [
                            WatchEvent("deleted", b"b", None, True),
                            WatchEvent("created", b"b", None, True),
                            WatchEvent("created", b"b/f", None, False),
                        ]
                    )

            monkeypatch.setattr(ws.recorder, "scan", scan_then_replace)
            ws.dirty.take()  # only what the test injects below counts
            ws.on_events([WatchEvent("moved", b"a", b"a", True)])
            ws.recorder.capture_dirty()
        assert injected
        assert ws.tree is not None
        files = {p for p, e in trees.walk(store.load_node, ws.tree) if e.kind == "file"}
        assert files == {b"a/f", b"a/new", b"b/f"}, files  # b/old went with the old b
    finally:
        ws.stop()
        store.close()
