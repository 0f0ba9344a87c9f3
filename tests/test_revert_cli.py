"""``snapctl revert``: the command line over a real daemon (snapd/cli/revert.py). The revert's
own rules are tests/test_revert_tree.py's and tests/test_revert_live.py's; here: what is asked
for reaches the daemon (a span, a turn, a session, paths), the plan is shown and asked about
(or only shown, or applied with --yes), a refusal prints each conflict's hunks and exits 13
with nothing written, markers mode lists its files, and --json is the reply itself.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from e2e_helpers import Daemon, Pty, describe, snapshot, write

from snapd.errors import Conflict, NotFound, RevertConflict, UsageError

pytestmark = pytest.mark.timeout(180)

LINES = "".join(f"line {i}\n" for i in range(1, 13))


def _edit(path: Path, line: int, text: str) -> None:
    """Line ``line`` (1-based) of ``path`` replaced by ``text``."""
    lines = path.read_text().splitlines(keepends=True)
    lines[line - 1] = text + "\n"
    path.write_text("".join(lines))


def _mark(d: Daemon, ws: Path, label: str, session: str = "s1") -> str:
    return str(d.ctl_json("mark", label, "--session", session, "-w", ws)["id"])


def _turn(d: Daemon, ws: Path) -> str:
    """A turn of session s1 that edits line 2 of a.txt, creates new.txt and deletes old.txt,
    after which line 11 of a.txt is edited (a later change that does not overlap); the id
    of its turn-start mark."""
    write(ws / "a.txt", LINES)
    write(ws / "old.txt", "old\n")
    start = _mark(d, ws, "turn-start")
    _edit(ws / "a.txt", 2, "line 2 by the agent")
    write(ws / "new.txt", "new\n")
    (ws / "old.txt").unlink()
    _mark(d, ws, "turn-end")
    _edit(ws / "a.txt", 11, "line 11 by the user")
    return start


def _reverted() -> str:
    return LINES.replace("line 11\n", "line 11 by the user\n")


def _ctl(d: Daemon, ws: Path, *args: str) -> tuple[int, Any]:
    cp = d.ctl("revert", "-w", str(ws), "--json", *args, check=False)
    try:
        return cp.returncode, json.loads(cp.stdout)
    except json.JSONDecodeError:
        raise AssertionError(describe(cp) + d.log()[-3000:]) from None


def _marks(d: Daemon, ws: Path) -> list[str]:
    return [m["id"] for m in d.ctl_json("log", "--all", "-w", ws)["marks"]]


def test_a_turn_shown_then_reverted_keeping_later_edits_then_undone(daemon: Daemon, ws: Path) -> None:
    start = _turn(daemon, ws)
    before, marks = snapshot(ws), _marks(daemon, ws)
    shown = daemon.ctl("revert", "--turn", start, "--dry-run", cwd=ws)
    out = shown.stdout.decode()
    assert f"the changes of {start} turn-start" in out, out
    for line in ("restore a.txt  [merged with later edits]", "delete new.txt", "recreate old.txt"):
        assert line in out, out
    assert snapshot(ws) == before and _marks(daemon, ws) == marks  # a dry run changes nothing
    rc, plan = _ctl(daemon, ws, "--turn", start, "--dry-run")
    assert rc == 0 and plan["revert"]["spans"][0]["from"]["id"] == start, plan
    assert plan["revert"]["merged"] == ["a.txt"] and plan["plan"]["token"]

    # no terminal, no --yes: refused, nothing written
    cp = daemon.ctl("revert", "--turn", start, cwd=ws, check=False)
    assert cp.returncode == UsageError.exit_code and b"pass --yes" in cp.stderr, describe(cp)
    assert snapshot(ws) == before

    done = daemon.ctl("revert", "--turn", start, "--yes", cwd=ws).stdout.decode()
    assert "reverted: 3 paths; `snapctl undo` returns to" in done, done
    assert (ws / "a.txt").read_text() == _reverted()
    assert not (ws / "new.txt").exists() and (ws / "old.txt").read_text() == "old\n"
    daemon.ctl("undo", "--yes", cwd=ws)
    assert snapshot(ws) == before


def test_the_question_is_asked_on_the_terminal(daemon: Daemon, ws: Path) -> None:
    start = _turn(daemon, ws)
    t = Pty(daemon.env, "revert", "--turn", start, cwd=ws)
    t.read_until(b"apply this revert? [y/N] ")
    t.send(b"y\n")
    assert t.finish() == 0, t.out
    assert b"delete new.txt" in t.out and b"reverted: 3 paths" in t.out, t.out
    assert (ws / "a.txt").read_text() == _reverted()


def test_an_overlap_is_refused_with_its_hunks_and_nothing_written(daemon: Daemon, ws: Path) -> None:
    start = _turn(daemon, ws)
    _edit(ws / "a.txt", 2, "line 2 by the user")  # over the agent's own edit
    before, marks = snapshot(ws), _marks(daemon, ws)
    cp = daemon.ctl("revert", "--turn", start, "--yes", cwd=ws, check=False)
    assert cp.returncode == RevertConflict.exit_code == 13, describe(cp)
    out = cp.stdout.decode()
    assert "conflict: a.txt" in out, out
    hunk = out[out.index("<<<<<<< now"):]
    assert hunk.index("line 2 by the user") < hunk.index("|||||||") < hunk.index("line 2 by the agent")
    assert hunk.index("=======") < hunk.index("  line 2\n") < hunk.index(">>>>>>>"), out
    assert b"nothing was changed" in cp.stderr, describe(cp)
    assert snapshot(ws) == before and _marks(daemon, ws) == marks  # no file, no mark

    rc, err = _ctl(daemon, ws, "--turn", start, "--dry-run")
    assert rc == 13 and err["ok"] is False and err["error"]["code"] == "revert_conflict", err
    (clash,) = err["error"]["details"]["conflicts"]
    assert clash["path"] == "a.txt"
    assert [(h["ours"], h["base"], h["theirs"]) for h in clash["hunks"]] == [
        (["line 2 by the user\n"], ["line 2 by the agent\n"], ["line 2\n"])
    ]
    assert snapshot(ws) == before


def test_markers_mode_writes_them_and_lists_the_file(daemon: Daemon, ws: Path) -> None:
    start = _turn(daemon, ws)
    _edit(ws / "a.txt", 2, "line 2 by the user")
    shown = daemon.ctl("revert", "--turn", start, "--conflicts=markers", "--dry-run", cwd=ws).stdout.decode()
    assert "restore a.txt  [conflict markers written]" in shown, shown
    cp = daemon.ctl("revert", "--turn", start, "--conflicts=markers", "--yes", cwd=ws, check=False)
    assert cp.returncode == 0, describe(cp)
    assert "conflict markers in a.txt: resolve them" in cp.stdout.decode(), describe(cp)
    text = (ws / "a.txt").read_text()
    assert "<<<<<<< " in text and "line 2 by the user\n" in text and ">>>>>>> " in text, text
    assert not (ws / "new.txt").exists()  # the rest of the revert is done


def test_a_span_limited_to_paths_and_a_span_up_to_now(daemon: Daemon, ws: Path) -> None:
    start = _turn(daemon, ws)
    end = _marks(daemon, ws)[0]
    rc, r = _ctl(daemon, ws, f"{start}..{end}", "--yes", "--", "new.txt")
    assert rc == 0, r
    assert not (ws / "new.txt").exists() and not (ws / "old.txt").exists()  # only new.txt taken back
    (span,) = r["revert"]["spans"]
    assert (span["from"]["id"], span["to"]["id"]) == (start, end)
    rc, r = _ctl(daemon, ws, f"{start}..", "--yes")  # up to now: every change since A
    assert rc == 0 and r["revert"]["spans"][0]["to"] is None, r
    assert (ws / "a.txt").read_text() == LINES and (ws / "old.txt").exists()


def test_a_session_reverted_keeps_another_sessions_turn(daemon: Daemon, ws: Path) -> None:
    write(ws / "mine.txt", "s1 before\n")
    write(ws / "theirs.txt", "s2 before\n")
    _mark(daemon, ws, "turn-start", "s1")
    write(ws / "mine.txt", "s1 after\n")
    _mark(daemon, ws, "turn-end", "s1")
    _mark(daemon, ws, "turn-start", "s2")
    write(ws / "theirs.txt", "s2 after\n")
    _mark(daemon, ws, "turn-end", "s2")
    rc, r = _ctl(daemon, ws, "--session", "s1", "--yes")
    assert rc == 0, r
    assert (ws / "mine.txt").read_text() == "s1 before\n" and (ws / "theirs.txt").read_text() == "s2 after\n"


def test_what_to_revert_is_checked_before_any_request(daemon: Daemon, ws: Path) -> None:
    for args, said in (((), b"one of the arguments"), (("A",), b"is no span"), (("A..B..C",), b"is no span"),
                       (("--turn", "A", "--session", "s"), b"not allowed with"),
                       (("--turn", "A", "--since", "B"), b"--since goes with --session")):
        cp = daemon.ctl("revert", *args, cwd=ws, check=False)
        assert cp.returncode == UsageError.exit_code and said in cp.stderr, describe(cp)
    rc, err = _ctl(daemon, ws, "A..B")  # no such marks: the daemon says so, as JSON
    assert rc == NotFound.exit_code and err["error"]["code"] == "not_found", err


def test_a_plan_token_applies_only_the_plan_shown(daemon: Daemon, ws: Path) -> None:
    """An editor's flow: --dry-run --json shows the plan, --yes --plan-token applies it; when a
    later edit to a merged file makes the plan differ, nothing is applied (plan_changed, 10)."""
    start = _turn(daemon, ws)
    rc, plan = _ctl(daemon, ws, "--turn", start, "--dry-run")
    assert rc == 0, plan
    _edit(ws / "a.txt", 7, "line 7 by the user")  # a.txt is merged: its result is another now
    before = snapshot(ws)
    rc, err = _ctl(daemon, ws, "--turn", start, "--yes", "--plan-token", plan["plan"]["token"])
    assert rc == Conflict.exit_code and err["error"]["code"] == "plan_changed", err
    assert snapshot(ws) == before
    rc, plan = _ctl(daemon, ws, "--turn", start, "--dry-run")
    rc, res = _ctl(daemon, ws, "--turn", start, "--yes", "--plan-token", plan["plan"]["token"])
    assert rc == 0 and res["revert"]["merged"] == ["a.txt"], res
    assert (ws / "a.txt").read_text() == _reverted().replace("line 7\n", "line 7 by the user\n")
