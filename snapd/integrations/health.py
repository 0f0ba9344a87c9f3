"""Each agent integration's health, as ``snapctl status`` shows it: its last hook call and its
last failures, recorded by the hook itself.

A hook that fails must not fail the agent's turn, so it warns on stderr — which most agents
hide. The record here is where a user finds out afterwards, even when the daemon is down (the
commonest failure): one small JSON file per agent in the state directory, rewritten by
temp file + rename on every call (no fsync: losing the last record to a power cut is harmless).
The file also remembers the directories the hook already warned about, so a warning that would
repeat on every prompt is given once.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

from snapd.config import ensure_private_dir

MAX_FAILURES = 5
MAX_WARNED = 100


def _path(hooks_dir: Path, agent: str) -> Path:
    return hooks_dir / f"{agent}.json"


def load(hooks_dir: Path, agent: str) -> dict[str, Any]:
    try:
        data = json.loads(_path(hooks_dir, agent).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def load_all(hooks_dir: Path) -> dict[str, dict[str, Any]]:
    """Every agent's record, by agent name."""
    try:
        names = sorted(p.name for p in hooks_dir.iterdir() if p.name.endswith(".json"))
    except OSError:
        return {}
    return {n.removesuffix(".json"): load(hooks_dir, n.removesuffix(".json")) for n in names}


def _save(hooks_dir: Path, agent: str, data: dict[str, Any]) -> None:
    ensure_private_dir(hooks_dir.parent)  # the state directory: a hook may be first to make it
    ensure_private_dir(hooks_dir)
    target = _path(hooks_dir, agent)
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    # 0600 like everything else of the user's that snapd writes: it names their directories
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(json.dumps(data))
    os.replace(tmp, target)


def record(hooks_dir: Path, agent: str, call: dict[str, Any], failure: str | None) -> None:
    """Record one hook call (``call``: event, session, cwd, outcome) and its failure, if any."""
    data = load(hooks_dir, agent)
    now = time.time()
    data["last_call"] = {"time": now, **call}
    if failure is not None:
        failures = [f for f in data.get("failures", []) if isinstance(f, dict)]
        failures.append({"time": now, "event": call.get("event"), "message": failure})
        data["failures"] = failures[-MAX_FAILURES:]
    _save(hooks_dir, agent, data)


def first_warning(hooks_dir: Path, agent: str, key: str) -> bool:
    """True the first time ``key`` is asked about for ``agent`` (then remembered)."""
    data = load(hooks_dir, agent)
    warned = [w for w in data.get("warned", []) if isinstance(w, str)]
    if key in warned:
        return False
    data["warned"] = (warned + [key])[-MAX_WARNED:]
    _save(hooks_dir, agent, data)
    return True
