"""The revert model (:mod:`rollback_model`'s ``revert`` steps, issue 34): what ``snapctl revert
A..B`` may leave, path by path, judged by a three-way model of its own. It never calls snapd's
merge: a text merge is predicted only where the answer follows from how the files were made
(rows files, :func:`model_steps.rows`: every line names its index, so line i can only match line
i and the merge is decided line by line), or where one side did not change; any other text merge
is checked for what every line merge keeps (its lines come from the two sides). Pure functions
over :data:`e2e_helpers.Snap` maps.

Per path p that differs between A and B (base = B's entry, theirs = A's, ours = now's):
ours == base → theirs; ours == theirs → ours; three text files → bytes merged (one side
unchanged: the other; rows: line by line, a run of changed lines touched by both sides with
different results is a clash) and modes merged (ours' unchanged: theirs'; theirs' unchanged:
ours'; else a clash); anything else is a clash. A directory the revert deletes but that holds
paths that stay is kept (and named). A path the model cannot judge — ignored or not capturable
at A, at B or now — may be as now, as at A, or absent, and may be why a revert refuses.
"""

from __future__ import annotations

import base64
import json
import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Final

from e2e_helpers import Entry, Snap, show_entry
from model_steps import depth, parent, rows, under

MARKERS: Final = (b"<<<<<<<", b"|||||||", b"=======", b">>>>>>>")


def is_text(data: bytes) -> bool:
    """The model's own text rule (docs/rollback.md): UTF-8, no NUL byte, at most 1 MiB."""
    if b"\0" in data or len(data) > 1 << 20:
        return False
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


@dataclass(frozen=True)
class Run:
    """A run of rows both sides changed, differently: one clash hunk (``line``: its first index)."""

    line: int
    base: tuple[bytes, ...]
    ours: tuple[bytes, ...]
    theirs: tuple[bytes, ...]
    exact: bool  # no row in it that both sides changed alike (a merger may split such a run)


def merge_rows(b: list[bytes], o: list[bytes], t: list[bytes]) -> tuple[list[bytes], list[Run]]:
    """Three versions of a rows file, as many rows each: the merged lines (with diff3 markers
    around each clash: a marker line is its bare prefix) and the clashing runs. A row all three
    agree on separates runs; in a run, one side's change wins over no change; two different
    changes clash, even on neighbouring rows (no agreed row between them)."""
    out: list[bytes] = []
    runs: list[Run] = []
    i = 0
    while i < len(b):
        if o[i] == b[i] == t[i]:
            out.append(b[i])
            i += 1
            continue
        j = i
        while j < len(b) and not o[j] == b[j] == t[j]:
            j += 1
        bb, ob, tb = b[i:j], o[i:j], t[i:j]
        if ob == tb or tb == bb:
            out += ob
        elif ob == bb:
            out += tb
        else:
            exact = not any(o[k] == t[k] != b[k] for k in range(i, j))
            runs.append(Run(i, tuple(bb), tuple(ob), tuple(tb), exact))
            out += [MARKERS[0], *ob, MARKERS[1], *bb, MARKERS[2] + b"\n", *tb, MARKERS[3]]
        i = j
    return out, runs


def markers_fit(got: bytes, want: list[bytes]) -> bool:
    """Does ``got`` hold ``want``'s lines, a marker line matching whatever name follows it?"""
    lines = got.splitlines(keepends=True)
    if len(lines) != len(want):
        return False
    for g, w in zip(lines, want, strict=True):
        if w in (MARKERS[0], MARKERS[1], MARKERS[3]):
            if not (g.startswith(w) and g[len(w) : len(w) + 1] in (b" ", b"\n")):
                return False
        elif g != w:
            return False
    return True


@dataclass
class Clash:
    """A path the revert cannot take back: refused (default), or written with markers (text)."""

    path: str
    reason: str
    runs: list[Run] = field(default_factory=list)  # rows clashes: the hunks, predicted
    marked: Entry | None = None  # text with markers: ("file", modes, lines with bare markers)


@dataclass
class Expectation:
    """What a revert may leave: per path the entries allowed, the clashes, and its doubts."""

    want: dict[str, frozenset[Entry | None]]
    clashes: dict[str, Clash]
    maybe: set[str]  # paths that may be a reason to refuse or keep: not judged, or merged unpredicted
    loose: dict[
        str, tuple[frozenset[int], bytes, bytes, bytes]
    ]  # merged unpredicted: modes, ours, theirs, base
    kept_dirs: set[str]  # directories the revert deletes but must keep (they hold later paths)
    spans: int = 0  # paths that differ between A and B, in scope
    unjudged: int = 0  # of those, the ones the model does not judge (ignored, not capturable)
    rows_merged: int = 0

    def fits(self, p: str, got: Entry | None, markers: bool) -> bool:
        c = self.clashes.get(p)
        if markers and c is not None and c.marked is not None:
            return (
                got is not None
                and got[0] == "file"
                and got[1] in c.marked[1]
                and markers_fit(got[2], c.marked[2])
            )
        if p in self.loose and got is not None and got[0] == "file":
            modes, ours, theirs, base = self.loose[p]
            lines = got[2].splitlines(keepends=True)
            marks = markers and any(x.startswith(MARKERS) for x in lines)
            sides = {*ours.splitlines(keepends=True), *theirs.splitlines(keepends=True)}
            if marks:  # diff3 style: the base's lines between ||||||| and =======
                sides |= {*base.splitlines(keepends=True)}
            own = all(x in sides or (marks and x.startswith(MARKERS)) for x in lines)
            return own and got[1] in modes
        return got in self.want.get(p, frozenset({None}))

    def shown(self, p: str) -> str:
        if p in self.loose:
            return "a merge of ours' and theirs' lines"
        return " or ".join(sorted(map(show_entry, self.want.get(p, frozenset({None})))))


def _modes(om: int, bm: int, tm: int) -> tuple[frozenset[int], bool]:
    """The modes a text merge may give, and whether a clash is certain."""
    if om == bm:
        return frozenset({tm}), False
    if tm == bm:
        return frozenset({om}), False
    return frozenset({om}), om != tm  # ours == theirs: taken, or a clash (the design's rule)


def expect(a: Snap, b: Snap, o: Snap, doubt: set[str], only: str, markers: bool) -> Expectation:
    """What reverting A..B (``a``, ``b``) onto ``o`` may leave; ``doubt``: paths not judged;
    ``only``: the path after ``--`` ("" for all)."""
    span = {
        p
        for p in a.keys() | b.keys()
        if p != "." and (not only or under(p, only)) and (a.get(p) != b.get(p) or p in doubt)
    }
    want: dict[str, frozenset[Entry | None]] = {p: frozenset({o.get(p)}) for p in o.keys() | span}
    want["."] = frozenset({o.get("."), a.get(".")})  # the root's own mode: not the revert's to change
    changed = {p for p in span if a.get(p) != b.get(p)}
    ex = Expectation(want, {}, set(), {}, set(), spans=len(changed), unjudged=len(changed & doubt))
    for p in span:
        base, theirs, ours = b.get(p), a.get(p), o.get(p)
        if p in doubt:
            want[p] = frozenset({ours, theirs, None})
            ex.maybe.add(p)
        elif ours == base:
            want[p] = frozenset({theirs})
        elif ours == theirs:
            pass  # as at A already
        elif all(e is not None and e[0] == "file" and is_text(e[2]) for e in (base, theirs, ours)):
            _text(ex, p, base, ours, theirs, markers)  # type: ignore[arg-type]
        else:
            why = (
                "binary"
                if all(e is not None and e[0] == "file" for e in (base, theirs, ours))
                else "changed since"
            )
            ex.clashes[p] = Clash(p, why)  # kept as it is with markers; refused without
    _structure(ex, a, b, o)
    return ex


def _text(ex: Expectation, p: str, base: Entry, ours: Entry, theirs: Entry, markers: bool) -> None:
    modes, mode_clash = _modes(ours[1], base[1], theirs[1])
    if ours[1] == theirs[1] != base[1]:
        ex.maybe.add(p)
    ob, bb, tb = ours[2], base[2], theirs[2]
    if ob in (bb, tb) or tb == bb:
        data = tb if ob == bb else ob
        if mode_clash:
            ex.clashes[p] = Clash(p, "mode changed on both sides")
            ex.maybe.add(p)  # what markers mode does with it is not said: any mode, or kept
            ex.want[p] = frozenset({ours, ("file", theirs[1], data)})
            return
        ex.want[p] = frozenset(("file", m, data) for m in modes)
        return
    rb, ro, rt = rows(bb), rows(ob), rows(tb)
    if rb is None or ro is None or rt is None or not len(rb) == len(ro) == len(rt):
        ex.loose[p] = (modes | {ours[1], theirs[1]} if mode_clash else modes, ob, tb, bb)
        ex.maybe.add(p)
        return
    lines, runs = merge_rows(rb, ro, rt)
    ex.rows_merged += 1
    if runs or mode_clash:
        all_modes = modes | {ours[1], theirs[1]} if mode_clash else modes
        ex.clashes[p] = Clash(
            p, "lines changed on both sides", runs, ("file", all_modes, lines) if runs else None
        )
        if not runs:
            ex.maybe.add(p)
            ex.want[p] = frozenset({ours} | {("file", m, b"".join(lines)) for m in all_modes})
        return
    ex.want[p] = frozenset(("file", m, b"".join(lines)) for m in modes)


def _structure(ex: Expectation, a: Snap, b: Snap, o: Snap) -> None:
    """A directory that must go but holds paths that stay is kept; a path that must be there
    under a parent that must not is beyond the model (may clash, either outcome)."""
    everything = a.keys() | b.keys() | o.keys()
    below: dict[str, list[str]] = {}
    for q in everything:
        r = parent(q)
        while r:
            below.setdefault(r, []).append(q)
            r = parent(r)
    for p in sorted(ex.want, key=depth, reverse=True):
        cur = o.get(p)
        if p == "." or None not in ex.want[p] or cur is None or cur[0] != "dir":
            continue
        stays = [q for q in below.get(p, []) if not ex.fits(q, None, False) or q in ex.clashes]
        if stays and p not in ex.maybe and all(not ex.fits(q, None, False) for q in stays):
            ex.want[p] = frozenset({cur})
            ex.kept_dirs.add(p)
        elif stays or any(ex.want.get(q, frozenset()) - {None} for q in below.get(p, [])):
            ex.want[p] = ex.want[p] | {cur}  # holds a path that may stay (one not judged): may stay
    for p in sorted(ex.want, key=depth):
        q = parent(p)
        if not q or p in ex.loose or ex.fits(p, None, False):
            continue
        up = ex.want.get(q, frozenset({o.get(q)}))
        if any(e is None or e[0] != "dir" for e in up):
            ex.maybe |= {p, q}
            ex.want[p] = ex.want[p] | {o.get(p)}
            ex.want[q] = up | {a.get(q), o.get(q)}


# == the reply ====================================================================================


def _path(p: object) -> str | None:
    if isinstance(p, dict) and "b64" in p:
        return os.fsdecode(base64.b64decode(p["b64"]))
    return p if isinstance(p, str) else None


@dataclass(frozen=True)
class RevertReply:
    """What a revert's ``--json`` reply says, wherever it says it (result, plan, error details)."""

    named: frozenset[str]
    conflicts: dict[str, list[dict[str, Any]]]
    markers: frozenset[str]
    planned: frozenset[str]
    message: str

    @staticmethod
    def parse(stdout: bytes) -> RevertReply:
        try:
            reply = json.loads(stdout)
        except ValueError:
            return RevertReply(frozenset(), {}, frozenset(), frozenset(), stdout.decode(errors="replace"))
        named: set[str] = set()
        conflicts: dict[str, list[dict[str, Any]]] = {}
        markers: set[str] = set()
        planned: set[str] = set()

        def walk(x: object, key: str) -> None:
            if isinstance(x, dict):
                p = _path(x.get("path"))
                if p is not None:
                    named.add(p)
                    if key == "conflicts":  # (listed in the error's details and in its revert)
                        seen = conflicts.setdefault(p, [])
                        seen += [h for h in x.get("hunks") or [] if isinstance(h, dict) and h not in seen]
                    if key == "ops":
                        planned.add(p)
                for k, v in x.items():
                    walk(v, k)
            elif isinstance(x, list):
                for item in x:
                    if key in ("markers", "merged") and (p := _path(item)) is not None:
                        named.add(p)
                        if key == "markers":
                            markers.add(p)
                    walk(item, key)

        walk(reply, "")
        err = reply.get("error") if isinstance(reply, dict) else None
        return RevertReply(
            frozenset(named),
            conflicts,
            frozenset(markers),
            frozenset(planned),
            json.dumps(err) if err else "",
        )

    def names(self, p: str) -> bool:
        return any(under(p, q) or under(q, p) for q in self.named)

    def lists_conflict(self, p: str) -> bool:
        return any(under(p, q) or under(q, p) for q in self.conflicts)


def _lines(xs: Iterable[Any]) -> tuple[bytes, ...]:
    return tuple(str(x).rstrip("\n").encode() for x in xs)


def hunks_fit(c: Clash, hunks: list[dict[str, Any]]) -> bool:
    """Do the reply's hunks for ``c`` say the runs the model predicts (lines, their index)?"""
    if not c.runs or not all(r.exact for r in c.runs):
        return True  # no prediction to hold them to
    got = sorted(
        (
            int(h.get("line", -1)),
            _lines(h.get("base", ())),
            _lines(h.get("ours", ())),
            _lines(h.get("theirs", ())),
        )
        for h in hunks
    )
    want = [
        (r.line, *(tuple(x.rstrip(b"\n") for x in side) for side in (r.base, r.ours, r.theirs)))
        for r in c.runs
    ]
    return len(got) == len(want) and all(
        g[0] in (w[0], w[0] + 1) and g[1:] == w[1:] for g, w in zip(got, want, strict=True)
    )


def judge(
    ex: Expectation, before: Snap, after: Snap, rc: int, reply: RevertReply, markers: bool
) -> tuple[str, str | None]:
    """How the revert ended (``exact``, ``refused``, ``loud``) and the broken promise, if any."""
    differ = sorted(
        p for p in before.keys() | after.keys() | ex.want.keys() if not ex.fits(p, after.get(p), markers)
    )
    unsure = ex.maybe | {p for p, c in ex.clashes.items() if c.marked is None and not markers}

    def diff(paths: Iterable[str]) -> str:
        return "\n".join(
            f"    {p}: got {show_entry(after.get(p))}, want {ex.shown(p)}" for p in list(paths)[:30]
        )

    if rc == 13:
        if after != before:
            changed = sorted(p for p in before.keys() | after.keys() if before.get(p) != after.get(p))
            return "refused", "revert exited 13 (refused) but wrote:\n" + "\n".join(
                f"    {p}: was {show_entry(before.get(p))}, now {show_entry(after.get(p))}"
                for p in changed[:30]
            )
        if markers and not ex.maybe:
            return (
                "refused",
                f"revert --conflicts=markers refused, with no path the model cannot merge: {reply.message}",
            )
        if not ex.clashes and not ex.maybe:
            return "refused", f"revert refused although the model merges every path: {reply.message}"
        strangers = [
            p
            for p in reply.conflicts
            if not any(under(p, q) or under(q, p) for q in ex.clashes.keys() | ex.maybe)
        ]
        if strangers:
            return "refused", f"revert refused over paths the model takes back cleanly: {strangers}"
        silent = [p for p in ex.clashes if not reply.lists_conflict(p)]
        if silent:
            return "refused", f"revert refused without listing the clashes {silent}: {reply.message[:800]}"
        for c in ex.clashes.values():
            if c.path in reply.conflicts and not hunks_fit(c, reply.conflicts[c.path]):
                want = [(r.line, r.base, r.ours, r.theirs) for r in c.runs]
                return (
                    "refused",
                    f"revert listed {c.path}'s hunks as {reply.conflicts[c.path]}, the model: {want}",
                )
        return "refused", None
    if rc not in (0, 10):
        return "failed", f"revert exited {rc}: {reply.message[:800]}"
    certain = sorted(ex.clashes.keys() - ex.maybe)
    # With markers, text clashes written with markers and listed under ``markers`` are not a
    # reason to exit 10 (docs/protocol.md: only the conflicts left as they are make it not ok).
    marked = {p for p in certain if markers and ex.clashes[p].marked is not None}
    unmarked = sorted(p for p in marked if p not in reply.markers)
    if rc == 0:
        if set(certain) - marked:
            return "exact", f"revert exited 0 though {sorted(set(certain) - marked)} clash:\n{diff(differ)}"
        if differ:
            return "exact", f"revert exited 0 but the tree is not the model:\n{diff(differ)}"
        if unmarked:
            return "exact", f"revert wrote markers in {unmarked} without listing them under markers"
        quiet = [p for p in ex.kept_dirs if not reply.names(p)]
        if quiet:
            return "exact", f"revert kept the directories {quiet} (they hold later paths) without naming them"
        return "exact", None
    silent = [p for p in differ if not reply.names(p)]
    if silent:
        return "loud", f"revert exited 10 without naming every path that differs; unnamed:\n{diff(silent)}"
    if not markers and certain:
        return "loud", f"revert exited 10 (not refused) though {certain} clash"
    if markers:
        if unmarked:
            return "loud", f"revert wrote markers in {unmarked} without listing them under markers"
        unkept = [p for p in certain if ex.clashes[p].marked is None and not reply.names(p)]
        if unkept:
            return "loud", f"revert left the clashes {unkept} as they are without naming them"
    if not differ and not set(certain) - marked and not unsure:
        return "loud", f"revert exited 10 although the tree is exactly the model: {reply.message[:800]}"
    return "loud", None
