"""What a mark asks of the catalog: SQLite statements are most of a mark's time at 10^5 files
(docs/benchmarks.md), so the number a mark of a few changed files runs is kept small and
checked here, on a real store (the catalog's own connections, traced)."""

from __future__ import annotations

from pathlib import Path

import pytest
from ingest_helpers import capture_paths, ingest_tree

from snapd.store.store import Store

pytestmark = pytest.mark.timeout(60)


def test_a_mark_looks_its_new_contents_up_in_one_query(tmp_path: Path) -> None:
    root = tmp_path / "ws"
    root.mkdir()
    for i in range(20):
        (root / f"f{i}.txt").write_bytes(b"first %d\n" % i)
    with Store.open(tmp_path / "store") as store:
        ws = store.add_workspace(bytes(root))
        ingest_tree(store, ws, root)
        changed = [b"f%d.txt" % i for i in range(10)]
        for rel in changed:
            (root / rel.decode()).write_bytes(b"second " + rel)
        seen: list[str] = []
        store.catalog.read().set_trace_callback(seen.append)
        capture_paths(store, ws, root, changed, "turn")
        one_by_one = [s for s in seen if s.startswith("SELECT 1 FROM objects WHERE key=")]
        assert one_by_one == [], f"{len(one_by_one)} single-key lookups for 10 new contents"
