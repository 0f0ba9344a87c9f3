"""``snapctl ui``: Textual's headless pilot drives the timeline app against a real daemon and a
real workspace (select a turn, its files, a diff; roll back, undo and revert with the plan shown
and confirmed, checked on disk; a refused revert; a live mark), and the pure timeline.
"""

from __future__ import annotations

import asyncio
import importlib.util
import os
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from e2e_helpers import Daemon, Pty, write
from hypothesis import given
from hypothesis import strategies as st

if importlib.util.find_spec("textual") is None:  # under CI a failure, never a quiet skip
    if os.environ.get("CI"):
        pytest.fail("the ui extra is not installed: pip install -e '.[ui]'", pytrace=False)
    pytest.skip("the ui extra is not installed: pip install -e '.[ui]'", allow_module_level=True)

from textual.pilot import Pilot  # noqa: E402
from textual.widgets import DataTable, Static  # noqa: E402

from snapd.ui.app import Timeline  # noqa: E402
from snapd.ui.screens import FilesScreen, MessageScreen, PlanScreen, TextScreen  # noqa: E402
from snapd.ui.source import Source  # noqa: E402
from snapd.ui.timeline import Row, filtered, group  # noqa: E402

pytestmark = [pytest.mark.clients, pytest.mark.timeout(90)]

SIZE = (120, 40)


def mark(d: Daemon, ws: Path, label: str, **fields: Any) -> dict[str, Any]:
    return d.call("mark", label=label, workspace=str(ws), **fields)


def turn(d: Daemon, ws: Path, session: str, change: Callable[[], None]) -> tuple[str, str]:
    start = mark(d, ws, "turn-start", agent="claude", session=session)["id"]
    change()
    end = mark(d, ws, "turn-end", agent="claude", session=session)["id"]
    return start, end


async def until(pilot: Pilot[Any], predicate: Callable[[], object], what: str, timeout: float = 20.0) -> None:
    """Let the app run until ``predicate()`` holds; fail naming ``what`` at the deadline."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout}s: {what}")
        await pilot.pause(0.05)


def text_of(app: Timeline, selector: str) -> str:
    return str(app.screen.query_one(selector, Static).render())


def run(scenario: Callable[[], Any]) -> None:
    asyncio.run(scenario())


def lines10(**changed: str) -> str:
    lines = [f"line {i}" for i in range(1, 11)]
    for k, v in changed.items():
        lines[int(k.removeprefix("l")) - 1] = v
    return "\n".join(lines) + "\n"


# -- against a real daemon -------------------------------------------------------------------


def test_a_turn_is_one_row_its_files_and_a_diff(ws: Path, daemon: Daemon) -> None:
    write(ws / "a.txt", "one\n")
    mark(daemon, ws, "before")

    def change() -> None:
        write(ws / "a.txt", "one\ntwo\n")
        write(ws / "b.txt", "new\n")

    start, end = turn(daemon, ws, "s1", change)

    async def scenario() -> None:
        app = Timeline(Source(daemon.env, str(ws)), live=False)
        async with app.run_test(size=SIZE) as pilot:
            await until(pilot, lambda: app.shown_rows, "the timeline loaded")
            row = app.current()  # the newest is selected: the turn, one row for its two marks
            assert row.state == "ended" and [m["id"] for m in row.marks] == [start, end]
            assert [r.label for r in app.shown_rows] == ["turn", "before", "baseline"]
            await pilot.press("enter")
            await until(pilot, lambda: isinstance(app.screen, FilesScreen), "the turn's files shown")
            screen = app.screen
            assert isinstance(screen, FilesScreen)
            got = {(f["path"], f["status"]) for f in screen.files}
            assert got == {("a.txt", "modified"), ("b.txt", "added")}
            await pilot.press("enter")  # the first file: a.txt
            await until(pilot, lambda: app.screen.id == "diff", "the diff shown")
            body = text_of(app, "#body")
            assert "+two" in body and "a.txt" in body, body

    run(scenario)


def test_rollback_shows_the_plan_applies_it_on_y_and_undo_returns(ws: Path, daemon: Daemon) -> None:
    write(ws / "a.txt", "v1\n")
    first = mark(daemon, ws, "first")["id"]
    write(ws / "a.txt", "v2\n")
    write(ws / "later.txt", "later\n")
    mark(daemon, ws, "second")

    async def scenario() -> None:
        app = Timeline(Source(daemon.env, str(ws)), live=False)
        async with app.run_test(size=SIZE) as pilot:
            await until(pilot, lambda: len(app.shown_rows) == 3, "three marks listed")
            await pilot.press("down")
            assert app.current().mark["id"] == first
            await pilot.press("r")
            await until(pilot, lambda: isinstance(app.screen, PlanScreen), "the plan shown")
            plan = text_of(app, "#plan-lines")
            assert f"to {first} first" in plan and "a.txt" in plan and "later.txt" in plan, plan
            await pilot.press("n")  # no: nothing changes
            await until(pilot, lambda: not isinstance(app.screen, PlanScreen), "the plan closed")
            assert (ws / "a.txt").read_text() == "v2\n" and (ws / "later.txt").exists()
            await pilot.press("r")
            await until(pilot, lambda: isinstance(app.screen, PlanScreen), "the plan shown again")
            await pilot.press("y")
            await until(pilot, lambda: (ws / "a.txt").read_text() == "v1\n", "a.txt rolled back")
            await until(pilot, lambda: not (ws / "later.txt").exists(), "later.txt deleted")
            await until(pilot, lambda: any(r.label == "pre-rollback" for r in app.rows), "pre-rollback")
            await pilot.press("u")
            await until(pilot, lambda: isinstance(app.screen, PlanScreen), "the undo's plan shown")
            assert "later.txt" in text_of(app, "#plan-lines")
            await pilot.press("y")
            await until(pilot, lambda: (ws / "a.txt").read_text() == "v2\n", "undo brought a.txt back")
            assert (ws / "later.txt").read_text() == "later\n"

    run(scenario)


def test_a_plan_that_changed_before_y_is_shown_again_not_applied(ws: Path, daemon: Daemon) -> None:
    write(ws / "a.txt", "v1\n")
    mark(daemon, ws, "first")
    write(ws / "a.txt", "v2\n")

    async def scenario() -> None:
        app = Timeline(Source(daemon.env, str(ws)), live=False)
        async with app.run_test(size=SIZE) as pilot:
            await until(pilot, lambda: app.shown_rows, "the timeline loaded")
            await pilot.press("r")
            await until(pilot, lambda: isinstance(app.screen, PlanScreen), "the plan shown")
            assert "new.txt" not in text_of(app, "#plan-lines")
            write(ws / "new.txt", "made after the plan was shown\n")
            await pilot.press("y")  # the shown plan's token no longer matches: asked again
            await until(pilot, lambda: "plan changed" in text_of(app, "#question"), "asked again")
            assert "new.txt" in text_of(app, "#plan-lines")
            assert (ws / "a.txt").read_text() == "v2\n" and (ws / "new.txt").exists()
            await pilot.press("y")
            await until(pilot, lambda: not (ws / "new.txt").exists(), "the new plan applied")
            assert (ws / "a.txt").read_text() == "v1\n"

    run(scenario)


def test_v_reverts_the_selected_turn_keeping_a_later_edit(ws: Path, daemon: Daemon) -> None:
    write(ws / "f.txt", lines10())
    mark(daemon, ws, "before")
    turn(daemon, ws, "s1", lambda: write(ws / "f.txt", lines10(l2="the turn's line 2")))
    write(ws / "f.txt", lines10(l2="the turn's line 2", l9="my line 9"))  # after the turn: kept

    async def scenario() -> None:
        app = Timeline(Source(daemon.env, str(ws)), live=False)
        async with app.run_test(size=SIZE) as pilot:
            await until(pilot, lambda: app.shown_rows, "the timeline loaded")
            assert app.current().is_turn
            await pilot.press("v")
            await until(pilot, lambda: isinstance(app.screen, PlanScreen), "the revert's plan shown")
            assert "merged with later edits" in text_of(app, "#plan-lines")
            await pilot.press("y")
            want = lines10(l9="my line 9")  # line 2 as before the turn, line 9 as edited after it
            await until(pilot, lambda: (ws / "f.txt").read_text() == want, "the turn reverted")

    run(scenario)


def test_a_refused_revert_shows_its_conflicts_and_writes_nothing(ws: Path, daemon: Daemon) -> None:
    write(ws / "f.txt", lines10())
    mark(daemon, ws, "before")
    turn(daemon, ws, "s1", lambda: write(ws / "f.txt", lines10(l2="the turn's line 2")))
    now = lines10(l2="my own line 2")  # the same line, edited again after the turn
    write(ws / "f.txt", now)

    async def scenario() -> None:
        app = Timeline(Source(daemon.env, str(ws)), live=False)
        async with app.run_test(size=SIZE) as pilot:
            await until(pilot, lambda: app.shown_rows, "the timeline loaded")
            marks_before = len(app.rows)
            await pilot.press("v")
            await until(pilot, lambda: isinstance(app.screen, MessageScreen), "the refusal shown")
            shown = text_of(app, "#message-lines")
            assert "conflict: f.txt" in shown and "my own line 2" in shown, shown
            await pilot.press("escape")
            await until(pilot, lambda: not isinstance(app.screen, MessageScreen), "the refusal closed")
            assert (ws / "f.txt").read_text() == now
            assert len(group(daemon.call("log", workspace=str(ws))["marks"])) == marks_before  # no mark taken

    run(scenario)


def test_a_live_mark_appears_without_a_key(ws: Path, daemon: Daemon) -> None:
    async def scenario() -> None:
        app = Timeline(Source(daemon.env, str(ws)))
        async with app.run_test(size=SIZE) as pilot:
            await until(pilot, lambda: app.shown_rows and app.subscribed.is_set(), "loaded and subscribed")
            write(ws / "x.txt", "x\n")
            made = await asyncio.to_thread(mark, daemon, ws, "from-outside")
            await until(pilot, lambda: app.shown_rows[0].mark["id"] == made["id"], "the new mark on top")
            assert app.current().mark["id"] == made["id"]  # the newest was selected: it follows
            await pilot.press("down")  # a row further down (the baseline) stays selected as marks come
            await asyncio.to_thread(mark, daemon, ws, "second-from-outside")
            await until(pilot, lambda: len(app.shown_rows) == 3, "the second one listed")
            assert app.current().label == "baseline"

    run(scenario)


def test_a_mark_taken_before_the_subscription_is_listed_too(ws: Path, daemon: Daemon) -> None:
    """A mark between the first read and the subscription (no event reaches the app): the app
    reads again once subscribed, as the protocol says."""

    class Late(Source):
        def call(self, op: Any, deadline: str, **fields: Any) -> dict[str, Any]:
            if op == "status":  # the events thread's first request, before it subscribes
                mark(daemon, ws, "in-between")
            return super().call(op, deadline, **fields)

    async def scenario() -> None:
        app = Timeline(Late(daemon.env, str(ws)))
        async with app.run_test(size=SIZE) as pilot:
            await until(pilot, lambda: app.subscribed.is_set(), "subscribed")
            await until(pilot, lambda: app.shown_rows[0].label == "in-between", "the mark in between listed")

    run(scenario)


def test_restore_one_file_from_its_diff(ws: Path, daemon: Daemon) -> None:
    write(ws / "a.txt", "a1\n")
    write(ws / "b.txt", "b1\n")
    mark(daemon, ws, "both")
    write(ws / "a.txt", "a2\n")
    write(ws / "b.txt", "b2\n")

    async def scenario() -> None:
        app = Timeline(Source(daemon.env, str(ws)), live=False)
        async with app.run_test(size=SIZE) as pilot:
            await until(pilot, lambda: app.shown_rows, "the timeline loaded")
            await pilot.press("enter")
            await until(pilot, lambda: isinstance(app.screen, FilesScreen), "the mark's files")
            await pilot.press("enter")
            await until(pilot, lambda: isinstance(app.screen, TextScreen), "a.txt's diff")
            await pilot.press("R")
            await until(pilot, lambda: isinstance(app.screen, PlanScreen), "the restore's plan")
            plan = text_of(app, "#plan-lines")
            assert "a.txt" in plan and "b.txt" not in plan, plan
            await pilot.press("y")
            await until(pilot, lambda: (ws / "a.txt").read_text() == "a1\n", "a.txt restored")
            assert (ws / "b.txt").read_text() == "b2\n"

    run(scenario)


def test_history_and_the_filter(ws: Path, daemon: Daemon) -> None:
    write(ws / "a.txt", "1\n")
    mark(daemon, ws, "one")
    write(ws / "a.txt", "2\n")
    turn(daemon, ws, "s9", lambda: write(ws / "a.txt", "3\n"))

    async def scenario() -> None:
        app = Timeline(Source(daemon.env, str(ws)), live=False)
        async with app.run_test(size=SIZE) as pilot:
            await until(pilot, lambda: len(app.shown_rows) == 3, "the timeline loaded")
            await pilot.press("slash", "s", "9")  # only the rows of session s9
            await until(pilot, lambda: [r.label for r in app.shown_rows] == ["turn"], "filtered to the turn")
            await pilot.press("escape")
            await until(pilot, lambda: len(app.shown_rows) == 3, "the filter cleared")
            await pilot.press("enter")
            await until(pilot, lambda: isinstance(app.screen, FilesScreen), "the turn's files")
            await pilot.press("h")
            await until(pilot, lambda: app.screen.id == "history", "a.txt's history")
            body = text_of(app, "#body")
            assert body.count("modified") >= 2 and "s9 (claude)" in body, body

    run(scenario)


def test_snapctl_ui_in_a_real_terminal_draws_the_timeline_and_q_quits(ws: Path, daemon: Daemon) -> None:
    """The command itself, in a pseudo-terminal (as over SSH: no mouse needed): it draws the
    workspace's marks, and q ends it with exit 0."""
    mark(daemon, ws, "seen-in-a-pty")
    env = {**daemon.env, "TERM": "xterm-256color", "COLUMNS": "120", "LINES": "30"}
    term = Pty(env, "ui", "-w", ws, cwd=ws)
    try:
        term.read_until(b"seen-in-a-pty")
        term.send(b"q")
        assert term.finish() == 0
    finally:
        if term.proc.poll() is None:
            term.proc.kill()
            term.proc.wait(10)


@pytest.mark.parametrize(("argv", "says"), [
    (("--port", "8080"), "--port and --host go with --web"),
    (("--json",), "--json goes with --web"),
    ((), "needs a terminal"),
])
def test_snapctl_ui_refuses_what_it_cannot_do(ws: Path, daemon: Daemon, argv: tuple[str, ...], says: str,
                                              ) -> None:
    cp = daemon.ctl("ui", "-w", ws, *argv, check=False)
    assert cp.returncode == 2 and says in (cp.stderr + cp.stdout).decode(), cp


def test_snapctl_ui_outside_a_workspace_fails_at_once(tmp_path: Path, daemon: Daemon) -> None:
    (tmp_path / "elsewhere").mkdir()
    cp = daemon.ctl("ui", "-w", tmp_path / "elsewhere", check=False)
    assert cp.returncode == 6 and b"workspace" in cp.stderr, cp


def test_names_are_shown_escaped_never_as_markup_or_terminal_codes(ws: Path, daemon: Daemon) -> None:
    hostile = "\x1b]0;owned\x07[red]x[/red]"
    write(ws / "[b]x.txt", "x\n")
    mark(daemon, ws, "odd", agent=hostile, session=hostile)

    async def scenario() -> None:
        app = Timeline(Source(daemon.env, str(ws)), live=False)
        async with app.run_test(size=SIZE) as pilot:
            await until(pilot, lambda: app.shown_rows, "the timeline loaded")
            table = app.main.query_one("#timeline", DataTable)
            cells = [str(c) for c in table.get_row_at(0)]
            assert cells[2] == cells[3] == "\\x1b]0;owned\\x07[red]x[/red]", cells
            await pilot.press("enter")
            await until(pilot, lambda: isinstance(app.screen, FilesScreen), "its files")
            await pilot.press("enter")
            await until(pilot, lambda: app.screen.id == "diff", "the diff of [b]x.txt")
            assert "diff of [b]x.txt" in text_of(app, "#heading")

    run(scenario)


def test_enter_on_the_oldest_mark_says_there_is_nothing_before_it(ws: Path, daemon: Daemon) -> None:
    async def scenario() -> None:
        app = Timeline(Source(daemon.env, str(ws)), live=False)
        async with app.run_test(size=SIZE, notifications=True) as pilot:
            await until(pilot, lambda: app.shown_rows, "the timeline loaded")
            await pilot.press("enter")  # the baseline, alone
            said = lambda: [n.message for n in app._notifications]  # noqa: E731
            await until(pilot, lambda: any("oldest mark" in m for m in said()), "told why there is no diff")
            assert app.screen is app.main

    run(scenario)


def test_a_daemon_that_does_not_answer_never_freezes_the_app(ws: Path, daemon: Daemon) -> None:
    """Requests run in threads: with the daemon stopped (SIGSTOP) mid-request, keys still work."""
    write(ws / "a.txt", "1\n")
    mark(daemon, ws, "one")

    async def scenario() -> None:
        app = Timeline(Source(daemon.env, str(ws)), live=False)
        async with app.run_test(size=SIZE) as pilot:
            await until(pilot, lambda: len(app.shown_rows) == 2, "the timeline loaded")
            os.kill(daemon.pid, signal.SIGSTOP)
            try:
                await pilot.press("enter")  # asks the stopped daemon for the files: no answer
                await pilot.press("slash", "z", "z")
                await until(pilot, lambda: app.shown_rows == [], "the filter applied meanwhile", timeout=10)
                assert app.screen is app.main
            finally:
                os.kill(daemon.pid, signal.SIGCONT)
            await until(pilot, lambda: isinstance(app.screen, FilesScreen), "the answer shown once it came")

    run(scenario)


class _Unfocused(Timeline):
    """An app that starts without the terminal's focus (a browser page blurs it first)."""

    def on_load(self) -> None:
        self.set_reactive(Timeline.app_focus, False)


def test_the_timeline_has_the_keys_even_when_the_app_starts_unfocused(ws: Path, daemon: Daemon) -> None:
    write(ws / "a.txt", "1\n")
    mark(daemon, ws, "one")

    async def scenario() -> None:
        app = _Unfocused(Source(daemon.env, str(ws)), live=False)
        async with app.run_test(size=SIZE) as pilot:
            await until(pilot, lambda: len(app.shown_rows) == 2, "the timeline loaded")
            assert app.focused is app.main.query_one("#timeline", DataTable)
            await pilot.press("down", "up", "enter")
            await until(pilot, lambda: isinstance(app.screen, FilesScreen), "the mark's files")
            assert app.focused is app.screen.query_one("#files", DataTable)
            await pilot.press("enter")
            await until(pilot, lambda: app.screen.id == "diff", "its diff")

    run(scenario)


def test_no_color_is_honoured(monkeypatch: pytest.MonkeyPatch) -> None:
    """NO_COLOR (no-color.org): the app draws in monochrome (Textual's filter, kept on)."""
    from textual.filter import Monochrome

    monkeypatch.setenv("NO_COLOR", "1")
    app = Timeline(Source({}, "/"), live=False)
    assert app.no_color and any(isinstance(f, Monochrome) for f in app._filters)


# -- the timeline, pure ----------------------------------------------------------------------

_n = iter(range(1, 10**9))


def _mark(label: str, session: str | None = None, **extra: Any) -> dict[str, Any]:
    n = next(_n)
    return {"id": f"m{n}", "seq": n, "created": 1_800_000_000.0 + n, "label": label, "kind": "user",
            "session": session, "agent": "claude" if session else None, "message": None,
            "summary": {"changed": 1, **extra}}


def test_turns_group_by_session_and_interleave() -> None:
    ms = [_mark("baseline"), _mark("turn-start", "a"), _mark("turn-start", "b"), _mark("x"),
          _mark("turn-end", "a"), _mark("turn-start", "b"), _mark("turn-end", "b"), _mark("turn-start", "a")]
    rows = group(list(reversed(ms)))
    got = [(r.state, [m["id"] for m in r.marks]) for r in rows]
    assert got == [
        ("open", ["m8"]),
        ("ended", ["m6", "m7"]),
        ("ended", ["m2", "m5"]),
        ("mark", ["m4"]),
        ("interrupted", ["m3"]),
        ("mark", ["m1"]),
    ]
    assert rows[1].span == ("m6", "m7") and rows[0].span == ("m8", None) and rows[3].span == ("m4~1", "m4")


def test_a_run_turn_shows_its_command_and_exit() -> None:
    start = _mark("turn-start", "run-1", run={"argv": ["make", "test"], "exit": None, "signal": None})
    end = _mark("turn-end", "run-1", run={"argv": ["make", "test"], "exit": 2, "signal": None})
    end["message"] = "make test"
    (row,) = group([end, start])
    assert row.run == "make test (exit 2)"
    assert filtered([row], "MAKE") == [row] and filtered([row], "nomatch") == []


LABELS = st.sampled_from(["turn-start", "turn-end", "x"])


@given(st.lists(st.tuples(LABELS, st.sampled_from([None, "a", "b"])), max_size=30))
def test_every_mark_is_in_exactly_one_row_newest_first(spec: list[tuple[str, str | None]]) -> None:
    ms = [_mark(label, session) for label, session in spec]
    rows: list[Row] = group(list(reversed(ms)))
    ids = [m["id"] for r in rows for m in r.marks]
    assert sorted(ids) == sorted(m["id"] for m in ms)
    lasts = [r.last["seq"] for r in rows]
    assert lasts == sorted(lasts, reverse=True)
