"""An in-memory node map that stands in for the store in the pure tree tests (trees, nodes,
treediff). Every edit it saves is also spliced from the node it replaces, as the store splices
it, and must give the same bytes: a splice that drifted from the whole encoding would change
keys."""

from __future__ import annotations

from collections.abc import Iterable

from hypothesis import strategies as st

from snapd.store import nodes, trees
from snapd.store.objects import xxh3_hex
from snapd.store.trees import Entry


class Mem:
    def __init__(self) -> None:
        self.nodes: dict[str, bytes] = {}
        self.saves = 0

    def save(self, node: trees.Node, base: str | None = None, changed: Iterable[bytes] | None = None) -> str:
        data = nodes.encode_node(node)
        if base is not None and changed is not None:  # a store splices this edit: the same bytes
            was = nodes.decode_records(self.nodes[base])[1]
            assert was is not None and nodes.joined(nodes.splice(was, node, changed)) == data
        key = f"{xxh3_hex(data)}-{len(data)}"
        self.nodes[key] = data
        self.saves += 1
        return key

    def load(self, key: str) -> trees.Node:
        return nodes.decode_node(self.nodes[key])


def f(content: str, mode: int = 0o644) -> Entry:
    data = content.encode()
    return Entry("file", mode, len(data), f"{xxh3_hex(data)}-{len(data)}")


names = st.binary(min_size=1, max_size=6).filter(lambda b: b"/" not in b and b not in (b".", b".."))
