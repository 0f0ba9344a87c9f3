"""``python -m snapd``: the daemon's commands (start, stop) or, for anything else, snapctl's.

This always runs this snapd, even where Ubuntu's own ``snapd``/``snapctl`` come first on PATH.
:func:`ctl` is also the ``snapctl`` console script: ``snapctl hook`` runs on every prompt an
agent submits, so it goes straight to the hook without loading the other commands.

A snapctl process is short-lived, so its end is tuned too: once the command is done, every
object is frozen out of the garbage collector (:func:`gc.freeze`). The interpreter's teardown
still runs (atexit, flushing, closing), but its collections no longer walk every module's
objects one last time, which cost a hook more than its own work (~10 ms of CPU measured).
"""

from __future__ import annotations

import gc
import sys

DAEMON_COMMANDS = {"start", "install-service", "uninstall-service"}


def ctl(argv: list[str] | None = None) -> int:
    try:
        return _dispatch(sys.argv[1:] if argv is None else argv)
    finally:
        gc.freeze()  # see the module docstring: the process is about to end


def _dispatch(argv: list[str]) -> int:
    if argv[:1] == ["hook"]:
        import os

        from snapd.integrations.hook import main as hook_main

        return hook_main(argv[1:], dict(os.environ))
    from snapd.cli import main as ctl_main

    if argv[:1] == ["ui"]:  # the timeline app is built on the CLI's helpers: handed down to it
        from snapd.ui.command import cmd_ui

        return ctl_main(argv, {"ui": cmd_ui})
    return ctl_main(argv)


def main() -> int:
    argv = sys.argv[1:]
    if argv and argv[0] in DAEMON_COMMANDS:
        from snapd.daemon.main import main as daemon_main

        return daemon_main(argv)
    return ctl(argv)


if __name__ == "__main__":
    sys.exit(main())
