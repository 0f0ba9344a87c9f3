"""``snapctl integrate AGENT`` and ``snapctl hook AGENT``: wiring agents to snapd.

``integrate`` edits the agent's own configuration (:mod:`snapd.integrations`), says what it
changed, and with ``--check`` says whether the hooks are there and will run (exit 1 when not).
``hook`` is what the agents run; ``main()`` hands it over before building the parser, since it
runs on every prompt an agent submits.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any

from snapd.cli import options
from snapd.cli.output import emit, print_json
from snapd.errors import UsageError

Env = dict[str, str]


def add_parsers(sub: Any) -> None:
    from snapd.integrations import AGENTS

    sp = sub.add_parser(
        "integrate", help="make an agent mark its turns (writes the agent's hook settings)",
        description="Merge snapd's hooks into an agent's own configuration, keeping everything else.",
    )
    sp.add_argument("agent", choices=sorted(AGENTS), metavar="AGENT", help=", ".join(AGENTS))
    where = sp.add_mutually_exclusive_group()
    where.add_argument("--user", action="store_true", help="every project the agent works in (default)")
    where.add_argument(
        "--project", metavar="DIR", help="only this project (Claude Code: .claude/settings.local.json)"
    )
    where.add_argument(
        "--plugin", metavar="DIR", nargs="?", const="",
        help="Claude Code only: write the hooks as a plugin (and a local marketplace) in DIR "
        "(default ~/.local/share/snapd/claude-code-plugin) for `claude plugin install`",
    )
    what = sp.add_mutually_exclusive_group()
    what.add_argument("--remove", action="store_true", help="take out exactly what integrate added")
    what.add_argument(
        "--print", dest="show", action="store_true", help="show what to add by hand; change nothing"
    )
    what.add_argument("--check", action="store_true", help="are the hooks there, and will they run?")
    options.add_common(sp)
    hp = sub.add_parser(
        "hook", help="what an agent's hooks run (reads the agent's event; always exits 0)",
        description="Mark turn-start/turn-end from an agent's hook event (stdin JSON, or a JSON argument).",
    )
    hp.add_argument("agent", metavar="AGENT", help="the agent whose hook runs: " + ", ".join(AGENTS))
    hp.add_argument("rest", nargs=argparse.REMAINDER, help="the agent's own arguments (its event, as JSON)")
    hp.add_argument("--json", action="store_true", help=argparse.SUPPRESS)


def cmd_hook(args: argparse.Namespace, env: Env) -> int:
    from snapd.integrations.hook import main

    return main([args.agent, *args.rest], env)


def cmd_integrate(args: argparse.Namespace, env: Env) -> int:
    from snapd.integrations import agent
    from snapd.integrations.base import Context, Scope, snapctl_argv

    integration = agent(args.agent)
    if args.plugin is not None:
        return _plugin(args, env)
    scope = Scope(Path(os.path.abspath(args.project))) if args.project else Scope()
    if scope.project is not None and not scope.project.is_dir():
        raise UsageError(f"--project {scope.project}: no such directory")
    integration.scope_check(scope)
    ctx = Context(env, snapctl_argv())
    if args.show:
        text = integration.show(scope, ctx)
        if args.json:
            print_json({"agent": integration.name, "text": text})
        else:
            print(text, end="")
        return 0
    if args.check:
        findings = integration.findings(scope, ctx)
        ok = bool(findings) and all(f.ok for f in findings)
        if args.json:
            print_json({"agent": integration.name, "ok": ok, "findings": _json(findings)})
        else:
            for f in findings:
                emit(f"{f.label()}: {f.text}")
            emit(f"{integration.title} ({scope.describe()}): "
                 + ("hooks present and will run" if ok else "hooks missing or will not run"))
        return 0 if ok else 1
    changes = integration.remove(scope, ctx) if args.remove else integration.install(scope, ctx)
    # After writing, what still stands in the way (Codex: hooks it will not run until trusted):
    # "marks its turns" is said only when it is true.
    findings = [] if args.remove else [f for f in integration.findings(scope, ctx) if not f.ok or f.warning]
    blocked = [f for f in findings if not f.ok]
    if args.json:
        out: dict[str, Any] = {"agent": integration.name, "changes": [
            {"path": str(c.path), "action": c.action, "what": c.what} for c in changes]}
        if not args.remove:
            out.update(ok=not blocked, findings=_json(findings))
        print_json(out)
        return 0
    for c in changes:
        emit(c.line())
    if args.remove:
        return 0
    for f in findings:
        if f.warning:
            emit(f"warning: {f.text}", err=True)
    if blocked:
        emit(f"{integration.title}'s hooks are written ({scope.describe()}) but will not all run yet: "
             + "".join(f"\n  - {f.text}" for f in blocked)
             + f"\nthen `snapctl integrate {integration.name} --check` says whether they will")
    else:
        emit(f"{integration.title} marks its turns ({scope.describe()}); "
             f"`snapctl integrate {integration.name} --check` checks, --remove undoes")
    return 0


def _json(findings: list[Any]) -> list[dict[str, Any]]:
    return [{"ok": f.ok, "warning": f.warning, "text": f.text} for f in findings]


def _plugin(args: argparse.Namespace, env: Env) -> int:
    """``integrate claude-code --plugin [DIR]``: the hooks as a Claude Code plugin."""
    from snapd.integrations import claude_plugin
    from snapd.integrations.base import Context, snapctl_argv

    if args.agent != "claude-code":
        raise UsageError(f"--plugin is Claude Code's form of the hooks; {args.agent} has none")
    ctx = Context(env, snapctl_argv())
    where = Path(os.path.abspath(args.plugin)) if args.plugin else claude_plugin.default_dir(ctx)
    if args.check:
        findings = claude_plugin.check(where, ctx)
        ok = all(f.ok for f in findings)
        if args.json:
            print_json({"agent": args.agent, "plugin": str(where), "ok": ok,
                        "findings": _json(findings)})
        else:
            for f in findings:
                emit(f"{f.label()}: {f.text}")
        return 0 if ok else 1
    if args.show:
        raise UsageError("--print with --plugin: the plugin is files; write them with --plugin DIR")
    changes = claude_plugin.remove(where) if args.remove else claude_plugin.install(where, ctx)
    if args.json:
        print_json({
            "agent": args.agent, "plugin": str(where), "install": claude_plugin.install_command(where),
            "changes": [{"path": str(c.path), "action": c.action, "what": c.what} for c in changes],
        })
        return 0
    for c in changes:
        emit(c.line())
    if args.remove:
        emit(f"if Claude Code has it installed: claude plugin uninstall {claude_plugin.PLUGIN_ID}")
    else:
        emit(f"install it in Claude Code: {claude_plugin.install_command(where)}")
        emit(f"(or for one session: claude --plugin-dir {where})")
    return 0
