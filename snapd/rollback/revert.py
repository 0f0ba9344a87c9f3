"""What a revert makes of the workspace: the tree now with the changes of spans taken back.

Pure, like :mod:`snapd.store.trees`: nodes are read through ``load``, contents through ``get``
and merged contents stored through ``put``; what comes out is the changes to apply to the
current tree (:func:`snapd.store.trees.apply_changes`), which the live side turns into the
target of an ordinary rollback (plan, token, pre-rollback mark, journal).

For each path that differs between a span's trees A (before) and B (after), with base = B's
entry, theirs = A's and ours = the entry now: ours equal to base takes theirs (content, mode,
kind; a created path is removed, a deleted one made again); ours equal to theirs needs
nothing; a file or symlink has its content and its mode taken back apart, each where ours
still has base's, two texts edited on both sides merged line by line
(:mod:`snapd.rollback.merge`); anything else is a :class:`Clash`. Two rules hold the tree
together: a directory is removed only when nothing is left in it (a path made after B keeps
it, named in ``keeps``), and a path is made only inside a directory that is there (or that
the span makes again).

Spans are applied in the order given, newest first, each onto the result of the one before:
ours of a span is what the spans before it left. Entries compare by kind, mode and key (a
directory by kind and mode: its contents are compared path by path).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass

from snapd.paths import ancestors, at_or_below, join, strictly_below
from snapd.rollback.merge import Hunk, merge, text_lines
from snapd.store import treediff, trees
from snapd.store.trees import Change, Dir, Entry, Load, Node

Get = Callable[[str], bytes]
Put = Callable[[bytes], str]
IgnoredNow = Callable[[bytes, bool], bool]


@dataclass(frozen=True)
class Span:
    """The changes from tree ``before`` (A) to tree ``after`` (B), to take back. ``name``:
    ``"A..B"`` as people know the two ends (mark ids or times): a conflict's markers name the
    side after ``..`` as base and the side before it as theirs. ``ignored_before``: whether a
    path was there at A but left out by A's rules (A's ignored names cover it; None: not
    known). Such a path, first captured in the span, was not made by it: it is left."""

    before: str
    after: str
    name: str
    ignored_before: Callable[[bytes], bool] | None = None


@dataclass(frozen=True)
class Clash:
    """A path where a later change overlaps the span's: what the revert would have to
    overwrite. ``hunks``: for a text file, each overlapping place."""

    path: bytes
    reason: str
    hunks: tuple[Hunk, ...] = ()


@dataclass(frozen=True)
class Outcome:
    """``changes``: to apply to the current tree (merged contents already put). ``merged``:
    text files merged with later edits; ``keeps``: later work the revert leaves, and why;
    ``markers``: files written with conflict markers; ``clashes``: the conflicts (with
    markers, only those no marker can show)."""

    changes: dict[bytes, Change]
    merged: tuple[bytes, ...]
    keeps: dict[bytes, str]
    markers: tuple[bytes, ...]
    clashes: tuple[Clash, ...]


HOLDS_LATER = "holds later files"
IGNORED_NOW = "ignored now"
IGNORED_BEFORE = "there before the span, ignored then"
UNKNOWN = "could not be listed: what it holds now is unknown"


def revert(
    load: Load,
    get: Get,
    put: Put,
    current: str,
    spans: Sequence[Span],
    *,
    markers: bool,
    only: Sequence[bytes] = (),
    ignored_now: IgnoredNow | None = None,
) -> Outcome:
    """Take back ``spans`` (newest first) from the tree ``current``. ``only``: look at these
    paths and below (and at the directories above them the span removed, to make them again);
    ``ignored_now(path, is_dir)``: the paths today's rules leave out, left as they are."""
    view = _View(_remembering(load), current)
    acc = _Found()
    for span in spans:
        _Reverting(view, acc, get, put, span, markers, only, ignored_now).run()
    return Outcome(
        view.settled(), tuple(acc.merged), acc.keeps, tuple(acc.markers), tuple(acc.clashes.values())
    )


def _remembering(load: Load) -> Load:
    """``load`` reading each node once: a revert looks paths up one by one from the root, and a
    directory of thousands of names is decoded again at each look (nodes never change)."""
    seen: dict[str, Node] = {}

    def once(key: str) -> Node:
        node = seen.get(key)
        if node is None:
            node = seen[key] = load(key)
        return node

    return once


class _Found:
    """What the spans found so far (each path listed once, in the order found)."""

    def __init__(self) -> None:
        self.merged: dict[bytes, None] = {}
        self.markers: dict[bytes, None] = {}
        self.keeps: dict[bytes, str] = {}
        self.clashes: dict[bytes, Clash] = {}
        self.held: set[bytes] = set()  # the directories above paths left out (ignored now)


def _as_entry(change: Change) -> Entry | None:
    if isinstance(change, Dir):
        return Entry("dir", change.mode, 0 if change.listed else trees.UNLISTED, "")
    return change


def _same(x: Entry | None, y: Entry | None) -> bool:
    if x is None or y is None:
        return x is y
    return x.kind == y.kind and x.mode == y.mode and (x.kind == "dir" or x.key == y.key)


def _change(e: Entry | None) -> Change:
    if e is not None and e.kind == "dir":
        return Dir(e.mode, listed=not trees.unlisted(e))
    return e


class _View:
    """The current tree with the changes decided so far laid over it, read as
    :func:`trees.apply_changes` will make it: a ``Dir`` over a directory keeps what it holds,
    over anything else starts empty; a removal takes everything below."""

    def __init__(self, load: Load, current: str) -> None:
        self.load, self.current = load, current
        self.final: dict[bytes, Change] = {}
        self._kids: dict[bytes, set[bytes]] = {}

    def now(self, path: bytes) -> Entry | None:
        """The current entry at ``path`` (as captured, before any change)."""
        return trees.lookup(self.load, self.current, path)

    def _hidden(self, paths: Iterable[bytes]) -> bool:
        """Whether a removal or a file decided at one of ``paths`` hides what the current
        tree holds below it (a ``Dir`` keeps it: where the current tree has no directory,
        there is nothing below to keep)."""
        return any(q in self.final and not isinstance(self.final[q], Dir) for q in paths)

    def entry(self, path: bytes) -> Entry | None:
        if self._hidden(ancestors(path)):
            return None
        if path in self.final:
            return _as_entry(self.final[path])
        return self.now(path)

    def children(self, path: bytes) -> list[bytes]:
        """The names in directory ``path`` as the view has it."""
        names = set(self._kids.get(path, ()))
        now = self.now(path)
        if now is not None and now.kind == "dir" and not self._hidden([*ancestors(path), path]):
            names.update(self.load(now.key))
        return sorted(n for n in names if self.entry(join(path, n)) is not None)

    def set(self, path: bytes, change: Change) -> None:
        self.final[path] = change
        parent, _, name = path.rpartition(b"/")
        self._kids.setdefault(parent, set()).add(name)

    def settled(self) -> dict[bytes, Change]:
        """The changes, less those that leave a path as it is now."""
        out: dict[bytes, Change] = {}
        for path, ch in self.final.items():
            now = self.now(path)
            if isinstance(ch, Dir):
                same = now is not None and now.kind == "dir" and now.mode == ch.mode
                same = same and trees.unlisted(now) != ch.listed
            else:
                same = ch == now
            if not same:
                out[path] = ch
        return out


@dataclass
class _Path:
    """One path of a span: its three entries and what becomes of it."""

    path: bytes
    base: Entry | None
    theirs: Entry | None
    ours: Entry | None
    change: Change = None
    sets: bool = False  # ``change`` is to be made
    clash: Clash | None = None
    blocked: bool = False  # its directory is in conflict: left as it is


class _Reverting:
    """One span taken back over the view."""

    def __init__(
        self,
        view: _View,
        acc: _Found,
        get: Get,
        put: Put,
        span: Span,
        markers: bool,
        only: Sequence[bytes],
        ignored_now: IgnoredNow | None,
    ) -> None:
        self.view, self.acc, self.get, self.put, self.span = view, acc, get, put, span
        self.markers, self.only, self.ignored_now = markers, only, ignored_now
        theirs_name, dots, base_name = span.name.partition("..")
        self.names = ("now", base_name if dots else span.name, theirs_name)
        self.later: set[bytes] = set()  # directories kept because they hold later files

    def run(self) -> None:
        paths = list(self._paths())
        for p in paths:
            self._decide(p)
        by_path = {p.path: p for p in paths}
        for p in reversed(paths):
            self._keep_nonempty(p, by_path)
        for p in paths:
            self._need_parent(p, by_path)
        for p in paths:
            if p.clash is not None:
                self._clash(p.clash)
            if p.sets and p.clash is None and not p.blocked:
                self.view.set(p.path, p.change)

    def _clash(self, clash: Clash) -> None:
        """A path listed once: the first span's reason, every span's hunks (a path in conflict
        is left as it is, so all of them number the lines of the same file)."""
        was = self.acc.clashes.get(clash.path)
        if was is not None:
            hunks = sorted({*was.hunks, *clash.hunks}, key=lambda h: (h.line, h.ours, h.base, h.theirs))
            clash = Clash(was.path, was.reason, tuple(hunks))
        self.acc.clashes[clash.path] = clash

    def _paths(self) -> Iterator[_Path]:
        view, ignored = self.view, None
        for d in treediff.diff(view.load, self.span.before, self.span.after):
            path, theirs, base = d.path, d.old, d.new
            if ignored is not None and strictly_below(path, ignored):
                continue
            ours = view.entry(path)
            if self.only and not any(at_or_below(path, top) for top in self.only):
                parent_needed = any(strictly_below(top, path) for top in self.only)
                if not (parent_needed and theirs is not None and theirs.kind == "dir"):
                    continue
                if ours is not None and ours.kind == "dir":
                    continue
            why = self._left_out(path, base, theirs)
            if why is not None:
                ignored = path
                self.acc.held.update(ancestors(path))
                self.acc.keeps.setdefault(path, why)
                continue
            yield _Path(path, base, theirs, ours)

    def _left_out(self, path: bytes, base: Entry | None, theirs: Entry | None) -> str | None:
        """Why ``path`` (and what is below it) is left as it is, if it is: today's rules
        ignore it, or it was there before the span, ignored then, and only captured since."""
        if self.ignored_now is not None and any(
            self.ignored_now(path, e.kind == "dir") for e in (base, theirs) if e is not None
        ):
            return IGNORED_NOW
        before = self.span.ignored_before
        if theirs is None and before is not None and before(path):
            return IGNORED_BEFORE
        return None

    def _decide(self, p: _Path) -> None:
        base, theirs, ours = p.base, p.theirs, p.ours
        if _same(ours, theirs):
            return
        if _same(ours, base):
            if theirs is not None and not trees.holds_object(theirs):
                p.clash = Clash(p.path, "not captured before the span")
            else:
                p.change, p.sets = _change(theirs), True
            return
        if base is None or theirs is None or ours is None or not base.kind == theirs.kind == ours.kind:
            p.clash = Clash(p.path, _why(base, theirs, ours))
        elif base.kind in ("file", "symlink") and all(map(trees.holds_object, (base, theirs, ours))):
            self._merge(p, base, theirs, ours)
        else:
            p.clash = Clash(p.path, _why(base, theirs, ours))

    def _merge(self, p: _Path, base: Entry, theirs: Entry, ours: Entry) -> None:
        """Content and mode taken back apart: each from theirs where ours still has base's,
        kept where ours already has theirs; two text files merged line by line."""
        hunks: tuple[Hunk, ...] = ()
        if ours.key == base.key:
            key, size = theirs.key, theirs.size
        elif ours.key == theirs.key:
            key, size = ours.key, ours.size
        else:
            b, t, o = self._texts(base, theirs, ours)
            if b is None or t is None or o is None:
                p.clash = Clash(p.path, _why(base, theirs, ours))
                return
            got = merge(b, o, t, markers=self.markers, names=self.names)
            if got.data is None:
                p.clash = Clash(p.path, "edited since where the span changed it", got.hunks)
                return
            key, size, hunks = self.put(got.data), len(got.data), got.hunks
        if ours.mode == base.mode:
            mode = theirs.mode
        elif theirs.mode in (base.mode, ours.mode):
            mode = ours.mode
        else:
            p.clash = Clash(p.path, "mode changed since", hunks)
            return
        if key == ours.key and mode == ours.mode:
            return
        p.change, p.sets = Entry(ours.kind, mode, size, key), True
        if key not in (theirs.key, ours.key):
            (self.acc.markers if hunks else self.acc.merged)[p.path] = None

    def _texts(self, *entries: Entry) -> list[bytes | None]:
        """The contents of ``entries`` if they are all text files, else Nones."""
        if any(e.kind != "file" for e in entries):
            return [None] * len(entries)
        datas = [self.get(e.key) for e in entries]
        if any(text_lines(d) is None for d in datas):
            return [None] * len(entries)
        return list(datas)

    def _keep_nonempty(self, p: _Path, by_path: dict[bytes, _Path]) -> None:
        """A directory the span made (or that it turned a file into) is removed only when
        nothing is left in it; children come before their directory here."""
        if not p.sets or p.ours is None or p.ours.kind != "dir" or isinstance(p.change, Dir):
            return
        later = False
        left = p.path in self.acc.held
        if trees.unlisted(p.ours):
            left = True
            self.acc.keeps.setdefault(p.path, UNKNOWN)
        for name in self.view.children(p.path):
            child = by_path.get(join(p.path, name))
            if child is None or child.path in self.later:
                later = left = True
            elif not (child.sets and child.change is None):
                left = True
        if not left:
            return
        p.sets, p.change = False, None
        if later:
            self.later.add(p.path)
        if p.theirs is None:
            if later:
                self.acc.keeps.setdefault(p.path, HOLDS_LATER)
        else:
            p.clash = Clash(p.path, HOLDS_LATER if later else "holds paths kept")

    def _need_parent(self, p: _Path, by_path: dict[bytes, _Path]) -> None:
        """A path is made only inside a directory that will be there; parents come first."""
        if not p.sets or p.change is None or p.ours is not None:
            return
        parent = p.path.rpartition(b"/")[0]
        if not parent:
            return
        up = by_path.get(parent)
        if up is not None and (up.clash is not None or up.blocked):
            p.blocked = True
            return
        after = _as_entry(up.change) if up is not None and up.sets else self.view.entry(parent)
        if after is None or after.kind != "dir":
            p.clash = Clash(p.path, "its directory is gone since")


def _why(base: Entry | None, theirs: Entry | None, ours: Entry | None) -> str:
    """Why a path is a conflict (ours is neither base nor theirs, and no merge applies)."""
    if ours is None:
        return "deleted since"
    if not trees.holds_object(ours):
        return f"not captured now ({trees.uncaptured_reason(ours)})"
    if base is None:
        if theirs is not None and theirs.kind == ours.kind == "dir":
            return "made again since, with another mode"
        return "made again since, with other content"
    if ours.kind != base.kind:
        return "kind changed since"
    if not trees.holds_object(base):
        return "not captured after the span"
    if theirs is None:
        return "changed since the span made it"
    if theirs.kind != base.kind:
        return "changed since the span made it a " + base.kind
    if ours.kind == "symlink":
        return "symlink retargeted since"
    if ours.kind == "dir":
        return "mode changed since"
    return "changed since (not text)"
