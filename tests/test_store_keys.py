"""Object keys as the catalog stores them (format 6): binary, 17-21 bytes instead of 34-40
characters, in ``objects.key``, ``objects.base`` and ``versions.object`` (docs/storage.md,
"Catalog"), and in tree nodes (``snapd-tree-2``; nodes with text keys still read). The
conversion is exact both ways, a damaged blob is an error and not a key, and a text that is
not an object key stays text.
"""

from __future__ import annotations

import os
import struct
from pathlib import Path

import pytest
from ingest_helpers import capture_paths, ingest_tree

from snapd.errors import CorruptObject
from snapd.store import nodes, objects, trees
from snapd.store.store import Store

DIGEST = "f4d0497cf9394caab34d1a3ab2bece70"


@pytest.mark.parametrize("size", [0, 1, 127, 128, 16383, 16384, 2**40])
@pytest.mark.parametrize("variant", [0, 1, 200])
def test_a_key_round_trips_through_its_catalog_form(size: int, variant: int) -> None:
    key = objects.variant_key(objects.base_key(DIGEST, size), variant)
    stored = objects.db_key(key)
    assert isinstance(stored, bytes) and stored[:16] == bytes.fromhex(DIGEST)
    assert len(stored) <= 16 + 6 + (2 if variant else 0)
    assert objects.py_key(stored) == key


def test_a_text_that_is_not_a_key_stays_text() -> None:
    for text in ["!12.34!too large", "?", DIGEST, f"{DIGEST}-1.0"]:
        assert objects.db_key(text) == text and objects.py_key(text) == text


@pytest.mark.parametrize(
    "blob",
    [
        b"",
        bytes(16),  # no size
        bytes(16) + b"\x80",  # a size cut short
        bytes(16) + b"\x05\x00",  # variant 0 is no variant
        bytes(16) + b"\x05\x01\x01",  # three numbers
        bytes(15) + b"\x05",  # digest cut short
    ],
)
def test_a_damaged_catalog_key_is_corruption(blob: bytes) -> None:
    with pytest.raises(CorruptObject):
        objects.py_key(blob)


def test_a_new_store_keeps_its_keys_as_short_blobs(tmp_path: Path) -> None:
    root = tmp_path / "ws"
    (root / "d").mkdir(parents=True)
    (root / "d" / "a.py").write_bytes(
        b"".join(b"def f%d(x):\n    return x * %d\n" % (j, j * j) for j in range(300))
    )
    with Store.open(tmp_path / "store") as store:
        ws = store.add_workspace(os.fsencode(root))
        ingest_tree(store, ws, root)
        with open(root / "d" / "a.py", "ab") as f:
            f.write(b"# edited\n")
        capture_paths(store, ws, root, [b"d/a.py"], "edit")
        db = store.catalog.read()
        kinds = set(db.execute("SELECT typeof(key), MAX(length(key)) <= 21 FROM objects GROUP BY 1"))
        assert kinds == {("blob", 1)}
        assert set(db.execute("SELECT typeof(base) FROM objects")) == {("blob",), ("null",)}  # a delta
        assert ("blob",) in set(db.execute("SELECT typeof(object) FROM versions"))
        assert not db.execute("SELECT 1 FROM versions WHERE typeof(object)='text'").fetchall()
        first, second = (v.entry for v in store.versions(ws, b"d/a.py"))
        assert first and second and store.last_objects(ws, [b"d/a.py"]) == {b"d/a.py": second.key}
        assert store.get(second.key) == store.get(first.key) + b"# edited\n"


def text_key_node(node: dict[bytes, trees.Entry]) -> bytes:
    """A node as formats 1-5 wrote it (``snapd-tree-1``: every key as ASCII text)."""
    head = struct.Struct(">BIQHB")
    parts = [nodes.MAGIC_TEXT_KEYS]
    for name in sorted(node):
        e, key = node[name], node[name].key.encode("ascii")
        parts += [head.pack(nodes.KIND_CODES[e.kind], e.mode, e.size, len(name), len(key)), name, key]
    return b"".join(parts)


def test_a_node_holds_keys_as_blobs_and_nodes_with_text_keys_still_read() -> None:
    file_key, node_key = objects.base_key(DIGEST, 3), objects.variant_key(objects.base_key("ab" * 16, 90), 2)
    node = {
        b"a.py": trees.Entry("file", 0o644, 3, file_key),
        b"sub": trees.Entry("dir", 0o755, 0, node_key),
        b"huge": trees.uncaptured("over the size cap", 0o600, 10**10, (7, 8)),
    }
    data = nodes.encode_node(node)
    assert data.startswith(b"snapd-tree-2\n") and bytes.fromhex(DIGEST) in data
    assert file_key.encode() not in data and b"over the size cap" in data
    assert nodes.decode_node(data) == node
    old = text_key_node(node)
    assert nodes.decode_node(old) == node
    assert len(data) <= len(old) - 2 * 16  # two keys, 16+ bytes shorter each
