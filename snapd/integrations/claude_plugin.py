"""Claude Code's plugin form of snapd's hooks: ``snapctl integrate claude-code --plugin [DIR]``.

Users of Claude Code's plugin system install hooks as a plugin rather than by editing
``settings.json``. A plugin is a directory: ``.claude-plugin/plugin.json`` names it and
``hooks/hooks.json`` holds hooks in the settings file's layout. The hook command must be this
installation's snapctl by absolute path (never a ``snapctl`` on PATH), which a plugin shipped
as static files cannot know, so snapctl writes the directory: the plugin, and a one-plugin
marketplace beside it (``.claude-plugin/marketplace.json``) so that Claude Code installs it
with its own commands, offline::

    claude plugin marketplace add DIR && claude plugin install snapd@snapd-local

Claude Code copies an installed plugin into its cache, so rewriting DIR (a new snapctl path)
takes effect after ``claude plugin marketplace update snapd-local`` and a reinstall; and
removing DIR does not uninstall it. ``--check`` says whether Claude Code has it enabled
(``enabledPlugins`` in its user settings) and whether the user-wide hooks are also there (each
turn would be marked twice).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from snapd import __version__
from snapd.errors import IntegrationRefused
from snapd.integrations import jsonfile
from snapd.integrations.base import Change, Context, Finding, Scope
from snapd.integrations.claude_code import AGENT as CLAUDE_CODE

NAME = "snapd"
MARKETPLACE = "snapd-local"
PLUGIN_ID = f"{NAME}@{MARKETPLACE}"
DESCRIPTION = "snapd: mark each turn (turn-start, turn-end) so the workspace can be rolled back to it"


def default_dir(ctx: Context) -> Path:
    """``$XDG_DATA_HOME/snapd/claude-code-plugin`` (``~/.local/share`` when unset)."""
    value = ctx.env.get("XDG_DATA_HOME", "")
    base = Path(value) if os.path.isabs(value) else ctx.home / ".local" / "share"
    return base / "snapd" / "claude-code-plugin"


def install_command(where: Path) -> str:
    return f"claude plugin marketplace add {where} && claude plugin install {PLUGIN_ID}"


def _files(where: Path, ctx: Context) -> dict[Path, dict[str, Any]]:
    """Each file of the plugin and what it holds."""
    hooks: dict[str, Any] = {"description": DESCRIPTION}
    for event in CLAUDE_CODE.events:  # user-wide hooks: a plugin applies to every project
        jsonfile.put_hook(hooks, event, CLAUDE_CODE.entry(Scope(), ctx, event), CLAUDE_CODE.is_ours, where)
    return {
        where / ".claude-plugin" / "plugin.json": {
            "name": NAME, "version": __version__, "description": DESCRIPTION,
            "author": {"name": "snapd"},
        },
        where / ".claude-plugin" / "marketplace.json": {
            "name": MARKETPLACE, "owner": {"name": "snapd"},
            "plugins": [{"name": NAME, "source": "./", "description": DESCRIPTION}],
        },
        where / "hooks" / "hooks.json": hooks,
    }


def _ours(where: Path) -> bool:
    """Whether ``where`` is empty or holds snapd's plugin (never overwrite someone else's)."""
    manifest = where / ".claude-plugin" / "plugin.json"
    if not manifest.exists():
        return not where.exists() or not any(where.iterdir())
    try:
        return bool(json.loads(manifest.read_text(encoding="utf-8")).get("name") == NAME)
    except (OSError, ValueError, AttributeError):
        return False


def install(where: Path, ctx: Context) -> list[Change]:
    if not _ours(where):
        raise IntegrationRefused(
            f"{where} holds something other than snapd's plugin; choose another directory (--plugin DIR)",
            path=str(where),
        )
    changes = []
    for path, doc in _files(where, ctx).items():
        current = jsonfile.load(path, CLAUDE_CODE.name) if path.exists() else None
        if current == doc:
            changes.append(Change(path, "unchanged", "snapd's Claude Code plugin"))
            continue
        jsonfile.save(path, doc)
        action = "updated" if current is not None else "added"
        changes.append(Change(path, action, "snapd's Claude Code plugin"))
    return changes


def remove(where: Path) -> list[Change]:
    if not _ours(where):
        raise IntegrationRefused(f"{where} is not snapd's plugin: left alone", path=str(where))
    changes = []
    for rel in (".claude-plugin/plugin.json", ".claude-plugin/marketplace.json", "hooks/hooks.json"):
        path = where / rel
        try:
            path.unlink()
            changes.append(Change(path, "removed", "snapd's Claude Code plugin"))
        except FileNotFoundError:
            changes.append(Change(path, "absent", "snapd's Claude Code plugin"))
    for d in (where / ".claude-plugin", where / "hooks", where):
        try:
            d.rmdir()
        except OSError:
            pass  # missing, or something else is in it: kept
    return changes


def _enabled(ctx: Context) -> bool:
    settings = CLAUDE_CODE.settings(Scope(), ctx)
    try:
        doc = jsonfile.load(settings, CLAUDE_CODE.name)
    except IntegrationRefused:
        return False
    enabled = doc.get("enabledPlugins")
    return isinstance(enabled, dict) and enabled.get(PLUGIN_ID) is True


def check(where: Path, ctx: Context) -> list[Finding]:
    hooks_file = where / "hooks" / "hooks.json"
    if not hooks_file.exists():
        return [Finding(False, f"no snapd plugin in {where}: `snapctl integrate claude-code --plugin`")]
    out = CLAUDE_CODE.hook_findings(jsonfile.load(hooks_file, CLAUDE_CODE.name), hooks_file)
    if _enabled(ctx):
        out.append(Finding(True, f"Claude Code has {PLUGIN_ID} enabled"))
    else:
        out.append(Finding(False, f"Claude Code does not have {PLUGIN_ID} enabled: {install_command(where)}"))
    user = CLAUDE_CODE.settings(Scope(), ctx)
    try:
        user_doc = jsonfile.load(user, CLAUDE_CODE.name)
    except IntegrationRefused:
        user_doc = {}
    if any(jsonfile.our_hooks(user_doc, ev, CLAUDE_CODE.is_ours) for ev in CLAUDE_CODE.events):
        out.append(Finding(False, f"snapd's hooks are also in {user} (user-wide): each turn would be marked "
                                  "twice; remove one (`snapctl integrate claude-code --remove`)"))
    return out
