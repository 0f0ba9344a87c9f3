"""Nodes held packed (nodes.PackedNode): the store's node cache holds each node as its records,
decoding an entry only when it is asked for, and behaves as the dict it stands for: lookups,
iteration, equality, and the diff of two packed nodes."""

from __future__ import annotations

import tracemalloc
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tree_helpers import f, names

from snapd.store import nodes, treediff, trees
from snapd.store.store import Store
from snapd.store.trees import Entry

pytestmark = pytest.mark.timeout(120)

entries = st.one_of(
    st.builds(f, st.text(max_size=3), st.integers(0, 0o7777)),
    st.builds(lambda r: trees.uncaptured(r, 0o644, 5, None), st.text(max_size=5)),
)
node_dicts = st.dictionaries(names, entries, max_size=12)


def packed(node: dict[bytes, Entry]) -> nodes.PackedNode:
    got = nodes.decode_node(nodes.encode_node(node))
    assert isinstance(got, nodes.PackedNode)
    return got


@settings(max_examples=300, deadline=None)
@given(node_dicts, names)
def test_a_packed_node_answers_as_the_dict_it_encodes(node: dict[bytes, Entry], probe: bytes) -> None:
    p = packed(node)
    assert p == node and node == p and dict(p) == node
    assert list(p) == sorted(node) and list(p.items()) == sorted(node.items()) and len(p) == len(node)
    assert list(p.values()) == [node[n] for n in sorted(node)]
    assert p.get("not bytes") is None and "not bytes" not in p and 7 not in p  # as a dict answers
    for name in [*node, probe]:
        assert (name in p) == (name in node)
        assert p.get(name) == node.get(name)
        if name in node:
            assert p[name] == node[name]
        else:
            with pytest.raises(KeyError):
                p[name]


@settings(max_examples=300, deadline=None)
@given(node_dicts, st.dictionaries(names, st.one_of(st.none(), entries), max_size=6))
def test_an_edit_of_a_packed_node_reads_as_the_edited_dict(
    before: dict[bytes, Entry], edits: dict[bytes, Entry | None]
) -> None:
    """What a mark saves is an overlay of its edits over the packed node it edits
    (trees._Edited): it must read, iterate, count and encode as the dict edited in place."""
    after = {**before, **{n: e for n, e in edits.items() if e is not None}}
    for n, e in edits.items():
        if e is None:
            after.pop(n, None)
    edited = trees._Edited(packed(before), edits)
    assert len(edited) == len(after) and list(edited) == sorted(after) and dict(edited) == after
    assert nodes.encode_node(edited) == nodes.encode_node(after)


@settings(max_examples=300, deadline=None)
@given(node_dicts, node_dicts)
def test_two_packed_nodes_differ_exactly_at_the_names_a_dict_compare_finds(
    a: dict[bytes, Entry], b: dict[bytes, Entry]
) -> None:
    """A diff of two packed nodes compares their records, not their entries: the names it
    finds must be exactly those whose entries differ (or that one side lacks), in byte order;
    and a whole diff over packed nodes finds what one over dicts finds."""
    want = sorted(n for n in a.keys() | b.keys() if a.get(n) != b.get(n))
    assert packed(a).changed_names(packed(b)) == want
    keys = {"a": a, "b": b}

    def as_dicts(k: str) -> trees.Node:
        return keys[k]

    def as_packed(k: str) -> trees.Node:
        return packed(keys[k])

    assert list(treediff.diff(as_packed, "a", "b")) == list(treediff.diff(as_dicts, "a", "b"))
    where = treediff.only(sorted(a.keys() | b.keys()))
    assert list(treediff.diff(as_packed, "a", "b", where=where)) == list(treediff.diff(as_dicts, "a", "b"))


def test_a_wide_node_is_cached_at_about_the_size_of_its_encoding(tmp_path: Path) -> None:
    """The node cache holds a node read from the store as its records, not also as a dict of
    decoded entries (which took about twice the memory again: 66 MB of a 206 MB daemon after
    214 marks at npm-100k). Measured with tracemalloc: what the cache keeps of a 20,000-name
    node, against its encoded length."""
    entry = [f(str(i)) for i in range(64)]
    node = {b"name-%06d.js" % i: entry[i % 64] for i in range(20_000)}
    with Store.open(tmp_path / "s") as s:
        with s.batch() as b:
            key = b.save_node(node)
            b.commit()
        s.forget_caches()
        tracemalloc.start()
        try:
            before = tracemalloc.get_traced_memory()[0]
            loaded = s.load_node(key)
            kept = tracemalloc.get_traced_memory()[0] - before
        finally:
            tracemalloc.stop()
        assert loaded == node and s.cached_node(key) is not None
        flat = len(nodes.encode_node(node))  # its records' bytes (stored in parts: store format 10)
        assert kept <= 4 * flat, f"the cache keeps {kept:,} bytes for a node of {flat:,}"


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(names, entries, entries), max_size=12))
def test_two_packed_nodes_of_the_same_names_differ_where_their_entries_do(
    rows: list[tuple[bytes, Entry, Entry]],
) -> None:
    """The usual case of a rollback's plan and a mark's summary: the same names on both
    sides (compared record by record in one pass, not merged name by name)."""
    a = {n: x for n, x, _ in rows}
    b = {n: y for n, _, y in rows}
    assert packed(a).changed_names(packed(b)) == sorted(n for n in a if a[n] != b[n])
