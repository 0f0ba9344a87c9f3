"""The one function that renders text for people (issue 8, point 17): pure tests."""

from __future__ import annotations

import os

import pytest
from hypothesis import given
from hypothesis import strategies as st

from snapd.display import count, shown
from snapd.rollback.ops import Op

pytestmark = pytest.mark.timeout(30)


def test_control_bytes_and_undecodable_bytes_are_escaped() -> None:
    assert shown(b"caf\xc3\xa9") == "café"
    assert shown(b"caf\xe9") == "caf\\xe9"
    assert shown("a\x1b]0;title\x07b\r\n") == "a\\x1b]0;title\\x07b\\x0d\\x0a"
    assert shown(os.fsdecode(b"x\xff")) == "x\\xff"  # what os.fsdecode made of a bad byte
    assert shown("rtl\u202eexe.txt") == "rtl\\u202eexe.txt"
    assert shown("c1\u009b31m") == "c1\\u009b31m"
    assert shown("a\tb") == "a\\x09b" and shown("a\tb", tabs=True) == "a\tb"
    assert shown("👍‍👍 ü") == "👍‍👍 ü"  # printable text (a zero-width joiner too) is left alone


@given(st.one_of(st.binary(max_size=40), st.text(max_size=40)))
def test_shown_text_is_inert_and_idempotent(value: str | bytes) -> None:
    out = shown(value)
    assert not any(ord(c) < 0x20 or 0x7F <= ord(c) < 0xA0 or 0xD800 <= ord(c) <= 0xDFFF for c in out)
    out.encode("utf-8")
    assert shown(out) == out


def test_rollback_plan_lines_use_it() -> None:
    op = Op("remove", b"evil\x1b[2J.txt", None, None)
    assert op.describe() == "delete evil\\x1b[2J.txt"


def test_counts_agree_with_their_nouns() -> None:
    assert count(1, "file") == "1 file" and count(2, "file") == "2 files" and count(0, "mark") == "0 marks"
    assert count(3, "directory", "directories") == "3 directories"
    assert count(1.0, "day") == "1 day" and count(0.5, "day") == "0.5 days"
    assert count(14.0, "day") == "14 days"


@pytest.mark.parametrize(
    ("char", "want"),
    [
        ("\x1f", "\\x1f"),  # the last C0 control
        (" ", " "),  # the first printable one
        ("~", "~"),
        ("\x7f", "\\x7f"),  # DEL
        ("\x80", "\\u0080"),  # C1, first and last
        ("\x9f", "\\u009f"),
        ("\xa0", "\xa0"),  # NBSP is text
        ("\u200e", "\\u200e"),  # bidi marks, embeddings, isolates: escaped
        ("\u202a", "\\u202a"),
        ("\u202e", "\\u202e"),
        ("\u202f", "\u202f"),
        ("\u2066", "\\u2066"),
        ("\u2069", "\\u2069"),
        ("\u206a", "\u206a"),
        ("\ud7ff", "\ud7ff"),
        ("\ud800", "\\ud800"),  # lone surrogates, first and last
        ("\udc7f", "\\udc7f"),
        ("\udc80", "\\x80"),  # a byte os.fsdecode could not decode, first and last
        ("\udcff", "\\xff"),
        ("\udd00", "\\udd00"),
        ("\udfff", "\\udfff"),
        ("\ue000", "\ue000"),
    ],
)
def test_the_edges_of_each_escaped_range(char: str, want: str) -> None:
    assert shown("a" + char) == "a" + want
