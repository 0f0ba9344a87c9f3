"""What ``snapctl ui`` draws, compared with SVG snapshots committed in tests/__snapshots__/
(pytest-textual-snapshot): the timeline, a unified diff and a side-by-side one.

The app is fed fixed marks and a fixed diff (a stand-in for :class:`snapd.ui.source.Source`
with the same methods), at a fixed size and in UTC, so the pictures depend on nothing but the
code. After a deliberate change of the look: ``pytest tests/test_ui_snapshots.py
--snapshot-update``, then look at the new SVGs before committing them.
"""

from __future__ import annotations

import importlib.util
import os
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

if any(importlib.util.find_spec(m) is None for m in ("textual", "pytest_textual_snapshot")):  # CI: a failure
    if os.environ.get("CI"):
        pytest.fail("the ui extra is not installed: pip install -e '.[ui]'", pytrace=False)
    pytest.skip("the ui extra is not installed: pip install -e '.[ui]'", allow_module_level=True)

from textual.pilot import Pilot  # noqa: E402

from snapd.ui.app import Timeline  # noqa: E402

pytestmark = [pytest.mark.clients, pytest.mark.timeout(60)]

T0 = 1_796_000_000.0  # 2026-11-29 23:33:20 UTC

DIFF = "\n".join([
    "--- a/src/app.py", "+++ b/src/app.py", "@@ -1,5 +1,6 @@", " import sys", "-def main():",
    '-    print("hello")', "+def main(argv):", '+    name = argv[1] if len(argv) > 1 else "world"',
    '+    print(f"hello {name}")', " ", " main(sys.argv)", "",
])


def _mark(n: int, label: str, session: str | None = None, agent: str | None = None, changed: int = 0,
          **summary: Any) -> dict[str, Any]:
    return {"id": f"{n:02d}snapmark", "seq": n, "created": T0 + 60 * n, "label": label,
            "kind": "baseline" if label == "baseline" else "user", "session": session, "agent": agent,
            "message": summary.pop("message", None), "pinned": False,
            "summary": {"changed": changed, "examples": {}, **summary}}


RUN = {"argv": ["make", "test"], "exit": None, "signal": None}
MARKS = list(reversed([
    _mark(1, "baseline", changed=12),
    _mark(2, "turn-start", "s-41", "claude"),
    _mark(3, "turn-end", "s-41", "claude", changed=3),
    _mark(4, "before-refactor", changed=1),
    _mark(5, "turn-start", "run-7f3a", "run", run=RUN, message="make test"),
    _mark(6, "turn-end", "run-7f3a", "run", changed=2, run={**RUN, "exit": 2}, message="make test"),
    _mark(7, "turn-start", "s-42", "codex"),
]))


class FixedSource:
    """The daemon's answers, fixed."""

    root = b"/home/me/proj"

    def log(self, limit: int = 500) -> dict[str, Any]:
        return {"workspace": "/home/me/proj", "marks": MARKS, "more": 0}

    def files(self, span: tuple[str, str | None]) -> dict[str, Any]:
        return {"files": [{"path": "src/app.py", "status": "modified"},
                          {"path": "README.md", "status": "added"}]}

    def diff(self, span: tuple[str, str | None], path: Any) -> dict[str, Any]:
        return {"files": [{"path": "src/app.py", "status": "modified", "binary": False, "diff": DIFF,
                           "added": 3, "removed": 2}]}

    def stop(self) -> None:
        pass


@pytest.fixture(autouse=True)
def _utc() -> Iterator[None]:
    old = os.environ.get("TZ")
    os.environ["TZ"] = "UTC"
    time.tzset()
    yield
    if old is None:
        del os.environ["TZ"]
    else:
        os.environ["TZ"] = old
    time.tzset()


def app() -> Timeline:
    return Timeline(FixedSource(), live=False)  # type: ignore[arg-type]


async def _until(pilot: Pilot[Any], predicate: Callable[[], object]) -> None:
    deadline = time.monotonic() + 20
    while not predicate():
        assert time.monotonic() < deadline, "the app did not get there in 20 s"
        await pilot.pause(0.05)


def _loaded(pilot: Pilot[Any]) -> Any:
    return _until(pilot, lambda: pilot.app.shown_rows)  # type: ignore[attr-defined]


async def _to_diff(pilot: Pilot[Any]) -> None:
    await _loaded(pilot)
    await pilot.press("down", "enter")  # the run turn's files, then the first file's diff
    await _until(pilot, lambda: pilot.app.screen.id is None and pilot.app.screen.query("#files"))
    await pilot.press("enter")
    await _until(pilot, lambda: pilot.app.screen.id == "diff")


def test_timeline(snap_compare: Any) -> None:
    assert snap_compare(app(), terminal_size=(110, 16), run_before=_loaded)


def test_unified_diff(snap_compare: Any) -> None:
    assert snap_compare(app(), terminal_size=(100, 20), run_before=_to_diff)


def test_side_by_side_diff(snap_compare: Any) -> None:
    assert snap_compare(app(), terminal_size=(160, 20), run_before=_to_diff)
