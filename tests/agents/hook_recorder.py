"""A hook that only records: what an agent hands its hook command, as one JSON file per call.

``hook_recorder.py OUTDIR AGENT EVENT [ARGS...]``: writes ``OUTDIR/AGENT-EVENT-N.json`` holding the
extra arguments (Codex's ``notify`` appends its event as one JSON argument), the standard input
(parsed when it is JSON), the working directory and the agent's own environment variables. Prints
on the prompt event the agent's way of adding context for the model (``CONTEXT``, which the test
then finds in the model's requests: the channel ``snapctl hook`` passes a rollback notice through),
otherwise what the agent's protocol accepts as "nothing to say": ``{}`` for Gemini (its stdout must
be JSON only), nothing for the others. Always exits 0: for most agents anything else blocks the turn.

Standard library only; stdin is read only when something is there within a moment, since some
agents run hooks with a terminal or an open pipe that never closes.
"""

from __future__ import annotations

import json
import os
import select
import sys
from pathlib import Path

ENV_PREFIXES = ("CLAUDE", "CODEX", "GEMINI", "OPENCODE", "AIDER")
CONTEXT = "SNAPD-RECORDER-CONTEXT: this line came from the prompt hook."
PROMPT_EVENTS = {
    ("claude-code", "UserPromptSubmit"),
    ("codex", "UserPromptSubmit"),
    ("gemini", "BeforeAgent"),
}


def read_stdin() -> object:
    if sys.stdin is None or sys.stdin.isatty():
        return None
    ready, _, _ = select.select([sys.stdin], [], [], 2.0)
    if not ready:
        return None
    text = sys.stdin.read()
    try:
        return json.loads(text)
    except ValueError:
        return text


def main() -> int:
    out, agent, event, *rest = sys.argv[1:]
    args: list[object] = []
    for arg in rest:
        try:
            args.append(json.loads(arg))
        except ValueError:
            args.append(arg)
    record = {
        "argv": args,
        "stdin": read_stdin(),
        "cwd": os.getcwd(),
        "env": {k: v for k, v in sorted(os.environ.items()) if k.startswith(ENV_PREFIXES)},
    }
    directory = Path(out)
    directory.mkdir(parents=True, exist_ok=True)
    n = 1
    while (directory / f"{agent}-{event}-{n}.json").exists():
        n += 1
    (directory / f"{agent}-{event}-{n}.json").write_text(json.dumps(record, indent=2) + "\n")
    if (agent, event) in PROMPT_EVENTS:
        print(json.dumps({"hookSpecificOutput": {"hookEventName": event, "additionalContext": CONTEXT}}))
    elif agent == "gemini":
        print("{}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
