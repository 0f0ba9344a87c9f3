"""Whether Codex trusts snapd's hooks, as Codex itself says (``integrate codex --check``).

Codex runs a ``hooks.json`` hook only once the user trusted it in ``/hooks``: it records a hash of
the hook under ``[hooks.state."<hooks.json>:<event>:<group>:<index>"]`` in ``config.toml`` and
skips, without a word, a hook whose current hash differs (never trusted, or changed since). The
recorded hash alone cannot tell a changed hook from a trusted one (how Codex hashes is its
own business), so when the ``codex`` program is on PATH, ``--check`` asks it: ``codex
app-server`` speaks JSON-RPC over stdio, and its ``hooks/list`` gives each hook's ``key`` and
``trustStatus`` (``trusted``, ``managed``, ``untrusted``, or ``modified``: changed since it was
trusted). It runs for at most
:data:`DEADLINE_S`; any failure returns the reason and the caller falls back to reading
``config.toml``.
"""

from __future__ import annotations

import json
import os
import selectors
import shutil
import subprocess
import time
from pathlib import Path
from typing import IO, Any

from snapd.integrations.base import Context

DEADLINE_S = 15.0
TRUSTED = frozenset({"trusted", "managed"})
MEANING = {"untrusted": ": never trusted", "modified": ": changed since it was trusted"}


def _requests(cwd: Path) -> bytes:
    lines = [
        {"jsonrpc": "2.0", "id": 1, "method": "initialize",
         "params": {"clientInfo": {"name": "snapctl", "version": "1"}}},
        {"jsonrpc": "2.0", "method": "initialized"},
        {"jsonrpc": "2.0", "id": 2, "method": "hooks/list", "params": {"cwds": [str(cwd)]}},
    ]
    return b"".join(json.dumps(m).encode() + b"\n" for m in lines)


def _answer(stdout: IO[bytes], deadline: float) -> dict[str, object] | str:
    """The ``hooks/list`` result read from ``stdout`` (one JSON message per line)."""
    sel = selectors.DefaultSelector()
    sel.register(stdout, selectors.EVENT_READ)
    buf = b""
    while (left := deadline - time.monotonic()) > 0:
        if not sel.select(left):
            continue
        chunk = os.read(stdout.fileno(), 65536)
        if not chunk:
            return "codex app-server closed its output without an answer"
        buf += chunk
        *lines, buf = buf.split(b"\n")
        for line in lines:
            try:
                msg = json.loads(line)
            except ValueError:
                continue
            if isinstance(msg, dict) and msg.get("id") == 2:
                result = msg.get("result")
                return result if isinstance(result, dict) else f"hooks/list failed: {msg.get('error')}"
    return f"codex app-server gave no answer within {DEADLINE_S:g} s"


def listed(ctx: Context, cwd: Path) -> list[dict[str, Any]] | str:
    """The hooks ``codex app-server`` lists for ``cwd`` (``key``, ``command``, ``trustStatus``,
    ``currentHash``…), or why Codex could not be asked (no ``codex`` on PATH, no answer in time)."""
    program = shutil.which("codex", path=ctx.env.get("PATH"))
    if program is None:
        return "no codex program on PATH"
    try:
        proc = subprocess.Popen(
            [program, "app-server"], env=dict(ctx.env), cwd=str(cwd),
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
        )
    except OSError as exc:
        return f"cannot run {program}: {exc}"
    assert proc.stdin is not None and proc.stdout is not None
    try:
        proc.stdin.write(_requests(cwd))
        proc.stdin.flush()
        result = _answer(proc.stdout, time.monotonic() + DEADLINE_S)
    except OSError as exc:
        result = f"codex app-server: {exc}"
    finally:
        proc.kill()
        proc.wait()
    if isinstance(result, str):
        return result
    out: list[dict[str, Any]] = []
    data = result.get("data")
    for entry in data if isinstance(data, list) else []:
        hooks = entry.get("hooks") if isinstance(entry, dict) else None
        out += [h for h in (hooks if isinstance(hooks, list) else []) if isinstance(h, dict)]
    return out


def statuses(ctx: Context, cwd: Path) -> dict[str, str] | str:
    """Each hook's ``trustStatus`` by its key, as Codex reports it (:func:`listed`)."""
    hooks = listed(ctx, cwd)
    if isinstance(hooks, str):
        return hooks
    return {h["key"]: str(h.get("trustStatus")) for h in hooks if isinstance(h.get("key"), str)}
