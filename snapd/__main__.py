"""``python -m snapd``: the daemon's commands (start, stop) or, for anything else, snapctl's.

This always runs this snapd, even where Ubuntu's own ``snapd``/``snapctl`` come first on PATH.
:func:`ctl` is also the ``snapctl`` console script: ``snapctl hook`` runs on every prompt an
agent submits, so it goes straight to the hook without loading the other commands.
"""

from __future__ import annotations

import sys

DAEMON_COMMANDS = {"start", "install-service"}


def ctl(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["hook"]:
        import os

        from snapd.integrations.hook import main as hook_main

        return hook_main(argv[1:], dict(os.environ))
    from snapd.cli import main as ctl_main

    return ctl_main(argv)


def main() -> int:
    argv = sys.argv[1:]
    if argv and argv[0] in DAEMON_COMMANDS:
        from snapd.daemon.main import main as daemon_main

        return daemon_main(argv)
    return ctl(argv)


if __name__ == "__main__":
    sys.exit(main())
