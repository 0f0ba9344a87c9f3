"""Pure tests of the wire protocol: no sockets, no threads."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from snapd import paths
from snapd.display import shown
from snapd.errors import BadRequest, NotFound, ProtocolMismatch, from_wire
from snapd.ipc import protocol

pytestmark = pytest.mark.timeout(30)

MAX = 1 << 20


def raw(**fields: Any) -> bytes:
    base: dict[str, Any] = {"op": "ping", "id": "abc", "version": protocol.PROTOCOL_VERSION}
    base.update(fields)
    return json.dumps({k: v for k, v in base.items() if v is not ...}).encode()


def test_minimal_request_parses() -> None:
    req = protocol.parse_request(raw(), MAX)
    assert (req.op, req.id, req.version, req.args) == ("ping", "abc", 1, {})


def test_paths_arrive_as_bytes() -> None:
    req = protocol.parse_request(
        raw(op="mark", args={"label": "turn-start", "cwd": {"b64": "L3RtcC//"}}), MAX)
    assert req.args == {"label": "turn-start", "cwd": b"/tmp/\xff"}


@pytest.mark.parametrize(
    "data, fragment",
    [
        (b"not json", "not valid JSON"),
        (b"\xff\xfe", "not UTF-8"),
        (b"[1, 2]", "must be a JSON object, got an array"),
        (b'{"op": "ping", "op": "stop", "id": "a", "version": 1}', "duplicate key"),
        (b'{"op": "ping", "id": "a", "version": NaN}', "NaN is not valid JSON"),
        (raw(version=...), "'version' must be an integer"),
        (raw(version="1"), "'version' must be an integer"),
        (raw(version=True), "'version' must be an integer"),
        (raw(id=...), "'id' must be"),
        (raw(id=7), "'id' must be"),
        (raw(id=""), "'id' must be"),
        (raw(id="x" * 129), "'id' must be"),
        (raw(id="a\nb"), "'id' must be"),
        (raw(op=...), "'op' must be a string, got null"),
        (raw(op=["ping"]), "'op' must be a string, got an array"),
        (raw(op="frobnicate"), "unknown op 'frobnicate'"),
        (raw(args=[]), "'args' must be a JSON object"),
        (raw(extra=1), "unknown request field(s): extra"),
        (raw(op="mark", args={}), "mark: missing required argument 'label'"),
        (raw(op="mark", args={"label": 5}), "mark: argument 'label' must be a string, got a number"),
        (raw(op="log", args={"limit": "10"}), "log: argument 'limit' must be an integer"),
        (raw(op="log", args={"limit": True}), "log: argument 'limit' must be an integer"),
        (raw(op="gc", args={"dry_run": 1}), "gc: argument 'dry_run' must be a boolean"),
        (raw(op="ping", args={"x": 1}), "ping: unknown argument 'x' (accepted: none)"),
        (raw(op="watch", args={"path": 3}), "watch: argument 'path' must be a string or"),
        (raw(op="watch", args={"path": {"b64": "!!"}}), "not valid base64"),
        (raw(op="watch", args={"path": ""}), "is empty"),
        (raw(op="watch", args={"path": "a\u0000b"}), "NUL byte"),
        (raw(op="diff", args={"paths": "a"}), "must be an array of paths"),
        (raw(op="diff", args={"paths": ["a", 1]}), "argument 'paths'[1]"),
    ],
)
def test_bad_requests_say_what_is_wrong(data: bytes, fragment: str) -> None:
    with pytest.raises(BadRequest) as info:
        protocol.parse_request(data, MAX)
    assert fragment in info.value.message


def test_oversized_request_is_refused_before_parsing() -> None:
    with pytest.raises(BadRequest, match="exceeds the limit of 100 bytes"):
        protocol.parse_request(b" " * 101, 100)


def test_other_version_says_what_to_restart() -> None:
    with pytest.raises(ProtocolMismatch) as info:
        protocol.parse_request(raw(version=2, op="some-future-op"), MAX)
    assert info.value.message == (
        "daemon speaks protocol 1, client speaks 2: "
        "restart the daemon (snapd stop; snapd start) or upgrade the client")
    assert "upgrade the client" in protocol.mismatch_message(2, 1)


def test_null_optional_argument_counts_as_absent() -> None:
    req = protocol.parse_request(raw(op="log", args={"limit": None}), MAX)
    assert req.args == {}


def test_float_argument_accepts_integers() -> None:
    spec = protocol.Arg("float")
    assert protocol._check_arg("x", "n", spec, 3) == 3.0


def test_every_op_has_a_table_and_valid_kinds() -> None:
    assert set(protocol.OP_ARGS) == protocol.OPS
    for table in protocol.OP_ARGS.values():
        for arg in table.values():
            assert arg.kind in {"str", "int", "bool", "float", "path", "paths", "strs", "strmap", "run"}


def test_strmap_argument_is_an_object_of_strings() -> None:
    """The remote ops' ``credentials``: the client's AWS_* variables, name -> value."""
    req = protocol.parse_request(raw(op="push", args={"credentials": {"AWS_ACCESS_KEY_ID": "k"}}), MAX)
    assert req.args == {"credentials": {"AWS_ACCESS_KEY_ID": "k"}}
    for bad in ({"AWS_ACCESS_KEY_ID": 3}, ["AWS_ACCESS_KEY_ID=k"], "k"):
        with pytest.raises(BadRequest, match="must be an object of strings"):
            protocol.parse_request(raw(op="push", args={"credentials": bad}), MAX)


def test_salvage_id_for_error_replies() -> None:
    assert protocol.salvage_id(raw(op="nope", id="r1")) == "r1"
    assert protocol.salvage_id(b"garbage") is None
    assert protocol.salvage_id(b"[]") is None


def test_fingerprint_distinguishes_requests() -> None:
    a = protocol.parse_request(raw(op="mark", args={"label": "a"}), MAX)
    b = protocol.parse_request(raw(op="mark", args={"label": "b"}), MAX)
    assert a.fingerprint() != b.fingerprint()
    assert a.fingerprint() == protocol.parse_request(
        raw(op="mark", args={"label": "a"}), MAX).fingerprint()


def test_build_request_round_trips_through_parse() -> None:
    data = protocol.build_request("diff", "id1", {"paths": [b"ok", b"\xff"], "from": "m1"})
    req = protocol.parse_request(data, MAX)
    assert req.args == {"paths": [b"ok", b"\xff"], "from": "m1"}


def test_replies() -> None:
    assert protocol.ok_reply("i", marks=[]) == {
        "id": "i", "ok": True, "version": 1, "result": {"marks": []}}
    err = protocol.error_reply("i", NotFound("no mark m1", mark="m1"))
    assert err["ok"] is False
    again = from_wire(err["error"])
    assert isinstance(again, NotFound)
    assert (again.message, again.details) == ("no mark m1", {"mark": "m1"})


def test_encode_json_is_strict_and_compact() -> None:
    assert protocol.encode_json({"a": "é"}) == '{"a":"é"}'.encode()
    with pytest.raises(ValueError):
        protocol.encode_json(float("nan"))


def test_encode_path_prefers_strings() -> None:
    assert paths.encode_path(b"src/main.py") == "src/main.py"
    assert paths.encode_path(b"caf\xe9") == {"b64": "Y2Fm6Q=="}


def test_decode_path_rejects_lone_surrogates_and_other_shapes() -> None:
    with pytest.raises(BadRequest, match="lone surrogate"):
        paths.decode_path("a\udcff")
    bad: Any
    for bad in (None, 3, [], {"b64": 3}, {"b64": "", "x": 1}, {"hex": "00"}):
        with pytest.raises(BadRequest):
            paths.decode_path(bad)


@given(st.binary(min_size=1).filter(lambda b: b"\0" not in b))
def test_path_encoding_round_trips(path: bytes) -> None:
    wire = json.loads(json.dumps(paths.encode_path(path)))
    assert paths.decode_path(wire) == path


def test_display_path_escapes_undecodable_and_control_bytes() -> None:
    assert shown(b"caf\xc3\xa9") == "café"
    assert shown(b"caf\xe9") == "caf\\xe9"
    assert shown(b"a\nb\x1b[31m") == "a\\x0ab\\x1b[31m"


def test_text_with_a_lone_surrogate_is_a_bad_request() -> None:
    """Issue 8, point 14: JSON can spell a lone surrogate; it is refused, not an internal error."""
    data = b'{"op": "mark", "id": "a", "version": 1, "args": {"label": "m", "agent": "\\udcff"}}'
    with pytest.raises(BadRequest, match="argument 'agent' is not valid Unicode text"):
        protocol.parse_request(data, MAX)
    data = b'{"op": "show", "id": "a", "version": 1, "args": {"mark": "\\ud800x"}}'
    with pytest.raises(BadRequest, match="lone surrogate"):
        protocol.parse_request(data, MAX)


def test_error_replies_can_always_be_encoded() -> None:
    """A refusal that quotes a lone surrogate (an unknown op) still becomes a reply."""
    data = b'{"op": "\\udcff", "id": "a", "version": 1}'
    with pytest.raises(BadRequest) as info:
        protocol.parse_request(data, MAX)
    reply = json.loads(protocol.encode_error_reply("a", info.value))
    assert reply["id"] == "a" and reply["error"]["code"] == "bad_request"
    assert "\\udcff" in reply["error"]["details"]["op"]


def test_every_error_class_registers_itself_and_is_in_the_documented_table() -> None:
    """Errors register themselves when defined; docs/protocol.md's table names exactly those
    codes, each with its class's exit code."""
    import re
    from pathlib import Path

    from snapd import errors

    classes = [c for c in vars(errors).values() if isinstance(c, type) and issubclass(c, errors.SnapdError)]
    assert {c.code: c for c in classes} == errors.ALL_ERRORS
    assert all(c.__doc__ and "\n" not in c.__doc__.strip() for c in classes)
    doc = (Path(__file__).resolve().parent.parent / "docs" / "protocol.md").read_text()
    table = doc.split("## Errors", 1)[1].split("\n\n", 2)[1]
    documented: dict[str, int] = {}
    for row in table.splitlines()[2:]:
        cells = [c.strip() for c in row.strip("|").split("|")]
        for code in re.findall(r"`([a-z_]+)`", cells[0]):
            documented[code] = int(cells[-1])
    assert documented == {code: cls.exit_code for code, cls in errors.ALL_ERRORS.items()}


# Written to kill the mutants mutmut found surviving here (docs/reliability.md): the refusals'
# exact words and details, the size and id limits at their edges, the version hint both ways.


@pytest.mark.parametrize(
    "data, message, details",
    [
        (raw(version="1"), "'version' must be an integer, got a string", {}),
        (raw(args=[]), "'args' must be a JSON object, got an array", {}),
        (raw(extra=1, more=2), "unknown request field(s): extra, more", {}),
        (b"\xff", "request is not UTF-8 text", {}),
        (
            raw(op="forget", args={"x": 1}),
            "forget: unknown argument 'x' (accepted: cwd, dry_run, workspace); if the client is "
            "newer than the daemon, restart the daemon: snapd stop; snapd start",
            {"arg": "x"},
        ),
        (
            raw(op="frobnicate"),
            "unknown op 'frobnicate': this daemon does not have it (if the client is newer than "
            "the daemon, restart the daemon: snapd stop; snapd start)",
            {"op": "frobnicate"},
        ),
        (raw(op="mark", args={}), "mark: missing required argument 'label'", {"arg": "label"}),
        (
            raw(op="gc", args={"dry_run": 1}),
            "gc: argument 'dry_run' must be a boolean, got a number",
            {"arg": "dry_run"},
        ),
        (
            raw(op="mark", args={"label": "m", "late_after_s": "soon"}),
            "mark: argument 'late_after_s' must be a number, got a string",
            {"arg": "late_after_s"},
        ),
        (
            raw(op="mark", args={"label": "m", "late_after_s": True}),
            "mark: argument 'late_after_s' must be a number, got a boolean",
            {"arg": "late_after_s"},
        ),
    ],
)
def test_refusals_word_for_word(data: bytes, message: str, details: dict[str, Any]) -> None:
    with pytest.raises(BadRequest) as info:
        protocol.parse_request(data, MAX)
    assert (info.value.message, info.value.details) == (message, details)


def test_limits_at_their_edges() -> None:
    data = raw()
    assert protocol.parse_request(data, len(data)).op == "ping"  # exactly the limit: accepted
    longest = "x" * protocol.MAX_ID_LENGTH
    assert protocol.parse_request(raw(id=longest), MAX).id == longest
    assert protocol.salvage_id(raw(id=longest)) == longest
    assert protocol.salvage_id(raw(id=longest + "x")) is None and protocol.salvage_id(raw(id=7)) is None


def test_a_number_argument_arrives_as_a_float() -> None:
    req = protocol.parse_request(raw(op="mark", args={"label": "m", "late_after_s": 3}), MAX)
    assert req.args["late_after_s"] == 3.0 and isinstance(req.args["late_after_s"], float)


def test_the_version_hint_says_which_side_is_older() -> None:
    with pytest.raises(ProtocolMismatch) as info:
        protocol.parse_request(raw(version=2), MAX)
    assert info.value.details == {"daemon": 1, "client": 2}
    assert protocol.mismatch_message(2, 1) == (
        "daemon speaks protocol 2, client speaks 1: "
        "upgrade the client, or restart the daemon from the matching version"
    )
    assert protocol.mismatch_message(None, 2).endswith("restart the daemon from the matching version")


def test_error_replies_carry_the_version_and_escape_surrogates_in_lists() -> None:
    err = BadRequest("bad", paths=["ok", "\udcff"])
    assert protocol.error_reply("i", err) == {"id": "i", "ok": False, "version": 1, "error": err.to_wire()}
    reply = json.loads(protocol.encode_error_reply("i", err))
    assert reply["error"]["details"]["paths"] == ["ok", "\\udcff"]
