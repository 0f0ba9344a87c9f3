"""Attacks on ``revert`` (issue 34): what a revert promises, tried with a real daemon and real
files where it is easiest to get wrong. A revert never loses work (what it overwrites or deletes
is held by its pre-rollback mark, ``undo`` returns exactly), never writes outside the root, never
touches a path today's rules ignore, refuses any overlap with nothing written, and is exact where
it says it is (line endings, modes, names that are not UTF-8).
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import pytest
from e2e_helpers import Daemon, Snap, snap_diff, snapshot, wait_for, write

from snapd import timeref
from snapd.errors import NotFound, RevertConflict, SnapdError, UsageError
from snapd.ipc.client import Client
from snapd.paths import encode_path

pytestmark = pytest.mark.timeout(60)


def watched(d: Daemon, tmp_path: Path, name: str = "ws") -> tuple[Path, Client]:
    root = tmp_path / name
    root.mkdir()
    c = d.client(30.0)
    c.call("watch", path=os.fsencode(root))
    return root, c


def mark(c: Client, root: Path, label: str, session: str | None = None) -> str:
    args: dict[str, Any] = {"workspace": os.fsencode(root), "label": label}
    if session is not None:
        args.update(session=session, agent="attacker")
    return str(c.call("mark", **args)["id"])


def revert(c: Client, root: Path, **args: Any) -> dict[str, Any]:
    """Plan, then apply with the plan's token: the apply's reply."""
    plan = c.call("revert_plan", workspace=os.fsencode(root), **args)
    return c.call("revert_apply", workspace=os.fsencode(root), token=plan["plan"]["token"], **args)


def undo(c: Client, root: Path) -> dict[str, Any]:
    plan = c.call("rollback_plan", workspace=os.fsencode(root), undo=True)
    return c.call("rollback_apply", workspace=os.fsencode(root), undo=True, token=plan["plan"]["token"])


def n_marks(c: Client, root: Path) -> int:
    return len(c.call("log", workspace=os.fsencode(root), limit=1000)["marks"])


def time_ref() -> str:
    """Now as a time reference, once the clock has moved past the last mark."""
    at = time.time_ns()
    wait_for(lambda: time.time_ns() > at + 1_000_000, what="a clock tick")
    return str(timeref.wire(time.time_ns()))


def numbered(changed: dict[int, str]) -> str:
    """Ten lines ``l0``..``l9``, those in ``changed`` replaced."""
    return "".join(changed.get(i, f"l{i}") + "\n" for i in range(10))


def same(got: Snap, want: Snap) -> None:
    assert got == want, snap_diff(got, want)


# -- today's rules ---------------------------------------------------------------------------------


def test_a_span_that_changed_gitignore_leaves_what_is_ignored_now_untouched(
    daemon: Daemon, tmp_path: Path
) -> None:
    """The span started ignoring ``build/``; the build output was made again since (ignored,
    so no mark holds it). Reverting the span puts the old ``.gitignore`` back, but the build
    output is ignored *now*: the revert names it under ``keeps`` ("ignored now") and must leave
    it as it is, not delete it because the restored rules would capture it."""
    root, c = watched(daemon, tmp_path)
    write(root / ".gitignore", "*.tmp\n")
    write(root / "build" / "out.o", "old build\n")
    write(root / "src.c", "int main;\n")
    a = mark(c, root, "a")
    write(root / ".gitignore", "*.tmp\nbuild/\n")
    b = mark(c, root, "b")
    write(root / "build" / "out.o", "rebuilt since B: in no mark\n")
    write(root / "build" / "new.o", "built since B: in no mark\n")
    before = snapshot(root)
    done = revert(c, root, **{"from": a, "to": b})
    keeps = {k["path"]: k["reason"] for k in done["revert"]["keeps"]}
    assert keeps.get("build") == "ignored now", done["revert"]
    assert (root / ".gitignore").read_text() == "*.tmp\n"
    assert (root / "build" / "out.o").read_text() == "rebuilt since B: in no mark\n", (
        "an ignored path was touched"
    )
    assert (root / "build" / "new.o").exists(), "an ignored path was deleted"
    undo(c, root)
    same(snapshot(root), before)


def test_a_turn_that_made_gitignore_leaves_what_it_ignores_untouched(daemon: Daemon, tmp_path: Path) -> None:
    """The usual agent turn: it writes ``.gitignore`` (``deps/``) and installs ``deps/`` (never
    captured: ignored from the start). Reverting the turn deletes ``.gitignore``; ``deps/`` is
    ignored now and in no mark: the revert must leave it (not delete it and hold all of it)."""
    root, c = watched(daemon, tmp_path)
    write(root / "main.js", "run()\n")
    start = mark(c, root, "turn-start", "agent")
    write(root / ".gitignore", "deps/\n")
    mark(c, root, "turn-end", "agent")
    write(root / "deps" / "lib" / "index.js", "installed, in no mark\n")
    c.call("mark", workspace=os.fsencode(root), label="settled")
    plan = c.call("revert_plan", workspace=os.fsencode(root), turn=start)
    assert [op["path"] for op in plan["plan"]["ops"]] == [".gitignore"], plan["lines"]
    c.call("revert_apply", workspace=os.fsencode(root), turn=start, token=plan["plan"]["token"])
    assert not (root / ".gitignore").exists()
    assert (root / "deps" / "lib" / "index.js").exists(), "an ignored path was deleted"


# -- never outside the root ------------------------------------------------------------------------


def test_a_directory_replaced_by_a_symlink_out_of_the_root_is_a_conflict_and_nothing_outside_changes(
    daemon: Daemon, tmp_path: Path
) -> None:
    root, c = watched(daemon, tmp_path)
    outside = tmp_path / "outside"
    write(root / "d" / "f.txt", "v1\n")
    write(root / "d" / "gone.txt", "deleted in the span\n")
    a = mark(c, root, "a")
    write(root / "d" / "f.txt", "v2\n")
    (root / "d" / "gone.txt").unlink()
    b = mark(c, root, "b")
    # since B: d moved out of the root, a symlink to it in its place (same bytes as at B)
    (root / "d").rename(outside)
    (root / "d").symlink_to(outside)
    mark(c, root, "after")
    before, out_before = snapshot(root), snapshot(outside)
    for conflicts in ("refuse", "markers"):
        for paths in (None, [b"d/f.txt"], [b"d"]):
            args: dict[str, Any] = {"from": a, "to": b, "conflicts": conflicts}
            if paths is not None:
                args["paths"] = paths
            try:
                revert(c, root, **args)
            except SnapdError:
                pass
            same(snapshot(outside), out_before)
            same(snapshot(root), before)
    with pytest.raises(RevertConflict):
        revert(c, root, **{"from": a, "to": b})


def test_a_hard_link_out_of_the_root_is_not_written_through(daemon: Daemon, tmp_path: Path) -> None:
    root, c = watched(daemon, tmp_path)
    outside = tmp_path / "outside.txt"
    write(root / "a.txt", "v1\n")
    a = mark(c, root, "a")
    write(root / "a.txt", "v2\n")
    os.link(root / "a.txt", outside)  # the same inode, outside the workspace
    b = mark(c, root, "b")
    revert(c, root, **{"from": a, "to": b})
    assert (root / "a.txt").read_text() == "v1\n"
    assert outside.read_text() == "v2\n", "the revert wrote through a hard link out of the root"


def test_paths_outside_the_root_are_refused_with_nothing_written(daemon: Daemon, tmp_path: Path) -> None:
    root, c = watched(daemon, tmp_path)
    write(root / "a.txt", "v1\n")
    a = mark(c, root, "a")
    write(root / "a.txt", "v2\n")
    before, n = snapshot(root), n_marks(c, root)
    for p in (b"../x", os.fsencode(tmp_path), b"/etc/passwd", b"a.txt/../../x"):
        with pytest.raises(UsageError):
            revert(c, root, paths=[p], **{"from": a})
    same(snapshot(root), before)
    assert n_marks(c, root) == n
    assert c.call("status")["pid"] == daemon.pid


def test_marks_of_another_workspace_are_refused(daemon: Daemon, tmp_path: Path) -> None:
    root, c = watched(daemon, tmp_path)
    other, _ = watched(daemon, tmp_path, "other")
    write(root / "a.txt", "mine\n")
    write(other / "a.txt", "theirs v1\n")
    oa = mark(c, other, "oa")
    os_ = mark(c, other, "turn-start", "s-other")
    write(other / "a.txt", "theirs v2\n")
    ob = mark(c, other, "turn-end", "s-other")
    mine = mark(c, root, "mine")
    before, n = snapshot(root), n_marks(c, root)
    for args in (
        {"from": oa, "to": ob},
        {"from": oa},
        {"from": mine, "to": ob},
        {"turn": os_},
        {"session": "s-other"},
    ):
        with pytest.raises((UsageError, NotFound)):
            revert(c, root, **args)
    same(snapshot(root), before)
    assert n_marks(c, root) == n


# -- exact where it says it is ---------------------------------------------------------------------


def test_crlf_and_no_final_newline_are_kept_exactly_through_a_merge(daemon: Daemon, tmp_path: Path) -> None:
    root, c = watched(daemon, tmp_path)
    lines = [f"line {i}\r\n".encode() for i in range(1, 11)]
    lines[-1] = b"line 10"  # no final newline
    write(root / "w.txt", b"".join(lines))
    a = mark(c, root, "a")
    turn = list(lines)
    turn[1] = b"turn 2\r\n"
    write(root / "w.txt", b"".join(turn))
    b = mark(c, root, "b")
    later = list(turn)
    later[9] = b"user 10"  # the last line, still no newline
    write(root / "w.txt", b"".join(later))
    done = revert(c, root, **{"from": a, "to": b})
    assert done["revert"]["merged"] == ["w.txt"], done["revert"]
    want = list(lines)
    want[9] = b"user 10"
    assert (root / "w.txt").read_bytes() == b"".join(want)


def test_undo_of_a_revert_returns_exactly_with_modes_and_binary(daemon: Daemon, tmp_path: Path) -> None:
    root, c = watched(daemon, tmp_path)
    write(root / "t.txt", numbered({}))
    write(root / "bin", b"\x00\x01old")
    write(root / "x.sh", "echo a\n")
    a = mark(c, root, "a")
    write(root / "t.txt", numbered({1: "TURN"}))
    write(root / "bin", b"\x00\x01new")
    write(root / "x.sh", "echo b\n")
    write(root / "made" / "m.txt", "made\n")
    b = mark(c, root, "b")
    write(root / "t.txt", numbered({1: "TURN", 8: "USER"}))
    (root / "x.sh").chmod(0o755)  # made executable since: the mode is kept, the content reverted
    write(root / "made" / "later.txt", "later\n")
    before = snapshot(root)
    done = revert(c, root, **{"from": a, "to": b})
    assert done["ok"], done
    assert (root / "x.sh").read_text() == "echo a\n" and (root / "x.sh").stat().st_mode & 0o777 == 0o755
    assert (root / "bin").read_bytes() == b"\x00\x01old"
    assert (root / "made" / "later.txt").exists() and not (root / "made" / "m.txt").exists()
    undo(c, root)
    same(snapshot(root), before)


def test_the_same_turn_reverted_twice_changes_nothing_the_second_time(daemon: Daemon, tmp_path: Path) -> None:
    root, c = watched(daemon, tmp_path)
    write(root / "t.txt", numbered({}))
    start = mark(c, root, "turn-start", "s")
    write(root / "t.txt", numbered({1: "TURN"}))
    write(root / "new.txt", "new\n")
    mark(c, root, "turn-end", "s")
    write(root / "t.txt", numbered({1: "TURN", 8: "USER"}))
    first = revert(c, root, turn=start)
    assert first["ok"], first
    after, n = snapshot(root), n_marks(c, root)
    second = revert(c, root, turn=start)
    assert second["plan"]["ops"] == [], second["plan"]
    same(snapshot(root), after)
    assert n_marks(c, root) == n, "a revert with nothing to do takes no mark"


def test_a_revert_of_a_revert_puts_the_turn_back(daemon: Daemon, tmp_path: Path) -> None:
    root, c = watched(daemon, tmp_path)
    write(root / "t.txt", numbered({}))
    start = mark(c, root, "turn-start", "s")
    write(root / "t.txt", numbered({1: "TURN"}))
    write(root / "new.txt", "new\n")
    mark(c, root, "turn-end", "s")
    write(root / "t.txt", numbered({1: "TURN", 8: "USER"}))
    before = snapshot(root)
    done = revert(c, root, turn=start)
    after = mark(c, root, "after-revert")
    revert(c, root, **{"from": done["pre_rollback"], "to": after})
    same(snapshot(root), before)


def test_a_name_that_is_not_utf8_in_conflict_is_listed_and_refused(daemon: Daemon, tmp_path: Path) -> None:
    root, c = watched(daemon, tmp_path)
    name = b"caf\xe9.bin"
    rootb = os.fsencode(root)
    Path(os.fsdecode(rootb + b"/" + name)).write_bytes(b"\x00one")
    a = mark(c, root, "a")
    Path(os.fsdecode(rootb + b"/" + name)).write_bytes(b"\x00two")
    b = mark(c, root, "b")
    Path(os.fsdecode(rootb + b"/" + name)).write_bytes(b"\x00three")
    before = snapshot(root)
    with pytest.raises(RevertConflict) as err:
        revert(c, root, **{"from": a, "to": b})
    assert [x["path"] for x in err.value.details["conflicts"]] == [encode_path(name)], err.value.details
    same(snapshot(root), before)
    for json_ in ((), ("--json",)):
        cp = daemon.ctl("revert", f"{a}..{b}", "--yes", *json_, cwd=root, check=False)
        assert cp.returncode == 13 and b"Traceback" not in cp.stderr, cp
        if not json_:
            assert b"conflict: caf" in cp.stdout + cp.stderr, cp
    same(snapshot(root), before)


def test_a_span_in_the_wrong_order_or_with_a_time_end_before_its_start_is_refused(
    daemon: Daemon, tmp_path: Path
) -> None:
    root, c = watched(daemon, tmp_path)
    write(root / "a.txt", "v1\n")
    a = mark(c, root, "a")
    write(root / "a.txt", "v2\n")
    b = mark(c, root, "b")
    before, n = snapshot(root), n_marks(c, root)
    for args in ({"from": b, "to": a}, {"from": b, "to": "@1000000000"}):
        with pytest.raises(UsageError):
            revert(c, root, **args)
    same(snapshot(root), before)
    assert n_marks(c, root) == n


def test_an_interrupted_turn_is_reverted_up_to_the_next_turn_start_only(
    daemon: Daemon, tmp_path: Path
) -> None:
    root, c = watched(daemon, tmp_path)
    write(root / "a.txt", "a0\n")
    write(root / "b.txt", "b0\n")
    t1 = mark(c, root, "turn-start", "s")
    write(root / "a.txt", "a1\n")
    mark(c, root, "turn-start", "s")  # the first turn never ended
    write(root / "b.txt", "b1\n")
    mark(c, root, "turn-end", "s")
    revert(c, root, turn=t1)
    assert (root / "a.txt").read_text() == "a0\n" and (root / "b.txt").read_text() == "b1\n"


def test_a_read_only_directory_keeps_its_mode(daemon: Daemon, tmp_path: Path) -> None:
    root, c = watched(daemon, tmp_path)
    write(root / "ro" / "f.txt", "v1\n")
    a = mark(c, root, "a")
    (root / "ro" / "f.txt").unlink()
    write(root / "ro" / "made.txt", "made in the span\n")
    b = mark(c, root, "b")
    (root / "ro").chmod(0o555)
    try:
        revert(c, root, **{"from": a, "to": b, "paths": [b"ro/f.txt"]})
        assert (root / "ro" / "f.txt").read_text() == "v1\n"
        assert (root / "ro").stat().st_mode & 0o777 == 0o555
    finally:
        (root / "ro").chmod(0o755)


def test_a_span_that_stopped_ignoring_a_file_does_not_delete_it(daemon: Daemon, tmp_path: Path) -> None:
    """``app.log`` was there all along, ignored; the span stopped ignoring it, so B is the first
    mark that holds it. The span did not make it: reverting the span must not delete it."""
    root, c = watched(daemon, tmp_path)
    write(root / ".gitignore", "*.log\n")
    write(root / "app.log", "the user's log, older than A\n")
    a = mark(c, root, "a")
    write(root / ".gitignore", "")
    b = mark(c, root, "b")
    before = snapshot(root)
    revert(c, root, **{"from": a, "to": b})
    assert (root / ".gitignore").read_text() == "*.log\n"
    assert (root / "app.log").read_text() == "the user's log, older than A\n"
    undo(c, root)
    same(snapshot(root), before)


def test_a_file_replaced_by_a_symlink_out_of_the_root_is_not_written_through(
    daemon: Daemon, tmp_path: Path
) -> None:
    root, c = watched(daemon, tmp_path)
    outside = tmp_path / "outside.txt"
    outside.write_text("outside\n")
    write(root / "f.txt", "v1\n")
    write(root / "l", "was a file\n")
    a = mark(c, root, "a")
    (root / "f.txt").unlink()
    (root / "f.txt").symlink_to(outside)  # the span made f.txt a symlink out of the root
    (root / "l").unlink()
    (root / "l").symlink_to(outside)
    b = mark(c, root, "b")
    (root / "l").unlink()
    (root / "l").symlink_to(tmp_path)  # retargeted since: a conflict
    with pytest.raises(RevertConflict) as err:
        revert(c, root, **{"from": a, "to": b})
    assert {x["path"] for x in err.value.details["conflicts"]} == {"l"}
    assert outside.read_text() == "outside\n"
    revert(c, root, paths=[b"f.txt"], **{"from": a, "to": b})
    assert outside.read_text() == "outside\n", "written through a symlink out of the root"
    assert not (root / "f.txt").is_symlink() and (root / "f.txt").read_text() == "v1\n"


def test_a_directory_the_span_made_that_holds_ignored_files_since_is_not_removed_with_them(
    daemon: Daemon, tmp_path: Path
) -> None:
    root, c = watched(daemon, tmp_path)
    write(root / ".gitignore", "*.tmp\n")
    a = mark(c, root, "a")
    write(root / "gen" / "a.txt", "made in the span\n")
    b = mark(c, root, "b")
    write(root / "gen" / "cache.tmp", "ignored, in no mark\n")
    revert(c, root, **{"from": a, "to": b})
    assert (root / "gen" / "cache.tmp").read_text() == "ignored, in no mark\n"
    assert not (root / "gen" / "a.txt").exists()


def test_git_is_never_a_path_to_revert(daemon: Daemon, tmp_path: Path) -> None:
    root, c = watched(daemon, tmp_path)
    write(root / ".git" / "config", "[core]\n")
    write(root / "a.txt", "v1\n")
    a = mark(c, root, "a")
    write(root / "a.txt", "v2\n")
    write(root / ".git" / "config", "[core]\nchanged\n")
    b = mark(c, root, "b")
    for paths in ([b".git"], [b".git/config"]):
        try:
            revert(c, root, paths=paths, **{"from": a, "to": b})
        except SnapdError:
            pass
        assert (root / ".git" / "config").read_text() == "[core]\nchanged\n"
    revert(c, root, **{"from": a, "to": b})
    assert (root / ".git" / "config").read_text() == "[core]\nchanged\n"
    assert (root / "a.txt").read_text() == "v1\n"


def test_a_directory_mode_the_span_changed_is_taken_back(daemon: Daemon, tmp_path: Path) -> None:
    root, c = watched(daemon, tmp_path)
    write(root / "d" / "f.txt", "v1\n")
    a = mark(c, root, "a")
    (root / "d").chmod(0o700)
    b = mark(c, root, "b")
    write(root / "d" / "later.txt", "later\n")
    revert(c, root, **{"from": a, "to": b})
    assert (root / "d").stat().st_mode & 0o777 == 0o755
    assert (root / "d" / "later.txt").exists()


def test_a_file_over_the_size_cap_is_never_overwritten_unheld(capped_daemon: Daemon, tmp_path: Path) -> None:
    root, c = watched(capped_daemon, tmp_path)
    write(root / "big.dat", "small\n")
    a = mark(c, root, "a")
    write(root / "big.dat", "x" * 8192)  # over the cap: at B it is there but not captured
    b = mark(c, root, "b")
    try:
        done = revert(c, root, **{"from": a, "to": b})
    except SnapdError:
        done = None
    assert (root / "big.dat").read_text() == "x" * 8192, f"an uncaptured file was overwritten: {done}"


def test_another_sessions_work_in_a_shared_part_is_never_reverted(daemon: Daemon, tmp_path: Path) -> None:
    """S's turn and T's overlap: what changed while both were open cannot be told apart. The
    default refuses; markers mode must leave those paths (T's work) as they are."""
    root, c = watched(daemon, tmp_path)
    write(root / "s.txt", "s0\n")
    write(root / "t.txt", "t0\n")
    s = mark(c, root, "turn-start", "S")
    write(root / "s.txt", "s1\n")  # S alone
    mark(c, root, "turn-start", "T")
    write(root / "t.txt", "t1\n")  # T's, while both were open
    mark(c, root, "turn-end", "T")
    mark(c, root, "turn-end", "S")
    before = snapshot(root)
    with pytest.raises(RevertConflict) as err:
        revert(c, root, session="S")
    assert {x["path"] for x in err.value.details["conflicts"]} == {"t.txt"}
    same(snapshot(root), before)
    revert(c, root, turn=s, conflicts="markers")
    assert (root / "t.txt").read_text() == "t1\n", "T's work was reverted"
    assert (root / "s.txt").read_text() == "s0\n"


def test_two_reverts_at_once_each_hold_what_they_overwrite(daemon: Daemon, tmp_path: Path) -> None:
    """Two clients apply reverts of the same workspace at the same moment: they run one after
    the other (or one is refused), and undoing what applied returns to the start exactly."""
    import threading

    root, c = watched(daemon, tmp_path)
    write(root / "a.txt", "a0\n")
    write(root / "b.txt", "b0\n")
    t1 = mark(c, root, "turn-start", "s1")
    write(root / "a.txt", "a1\n")
    mark(c, root, "turn-end", "s1")
    t2 = mark(c, root, "turn-start", "s2")
    write(root / "b.txt", "b1\n")
    mark(c, root, "turn-end", "s2")
    before = snapshot(root)
    results: dict[str, Any] = {}

    def go(turn: str) -> None:
        try:
            with daemon.client(30.0) as cc:
                results[turn] = cc.call("revert_apply", workspace=os.fsencode(root), turn=turn)
        except SnapdError as exc:
            results[turn] = exc

    threads = [threading.Thread(target=go, args=(t,)) for t in (t1, t2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    applied = [r for r in results.values() if isinstance(r, dict) and r.get("pre_rollback")]
    assert applied, results
    if len(applied) == 2:
        assert (root / "a.txt").read_text() == "a0\n" and (root / "b.txt").read_text() == "b0\n"
    pres = [c.call("show", workspace=os.fsencode(root), mark=r["pre_rollback"]) for r in applied]
    first = min(pres, key=lambda m: m["seq"])
    plan = c.call("rollback_plan", workspace=os.fsencode(root), to=first["id"])
    c.call("rollback_apply", workspace=os.fsencode(root), to=first["id"], token=plan["plan"]["token"])
    same(snapshot(root), before)


def test_time_ends_in_the_wrong_order_are_refused(daemon: Daemon, tmp_path: Path) -> None:
    root, c = watched(daemon, tmp_path)
    write(root / "a.txt", "v1\n")
    mark(c, root, "a")
    t1 = time_ref()
    write(root / "a.txt", "v2\n")
    mark(c, root, "b")
    t2 = time_ref()
    before, n = snapshot(root), n_marks(c, root)
    with pytest.raises(UsageError):
        revert(c, root, **{"from": t2, "to": t1})
    same(snapshot(root), before)
    assert n_marks(c, root) == n
    revert(c, root, **{"from": t1, "to": t2})
    assert (root / "a.txt").read_text() == "v1\n"


def test_a_fifo_the_span_made_is_not_deleted_unheld(daemon: Daemon, tmp_path: Path) -> None:
    """A special file is there but not captured: no mark can hold it, so a revert (without
    --force) must not delete it, and must not hang opening it."""
    root, c = watched(daemon, tmp_path)
    write(root / "a.txt", "v1\n")
    a = mark(c, root, "a")
    os.mkfifo(root / "pipe")
    write(root / "a.txt", "v2\n")
    b = mark(c, root, "b")
    try:
        revert(c, root, **{"from": a, "to": b})
    except SnapdError:
        pass
    assert (root / "pipe").exists(), "a path no mark holds was deleted"


def test_a_text_file_named_in_bytes_is_merged_and_named_exactly(daemon: Daemon, tmp_path: Path) -> None:
    root, c = watched(daemon, tmp_path)
    name = b"r\xe9sum\xe9.txt"
    path = Path(os.fsdecode(os.fsencode(root) + b"/" + name))
    path.write_text(numbered({}))
    a = mark(c, root, "a")
    path.write_text(numbered({1: "TURN"}))
    b = mark(c, root, "b")
    path.write_text(numbered({1: "TURN", 8: "USER"}))
    done = revert(c, root, **{"from": a, "to": b})
    assert done["revert"]["merged"] == [encode_path(name)], done["revert"]
    assert path.read_text() == numbered({8: "USER"})


def test_a_file_the_span_stopped_ignoring_is_not_deleted_from_a_time_either(
    daemon: Daemon, tmp_path: Path
) -> None:
    """As above, the span starting at a time (the state then is rebuilt from captures), and the
    file edited since B (not a conflict: the span never made it)."""
    root, c = watched(daemon, tmp_path)
    write(root / ".gitignore", "*.log\n")
    write(root / "app.log", "the user's log, older than A\n")
    mark(c, root, "a")
    t = time_ref()
    write(root / ".gitignore", "")
    b = mark(c, root, "b")
    write(root / "app.log", "the user's log, older than A\nand a line since B\n")
    revert(c, root, **{"from": t, "to": b})
    assert (root / ".gitignore").read_text() == "*.log\n"
    assert (root / "app.log").read_text() == "the user's log, older than A\nand a line since B\n"


# -- the command line --------------------------------------------------------------------------------


def test_markers_mode_with_a_binary_conflict_exits_10_and_leaves_it(daemon: Daemon, tmp_path: Path) -> None:
    root, c = watched(daemon, tmp_path)
    write(root / "t.txt", numbered({}))
    write(root / "b.bin", b"\x00one")
    a = mark(c, root, "a")
    write(root / "t.txt", numbered({1: "TURN"}))
    write(root / "b.bin", b"\x00two")
    b = mark(c, root, "b")
    write(root / "t.txt", numbered({1: "USER"}))
    write(root / "b.bin", b"\x00three")
    cp = daemon.ctl("revert", f"{a}..{b}", "--conflicts=markers", "--yes", "--json", cwd=root, check=False)
    assert cp.returncode == 10, cp
    assert (root / "b.bin").read_bytes() == b"\x00three"
    assert b"<<<<<<< now" in (root / "t.txt").read_bytes()


def test_run_whose_daemon_goes_away_keeps_the_commands_status(tmp_path: Path) -> None:
    """The command stops the daemon: the turn-end mark cannot be taken; snapctl says so and
    exits with the command's status all the same."""
    import sys

    from e2e_helpers import start_daemon

    d = start_daemon(tmp_path / "home")
    try:
        root, _ = watched(d, tmp_path)
        d.close_clients()
        script = "import subprocess, sys; subprocess.run(sys.argv[1:]); sys.exit(7)"
        stop = [sys.executable, "-m", "snapd", "stop"]
        cp = d.ctl("run", "--", sys.executable, "-c", script, *stop, cwd=root, check=False, timeout=60)
        assert cp.returncode == 7, cp
        assert b"turn-end" in cp.stderr, cp
    finally:
        d.stop()


def test_an_edit_the_revert_does_not_touch_leaves_the_plan_and_its_token(
    daemon: Daemon, tmp_path: Path
) -> None:
    """docs/rollback.md: "An edit to a path the revert does not touch leaves the plan as it
    was" — the token confirmed still applies, and the edit is kept."""
    root, c = watched(daemon, tmp_path)
    write(root / "t.txt", numbered({}))
    write(root / "other.txt", "o1\n")
    a = mark(c, root, "a")
    write(root / "t.txt", numbered({1: "TURN"}))
    b = mark(c, root, "b")
    write(root / "t.txt", numbered({1: "TURN", 8: "USER"}))
    span: dict[str, Any] = {"from": a, "to": b}
    plan = c.call("revert_plan", workspace=os.fsencode(root), **span)
    write(root / "other.txt", "o2: between plan and apply\n")
    write(root / "new.txt", "made between plan and apply\n")
    done = c.call("revert_apply", workspace=os.fsencode(root), token=plan["plan"]["token"], **span)
    assert done["ok"], done
    assert (root / "t.txt").read_text() == numbered({8: "USER"})
    assert (root / "other.txt").read_text() == "o2: between plan and apply\n"
    assert (root / "new.txt").exists()


def test_markers_in_a_crlf_file_use_its_ending_and_undo_returns(daemon: Daemon, tmp_path: Path) -> None:
    root, c = watched(daemon, tmp_path)
    lines = [f"line {i}\r\n".encode() for i in range(1, 11)]

    def with_(i: int, new: bytes, base: list[bytes] | None = None) -> bytes:
        out = list(base or lines)
        out[i] = new
        return b"".join(out)

    write(root / "w.txt", b"".join(lines))
    a = mark(c, root, "a")
    write(root / "w.txt", with_(1, b"turn\r\n"))
    b = mark(c, root, "b")
    write(root / "w.txt", with_(1, b"user\r\n"))
    before = snapshot(root)
    done = revert(c, root, conflicts="markers", **{"from": a, "to": b})
    assert done["revert"]["markers"] == ["w.txt"], done["revert"]
    got = (root / "w.txt").read_bytes()
    want = b"".join(
        [
            lines[0],
            b"<<<<<<< now\r\n",
            b"user\r\n",
            f"||||||| {b}\r\n".encode(),
            b"turn\r\n",
            b"=======\r\n",
            lines[1],
            f">>>>>>> {a}\r\n".encode(),
            *lines[2:],
        ]
    )
    assert got == want
    undo(c, root)
    same(snapshot(root), before)


def test_paths_limit_every_span_of_a_session(daemon: Daemon, tmp_path: Path) -> None:
    root, c = watched(daemon, tmp_path)
    write(root / "src" / "a.txt", "a0\n")
    write(root / "b.txt", "b0\n")
    mark(c, root, "turn-start", "S")
    write(root / "src" / "a.txt", "a1\n")
    write(root / "b.txt", "b1\n")
    mark(c, root, "turn-end", "S")
    write(root / "b.txt", "b-user\n")  # overlaps S's change of b.txt: outside the paths
    mark(c, root, "turn-start", "S")
    write(root / "src" / "a.txt", "a2\n")
    write(root / "src" / "new.txt", "new\n")
    mark(c, root, "turn-end", "S")
    revert(c, root, session="S", paths=[b"src"])
    assert (root / "src" / "a.txt").read_text() == "a0\n"
    assert not (root / "src" / "new.txt").exists()
    assert (root / "b.txt").read_text() == "b-user\n"


def test_a_directory_the_span_made_a_symlink_out_of_the_root_is_made_again_inside(
    daemon: Daemon, tmp_path: Path
) -> None:
    """The span replaced ``d/`` by a symlink to a directory outside the root (holding a file of
    the same name). Taking it back removes the symlink and makes ``d/`` again: nothing is
    written through the link."""
    root, c = watched(daemon, tmp_path)
    outside = tmp_path / "outside"
    write(outside / "f.txt", "outside's own\n")
    write(root / "d" / "f.txt", "v1\n")
    write(root / "d" / "sub" / "g.txt", "g\n")
    a = mark(c, root, "a")
    for p in (root / "d" / "sub" / "g.txt", root / "d" / "f.txt"):
        p.unlink()
    (root / "d" / "sub").rmdir()
    (root / "d").rmdir()
    (root / "d").symlink_to(outside)
    b = mark(c, root, "b")
    out_before = snapshot(outside)
    done = revert(c, root, **{"from": a, "to": b})
    assert done["ok"], done
    same(snapshot(outside), out_before)
    assert not (root / "d").is_symlink()
    assert (root / "d" / "f.txt").read_text() == "v1\n" and (
        root / "d" / "sub" / "g.txt"
    ).read_text() == "g\n"


def test_a_repository_made_since_inside_a_directory_the_span_made_is_kept(
    daemon: Daemon, tmp_path: Path
) -> None:
    """``git init`` since B inside a directory the span made: its ``.git`` is in no mark and
    never written; the directory stays to hold it."""
    root, c = watched(daemon, tmp_path)
    write(root / "a.txt", "a\n")
    a = mark(c, root, "a")
    write(root / "sub" / "made.txt", "made in the span\n")
    b = mark(c, root, "b")
    write(root / "sub" / ".git" / "HEAD", "ref: refs/heads/main\n")
    write(root / "sub" / ".git" / "objects" / "ab" / "cdef", b"\x78\x01blob")
    done = revert(c, root, **{"from": a, "to": b})
    assert (root / "sub" / ".git" / "HEAD").read_text() == "ref: refs/heads/main\n", done
    assert (root / "sub" / ".git" / "objects" / "ab" / "cdef").exists()
    assert not (root / "sub" / "made.txt").exists()


@pytest.mark.xfail(
    strict=True,
    reason="live (7800b59): a turn that never ended counts as open until its session marks "
    "again (a dead session cannot be told from a long turn); documented, the refusal names the "
    "way out (revert START..END). A rule that closes such turns is not in this issue.",
)
def test_a_killed_run_does_not_block_every_later_turns_revert(daemon: Daemon, tmp_path: Path) -> None:
    """``snapctl run`` killed (SIGKILL: no turn-end) leaves its turn open, in a session named at
    random that never marks again. An agent's later turn, made while nothing else happened,
    should still be revertable: not refused as changed while both turns were open."""
    root, c = watched(daemon, tmp_path)
    write(root / "a.txt", "a0\n")
    cp = daemon.ctl("run", "--", "sh", "-c", "kill -KILL $PPID", cwd=root, check=False)
    assert cp.returncode == -9, cp  # snapctl itself was killed: its turn never ended
    start = mark(c, root, "turn-start", "agent")
    write(root / "a.txt", "a1\n")
    mark(c, root, "turn-end", "agent")
    revert(c, root, turn=start)
    assert (root / "a.txt").read_text() == "a0\n"


def test_a_turn_a_dead_session_keeps_open_is_refused_saying_why_and_its_span_reverts(
    daemon: Daemon, tmp_path: Path
) -> None:
    """What holds instead (docs/rollback.md): the refusal says the change cannot be told from
    the other session's and names ``revert START..END``, which takes the span back whole."""
    root, c = watched(daemon, tmp_path)
    write(root / "a.txt", "a0\n")
    mark(c, root, "turn-start", "dead")  # its agent died here
    start = mark(c, root, "turn-start", "agent")
    write(root / "a.txt", "a1\n")
    end = mark(c, root, "turn-end", "agent")
    before, n = snapshot(root), n_marks(c, root)
    with pytest.raises(RevertConflict) as err:
        revert(c, root, turn=start)
    assert "another session" in err.value.message and "START..END" in err.value.message, err.value
    same(snapshot(root), before)
    assert n_marks(c, root) == n
    revert(c, root, **{"from": start, "to": end})
    assert (root / "a.txt").read_text() == "a0\n"


def test_a_precious_file_git_ignores_is_reverted_and_undo_returns_it(daemon: Daemon, tmp_path: Path) -> None:
    """``.env`` is ignored by ``.gitignore`` but precious (captured): the span's edit of it and
    the ``.env.local`` it made are taken back; undo returns both exactly."""
    root, c = watched(daemon, tmp_path)
    write(root / ".gitignore", ".env\n.env.*\n")
    write(root / ".env", "KEY=old\n", mode=0o600)
    a = mark(c, root, "a")
    write(root / ".env", "KEY=leaked-by-the-turn\n", mode=0o600)
    write(root / ".env.local", "LOCAL=1\n", mode=0o600)
    b = mark(c, root, "b")
    before = snapshot(root)
    revert(c, root, **{"from": a, "to": b})
    assert (root / ".env").read_text() == "KEY=old\n" and (root / ".env").stat().st_mode & 0o777 == 0o600
    assert not (root / ".env.local").exists()
    undo(c, root)
    same(snapshot(root), before)


def test_the_cli_shows_a_span_that_starts_at_a_time(daemon: Daemon, tmp_path: Path) -> None:
    """``snapctl revert @T..B``: the plan names the time end (it crashed with a KeyError on the
    time object, after applying with ``--yes``)."""
    root, c = watched(daemon, tmp_path)
    write(root / "a.txt", "a0\n")
    mark(c, root, "a")
    t = time_ref()
    write(root / "a.txt", "a1\n")
    b = mark(c, root, "b")
    for args in ((f"{t}..{b}", "--dry-run"), (f"{t}..", "--dry-run"), (f"{t}..{b}", "--yes")):
        cp = daemon.ctl("revert", *args, cwd=root, check=False)
        assert cp.returncode == 0 and b"Traceback" not in cp.stderr, cp
        assert b"the state at" in cp.stdout, cp
    assert (root / "a.txt").read_text() == "a0\n"


def test_a_path_in_a_directory_the_span_removed_is_made_again_with_its_directory_only(
    daemon: Daemon, tmp_path: Path
) -> None:
    root, c = watched(daemon, tmp_path)
    write(root / "old" / "deep" / "o.txt", "o\n")
    write(root / "old" / "deep" / "p.txt", "p\n")
    (root / "old").chmod(0o750)
    a = mark(c, root, "a")
    (root / "old").chmod(0o755)
    for p in ("o.txt", "p.txt"):
        (root / "old" / "deep" / p).unlink()
    (root / "old" / "deep").rmdir()
    (root / "old").rmdir()
    b = mark(c, root, "b")
    revert(c, root, paths=[b"old/deep/o.txt"], **{"from": a, "to": b})
    assert (root / "old" / "deep" / "o.txt").read_text() == "o\n"
    assert not (root / "old" / "deep" / "p.txt").exists(), "outside the paths"
    assert (root / "old").stat().st_mode & 0o777 == 0o750


def test_the_agent_is_told_its_turn_was_reverted_not_that_the_workspace_was_rolled_back(
    daemon: Daemon, tmp_path: Path
) -> None:
    """The next ``turn-start`` reply lists what happened since the session's last mark, and the
    notice the agent's model reads says it. After a revert of one turn it must not say "rollback
    to mark revert": there is no such mark, and a rollback would mean everything since is gone."""
    from snapd.integrations import notice

    root, c = watched(daemon, tmp_path)
    write(root / "a.txt", "a0\n")
    write(root / "b.txt", "b0\n")
    start = mark(c, root, "turn-start", "agent")
    write(root / "a.txt", "a1\n")
    mark(c, root, "turn-end", "agent")
    mark(c, root, "turn-start", "agent")
    write(root / "b.txt", "b1\n")
    mark(c, root, "turn-end", "agent")
    revert(c, root, turn=start)
    reply = c.call("mark", workspace=os.fsencode(root), label="turn-start", session="agent", agent="attacker")
    text = notice.render(reply)
    assert "a.txt" in text, text
    assert "mark revert" not in text and "revert" in text and start in text, text
