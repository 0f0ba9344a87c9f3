"""A daemon killed after every step of a rollback's apply finishes it at the next start.

The daemon is started by ``tests/crash_launcher.py`` armed with ``apply.:N`` (the safeio crash seam: exit
right after the N-th persistent step of an apply), the rollback request dies with it, and a
normal restart must leave the workspace exactly at the mark (or untouched, when the crash
came before the journal), with no ``.snapd-*~`` temp file anywhere and the recovery reported
in ``status``. N runs from 1 until a rollback completes without crashing.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from e2e_helpers import base_env, start_daemon, wait_for

from snapd.errors import SnapdError
from snapd.ipc.client import Client

pytestmark = pytest.mark.timeout(600)


def listing(root: Path) -> dict[str, tuple[str, int, bytes]]:
    out: dict[str, tuple[str, int, bytes]] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            p = Path(dirpath, name)
            rel = str(p.relative_to(root))
            st = p.lstat()
            if p.is_symlink():
                out[rel] = ("link", 0, os.readlink(p).encode())
            elif p.is_dir():
                out[rel] = ("dir", st.st_mode & 0o7777, b"")
            else:
                out[rel] = ("file", st.st_mode & 0o7777, p.read_bytes())
    return out


def make_scene(base: Path) -> tuple[Path, dict[str, tuple[str, int, bytes]]]:
    """A workspace, its state at mark "a" (returned), and a different current state."""
    root = base / "ws"
    (root / "src").mkdir(parents=True)
    (root / "keep").mkdir()
    for i in range(4):
        (root / "src" / f"f{i}.txt").write_text(f"original {i}\n")
    (root / "gone.txt").write_text("will be deleted\n")
    os.symlink("src/f0.txt", root / "link")
    return root, {}


def change_scene(root: Path) -> None:
    for i in range(3):
        (root / "src" / f"f{i}.txt").write_text(f"changed {i}\n")
    (root / "gone.txt").unlink()
    (root / "new").mkdir()
    (root / "new" / "n.txt").write_text("new\n")
    os.chmod(root / "src" / "f3.txt", 0o600)
    (root / "keep").rmdir()
    os.unlink(root / "link")
    os.symlink("gone.txt", root / "link")


def temps(root: Path) -> list[str]:
    return [str(p) for p in root.rglob(".snapd-*~")]


def test_kill_after_every_apply_step_then_restart_finishes_the_rollback(tmp_path: Path) -> None:
    n = 0
    crashed = 0
    while True:
        n += 1
        assert n < 200, "the rollback never completed: the crash seam is not counting apply steps"
        base = tmp_path / f"n{n}"
        root, _ = make_scene(base)
        home = base / "snapd-home"
        env = base_env(home)
        d = start_daemon(home, env)
        d.ctl("watch", str(root))
        d.ctl("mark", "a", "-w", str(root))
        target = listing(root)
        change_scene(root)
        d.ctl("mark", "b", "-w", str(root))
        before = listing(root)
        assert d.stop() == 0
        d = start_daemon(home, env, crash_after=f"apply.:{n}")
        try:
            with Client(d.endpoint, 20.0) as c:
                c.call("rollback_apply", workspace=os.fsencode(root), to="a")
            completed = True
        except SnapdError:
            completed = False
        if completed:
            assert d.stop() == 0
            assert listing(root) == target
            break
        crashed += 1
        assert d.wait_exit(20) == 86, d.log()[-3000:]
        d2 = start_daemon(home, env)
        try:

            def ready(d: Any = d2, r: Path = root) -> dict[str, Any] | None:
                st = d.call("status")
                w = next(x for x in st["workspaces"] if x["root"] == str(r))
                return st if w.get("state") == "ready" else None

            st = wait_for(ready, 30)
            w = next(x for x in st["workspaces"] if x["root"] == str(root))
            now = listing(root)
            assert now in (target, before), f"after a crash at step {n}: neither state"
            if w.get("recovered_rollback") is not None:
                assert now == target
                assert any("interrupted by a crash" in x for x in st["warnings"])
            assert temps(root) == []
            # and the daemon works on: the state is captured, undo is possible
            d2.ctl("mark", "after", "-w", str(root))
        finally:
            assert d2.stop() == 0
    assert crashed >= 5, f"only {crashed} crash points: the seam is not in the apply path"
