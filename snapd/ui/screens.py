"""The screens the timeline opens: a row's files, a file's diff and history, and the modals
that show a plan (applied only on ``y``) or a message (a refusal, its conflicts).

Every string from a reply is shown through :func:`snapd.display.shown` inside a ``Text`` (never
as markup): labels, paths and messages can hold escape sequences and square brackets.
"""

from __future__ import annotations

from typing import Any

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import ModalScreen, Screen
from textual.widgets import DataTable, Footer, Static

from snapd.cli.output import path_text, when
from snapd.display import shown

SIDE_BY_SIDE = 160  # columns from which a diff is shown side by side


def lines_text(lines: list[str], style: str = "") -> Text:
    return Text("\n".join(shown(line, tabs=True) for line in lines), style=style)


def unified(diff: str) -> Text:
    out = Text()
    for line in diff.splitlines():
        style = ""
        if line.startswith("+") and not line.startswith("+++"):
            style = "green"
        elif line.startswith("-") and not line.startswith("---"):
            style = "red"
        elif line.startswith("@@"):
            style = "cyan"
        out.append(shown(line, tabs=True) + "\n", style=style)
    return out


def side_by_side(diff: str, width: int) -> Text:
    """A unified diff as two columns, before | after: removed lines on the left, added on the
    right, paired in the order they come; context on both sides."""
    half = max(10, (width - 3) // 2)
    rows: list[tuple[str, str, str, str]] = []  # left, left style, right, right style
    removed: list[str] = []
    added: list[str] = []

    def flush() -> None:
        for i in range(max(len(removed), len(added))):
            left = removed[i] if i < len(removed) else ""
            right = added[i] if i < len(added) else ""
            rows.append((left, "red" if left else "", right, "green" if right else ""))
        removed.clear()
        added.clear()

    for line in diff.splitlines():
        if line.startswith(("---", "+++")):
            continue
        if line.startswith("-"):
            removed.append(line[1:])
        elif line.startswith("+"):
            added.append(line[1:])
        else:
            flush()
            if line.startswith("@@"):
                rows.append((line, "cyan", "", ""))
            else:
                rows.append((line[1:], "", line[1:], ""))
    flush()
    out = Text()
    for left, ls, right, rs in rows:
        out.append(shown(left, tabs=True)[:half].ljust(half), style=ls)
        out.append(" | ")
        out.append(shown(right, tabs=True)[:half] + "\n", style=rs)
    return out


class FilesScreen(Screen[None]):
    """A row's changed paths; Enter: the diff of one, ``h``: its history, ``R``: restore it
    as at the row's mark."""

    BINDINGS = [
        Binding("escape", "app.pop_screen", "back"),
        Binding("h", "history", "history"),
        Binding("R", "restore", "restore file"),
    ]

    def __init__(self, title: str, reply: dict[str, Any]) -> None:
        super().__init__()
        self.heading = title
        self.files: list[dict[str, Any]] = reply["files"]

    def compose(self) -> ComposeResult:
        yield Static(Text(self.heading, style="bold"), id="heading")
        table: DataTable[Text] = DataTable(id="files", cursor_type="row")
        table.add_columns("status", "path")
        for f in self.files:
            table.add_row(Text(f["status"]), Text(path_text(f["path"])))
        if not self.files:
            table.add_row(Text("-"), Text("nothing changed"))
        yield table
        yield Footer()

    def selected(self) -> dict[str, Any] | None:
        table = self.query_one("#files", DataTable)
        if not self.files:
            return None
        return self.files[table.cursor_row]

    @on(DataTable.RowSelected, "#files")
    def action_diff(self) -> None:
        f = self.selected()
        if f is not None:
            self.app.show_diff(f["path"])  # type: ignore[attr-defined]

    def action_history(self) -> None:
        f = self.selected()
        if f is not None:
            self.app.show_history(f["path"])  # type: ignore[attr-defined]

    def action_restore(self) -> None:
        f = self.selected()
        if f is not None:
            self.app.restore(f["path"])  # type: ignore[attr-defined]


class TextScreen(Screen[None]):
    """A scrolling text (a diff, a history); ``h`` and ``R`` act on its path."""

    BINDINGS = [
        Binding("escape", "app.pop_screen", "back"),
        Binding("h", "history", "history"),
        Binding("R", "restore", "restore file"),
    ]

    def __init__(self, title: str, body: Text, path: str | dict[str, str], screen_id: str) -> None:
        super().__init__(id=screen_id)
        self.heading = title
        self.body = body
        self.path = path

    def compose(self) -> ComposeResult:
        yield Static(Text(self.heading, style="bold"), id="heading")
        with VerticalScroll():
            yield Static(self.body, id="body")
        yield Footer()

    def action_history(self) -> None:
        self.app.show_history(self.path)  # type: ignore[attr-defined]

    def action_restore(self) -> None:
        self.app.restore(self.path)  # type: ignore[attr-defined]


def diff_body(reply: dict[str, Any], width: int) -> Text:
    if not reply["files"]:
        return Text("no difference")
    out = Text()
    for f in reply["files"]:
        out.append(f"{path_text(f['path'])} ({f['status']})\n", style="bold")
        if f.get("not_captured"):
            out.append("not captured: " + ", ".join(f["not_captured"]) + "\n")
        elif f.get("binary"):
            out.append(f"binary: {f.get('old_size')} -> {f.get('new_size')} bytes\n")
        else:
            text = f.get("diff") or ""
            out.append_text(side_by_side(text, width) if width >= SIDE_BY_SIDE else unified(text))
    return out


def history_body(reply: dict[str, Any]) -> Text:
    out: list[str] = []
    for v in reply["versions"]:
        mark = v.get("mark")
        at = f"in {mark['id']} {mark['label']}" if mark and v.get("in_mark") else "between marks"
        who = ", ".join(f"{s['session']} ({s['agent']})" if s.get("agent") else str(s["session"])
                        for s in v.get("sessions") or [])
        size = "" if v.get("size") is None else f" {v['size']} B"
        out.append(f"{when(v['time'])}  {v['status']:<11}{size}  {at}  {who}".rstrip())
    return lines_text(out or ["no recorded change"])


class PlanScreen(ModalScreen[bool]):
    """A plan, as snapctl prints it; ``y`` dismisses with True (apply), anything else False."""

    BINDINGS = [
        Binding("y", "answer(True)", "apply"),
        Binding("n", "answer(False)", "no"),
        Binding("escape", "answer(False)", "no"),
    ]

    def __init__(self, lines: list[str], question: str) -> None:
        super().__init__(id="plan")
        self.lines = lines
        self.question = question

    def compose(self) -> ComposeResult:
        with VerticalScroll(id="dialog"):
            yield Static(lines_text(self.lines), id="plan-lines")
            yield Static(Text(self.question, style="bold"), id="question")

    def action_answer(self, yes: bool) -> None:
        self.dismiss(yes)


class MessageScreen(ModalScreen[None]):
    """Lines to read (a refusal and its conflicts); any of escape, enter, q closes it."""

    BINDINGS = [
        Binding("escape", "close", "close"),
        Binding("enter", "close", "close"),
        Binding("q", "close", "close"),
    ]

    def __init__(self, lines: list[str]) -> None:
        super().__init__(id="message")
        self.lines = lines

    def compose(self) -> ComposeResult:
        with VerticalScroll(id="dialog"):
            yield Static(lines_text(self.lines), id="message-lines")

    def action_close(self) -> None:
        self.dismiss(None)
