"""What a revert makes of a tree (snapd/rollback/revert.py): every row of docs/rollback.md's
"What a revert does to each path", over in-memory trees (pure: no I/O). Each test builds the
trees A (before the span), B (after it) and now, takes the span back and reads the tree that
the outcome's changes make of now."""

from __future__ import annotations

import time
from dataclasses import dataclass

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tree_helpers import Mem

from snapd.paths import at_or_below, strictly_below
from snapd.rollback.revert import HOLDS_LATER, IGNORED_BEFORE, IGNORED_NOW, UNKNOWN, Outcome, Span, revert
from snapd.store import treediff, trees
from snapd.store.objects import xxh3_hex
from snapd.store.trees import Change, Dir, Entry

pytestmark = pytest.mark.timeout(120)


@dataclass(frozen=True)
class F:
    """A file (or with ``link``, a symlink to ``data``) in a tree spec."""

    data: bytes
    mode: int = 0o644
    link: bool = False


Spec = dict[bytes, "bytes | F | Dir | Entry | None"]
Seen = tuple[str, int, bytes | None]  # kind, mode, content (None: a directory)


class World:
    """Trees and contents in memory: the store's ``load``, ``get`` and ``put`` stand-ins."""

    def __init__(self) -> None:
        self.m = Mem()
        self.blobs: dict[str, bytes] = {}
        self.puts = 0

    def put(self, data: bytes) -> str:
        key = f"{xxh3_hex(data)}-{len(data)}"
        self.blobs[key] = data
        self.puts += 1
        return key

    def get(self, key: str) -> bytes:
        return self.blobs[key]

    def entry(self, v: bytes | F) -> Entry:
        f = F(v) if isinstance(v, bytes) else v
        return Entry(
            "symlink" if f.link else "file", 0o777 if f.link else f.mode, len(f.data), self.put(f.data)
        )

    def tree(self, spec: Spec, base: str | None = None) -> str:
        changes: dict[bytes, Change] = {}
        for path, v in spec.items():
            changes[path] = v if v is None or isinstance(v, Dir | Entry) else self.entry(v)
        return trees.apply_changes(self.m.load, self.m.save, base, changes)

    def flat(self, root: str) -> dict[bytes, Seen]:
        return {
            p: (e.kind, e.mode, self.blobs[e.key] if e.kind in ("file", "symlink") else None)
            for p, e in trees.walk(self.m.load, root)
        }

    def revert(self, now: str, *spans: tuple[str, str], **kw: object) -> tuple[Outcome, dict[bytes, Seen]]:
        named = [Span(a, b, f"A{i}..B{i}") for i, (a, b) in enumerate(spans)]
        got = revert(
            self.m.load, self.get, self.put, now, named, markers=bool(kw.pop("markers", False)), **kw
        )  # type: ignore[arg-type]
        return got, self.flat(trees.apply_changes(self.m.load, self.m.save, now, got.changes))


def file(data: bytes, mode: int = 0o644) -> Seen:
    return ("file", mode, data)


def folder(mode: int = 0o755) -> Seen:
    return ("dir", mode, None)


# -- ours == base: the path is unchanged since B, so theirs (A's) comes back -----------------


def test_unchanged_since_the_span_takes_every_kind_of_change_back() -> None:
    w = World()
    a = w.tree(
        {
            b"edited": b"one\n",
            b"chmod": F(b"x", 0o644),
            b"deleted": b"gone\n",
            b"tree/sub/f": b"deep",
            b"tree": Dir(0o750),
            b"kind": b"was a file",
            b"link": F(b"target-a", link=True),
            b"ro": Dir(0o755),
            b"ro/f": b"f",
            b"keep": b"keep",
        }
    )
    b = w.tree(
        {
            b"edited": b"two\n",
            b"chmod": F(b"x", 0o755),
            b"deleted": None,
            b"tree": None,
            b"kind": None,
            b"kind/inside": b"now a directory",
            b"link": F(b"target-b", link=True),
            b"ro": Dir(0o500),
            b"created": b"new",
            b"made/dir/f": b"new file in new dirs",
        },
        a,
    )
    got, after = w.revert(b, (a, b))  # now == B: nothing happened since
    assert got.clashes == () and got.keeps == {} and got.merged == ()
    assert after == w.flat(a)


def test_already_as_at_a_is_left_alone() -> None:
    w = World()
    a = w.tree({b"f": b"1\n", b"d/x": b"x"})
    b = w.tree({b"f": b"2\n", b"d": None}, a)
    now = w.tree({b"f": b"1\n", b"d/x": b"x"}, b)  # the user took it back by hand
    got, after = w.revert(now, (a, b))
    assert got.changes == {} and got.clashes == ()
    assert after == w.flat(a)


# -- text merged with later edits --------------------------------------------------------------


def test_later_edits_elsewhere_in_the_file_are_kept() -> None:
    w = World()
    a = w.tree({b"t": b"1\n2\n3\n4\n5\n"})
    b = w.tree({b"t": b"1\nTWO\n3\n4\n5\n"}, a)
    now = w.tree({b"t": b"1\nTWO\n3\n4\nFIVE\n"}, b)
    got, after = w.revert(now, (a, b))
    assert got.merged == (b"t",) and got.clashes == ()
    assert after[b"t"] == file(b"1\n2\n3\n4\nFIVE\n")


@pytest.mark.parametrize(
    ("modes", "expected"),
    [
        ((0o644, 0o600, 0o600), 0o644),  # (A, B, now): now's mode as B's: A's comes back
        ((0o644, 0o644, 0o755), 0o755),  # the span kept the mode: the later chmod stays
        ((0o600, 0o644, 0o600), 0o600),  # the later chmod did what the revert would
        ((0o600, 0o644, 0o755), None),  # all three differ: a conflict
    ],
)
def test_a_merged_file_s_mode(modes: tuple[int, int, int], expected: int | None) -> None:
    w = World()
    ma, mb, mn = modes
    a = w.tree({b"t": F(b"1\n2\n3\n4\n", ma)})
    b = w.tree({b"t": F(b"1\nTWO\n3\n4\n", mb)}, a)
    now = w.tree({b"t": F(b"1\nTWO\n3\nFOUR\n", mn)}, b)
    got, after = w.revert(now, (a, b))
    if expected is None:
        assert [(c.path, c.reason) for c in got.clashes] == [(b"t", "mode changed since")]
        assert after == w.flat(now)
    else:
        assert got.clashes == ()
        assert after[b"t"] == file(b"1\n2\n3\nFOUR\n", expected)


def test_binary_content_and_mode_are_taken_back_apart() -> None:
    """A binary file chmodded since B: its bytes are still B's, so A's come back; the mode
    follows the merge rule."""
    w = World()
    a = w.tree({b"bin": F(b"\0old", 0o644)})
    b = w.tree({b"bin": F(b"\0new", 0o644)}, a)
    now = w.tree({b"bin": F(b"\0new", 0o755)}, b)
    got, after = w.revert(now, (a, b))
    assert got.clashes == () and got.merged == ()
    assert after[b"bin"] == file(b"\0old", 0o755)


# -- conflicts ---------------------------------------------------------------------------------


def test_overlapping_edit_is_a_conflict_with_its_hunk() -> None:
    w = World()
    a = w.tree({b"t": b"1\n2\n3\n", b"other": b"o\n"})
    b = w.tree({b"t": b"1\nTWO\n3\n", b"other": b"O\n"}, a)
    now = w.tree({b"t": b"0\n1\nzwei\n3\n"}, b)
    got, _ = w.revert(now, (a, b))
    (c,) = got.clashes
    assert c.path == b"t" and c.reason == "edited since where the span changed it"
    assert [(h.line, h.base, h.ours, h.theirs) for h in c.hunks] == [
        (3, (b"TWO\n",), (b"zwei\n",), (b"2\n",))
    ]


def test_markers_write_the_conflict_into_the_file() -> None:
    w = World()
    a = w.tree({b"t": b"1\n2\n3\n"})
    b = w.tree({b"t": b"1\nTWO\n3\n"}, a)
    now = w.tree({b"t": b"1\nzwei\n3\n"}, b)
    got, after = w.revert(now, (a, b), markers=True)
    assert got.clashes == () and got.markers == (b"t",) and got.merged == ()
    assert after[b"t"] == file(b"1\n<<<<<<< now\nzwei\n||||||| B0\nTWO\n=======\n2\n>>>>>>> A0\n3\n")


@pytest.mark.parametrize(
    ("a_spec", "b_spec", "now_spec", "reason"),
    [
        ({b"p": b"\0a"}, {b"p": b"\0b"}, {b"p": b"\0c"}, "changed since (not text)"),
        ({b"p": b"1\n"}, {b"p": b"2\n"}, {b"p": None, b"p/in": b"x"}, "kind changed since"),
        ({b"p": b"1\n"}, {b"p": b"2\n"}, {b"p": None}, "deleted since"),
        ({b"p": b"1\n"}, {b"p": None}, {b"p": b"other\n"}, "made again since, with other content"),
        ({b"p": F(b"t1", link=True)}, {b"p": F(b"t2", link=True)}, {b"p": F(b"t3", link=True)}, None),
        ({}, {b"p": b"made\n"}, {b"p": b"made and edited\n"}, "changed since the span made it"),
        ({b"p": F(b"t", link=True)}, {b"p": b"1\n"}, {b"p": b"2\n"}, "changed since the span made it a file"),
        ({b"d": Dir(0o755)}, {b"d": Dir(0o700)}, {b"d": Dir(0o750)}, "mode changed since"),
    ],
    ids=[
        "binary",
        "kind",
        "deleted",
        "remade",
        "symlink",
        "created-then-edited",
        "kind-then-edited",
        "dir-mode",
    ],
)
def test_anything_else_is_a_conflict_and_left_as_it_is(
    a_spec: Spec, b_spec: Spec, now_spec: Spec, reason: str | None
) -> None:
    for markers in (False, True):
        w = World()
        a = w.tree({b"keep": b"k", **a_spec})
        b = w.tree(b_spec, a)
        now = w.tree(now_spec, b)
        got, after = w.revert(now, (a, b), markers=markers)
        assert [c.path for c in got.clashes] == [b"d" if b"d" in a_spec else b"p"]
        assert got.clashes[0].reason == (reason or "symlink retargeted since")
        assert after == w.flat(now) and got.changes == {}


# -- the tree's shape --------------------------------------------------------------------------


def test_a_directory_made_in_the_span_that_holds_later_files_is_kept() -> None:
    w = World()
    a = w.tree({b"x": b"x"})
    b = w.tree({b"new/deep/made": b"m", b"new/also": b"a"}, a)
    now = w.tree({b"new/deep/later": b"l"}, b)
    got, after = w.revert(now, (a, b))
    assert got.clashes == ()
    assert got.keeps == {b"new": HOLDS_LATER, b"new/deep": HOLDS_LATER}
    assert set(after) == {b"x", b"new", b"new/deep", b"new/deep/later"}


def test_a_directory_that_could_not_be_listed_is_kept() -> None:
    w = World()
    a = w.tree({b"x": b"x"})
    b = w.tree({b"d/f": b"f"}, a)
    now = w.tree({b"d": Dir(0o755, listed=False)}, b)  # what else it holds is unknown
    got, after = w.revert(now, (a, b))
    assert got.keeps == {b"d": UNKNOWN} and got.clashes == ()
    assert set(after) == {b"x", b"d"}


def test_a_directory_the_span_turned_a_file_into_cannot_turn_back_with_later_files_in_it() -> None:
    w = World()
    a = w.tree({b"p": b"file\n"})
    b = w.tree({b"p": None, b"p/made": b"m"}, a)
    now = w.tree({b"p/later": b"l"}, b)
    got, after = w.revert(now, (a, b))
    assert [(c.path, c.reason) for c in got.clashes] == [(b"p", HOLDS_LATER)]
    assert set(after) == {b"p", b"p/later"}  # in markers mode: the span's own file goes


def test_a_path_is_made_again_only_in_a_directory_that_is_there() -> None:
    w = World()
    a = w.tree({b"d/f": b"1\n", b"d/gone": b"g\n"})
    b = w.tree({b"d/gone": None}, a)
    now = w.tree({b"d": None}, b)  # the directory was removed since
    got, after = w.revert(now, (a, b))
    assert [(c.path, c.reason) for c in got.clashes] == [(b"d/gone", "its directory is gone since")]
    assert after == w.flat(now)


def test_a_conflict_at_a_directory_leaves_what_it_would_hold() -> None:
    w = World()
    a = w.tree({b"d/f": b"1\n"})
    b = w.tree({b"d": None}, a)
    now = w.tree({b"d": b"a file now\n"}, b)
    got, after = w.revert(now, (a, b), markers=True)
    assert [c.path for c in got.clashes] == [b"d"]  # d/f not listed: it could only go in d
    assert after == w.flat(now)


def test_ignored_now_is_left_and_keeps_its_directory() -> None:
    w = World()
    a = w.tree({b"x": b"x"})
    b = w.tree({b"build/out.o": b"\0obj", b"build/log": b"log", b"src.c": b"int x;\n"}, a)
    now = w.tree({b"build/out.o": None}, b)  # today's rules leave build/*.o out

    def ignored(path: bytes, is_dir: bool) -> bool:
        return path.endswith(b".o")

    got, after = w.revert(now, (a, b), ignored_now=ignored)
    assert got.keeps == {b"build/out.o": IGNORED_NOW} and got.clashes == ()
    assert set(after) == {b"x", b"build"}


def test_a_path_ignored_in_a_newer_span_keeps_its_directory_in_an_older_one() -> None:
    w = World()
    t0 = w.tree({b"x": b"x"})
    t1 = w.tree({b"d/notes": b"n"}, t0)
    t2 = w.tree({b"d/cache.o": b"\0o"}, t1)
    now = w.tree({b"d/cache.o": None}, t2)  # today's rules leave *.o out

    def ignored(path: bytes, is_dir: bool) -> bool:
        return path.endswith(b".o")

    got, after = w.revert(now, (t1, t2), (t0, t1), ignored_now=ignored)
    assert got.keeps == {b"d/cache.o": IGNORED_NOW} and got.clashes == ()
    assert set(after) == {b"x", b"d"}


def test_a_path_the_span_only_stopped_ignoring_is_left() -> None:
    """app.log and build/ were there at A, left out by A's rules; the span stopped ignoring
    them, so B is the first to hold them. The span did not make them: they stay."""
    w = World()
    a = w.tree({b".gitignore": b"*.log\nbuild/\n"})
    b = w.tree({b".gitignore": b"", b"app.log": b"log\n", b"build/out/x.o": b"\0o", b"new": b"n"}, a)
    names = {b"app.log", b"build"}

    def there(path: bytes) -> bool:
        return path in names or any(q in names for q in _ancestors(path))

    got = revert(w.m.load, w.get, w.put, b, [Span(a, b, "A..B", ignored_before=there)], markers=False)
    assert got.keeps == {b"app.log": IGNORED_BEFORE, b"build": IGNORED_BEFORE} and got.clashes == ()
    after = w.flat(trees.apply_changes(w.m.load, w.m.save, b, got.changes))
    assert set(after) == {b".gitignore", b"app.log", b"build", b"build/out", b"build/out/x.o"}
    assert after[b".gitignore"] == file(b"*.log\nbuild/\n")


def test_an_ignored_directory_is_named_once() -> None:
    w = World()
    a = w.tree({b"x": b"x"})
    b = w.tree({b"node_modules/a/b": b"1", b"node_modules/c": b"2"}, a)
    now = w.tree({b"node_modules": None}, b)
    asked: list[bytes] = []

    def ignored(path: bytes, is_dir: bool) -> bool:
        asked.append(path)
        return path == b"node_modules" and is_dir

    got, after = w.revert(now, (a, b), ignored_now=ignored)
    assert got.keeps == {b"node_modules": IGNORED_NOW} and asked == [b"node_modules"]
    assert after == w.flat(now)


def test_a_directory_the_span_removed_and_made_again_since() -> None:
    """Made again with A's mode (to hold a later file): the span's files go back into it.
    With another mode: a conflict, and nothing goes into it."""
    w = World()
    a = w.tree({b"d": Dir(0o755), b"d/f": b"f"})
    b = w.tree({b"d": None}, a)
    now = w.tree({b"d/later": b"l"}, b)
    got, after = w.revert(now, (a, b))
    assert got.clashes == () and set(after) == {b"d", b"d/f", b"d/later"}
    now = w.tree({b"d": Dir(0o700), b"d/later": b"l"}, b)
    got, after = w.revert(now, (a, b))
    assert [(c.path, c.reason) for c in got.clashes] == [(b"d", "made again since, with another mode")]
    assert after == w.flat(now)


def test_content_not_captured_before_the_span_cannot_come_back() -> None:
    w = World()
    a = w.tree({b"x": b"x"})
    big = trees.uncaptured("over the size cap", 0o644, 1 << 40, (7, 8))
    a = trees.apply_changes(w.m.load, w.m.save, a, {b"big": big})
    b = w.tree({b"big": b"small now"}, a)
    got, after = w.revert(b, (a, b))
    assert [(c.path, c.reason) for c in got.clashes] == [(b"big", "not captured before the span")]
    assert after == w.flat(b)
    bigger = trees.uncaptured("over the size cap", 0o644, 1 << 41, (7, 9))  # grown past the cap since
    now = trees.apply_changes(w.m.load, w.m.save, b, {b"big": bigger})
    got, after = w.revert(now, (a, b))
    assert [(c.path, c.reason) for c in got.clashes] == [(b"big", "not captured now (over the size cap)")]


# -- several spans, and only some paths --------------------------------------------------------


def test_several_spans_newest_first() -> None:
    """Two turns edited the same line; the later edit elsewhere is kept. Taken back newest
    first, each merge is clean; the oldest first, the first would clash."""
    w = World()
    t0 = w.tree({b"t": b"1\n2\n3\n4\n5\n", b"made-in-1": None})
    t1 = w.tree({b"t": b"1\ntwo\n3\n4\n5\n", b"made-in-1/f": b"f"}, t0)
    t2 = w.tree({b"t": b"1\nTWO!\n3\n4\n5\n", b"made-in-1/g": b"g"}, t1)
    now = w.tree({b"t": b"1\nTWO!\n3\n4\nFIVE\n"}, t2)
    got, after = w.revert(now, (t1, t2), (t0, t1))
    assert got.clashes == () and got.merged == (b"t",)
    assert after == {b"t": file(b"1\n2\n3\n4\nFIVE\n")}
    wrong_order, _ = w.revert(now, (t0, t1), (t1, t2))
    assert [c.path for c in wrong_order.clashes] == [b"t"]


def test_markers_of_a_newer_span_are_text_to_an_older_one() -> None:
    w = World()
    t0 = w.tree({b"t": b"1\n2\n3\n4\n5\n"})
    t1 = w.tree({b"t": b"1\ntwo\n3\n4\n5\n"}, t0)
    t2 = w.tree({b"t": b"1\ntwo\n3\nfour\n5\n"}, t1)
    now = w.tree({b"t": b"1\nTWO\n3\nFOUR\n5\n"}, t2)
    got, after = w.revert(now, (t1, t2), (t0, t1), markers=True)
    assert got.markers == (b"t",) and got.clashes == () and got.merged == ()
    assert after[b"t"] == file(
        b"1\n<<<<<<< now\nTWO\n||||||| B1\ntwo\n=======\n2\n>>>>>>> A1\n3\n"
        b"<<<<<<< now\nFOUR\n||||||| B0\nfour\n=======\n4\n>>>>>>> A0\n5\n"
    )
    refused, _ = w.revert(now, (t1, t2), (t0, t1))
    (c,) = refused.clashes  # listed once, with each span's hunk
    assert [(h.line, h.ours) for h in c.hunks] == [(2, (b"TWO\n",)), (4, (b"FOUR\n",))]


def test_a_later_span_s_result_is_the_next_one_s_ours() -> None:
    """The newer span made again what the older one had removed (a directory and a file in
    it): ours of the older span is that result, so it takes them back too."""
    w = World()
    t0 = w.tree({b"d": Dir(0o700), b"d/f": b"f0"})
    t1 = w.tree({b"d": None}, t0)
    t2 = w.tree({b"d": Dir(0o711), b"d/f": b"f2", b"d/g": b"g"}, t1)
    got, after = w.revert(t2, (t1, t2), (t0, t1))
    assert got.clashes == ()
    assert after == w.flat(t0)


def test_spans_that_cancel_out_change_nothing() -> None:
    """The changes hold nothing equal to the tree now: two spans that undo each other's
    effect leave no change at all (the rollback's plan would find none either way)."""
    w = World()
    t0 = w.tree({b"f": b"1\n", b"d/x": b"x"})
    t1 = w.tree({b"f": b"2\n", b"d": None}, t0)
    t2 = w.tree({b"f": b"1\n", b"d/x": b"x"}, t1)
    got, after = w.revert(t2, (t1, t2), (t0, t1))
    assert got.changes == {} and got.clashes == ()
    assert after == w.flat(t2)


def test_only_limits_every_span_and_makes_the_parents_it_needs() -> None:
    w = World()
    a = w.tree({b"d": Dir(0o700), b"d/f": b"f", b"d/g": b"g", b"e": b"1\n"})
    b = w.tree({b"d": None, b"e": b"2\n"}, a)
    got, after = w.revert(b, (a, b), only=[b"d/f"])
    assert after == {b"d": folder(0o700), b"d/f": file(b"f"), b"e": file(b"2\n")}
    assert got.clashes == ()


def test_nothing_is_put_for_a_refused_text_merge() -> None:
    w = World()
    a = w.tree({b"t": b"1\n"})
    b = w.tree({b"t": b"2\n"}, a)
    now = w.tree({b"t": b"3\n"}, b)
    w.puts = 0
    got, _ = w.revert(now, (a, b))
    assert got.clashes and w.puts == 0


@pytest.mark.timeout(60)
def test_a_big_span_is_taken_back_in_bounded_time() -> None:
    """A turn that installed 6,000 files in 600 directories and touched half of 2,000 files
    in one directory: each path is looked up from the root, so each directory's node must be
    read once, not at each look (here that was minutes)."""
    w = World()
    a = w.tree({b"src/f%d" % i: b"%d\n" % i for i in range(2000)})
    b_spec: Spec = {b"deps/d%d/f%d" % (i // 10, i): b"n%d\n" % i for i in range(6000)}
    b_spec.update({b"src/f%d" % i: b"x%d\n" % i for i in range(0, 2000, 2)})
    b = w.tree(b_spec, a)
    started = time.monotonic()
    got, after = w.revert(b, (a, b))
    assert time.monotonic() - started < 15
    assert got.clashes == () and after == w.flat(a)


# -- properties --------------------------------------------------------------------------------

names = st.sampled_from([b"a", b"b", b"c"])
paths = st.lists(names, min_size=1, max_size=3).map(b"/".join)
values = st.one_of(
    st.sampled_from([b"1\n", b"2\n", b"\0bin"]).map(lambda d: F(d)),
    st.sampled_from([0o600, 0o755]).map(lambda m: F(b"1\n", m)),
    st.sampled_from([b"t1", b"t2"]).map(lambda d: F(d, link=True)),
    st.sampled_from([0o700, 0o755]).map(Dir),
    st.none(),
)
specs = st.dictionaries(paths, values, max_size=8)
uncaptured = st.integers(1, 2).map(lambda i: trees.uncaptured("over the size cap", 0o644, 1 << 30, (i, i)))
any_specs = st.dictionaries(paths, st.one_of(values, uncaptured), max_size=8)


@settings(max_examples=400, deadline=None)
@given(specs, specs)
def test_a_span_up_to_now_is_a_rollback(a_spec: Spec, b_spec: Spec) -> None:
    """``revert A..`` (B = now): every path is unchanged since B, so the result is A's tree,
    kinds, modes and directories included, with nothing kept and no conflict."""
    w = World()
    a = w.tree(a_spec)
    b = w.tree(b_spec, a)
    got, after = w.revert(b, (a, b))
    assert got.clashes == () and got.keeps == {}
    assert after == w.flat(a)


@settings(max_examples=400, deadline=None)
@given(specs, specs, st.lists(paths, max_size=4))
def test_later_files_survive_a_revert(a_spec: Spec, b_spec: Spec, later: list[bytes]) -> None:
    """Files made after B, where the span changed nothing (no path of A or B, inside
    directories B has or new ones): A's tree comes back and they stay, with the directories
    holding them."""
    w = World()
    a = w.tree(a_spec)
    b = w.tree(b_spec, a)
    fa, fb = w.flat(a), w.flat(b)
    later = [
        p for p in later if p not in fa and p not in fb and all(_holds(fa, fb, q) for q in _ancestors(p))
    ]
    later = [p for p in later if not any(q in later for q in _ancestors(p))]
    now = w.tree({p: b"later " + p for p in later}, b)
    got, after = w.revert(now, (a, b))
    assert got.clashes == ()
    expected = {**fa, **{p: file(b"later " + p) for p in later}}
    for p in later:
        for q in _ancestors(p):
            expected.setdefault(q, w.flat(now)[q])
    assert after == expected
    assert all(v == HOLDS_LATER for v in got.keeps.values())


def _holds(fa: dict[bytes, Seen], fb: dict[bytes, Seen], q: bytes) -> bool:
    """A later file may lie in ``q``: a directory in B (and in A if A has it), or new."""
    if q in fb:
        return fb[q][0] == "dir" and fa.get(q, folder())[0] == "dir"
    return q not in fa


def _ancestors(path: bytes) -> list[bytes]:
    parts = path.split(b"/")
    return [b"/".join(parts[:i]) for i in range(1, len(parts))]


@settings(max_examples=400, deadline=None)
@given(any_specs, any_specs, any_specs, st.booleans())
def test_a_revert_touches_only_what_the_span_changed(
    a_spec: Spec, b_spec: Spec, n_spec: Spec, markers: bool
) -> None:
    """Random A, B and later changes: a path the span did not change is as it is now; one it
    changed is A's, or as it is now where a conflict, a later file or a merge says so."""
    w = World()
    a = w.tree(a_spec)
    b = w.tree(b_spec, a)
    now = w.tree(n_spec, b)
    got, after = w.revert(now, (a, b), markers=markers)
    fa, fn = w.flat(a), w.flat(now)
    changed = {d.path for d in treediff.diff(w.m.load, a, b)}
    clashed = [c.path for c in got.clashes]
    for p in fn.keys() | after.keys():
        if p not in changed:
            assert after.get(p) == fn.get(p), p
    for p in changed:
        if p in got.merged or p in got.markers:
            assert after[p][0] == "file"
        elif after.get(p) != fa.get(p):
            assert after.get(p) == fn.get(p), p
            assert p in got.keeps or any(at_or_below(p, c) or strictly_below(c, p) for c in clashed), p


leaves = st.sampled_from([b"x", b"d/y", b"d/z", b"e/f/g", b"e/h"])  # no path holds another
contents = st.sampled_from([b"1\n2\n3\n", b"1\nB\n3\n", b"A\n2\n3\n", b"1\n2\nC\n", b"\0bin", b"\0bin2"])
file_specs = st.dictionaries(leaves, st.one_of(contents, st.none()), max_size=5)


@settings(max_examples=400, deadline=None)
@given(file_specs, file_specs, file_specs)
def test_files_come_out_as_a_simple_model_says(a_spec: Spec, b_spec: Spec, n_spec: Spec) -> None:
    """A model of files alone, path by path, the table's rows as a plain rule: the files a
    revert leaves, and where it conflicts, are the model's."""
    w = World()
    a = w.tree(a_spec)
    b = w.tree(b_spec, a)
    now = w.tree(n_spec, b)
    fa, fb, fn = (_files(w, t) for t in (a, b, now))
    expected, clashes = dict(fn), set()
    for p in fa.keys() | fb.keys():
        base, theirs, ours = fb.get(p), fa.get(p), fn.get(p)
        if base == theirs or ours == theirs:
            continue
        if ours == base:
            expected.pop(p, None) if theirs is None else expected.__setitem__(p, theirs)
        elif base and theirs and ours and not any(b"\0" in x for x in (base, theirs, ours)):
            merged = _merge_three_lines(base, ours, theirs)
            if merged is None:
                clashes.add(p)
            else:
                expected[p] = merged
        else:
            clashes.add(p)
    got, after = w.revert(now, (a, b))
    assert {c.path for c in got.clashes} == clashes
    if not clashes:
        assert {p: v[2] for p, v in after.items() if v[0] == "file"} == expected


def _files(w: World, root: str) -> dict[bytes, bytes]:
    return {p: v[2] for p, v in w.flat(root).items() if v[0] == "file" and v[2] is not None}


def _merge_three_lines(base: bytes, ours: bytes, theirs: bytes) -> bytes | None:
    """Three-line files differing line by line (the contents above): each line from the side
    that changed it; changed on both sides to different lines, or on adjacent lines, clashes
    (merge3 counts adjacent edits as one overlapping place)."""
    b, o, t = base.splitlines(True), ours.splitlines(True), theirs.splitlines(True)
    changed_o = [i for i in range(3) if o[i] != b[i]]
    changed_t = [i for i in range(3) if t[i] != b[i]]
    if any(abs(i - j) <= 1 for i in changed_o for j in changed_t if o[i] != t[j] or i != j):
        return None
    return b"".join(o[i] if i in changed_o else t[i] for i in range(3))
