"""Revert in the daemon: the changes of a span, a turn or a session's turns taken back on top of
the workspace as it is now, keeping what came after (docs/rollback.md, "Revert").

A real ``snapd start``, real files, requests through :class:`snapd.ipc.client.Client` (the CLI's
own tests are tests/test_revert_cli.py). What is proved: a turn reverted with later edits kept
(text merged); created paths deleted and deleted ones recreated; an overlap refused with nothing
written and no mark; markers mode; two sessions, one side by side with the other, one reverted;
undo of a revert; a crash mid-revert finished at the next start; a changed workspace between
plan and apply caught by the token. The spans themselves (pure) are checked at the end.
"""

from __future__ import annotations

import dataclasses
import os
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest
from e2e_helpers import Daemon, Snap, base_env, snap_diff, snapshot, start_daemon, wait_for, write

from snapd import timeref
from snapd.capture.workspace import Workspace
from snapd.config import Retention
from snapd.errors import PlanChanged, RevertConflict, SnapdError, UsageError
from snapd.ipc.client import Client
from snapd.ipc.events import Subscriber, events_endpoint
from snapd.rollback import spans
from snapd.rollback.revert_target import RevertTarget
from snapd.store import gc, trees
from snapd.store.records import Mark
from snapd.store.store import Store

pytestmark = pytest.mark.timeout(120)

LINES = [f"line {i}\n" for i in range(1, 11)]


def text(lines: list[str]) -> str:
    return "".join(lines)


def edited(i: int, new: str, lines: list[str] | None = None) -> list[str]:
    """``lines`` (LINES) with line ``i`` (from 1) replaced."""
    out = list(lines or LINES)
    out[i - 1] = new
    return out


def watched(d: Daemon, tmp_path: Path) -> tuple[Path, Client]:
    root = tmp_path / "ws"
    root.mkdir()
    c = d.client(60.0)
    c.call("watch", path=os.fsencode(root))
    return root, c


def mark(c: Client, root: Path, label: str, session: str | None = None) -> str:
    args: dict[str, Any] = {"workspace": os.fsencode(root), "label": label}
    if session is not None:
        args.update(session=session, agent="test")
    return str(c.call("mark", **args)["id"])


def revert(c: Client, root: Path, **args: Any) -> dict[str, Any]:
    """Plan, then apply with the plan's token: the reply of the apply."""
    plan = c.call("revert_plan", workspace=os.fsencode(root), **args)
    return c.call("revert_apply", workspace=os.fsencode(root), token=plan["plan"]["token"], **args)


def next_event(sub: Subscriber, kind: str, timeout: float = 10.0) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        event = sub.receive(0.2)
        if event is not None and event["event"] == kind:
            return event
    raise AssertionError(f"no {kind} event within {timeout}s")


def marks(c: Client, root: Path) -> list[dict[str, Any]]:
    return list(c.call("log", workspace=os.fsencode(root), limit=1000)["marks"])


def same(got: Snap, want: Snap) -> None:
    assert got == want, snap_diff(got, want)


# -- one turn --------------------------------------------------------------------------------------


def test_a_turn_reverted_keeps_later_edits_merged_and_its_created_and_deleted_paths(
    daemon: Daemon, tmp_path: Path
) -> None:
    root, c = watched(daemon, tmp_path)
    write(root / "a.txt", text(LINES))
    write(root / "gone.txt", "deleted in the turn\n")
    write(root / "other.txt", "untouched\n")
    mark(c, root, "before")
    start = mark(c, root, "turn-start", "s1")
    write(root / "a.txt", text(edited(2, "turn's line 2\n")))
    write(root / "new" / "made.txt", "created in the turn\n")
    (root / "gone.txt").unlink()
    mark(c, root, "turn-end", "s1")
    # later work, not overlapping the turn's: kept
    write(root / "a.txt", text(edited(9, "user's line 9\n", edited(2, "turn's line 2\n"))))
    write(root / "later.txt", "after the turn\n")
    before = snapshot(root)

    plan = c.call("revert_plan", workspace=os.fsencode(root), turn=start)
    assert plan["target"]["id"] == "revert"
    assert plan["revert"]["merged"] == ["a.txt"] and plan["revert"]["sessions_kept"] == []
    assert [s["from"]["id"] for s in plan["revert"]["spans"]] == [start]
    assert snapshot(root) == before, "a plan writes nothing"

    with Subscriber(events_endpoint(daemon.endpoint), [os.fsencode(root)]) as sub:
        assert sub.connect(10.0), "no subscription to the daemon's events"
        done = c.call("revert_apply", workspace=os.fsencode(root), turn=start, token=plan["plan"]["token"])
        event = next_event(sub, "revert.applied")
    assert done["ok"], done
    assert event["target"]["id"] == "revert" and event["pre_rollback"] == done["pre_rollback"]
    assert [s["from"]["id"] for s in event["revert"]] == [start]
    want = dict(before)
    want["a.txt"] = ("file", 0o644, text(edited(9, "user's line 9\n")).encode())
    want["gone.txt"] = ("file", 0o644, b"deleted in the turn\n")
    del want["new"], want["new/made.txt"]
    same(snapshot(root), want)
    pre = c.call("show", workspace=os.fsencode(root), mark=done["pre_rollback"])
    assert pre["kind"] == "pre-rollback" and pre["message"] == f"before revert of turn {start}"
    assert pre["summary"]["revert"][0]["from"] == start


def test_created_since_with_other_bytes_and_deleted_since_are_conflicts(
    daemon: Daemon, tmp_path: Path
) -> None:
    root, c = watched(daemon, tmp_path)
    write(root / "edited.bin", b"\x00v1")
    write(root / "gone.txt", "deleted in A..B, still deleted\n")
    write(root / "del.txt", "v1\n")
    a = mark(c, root, "a")
    write(root / "made.txt", "made in A..B\n")
    write(root / "edited.bin", b"\x00v2")
    write(root / "del.txt", "v2\n")
    (root / "gone.txt").unlink()
    b = mark(c, root, "b")
    write(root / "made.txt", "changed since B\n")
    write(root / "edited.bin", b"\x00v3")
    (root / "del.txt").unlink()
    before = snapshot(root)
    n = len(marks(c, root))
    with pytest.raises(RevertConflict) as err:
        revert(c, root, **{"from": a, "to": b})
    clashed = {x["path"] for x in err.value.details["conflicts"]}
    assert clashed == {"made.txt", "edited.bin", "del.txt"}, err.value.details
    same(snapshot(root), before)
    assert len(marks(c, root)) == n, "a refused revert takes no mark"


def test_paths_limit_the_revert_and_a_span_may_run_to_now(daemon: Daemon, tmp_path: Path) -> None:
    root, c = watched(daemon, tmp_path)
    write(root / "src" / "a.txt", "a1\n")
    write(root / "b.txt", "b1\n")
    a = mark(c, root, "a")
    write(root / "src" / "a.txt", "a2\n")
    write(root / "src" / "new.txt", "new\n")
    write(root / "b.txt", "b2\n")
    b = mark(c, root, "b")
    write(root / "b.txt", "b3\n")  # overlaps A..B's change: a conflict, but outside the paths
    revert(c, root, paths=[b"src"], **{"from": a, "to": b})
    assert (root / "src" / "a.txt").read_text() == "a1\n" and not (root / "src" / "new.txt").exists()
    assert (root / "b.txt").read_text() == "b3\n", "outside the paths: untouched"
    done = revert(c, root, paths=[b"b.txt"], **{"from": b})  # B.. : up to now
    assert done["revert"]["spans"][0]["to"] is None
    assert (root / "b.txt").read_text() == "b2\n" and (root / "src" / "a.txt").read_text() == "a1\n"


def test_a_span_may_start_at_a_time(daemon: Daemon, tmp_path: Path) -> None:
    """``from`` a time reference: the state captured then, as rollback resolves it; the reply
    names it by a time object."""
    root, c = watched(daemon, tmp_path)
    write(root / "a.txt", "before\n")
    mark(c, root, "a")
    instant = time.time_ns()
    wait_for(lambda: time.time_ns() > instant + 1_000_000, what="a clock tick")
    write(root / "a.txt", "in the span\n")
    write(root / "b.txt", "made in the span\n")
    b = mark(c, root, "b")
    write(root / "c.txt", "later\n")
    done = revert(c, root, **{"from": timeref.wire(instant), "to": b})
    assert done["revert"]["spans"][0]["from"]["instant_ns"] == instant
    assert (root / "a.txt").read_text() == "before\n" and not (root / "b.txt").exists()
    assert (root / "c.txt").read_text() == "later\n"


def test_a_revert_that_cannot_be_asked_so_is_refused_and_the_daemon_serves_on(
    daemon: Daemon, tmp_path: Path
) -> None:
    root, c = watched(daemon, tmp_path)
    write(root / "a.txt", "a\n")
    plain = mark(c, root, "plain")
    start = mark(c, root, "turn-start", "s1")
    here = os.fsencode(root)
    asked: list[tuple[dict[str, Any], str]] = [
        ({}, "say what to revert"),
        ({"turn": start, "session": "s1"}, "not turn and session"),
        ({"to": plain}, "say what to revert"),
        ({"turn": plain}, "does not start a turn"),
        ({"turn": start}, "has not ended"),
        ({"session": "nobody"}, "has no turn"),
        ({"session": "s1", "conflicts": "merge"}, "conflicts must be one of"),
    ]
    for args, words in asked:
        with pytest.raises(UsageError, match=words):
            c.call("revert_plan", workspace=here, **args)
    span: dict[str, Any] = {"from": plain}
    assert c.call("revert_plan", workspace=here, **span)["plan"]["ops"] == []


def test_todays_rules_judge_the_target_and_a_path_ignored_at_the_start_stays(
    daemon: Daemon, tmp_path: Path
) -> None:
    """The span stopped ignoring ``*.log`` and started ignoring ``out/``. Reverting it puts the
    old ``.gitignore`` back, yet ``out/`` made since is ignored now: untouched; ``app.log`` was
    there at A, ignored: the span did not make it, so it is not deleted."""
    root, c = watched(daemon, tmp_path)
    write(root / ".gitignore", "*.log\n")
    write(root / "app.log", "older than A\n")
    a = mark(c, root, "a")
    write(root / ".gitignore", "out/\n")
    b = mark(c, root, "b")
    write(root / "out" / "o.bin", "built since B, in no mark\n")
    done = revert(c, root, **{"from": a, "to": b})
    assert (root / ".gitignore").read_text() == "*.log\n"
    assert (root / "out" / "o.bin").read_text() == "built since B, in no mark\n"
    assert (root / "app.log").read_text() == "older than A\n"
    assert {k["path"]: k["reason"] for k in done["revert"]["keeps"]} == {
        "app.log": "there before the span, ignored then"
    }, done["revert"]


# -- conflicts -------------------------------------------------------------------------------------


def _overlap(c: Client, root: Path) -> str:
    """A turn that changed line 5, then a later edit of line 5: the turn's start."""
    write(root / "a.txt", text(LINES))
    write(root / "b.txt", "turn's other file\n")
    start = mark(c, root, "turn-start", "s1")
    write(root / "a.txt", text(edited(5, "turn's line 5\n")))
    write(root / "b.txt", "changed by the turn\n")
    mark(c, root, "turn-end", "s1")
    write(root / "a.txt", text(edited(5, "user's line 5\n")))
    return start


def test_an_overlap_is_refused_with_its_hunks_nothing_written_no_mark(daemon: Daemon, tmp_path: Path) -> None:
    root, c = watched(daemon, tmp_path)
    start = _overlap(c, root)
    before = snapshot(root)
    n = len(marks(c, root))
    for op in ("revert_plan", "revert_apply"):
        with pytest.raises(RevertConflict) as err:
            c.call(op, workspace=os.fsencode(root), turn=start)
        assert err.value.exit_code == 13
        (clash,) = err.value.details["conflicts"]
        assert clash["path"] == "a.txt"
        (hunk,) = clash["hunks"]
        assert hunk == {
            "line": 5, "base": ["turn's line 5\n"], "ours": ["user's line 5\n"], "theirs": ["line 5\n"]
        }
        assert err.value.details["revert"]["spans"][0]["from"]["id"] == start
    same(snapshot(root), before)  # b.txt, which alone would revert cleanly, too
    assert len(marks(c, root)) == n


def test_markers_mode_writes_the_conflict_and_reverts_the_rest(daemon: Daemon, tmp_path: Path) -> None:
    root, c = watched(daemon, tmp_path)
    start = _overlap(c, root)
    done = revert(c, root, turn=start, conflicts="markers")
    assert done["revert"]["markers"] == ["a.txt"]
    assert (root / "b.txt").read_text() == "turn's other file\n"
    got = (root / "a.txt").read_text().splitlines(keepends=True)
    i = got.index("user's line 5\n")
    assert got[i - 1].startswith("<<<<<<< ") and got[:i - 1] == LINES[:4], got
    assert got[i + 1 : i + 6] == [got[i + 1], "turn's line 5\n", "=======\n", "line 5\n", got[i + 5]], got
    assert got[i + 1].startswith("||||||| ") and got[i + 5].startswith(">>>>>>> ")
    assert got[i + 6 :] == LINES[5:]


# -- sessions ----------------------------------------------------------------------------------------


def test_one_of_two_interleaved_sessions_is_reverted(daemon: Daemon, tmp_path: Path) -> None:
    """S and T take turns one after the other (exact), then a turn of S runs while T's is open
    too: what changed while both were open is a conflict; in markers mode it is left as it is
    and listed under kept, and the rest of S's work is still taken back."""
    root, c = watched(daemon, tmp_path)
    for name in ("s1", "t1", "s2", "t2", "s3", "shared", "s4"):
        write(root / f"{name}.txt", "original\n")
    mark(c, root, "base")
    s = mark(c, root, "turn-start", "S")
    write(root / "s1.txt", "by S\n")
    mark(c, root, "turn-end", "S")
    mark(c, root, "turn-start", "T")
    write(root / "t1.txt", "by T\n")
    mark(c, root, "turn-end", "T")
    mark(c, root, "turn-start", "S")
    write(root / "s2.txt", "by S\n")
    mark(c, root, "turn-end", "S")
    mark(c, root, "turn-start", "T")
    write(root / "t2.txt", "by T\n")
    mark(c, root, "turn-end", "T")
    # S's last turn: T opens a turn in the middle of it
    mark(c, root, "turn-start", "S")
    write(root / "s3.txt", "by S, alone\n")
    mark(c, root, "turn-start", "T")
    write(root / "shared.txt", "by S or T\n")
    mark(c, root, "turn-end", "T")
    write(root / "s4.txt", "by S, alone again\n")
    mark(c, root, "turn-end", "S")
    write(root / "user.txt", "the user's\n")
    before = snapshot(root)

    with pytest.raises(RevertConflict) as err:
        revert(c, root, session="S")
    (clash,) = err.value.details["conflicts"]
    assert clash["path"] == "shared.txt" and "S and T" in clash["reason"], clash
    same(snapshot(root), before)

    done = revert(c, root, session="S", conflicts="markers")
    assert [k["path"] for k in done["kept"]] == ["shared.txt"] and not done["ok"]
    want = dict(before)
    for name in ("s1", "s2", "s3", "s4"):
        want[f"{name}.txt"] = ("file", 0o644, b"original\n")
    same(snapshot(root), want)
    assert done["revert"]["sessions_kept"] == [{"session": "T", "agent": "test"}]  # T's work is kept
    others = [sp["others"] for sp in done["revert"]["spans"]]
    assert others.count(["T"]) == 1 and len(others) == 5, done["revert"]["spans"]

    # the sequential turns alone (since S's first turn ended): exact, nothing refused
    c.call("undo", workspace=os.fsencode(root))
    same(snapshot(root), before)
    done = revert(c, root, turn=s)
    want = dict(before)
    want["s1.txt"] = ("file", 0o644, b"original\n")
    same(snapshot(root), want)


# -- the rollback's guarantees ------------------------------------------------------------------------


def test_undo_returns_to_before_the_revert_and_two_reverts_are_two_undos(
    daemon: Daemon, tmp_path: Path
) -> None:
    root, c = watched(daemon, tmp_path)
    write(root / "a.txt", text(LINES))
    a = mark(c, root, "a")
    write(root / "a.txt", text(edited(1, "first\n")))
    write(root / "b.txt", "b\n")
    b = mark(c, root, "b")
    write(root / "d.txt", "d\n")
    mark(c, root, "c")
    write(root / "a.txt", text(edited(10, "last\n", edited(1, "first\n"))))
    before = snapshot(root)
    first = revert(c, root, **{"from": a, "to": b})
    assert (root / "a.txt").read_text() == text(edited(10, "last\n")) and not (root / "b.txt").exists()
    c.call("undo", workspace=os.fsencode(root))
    same(snapshot(root), before)
    # two reverts in a row, nothing in between: the second is undone on its own
    first = revert(c, root, **{"from": a, "to": b})
    after_first = snapshot(root)
    revert(c, root, **{"from": b, "to": "c"})
    assert not (root / "d.txt").exists()
    c.call("undo", workspace=os.fsencode(root))
    same(snapshot(root), after_first)
    c.call("rollback_apply", workspace=os.fsencode(root), to=first["pre_rollback"])
    same(snapshot(root), before)


def test_a_change_between_plan_and_apply_is_a_new_plan(daemon: Daemon, tmp_path: Path) -> None:
    root, c = watched(daemon, tmp_path)
    write(root / "a.txt", text(LINES))
    start = mark(c, root, "turn-start", "s1")
    write(root / "a.txt", text(edited(2, "turn\n")))
    mark(c, root, "turn-end", "s1")
    plan = c.call("revert_plan", workspace=os.fsencode(root), turn=start)
    write(root / "elsewhere.txt", "a path the revert does not touch\n")  # same plan: goes on
    write(root / "a.txt", text(edited(8, "user\n", edited(2, "turn\n"))))  # the merge changes
    before = snapshot(root)
    with pytest.raises(PlanChanged) as err:
        c.call("revert_apply", workspace=os.fsencode(root), turn=start, token=plan["plan"]["token"])
    new = err.value.details
    assert new["plan"]["token"] != plan["plan"]["token"] and new["revert"]["merged"] == ["a.txt"]
    same(snapshot(root), before)
    done = c.call("revert_apply", workspace=os.fsencode(root), turn=start, token=new["plan"]["token"])
    assert done["ok"] and (root / "a.txt").read_text() == text(edited(8, "user\n"))


@pytest.mark.timeout(900)
def test_a_crash_mid_revert_is_finished_at_restart(tmp_path: Path) -> None:
    """The daemon exits right after the N-th step of the revert's apply (tests/crash_launcher.py);
    the next start finishes it from the journal: the workspace is the revert's result (or, for
    a crash before the journal, untouched). N runs until a revert completes."""
    crashed = 0
    for n in range(1, 60):
        base = tmp_path / f"n{n}"
        root = base / "ws"
        home = base / "snapd-home"
        env = base_env(home)
        root.mkdir(parents=True)
        d = start_daemon(home, env)
        c = d.client(30.0)
        c.call("watch", path=os.fsencode(root))
        for i in range(3):
            write(root / f"f{i}.txt", text(LINES))
        write(root / "gone.txt", "gone\n")
        a = mark(c, root, "a")
        for i in range(3):
            write(root / f"f{i}.txt", text(edited(2, f"A..B {i}\n")))
        write(root / "made.txt", "made\n")
        (root / "gone.txt").unlink()
        b = mark(c, root, "b")
        for i in range(3):
            write(root / f"f{i}.txt", text(edited(9, "later\n", edited(2, f"A..B {i}\n"))))
        before = snapshot(root)
        want = {**before, "gone.txt": ("file", 0o644, b"gone\n")}
        del want["made.txt"]
        for i in range(3):
            want[f"f{i}.txt"] = ("file", 0o644, text(edited(9, "later\n")).encode())
        span: dict[str, Any] = {"from": a, "to": b}
        plan = c.call("revert_plan", workspace=os.fsencode(root), **span)
        assert d.stop() == 0
        d = start_daemon(home, env, crash_after=f"apply.:{n}")
        try:
            with Client(d.endpoint, 30.0) as c2:
                c2.call("revert_apply", workspace=os.fsencode(root), token=plan["plan"]["token"], **span)
            completed = True
        except SnapdError:
            completed = False
        if completed:
            assert d.stop() == 0
            same(snapshot(root), want)
            break
        crashed += 1
        assert d.wait_exit(20) == 86, d.log()[-3000:]
        d2 = start_daemon(home, env)
        try:

            def ready(d: Daemon = d2, root: Path = root) -> dict[str, Any] | None:
                st = d.call("status")
                w = next(x for x in st["workspaces"] if x["root"] == str(root))
                return w if w.get("state") == "ready" else None

            w: Any = wait_for(ready, 30)
            now = snapshot(root)
            assert now in (want, before), f"after a crash at step {n}:\n{snap_diff(now, want)}"
            if w.get("recovered_rollback") is not None:
                same(now, want)
            assert not list(root.rglob(".snapd-*~"))
            if now == want:  # undo returns to before the revert
                d2.call("undo", workspace=os.fsencode(root))
                same(snapshot(root), before)
        finally:
            assert d2.stop() == 0
    else:
        raise AssertionError("the revert never completed: the crash seam is not counting apply steps")
    assert crashed >= 3, f"only {crashed} crash points: the seam is not in the revert's apply"


# -- spans (pure) -------------------------------------------------------------------------------------


def _m(seq: int, label: str, session: str | None) -> Mark:
    return Mark(
        id=f"m{seq}", workspace=1, seq=seq, label=label, message=None, agent=None, session=session,
        created=seq, git_head=None, tree=f"t{seq}", kind="user", pinned=False, summary={},
    )  # fmt: skip


def test_a_turn_ends_at_its_turn_end_or_at_the_next_start_and_an_open_one_is_refused() -> None:
    ms = [_m(1, "turn-start", "S"), _m(2, "turn-start", "T"), _m(3, "turn-start", "S")]
    ms.append(_m(4, "turn-end", "S"))
    newest_first = ms[::-1]
    assert spans.turn_span(newest_first, ms[0]) == (ms[0], ms[2])  # interrupted: ends at the next start
    assert spans.turn_span(newest_first, ms[2]) == (ms[2], ms[3])
    with pytest.raises(UsageError, match="has not ended"):
        spans.turn_span(newest_first, ms[1])
    with pytest.raises(UsageError, match="does not start a turn"):
        spans.turn_span(newest_first, ms[3])
    # T's turn is open throughout: every part of S's turns has T among the others
    parts = spans.session_spans(newest_first, "S")
    got = [(p.start.seq, p.end.seq if p.end else None, p.others) for p in parts]
    assert got == [(3, 4, ("T",)), (2, 3, ("T",)), (1, 2, ())]


# -- the merged contents and GC -----------------------------------------------------------------------


def test_merged_contents_are_held_against_gc_until_the_target_is_closed(tmp_path: Path) -> None:
    """A merge's result is named by no mark until the revert's result is captured: GC (here
    with no grace period) must spare it while the target is open, and may take it after."""
    store = Store.open(tmp_path / "store")
    root = tmp_path / "ws"
    root.mkdir()
    ws_id = store.add_workspace(os.fsencode(root))

    def tree(lines: list[str]) -> str:
        data = text(lines).encode()
        with store.batch() as b:
            return b.apply(None, {b"a.txt": trees.Entry("file", 0o644, len(data), b.put(data))})

    a, b, now = tree(LINES), tree(edited(2, "turn\n")), tree(edited(9, "user\n", edited(2, "turn\n")))
    start, end = dataclasses.replace(_m(1, "a", None), tree=a), dataclasses.replace(_m(2, "b", None), tree=b)
    part = spans.Part(start, end)
    rules = SimpleNamespace(is_ignored=lambda path, is_dir=False: False)
    ws = cast(Workspace, SimpleNamespace(store=store, id=ws_id, rules=rules, rootb=os.fsencode(root)))
    target = RevertTarget(ws, [part], name="m1..m2", spans=[], markers=False)
    made = target(now)
    entry = trees.lookup(store.load_node, made.tree, b"a.txt")
    assert entry is not None and store.get(entry.key) == text(edited(9, "user\n")).encode()
    later = time.time_ns() + 10**9
    gc.run(store, Retention(grace_s=0), now=later)
    assert store.has(entry.key) and store.has(made.tree), "GC took the merged content of an open revert"
    target.close()
    gc.run(store, Retention(grace_s=0), now=later)
    assert not store.has(entry.key), "closed: nothing holds it any more"
    store.close()
