"""``snapctl run -- CMD``: a turn around a command (snapd/cli/run.py).

The protocol's ``run`` argument of ``mark`` is checked here too (pure); everything else runs a
real daemon and the real CLI as a subprocess.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from snapd.errors import BadRequest
from snapd.ipc import protocol

pytestmark = pytest.mark.timeout(120)


def _mark_request(run: Any) -> bytes:
    args = {"label": "turn-end", "run": run}
    return json.dumps({"op": "mark", "id": "r", "version": protocol.PROTOCOL_VERSION, "args": args}).encode()


def test_marks_run_argument_is_checked_before_any_io() -> None:
    good = {"argv": ["make", "test"], "exit": 2, "signal": None}
    assert protocol.parse_request(_mark_request(good), 1 << 20).args["run"] == good
    killed = {"argv": ["sleep", "9"], "exit": None, "signal": "SIGTERM"}
    assert protocol.parse_request(_mark_request(killed), 1 << 20).args["run"] == killed
    for bad in (["make"], {"argv": [], "exit": 0, "signal": None},
                {"argv": ["x"], "exit": True, "signal": None}, {"argv": ["x"], "exit": 0},
                {"argv": ["x"], "exit": 0, "signal": None, "more": 1},
                {"argv": [1], "exit": 0, "signal": None}, {"argv": ["\udc80"], "exit": 0, "signal": None}):
        with pytest.raises(BadRequest, match="argument 'run'"):
            protocol.parse_request(_mark_request(bad), 1 << 20)
