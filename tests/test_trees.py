"""Pure tree tests: an in-memory node map stands in for the store."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from snapd.store import trees
from snapd.store.objects import xxh3_hex
from snapd.store.trees import Dir, Entry

pytestmark = pytest.mark.timeout(60)


class Mem:
    def __init__(self) -> None:
        self.nodes: dict[str, bytes] = {}
        self.saves = 0

    def save(self, node: trees.Node) -> str:
        data = trees.encode_node(node)
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
