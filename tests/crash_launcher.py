"""Start the daemon with the crash seam armed: the crash tests' launcher, never the product's.

``python tests/crash_launcher.py PREFIX:N start ARGS…`` arms :func:`snapd.store.safeio.crash_after`
(the process exits with ``CRASH_EXIT_CODE`` right after its N-th persistent operation whose name
starts with PREFIX, e.g. ``apply.:3``: the third step of a rollback), then runs ``snapd`` with
the remaining arguments. ``snapd start`` itself reads no test switch: a production start cannot
be armed by a stray environment variable.
"""

from __future__ import annotations

import sys

from snapd.daemon.main import main
from snapd.store import safeio


def arm(spec: str) -> None:
    prefix, _, count = spec.rpartition(":")
    if not count.isdigit():
        raise SystemExit(f"crash_launcher: the crash point must be PREFIX:N, got {spec!r}")
    safeio.crash_after(int(count), only=prefix)


if __name__ == "__main__":
    arm(sys.argv[1])
    sys.exit(main(sys.argv[2:]))
