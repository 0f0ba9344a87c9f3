"""A revert's target: the workspace as it is now with the changes of some spans taken back
(:mod:`snapd.rollback.revert`), as a made-up mark a rollback can go to (docs/rollback.md, "Revert").

A rollback plans from the tree it captures under the workspace's lock, and plans again at
apply; a revert's target depends on that tree (``ours`` of every merge), so it is made again
from each captured tree: :class:`RevertTarget` is called with it and returns the mark
(:func:`snapd.rollback.live.execute` takes either). Everything a rollback guarantees then holds
for a revert as it is: the plan and its token, the ``pre-rollback`` mark, the journal.

The made-up mark has the id ``revert`` and kind ``revert``; its rules are the workspace's
rules now (a revert changes paths, not what is captured), its root mode the root's mode now.
The contents its merges put are held against GC from the moment they are stored until the
target is closed, after the apply has read them (a content stored earlier, past the GC's grace
and named by no mark, would otherwise be fair game between the plan and the apply's journal).

Changes made in a span while another session's turn was open too (:class:`spans.Part`'s
``others``) cannot be told from that session's: each path changed there is a conflict.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

from snapd.capture.workspace import Workspace
from snapd.errors import RevertConflict
from snapd.paths import at_or_below, encode_path
from snapd.rollback import revert
from snapd.rollback.prepare import root_mode
from snapd.rollback.report import REVERT
from snapd.rollback.spans import Part
from snapd.store import ignored, treediff
from snapd.store.batch import Batch
from snapd.store.records import Mark


class RevertTarget:
    """The target of a revert of ``parts`` (newest first) in ``ws``: called with the captured
    tree, it returns the mark to roll back to, or raises :class:`RevertConflict` (nothing
    written) when a change cannot be taken back and ``markers`` is off. ``only``: the paths
    the revert is limited to; ``name``: what it reverts, for people (``A..B``, ``turn M``);
    ``spans``: the parts' wire form, as replies and the pre-rollback mark show them;
    ``sessions``: the other sessions whose later work the revert keeps."""

    def __init__(
        self,
        ws: Workspace,
        parts: Sequence[Part],
        *,
        name: str,
        spans: list[dict[str, Any]],
        markers: bool,
        only: Sequence[bytes] = (),
        sessions: Sequence[tuple[str, str | None]] = (),
    ) -> None:
        self.ws, self.parts, self.name, self.spans = ws, tuple(parts), name, spans
        self.sessions = [{"session": s, "agent": a} for s, a in sessions]
        self.markers, self.only = markers, tuple(only)
        self.outcome: revert.Outcome | None = None  # of the last call: what the reply says
        self.clashes: tuple[revert.Clash, ...] = ()
        self._batches: list[Batch] = []

    def __enter__(self) -> RevertTarget:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Let GC have the merged contents again (once the apply has read them)."""
        for b in self._batches:
            b.close()
        self._batches.clear()

    def __call__(self, current: str) -> Mark:
        store = self.ws.store
        batch = store.batch()
        self._batches.append(batch)
        made: dict[str, bytes] = {}  # put in this batch, not readable from the store before commit

        def put(data: bytes) -> str:
            key = batch.put(data)
            made[key] = data
            return key

        def get(key: str) -> bytes:
            return made[key] if key in made else store.get(key)

        own = [
            revert.Span(
                p.start.tree,
                current if p.end is None else p.end.tree,
                _span_name(p),
                ignored_before=_ignored_at(store, p.start),
            )
            for p in self.parts
            if not p.others
        ]
        shared = tuple(c for p in self.parts if p.others for c in self._shared(p, current))
        outcome = revert.revert(
            batch.load_node,
            get,
            put,
            current,
            own,
            markers=self.markers,
            only=self.only,
            ignored_now=self.ws.rules.is_ignored,
        )
        self.outcome, self.clashes = outcome, shared + outcome.clashes
        if self.clashes and not self.markers:
            n, plural = len(self.clashes), "s" if len(self.clashes) != 1 else ""
            why = "conflicts with later changes"
            if not outcome.clashes:
                why = "cannot be told from another session's work"
            hint = ""
            if shared:  # a session that died mid-turn never closes it: its turn stays open
                hint = (
                    "; a turn that never ended counts as open until its session marks again: if that "
                    "session has stopped, `snapctl revert START..END` (the turn's marks) takes the span "
                    "back as a whole"
                )
            raise RevertConflict(
                f"the revert of {self.name} {why} at {n} path{plural}: nothing was changed "
                f"(--conflicts=markers writes text conflicts with markers){hint}",
                conflicts=[clash_json(c) for c in self.clashes],
                revert=self.describe(),
            )
        left = {c.path for c in shared}  # in markers mode, left as they are
        changes = {p: c for p, c in outcome.changes.items() if p not in left}
        tree = batch.apply(current, changes)
        batch.commit()
        return Mark(
            id=REVERT,
            workspace=self.ws.id,
            seq=0,  # no mark's: whose work it reverts is the revert's own account (``describe``)
            label=REVERT,
            message=f"revert of {self.name}",
            agent=None,
            session=None,
            created=time.time_ns(),
            git_head=None,
            tree=tree,
            kind=REVERT,
            pinned=False,
            summary={REVERT: [{"from": p.start.id, "to": p.end.id if p.end else None} for p in self.parts]},
            rules=store.live_rules(self.ws.id),
            root_mode=root_mode(self.ws),
            ignored=store.live_ignored(self.ws.id),
        )

    def _shared(self, part: Part, current: str) -> list[revert.Clash]:
        """The paths ``part`` changed while other sessions had turns open too."""
        names = [part.session or "?", *part.others]
        who = f"{', '.join(names[:-1])} and {names[-1]} {'both' if len(names) == 2 else 'all'}"
        end = current if part.end is None else part.end.tree
        out = []
        for d in treediff.diff(self.ws.store.load_node, part.start.tree, end):
            if self.only and not any(at_or_below(d.path, o) for o in self.only):
                continue
            out.append(revert.Clash(d.path, f"changed while sessions {who} had turns open"))
        return out

    def describe(self) -> dict[str, Any]:
        """The ``revert`` field of the replies: the spans, the other sessions whose later work
        is kept, the paths merged with later edits, the later work kept and why, the files
        written with markers, the conflicts."""
        o = self.outcome
        keeps = o.keeps if o else {}
        return {
            "spans": self.spans,
            "sessions_kept": self.sessions,
            "merged": [encode_path(p) for p in o.merged] if o else [],
            "keeps": [{"path": encode_path(p), "reason": why} for p, why in sorted(keeps.items())],
            "markers": [encode_path(p) for p in o.markers] if o else [],
            "conflicts": [clash_json(c) for c in self.clashes],
        }

    def reply(self, out: dict[str, Any]) -> dict[str, Any]:
        """A rollback's reply (plan or apply) as a revert's: with ``revert``, and the conflicts
        markers mode left as they are among the plan's ``kept`` (and an apply's: not ``ok``)."""
        out = {**out, REVERT: self.describe()}
        if not self.clashes:
            return out
        left = [{"path": encode_path(c.path), "reason": c.reason} for c in self.clashes]
        out["plan"] = {**out["plan"], "kept": [*out["plan"].get("kept", []), *left]}
        if "kept" in out:  # an apply's
            out["kept"] = [*out["kept"], *left]
            out["ok"] = False
        return out


def _ignored_at(store: ignored.Objects, start: Mark) -> Callable[[bytes], bool] | None:
    """Whether a path was there at ``start`` but ignored then (None: not recorded)."""
    names = ignored.at_mark(store, start)
    return names.covers if names is not None else None


def _span_name(p: Part) -> str:
    return f"{p.start.id}..{p.end.id if p.end is not None else 'now'}"


def clash_json(c: revert.Clash) -> dict[str, Any]:
    return {
        "path": encode_path(c.path),
        "reason": c.reason,
        "hunks": [
            {
                "line": h.line,
                "base": [_text(x) for x in h.base],
                "ours": [_text(x) for x in h.ours],
                "theirs": [_text(x) for x in h.theirs],
            }
            for h in c.hunks
        ],
    }


def _text(line: bytes) -> str:
    return line.decode("utf-8", "replace")
