"""Gitignore patterns, matched the way git's directory walk matches them (pure).

Patterns are compiled by pathspec's ``GitIgnoreSpec`` (the only module that imports
``pathspec``), but matched one path component at a time: a pattern matches only the path
itself, never "a file because its parent matched" (pathspec's file-list semantics), which is
what makes per-directory precedence come out as git's (:mod:`snapd.capture.ignore` orders the
sources). Within one list of rules the last matching pattern wins and ``!`` re-includes.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from typing import Final

from pathspec import GitIgnoreSpec

# Matched against the base name of files (not directories).
EDITOR_PATTERNS: Final = (
    ".*.sw[a-px]",  # vim swap files (.swp, .swo, ... and the .swx probe)
    ".sw[a-px]",  # vim swap file of an unnamed buffer
    "*~",  # vim/emacs/gedit/nano backups
    "\\#*#",  # emacs auto-save (escaped: "#" starts a comment)
    ".#*",  # emacs lock (a dangling symlink)
    "4913",  # vim's "can I write here" probe
    "*___jb_tmp___",  # JetBrains safe-write
    "*___jb_old___",
    "*___jb_bak___",
    "*.kate-swp",  # Kate
    ".goutputstream-*",  # gedit / GIO atomic save
    ".~lock.*#",  # LibreOffice lock
)

_BOM: Final = b"\xef\xbb\xbf"


def as_text(b: bytes) -> str:
    """bytes -> str the way every path and pattern is decoded here (round-trips any bytes)."""
    return b.decode("utf-8", "surrogateescape")


# pathspec 1.x regex shapes (GitIgnoreSpecPattern.pattern_to_regex), pinned by tests:
#   "name"      -> ...(?:(?P<ps_d>/)|$)   matches the path itself, file or directory
#   "name/"     -> ...(?P<ps_d>/)         matches the path itself, directories only
#   "name/**"   -> .../                   matches every path strictly below
#   "*", "**"   -> .                      everything
#   "*/", "**/" -> (?P<ps_d>/)            every directory
#   "*/**"-like -> /                      every path below the top level
_END_ANY: Final = "(?:(?P<ps_d>/)|$)"
_END_DIR: Final = "(?P<ps_d>/)"


class Rule:
    """One compiled pattern with git's "this path exactly" match."""

    __slots__ = ("regex", "ignore", "kind")

    def __init__(self, regex: re.Pattern[str], ignore: bool) -> None:
        self.regex = regex
        self.ignore = ignore
        src = regex.pattern
        if src == ".":
            self.kind = "all"
        elif src == _END_DIR:
            self.kind = "alldirs"
        elif src == "/":
            self.kind = "nested"
        elif src.endswith(_END_ANY):
            self.kind = "any"
        elif src.endswith(_END_DIR):
            self.kind = "dir"
        elif src.endswith("/"):
            self.kind = "below"
        else:  # an unknown pathspec shape: fall back to pathspec's own (prefix) semantics
            self.kind = "search"

    def matches(self, path: str, is_dir: bool) -> bool:
        kind = self.kind
        if kind == "any":
            return self.regex.fullmatch(path) is not None
        if kind == "dir":
            return is_dir and self.regex.fullmatch(path + "/") is not None
        if kind == "below":
            # The regex ends in "/": any match ends before the last component, i.e. it names
            # a proper ancestor, so the path lies strictly below what the pattern names.
            return self.regex.search(path) is not None
        if kind == "all":
            return True
        if kind == "alldirs":
            return is_dir
        if kind == "nested":
            return "/" in path
        return self.regex.search(path + "/" if is_dir else path) is not None


def compile_patterns(lines: Iterable[str]) -> tuple[Rule, ...]:
    """The rules of one source, in the order they are tried (the last pattern first)."""
    fixed = []
    for line in lines:
        # pathspec turns "x/**/" into "x/", git matches only directories strictly below x.
        stripped = line.rstrip()
        if stripped.endswith("/**/") and not stripped.endswith("\\/**/"):
            line = stripped[:-1] + "*/"
        fixed.append(line)
    try:
        patterns = list(GitIgnoreSpec.from_lines(fixed, backend="simple").patterns)
    except (re.error, ValueError):
        # A line no regex can express (a reversed range "[z-a]", which git's own matcher takes
        # as its first character) must not break every capture: it is dropped, the rest kept.
        # What it would ignore is captured instead, the safe side for a tool that keeps history.
        patterns = []
        for line in fixed:
            try:
                patterns.extend(GitIgnoreSpec.from_lines([line], backend="simple").patterns)
            except (re.error, ValueError):
                continue
    rules = [
        Rule(p.regex, bool(p.include))
        for p in patterns
        if p.include is not None and p.regex is not None
    ]
    # Last match wins: keep them reversed so the first match decides.
    return tuple(reversed(rules))


def decide(rules: tuple[Rule, ...], path: str, is_dir: bool) -> bool | None:
    """True: ignored, False: re-included, None: no pattern of ``rules`` matches ``path``."""
    for rule in rules:
        if rule.matches(path, is_dir):
            return rule.ignore
    return None


_ANY_DEPTH: Final = "^(?:.+/)?"  # pathspec's start of a pattern without a slash: at any depth


def may_match_file(rules: tuple[Rule, ...]) -> Callable[[bytes], bool]:
    """A quick first test of a file's path: False when no positive rule of ``rules`` can match
    it (then :func:`decide` never says True). Rules that all name a base name at any depth
    (``.env``, ``*.sqlite3``) are tried as one regex against the base name only; others make
    it always True."""
    sources = []
    for r in rules:
        if not r.ignore:
            continue
        name = r.regex.pattern.removeprefix(_ANY_DEPTH).replace("(?P<ps_d>", "(?:")
        core = name.removesuffix("(?:(?:/)|$)").replace("[^/]", "")  # what it says of the base name
        if r.kind != "any" or not r.regex.pattern.startswith(_ANY_DEPTH) or "/" in core:
            return lambda rel: True
        sources.append(f"(?:{name})")
    if not sources:
        return lambda rel: False
    names = re.compile("|".join(sources))
    return lambda rel: names.fullmatch(as_text(rel.rpartition(b"/")[2])) is not None


def pattern_lines(data: bytes) -> list[str]:
    """A rule file's lines (a leading UTF-8 BOM dropped, any bytes kept)."""
    if data.startswith(_BOM):
        data = data[len(_BOM) :]
    return as_text(data).split("\n")


_EDITOR_RULES: Final = compile_patterns(EDITOR_PATTERNS)
assert all(r.kind == "any" and r.ignore for r in _EDITOR_RULES)
# One alternation instead of a dozen patterns: this test runs for every name of every walk.
_EDITOR_RE: Final = re.compile(
    "|".join("(?:" + r.regex.pattern.replace("(?P<ps_d>", "(?:") + ")" for r in _EDITOR_RULES)
)


class Source:
    """One .gitignore: its directory relative to the git top level, and its rules."""

    __slots__ = ("base", "rules")

    def __init__(self, base: str, rules: tuple[Rule, ...]) -> None:
        self.base = base
        self.rules = rules

    def decide(self, top_path: str, is_dir: bool) -> bool | None:
        rel = top_path[len(self.base) + 1 :] if self.base else top_path
        return decide(self.rules, rel, is_dir)


def is_editor_name(name: bytes) -> bool:
    """Whether a file's base name is an editor's swap, lock or backup file."""
    return _EDITOR_RE.fullmatch(as_text(name)) is not None
