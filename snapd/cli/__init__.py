"""``snapctl``: the command-line client. One function per command in :mod:`.commands`.

Start-up cost matters (agents run ``snapctl mark`` on every turn), so this package imports
only the client, configuration and protocol modules — never the store or the watcher — and
``zmq`` is loaded on the first call.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from snapd import __version__
from snapd.cli import commands
from snapd.errors import SnapdError


def _rollback_flags(sp: argparse.ArgumentParser) -> None:
    sp.add_argument("--dry-run", action="store_true", help="show the plan, change nothing")
    sp.add_argument("-y", "--yes", action="store_true", help="apply without asking")
    sp.add_argument(
        "--force", action="store_true", help="also overwrite or delete paths snapd could not capture"
    )


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="snapctl", description="Control snapd: marks, history and workspaces.")
    p.add_argument("--version", action="version", version=f"snapctl {__version__}")
    p.add_argument("--timeout", type=float, default=None, help="seconds to wait for the daemon (default 10)")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def add(name: str, help: str, *, ws: bool = True, json: bool = True) -> argparse.ArgumentParser:
        sp = sub.add_parser(name, help=help, description=help)
        if ws:
            sp.add_argument(
                "-w", "--workspace", help="workspace root (default: the one holding the current directory)"
            )
        if json:
            sp.add_argument("--json", action="store_true", help="print JSON for scripts")
        sp.set_defaults(func=getattr(commands, "cmd_" + name.replace("-", "_")))
        return sp

    add("status", "show the daemon, its workspaces and warnings", ws=False)
    sp = add("watch", "watch a directory; returns once its baseline is captured", ws=False)
    sp.add_argument("path", nargs="?", default=".")
    sp = add("unwatch", "stop watching a workspace (history is kept)", ws=False)
    sp.add_argument("path", nargs="?", default=None)
    sp = add("forget", "stop watching a workspace and delete its history", ws=False)
    sp.add_argument("path", nargs="?", default=None)
    sp = add("mark", "record the workspace's current state under LABEL")
    sp.add_argument("label")
    sp.add_argument("-m", "--message")
    sp.add_argument("--agent")
    sp.add_argument("--session")
    sp = add("log", "list marks, newest first")
    sp.add_argument("-n", "--limit", type=int, default=20)
    sp.add_argument("--agent")
    sp.add_argument("--session")
    sp = add("show", "a mark's metadata and the files it changed")
    sp.add_argument("mark")
    sp = add("cat", "print a file's bytes at a mark", json=False)
    sp.add_argument("mark")
    sp.add_argument("path")
    sp = add("verify", "re-hash stored objects; non-zero exit on any problem", ws=False)
    sp.add_argument("--sample", action="store_true", help="check a 10%% sample of contents")
    sp = add("gc", "apply retention and reclaim space", ws=False)
    sp.add_argument("--dry-run", action="store_true")
    for name, verb in (("pin", "keep a mark forever"), ("unpin", "let retention evict a mark again")):
        sp = add(name, verb)
        sp.add_argument("mark")
    sp = add("rollback", "put the workspace back to a mark (files after -- limit it)")
    sp.add_argument("--to", required=True, metavar="MARK")
    _rollback_flags(sp)
    sp = add("undo", "return to the state before the last rollback (or undo)")
    _rollback_flags(sp)
    sp = add("diff", "unified diff between two marks, or a mark and the workspace now (files after --)")
    sp.add_argument("from_mark", metavar="FROM")
    sp.add_argument("to_mark", metavar="TO", nargs="?")
    sp.add_argument("--stat", action="store_true", help="only the changed files and line counts")
    add("stop", "ask the daemon to exit", ws=False, json=False)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    paths: list[str] = []
    if "--" in argv:  # paths after "--" limit rollback and diff; they are never options
        cut = argv.index("--")
        argv, paths = argv[:cut], argv[cut + 1 :]
    args = build_parser().parse_args(argv)
    args.paths = paths
    try:
        return int(args.func(args, dict(os.environ)))
    except SnapdError as exc:
        if getattr(args, "json", False):
            commands.print_json({"ok": False, "error": exc.to_wire()})
        else:
            print(f"snapctl: {exc.message}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return 0
