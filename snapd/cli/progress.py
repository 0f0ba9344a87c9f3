"""The progress bar of a long request, on a terminal only: drawn on stderr from ``status``,
which the bar's own thread polls while the request runs (the daemon says there how far its
work has come: a workspace's baseline ``progress``; the restores and rollbacks ``running``).
One bar for every long command: ``watch``, ``restore``, ``rollback``, ``undo``, and the remote
ones, ``push``, ``verify --remote``, ``remote prune`` (:mod:`.remote`).

What it counts is what it names (``unit``). When the request succeeds the bar is drawn
finished and left on its line; when it fails the line is cleared for the error.
"""

from __future__ import annotations

import argparse
import sys
import threading
from collections.abc import Callable
from types import TracebackType
from typing import Any

from snapd.cli.output import progress_bar
from snapd.cli.request import Env, client

#: From a ``status`` reply: (done, total) to draw, the words of a phase not yet counted, or None.
Find = Callable[[dict[str, Any]], "tuple[int, int] | str | None"]
_CLEAR = "\r" + " " * 72 + "\r"


class Bar:
    def __init__(self, args: argparse.Namespace, env: Env, find: Find, unit: str) -> None:
        self.args, self.env, self.find, self.unit = args, env, find, unit
        self.on = sys.stderr.isatty() and not args.json
        self.done = threading.Event()
        self.total: int | None = None  # the last total drawn
        self.final: int | None = None  # the total the work ended at, if the command knows it
        self.drawn = False
        self.thread: threading.Thread | None = None

    def __enter__(self) -> Bar:
        if self.on:
            self.thread = threading.Thread(target=self._poll, daemon=True)
            self.thread.start()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.done.set()
        if self.thread is None:
            return
        self.thread.join(timeout=3)  # a status call in flight ends within 2 s
        total = self.final if self.final is not None else self.total
        if self.drawn and kind is None and total is not None:
            sys.stderr.write(_CLEAR + progress_bar(total, total, self.unit) + "\n")
        elif self.drawn:
            sys.stderr.write(_CLEAR)
        sys.stderr.flush()

    def ends_at(self, total: int) -> None:
        """The work succeeded at ``total``: the finished bar shows it (a total that became known
        only near the end may have come after the last poll)."""
        self.final = total

    def _poll(self) -> None:
        with client(self.args, self.env, quiet=True) as c:
            while not self.done.wait(0.25):
                try:
                    found = self.find(c.call("status", timeout_s=2.0))
                except Exception:
                    continue
                if found is None or self.done.is_set():
                    continue
                if isinstance(found, str):
                    line = f"{found}…"
                else:
                    self.total = found[1]
                    line = progress_bar(found[0], found[1], self.unit)
                sys.stderr.write(_CLEAR + line)
                sys.stderr.flush()
                self.drawn = True
