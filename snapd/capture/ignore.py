"""What is captured under a workspace root: every path not ignored, and nothing left out silently.

Pure decisions over relative POSIX paths given as ``bytes`` (``b"a/b/c"``; names need not be
UTF-8). The only I/O is reading rule files (lazily, per directory; git facts come from
:mod:`snapd.capture.git`); nothing here starts threads or writes anything, least of all inside ``.git``.

Precedence, highest first (the first source with a matching pattern decides):

1. ``.git``, ``.hg``, ``.jj``, ``.svn`` as any path component: never captured ("vcs").
2. snapd's own cookie and temp files ``.snapd-*~`` ("snapd").
3. Paths git tracks: always captured, whatever the patterns say — agent settings files too.
   Untracked, the agent-integration files snapd writes (``paths.INTEGRATION_FILES``) are
   snapd's own: a rollback must not undo the hooks ("snapd"). A tracked one is the user's
   file: captured and restored like any other (the CLI merges snapd's hooks back after a
   rollback that took them out: :mod:`snapd.integrations.remerge`).
4. Editors' swap, lock and backup files ("editor").
5. A path inside a directory excluded by 7-9 is excluded too (git never descends into an
   excluded directory, so no pattern below it can re-include anything).
6. Rule files in effect (a ``.gitignore`` outside excluded directories, the root
   ``.snapdignore``): always captured, even when a pattern matches them — unlike git, which
   leaves a self-ignoring ``.gitignore`` untracked — because a mark's rules are rebuilt from
   the rule files in its tree.
7. The root ``.snapdignore`` ("snapdignore"), then extra patterns from config ("config").
8. ``.gitignore`` files, the one nearest to the path first ("gitignore"); ancestors above the
   root count when the root is a subdirectory of a git work tree.
9. ``$GIT_COMMON_DIR/info/exclude`` ("exclude").

A file (never a directory) that 8 or 9 ignores but the ``precious`` patterns name (secrets,
local settings, development databases: config's ``PRECIOUS``) is captured anyway
(:meth:`IgnoreRules.is_precious`). Only where the walk goes: a file inside an ignored
directory stays out (5), so precious files cost no walk of ignored trees; and 7 wins over
them (a ``.snapdignore`` or extra pattern is snapd's own "not this").

Within one source the last matching pattern wins, ``!`` re-includes; how one pattern matches
one path (git's directory-walk semantics) is :mod:`snapd.capture.patterns`.
"""

from __future__ import annotations

import base64
import json
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final, Literal

from snapd.capture.git import find_repo, read_regular
from snapd.capture.patterns import (
    Source,
    as_text,
    compile_patterns,
    decide,
    is_editor_name,
    may_match_file,
    pattern_lines,
)
from snapd.paths import is_integration_file, is_snapd_name

Reason = Literal["vcs", "snapd", "editor", "snapdignore", "config", "gitignore", "exclude"]

VCS_NAMES: Final = frozenset({b".git", b".hg", b".jj", b".svn"})
RULE_FILE_NAME: Final = b".gitignore"
SNAPDIGNORE: Final = b".snapdignore"
INFO_EXCLUDE: Final = b".git/info/exclude"

_Loader = Callable[[bytes], "bytes | None"]


# --- the rules object ------------------------------------------------------------------------


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


@dataclass(frozen=True)
class RuleInputs:
    """What a workspace's ignore rules depend on besides the rule files inside its tree.

    A mark records these (as one content-addressed object), so a rollback can judge every
    path under the rules the mark was captured with: the ``.gitignore`` and ``.snapdignore``
    files come from the mark's own tree, the rest from here.
    """

    extra: tuple[str, ...] = ()
    exclude: bytes = b""
    tracked: frozenset[bytes] = frozenset()
    prefix: bytes = b""
    outer: tuple[tuple[bytes, bytes], ...] = ()
    precious: tuple[str, ...] = ()

    _MAGIC = b"snapd-rules-1\n"

    def encode(self) -> bytes:
        """A canonical byte form: equal inputs give equal bytes (so one object per rule set)."""
        head = {
            "extra": list(self.extra),
            "exclude": _b64(self.exclude),
            "prefix": _b64(self.prefix),
            "outer": [[_b64(d), _b64(data)] for d, data in self.outer],
        }
        if self.precious:  # absent: none (every record from before the setting; precious = [])
            head["precious"] = list(self.precious)
        tracked = b"\0".join(sorted(self.tracked))
        return self._MAGIC + json.dumps(head, sort_keys=True).encode() + b"\n" + tracked

    @classmethod
    def decode(cls, data: bytes) -> RuleInputs:
        if not data.startswith(cls._MAGIC):
            raise ValueError("not a rule-inputs record")
        head_raw, _, tracked = data[len(cls._MAGIC) :].partition(b"\n")
        head = json.loads(head_raw)
        unb64 = base64.b64decode
        return cls(
            extra=tuple(str(x) for x in head["extra"]),
            exclude=unb64(head["exclude"]),
            tracked=frozenset(p for p in tracked.split(b"\0") if p),
            prefix=unb64(head["prefix"]),
            outer=tuple((unb64(d), unb64(x)) for d, x in head["outer"]),
            precious=tuple(str(x) for x in head.get("precious", ())),
        )



class IgnoreRules:
    """Immutable ignore decisions for one workspace root.

    Built with :meth:`load` (reads rule files from disk, lazily per directory) or directly
    from a ``gitignore`` loader (``rel_dir -> bytes | None``) for tests. Rule-file edits are
    not picked up: when :meth:`is_rule_file` says a changed path is one, build a new object.
    Caches are filled on demand; concurrent readers at worst compute an entry twice.
    """

    def __init__(
        self,
        *,
        gitignore: _Loader = lambda rel_dir: None,
        snapdignore: bytes = b"",
        extra_patterns: Sequence[str] = (),
        info_exclude: bytes = b"",
        tracked: frozenset[bytes] = frozenset(),
        prefix: bytes = b"",
        outer_gitignores: Sequence[tuple[bytes, bytes]] = (),
        precious: Sequence[str] = (),
    ) -> None:
        """``prefix``: the root relative to the git top level when the workspace is a
        subdirectory of a work tree; ``outer_gitignores``: (dir relative to the top level,
        contents) for the .gitignore files from the top level down to the root's parent;
        ``precious``: patterns of files captured even though git's rules ignore them."""
        self._load = gitignore
        self.inputs = RuleInputs(
            tuple(extra_patterns), info_exclude, tracked, prefix, tuple(outer_gitignores), tuple(precious)
        )
        self._snapd = compile_patterns(pattern_lines(snapdignore))
        self._extra = compile_patterns(extra_patterns)
        self._precious = compile_patterns(precious)
        self._may_be_precious = may_match_file(self._precious)
        self._exclude = compile_patterns(pattern_lines(info_exclude))
        self.tracked = tracked
        tracked_dirs: set[bytes] = set()
        for path in tracked:
            tracked_dirs.add(path)  # a submodule is a tracked directory
            parts = path.split(b"/")
            for i in range(1, len(parts)):
                tracked_dirs.add(b"/".join(parts[:i]))
        self._tracked_dirs = frozenset(tracked_dirs)
        self._prefix = as_text(prefix.strip(b"/"))
        outer = tuple(
            Source(as_text(d.strip(b"/")), compile_patterns(pattern_lines(data)))
            for d, data in outer_gitignores
        )
        # rel_dir -> the .gitignore sources that apply to entries of rel_dir, nearest first.
        self._chains: dict[bytes, tuple[Source, ...]] = {}
        self._outer = tuple(reversed(outer))
        # rel_dir -> reason it is excluded by patterns (or None); "" is the root.
        self._dirs: dict[bytes, Reason | None] = {b"": None}

    @classmethod
    def load(
        cls,
        root: Path,
        extra_patterns: Sequence[str] = (),
        tracked: frozenset[bytes] | None = None,
        precious: Sequence[str] = (),
    ) -> IgnoreRules:
        """Rules for ``root`` from disk: root ``.snapdignore``, ``.gitignore`` files (read
        when a directory is first asked about), the enclosing repository's info/exclude."""
        root_b = os.path.abspath(os.fsencode(root))
        prefix = b""
        outer: list[tuple[bytes, bytes]] = []
        exclude = b""
        files = _outside_files(root_b)
        if files is not None:
            prefix, exclude_path, outer_paths = files
            for d, path in outer_paths:
                data = read_regular(path)
                if data:
                    outer.append((d, data))
            exclude = read_regular(exclude_path) or b""

        def gitignore(rel_dir: bytes) -> bytes | None:
            base = os.path.join(root_b, rel_dir) if rel_dir else root_b
            return read_regular(os.path.join(base, RULE_FILE_NAME))

        return cls(
            gitignore=gitignore,
            snapdignore=read_regular(os.path.join(root_b, SNAPDIGNORE)) or b"",
            extra_patterns=extra_patterns,
            info_exclude=exclude,
            tracked=tracked or frozenset(),
            prefix=prefix,
            outer_gitignores=outer,
            precious=precious,
        )

    @classmethod
    def from_inputs(cls, inputs: RuleInputs, gitignore: _Loader, snapdignore: bytes) -> IgnoreRules:
        """Rules rebuilt from recorded ``inputs`` and rule files read through ``gitignore``
        (``rel_dir -> contents``), e.g. from a mark's tree."""
        return cls(
            gitignore=gitignore,
            snapdignore=snapdignore,
            extra_patterns=inputs.extra,
            info_exclude=inputs.exclude,
            tracked=inputs.tracked,
            prefix=inputs.prefix,
            outer_gitignores=inputs.outer,
            precious=inputs.precious,
        )

    def same_outside(self, other: RuleInputs) -> bool:
        """Whether these rules' inputs outside the tree equal ``other``, the tracked set aside."""
        a, b = self.inputs, other
        return (a.extra, a.exclude, a.prefix, a.outer, a.precious) == (
            b.extra, b.exclude, b.prefix, b.outer, b.precious
        )

    # -- public decisions ---------------------------------------------------------------------

    def is_ignored(self, rel: bytes, is_dir: bool = False) -> bool:
        """True iff ``rel`` is not captured. For a directory this is the rules' verdict, except
        that one holding tracked files is captured (its mode too) whatever pattern names it;
        what else is in it stays ignored. See also :meth:`dir_may_contain_captured`."""
        return self.reason(rel, is_dir) is not None

    def reason(self, rel: bytes, is_dir: bool = False) -> Reason | None:
        """Why ``rel`` is not captured, or None when it is captured."""
        parts = rel.split(b"/")
        if not VCS_NAMES.isdisjoint(parts):
            return "vcs"
        name = parts[-1]
        if is_snapd_name(name):
            return "snapd"
        if rel in self.tracked or (is_dir and rel in self._tracked_dirs):
            return None  # a directory holding tracked (captured) files is captured, mode and all
        if is_integration_file(rel):  # untracked: the hooks are snapd's to keep (git-tracked: the user's)
            return "snapd"
        if not is_dir and is_editor_name(name):
            return "editor"
        parent = rel.rpartition(b"/")[0]
        inherited = self._dir_reason(parent)
        if inherited is not None:
            return inherited
        if not is_dir and (name == RULE_FILE_NAME or rel == SNAPDIGNORE):
            # A rule file in effect is captured even when a pattern matches it (`*` in a cache
            # directory's own .gitignore): a mark's rules are rebuilt from its tree, and a rule
            # file missing there would let a rollback treat what it hid as never existing.
            return None
        # A directory's verdict is its cached one (placing the watches judged every directory
        # already): its parent's is None here, so the two agree.
        return self._dir_reason(rel) if is_dir else self._pattern_reason(rel, False)

    def is_precious(self, rel: bytes) -> bool:
        """Whether the file ``rel`` is captured only because a ``precious`` pattern names it
        (git's rules ignore it; nothing of higher precedence decides it)."""
        if rel in self.tracked or not self._names_precious(rel):
            return False  # the precious patterns first: the cheap test that rules most paths out
        if rel.rpartition(b"/")[2] == RULE_FILE_NAME or rel == SNAPDIGNORE or self.reason(rel) is not None:
            return False
        return self._pattern_reason(rel, False, precious=False) is not None

    def dir_may_contain_captured(self, rel_dir: bytes) -> bool:
        """Whether a walker or watcher must descend into ``rel_dir``: it is not excluded, or
        git tracks something below it (a tracked file inside an ignored directory)."""
        if not VCS_NAMES.isdisjoint(rel_dir.split(b"/")):
            return False
        if rel_dir in self._tracked_dirs:
            return True
        return self._dir_reason(rel_dir) is None and not is_snapd_name(rel_dir.rpartition(b"/")[2])

    def lacks_rule_file(self, rel_dir: bytes) -> None:
        """``rel_dir`` holds no ``.gitignore``, as a listing made after its watch was placed
        shows: its entries get its parent's rules without trying to open one. A file made
        there since is a rule-file change, which builds new rules. Parents first."""
        if rel_dir not in self._chains:
            self._chains[rel_dir] = self._outer if not rel_dir else self._chain(rel_dir.rpartition(b"/")[0])

    def is_rule_file(self, rel: bytes) -> bool:
        """Whether a change to ``rel`` changes these rules (then build a new object)."""
        return rel == SNAPDIGNORE or rel == INFO_EXCLUDE or rel.rpartition(b"/")[2] == RULE_FILE_NAME

    # -- internals ------------------------------------------------------------------------

    def _dir_reason(self, rel_dir: bytes) -> Reason | None:
        """Pattern verdict for a directory, inherited from its ancestors (cached)."""
        try:
            return self._dirs[rel_dir]
        except KeyError:
            pass
        parent = rel_dir.rpartition(b"/")[0]
        reason = self._dir_reason(parent)
        if reason is None:
            if rel_dir.rpartition(b"/")[2] in VCS_NAMES:
                reason = "vcs"
            else:
                reason = self._pattern_reason(rel_dir, True)
        self._dirs[rel_dir] = reason
        return reason

    def _pattern_reason(self, rel: bytes, is_dir: bool, precious: bool = True) -> Reason | None:
        """The patterns' verdict on ``rel`` (a precious file that git's rules ignore: None,
        unless ``precious`` is False)."""
        path = as_text(rel)
        verdict = decide(self._snapd, path, is_dir)
        if verdict is not None:
            return "snapdignore" if verdict else None
        verdict = decide(self._extra, path, is_dir)
        if verdict is not None:
            return "config" if verdict else None
        top_path = f"{self._prefix}/{path}" if self._prefix else path
        reason: Reason | None = None
        for source in self._chain(rel.rpartition(b"/")[0]):
            verdict = source.decide(top_path, is_dir)
            if verdict is not None:
                reason = "gitignore" if verdict else None
                break
        else:
            reason = "exclude" if decide(self._exclude, top_path, is_dir) else None
        if reason is not None and precious and not is_dir and self._names_precious(rel):
            return None  # ignored by git, kept by snapd: a secret or a database (precious)
        return reason

    def _names_precious(self, rel: bytes) -> bool:
        """Whether the precious patterns name the file ``rel`` (the last match wins)."""
        return self._may_be_precious(rel) and decide(self._precious, as_text(rel), False) is True

    def _chain(self, rel_dir: bytes) -> tuple[Source, ...]:
        try:
            return self._chains[rel_dir]
        except KeyError:
            pass
        if rel_dir == b"":
            below: tuple[Source, ...] = self._outer
        else:
            below = self._chain(rel_dir.rpartition(b"/")[0])
        data = self._load(rel_dir)
        chain = below
        if data:
            rules = compile_patterns(pattern_lines(data))
            if rules:
                path = as_text(rel_dir)
                base = f"{self._prefix}/{path}" if self._prefix else path
                chain = (Source(base.strip("/"), rules), *below)
        self._chains[rel_dir] = chain
        return chain


# --- rule files outside the tree --------------------------------------------------------


def _outside_files(root: bytes) -> tuple[bytes, bytes, list[tuple[bytes, bytes]]] | None:
    """Where the rules of ``root`` read what lies outside its tree: (the root relative to the
    work tree's top, the common git dir's info/exclude, and (dir relative to the top, path)
    of each .gitignore from the top down to the root's parent, present or not); None
    outside a repository."""
    repo = find_repo(root)
    if repo is None:
        return None
    top, common = repo.top, repo.common
    prefix = os.path.relpath(root, top) if top != root else b""
    parts = prefix.split(b"/") if prefix else []
    dirs = [b"/".join(parts[:i]) for i in range(len(parts))]
    outer = [(d, os.path.join(top, d, RULE_FILE_NAME)) for d in dirs]
    return prefix, os.path.join(common, b"info", b"exclude"), outer


def outside_rule_files(root: Path) -> list[bytes]:
    """The files outside ``root``'s tree whose contents its rules depend on (see
    :func:`_outside_files`): a watcher of the tree never sees them change, so callers stat them."""
    files = _outside_files(os.path.abspath(os.fsencode(root)))
    if files is None:
        return []
    return [files[1], *(path for _, path in files[2])]
