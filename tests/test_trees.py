"""Pure tree tests: building, editing, looking up and walking trees, over an in-memory node map."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tree_helpers import Mem, f, names

from snapd.store import nodes, treediff, trees
from snapd.store.trees import Dir, Entry

pytestmark = pytest.mark.timeout(60)


def flat(m: Mem, root: str) -> dict[bytes, Entry]:
    return dict(trees.walk(m.load, root))


def test_build_walk_lookup_and_non_utf8_names() -> None:
    m = Mem()
    odd = b"caf\xe9\xff.txt"
    root = trees.apply_changes(m.load, m.save, None, {b"a/b/c": f("c"), odd: f("x"), b"d": Dir(0o700)})
    got = flat(m, root)
    assert set(got) == {b"a", b"a/b", b"a/b/c", odd, b"d"}
    assert got[b"d"].mode == 0o700 and got[b"a"].mode == trees.DEFAULT_DIR_MODE
    assert trees.lookup(m.load, root, odd) == f("x")
    assert trees.lookup(m.load, root, b"a/b/c/zz") is None


def test_edit_touches_only_changed_path_nodes() -> None:
    m = Mem()
    changes = {
        f"d{i}/e{j}/f{k}".encode(): f(f"{i}{j}{k}") for i in range(10) for j in range(10) for k in range(10)
    }
    root = trees.apply_changes(m.load, m.save, None, changes)
    m.saves = 0
    root2 = trees.apply_changes(m.load, m.save, root, {b"d3/e4/f5": f("new")})
    assert m.saves == 3  # d3/e4, d3, root
    diffs = list(treediff.diff(m.load, root, root2))
    assert [(d.path, d.status) for d in diffs] == [(b"d3/e4/f5", "modified")]


def test_remove_then_recreate_below() -> None:
    m = Mem()
    a = trees.apply_changes(m.load, m.save, None, {b"d/old": f("o")})
    b = trees.apply_changes(m.load, m.save, a, {b"d": None, b"d/new": f("n")})
    assert set(flat(m, b)) == {b"d", b"d/new"}


paths = st.lists(names, min_size=1, max_size=3).map(b"/".join)


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(paths, st.one_of(st.none(), st.text(max_size=3))), max_size=25))
def test_apply_matches_model(ops: list[tuple[bytes, str | None]]) -> None:
    """Applying changes one at a time or all at once gives the model's file set."""
    m = Mem()
    model: dict[bytes, Entry] = {}
    root: str | None = None
    for path, content in ops:
        change = None if content is None else f(content)
        root = trees.apply_changes(m.load, m.save, root, {path: change})
        # model: removing a path removes its subtree; adding one replaces any file ancestors
        if change is None:
            model = {p: e for p, e in model.items() if p != path and not p.startswith(path + b"/")}
        else:
            parts = path.split(b"/")
            for i in range(1, len(parts)):
                model.pop(b"/".join(parts[:i]), None)
            model = {p: e for p, e in model.items() if not p.startswith(path + b"/")}
            model[path] = change
    files = {p: e for p, e in flat(m, root).items() if e.kind == "file"} if root else {}
    assert files == model
    if root is not None:
        empty = trees.apply_changes(m.load, m.save, None, {})
        added = {d.path for d in treediff.diff(m.load, empty, root) if d.status == "added"}
        assert set(flat(m, root)) == added


@settings(max_examples=150, deadline=None)
@given(
    st.dictionaries(paths, st.one_of(st.none(), st.text(max_size=3), st.integers(0o700, 0o777)), max_size=30)
)
def test_bottom_up_build_equals_general_edit(spec: dict[bytes, str | int | None]) -> None:
    """The baseline fast path builds exactly the tree the general algorithm builds."""
    changes: dict[bytes, trees.Change] = {
        p: None if v is None else (Dir(v) if isinstance(v, int) else f(v)) for p, v in spec.items()
    }
    m = Mem()
    fast = trees.apply_changes(m.load, m.save, None, changes)
    general = trees._apply(m.load, m.save, None, trees._nest(changes))
    assert fast == general


# A directory tree as nested dicts: a name maps to a file's content (str), or to a directory
# (dict) with its mode under the key None.
trees_st = st.recursive(
    st.text(max_size=3),
    lambda sub: st.builds(
        lambda kids, mode: {**kids, None: mode},
        st.dictionaries(names, sub, max_size=4),
        st.integers(0o700, 0o777),
    ),
    max_leaves=30,
).filter(lambda t: isinstance(t, dict))


def walk_order(tree: dict) -> dict[bytes, trees.Change]:
    """The changes as snapd.capture.reader.walk gives them: a directory's entries when it is
    popped off a stack, its subdirectories pushed, so each directory's whole subtree comes
    together, after the directory itself."""
    changes: dict[bytes, trees.Change] = {}
    stack: list[tuple[bytes, dict]] = [(b"", tree)]
    while stack:
        here, node = stack.pop()
        for name, sub in node.items():
            if name is None:
                continue
            path = here + b"/" + name if here else name
            if isinstance(sub, dict):
                changes[path] = Dir(sub[None], listed=len(path) % 3 != 0)
                stack.append((path, sub))
            else:
                changes[path] = f(sub)
    return changes


@settings(max_examples=150, deadline=None)
@given(trees_st)
def test_a_walks_changes_are_built_as_they_come_and_equal_the_general_edit(tree: dict) -> None:
    """In a walk's order the baseline fast path never falls back, and builds exactly the
    general algorithm's tree, empty and unlisted directories included."""
    changes = walk_order(tree)
    m = Mem()
    built = trees._build(m.save, changes)
    assert built is not None
    assert built == trees._apply(m.load, m.save, None, trees._nest(changes))


class Counted(dict):
    """Changes that count how many of them have been read."""

    read = 0

    def items(self):  # type: ignore[override]
        for item in super().items():
            self.read += 1
            yield item


def test_the_baseline_saves_each_directory_once_the_changes_leave_it() -> None:
    """Only the directories from the root down to the current path are held: a directory the
    walk has left is saved before the next one's changes are read (the whole tree at once was a
    500k-file baseline's largest transient)."""
    tree = {f"d{i}".encode(): {b"f": "x" * i, b"g": str(i), None: 0o755} for i in range(5)}
    changes = Counted(walk_order({**tree, None: 0o755}))
    m = Mem()
    read_at_save: list[int] = []

    def save(node: trees.Node, *rest: object) -> str:
        read_at_save.append(changes.read)
        return m.save(node)

    root = trees._build(save, changes)
    assert root is not None and len(read_at_save) == 6
    # d4 is walked first (a stack): saved once d3's first change is read, and so on
    assert read_at_save[:4] == [5 + 2 + 1, 5 + 4 + 1, 5 + 6 + 1, 5 + 8 + 1]
    assert set(flat(m, root)) == set(changes)


def test_changes_out_of_a_walks_order_take_the_general_algorithm() -> None:
    """A directory needed again after it was saved, or given after a path below it: None (the
    caller applies the changes the general way), never a tree missing what came late."""
    m = Mem()
    for changes in (
        {b"a/x": f("x"), b"b/y": f("y"), b"a/z": f("z")},  # a saved, then needed again
        {b"a/x": f("x"), b"a": Dir(0o700)},  # a's mode given after a path below it
        {b"a/x": f("x"), b"a": f("a")},  # a file and a parent
    ):
        assert trees._build(m.save, changes) is None
        root = trees.apply_changes(m.load, m.save, None, changes)
        assert root == trees._apply(m.load, m.save, None, trees._nest(changes))


def test_the_baseline_refuses_a_bad_path_as_split_path_does() -> None:
    m = Mem()
    for bad in (b"a//b", b"/a", b"a/./b", b"../a", b"a/", b"a/b/.."):
        with pytest.raises(ValueError, match="^invalid relative path"):
            trees._build(m.save, {b"ok": f("k"), bad: f("x")})


# The tests below were written to kill mutants mutmut found surviving here (docs/reliability.md).


def test_uncaptured_entry_names_its_stamp_and_reason() -> None:
    e = trees.uncaptured("a FIFO", 0o600, 0, (12, 345))
    assert e == Entry("uncaptured", 0o600, 0, "!12.345!a FIFO")
    assert trees.uncaptured("a FIFO", 0o600, 0, None).key == "!?!a FIFO"
    # an unchanged path gives an equal entry; another inode or mtime does not
    assert trees.uncaptured("a FIFO", 0o600, 0, (12, 345)) == e
    assert trees.uncaptured("a FIFO", 0o600, 0, (13, 345)) != e
    assert trees.uncaptured("a FIFO", 0o600, 0, (12, 346)) != e
    assert trees.is_uncaptured(e) and not trees.holds_object(e)
    assert not trees.is_uncaptured(f("x")) and not trees.is_uncaptured(None) and trees.holds_object(f("x"))
    assert trees.uncaptured_reason(e) == "a FIFO"


def test_uncaptured_key_is_ascii_and_fits_a_node() -> None:
    """A node stores a key's length in one byte: a long or non-ASCII reason must still encode."""
    odd = trees.uncaptured("caf\u00e9 \u2014 unreadable", 0o644, 3, None)
    assert odd.key == "!?!caf? ? unreadable"
    long = trees.uncaptured("x" * 400, 0o644, 3, (1, 2))
    assert len(long.key) == 255
    node = {b"odd": odd, b"long": long}
    assert nodes.decode_node(nodes.encode_node(node)) == node


def test_uncaptured_reason_keeps_exclamation_marks_and_has_a_default() -> None:
    assert trees.uncaptured_reason(trees.uncaptured("odd! name!", 0o644, 0, (1, 2))) == "odd! name!"
    assert trees.uncaptured_reason(Entry("uncaptured", 0o644, 0, "!1.2")) == "not captured"


def test_unlisted_is_a_directory_flag_only() -> None:
    assert trees.unlisted(Entry("dir", 0o755, trees.UNLISTED, "k"))
    assert not trees.unlisted(Entry("dir", 0o755, 0, "k"))
    assert not trees.unlisted(Entry("file", 0o644, trees.UNLISTED, "k"))
    assert not trees.unlisted(None)


def test_dir_change_keeps_a_directorys_contents_and_replaces_anything_else() -> None:
    """``Dir`` sets a directory's mode (and listed flag) and keeps what it holds; a file or a
    symlink in its place becomes an empty directory."""
    m = Mem()
    root = trees.apply_changes(m.load, m.save, None, {b"d/x": f("x"), b"d/s/y": f("y"), b"file": f("f")})
    root2 = trees.apply_changes(m.load, m.save, root, {b"d": Dir(0o700), b"file": Dir(0o750)})
    got = flat(m, root2)
    assert set(got) == {b"d", b"d/x", b"d/s", b"d/s/y", b"file"}
    assert got[b"d"].mode == 0o700 and got[b"d"].size == 0
    assert got[b"file"] == Entry("dir", 0o750, 0, m.save({}))
    root3 = trees.apply_changes(m.load, m.save, root2, {b"d": Dir(0o700, listed=False)})
    d = trees.lookup(m.load, root3, b"d")
    assert trees.unlisted(d) and d is not None and d.key == got[b"d"].key


def test_baseline_is_built_bottom_up_with_deep_paths_and_unlisted_directories() -> None:
    """The baseline fast path (``_build``) serves every walk of a real tree — no fallback to the
    general edit — and keeps deep implicit parents and the unlisted flag."""
    changes: dict[bytes, trees.Change] = {
        b"a/b/c/d/e": f("e"),
        b"a/x": f("x"),
        b"locked": Dir(0o700, listed=False),
        b"locked/seen": f("s"),
        b"open": Dir(0o750),
    }
    m = Mem()
    built = trees._build(m.save, changes)
    assert built is not None and built == trees._apply(m.load, m.save, None, trees._nest(changes))
    got = flat(m, built)
    assert set(got) == {b"a", b"a/b", b"a/b/c", b"a/b/c/d", b"a/b/c/d/e", b"a/x", b"open"} | {
        b"locked",
        b"locked/seen",
    }
    assert trees.unlisted(got[b"locked"]) and got[b"locked"].mode == 0o700
    assert not trees.unlisted(got[b"open"]) and got[b"open"].mode == 0o750
    assert trees._build(m.save, {b"a": f("a"), b"a/b": f("b")}) is None  # a file and a parent: general path


def test_reasserting_what_a_tree_holds_writes_no_node() -> None:
    """A scan re-asserts every directory and unchanged file: that must cost no node write."""
    m = Mem()
    changes: dict[bytes, trees.Change] = {b"d": Dir(0o750), b"d/e/f": f("f"), b"g": f("g")}
    root = trees.apply_changes(m.load, m.save, None, changes)
    m.saves = 0
    again = {**changes, b"d/e": Dir(trees.DEFAULT_DIR_MODE)}
    assert trees.apply_changes(m.load, m.save, root, again) == root
    assert m.saves == 0


def test_split_path_names_the_bad_path() -> None:
    for bad in (b"", b"a//b", b"/a", b"a/./b", b"../a", b"a/"):
        with pytest.raises(ValueError, match="^invalid relative path"):
            trees.split_path(bad)
