"""A workspace that is NOT watched (unwatched, or refused by `watch`) whose root was deleted
or replaced by a new directory (docs/rollback.md, "A deleted or re-made root"): a rollback or
undo resumes watching it as `watch` would and adopts the root as for a watched workspace, and
every message met on the way names a command that then works. Real daemon, real CLI."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

from e2e_helpers import Daemon, describe, snap_diff, snapshot, wait_for, write


def _yes(d: Daemon, *args: str | Path) -> tuple[int, dict[str, Any]]:
    """``snapctl ARGS --yes --json`` from ``/``: (exit, reply)."""
    cp = d.ctl(*args, "--yes", "--json", cwd="/", check=False)
    try:
        return cp.returncode, json.loads(cp.stdout)
    except json.JSONDecodeError:
        raise AssertionError(describe(cp) + d.log()[-3000:]) from None


def _out(cp: subprocess.CompletedProcess[bytes]) -> str:
    return (cp.stdout + cp.stderr).decode(errors="replace")


def _entry(d: Daemon, root: Path) -> dict[str, Any]:
    return next(w for w in d.call("status")["workspaces"] if w["root"] == str(root))


def _unwatched(d: Daemon, ws: Path) -> str:
    """Mark ``m`` over a small tree, then `unwatch`: the mark's id."""
    write(ws / "a", "a\n")
    write(ws / "sub" / "b", "b\n", 0o640)
    m: str = d.ctl_json("mark", "m", cwd=ws)["id"]
    d.ctl("unwatch", "-w", ws, cwd="/")
    assert _entry(d, ws)["watching"] is False
    return m


def _advice(text: str, ws: Path) -> None:
    """The message names the rollback that brings the root back, and never `forget`."""
    assert f"snapctl rollback --to MARK -w {ws}" in text, text
    assert not re.search(r"\bforget\b", text), text


def _goes_on(d: Daemon, ws: Path) -> None:
    """Watched again, one history: the old marks in `log`, a later mark and a rollback to it."""
    w = wait_for(lambda: (x := _entry(d, ws))["watching"] and x.get("state") == "ready" and x,
                 what="the workspace watched and ready")
    assert "error" not in w, w  # type: ignore[operator]
    labels = [x["label"] for x in d.ctl_json("log", "--all", "-w", ws)["marks"]]
    assert "m" in labels and "baseline" in labels, labels
    write(ws / "later.txt", "later\n")
    later = d.ctl_json("mark", "later", cwd=ws)["id"]
    write(ws / "later.txt", "changed\n")
    code, r = _yes(d, "rollback", "--to", later, "-w", ws)
    assert code == 0, r
    assert (ws / "later.txt").read_text() == "later\n"


def test_the_unwatched_deleted_root_sequence_has_a_way_forward(daemon: Daemon, ws: Path) -> None:
    """The sequence of issue 30 that went in a circle: unwatch, rm -rf, rollback (refused:
    "not being watched"), watch (refused: "does not exist"), restore into the root, watch
    (refused: "replaced"), rollback (refused again). Each refusal now names the rollback,
    and the rollback works from any point of it."""
    m = _unwatched(daemon, ws)
    want = snapshot(ws, with_root=True)
    shutil.rmtree(ws)

    # Every message on the way names a command that works.
    watch = daemon.ctl("watch", ws, cwd="/", check=False)
    assert watch.returncode == 6, describe(watch)
    _advice(_out(watch), ws)
    mark = daemon.ctl("mark", "x", "-w", ws, cwd="/", check=False)
    assert mark.returncode != 0, describe(mark)
    _advice(_out(mark), ws)
    diff = daemon.ctl("diff", m, "-w", ws, cwd="/", check=False)  # against the workspace now
    assert diff.returncode == 6, describe(diff)
    _advice(_out(diff), ws)

    # The plan changes nothing: nothing made, still unwatched.
    plan = daemon.ctl("rollback", "--to", m, "-w", ws, "--dry-run", "--json", cwd="/", check=False)
    assert plan.returncode == 0, describe(plan)
    assert json.loads(plan.stdout)["root"] == "missing"
    assert not ws.exists(), "a dry run must not make the root"
    w = _entry(daemon, ws)
    assert w["watching"] is False and "error" not in w and "state" not in w, w

    # `snapctl restore` into the root's path makes a new directory there: `watch` refuses it
    # (it never adopts a new directory) and says the rollback adopts it, which it does.
    restored = daemon.ctl_json("restore", m, "--target", ws, "-w", ws)
    assert restored["ok"], restored
    watch = daemon.ctl("watch", ws, cwd="/", check=False)
    assert watch.returncode == 7 and "replaced" in _out(watch), describe(watch)
    _advice(_out(watch), ws)
    write(ws / "extra", "made after the restore\n")
    held = snapshot(ws, with_root=True)

    code, r = _yes(daemon, "rollback", "--to", m, "-w", ws)
    assert code == 0, r
    assert r["root"] == "new" and r["pre_rollback"], r
    got = snapshot(ws, with_root=True)
    assert got == want, snap_diff(got, want)

    code, r = _yes(daemon, "undo", "-w", ws)
    assert code == 0, r
    got = snapshot(ws, with_root=True)
    assert got == held, snap_diff(got, held)
    _goes_on(daemon, ws)


def test_rollback_of_an_unwatched_deleted_root_makes_it_again(daemon: Daemon, ws: Path) -> None:
    m = _unwatched(daemon, ws)
    want = snapshot(ws, with_root=True)
    shutil.rmtree(ws)

    code, r = _yes(daemon, "rollback", "--to", m, "-w", ws)
    assert code == 0, r
    assert r["root"] == "missing", r
    got = snapshot(ws, with_root=True)
    assert got == want, snap_diff(got, want)

    code, r = _yes(daemon, "undo", "-w", ws)  # the state before: the root made empty, 0700
    assert code == 0, r
    assert list(ws.iterdir()) == [] and ws.stat().st_mode & 0o777 == 0o700
    _goes_on(daemon, ws)


def test_rollback_of_an_unwatched_replaced_root_adopts_it(daemon: Daemon, ws: Path) -> None:
    m = _unwatched(daemon, ws)
    want = snapshot(ws, with_root=True)
    shutil.rmtree(ws)
    ws.mkdir(mode=0o755)
    write(ws / "a", "not a\n")
    write(ws / "fresh.txt", "made in the new directory\n")
    held = snapshot(ws, with_root=True)

    for args in (("mark", "x", "-w", ws), ("diff", m, "-w", ws), ("watch", ws)):
        cp = daemon.ctl(*args, cwd="/", check=False)
        assert cp.returncode != 0, describe(cp)
        _advice(_out(cp), ws)
    plan = daemon.ctl("rollback", "--to", m, "-w", ws, "--dry-run", "--json", cwd="/", check=False)
    assert plan.returncode == 0, describe(plan)
    assert json.loads(plan.stdout)["root"] == "new"

    code, r = _yes(daemon, "rollback", "--to", m, "-w", ws)
    assert code == 0, r
    got = snapshot(ws, with_root=True)
    assert got == want, snap_diff(got, want)

    code, r = _yes(daemon, "undo", "-w", ws)
    assert code == 0, r
    got = snapshot(ws, with_root=True)
    assert got == held, snap_diff(got, held)
    _goes_on(daemon, ws)


def test_undo_and_a_bad_target_of_an_unwatched_workspace(daemon: Daemon, ws: Path) -> None:
    """`undo` alone of an unwatched workspace with a deleted root: nothing to undo (it was
    never rolled back) is said, and changes nothing, as a mark that does not exist; an
    unwatched workspace with its root in place is resumed by a rollback as by `watch`."""
    m = _unwatched(daemon, ws)
    shutil.rmtree(ws)
    code, r = _yes(daemon, "undo", "-w", ws)
    assert code != 0 and "never been rolled back" in json.dumps(r), r
    code, r = _yes(daemon, "rollback", "--to", "no-such-mark", "-w", ws)
    assert code != 0, r
    w = _entry(daemon, ws)
    assert not ws.exists() and w["watching"] is False and "error" not in w, w

    ws.mkdir()  # in place again, but a new directory: the rollback adopts it
    code, r = _yes(daemon, "rollback", "--to", m, "-w", ws)
    assert code == 0 and r["root"] == "new", r
    daemon.ctl("unwatch", "-w", ws, cwd="/")
    write(ws / "a", "edited while unwatched\n")
    code, r = _yes(daemon, "rollback", "--to", m, "-w", ws)  # its own root: just resumed
    assert code == 0 and "root" not in r, r
    assert (ws / "a").read_text() == "a\n"
    code, r = _yes(daemon, "undo", "-w", ws)
    assert code == 0, r
    assert (ws / "a").read_text() == "edited while unwatched\n"
    _goes_on(daemon, ws)


def test_a_new_root_that_already_matches_promises_no_undo(daemon: Daemon, ws: Path) -> None:
    """Restored into its own path, the new directory already matches the mark: the rollback
    adopts it and changes nothing, so its note promises no `undo` (there is none to do)."""
    m = _unwatched(daemon, ws)
    shutil.rmtree(ws)
    daemon.ctl_json("restore", m, "--target", ws, "-w", ws)
    code, r = _yes(daemon, "rollback", "--to", m, "-w", ws)
    assert code == 0 and r["root"] == "new" and r["pre_rollback"] is None, r
    assert "snapctl undo" not in r["root_note"] and "nothing is changed" in r["root_note"], r
    code, u = _yes(daemon, "undo", "-w", ws)
    assert code == 6 and "never been rolled back" in json.dumps(u), u
    _goes_on(daemon, ws)
