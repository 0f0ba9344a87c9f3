"""The options every ``snapctl`` command takes, before or after its name: ``--json`` and
``--timeout`` (``snapctl --json log`` and ``snapctl log --json`` are the same).

argparse copies every attribute a subcommand's parser sets onto the one namespace, defaults
included, so a subcommand's own default would silently undo the same option given before the
command name. The main parser therefore holds the defaults, and each subcommand declares the
options with ``argparse.SUPPRESS``: they appear in its namespace only when typed there.
"""

from __future__ import annotations

import argparse

from snapd.config import parse_setting

JSON_HELP = "print JSON for scripts (errors too)"
TIMEOUT_HELP = "how long to wait for the daemon (default: the command's own deadline, see snapctl --help)"


def seconds(text: str) -> float:
    """--timeout: the same rule as the client_timeout_s setting (a finite positive number)."""
    try:
        value: float = parse_setting("client_timeout_s", text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(f"must be {e} of seconds, got {text!r}") from None
    return value


def add_common(parser: argparse.ArgumentParser, *, main: bool = False) -> None:
    """``--json`` and ``--timeout`` on ``parser``: with their defaults when ``main`` (the
    ``snapctl`` parser itself), else only set when given (see the module docstring)."""
    json_default: object = False if main else argparse.SUPPRESS
    timeout_default: object = None if main else argparse.SUPPRESS
    parser.add_argument("--json", action="store_true", default=json_default, help=JSON_HELP)
    parser.add_argument(
        "--timeout", type=seconds, default=timeout_default, metavar="SECONDS", help=TIMEOUT_HELP
    )
