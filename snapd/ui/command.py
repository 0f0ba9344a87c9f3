"""``snapctl ui``: the timeline of a workspace, in the terminal or (``--web``) in a browser.

snapctl's parser reads the arguments (:mod:`snapd.cli`); ``python -m snapd`` (the top of the
layers) hands this command to it for ``ui`` alone, so the CLI never imports the app built on
its helpers. The app's modules are imported only once the arguments are right, so Textual
stays off every other command's path (a test guards it). Before anything is drawn or served,
the workspace is asked for once: a daemon that is not running or a ``-w`` that is no workspace
fails at once, as for any command. Every request the app makes then carries the deadline
``snapctl`` gives the same command (``--timeout``: one for all of them).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys

from snapd.cli.output import emit, path_text
from snapd.cli.request import Env
from snapd.errors import SnapdError, UsageError

INSTALL = "pip install 'snapd[ui]' (from a checkout: make install)"


def cmd_ui(args: argparse.Namespace, env: Env) -> int:
    if not args.web and (args.port is not None or args.host is not None):
        raise UsageError("ui: --port and --host go with --web")
    if args.json and not args.web:
        raise UsageError("ui: --json goes with --web (it prints the URL as JSON); the terminal app has none")
    if importlib.util.find_spec("textual") is None:  # found, not imported: only snapd.ui imports it
        raise SnapdError(f"snapctl ui needs Textual, which is not installed: {INSTALL}")
    from snapd.ui.source import Source

    source = Source(env, args.workspace, args.timeout)
    reply = source.log(limit=1)  # the daemon answers, and this is a workspace: else its error now
    assert source.root is not None
    root = os.fsdecode(source.root)
    if args.web:
        return _serve(args, root, path_text(reply["workspace"]))
    if not (sys.stdin.isatty() and sys.stdout.isatty()):
        raise UsageError("ui: needs a terminal (or --web, to open it in a browser)")
    from snapd.ui.app import Timeline

    Timeline(source).run()
    return 0


def _serve(args: argparse.Namespace, root: str, shown_root: str) -> int:
    if importlib.util.find_spec("textual_serve") is None:
        raise SnapdError(f"snapctl ui --web needs textual-serve, which is not installed: {INSTALL}")
    from snapd.ui import web

    def announce(url: str) -> None:
        if args.json:
            sys.stdout.write(json.dumps({"url": url, "workspace": root}) + "\n")
        else:
            emit(f"snapctl ui: the timeline of {shown_root} at {url} (Ctrl+C stops)")
        sys.stdout.flush()

    argv = [sys.executable, "-m", "snapd.ui", "-w", root]
    if args.timeout is not None:
        argv += ["--timeout", str(args.timeout)]
    web.serve(argv, host=args.host or "127.0.0.1", port=args.port or 0, announce=announce)
    return 0
