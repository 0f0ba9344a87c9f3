"""Aider: a wrapper, ``snapd-aider``, marks around each of aider's turns.

Aider has no hook before a turn: its ``--notifications-command`` fires only when a turn is
over and it waits for input. So ``snapctl integrate aider`` writes a small wrapper into
``~/.local/bin`` that runs in aider's own environment (its interpreter, found from the
``aider`` on PATH) and wraps ``Coder.run_one`` — the call aider's scripting API
(``Coder.create`` / ``coder.run``) and its chat loop both make once per user message — with
``snapctl hook aider`` before (``turn-start``) and after (``turn-end``), then hands over to
aider's own ``main()``, so every option of aider works as before. Run ``snapd-aider`` where
you ran ``aider``.

Aider gets no rollback notice (it has no channel for one). snapd never writes inside
``.git``, so the git ``post-commit`` hook that would mark aider's auto-commits is only shown by
``--print``; so is ``--notifications-command`` (``turn-end`` only) for those who prefer no
wrapper.
"""

from __future__ import annotations

import os
import shlex
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import ClassVar

from snapd.errors import IntegrationRefused
from snapd.integrations.base import Context, Event, EventKind, Finding, Scope, named_event
from snapd.integrations.ownfile import OwnFileAgent

MARKER = "# written by `snapctl integrate aider`"
EVENTS: dict[str, EventKind] = {"turn-start": "start", "turn-end": "end"}

WRAPPER = '''\
#!PYTHON
MARKER: aider, with each turn marked in snapd.
# Remove with `snapctl integrate aider --remove`.
import json
import os
import subprocess
import sys
import uuid

SNAPCTL = ARGV
SESSION = "aider-" + uuid.uuid4().hex[:12]


def _mark(event, root):
    payload = {"hook_event_name": event, "session_id": SESSION, "cwd": root}
    try:
        subprocess.run(SNAPCTL, input=json.dumps(payload).encode(), stdout=subprocess.DEVNULL,
                       timeout=TIMEOUT, check=False)
    except (OSError, subprocess.SubprocessError) as exc:
        print(f"snapd: could not mark {event}: {exc}", file=sys.stderr)


from aider.coders.base_coder import Coder  # noqa: E402

_run_one = Coder.run_one


def run_one(self, *args, **kwargs):
    root = str(getattr(self, "root", None) or os.getcwd())
    _mark("turn-start", root)
    try:
        return _run_one(self, *args, **kwargs)
    finally:
        _mark("turn-end", root)


Coder.run_one = run_one

from aider.main import main  # noqa: E402

sys.exit(main())
'''


class Aider(OwnFileAgent):
    name = "aider"
    title = "Aider"
    supports_project = False
    hook_timeout_s: ClassVar[float] = 60.0
    marker = MARKER
    what = "the snapd-aider wrapper"
    mode = 0o755

    def path(self, scope: Scope, ctx: Context) -> Path:
        return ctx.home / ".local" / "bin" / "snapd-aider"

    def interpreter(self, ctx: Context) -> str:
        """aider's own Python: the interpreter its ``aider`` script starts."""
        found = shutil.which("aider", path=ctx.env.get("PATH"))
        if found is None:
            raise IntegrationRefused(
                "aider is not on PATH: install it first (pipx install aider-chat); "
                "`snapctl integrate aider --print` shows the wrapper to adapt by hand"
            )
        try:
            with open(found, "rb") as f:
                first = f.readline(4096).decode("utf-8", "replace").strip()
        except OSError as exc:
            raise IntegrationRefused(f"{found} cannot be read: {exc}") from None
        if not first.startswith("#!") or "python" not in first:
            raise IntegrationRefused(f"{found} does not start a Python interpreter; cannot wrap it")
        return first[2:].strip()

    def text(self, scope: Scope, ctx: Context, python: str | None = None) -> str:
        return (
            WRAPPER.replace("PYTHON", python or self.interpreter(ctx)).replace("MARKER", MARKER)
            .replace("ARGV", repr(self.argv(scope, ctx)))
            .replace("TIMEOUT", repr(self.hook_timeout_s))
        )

    def check(self, scope: Scope, ctx: Context) -> list[Finding]:
        out = super().check(scope, ctx)
        path = self.path(scope, ctx)
        if not out[0].ok:
            return out
        if not os.access(path, os.X_OK):
            out.append(Finding(False, f"{path} is not executable"))
        on_path = shutil.which("snapd-aider", path=ctx.env.get("PATH"))
        if on_path is None or Path(on_path) != path:
            out.append(Finding(False, f"{path.parent} is not on PATH: run {path} by its full path"))
        return out

    def show(self, scope: Scope, ctx: Context) -> str:
        try:
            python = self.interpreter(ctx)
        except IntegrationRefused:
            python = "/path/to/aider's/python"
        hook = self.command(scope, ctx)
        mark = shlex.join([*ctx.snapctl, "mark", "aider-commit", "--agent", self.name])
        return (
            f"# save as {self.path(scope, ctx)} (chmod +x) and run it instead of aider:\n"
            f"{self.text(scope, ctx, python)}\n"
            "# or, without the wrapper (turn-end marks only):\n"
            f"#   aider --notifications --notifications-command {shlex.quote(hook)}\n"
            "# and to mark aider's auto-commits, a git post-commit hook (snapd never writes in .git):\n"
            "#   .git/hooks/post-commit:\n"
            "#     #!/bin/sh\n"
            f"#     {mark} -m \"$(git log -1 --format=%h)\" >/dev/null 2>&1 || true\n"
        )

    def parse(self, stdin: bytes, argv: Sequence[str]) -> Event:
        if not stdin.strip():  # --notifications-command: aider waits for input, the turn is over
            return Event("end", "notification", None, os.getcwd())
        return named_event(stdin, EVENTS)


AGENT = Aider()
