"""Hypothesis stateful test: random put / snapshot / diff / pin / evict / gc / reopen sequences
against a plain in-memory model of what each mark holds."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import Bundle, RuleBasedStateMachine, invariant, precondition, rule

from snapd.config import Retention
from snapd.store import gc, treediff, trees
from snapd.store.store import Store
from snapd.store.verify import verify

PATHS = [b"a", b"b", b"d/x", b"d/y", b"d/e/z", b"\xff\xfe"]
CONTENTS = st.one_of(st.binary(max_size=40), st.sampled_from([b"same", b"same", b"x" * 500]))


class StoreMachine(RuleBasedStateMachine):
    marks = Bundle("marks")

    def __init__(self) -> None:
        super().__init__()
        self.tmp = Path(tempfile.mkdtemp(prefix="snapd-stateful-"))
        self.store = Store.open(self.tmp / "store")
        self.ws = self.store.add_workspace(b"/nowhere")
        self.current: dict[bytes, bytes] = {}
        self.snapshots: dict[str, dict[bytes, bytes]] = {}
        self.pinned: set[str] = set()
        self.order: list[str] = []
        self.last_tree: str | None = None
        self.last_state: dict[bytes, bytes] = {}

    def teardown(self) -> None:
        self.store.close()
        shutil.rmtree(self.tmp, ignore_errors=True)

    @rule(path=st.sampled_from(PATHS), content=CONTENTS)
    def write(self, path: bytes, content: bytes) -> None:
        self.current[path] = content

    @rule(path=st.sampled_from(PATHS))
    def delete(self, path: bytes) -> None:
        self.current.pop(path, None)

    @rule(target=marks, label=st.sampled_from(["turn-start", "turn-end", "x"]))
    def snapshot(self, label: str) -> str:
        changes: dict[bytes, trees.Change] = {}
        with self.store.batch() as b:
            for p in set(self.current) | set(self.last_state):
                if p not in self.current:
                    changes[p] = None
                elif self.last_state.get(p) != self.current[p]:
                    data = self.current[p]
                    changes[p] = trees.Entry("file", 0o644, len(data), b.put(data))
            tree = b.apply(self.last_tree, changes)
            mark = b.add_mark(self.ws, label, tree)
        # empty directories left by deletions are fine; compare files only
        self.last_tree, self.last_state = tree, dict(self.current)
        self.snapshots[mark.id] = dict(self.current)
        self.order.append(mark.id)
        return mark.id

    @rule(a=marks, b=marks)
    def diff(self, a: str, b: str) -> None:
        if a not in self.snapshots or b not in self.snapshots:
            return
        ta, tb = self.store.mark(a).tree, self.store.mark(b).tree
        got = {d.path for d in treediff.diff(self.store.load_node, ta, tb) if (d.old or d.new).kind == "file"}  # type: ignore[union-attr]
        sa, sb = self.snapshots[a], self.snapshots[b]
        want = {p for p in set(sa) | set(sb) if sa.get(p) != sb.get(p)}
        assert got == want

    @rule(m=marks, pin=st.booleans())
    def pin(self, m: str, pin: bool) -> None:
        if m in self.snapshots:
            self.store.set_pinned(m, pin)
            (self.pinned.add if pin else self.pinned.discard)(m)

    @precondition(lambda self: len(self.snapshots) > 0)
    @rule(keep=st.integers(min_value=1, max_value=4))
    def evict_and_gc(self, keep: int) -> None:
        rep = gc.run(self.store, Retention(max_marks=keep, grace_s=0))
        gone = {m for m, _ in rep.evicted}
        assert not gone & self.pinned
        assert self.order[-1] not in gone
        for m in gone:
            del self.snapshots[m]
        live = [m for m in self.order if m in self.snapshots]
        assert len([m for m in live if m not in self.pinned]) <= max(keep, 1)

    @rule()
    def reopen(self) -> None:
        self.store.close()
        self.store = Store.open(self.tmp / "store")

    @invariant()
    def marks_hold_their_snapshots(self) -> None:
        for mark_id, state in self.snapshots.items():
            tree = self.store.mark(mark_id).tree
            files = {
                p: self.store.get(e.key)
                for p, e in trees.walk(self.store.load_node, tree)
                if e.kind == "file"
            }
            assert files == state

    @precondition(lambda self: len(self.order) % 5 == 0)
    @invariant()
    def verify_clean(self) -> None:
        assert verify(self.store).ok


TestStoreMachine = StoreMachine.TestCase
TestStoreMachine.settings = settings(max_examples=40, stateful_step_count=30, deadline=None)
pytestmark = pytest.mark.timeout(300)
