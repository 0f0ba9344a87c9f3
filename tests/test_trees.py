"""Pure tree tests: an in-memory node map stands in for the store."""

from __future__ import annotations

from collections.abc import Iterable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from snapd.errors import CorruptObject
from snapd.store import objects, trees
from snapd.store.objects import xxh3_hex
from snapd.store.trees import Dir, Entry

pytestmark = pytest.mark.timeout(60)


class Mem:
    def __init__(self) -> None:
        self.nodes: dict[str, bytes] = {}
        self.saves = 0

    def save(self, node: trees.Node, base: str | None = None, changed: Iterable[bytes] | None = None) -> str:
        data = trees.encode_node(node)
        if base is not None and changed is not None:  # a store splices this edit: the same bytes
            was = trees.decode_records(self.nodes[base])[1]
            assert was is not None and trees.joined(trees.splice(was, node, changed)) == data
        key = f"{xxh3_hex(data)}-{len(data)}"
        self.nodes[key] = data
        self.saves += 1
        return key

    def load(self, key: str) -> trees.Node:
        return trees.decode_node(self.nodes[key])


def f(content: str, mode: int = 0o644) -> Entry:
    data = content.encode()
    return Entry("file", mode, len(data), f"{xxh3_hex(data)}-{len(data)}")


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
    diffs = list(trees.diff(m.load, root, root2))
    assert [(d.path, d.status) for d in diffs] == [(b"d3/e4/f5", "modified")]


def test_diff_statuses() -> None:
    m = Mem()
    a = trees.apply_changes(
        m.load,
        m.save,
        None,
        {
            b"keep": f("k"),
            b"mod": f("1"),
            b"chmod": f("c"),
            b"gone/x": f("x"),
            b"swap": f("s"),
        },
    )
    b = trees.apply_changes(
        m.load,
        m.save,
        a,
        {
            b"mod": f("2"),
            b"chmod": f("c", 0o755),
            b"gone": None,
            b"new/y": f("y"),
            b"swap": Entry("symlink", 0o777, 4, f("targ").key),
        },
    )
    got = {(d.path, d.status) for d in trees.diff(m.load, a, b)}
    assert got == {
        (b"mod", "modified"),
        (b"chmod", "mode"),
        (b"gone", "removed"),
        (b"gone/x", "removed"),
        (b"new", "added"),
        (b"new/y", "added"),
        (b"swap", "type"),
    }


def test_remove_then_recreate_below() -> None:
    m = Mem()
    a = trees.apply_changes(m.load, m.save, None, {b"d/old": f("o")})
    b = trees.apply_changes(m.load, m.save, a, {b"d": None, b"d/new": f("n")})
    assert set(flat(m, b)) == {b"d", b"d/new"}


def test_decode_rejects_garbage() -> None:
    from snapd.errors import CorruptObject

    with pytest.raises(CorruptObject):
        trees.decode_node(b"nope")
    good = trees.encode_node({b"a": f("a")})
    with pytest.raises(CorruptObject):
        trees.decode_node(good[:-3])


names = st.binary(min_size=1, max_size=6).filter(lambda b: b"/" not in b and b not in (b".", b".."))
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
        added = {d.path for d in trees.diff(m.load, empty, root) if d.status == "added"}
        assert set(flat(m, root)) == added


entries = st.one_of(
    st.builds(f, st.text(max_size=3), st.integers(0, 0o7777)),
    st.builds(lambda n: Entry("dir", 0o755, n, f"{xxh3_hex(b'%d' % n)}-{n}"), st.integers(0, 1)),
    st.builds(lambda r: trees.uncaptured(r, 0o644, 5, None), st.text(max_size=5)),
)


@settings(max_examples=300, deadline=None)
@given(
    st.dictionaries(names, entries, max_size=12),
    st.dictionaries(names, st.one_of(st.none(), entries), max_size=6),
)
def test_a_spliced_encoding_is_the_encoding(
    before: dict[bytes, Entry], edits: dict[bytes, Entry | None]
) -> None:
    """A node edited at a few names, spliced from its previous records (a mark's nodes), is
    byte for byte the node encoded whole: its key, and so every deduplication, is unchanged.
    Names edited to what they were, and removals of absent names, included."""
    after = {**before, **{n: e for n, e in edits.items() if e is not None}}
    for n, e in edits.items():
        if e is None:
            after.pop(n, None)
    node, records = trees.decode_records(trees.encode_node(before))
    assert node == before and records == trees.encode_records(before)
    changed = [*edits, *list(before)[:1]]  # an unchanged name may be listed too
    assert trees.splice(records, after, changed) == trees.encode_records(after)


def test_a_node_not_written_in_order_or_in_the_old_format_is_never_spliced() -> None:
    """Splicing copies the records between edits: from an encoding :func:`encode_node` would
    not write so, it would give bytes no whole encoding gives (another key for one node)."""
    node = {b"a": f("1"), b"b": f("2")}
    names, records = trees.encode_records(node)
    backwards = trees.MAGIC + b"".join(reversed(records))
    assert trees.decode_records(backwards) == (node, None)
    old = trees.MAGIC_TEXT_KEYS + b"".join(
        trees._HEAD.pack(1, e.mode, e.size, len(n), len(e.key)) + n + e.key.encode() for n, e in node.items()
    )
    assert trees.decode_records(old) == (node, None)
    assert trees.decode_records(trees.joined((names, records))) == (node, (names, records))


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


few = st.lists(st.sampled_from([b"a", b"b", b"c"]), min_size=1, max_size=3).map(b"/".join)
edits = st.dictionaries(
    few, st.one_of(st.none(), st.sampled_from(["1", "2"]), st.sampled_from([0o700, 0o755])), max_size=8
)


@settings(max_examples=300, deadline=None)
@given(edits, edits)
def test_a_diff_looking_only_where_changes_were_made_sees_every_difference(
    first: dict[bytes, str | int | None], then: dict[bytes, str | int | None]
) -> None:
    """A mark's summary diffs only the paths captured since the last mark: it must find all a
    whole diff finds, in the same order (removed and added subtrees, type and mode changes,
    directories made or dropped above a changed path)."""

    def changes(spec: dict[bytes, str | int | None]) -> dict[bytes, trees.Change]:
        return {p: None if v is None else (Dir(v) if isinstance(v, int) else f(v)) for p, v in spec.items()}

    m = Mem()
    old = trees.apply_changes(m.load, m.save, None, changes(first))
    new = trees.apply_changes(m.load, m.save, old, changes(then))
    whole = list(trees.diff(m.load, old, new))
    assert list(trees.diff(m.load, old, new, where=trees.only(then))) == whole
    assert list(trees.diff(m.load, new, old, where=trees.only(then))) == list(trees.diff(m.load, new, old))


def test_a_diff_looking_only_somewhere_reads_no_other_name() -> None:
    """The point of ``where``: a mark's cost does not grow with the width of the directories
    its changes are in."""
    looked: set[bytes] = set()

    class Watched(dict[bytes, Entry]):
        def get(self, name: bytes, default: object = None) -> Entry | None:  # type: ignore[override]
            looked.add(name)
            return super().get(name)

    m = Mem()
    wide = {b"d/%03d" % i: f(str(i)) for i in range(100)}
    old = trees.apply_changes(m.load, m.save, None, wide)
    new = trees.apply_changes(m.load, m.save, old, {b"d/007": f("edited"), b"d/new": f("new")})
    got = list(trees.diff(lambda k: Watched(m.load(k)), old, new, where=trees.only([b"d/007", b"d/new"])))
    assert [(d.path, d.status) for d in got] == [(b"d/007", "modified"), (b"d/new", "added")]
    assert looked == {b"d", b"007", b"new"}


def test_only_stops_at_a_path_listed_whole() -> None:
    assert trees.only([b"a/b/c", b"a/b", b"a/d", b"e"]) == {b"a": {b"b": None, b"d": None}, b"e": None}
    assert trees.only([b"a", b"a/b"]) == trees.only([b"a", b"a/b/c"]) == {b"a": None}


# The tests below were written to kill mutants mutmut found surviving here (docs/reliability.md).


class Reads:
    """:data:`trees.Read` over a :class:`Mem`, counting the nodes read."""

    def __init__(self, m: Mem) -> None:
        self.m, self.count = m, 0

    def __call__(self, keys: list[str]) -> list[tuple[str, bytes]]:
        self.count += len(keys)
        return [(k, self.m.nodes[k]) for k in keys]


def test_reachable_holds_every_node_and_content_below_the_root() -> None:
    """GC keeps exactly what ``reachable`` returns: a key it misses is a live object deleted."""
    m = Mem()
    link = Entry("symlink", 0o777, 3, f("t").key)
    gone = trees.uncaptured("over the size cap", 0o644, 1 << 40, (7, 9))
    root = trees.apply_changes(
        m.load, m.save, None, {b"top": f("top"), b"a/b/deep": f("deep"), b"a/ln": link, b"a/big": gone}
    )
    seen: set[bytes | str] = set()
    trees.reachable(Reads(m), [root], seen)
    nodes = {root} | {e.key for _, e in trees.walk(m.load, root) if e.kind == "dir"}
    expected = nodes | {f("top").key, f("deep").key, link.key}  # an uncaptured key is no object
    assert seen == {objects.db_key(k) for k in expected}  # as the catalog stores them
    assert len(nodes) == 3


def test_reachable_reads_each_shared_node_once_and_walks_one_a_file_duplicates() -> None:
    m = Mem()
    one = trees.apply_changes(m.load, m.save, None, {b"a/b/x": f("x"), b"c/y": f("y")})
    two = trees.apply_changes(m.load, m.save, one, {b"c/y": f("y2")})  # shares a and a/b
    reads = Reads(m)
    seen: set[bytes | str] = set()
    trees.reachable(reads, [one, two], seen)
    dirs = {e.key for r in (one, two) for _, e in trees.walk(m.load, r) if e.kind == "dir"}
    nodes = {one, two} | dirs
    assert reads.count == len(nodes) == 6  # two roots, a, a/b, and c twice
    assert {objects.db_key(k) for k in nodes} <= seen
    # a file whose bytes are exactly a node's (its key is that node's key): the node's children
    # are still live, however the walk met the key first
    b_node = trees.lookup(m.load, one, b"a/b")
    assert b_node is not None
    seen = {objects.db_key(b_node.key)}
    trees.reachable(Reads(m), [one], seen)
    assert objects.db_key(f("x").key) in seen


def test_reachable_reads_nodes_of_the_old_format_and_refuses_damaged_ones() -> None:
    m = Mem()
    node = {b"a": f("1"), b"gone": trees.uncaptured("a FIFO", 0o600, 0, None)}
    old = trees.MAGIC_TEXT_KEYS + b"".join(
        trees._HEAD.pack(trees.KIND_CODES[e.kind], e.mode, e.size, len(n), len(e.key)) + n + e.key.encode()
        for n, e in node.items()
    )
    m.nodes["old"] = old
    seen: set[bytes | str] = set()
    trees.reachable(Reads(m), ["old"], seen)
    assert seen == {"old", objects.db_key(f("1").key)}
    whole = trees.encode_node({b"a": f("1"), b"d": Entry("dir", 0o755, 0, f("2").key)})
    assert trees.node_keys(whole) == ([objects.db_key(f("1").key)], [objects.db_key(f("2").key)])
    for damaged in (whole[:-1], whole + b"\x01", b"snapd-tree-9\n", trees.MAGIC + b"\x09" + whole[14:]):
        with pytest.raises(CorruptObject):
            trees.node_keys(damaged)


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
    assert trees.decode_node(trees.encode_node(node)) == node


def test_uncaptured_reason_keeps_exclamation_marks_and_has_a_default() -> None:
    assert trees.uncaptured_reason(trees.uncaptured("odd! name!", 0o644, 0, (1, 2))) == "odd! name!"
    assert trees.uncaptured_reason(Entry("uncaptured", 0o644, 0, "!1.2")) == "not captured"


def test_unlisted_is_a_directory_flag_only() -> None:
    assert trees.unlisted(Entry("dir", 0o755, trees.UNLISTED, "k"))
    assert not trees.unlisted(Entry("dir", 0o755, 0, "k"))
    assert not trees.unlisted(Entry("file", 0o644, trees.UNLISTED, "k"))
    assert not trees.unlisted(None)


@pytest.mark.parametrize("name", [b"a/b", b".", b"..", b""])
def test_decode_refuses_names_that_are_not_one_component(name: bytes) -> None:
    """A node naming ``..`` or ``a/b`` would let a rollback write outside its directory."""
    from snapd.errors import CorruptObject

    data = trees.encode_node({name: f("x")})
    with pytest.raises(CorruptObject, match="^tree node holds an invalid entry$"):
        trees.decode_node(data)


def test_decode_says_which_way_a_node_is_damaged() -> None:
    from snapd.errors import CorruptObject

    with pytest.raises(CorruptObject, match="^tree node has an unknown format$"):
        trees.decode_node(b"snapd-tree-0\n")
    with pytest.raises(CorruptObject, match="^tree node is truncated or malformed$"):
        trees.decode_node(trees.encode_node({b"a": f("a")})[:-10])  # into the key (17 bytes)
    not_ascii = trees.encode_node({b"a": Entry("file", 0o644, 1, "kxy")}).replace(b"kxy", b"k\xe9y")
    with pytest.raises(CorruptObject, match="^tree node is truncated or malformed$"):
        trees.decode_node(not_ascii)


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
