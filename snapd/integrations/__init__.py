"""Agent integrations: ``snapctl integrate AGENT`` writes an agent's hooks, ``snapctl hook
AGENT`` is what those hooks run. One module per agent says where its configuration lives, how
snapd's hook entries look in it, how its events look on stdin (or argv) and what its protocol
lets a hook print; the shared runtime (:mod:`.hook`) marks the turns.

This package is client side: it talks to the daemon only through :mod:`snapd.ipc.client`
(an import-linter contract keeps store, capture, rollback and daemon out), and it is imported
on every prompt an agent submits, so each module imports only what its command needs.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from snapd.errors import UsageError

if TYPE_CHECKING:
    from snapd.integrations.base import Agent

#: The agents, by the name users type, and the module that knows each.
AGENTS: dict[str, str] = {
    "claude-code": "claude_code",
    "codex": "codex",
    "gemini": "gemini",
    "opencode": "opencode",
    "aider": "aider",
}


def agent(name: str) -> Agent:
    """The integration of agent ``name`` (its module is imported now, and only it)."""
    module = AGENTS.get(name)
    if module is None:
        raise UsageError(f"unknown agent {name!r}; known: {', '.join(AGENTS)}")
    found: Agent = importlib.import_module(f"snapd.integrations.{module}").AGENT
    return found
