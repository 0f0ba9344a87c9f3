"""Asking a person before something is destroyed: on the terminal itself, or not at all.

The question and the answer go through the controlling terminal (``/dev/tty``), never
through standard output or input: with ``snapctl rollback --to M > out.txt`` a prompt written
to stdout would land in the file while the user, seeing nothing, types ``y``; with ``--json``
it would corrupt the JSON. A question is asked only when standard input is a terminal, so a
pipe or a script can never answer it (``yes | snapctl rollback`` is refused); what it would
confirm (the plan, what ``forget`` deletes) is shown on the terminal too whenever standard
output is not that terminal. With no terminal to ask on, the command refuses and says to pass
``--yes``.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence

from snapd.display import shown
from snapd.errors import UsageError

TTY = "/dev/tty"


def confirm(question: str, what: Sequence[str], *, shown_on_stdout: bool, refusal: str) -> bool:
    """Ask ``question`` (y/N) on the terminal; True only for "y" or "yes".

    ``what`` is what the answer confirms; it is written to the terminal first unless
    ``shown_on_stdout`` and standard output is the terminal. ``refusal`` completes the
    UsageError raised when there is no terminal ("refusing to <refusal> ...").
    """
    if not sys.stdin.isatty():
        raise UsageError(
            f"refusing to {refusal} without confirmation: standard input is not a terminal, so "
            "there is no one to ask; pass --yes"
        )
    try:
        fd = os.open(TTY, os.O_RDWR | os.O_NOCTTY | os.O_CLOEXEC)
    except OSError as exc:
        raise UsageError(
            f"refusing to {refusal} without confirmation: no terminal to ask on ({TTY}: "
            f"{exc.strerror}); pass --yes"
        ) from None
    with open(fd, "rb", buffering=0) as tty:  # a terminal cannot seek: no buffered "r+"
        text = [] if shown_on_stdout and sys.stdout.isatty() else [shown(line) + "\n" for line in what]
        os.write(fd, ("".join(text) + question).encode("utf-8"))
        answer = tty.readline().decode("utf-8", "replace")
    return answer.strip().lower() in ("y", "yes")
