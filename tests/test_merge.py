"""The three-way text merge of a revert (snapd/rollback/merge.py): the text rule, edits that do
not overlap both kept, ours == base giving theirs, conflicts as hunks or as diff3 markers, line
endings and a missing final newline kept exactly. Pure: no I/O."""

from __future__ import annotations

import random
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from snapd.daemon.textdiff import file_diff
from snapd.rollback.merge import MAX_TEXT, Hunk, Merged, merge, text_lines

pytestmark = pytest.mark.timeout(120)

NAMES = ("now", "B", "A")


def test_text_lines_keep_every_byte() -> None:
    assert text_lines(b"") == []
    assert text_lines(b"a\r\nb\nc") == [b"a\r\n", b"b\n", b"c"]
    assert text_lines(b"a\rb\x0cc\n") == [b"a\rb\x0cc\n"]  # lines end at \n alone
    assert text_lines("é\n".encode()) == ["é\n".encode()]
    assert text_lines(b"a\0b") is None
    assert text_lines(b"\xff\n") is None
    assert text_lines(b"x" * MAX_TEXT) is not None
    assert text_lines(b"x" * (MAX_TEXT + 1)) is None


def test_snapctl_diff_uses_the_same_rule() -> None:
    """A lone \\r is inside a line for the diff too (str.splitlines would break there)."""
    got = file_diff(b"f", "modified", b"a\rb\n", b"a\rc\n")
    assert got["binary"] is False and got["removed"] == 1 and got["added"] == 1
    assert file_diff(b"f", "modified", b"x" * (MAX_TEXT + 1), b"y")["binary"] is True


def test_non_text_is_refused() -> None:
    with pytest.raises(ValueError):
        merge(b"a\n", b"\0", b"b\n", markers=False, names=NAMES)


def test_overlap_is_a_hunk_numbered_in_ours() -> None:
    base = b"1\n2\n3\n4\n"
    ours = b"0\n1\n2\nOURS\n4\n"
    theirs = b"1\n2\nTHEIRS\n4\n"
    got = merge(base, ours, theirs, markers=False, names=NAMES)
    assert got.data is None
    assert got.hunks == (Hunk(4, (b"3\n",), (b"OURS\n",), (b"THEIRS\n",)),)


def test_markers_are_diff3_style_in_the_files_line_ending() -> None:
    base = b"a\r\nb\r\nc\r\n"
    got = merge(base, b"a\r\nX\r\nc\r\n", b"a\r\nY\r\nc\r\n", markers=True, names=("now", "m2", "m1"))
    assert got.data == (b"a\r\n<<<<<<< now\r\nX\r\n||||||| m2\r\nb\r\n=======\r\nY\r\n>>>>>>> m1\r\nc\r\n")
    assert len(got.hunks) == 1
    named = merge(base, b"a\r\nX\r\nc\r\n", b"a\r\nY\r\nc\r\n", markers=True, names=("now", "m\n2", "m\r1"))
    assert named.data is not None and b"||||||| m 2\r\n" in named.data and b">>>>>>> m 1\r\n" in named.data


def test_blank_lines_in_a_long_file_do_not_make_conflicts() -> None:
    """difflib's default treats lines found in more than 1% of 200 or more as junk: no match
    starts at one. Between ours' two edits lie 400 such lines, so ours' side would count them
    all changed, and theirs' edit among them, far from both, would clash."""
    block = b"".join(b"line %d\n\n}\n" % i for i in range(150))
    middle = [b"}\n", b"\n"] * 200
    noted = list(middle)
    noted[200] = b"// note\n"
    base = block + b"X\n" + b"".join(middle) + b"Z\n" + block
    ours = block + b"X2\n" + b"".join(middle) + b"Z2\n" + block
    theirs = block + b"X\n" + b"".join(noted) + b"Z\n" + block
    got = merge(base, ours, theirs, markers=False, names=NAMES)
    assert got.hunks == ()
    assert got.data == block + b"X2\n" + b"".join(noted) + b"Z2\n" + block


def test_lines_found_once_anchor_a_long_merge() -> None:
    """Too long for difflib alone: the lines found once on each side match the rest, so
    edits far apart merge."""
    base = [b"statement %d;\n" % i for i in range(3000)]
    ours, theirs, both = list(base), list(base), list(base)
    for k in (100, 2900):
        ours[k] = both[k] = b"ours %d;\n" % k
    theirs[1500] = both[1500] = b"theirs;\n"
    del ours[700], both[700]
    got = merge(b"".join(base), b"".join(ours), b"".join(theirs), markers=False, names=NAMES)
    assert got.hunks == () and got.data == b"".join(both)


@pytest.mark.timeout(60)
def test_a_megabyte_of_repeated_lines_merges_in_bounded_time() -> None:
    """60,000 lines from a vocabulary of 100: no line anchors anything, and difflib over the
    span of each side's edits would take minutes (its cost grows with lines x repeats). That
    span is left unmatched: edits in two halves still merge; interleaved ones clash."""
    rnd = random.Random(34)
    vocab = [b"    stmt_%d;\n" % i for i in range(100)]
    base = [rnd.choice(vocab) for _ in range(60000)]
    ours, theirs, both = list(base), list(base), list(base)
    for k in range(20):
        ours[k * 1000 + 7] = both[k * 1000 + 7] = b"ours %d\n" % k
        theirs[40000 + k * 1000] = both[40000 + k * 1000] = b"theirs %d\n" % k
    started = time.monotonic()
    got = merge(b"".join(base), b"".join(ours), b"".join(theirs), markers=False, names=NAMES)
    assert got.hunks == () and got.data == b"".join(both)
    theirs[10000] = b"theirs inside ours' span\n"
    got = merge(b"".join(base), b"".join(ours), b"".join(theirs), markers=False, names=NAMES)
    assert len(got.hunks) == 1 and got.data is None
    assert time.monotonic() - started < 20


@pytest.mark.timeout(60)
def test_a_megabyte_of_distinct_lines_merges_in_bounded_time() -> None:
    """30,000 lines found once each, 3,000 edits: the anchors are the longest run in order,
    found in one pass (an anchor a pass would recurse an edit deep)."""
    base = [b"value_%d = compute(%d)\n" % (i, i) for i in range(30000)]
    ours, theirs, both = list(base), list(base), list(base)
    for k in range(0, 30000, 20):
        ours[k] = both[k] = b"ours %d\n" % k
        theirs[k + 10] = both[k + 10] = b"theirs %d\n" % k
    ours[5000], ours[25000] = ours[25000], ours[5000]  # a moved line anchors nothing
    both[5000], both[25000] = both[25000], both[5000]
    started = time.monotonic()
    got = merge(b"".join(base), b"".join(ours), b"".join(theirs), markers=False, names=NAMES)
    assert got.hunks == () and got.data == b"".join(both)
    assert time.monotonic() - started < 20


endings = st.sampled_from([b"\n", b"\r\n"])


@st.composite
def edit_pair(draw: st.DrawFn) -> tuple[list[bytes], list[bytes], list[bytes], list[bytes]]:
    """Base lines and two edits of it with at least one untouched line between them (merge3,
    like diff3, counts edits of adjacent lines as overlapping): ours edits the first range,
    theirs the second, or the other way round. Returns base, ours, theirs, expected."""
    n = draw(st.integers(1, 12))
    last_open = draw(st.booleans())  # the last line has no ending
    base = [b"base %d" % i + draw(endings) for i in range(n)]
    if last_open:
        base[-1] = base[-1].rstrip(b"\r\n")
    s1 = draw(st.integers(0, n - 1))
    e1 = draw(st.integers(s1, n - 1))
    s2 = draw(st.integers(e1 + 1, n))
    e2 = draw(st.integers(s2, n))
    news = []
    for who, (s, e) in (("one", (s1, e1)), ("two", (s2, e2))):
        lines = [b"%s %d" % (who.encode(), i) + draw(endings) for i in range(draw(st.integers(0, 3)))]
        if last_open and e == n and lines:
            lines[-1] = lines[-1].rstrip(b"\r\n")
        if last_open and s == e == n:
            lines = []  # nothing can follow a last line that has no ending
        news.append(lines)
    one = base[:s1] + news[0] + base[e1:]
    two = base[:s2] + news[1] + base[e2:]
    both = base[:s1] + news[0] + base[e1:s2] + news[1] + base[e2:]
    if draw(st.booleans()):
        return base, one, two, both
    return base, two, one, both


@settings(max_examples=300, deadline=None)
@given(edit_pair(), st.booleans())
def test_edits_that_do_not_overlap_are_both_kept(
    case: tuple[list[bytes], list[bytes], list[bytes], list[bytes]], markers: bool
) -> None:
    base, ours, theirs, both = case
    got = merge(b"".join(base), b"".join(ours), b"".join(theirs), markers=markers, names=NAMES)
    assert got.hunks == ()
    assert got.data == b"".join(both)


texts = st.lists(
    st.sampled_from([b"a", b"b", b"c", b"", b"\xc3\xa9"]).flatmap(
        lambda word: endings.map(lambda end: word + end)
    ),
    max_size=12,
).flatmap(lambda lines: st.booleans().map(lambda open_: _close(lines, open_)))


def _close(lines: list[bytes], open_: bool) -> bytes:
    text = b"".join(lines)
    return text.rstrip(b"\r\n") if open_ else text


@settings(max_examples=300, deadline=None)
@given(texts, texts)
def test_one_side_unchanged_gives_the_other_exactly(base: bytes, other: bytes) -> None:
    """Repeated lines, blank lines, CRLF, no final newline: nothing to merge, nothing lost."""
    for markers in (False, True):
        assert merge(base, base, other, markers=markers, names=NAMES) == Merged(other, ())
        assert merge(base, other, base, markers=markers, names=NAMES) == Merged(other, ())


def _sides(marked: bytes) -> tuple[bytes, bytes, bytes]:
    """The ours, base and theirs texts a diff3-marked file holds (a reader of the markers)."""
    out: dict[str, list[bytes]] = {"ours": [], "base": [], "theirs": []}
    where = ("ours", "base", "theirs")
    lines = text_lines(marked)
    assert lines is not None
    for line in lines:
        bare = line.rstrip(b"\r\n")
        if bare == b"<<<<<<< now":
            where = ("ours",)
        elif bare == b"||||||| B":
            where = ("base",)
        elif bare == b"=======":
            where = ("theirs",)
        elif bare == b">>>>>>> A":
            where = ("ours", "base", "theirs")
        else:
            for side in where:
                out[side].append(line)
    return b"".join(out["ours"]), b"".join(out["base"]), b"".join(out["theirs"])


@st.composite
def clash(draw: st.DrawFn) -> tuple[bytes, bytes, bytes, bool]:
    """Three texts that differ in one place: base's X, ours' Y, theirs' Z between the same
    head and tail; any line may end in CRLF, the last one may have no ending. The flag: that
    last line with no ending lies inside the conflict."""

    def lines(tag: bytes, lo: int) -> list[bytes]:
        return [tag + b"%d" % i + draw(endings) for i in range(draw(st.integers(lo, 3)))]

    head, tail = lines(b"p", 0), lines(b"s", 0)
    x, y, z = lines(b"x", 0), lines(b"y", 1), lines(b"z", 1)
    open_ = draw(st.booleans())
    made = []
    for middle in (x, y, z):
        text = b"".join(head + middle + tail)
        made.append(text.rstrip(b"\r\n") if open_ and (tail or middle) else text)
    return made[0], made[1], made[2], open_ and not tail


@settings(max_examples=300, deadline=None)
@given(clash())
def test_markers_round_trip(case: tuple[bytes, bytes, bytes, bool]) -> None:
    """Reading the markers back gives ours, base and theirs, byte for byte (a last line with
    no ending inside a conflict gets one, as git writes it: the marker needs a line)."""
    base, ours, theirs, open_inside = case
    got = merge(base, ours, theirs, markers=True, names=NAMES)
    refused = merge(base, ours, theirs, markers=False, names=NAMES)
    assert got.data is not None and len(got.hunks) == 1
    assert refused.data is None and refused.hunks == got.hunks
    first = (text_lines(ours) or [b""])[0]
    eol = b"\r\n" if first.endswith(b"\r\n") else b"\n"
    for text, side in zip((ours, base, theirs), _sides(got.data), strict=True):
        grows = open_inside and bool(text) and not text.endswith(b"\n")
        assert side == (text + eol if grows else text)
