"""``snapctl``: the command-line client. One function per command, in a module per noun:
:mod:`.status` (the daemon as a whole), :mod:`.workspaces`, :mod:`.marks`, :mod:`.rollback`,
:mod:`.revert`, :mod:`.run`, :mod:`.history`, :mod:`.events`, :mod:`.integrate` (``ui``, the
timeline app built on these helpers, is :mod:`snapd.ui.command`, handed in by ``python -m
snapd``: the CLI never imports it); :mod:`.request`
is what they share, and :mod:`.times` turns time references into instants before anything is
sent.

Start-up cost matters (agents run ``snapctl mark`` on every turn), so this package imports
only the client, configuration, protocol and display modules — never the store or the
watcher — and ``zmq`` is loaded on the first call. A run builds the parser of its own command
only and imports only that command's module (:data:`COMMANDS`); help, and a name that is no
command, build them all.

Promises kept here for every command: ``--json`` is accepted (before or after the command's
name, as is ``--timeout``: :mod:`.options`), and with it even a usage error
is a JSON object on stdout (``{"ok": false, "error": {...}}``); every error, usage included,
exits with its class's code; a text argument that is not UTF-8 (labels, messages, agent and
session names, mark references) is a usage error, never a traceback.
"""

from __future__ import annotations

import argparse
import importlib
import io
import os
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NoReturn

from snapd import __version__
from snapd.cli import integrate, options, request, times
from snapd.cli.output import emit, print_json
from snapd.display import shown
from snapd.errors import SnapdError, UsageError

Handler = Callable[[argparse.Namespace, dict[str, str]], int]
"""A command: its parsed arguments and the environment; the exit code."""

#: Arguments that are paths: sent as bytes, any byte allowed. Every other string is text.
_PATH_ARGS = frozenset({"workspace", "path", "file", "paths", "only_path", "target"})
_TAKES_PATHS = frozenset({"rollback", "diff", "revert"})  # the commands that accept "-- PATH..."


class _Parser(argparse.ArgumentParser):
    """argparse that raises UsageError instead of exiting, so main() reports it once (as
    JSON with --json) with the usage exit code; and that sizes its help without ``shutil``."""

    def _get_formatter(self) -> argparse.HelpFormatter:
        # argparse makes a formatter for every argument it adds, and sizes it with
        # shutil.get_terminal_size: importing shutil (with bz2 and lzma) cost every command
        # milliseconds. The same rule: $COLUMNS, else the terminal on stdout, else 80; less 2.
        try:
            columns = int(os.environ.get("COLUMNS", ""))
        except ValueError:
            columns = 0
        if columns <= 0:
            try:
                columns = os.get_terminal_size(sys.__stdout__.fileno() if sys.__stdout__ else -1).columns
            except (ValueError, OSError):  # stdout closed, or not a terminal
                columns = 80
            columns = columns or 80
        return self.formatter_class(prog=self.prog, width=columns - 2)  # type: ignore[call-arg]

    def error(self, message: str) -> NoReturn:
        command = self.prog.removeprefix("snapctl").strip()
        raise UsageError(f"{command}: {message}" if command else message, usage=self.format_usage().strip())


def _at_least_one(text: str, hint: str = "") -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a whole number of at least 1, got {text!r}{hint}")
    return value


def _port(text: str) -> int:
    value = int(text) if text.isdigit() else -1
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"must be a port from 0 (any free one) to 65535, got {text!r}")
    return value


def _positive(text: str) -> int:
    """log's page size (the hint names the way to list everything)."""
    return _at_least_one(text, " (--all lists every mark)")


_TIMES_HELP = """\
times: wherever a MARK is taken, a time names the workspace as captured then:
  @90s @10m @2h @3d (ago), @yesterday (24 h ago), @2026-11-30T14:03:05 or
  @'2026-11-30 14:03' (local time, unless it ends in Z or +HH:MM). A local time that a
  clock change repeats or skips is refused. Labels may not start with @. Examples:
  snapctl rollback --to @5m; snapctl diff @1h; snapctl cat @10m src/app.py;
  snapctl rollback --to @10m -- src/app.py (one file as it was then)

"""


def _deadlines_help() -> str:
    by_time: dict[float, list[str]] = {}
    for name, seconds in request.DEADLINES.items():
        by_time.setdefault(seconds, []).append(name)
    rows = "\n".join(f"  {s:>6g} s  {', '.join(names)}" for s, names in sorted(by_time.items()))
    return (
        "deadlines: each command waits for the daemon up to its own deadline:\n"
        f"{rows}\n"
        "client_timeout_s in config.toml, or SNAPD_CLIENT_TIMEOUT_S, replaces it for every command;\n"
        "--timeout replaces both. A daemon that does not answer in time is reported as such\n"
        "(exit 9), apart from one that is not running at all (exit 3)."
    )


MARK_REF_HELP = "a mark (id, id prefix, label, LABEL~N) or a time (@10m, @'2026-11-30 14:03')"


class _Span(argparse.Action):
    """revert's ``A..B``: sets ``from_mark`` and ``to_mark`` (None for ``A..``: up to now), the
    names :mod:`.times` rewrites when they are times."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        if values is None:
            return
        text = str(values)
        if text.count("..") != 1 or text.startswith(".."):
            raise argparse.ArgumentError(
                self, f"{text!r} is no span: give A..B (or A.. for A up to now), A and B marks or times; "
                "--turn M for one turn"
            )
        before, after = text.split("..")
        namespace.from_mark, namespace.to_mark = before, after or None


def _rollback_flags(sp: argparse.ArgumentParser) -> None:
    sp.add_argument("--dry-run", action="store_true", help="show the plan, change nothing")
    sp.add_argument("-y", "--yes", action="store_true", help="apply without asking (needed with no terminal)")
    sp.add_argument(
        "--force", action="store_true", help="also overwrite or delete paths snapd could not capture"
    )
    sp.add_argument(
        "--plan-token", metavar="TOKEN",
        help="apply only the plan a --dry-run --json showed (its plan.token); if the workspace changed so "
        "that the plan differs, nothing is applied and the new plan is the error's details (plan_changed)",
    )


#: Each command and the module of this package that runs it (``cmd_NAME`` there).
COMMANDS: dict[str, str] = {
    "status": "status", "watch": "workspaces", "unwatch": "workspaces", "forget": "workspaces",
    "mark": "marks", "log": "marks", "history": "history", "show": "marks", "cat": "marks",
    "verify": "status", "gc": "status", "pin": "marks", "unpin": "marks", "rollback": "rollback",
    "undo": "rollback", "restore": "rollback", "diff": "marks", "stop": "status", "events": "events",
    "integrate": "integrate", "hook": "integrate", "remote": "remote", "push": "remote",
    "revert": "revert", "run": "run",
}


def command_named(argv: Sequence[str]) -> str | None:
    """The command ``argv`` names (its first word that is neither an option nor the value of
    ``--timeout``), or None when there is none or it is no command."""
    words = iter(argv)
    for word in words:
        if word == "--timeout":
            next(words, None)
        elif not word.startswith("-"):
            return word if word in COMMANDS else None
    return None


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """snapctl's parser: with ``command``, that command's parser alone (what a run of it
    needs: the others cost milliseconds to build); without, every command's."""
    p = _Parser(
        prog="snapctl",
        description="Control snapd: marks, history and workspaces.",
        epilog=_TIMES_HELP + _deadlines_help(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--version", action="version", version=f"snapctl {__version__}")
    options.add_common(p, main=True)
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def wanted(*names: str) -> bool:
        return command is None or command in names

    def add(name: str, help: str, *, ws: bool = True, ref: bool = False) -> argparse.ArgumentParser:
        sp = sub.add_parser(name, help=help, description=help)
        if ws:
            sp.add_argument(
                "-w", "--workspace", metavar="PATH",
                help="the workspace holding PATH (default: the one holding the current directory)",
            )
        if ref:
            sp.add_argument(
                "--session", help="a label names the newest mark of this session (as `mark --session`)"
            )
        options.add_common(sp)
        return sp

    if wanted("status"):
        add("status", "show the daemon, its workspaces and warnings", ws=False)
    if wanted("watch"):
        sp = add("watch", "watch a directory; returns once its baseline is captured", ws=False)
        sp.add_argument("-w", "--workspace", metavar="PATH", help="same as PATH")
        sp.add_argument("path", nargs="?", default=None, help="the directory (default: the current one)")
    if wanted("unwatch"):
        sp = add("unwatch", "stop watching a workspace (history is kept)")
        sp.add_argument("path", nargs="?", default=None, metavar="PATH", help="same as -w PATH")
    if wanted("forget"):
        sp = add("forget", "stop watching a workspace and delete its history (asks first)")
        sp.add_argument("path", nargs="?", default=None, metavar="PATH", help="same as -w PATH")
        sp.add_argument(
            "-y", "--yes", action="store_true", help="delete, no questions (needed with no terminal)"
        )
    if wanted("mark"):
        sp = add("mark", "record the workspace's current state under LABEL")
        sp.add_argument("label", help="the mark's name, e.g. turn-start (not starting with @)")
        sp.add_argument("-m", "--message", help="a free-text note kept with the mark")
        sp.add_argument("--agent", help="the agent or tool that marks (e.g. claude), shown in log")
        sp.add_argument(
            "--session",
            help="the agent's session id: a turn-start and the turn-end of the same session open and "
            "close a turn (rollbacks name the sessions whose changes they revert)",
        )
    if wanted("log"):
        sp = add("log", "list marks, newest first, a page at a time")
        page = sp.add_mutually_exclusive_group()
        page.add_argument("-n", "--limit", type=_positive, default=None, metavar="N",
                          help="marks per page (default 20); the last line says how many more there are")
        page.add_argument("--all", action="store_true", help="every mark, no paging")
        sp.add_argument("--before", metavar="MARK", help="the page after MARK: marks older than it")
        sp.add_argument("--agent", help="only this agent's marks")
        sp.add_argument("--session", help="only this session's marks")
        sp.add_argument("--path", dest="only_path", metavar="PATH",
                        help="only the marks whose turn changed PATH (or anything under it)")
    if wanted("history"):
        sp = add("history", "every captured version of a file, newest first (between marks too)")
        sp.add_argument("file", metavar="PATH", help="the file (relative to the current directory)")
    if wanted("show"):
        sp = add("show", "a mark's metadata and the files it changed", ref=True)
        sp.add_argument("mark", help="the mark: id, id prefix, label or LABEL~N")
    if wanted("cat"):
        sp = add(
            "cat", "print a file's bytes at a mark (FILE is relative to the current directory)", ref=True
        )
        sp.add_argument("mark", help=MARK_REF_HELP)
        sp.add_argument("file", metavar="FILE", help="the file (relative to the current directory)")
    if wanted("verify"):
        from snapd.cli import remote, secrets

        sp = add("verify", "re-hash stored objects; non-zero exit on any problem", ws=False)
        sp.add_argument(
            "--sample", nargs="?", const=remote.SAMPLE, type=remote.percent, metavar="P",
            help="check a sample of contents: 10%% (with --remote: P%% of the packs, default 10)",
        )
        sp.add_argument("--remote", metavar="NAME", help="read back and check the remote NAME instead")
        secrets.secret_flags(sp)
    if wanted("gc"):
        sp = add("gc", "apply retention and reclaim space", ws=False)
        sp.add_argument("--dry-run", action="store_true", help="list what it would evict")
    for name, verb in (("pin", "keep a mark forever"), ("unpin", "let retention evict a mark again")):
        if wanted(name):
            sp = add(name, verb, ref=True)
            sp.add_argument("mark", help="the mark: id, id prefix, label or LABEL~N")
    if wanted("rollback"):
        sp = add(
            "rollback", "put the workspace back to a mark (paths after -- limit it; asks first)", ref=True
        )
        sp.add_argument("--to", required=True, metavar="MARK", help=f"the target: {MARK_REF_HELP}")
        _rollback_flags(sp)
    if wanted("revert"):
        sp = add(
            "revert",
            "take back the changes made between two marks (or one turn, or a session's turns), keeping "
            "everything changed since: a three-way merge per path (paths after -- limit it; asks first)",
        )
        which = sp.add_mutually_exclusive_group(required=True)
        which.add_argument(
            "span", nargs="?", action=_Span, metavar="A..B",
            help=f"the changes from A to B, each {MARK_REF_HELP}; A.. : from A to now",
        )
        which.add_argument("--turn", metavar="M", help="one turn: from its turn-start mark M to its end")
        which.add_argument("--session", metavar="S", help="every turn of session S (others' changes stay)")
        sp.add_argument("--since", metavar="REF", help="with --session: only its turns started after REF")
        sp.add_argument(
            "--conflicts", choices=("refuse", "markers"), default="refuse",
            help="where a later change overlaps: refuse the whole revert, writing nothing (exit 13, the "
            "default), or write git-style conflict markers into the text files and list them",
        )
        _rollback_flags(sp)
    if wanted("run"):
        sp = add("run", "run CMD (after --) as a turn: a turn-start mark before, a turn-end mark after; "
                 "exits with CMD's status")
        sp.add_argument(
            "--label", metavar="L", help="a note put before the command line in the marks' message"
        )
        sp.add_argument("--session", help="the session of the two marks (default: run-<random>)")
    if wanted("undo"):
        sp = add("undo", "return to the state before the last rollback (or undo); asks first")
        _rollback_flags(sp)
    if wanted("restore"):
        sp = add(
            "restore",
            "write the workspace as at MARK (or a time) into DEST, an absent or empty directory; the "
            "workspace itself is not touched (its root may be gone)",
            ref=True,
        )
        sp.add_argument("mark", metavar="MARK", help=MARK_REF_HELP)
        sp.add_argument("--target", required=True, metavar="DEST", help="where to write it (absent or empty)")
        sp.add_argument("-y", "--yes", action="store_true", help="accepted for scripts: restore never asks")
        from snapd.cli import secrets

        sp.add_argument(
            "--from", dest="from_remote", metavar="NAME",
            help="restore a mark pushed to the remote NAME, from any machine (-w then names the "
            "workspace as the pushing machine did)",
        )
        sp.add_argument("--host", help="with --from: the mark pushed from this host (when several match)")
        secrets.secret_flags(sp)
    if wanted("diff"):
        sp = add(
            "diff", "unified diff between two marks, or a mark and the workspace now (paths after --)",
            ref=True,
        )
        sp.add_argument("from_mark", metavar="FROM", help=f"the older side: {MARK_REF_HELP}")
        sp.add_argument("to_mark", metavar="TO", nargs="?", help="the newer side (default: the workspace)")
        sp.add_argument("--stat", action="store_true", help="only the changed files and line counts")
    if wanted("stop"):
        add("stop", "ask the daemon to exit", ws=False)
    if wanted("ui"):
        sp = add("ui", "the timeline: marks and turns to browse, diff, roll back, undo and revert "
                 "(a terminal app; --web: in a browser)")
        sp.add_argument("--web", action="store_true", help="serve it to a browser on 127.0.0.1, behind a "
                        "random token in the URL it prints")
        sp.add_argument("--port", type=_port, metavar="P", help="with --web: the port (default 0: any free)")
        sp.add_argument("--host", metavar="H", help="with --web: the address to bind (default 127.0.0.1)")
    if wanted("events"):
        sp = add(
            "events", "follow live events (all workspaces, or -w PATH's); gaps and restarts are reported"
        )
        sp.add_argument("-n", "--count", type=_at_least_one, metavar="N", help="exit after N events")
    if wanted("integrate", "hook"):
        integrate.add_parsers(sub)
    if wanted("remote", "push"):
        from snapd.cli import remote

        remote.add_parsers(sub, wanted)
    return p


def _check_text(args: argparse.Namespace) -> None:
    """Text arguments must be UTF-8: the protocol carries them as JSON strings, and a name
    with an undecodable byte (a lone surrogate after Python's argv decoding) has no such form."""
    for name, value in vars(args).items():
        if name in _PATH_ARGS or not isinstance(value, str):
            continue
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            option = name.upper() if name in ("label", "mark", "from_mark", "to_mark") else "--" + name
            raise UsageError(f"{option} must be UTF-8 text; got {shown(value)!r}", arg=name) from None


def _whole_stdout() -> None:
    """Under PYTHONUNBUFFERED or ``-u``, stdout's byte layer is a raw file: each write is one
    ``write(2)``, which a stop (^Z, a cgroup freezer) may cut short, and the text layer drops
    the rest: the output ends early with exit 0. A buffered layer under it writes every byte or
    raises; line buffering keeps what a terminal shows as it was."""
    out = sys.stdout
    if isinstance(out, io.TextIOWrapper) and isinstance(out.buffer, io.FileIO):
        sys.stdout = io.TextIOWrapper(
            io.BufferedWriter(out.buffer), encoding=out.encoding, errors=out.errors, line_buffering=True
        )


def main(argv: Sequence[str] | None = None, handlers: Mapping[str, Handler] | None = None) -> int:
    """snapctl: parse ``argv``, run its command. ``handlers``: commands of the layers above the
    CLI (``ui``: :mod:`snapd.ui.command`), handed down by ``python -m snapd``."""
    _whole_stdout()
    argv = list(sys.argv[1:] if argv is None else argv)
    paths: list[str] = []
    if "--" in argv:  # paths after "--" limit rollback, revert and diff (run's CMD); never options
        cut = argv.index("--")
        argv, paths = argv[:cut], argv[cut + 1 :]
    want_json = "--json" in argv
    try:
        args = build_parser(command_named(argv)).parse_args(argv)
        if paths and args.command not in _TAKES_PATHS | {"run"}:  # run: CMD comes after --
            raise UsageError(f"snapctl {args.command}: takes no paths after --")
        args.paths = paths
        _check_text(args)
        times.absolute_times(args, time.time_ns())
        handler = (handlers or {}).get(args.command)
        if handler is None:
            if args.command not in COMMANDS:  # ui: only through python -m snapd (snapctl)
                raise UsageError(f"snapctl {args.command}: run it as `snapctl {args.command}`")
            module = importlib.import_module(f"snapd.cli.{COMMANDS[args.command]}")
            handler = getattr(module, "cmd_" + args.command.replace("-", "_"))
        return int(handler(args, dict(os.environ)))
    except SnapdError as exc:
        _report(exc, want_json)
        return exc.exit_code
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # the reader went away (`| head`): what is still buffered can never be written, so the
        # interpreter's closing flush must not try (it would print "Exception ignored")
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


def _report(exc: SnapdError, want_json: bool) -> None:
    if want_json:
        print_json({"ok": False, "error": exc.to_wire()})
        return
    usage: Any = exc.details.get("usage") if isinstance(exc, UsageError) else None
    if isinstance(usage, str):
        print(usage, file=sys.stderr)
    emit(f"snapctl: {exc.message}", err=True)
