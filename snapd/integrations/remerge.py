"""Keeping snapd's project hooks through a rollback.

An agent settings file that git tracks (``.gemini/settings.json``, ``.codex/hooks.json``…) is
the user's file: captured and restored like any other (:mod:`snapd.capture.ignore`). When
snapd's own ``--project`` integration lives in it, a rollback that restores the user's content
would switch off the hooks that mark the next turn. So after a rollback or an undo, the CLI
asks :func:`after_rollback`: for each agent settings file the rollback changed, if the version
before it (the ``pre_rollback`` mark) held snapd's hooks and the file now does not, snapd's
hooks are merged back in — by ``integrate --project``'s own code, so the rest of the restored
file stays as restored — and the reply says so (``hooks_merged_back``).

Why the CLI, after the rollback, and nowhere else:

- Not the daemon: the rollback engine restores exactly what the mark holds, under its journal,
  and its result must equal the mark; writing an agent's configuration is agent knowledge,
  which the import contracts keep client side, and the hook command must name the user's own
  snapctl and be written in the user's environment (``CLAUDE_CONFIG_DIR``, ``CODEX_HOME``),
  which the daemon does not have.
- Not the agent's next hook: with its entries gone, the agent no longer runs it.
- The CLI runs as the user, in their environment, as ``integrate`` does, once the rollback is
  complete: the merge is an ordinary later edit (captured as such, and ``undo`` still returns
  to the state before the rollback).

What it cannot cover: a rollback applied by another client (an editor plugin, the library)
merges nothing back; ``integrate --check`` then reports the hooks missing.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from snapd.errors import BadRequest, SnapdError
from snapd.integrations import AGENTS, agent
from snapd.integrations.base import Agent, Context, Scope, snapctl_argv
from snapd.paths import decode_path

#: ``cat(path, mark)``: the bytes of workspace path ``path`` at ``mark``, None when it had none.
Cat = Callable[[bytes, str], "bytes | None"]


def project_files(ctx: Context) -> list[tuple[Agent, bytes]]:
    """Each agent's project settings file, relative to its project directory."""
    probe = Path("/project")
    out = []
    for name in AGENTS:
        a = agent(name)
        if a.supports_project:
            out += [(a, os.fsencode(f.relative_to(probe))) for f in a.files(Scope(probe), ctx)
                    if probe in f.parents]
    return out


def touched(reply: dict[str, Any], ctx: Context) -> Iterator[tuple[Agent, Path, bytes]]:
    """The agent settings files a rollback plan (or its result) ``reply`` changes: (agent,
    project directory, the file's workspace path)."""
    plan = reply.get("plan")
    if not isinstance(plan, dict) or not isinstance(reply.get("workspace"), str):
        return
    root = Path(reply["workspace"])
    shapes = project_files(ctx)
    for op in plan.get("ops", []):
        try:
            rel = decode_path(op.get("path") if isinstance(op, dict) else None)
        except BadRequest:
            continue
        for a, f in shapes:
            if rel == f:
                yield a, root, rel
            elif rel.endswith(b"/" + f):
                yield a, root / os.fsdecode(rel[: -len(f) - 1]), rel


def to_keep(plan: dict[str, Any], env: dict[str, str]) -> list[dict[str, str]]:
    """Before a rollback: the settings files in ``plan`` that hold snapd's hooks now, which
    :func:`after_rollback` will keep (for the plan shown)."""
    ctx = Context(env, snapctl_argv())
    out = []
    for a, project, rel in touched(plan, ctx):
        try:
            if a.has_hooks(Scope(project), ctx):
                out.append({"agent": a.name, "path": str(Path(plan["workspace"]) / os.fsdecode(rel))})
        except SnapdError:
            continue
    return out


def after_rollback(reply: dict[str, Any], env: dict[str, str], cat: Cat) -> list[dict[str, str]]:
    """Merge snapd's hooks back where the rollback in ``reply`` took them out of a project's
    agent settings; what was merged back (``agent``, ``path``) or could not be (``error``)."""
    pre = reply.get("pre_rollback")
    if not isinstance(pre, str):
        return []
    ctx = Context(env, snapctl_argv())
    out: list[dict[str, str]] = []
    for a, project, rel in touched(reply, ctx):
        path = str(Path(reply["workspace"]) / os.fsdecode(rel))
        try:
            if a.has_hooks(Scope(project), ctx):
                continue
            before = cat(rel, pre)
            if before is None or not a.holds_hooks(before):
                continue
            a.install(Scope(project), ctx)
        except SnapdError as exc:
            out.append({"agent": a.name, "path": path, "error": exc.message})
            continue
        out.append({"agent": a.name, "path": path})
    return out
