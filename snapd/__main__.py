"""``python -m snapd``: the daemon's commands (start, stop) or, for anything else, snapctl's.

This always runs this snapd, even where Ubuntu's own ``snapd``/``snapctl`` come first on PATH.
"""

from __future__ import annotations

import sys

DAEMON_COMMANDS = {"start", "install-service"}


def main() -> int:
    argv = sys.argv[1:]
    if argv and argv[0] in DAEMON_COMMANDS:
        from snapd.daemon.main import main as daemon_main

        return daemon_main(argv)
    from snapd.cli import main as ctl_main

    return ctl_main(argv)


if __name__ == "__main__":
    sys.exit(main())
