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

import difflib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, cast

from merge3 import Merge3, SequenceMatcherProtocol

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


class _Matcher(difflib.SequenceMatcher[bytes]):
    """difflib's matcher without its "popular lines are junk" heuristic: in a file of more
    than 200 lines it would never match a blank line or a lone ``}``, turning clean merges
    into conflicts."""

    def __init__(
        self, isjunk: Callable[[bytes], bool] | None = None, a: Any = (), b: Any = (), autojunk: bool = False
    ) -> None:
        super().__init__(isjunk, a, b, autojunk=False)


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
    # difflib's matching blocks are a list of named tuples, which merge3's protocol types as
    # plain tuples: the same thing at run time
    m = Merge3(b, o, t, sequence_matcher=cast("type[SequenceMatcherProtocol[bytes]]", _Matcher))
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
    ours_name, base_name, theirs_name = (n.encode("utf-8", "surrogateescape") for n in names)
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
