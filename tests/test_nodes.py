"""Node encoding tests: the one encoding a node's key is the hash of (spliced or whole), the old
format still read, damage refused, and GC's walk over encoded nodes."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tree_helpers import Mem, f, names

from snapd.errors import CorruptObject
from snapd.store import nodes, objects, trees
from snapd.store.objects import xxh3_hex
from snapd.store.trees import Entry

pytestmark = pytest.mark.timeout(60)


def test_decode_rejects_garbage() -> None:
    from snapd.errors import CorruptObject

    with pytest.raises(CorruptObject):
        nodes.decode_node(b"nope")
    good = nodes.encode_node({b"a": f("a")})
    with pytest.raises(CorruptObject):
        nodes.decode_node(good[:-3])


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
    node, records = nodes.decode_records(nodes.encode_node(before))
    assert node == before and records == nodes.encode_records(before)
    changed = [*edits, *list(before)[:1]]  # an unchanged name may be listed too
    assert nodes.splice(records, after, changed) == nodes.encode_records(after)


def test_a_node_not_written_in_order_or_in_the_old_format_is_never_spliced() -> None:
    """Splicing copies the records between edits: from an encoding :func:`encode_node` would
    not write so, it would give bytes no whole encoding gives (another key for one node)."""
    node = {b"a": f("1"), b"b": f("2")}
    names, records = nodes.encode_records(node)
    backwards = nodes.MAGIC + b"".join(reversed(records))
    assert nodes.decode_records(backwards) == (node, None)
    old = nodes.MAGIC_TEXT_KEYS + b"".join(
        nodes.HEAD.pack(1, e.mode, e.size, len(n), len(e.key)) + n + e.key.encode() for n, e in node.items()
    )
    assert nodes.decode_records(old) == (node, None)
    assert nodes.decode_records(nodes.joined((names, records))) == (node, (names, records))


# The tests below were written to kill mutants mutmut found surviving here (docs/reliability.md).


class Reads:
    """:data:`nodes.Read` over a :class:`Mem`, counting the nodes read."""

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
    nodes.reachable(Reads(m), [root], seen)
    tree_nodes = {root} | {e.key for _, e in trees.walk(m.load, root) if e.kind == "dir"}
    expected = tree_nodes | {f("top").key, f("deep").key, link.key}  # an uncaptured key is no object
    assert seen == {objects.db_key(k) for k in expected}  # as the catalog stores them
    assert len(tree_nodes) == 3


def test_reachable_reads_each_shared_node_once_and_walks_one_a_file_duplicates() -> None:
    m = Mem()
    one = trees.apply_changes(m.load, m.save, None, {b"a/b/x": f("x"), b"c/y": f("y")})
    two = trees.apply_changes(m.load, m.save, one, {b"c/y": f("y2")})  # shares a and a/b
    reads = Reads(m)
    seen: set[bytes | str] = set()
    nodes.reachable(reads, [one, two], seen)
    dirs = {e.key for r in (one, two) for _, e in trees.walk(m.load, r) if e.kind == "dir"}
    tree_nodes = {one, two} | dirs
    assert reads.count == len(tree_nodes) == 6  # two roots, a, a/b, and c twice
    assert {objects.db_key(k) for k in tree_nodes} <= seen
    # a file whose bytes are exactly a node's (its key is that node's key): the node's children
    # are still live, however the walk met the key first
    b_node = trees.lookup(m.load, one, b"a/b")
    assert b_node is not None
    seen = {objects.db_key(b_node.key)}
    nodes.reachable(Reads(m), [one], seen)
    assert objects.db_key(f("x").key) in seen


def test_reachable_reads_nodes_of_the_old_format_and_refuses_damaged_ones() -> None:
    m = Mem()
    node = {b"a": f("1"), b"gone": trees.uncaptured("a FIFO", 0o600, 0, None)}
    old = nodes.MAGIC_TEXT_KEYS + b"".join(
        nodes.HEAD.pack(nodes.KIND_CODES[e.kind], e.mode, e.size, len(n), len(e.key)) + n + e.key.encode()
        for n, e in node.items()
    )
    m.nodes["old"] = old
    seen: set[bytes | str] = set()
    nodes.reachable(Reads(m), ["old"], seen)
    assert seen == {"old", objects.db_key(f("1").key)}
    whole = nodes.encode_node({b"a": f("1"), b"d": Entry("dir", 0o755, 0, f("2").key)})
    assert nodes.node_keys(whole) == ([objects.db_key(f("1").key)], [objects.db_key(f("2").key)])
    for damaged in (whole[:-1], whole + b"\x01", b"snapd-tree-9\n", nodes.MAGIC + b"\x09" + whole[14:]):
        with pytest.raises(CorruptObject):
            nodes.node_keys(damaged)


@pytest.mark.parametrize("name", [b"a/b", b".", b"..", b""])
def test_decode_refuses_names_that_are_not_one_component(name: bytes) -> None:
    """A node naming ``..`` or ``a/b`` would let a rollback write outside its directory."""
    from snapd.errors import CorruptObject

    data = nodes.encode_node({name: f("x")})
    with pytest.raises(CorruptObject, match="^tree node holds an invalid entry$"):
        nodes.decode_node(data)


def test_decode_says_which_way_a_node_is_damaged() -> None:
    from snapd.errors import CorruptObject

    with pytest.raises(CorruptObject, match="^tree node has an unknown format$"):
        nodes.decode_node(b"snapd-tree-0\n")
    with pytest.raises(CorruptObject, match="^tree node is truncated or malformed$"):
        nodes.decode_node(nodes.encode_node({b"a": f("a")})[:-10])  # into the key (17 bytes)
    not_ascii = nodes.encode_node({b"a": Entry("file", 0o644, 1, "kxy")}).replace(b"kxy", b"k\xe9y")
    with pytest.raises(CorruptObject, match="^tree node is truncated or malformed$"):
        nodes.decode_node(not_ascii)


# -- the lean decode (nodes.ordered_records) against the entry-at-a-time one (_decode_any) --


def _outcome(decode: object, data: bytes) -> object:
    try:
        return decode(data)  # type: ignore[operator]
    except CorruptObject as exc:
        return ("refused", exc.message)


@settings(max_examples=400, deadline=None)
@given(
    st.dictionaries(names, entries, max_size=8),
    st.lists(st.tuples(st.integers(0, 400), st.integers(0, 255)), max_size=3),
    st.integers(0, 400),
)
def test_the_lean_decode_reads_and_refuses_what_the_whole_decode_does(
    node: dict[bytes, Entry], flips: list[tuple[int, int]], cut: int
) -> None:
    """A node as :func:`nodes.encode_node` writes it is read by the lean path (no entry built,
    no key converted: 3x faster on a wide directory), and gives exactly the records; bytes
    damaged anywhere are read or refused exactly as the entry-at-a-time decode does."""
    data = nodes.encode_node(node)
    assert nodes.ordered_records(data) == nodes.encode_records(node)
    damaged = bytearray(data)
    for at, byte in flips:
        if len(nodes.MAGIC) <= at < len(damaged):
            damaged[at] = byte
    for variant in (bytes(damaged), bytes(damaged[: len(nodes.MAGIC) + cut])):
        assert _outcome(nodes.decode_records, variant) == _outcome(nodes._decode_any, variant)


def _with_key_blob(blob: bytes) -> bytes:
    return nodes.MAGIC + nodes.HEAD.pack(1, 0o644, 3, 1, len(blob)) + b"a" + blob


@settings(max_examples=500, deadline=None)
@given(st.binary(min_size=0, max_size=8))
def test_the_lean_decode_takes_a_key_blob_exactly_when_the_key_conversion_does(tail: bytes) -> None:
    """The lean decode checks a key blob's tail (the size, then perhaps a variant that is
    never 0, as LEB128 varints) with one pattern, not by converting it: it must accept exactly
    the blobs :func:`objects.py_key` converts."""
    blob = bytes(range(16)) + tail
    try:
        objects.py_key(blob)
        valid = True
    except CorruptObject:
        valid = False
    data = _with_key_blob(blob)
    assert (nodes.ordered_records(data) is not None) == valid
    assert _outcome(nodes.decode_records, data) == _outcome(nodes._decode_any, data)


@pytest.mark.parametrize(
    "record",
    [
        nodes.HEAD.pack(1, 0o644, 3, 3, 17) + b"a/b" + bytes(16) + b"\x03",  # a name with a slash
        nodes.HEAD.pack(1, 0o644, 3, 1, 17) + b"." + bytes(16) + b"\x03",
        nodes.HEAD.pack(1, 0o644, 3, 2, 17) + b".." + bytes(16) + b"\x03",
        nodes.HEAD.pack(1, 0o644, 3, 0, 17) + b"" + bytes(16) + b"\x03",  # no name
        nodes.HEAD.pack(5, 0o644, 3, 1, 17) + b"a" + bytes(16) + b"\x03",  # no such kind
        nodes.HEAD.pack(0x85, 0o644, 3, 1, 1) + b"a" + b"k",  # a text key of no kind
        nodes.HEAD.pack(0x81, 0o644, 3, 1, 2) + b"a" + b"k\xe9",  # a text key not ASCII
        nodes.HEAD.pack(1, 0o644, 3, 1, 16) + b"a" + bytes(16),  # a key blob with no size
        nodes.HEAD.pack(1, 0o644, 3, 1, 18) + b"a" + bytes(16) + b"\x03\x00",  # variant 0
        nodes.HEAD.pack(1, 0o644, 3, 1, 19) + b"a" + bytes(16) + b"\x03\x80\x00",  # variant 0, long
        nodes.HEAD.pack(1, 0o644, 3, 1, 20) + b"a" + bytes(16) + b"\x03\x01\x01\x01",  # 3 numbers
        nodes.HEAD.pack(1, 0o644, 3, 1, 18) + b"a" + bytes(16) + b"\x83\x80",  # a varint unended
        nodes.HEAD.pack(1, 0o644, 3, 1, 30) + b"a" + bytes(16) + b"\x03",  # truncated
    ],
)
def test_the_lean_decode_leaves_every_damaged_record_to_the_whole_decode(record: bytes) -> None:
    """A record the lean decode must not take: a name that is not one component (a rollback
    would write outside its directory), a kind or a key no encoding writes, a truncation.
    After a sound record too, so that it is the record that is refused, not its place."""
    for data in (nodes.MAGIC + record, nodes.encode_node({b"0": f("x")}) + record):
        assert nodes.ordered_records(data) is None
        with pytest.raises(CorruptObject):
            nodes.decode_records(data)


def test_a_name_twice_or_out_of_order_is_left_to_the_whole_decode() -> None:
    """Records not strictly in byte order are no encoding :func:`nodes.encode_node` writes:
    never spliced, decoded as the dict they stand for (the last record of a name wins)."""
    names, records = nodes.encode_records({b"a": f("1"), b"b": f("2")})
    for data in (nodes.MAGIC + records[0] + records[0], nodes.MAGIC + records[1] + records[0]):
        assert nodes.ordered_records(data) is None
        assert nodes.decode_records(data) == nodes._decode_any(data)
        assert nodes.decode_records(data)[1] is None
