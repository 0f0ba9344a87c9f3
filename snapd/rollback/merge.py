"""Three-way merge of text files, for a revert (pure: bytes in, bytes out).

A revert takes a span's change back (base = the file as the span left it, theirs = as it was
before the span) on top of what is there now (ours), keeping the later edits: base->theirs
applied onto ours, line by line, with ``merge3`` (the merge bzr and breezy use). Lines keep
their endings, so CRLF files, mixed endings and a missing final newline come out exactly as
the inputs had them wherever no conflict is written.

What counts as text is :func:`text_lines`, the one rule (``snapctl diff`` uses it too): UTF-8
with no NUL byte, at most :data:`MAX_TEXT` bytes. Lines end at ``\\n`` only (git's rule), so a
lone ``\\r`` or a form feed stays inside its line.
"""

from __future__ import annotations

import bisect
import difflib
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from merge3 import Merge3

MAX_TEXT = 1 << 20


def text_lines(data: bytes) -> list[bytes] | None:
    """``data`` as lines, each with its ending (the last may have none); None: not text."""
    if b"\0" in data or len(data) > MAX_TEXT:
        return None
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return None
    lines = data.split(b"\n")
    out = [line + b"\n" for line in lines[:-1]]
    if lines[-1]:
        out.append(lines[-1])
    return out


@dataclass(frozen=True, slots=True)
class Hunk:
    """One place where ours and theirs both changed base's lines, differently. ``line``: where
    it starts in ours, from 1 (an empty ``ours``: the line it would come before)."""

    line: int
    base: tuple[bytes, ...]
    ours: tuple[bytes, ...]
    theirs: tuple[bytes, ...]


@dataclass(frozen=True, slots=True)
class Merged:
    """A merge's result. ``data`` None: there were conflicts and no markers were asked for;
    with markers, ``data`` holds them and ``hunks`` still lists every conflict."""

    data: bytes | None
    hunks: tuple[Hunk, ...]


Block = tuple[int, int, int]  # a[i:i+n] == b[j:j+n]
SMALL = 1 << 18
"""Ranges whose sizes multiply to at most this are matched by difflib alone (its cost grows
with that product where lines repeat: 12,000 lines of a brace-heavy file took 7 s)."""


class _Matcher:
    """The matching lines of two texts, as merge3 asks for them (difflib's interface).

    Common first and last lines are matched outright; lines found once on each side anchor
    the rest (patience diff: the longest run of such lines in the same order); difflib
    matches what lies between the anchors, without its "popular lines are junk" heuristic,
    which in a file of more than 200 lines never starts a match at a blank line or a lone
    ``}`` and turns clean merges into conflicts. A range too big for difflib with no anchor
    in it (thousands of lines, each line there many times) is left unmatched: a conflict if
    both sides changed it. A poorer match means more conflicts, never a wrong merge (merge3
    compares the lines themselves), and the time stays bounded: a revert holds the lock.
    """

    def __init__(
        self,
        isjunk: Callable[[bytes], bool] | None = None,
        a: Sequence[bytes] = (),
        b: Sequence[bytes] = (),
        autojunk: bool = False,
    ) -> None:
        self.a, self.b = a, b

    def get_matching_blocks(self) -> list[Block]:
        found: list[Block] = []
        self._match(0, len(self.a), 0, len(self.b), found)
        blocks: list[Block] = []
        for i, j, n in found:
            if blocks and blocks[-1][0] + blocks[-1][2] == i and blocks[-1][1] + blocks[-1][2] == j:
                blocks[-1] = (blocks[-1][0], blocks[-1][1], blocks[-1][2] + n)
            elif n:
                blocks.append((i, j, n))
        return [*blocks, (len(self.a), len(self.b), 0)]

    def _match(self, alo: int, ahi: int, blo: int, bhi: int, out: list[Block]) -> None:
        a, b = self.a, self.b
        head = 0
        while alo + head < ahi and blo + head < bhi and a[alo + head] == b[blo + head]:
            head += 1
        out.append((alo, blo, head))
        alo, blo = alo + head, blo + head
        tail = 0
        while ahi - tail > alo and bhi - tail > blo and a[ahi - tail - 1] == b[bhi - tail - 1]:
            tail += 1
        ahi, bhi = ahi - tail, bhi - tail
        if alo < ahi and blo < bhi:
            anchors = [] if (ahi - alo) * (bhi - blo) <= SMALL else self._anchors(alo, ahi, blo, bhi)
            if anchors:
                for i, j in anchors:
                    self._match(alo, i, blo, j, out)
                    out.append((i, j, 1))
                    alo, blo = i + 1, j + 1
                self._match(alo, ahi, blo, bhi, out)
            elif (ahi - alo) * (bhi - blo) <= SMALL:
                m = difflib.SequenceMatcher(None, a[alo:ahi], b[blo:bhi], autojunk=False)
                out.extend((alo + i, blo + j, n) for i, j, n in m.get_matching_blocks())
        out.append((ahi, bhi, tail))

    def _anchors(self, alo: int, ahi: int, blo: int, bhi: int) -> list[tuple[int, int]]:
        """Lines found once in a[alo:ahi] and once in b[blo:bhi]: the longest run of them in
        the same order on both sides, as (i, j) pairs."""
        seen: dict[bytes, list[int]] = {}
        for i in range(alo, ahi):
            seen.setdefault(self.a[i], [0, 0, i, 0])[0] += 1
        for j in range(blo, bhi):
            c = seen.get(self.b[j])
            if c is not None:
                c[1] += 1
                c[3] = j
        pairs = sorted((c[2], c[3]) for c in seen.values() if c[0] == 1 and c[1] == 1)
        # the longest increasing run of j (patience sorting: piles' tops, each pair's back link)
        tops: list[int] = []
        back: list[int] = []
        for k, (_, j) in enumerate(pairs):
            pile = bisect.bisect_left(tops, j, key=lambda t: pairs[t][1])
            back.append(tops[pile - 1] if pile else -1)
            if pile == len(tops):
                tops.append(k)
            else:
                tops[pile] = k
        run: list[tuple[int, int]] = []
        k = tops[-1] if tops else -1
        while k >= 0:
            run.append(pairs[k])
            k = back[k]
        return run[::-1]


def merge(base: bytes, ours: bytes, theirs: bytes, *, markers: bool, names: tuple[str, str, str]) -> Merged:
    """Apply base->theirs onto ours. ``names``: (ours, base, theirs) as the markers name them.

    All three must be text (:func:`text_lines`; ValueError otherwise). With ``markers``, each
    conflict is written diff3-style (``<<<<<<<`` ours ``|||||||`` base ``=======`` theirs
    ``>>>>>>>``) in ours' line ending; a conflict's last line that has no ending gets one, so
    each marker stands on a line of its own (as git does).
    """
    b, o, t = text_lines(base), text_lines(ours), text_lines(theirs)
    if b is None or o is None or t is None:
        raise ValueError("merge: not text")
    m = Merge3(b, o, t, sequence_matcher=_Matcher)
    out: list[bytes] = []
    hunks: list[Hunk] = []
    eol = b"\r\n" if o and o[0].endswith(b"\r\n") else b"\n"
    for region in m.merge_regions():
        what = region[0]
        if what == "unchanged":
            out.extend(b[region[1] : region[2]])
        elif what in ("a", "same"):
            out.extend(o[region[1] : region[2]])
        elif what == "b":
            out.extend(t[region[1] : region[2]])
        else:
            _, zs, ze, os_, oe, ts, te = region  # type: ignore[misc]
            hunk = Hunk(os_ + 1, tuple(b[zs:ze]), tuple(o[os_:oe]), tuple(t[ts:te]))
            hunks.append(hunk)
            if markers:
                out.extend(_marked(hunk, names, eol))
    if hunks and not markers:
        return Merged(None, tuple(hunks))
    return Merged(b"".join(out), tuple(hunks))


def _marked(hunk: Hunk, names: tuple[str, str, str], eol: bytes) -> list[bytes]:
    ours_name, base_name, theirs_name = (
        " ".join(n.split()).encode("utf-8", "surrogateescape") for n in names
    )
    out = [b"<<<<<<< " + ours_name + eol]
    out += _ended(hunk.ours, eol)
    out.append(b"||||||| " + base_name + eol)
    out += _ended(hunk.base, eol)
    out.append(b"=======" + eol)
    out += _ended(hunk.theirs, eol)
    out.append(b">>>>>>> " + theirs_name + eol)
    return out


def _ended(lines: Sequence[bytes], eol: bytes) -> list[bytes]:
    out = list(lines)
    if out and not out[-1].endswith(b"\n"):
        out[-1] += eol
    return out
