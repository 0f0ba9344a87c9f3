"""``python -m snapd.ui [-w PATH]``: the timeline app alone, as ``snapctl ui`` runs it and as
``snapctl ui --web`` has textual-serve launch it (one process per browser session). The
daemon is found from the environment (``SNAPD_HOME``, the configuration), as by snapctl."""

from __future__ import annotations

import argparse
import os
import sys

from snapd.errors import SnapdError


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m snapd.ui", description="the timeline of a workspace")
    p.add_argument(
        "-w", "--workspace", metavar="PATH",
        help="the workspace holding PATH (default: the current directory's)",
    )
    p.add_argument("--timeout", type=float, metavar="S", help="every request's deadline, in seconds")
    args = p.parse_args(argv)
    from snapd.ui.app import Timeline
    from snapd.ui.source import Source

    try:
        Timeline(Source(dict(os.environ), args.workspace, args.timeout)).run()
    except SnapdError as exc:
        print(f"snapctl ui: {exc}", file=sys.stderr)
        return exc.exit_code
    return 0


if __name__ == "__main__":
    sys.exit(main())
