"""``snapctl ui``: the timeline of one workspace, in the terminal (Textual).

The main screen lists :func:`snapd.ui.timeline.group`'s rows, newest first and selected. Enter
shows a row's files, a file its diff (side by side from 160 columns), ``h`` its history. ``r``
rolls back to the selected row's mark, ``u`` undoes the last rollback, ``v`` reverts the
selected turn, ``R`` (on a file) restores that file as at the selected row's mark: each
shows the plan first and applies that plan (its token) only on ``y``; a plan that changed
meanwhile is shown again, a refused revert shows its conflicts and writes nothing. ``/``
filters, ``q`` quits. New marks appear as the daemon's events bring them.

The event loop never waits for the daemon: every request runs in a thread
(``asyncio.to_thread`` inside a Textual worker), the events in a thread of their own.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from typing import Any

from rich.text import Text
from textual import on, work
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.notifications import SeverityLevel
from textual.screen import Screen
from textual.widgets import DataTable, Footer, Input, Static

from snapd.cli import revert as revert_text
from snapd.cli.output import path_text, when
from snapd.cli.rollback import plan_lines
from snapd.display import count, shown
from snapd.errors import NotFound, PlanChanged, RevertConflict, SnapdError
from snapd.ui import source as actions
from snapd.ui.screens import FilesScreen, MessageScreen, PlanScreen, TextScreen, diff_body, history_body
from snapd.ui.source import Action, Source
from snapd.ui.timeline import Row, filtered, group

CSS = """
#heading { height: auto; padding: 0 1; }
#body { padding: 0 1; }
#filter { display: none; }
#filter.shown { display: block; }
#timeline, #files { height: 1fr; }
ModalScreen { align: center middle; }
#dialog { width: 90%; height: auto; max-height: 90%; border: thick $accent; padding: 0 1; }
"""


class TimelineScreen(Screen[None]):
    """The rows, the filter box, the keys that act on the selected row."""

    AUTO_FOCUS = "#timeline"

    BINDINGS = [
        Binding("r", "app.rollback", "roll back here"),
        Binding("u", "app.undo", "undo"),
        Binding("v", "app.revert", "revert turn"),
        Binding("slash", "app.filter", "filter"),
        Binding("escape", "app.clear_filter", "clear filter", show=False),
    ]

    def compose(self) -> ComposeResult:
        yield Static(Text("loading…"), id="heading")
        yield Input(placeholder="filter: label, agent, session, message, path", id="filter")
        table: DataTable[Text] = DataTable(id="timeline", cursor_type="row")
        table.add_columns("time", "what", "agent", "session", "changed", "mark")
        yield table
        yield Footer()

    def on_mount(self) -> None:
        # Focused here, not only by AUTO_FOCUS, which Textual skips while the app has no focus
        # (a browser page, or a terminal that reports focus-out, blurs it before the screen is up).
        self.query_one("#timeline", DataTable).focus()


class Timeline(App[None]):
    CSS = CSS
    TITLE = "snapd"
    BINDINGS = [Binding("q", "quit", "quit")]

    def __init__(self, source: Source, *, live: bool = True) -> None:
        super().__init__()
        self.source = source
        self.live = live
        self.rows: list[Row] = []
        self.shown_rows: list[Row] = []
        self.selected_row: Row | None = None  # the row Enter opened (R restores to its mark)
        self.subscribed = threading.Event()
        self.main = TimelineScreen(id="timeline-screen")
        self._follower: threading.Thread | None = None

    def get_default_screen(self) -> Screen[Any]:
        return self.main

    async def on_mount(self) -> None:
        await self.reload()
        if self.live:
            self._follower = threading.Thread(target=self._follow, name="snapd-ui-events", daemon=True)
            self._follower.start()

    def on_unmount(self) -> None:
        self.source.stop()

    # -- the timeline ------------------------------------------------------------------------

    async def reload(self) -> None:
        try:
            reply = await asyncio.to_thread(self.source.log)
        except SnapdError as exc:
            self.main.query_one("#heading", Static).update(Text(shown(str(exc)), style="red"))
            return
        self.rows = group(reply["marks"])
        more = f" (+{count(reply['more'], 'older mark')}: snapctl log --all)" if reply.get("more") else ""
        heading = f"{path_text(reply['workspace'])}: {count(len(reply['marks']), 'mark')}{more}"
        self.main.query_one("#heading", Static).update(Text(heading))
        self.refill()

    def refill(self) -> None:
        table = self.main.query_one("#timeline", DataTable)
        # The selection stays on its row; on the newest row it follows what comes (as tail -f).
        keep = self.current().key if self.shown_rows and table.row_count and table.cursor_row else None
        self.shown_rows = filtered(self.rows, self.main.query_one("#filter", Input).value)
        table.clear()
        for row in self.shown_rows:
            what = row.label + (f": {row.run}" if row.run else "")
            table.add_row(
                Text(when(row.created)), Text(shown(what)), Text(shown(row.agent)), Text(shown(row.session)),
                Text(str(row.changed), justify="right"), Text(row.mark["id"]), key=row.key,
            )
        keys = [r.key for r in self.shown_rows]
        table.move_cursor(row=keys.index(keep) if keep in keys else 0)

    def current(self) -> Row:
        return self.shown_rows[self.main.query_one("#timeline", DataTable).cursor_row]

    def _follow(self) -> None:
        def tell(event: dict[str, Any]) -> None:
            try:
                self.call_from_thread(self.main.run_worker, self.reload, group="reload", exclusive=True)
            except RuntimeError:  # the app has stopped
                pass

        try:
            self.source.follow(tell, self.subscribed)
        except SnapdError as exc:
            try:
                self.call_from_thread(self.say, f"live updates stopped: {exc}", "warning")
            except RuntimeError:
                pass

    def say(self, text: str, severity: SeverityLevel = "information") -> None:
        """A line for the user, escaped and never read as markup (a path may hold ``[``)."""
        self.notify(shown(text), severity=severity, timeout=10, markup=False)

    # -- keys --------------------------------------------------------------------------------

    def action_filter(self) -> None:
        box = self.main.query_one("#filter", Input)
        box.add_class("shown")
        box.focus()

    @on(Input.Changed, "#filter")
    def _filter_changed(self) -> None:
        self.refill()

    @on(Input.Submitted, "#filter")
    def _filter_done(self) -> None:
        self.main.query_one("#timeline", DataTable).focus()

    def action_clear_filter(self) -> None:
        box = self.main.query_one("#filter", Input)
        box.value = ""
        box.remove_class("shown")
        self.main.query_one("#timeline", DataTable).focus()

    @on(DataTable.RowSelected, "#timeline")
    def _row_chosen(self) -> None:
        self.open_files()

    @work(group="read")
    async def open_files(self) -> None:
        if not self.shown_rows:
            return
        row = self.current()
        self.selected_row = row
        try:
            reply = await asyncio.to_thread(self.source.files, row.span)
        except NotFound as exc:
            first = row.state == "mark" and row.key == self.rows[-1].key  # ID~1 of the oldest: none
            self.say(f"{row.key} is the oldest mark: nothing before it to compare with" if first
                     else str(exc), "information" if first else "error")
            return
        except SnapdError as exc:
            self.say(str(exc), "error")
            return
        changed = count(len(reply["files"]), "file")
        title = f"{row.label} {row.mark['id']} ({when(row.created)}): {changed} changed"
        await self.push_screen(FilesScreen(shown(title), reply))

    @work(group="read")
    async def show_diff(self, path: str | dict[str, str]) -> None:
        row = self.selected_row
        assert row is not None
        try:
            reply = await asyncio.to_thread(self.source.diff, row.span, path)
        except SnapdError as exc:
            self.say(str(exc), "error")
            return
        start, end = row.span
        title = f"diff of {path_text(path)}: {start} .. {end or 'now'}"
        await self.push_screen(TextScreen(shown(title), diff_body(reply, self.size.width), path, "diff"))

    @work(group="read")
    async def show_history(self, path: str | dict[str, str]) -> None:
        try:
            reply = await asyncio.to_thread(self.source.history, path)
        except SnapdError as exc:
            self.say(str(exc), "error")
            return
        title = f"history of {path_text(path)}"
        await self.push_screen(TextScreen(title, history_body(reply), path, "history"))

    def action_rollback(self) -> None:
        if self.shown_rows:
            self.change(actions.rollback(self.current().mark["id"]))

    def action_undo(self) -> None:
        self.change(actions.undo())

    def action_revert(self) -> None:
        if not self.shown_rows:
            return
        row = self.current()
        if not row.is_turn:
            self.say("v reverts a turn: select a turn row", "warning")
            return
        self.change(actions.revert(row.first["id"]))

    def restore(self, path: str | dict[str, str]) -> None:
        row = self.selected_row
        assert row is not None
        self.change(actions.rollback(row.mark["id"], [path]))

    # -- changing the workspace --------------------------------------------------------------

    @work(exclusive=True, group="change")
    async def change(self, action: Action) -> None:
        """Plan, show, apply that plan on ``y`` (the module docstring)."""
        plan = await self._ask(self.source.plan, action)
        if plan is None:
            return
        question = f"apply this {action.what}? y / n"
        while True:
            if not await self.push_screen_wait(PlanScreen(_plan_lines(action, plan), question)):
                self.say("nothing changed")
                return
            try:
                result = await self._ask(self.source.apply, action, plan["plan"]["token"])
            except PlanChanged as exc:
                plan, question = exc.details, "the plan changed since it was shown: apply the new one? y / n"
                continue
            if result is None:
                return
            break
        self.say(_result_line(action, result))
        await self.reload()

    async def _ask(self, call: Callable[..., dict[str, Any]], *args: Any) -> dict[str, Any] | None:
        """``call(*args)`` off the event loop; a refused revert shown with its conflicts, any
        other error said: None then. A changed plan is raised (the caller asks again)."""
        try:
            return await asyncio.to_thread(call, *args)
        except PlanChanged:
            raise
        except RevertConflict as exc:
            await self._refused(exc)
        except SnapdError as exc:
            self.say(str(exc), "error")
        return None

    async def _refused(self, exc: RevertConflict) -> None:
        lines = [str(exc), "", *revert_text.conflict_lines(exc.details.get("conflicts", []))]
        await self.push_screen_wait(MessageScreen(lines))


def _plan_lines(action: Action, plan: dict[str, Any]) -> list[str]:
    if action.what == "revert":
        return revert_text.plan_lines(plan, kept=True)
    return plan_lines(plan, kept=True, asked=action.fields.get("to"))


DONE = {"rollback": "rolled back", "restore": "restored", "undo": "undone", "revert": "reverted"}


def _result_line(action: Action, res: dict[str, Any]) -> str:
    done = DONE[action.what]
    line = f"{done}: {count(res['applied'], 'path')}"
    if res.get("kept"):
        line += f", {count(len(res['kept']), 'path')} kept as they are"
    if res.get("pre_rollback"):
        line += f"; u undoes it (back to {res['pre_rollback']})"
    return line
