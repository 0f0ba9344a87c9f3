"""Path arithmetic and snapd's own names (snapd/paths.py): pure, no I/O."""

from __future__ import annotations

import pytest

from snapd import paths
from snapd.errors import BadRequest, UsageError
from snapd.store import refs


def test_at_or_below_and_strictly_below_are_two_questions() -> None:
    assert paths.at_or_below(b"a", b"a") and not paths.strictly_below(b"a", b"a")
    assert paths.at_or_below(b"a/b", b"a") and paths.strictly_below(b"a/b", b"a")
    assert not paths.at_or_below(b"ab", b"a") and not paths.strictly_below(b"ab", b"a")
    assert not paths.at_or_below(b"a", b"a/b")
    assert paths.at_or_below(b"x/y", b"") and paths.strictly_below(b"x", b"")
    assert paths.at_or_below(b"", b"") and not paths.strictly_below(b"", b"")


def test_ancestors_and_join() -> None:
    assert paths.ancestors(b"a/b/c") == [b"a", b"a/b"]
    assert paths.ancestors(b"a") == []
    assert paths.join(b"", b"n") == b"n" and paths.join(b"a/b", b"n") == b"a/b/n"


def test_snapd_names() -> None:
    t = paths.temp_name()
    assert t.startswith(".snapd-") and t.endswith("~") and len(t) == len(".snapd-") + 12 + 1
    assert t != paths.temp_name()
    assert paths.is_snapd_name(t) and paths.is_snapd_name(t.encode())
    assert not paths.is_snapd_name(".snapd-x") and not paths.is_snapd_name(b"snapd-x~")
    assert not paths.is_snapd_name(b".snapd-x") and not paths.is_snapd_name("x.snapd-~")
    c = paths.cookie_name(42, 7)
    assert c == b".snapd-42-7~" and paths.is_cookie_name(c) and paths.is_snapd_name(c)
    for other in (b".snapd-42-7~x", b"x.snapd-42-7~", b".snapd-42~", b".snapd-a-7~", t.encode()):
        assert not paths.is_cookie_name(other), other


def test_paths_cross_the_wire_without_loss() -> None:
    for raw in (b"plain.txt", "é/ü".encode(), b"bad\xff\xfe", b"\x80"):
        assert paths.decode_path(paths.encode_path(raw)) == raw
    assert paths.encode_path(b"bad\xff") == {"b64": "YmFk/w=="}
    assert paths.encode_path(b"ok") == "ok"


@pytest.mark.parametrize(
    ("obj", "message"),
    [
        ("", "p is empty"),
        ("a\0b", "p contains a NUL byte"),
        ("\udcff", "p contains a lone surrogate"),
        ({"b64": "!!"}, "p: 'b64' is not valid base64"),
        ({"b64": "YQ==", "x": 1}, "p must be a string or {\"b64\": \"...\"}, got an object"),
        ({"b64": 1}, "got an object"),
        (None, "got null"),
        (True, "got a boolean"),
        (3, "got a number"),
        (1.5, "got a number"),
        ([], "got an array"),
    ],
)
def test_bad_paths_are_refused_with_what_is_wrong(obj: object, message: str) -> None:
    with pytest.raises(BadRequest) as err:
        paths.decode_path(obj, "p")
    assert message in err.value.message


def test_json_kind_of_a_string() -> None:
    assert paths.json_kind("s") == "a string"
    assert paths.json_kind({}) == "an object"


def test_the_limits_of_labels_and_references() -> None:
    assert refs.validate_label("x" * refs.MAX_LABEL)
    with pytest.raises(UsageError, match="at most 200 characters"):
        refs.validate_label("x" * (refs.MAX_LABEL + 1))
    with pytest.raises(UsageError, match="cannot be empty"):
        refs.validate_label("")
    assert refs.parse_ref("turn~999999").back == 999999
    with pytest.raises(UsageError, match="more marks back than any history holds"):
        refs.parse_ref("turn~1000000")
    with pytest.raises(UsageError, match="an empty mark reference"):
        refs.parse_ref("")
    assert refs.parse_ref("1abc") == refs.Ref("1abc", 0, True)  # MIN_PREFIX characters of an id
    assert refs.parse_ref("turn") == refs.Ref("turn", 0, False)
    with pytest.raises(UsageError, match="too short: give at least 4"):
        refs.parse_ref("1ab")


# Written to kill the mutants mutmut found surviving in store/refs.py (docs/reliability.md): what
# a person is told when a label or a reference is refused, word for word.
@pytest.mark.parametrize(
    "label, message",
    [
        ("", "a mark label cannot be empty"),
        ("a b", "mark label 'a b' contains whitespace or control characters"),
        (
            "@home",
            "mark label '@home' starts with '@', which is reserved for time references (@10m, @yesterday…)",
        ),
        ("a~b", "mark label 'a~b' contains '~', which references use for 'N before'"),
        (
            "1abc",
            "mark label '1abc' looks like a mark id: labels that start with a digit need another character, "
            "such as '-' or an upper-case letter",
        ),
    ],
)
def test_a_refused_label_says_why(label: str, message: str) -> None:
    with pytest.raises(UsageError) as info:
        refs.validate_label(label)
    assert info.value.message == message


def test_a_time_or_nothing_is_not_a_mark_reference() -> None:
    with pytest.raises(UsageError) as info:
        refs.parse_ref("@10m")
    assert info.value.message == (
        "@10m is a time, and this needs a mark (an id or a label): times are taken by rollback, diff and "
        "cat. A mark labelled with a leading @ before snapd reserved it is reached by its id (`snapctl log`)"
    )
    with pytest.raises(UsageError) as info:
        refs.parse_ref("")
    assert info.value.message == "an empty mark reference"
