"""Tree diff tests: statuses, and a diff that looks only where changes were made finding all a whole
diff finds."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tree_helpers import Mem, f

from snapd.store import treediff, trees
from snapd.store.trees import Dir, Entry

pytestmark = pytest.mark.timeout(60)


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
    got = {(d.path, d.status) for d in treediff.diff(m.load, a, b)}
    assert got == {
        (b"mod", "modified"),
        (b"chmod", "mode"),
        (b"gone", "removed"),
        (b"gone/x", "removed"),
        (b"new", "added"),
        (b"new/y", "added"),
        (b"swap", "type"),
    }


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
    whole = list(treediff.diff(m.load, old, new))
    assert list(treediff.diff(m.load, old, new, where=treediff.only(then))) == whole
    assert list(treediff.diff(m.load, new, old, where=treediff.only(then))) == list(
        treediff.diff(m.load, new, old)
    )


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
    where = treediff.only([b"d/007", b"d/new"])
    got = list(treediff.diff(lambda k: Watched(m.load(k)), old, new, where=where))
    assert [(d.path, d.status) for d in got] == [(b"d/007", "modified"), (b"d/new", "added")]
    assert looked == {b"d", b"007", b"new"}


def test_only_stops_at_a_path_listed_whole() -> None:
    assert treediff.only([b"a/b/c", b"a/b", b"a/d", b"e"]) == {b"a": {b"b": None, b"d": None}, b"e": None}
    assert treediff.only([b"a", b"a/b"]) == treediff.only([b"a", b"a/b/c"]) == {b"a": None}
