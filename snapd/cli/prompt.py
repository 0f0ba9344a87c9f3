"""Asking a person before something is destroyed: on the terminal itself, or not at all.

A question is asked only when standard input is a terminal — the person typing — so a pipe
or a script can never answer it (``yes | snapctl rollback`` is refused). It is written to that
terminal's device (``ttyname(0)``), never to standard output: with ``snapctl rollback --to M
> out.txt`` a prompt on stdout would land in the file while the user, seeing nothing, types
``y``; with ``--json`` it would corrupt the JSON. What the answer confirms (the plan, what
``forget`` deletes) is written to the terminal too whenever standard output is not that
terminal. With no terminal to ask on, the command refuses and says to pass ``--yes``.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence

from snapd.display import shown
from snapd.errors import UsageError


def confirm(question: str, what: Sequence[str], *, shown_on_stdout: bool, refusal: str) -> bool:
    """Ask ``question`` (y/N) on the terminal; True only for "y" or "yes".

    ``what`` is what the answer confirms; it is written to the terminal first unless
    ``shown_on_stdout`` and standard output is that same terminal. ``refusal`` completes the
    UsageError raised when there is no terminal ("refusing to <refusal> ...").
    """
    if not os.isatty(0):
        raise UsageError(
            f"refusing to {refusal} without confirmation: standard input is not a terminal, so there "
            "is no one to ask; pass --yes"
        )
    try:
        device = os.ttyname(0)
        fd = os.open(device, os.O_WRONLY | os.O_NOCTTY | os.O_CLOEXEC)
    except OSError as exc:
        raise UsageError(
            f"refusing to {refusal} without confirmation: its terminal cannot be written to "
            f"({exc.strerror}); pass --yes"
        ) from None
    try:
        same = os.isatty(1) and os.ttyname(1) == device
        text = [] if shown_on_stdout and same else [shown(line) + "\n" for line in what]
        os.write(fd, ("".join(text) + question).encode("utf-8"))
    finally:
        os.close(fd)
    answer = sys.stdin.readline()
    return answer.strip().lower() in ("y", "yes")
