"""Another user, for real: uid 65534 against a daemon run by root (and the other way round).

Two walls keep another user out, and each is tested on its own:

1. the socket and the store live in directories only the owner can enter (0700), so another
   uid cannot reach the socket nor read any file of the store;
2. behind that wall, the daemon reads each peer's credentials (``SO_PEERCRED`` through
   ZeroMQ) and refuses any uid but its own, root included. To test it, the test opens the
   directories on purpose (as a shared ``SNAPD_HOME`` set up by mistake would be) and sends
   every kind of request as uid 65534: each gets a ``permission`` error reply, and nothing
   changes — not the marks, not the workspace, not the daemon.

The other uid runs through the ``nobody`` fixture (:class:`e2e_helpers.OtherUser`); without
root or ``setpriv`` these tests fail under ``CI`` and skip elsewhere.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from e2e_helpers import Daemon, OtherUser, snapshot

from snapd.errors import PermissionRefused
from snapd.ipc.client import Client

pytestmark = pytest.mark.timeout(120)

def state(d: Daemon, ws: Path) -> dict[str, Any]:
    """What another user's requests must not change."""
    st = d.ctl_json("status")
    return {
        "pid": st["pid"],
        "workspaces": [(w["root"], w["watching"], w["last_mark"]["id"]) for w in st["workspaces"]],
        "log": d.ctl_json("log", "-w", str(ws))["marks"],
        "disk": snapshot(ws),
    }


def watched(d: Daemon, top: Path) -> Path:
    """A workspace of root's, watched by ``d``, with one file."""
    ws = top / "ws"
    (ws / "src").mkdir(parents=True)
    (ws / "src" / "a.txt").write_text("root's\n")
    d.ctl("watch", str(ws))
    return ws


def test_another_user_cannot_reach_the_socket_nor_read_the_store(
    root_daemon: tuple[Daemon, Path], nobody: OtherUser
) -> None:
    d, top = root_daemon
    watched(d, top)
    home = top / "home"
    store = home / "store"
    files = [p for p in store.rglob("*") if p.is_file()]
    assert files and all(p.stat().st_mode & 0o077 == 0 for p in files)
    paths = [home, store, store / "catalog.sqlite", home / "run", *files[:3]]
    got = nobody.attempt(d.endpoint, paths, [("ping", {})], wait=1)
    assert set(got["paths"].values()) == {"PermissionError"}, got["paths"]
    (op, code, message), = got["requests"]
    assert code == "permission" and "not allowed to connect" in message, got["requests"]
    assert got["raw"] == ["silence"] * 4, got["raw"]
    assert "request.refused" not in d.log()  # it never reached the daemon
    # Even with the way in opened, the store's own directories keep its files private.
    home.chmod(0o711)
    got = nobody.attempt(d.endpoint, [store, store / "catalog.sqlite", *files[:3]], [], wait=1)
    assert set(got["paths"].values()) == {"PermissionError"}, got["paths"]


def test_another_user_is_refused_and_changes_nothing(
    root_daemon: tuple[Daemon, Path], nobody: OtherUser
) -> None:
    d, top = root_daemon
    ws = watched(d, top)
    m = d.ctl_json("mark", "m", "-w", str(ws))["id"]
    (ws / "src" / "a.txt").write_text("changed since m\n")
    d.ctl("mark", "n", "-w", str(ws))
    mine = nobody.top / "mine"
    nobody.run("mkdir", "-p", mine)
    before = state(d, ws)
    # The wall of modes opened on purpose: only the credentials check is left.
    (top / "home").chmod(0o711)
    (top / "home" / "run").chmod(0o711)
    (top / "home" / "run" / "control.sock").chmod(0o666)
    w = str(ws)
    requests: list[tuple[str, dict[str, Any]]] = [
        ("ping", {}),
        ("status", {}),
        ("log", {"workspace": w}),
        ("cat", {"workspace": w, "path": "src/a.txt", "at": m}),
        ("mark", {"workspace": w, "label": "intruder"}),
        ("watch", {"path": str(mine)}),
        ("rollback_apply", {"workspace": w, "to": m}),
        ("undo", {"workspace": w}),
        ("pin", {"workspace": w, "mark": m}),
        ("gc", {}),
        ("unwatch", {"workspace": w}),
        ("forget", {"workspace": w}),
        ("stop", {}),
    ]
    got = nobody.attempt(d.endpoint, [], requests, wait=10)
    for op, code, message in got["requests"]:
        assert code == "permission", (op, code, message)
        assert "refuses requests from uid 65534" in message, message
    assert got["raw"] == ["permission"] * 4, got["raw"]
    assert d.alive() and state(d, ws) == before
    refused = sum('"request.refused"' in ln and "permission" in ln for ln in d.log().splitlines())
    assert refused == len(requests) + 4, refused
    print(f"\nother user: {refused} requests refused, nothing changed")


def test_a_daemon_refuses_even_root(nobody: OtherUser) -> None:
    """Root can reach any socket; a daemon that belongs to another uid still refuses it."""
    d = nobody.start_daemon(nobody.top / "home" / "snapd")
    try:
        with Client(d.endpoint, 5.0) as c:
            with pytest.raises(PermissionRefused, match="refuses requests from uid 0"):
                c.call("stop")
        assert d.alive()
        assert json.loads(d.ctl("status", "--json").stdout)["pid"] == d.pid
    finally:
        assert d.stop() == 0

