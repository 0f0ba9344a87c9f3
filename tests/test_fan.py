"""Wide directories stored in parts (snapd.store.fan, store format 10): one directory, one
encoding however it was edited; an edit encodes only the parts it changed; a fan read back is
the directory; damage refused; and through the store, a wide directory edited, read after a
restart, walked by GC, rolled back."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from e2e_helpers import cli_mark, cli_rollback, snap_diff, snapshot, start_daemon, write
from hypothesis import given, settings
from hypothesis import strategies as st
from tree_helpers import f

from snapd.errors import CorruptObject, MissingObject
from snapd.store import fan, nodes, objects, trees
from snapd.store.store import Store
from snapd.store.trees import Entry

pytestmark = pytest.mark.timeout(120)


@contextmanager
def parts_of_4() -> Iterator[None]:
    """Parts of 4 names on average, fans past 8 names: every path of the code in small nodes."""
    with pytest.MonkeyPatch.context() as m:
        m.setattr(fan, "_MASK", 3)
        m.setattr(fan, "FLAT_MAX", 8)
        yield


@pytest.fixture
def small_parts() -> Iterator[None]:
    with parts_of_4():
        yield


def _names(n: int, salt: str = "") -> list[bytes]:
    return sorted({f"{salt}n{i:05d}".encode() for i in range(n)})


def _records(node: dict[bytes, Entry]) -> nodes.Records:
    return nodes.encode_records(node)


def _fan_of(node: dict[bytes, Entry]) -> tuple[fan.FanNode, dict[str, bytes]]:
    """``node`` stored in parts from nothing: the fan read back, and every part's bytes."""
    names, records = _records(node)
    parts: dict[str, bytes] = {}
    made = []
    for s, e, _, _ in fan.plan(names, None, None):
        data = nodes.joined((names[s:e], records[s:e]))
        key = objects.base_key(objects.xxh3_hex(data), len(data))
        parts[key] = data
        made.append(fan.PartRecord(names[s], e - s, key))
    return fan.assemble(fan.encode(made), parts), parts


name = st.binary(min_size=1, max_size=3).filter(lambda n: b"/" not in n and n not in (b".", b".."))


@settings(max_examples=400, deadline=None)
@given(
    st.sets(name, min_size=9, max_size=80),
    st.sets(name, max_size=12),
    st.sets(st.integers(0, 80), max_size=30),
)
def test_an_edit_planned_from_the_parts_before_is_the_split_of_the_whole(
    before: set[bytes], added: set[bytes], dropped: set[int]
) -> None:
    """Whatever an edit adds, removes or rewrites, the parts :func:`fan.plan` keeps and makes
    are exactly those of the directory split from nothing: one directory, one fan key; and a
    kept part holds the very names it held before, none of them changed."""
    with parts_of_4():
        old = {n: f(n.hex()) for n in before}
        base, _ = _fan_of(old)
        gone = {n for i, n in enumerate(sorted(old)) if i in dropped}
        rewritten = {n for i, n in enumerate(sorted(old)) if i % 7 == 3}
        new = {n: e for n, e in old.items() if n not in gone}
        new.update({n: f("again " + n.hex()) for n in rewritten if n in new})
        new.update({n: f("new " + n.hex()) for n in added})
        names, _ = _records(new)
        if len(names) <= fan.FLAT_MAX:
            return
        changed = gone | rewritten | added
        got = fan.plan(names, base, changed)
        want = [(s, e) for s, e, _, _ in fan.plan(names, None, None)]
        assert [(p.start, p.end) for p in got] == want
        for p in got:
            if p.key is not None:  # kept: the same names as the part of that key
                i = base.parts.index(p.key)
                assert base.part_records(i)[0] == names[p.start : p.end]
                assert not changed.intersection(names[p.start : p.end])


def test_a_part_ends_after_a_name_whose_hash_says_so() -> None:
    """The boundaries hang on the names alone: no count, no position (an insertion does not
    shift the parts after it)."""
    names = _names(5000)
    ends = fan.split(names)
    assert ends[-1] == len(names)
    assert all(fan.ends_part(names[e - 1]) for e in ends[:-1])
    assert sum(fan.ends_part(n) for n in names[:-1]) == len(ends) - 1
    assert 5 < len(ends) < 60  # 2^8 names on average


def test_one_name_edited_in_a_wide_directory_makes_one_new_part() -> None:
    node = {n: f(n.decode()) for n in _names(20_000)}
    base, _ = _fan_of(node)
    names = base.names
    target = names[12_345]
    edited = dict(node)
    edited[target] = f("changed")
    new_names, _ = _records(edited)
    planned = fan.plan(new_names, base, [target])
    new = [p for p in planned if p.key is None]
    assert len(new) == 1 and new[0].start <= 12_345 < new[0].end
    assert new[0].base == base.parts[[p.start <= 12_345 < p.end for p in planned].index(True)]
    assert len(planned) == len(base.parts) > 40


def test_a_fan_reads_back_as_its_directory_and_refuses_parts_that_do_not_fit(small_parts: None) -> None:
    node = {n: f(n.decode()) for n in _names(40)}
    got, parts = _fan_of(node)
    assert got == node and list(got) == sorted(node) and len(got.parts) == len(got.ends) > 1
    assert fan.decode(got.encoding) == [
        fan.PartRecord(got.names[s], e - s, k)
        for (s, e), k in zip(fan._spans(list(got.ends)), got.parts, strict=True)
    ]
    records = fan.decode(got.encoding)
    swapped = fan.encode([records[0]._replace(size=records[0].size + 1), *records[1:]])
    with pytest.raises(CorruptObject):
        fan.assemble(swapped, parts)  # a count the part does not have
    wrong_first = fan.encode([records[0]._replace(first=b"m"), *records[1:]])
    with pytest.raises(CorruptObject):
        fan.assemble(wrong_first, parts)
    backwards = fan.encode([records[1], records[0], *records[2:]])
    with pytest.raises(CorruptObject):
        fan.decode(backwards)
    for damaged in (got.encoding[:-1], fan.MAGIC, got.encoding + b"\x05"):
        with pytest.raises(CorruptObject):
            fan.decode(damaged)
    assert nodes.node_keys(got.encoding) == ([], [objects.db_key(k) for k in got.parts])


# -- through the store -------------------------------------------------------------------------


def _wide(n: int) -> dict[bytes, trees.Change]:
    return {b"wide/" + name: f(name.decode()) for name in _names(n)} | {b"top": f("top")}


def test_a_wide_directory_is_stored_in_parts_and_read_back_after_a_restart(tmp_path: Path) -> None:
    """A mark that changes one name of a 3,000-name directory stores one new part and a new
    fan; the tree reads back the same from a fresh store (no cache), and GC's walk keeps every
    part of every tree."""
    store_dir = tmp_path / "s"
    with Store.open(store_dir) as s:
        with s.batch() as b:
            one = b.apply(None, _wide(3000))
            b.commit()
        before = s.catalog.read().execute("SELECT COUNT(*) FROM objects").fetchone()[0]
        with s.batch() as b:
            two = b.apply(one, {b"wide/n01234": f("changed"), b"wide/new": f("new")})
            b.commit()
        after = s.catalog.read().execute("SELECT COUNT(*) FROM objects").fetchone()[0]
        wide_one = trees.lookup(s.load_node, one, b"wide")
        wide_two = trees.lookup(s.load_node, two, b"wide")
        assert wide_one is not None and wide_two is not None
        assert fan.is_fan(s.get(wide_two.key))
        was, now = s.load_node(wide_one.key), s.load_node(wide_two.key)
        assert isinstance(was, fan.FanNode) and isinstance(now, fan.FanNode) and len(was.parts) > 5
        # n01234's part and the last (b"new" sorts after every n...): written anew, no other
        new_parts = set(now.parts) - set(was.parts)
        assert len(new_parts) == 2 and now.parts[-1] in new_parts
        assert after - before == 2 + len(new_parts)  # the root, the fan, the new parts
    with Store.open(store_dir) as s:
        for tree, extra in ((one, {}), (two, {b"wide/n01234": f("changed"), b"wide/new": f("new")})):
            want = {p: e for p, e in _wide(3000).items()} | extra
            got = {p: e for p, e in trees.walk(s.load_node, tree) if e.kind != "dir"}
            assert got == want
        seen: set[bytes | str] = set()
        nodes.reachable(s.get_many, [one, two], seen)  # GC's walk: what it keeps
        for tree in (one, two):
            wide = trees.lookup(s.load_node, tree, b"wide")
            assert wide is not None
            node = s.load_node(wide.key)
            assert isinstance(node, fan.FanNode)
            assert {objects.db_key(k) for k in (wide.key, *node.parts)} <= seen


def test_a_wide_directory_whose_part_is_gone_is_refused(tmp_path: Path) -> None:
    with Store.open(tmp_path / "s") as s:
        with s.batch() as b:
            one = b.apply(None, _wide(3000))
            b.commit()
        wide = trees.lookup(s.load_node, one, b"wide")
        assert wide is not None
        part = fan.decode(s.get(wide.key))[3].key
        with s.catalog.write() as c:
            c.execute("DELETE FROM objects WHERE key=?", (objects.db_key(part),))
        s.forget_caches()
        with pytest.raises(MissingObject):
            s.load_node(wide.key)


# -- through a real daemon -----------------------------------------------------------------------


def test_a_wide_directory_is_rolled_back_and_undone_exactly(tmp_path: Path) -> None:
    """A workspace with a directory of 1,500 names (stored in parts): names rewritten, added
    and removed (some in one part, some across its boundaries), then a rollback to the mark puts
    the directory back exactly, and the undo puts the edit back exactly, after a restart too."""
    ws = (tmp_path / "ws").resolve()
    for i in range(1500):
        write(ws / "icons" / f"Icon{i:04d}.js", f"export default {i};\n")
    write(ws / "README", "top\n")
    daemon = start_daemon(tmp_path / "snapd-home")
    daemon.ctl("watch", ws)
    cli_mark(daemon, ws, "base")
    want = snapshot(ws)
    for i in range(0, 1500, 97):
        write(ws / "icons" / f"Icon{i:04d}.js", f"export default 'changed {i}';\n")
    for i in range(3, 1500, 211):
        (ws / "icons" / f"Icon{i:04d}.js").unlink()
    for i in range(40):
        write(ws / "icons" / f"Icon{i:04d}b.js", f"new {i}\n")
    cli_mark(daemon, ws, "edited")
    edited = snapshot(ws)
    code, reply = cli_rollback(daemon, ws, "--to", "base")
    assert code == 0 and reply["ok"], reply
    assert snapshot(ws) == want, snap_diff(snapshot(ws), want)
    assert daemon.stop() == 0
    daemon = start_daemon(tmp_path / "snapd-home")  # nothing cached: every part read back
    try:
        code, reply = cli_rollback(daemon, ws, command="undo")
        assert code == 0 and reply["ok"], reply
        assert snapshot(ws) == edited, snap_diff(snapshot(ws), edited)
    finally:
        assert daemon.stop() == 0


def _stored_wide(s: Store, n: int) -> tuple[str, dict[bytes, str]]:
    """A tree with a directory ``wide`` of ``n`` files whose contents are stored: its root, and
    each file's content key."""
    contents: dict[bytes, str] = {}
    with s.batch() as b:
        changes: dict[bytes, trees.Change] = {}
        for name in _names(n):
            data = b"content of " + name
            contents[b"wide/" + name] = key = b.put(data)
            changes[b"wide/" + name] = Entry("file", 0o644, len(data), key)
        root = b.apply(None, changes)
        b.commit()
    return root, contents


def test_a_wide_directory_s_parts_are_read_together_and_stored_as_deltas(tmp_path: Path) -> None:
    """The nodes of a level are read together, a fan's parts with them (:meth:`Store.load_nodes`);
    the fan's own bytes are what the cache gives for it (not its parts' records joined); and a
    part rewritten by an edit is stored as a delta against the part it replaces."""
    with Store.open(tmp_path / "s") as s:
        root, _ = _stored_wide(s, 3000)
        wide = trees.lookup(s.load_node, root, b"wide")
        assert wide is not None
        s.forget_caches()
        s.load_nodes([root, wide.key])
        node = s.cached_node(wide.key)
        assert isinstance(node, fan.FanNode) and node.parts and len(node) == 3000
        assert s.node_bytes(wide.key) == s.get(wide.key)
        with s.batch() as b:
            new = Entry("file", 0o644, 3, b.put(b"new"))
            two = b.apply(root, {b"wide/n01500": new})
            b.commit()
        now = s.load_node(trees.lookup(s.load_node, two, b"wide").key)  # type: ignore[union-attr]
        assert isinstance(now, fan.FanNode)
        (made,) = set(now.parts) - set(node.parts)
        at = now.parts.index(made)
        assert s.delta_link(made) == (node.parts[at], 1)  # against the part it replaces
        assert s.get(made) == nodes.joined(now.part_records(at))


def test_a_damaged_content_in_a_wide_directory_is_found_at_its_path(tmp_path: Path) -> None:
    """What the damage report walks (snapd.store.damage): a bad content under a directory
    stored in parts is named by its own path, not as its directory unreadable; a bad part
    makes its directory the unreadable path."""
    from snapd.store import damage

    with Store.open(tmp_path / "s") as s:
        root, contents = _stored_wide(s, 3000)
        ws = s.add_workspace(b"/nowhere")
        with s.batch() as b:
            b.add_mark(ws, "m", root)
            b.commit()
        s.forget_caches()
        bad = contents[b"wide/n00042"]
        refs = damage.locate(s, {bad})
        assert [(r.path, r.kind, r.key) for r in refs] == [(b"wide/n00042", "file", bad)]
        wide = trees.lookup(s.load_node, root, b"wide")
        assert wide is not None
        part = fan.decode(s.get(wide.key))[2].key
        s.forget_caches()
        refs = damage.locate(s, {part})
        assert [(r.path, r.kind) for r in refs] == [(b"wide", "dir")]
