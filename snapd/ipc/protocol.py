"""The wire protocol between clients and the daemon, as pure functions over bytes and dicts.

No sockets here: the server and the client move bytes, this module decides what they mean, so
every rule (size limit, version, argument types, path encoding) is testable without ZeroMQ.
docs/protocol.md is the specification; keep the two in step.

Invariants: a request that ``parse_request`` returns has a known op, an id, the current
version and arguments of the declared types (paths already decoded to ``bytes``); anything
else raises ``BadRequest`` or ``ProtocolMismatch`` with a message meant for a person.
Within a version the protocol only grows (ops, optional arguments, reply fields), so an
older client always works with a newer daemon, and a newer client meets an older daemon's
``bad_request`` naming what it lacks — never a silently ignored argument.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Literal, NamedTuple, get_args

from snapd.errors import BadRequest, ProtocolMismatch, SnapdError
from snapd.paths import decode_path, encode_path, json_kind

#: Changes only when a change is incompatible (docs/protocol.md, "Versions and additions"):
#: new ops, new optional arguments and new reply fields keep it. A client learns which ops
#: and arguments a daemon has from ``ping`` (:func:`capabilities`).
PROTOCOL_VERSION = 1
MAX_ID_LENGTH = 128
#: What a refusal of an op or argument the daemon lacks adds: the likely cause is a client
#: newer than the daemon (an upgrade while the old daemon kept running).
NEWER_CLIENT = "if the client is newer than the daemon, restart the daemon: snapd stop; snapd start"

Op = Literal[
    "ping", "status", "stop", "watch", "unwatch", "forget", "mark", "log", "show", "verify",
    "gc", "pin", "unpin", "rollback_plan", "rollback_apply", "undo", "diff", "cat", "history", "restore",
    "remote_add", "remote_list", "remote_remove", "remote_log", "remote_prune", "remote_passwd", "push",
    "remote_verify", "revert_plan", "revert_apply",
]
OPS: frozenset[str] = frozenset(get_args(Op))

ArgKind = Literal["str", "int", "bool", "float", "path", "paths", "strs", "strmap", "run"]


class Arg(NamedTuple):
    """One declared argument of an op."""

    kind: ArgKind
    required: bool = False


# Most ops act on "the workspace": named by ``workspace``, else found from the caller's
# ``cwd`` (the enclosing watched root). The daemon, not the client, resolves it. Ops that take
# a mark reference also take ``session``: a label then means that session's newest mark.
_WHERE = {"workspace": Arg("path"), "cwd": Arg("path")}
_REF = {**_WHERE, "session": Arg("str")}
# What a remote op needs to reach and open a repository (docs/remote.md): the repository
# password and the client's AWS_* environment (``credentials``: name -> value). Both may be
# absent: the daemon then uses its own environment, the remote's password_file, or what a
# client sent earlier for that remote (kept in memory only). Neither is ever logged or stored.
_SECRETS = {"password": Arg("str"), "credentials": Arg("strmap")}
_REMOTE = {"name": Arg("str", required=True), **_SECRETS}
_REVERT = {
    **_WHERE, "from": Arg("str"), "to": Arg("str"), "turn": Arg("str"), "session": Arg("str"),
    "since": Arg("str"), "paths": Arg("paths"), "conflicts": Arg("str"), "force": Arg("bool"),
}

OP_ARGS: dict[str, dict[str, Arg]] = {
    "ping": {},
    "status": {},
    "stop": {},
    "watch": {"path": Arg("path", required=True)},
    "unwatch": {**_WHERE},
    "forget": {**_WHERE, "dry_run": Arg("bool")},
    "mark": {
        **_WHERE, "label": Arg("str", required=True), "message": Arg("str"),
        "agent": Arg("str"), "session": Arg("str"), "register": Arg("bool"),
        "late_after_s": Arg("float"), "interrupted": Arg("bool"), "run": Arg("run"),
    },
    "log": {
        **_WHERE, "limit": Arg("int"), "agent": Arg("str"), "session": Arg("str"),
        "all": Arg("bool"), "before": Arg("str"), "path": Arg("path"),
    },
    "show": {**_REF, "mark": Arg("str", required=True)},
    "verify": {"full": Arg("bool")},
    "gc": {"dry_run": Arg("bool")},
    "pin": {**_REF, "mark": Arg("str", required=True)},
    "unpin": {**_REF, "mark": Arg("str", required=True)},
    "restore": {
        **_REF, "mark": Arg("str", required=True), "target": Arg("path", required=True),
        "from_remote": Arg("str"), "host": Arg("str"), **_SECRETS,
    },
    "rollback_plan": {
        **_REF, "to": Arg("str"), "undo": Arg("bool"), "paths": Arg("paths"), "force": Arg("bool"),
    },
    "rollback_apply": {
        **_REF, "to": Arg("str"), "undo": Arg("bool"), "paths": Arg("paths"), "force": Arg("bool"),
        "token": Arg("str"),
    },
    "undo": {**_WHERE, "force": Arg("bool"), "token": Arg("str")},
    # what a revert takes back: from..to (marks or times; no to: up to now), a turn, or a session's turns
    "revert_plan": {**_REVERT},
    "revert_apply": {**_REVERT, "token": Arg("str")},
    "diff": {
        **_REF, "from": Arg("str"), "to": Arg("str"), "paths": Arg("paths"),
        "stat": Arg("bool"),
    },
    "cat": {**_REF, "path": Arg("path", required=True), "at": Arg("str")},
    "history": {**_WHERE, "path": Arg("path", required=True)},
    "remote_add": {
        **_REMOTE, "url": Arg("str", required=True), "endpoint": Arg("str"), "region": Arg("str"),
        "profile": Arg("str"), "password_file": Arg("path"), "push": Arg("str"),
    },
    "remote_list": {},
    "remote_remove": {"name": Arg("str", required=True)},
    "remote_log": {**_REMOTE, "host": Arg("str"), "workspace": Arg("path")},
    "remote_prune": {
        **_REMOTE, "keep_last": Arg("int"), "keep_within_s": Arg("float"), "grace_s": Arg("float"),
        "dry_run": Arg("bool"),
    },
    "remote_passwd": {**_REMOTE, "new_password": Arg("str", required=True)},
    "push": {"name": Arg("str"), **_WHERE, **_SECRETS},
    "remote_verify": {**_REMOTE, "sample": Arg("float")},
}
assert set(OP_ARGS) == OPS, "every op needs an argument table"


def capabilities() -> dict[str, list[str]]:
    """Each op this daemon serves, with the names of the arguments it accepts (``ping``)."""
    return {op: sorted(args) for op, args in sorted(OP_ARGS.items())}


class PeerInfo(NamedTuple):
    """Who sent a request, as the kernel reported it at connect time (None when unknown)."""

    uid: int | None
    gid: int | None
    pid: int | None


class Request(NamedTuple):
    """A validated request. ``args`` holds only declared names, paths as ``bytes``."""

    op: Op
    id: str
    version: int
    args: dict[str, Any]

    def fingerprint(self) -> str:
        """What a retry must repeat exactly: reusing an id for another request is an error."""
        return f"{self.op}:{sorted(self.args.items())!r}"


# -- JSON -----------------------------------------------------------------------------------


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    # Duplicate keys are where two parsers disagree on what a message says.
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise BadRequest(f"duplicate key {key!r} in JSON object")
        out[key] = value
    return out


def _no_constant(name: str) -> Any:
    raise BadRequest(f"{name} is not valid JSON")


def decode_json(raw: bytes) -> Any:
    """Strict JSON: UTF-8, no NaN/Infinity, no duplicate keys."""
    try:
        text = raw.decode("utf-8")
        return json.loads(text, object_pairs_hook=_no_duplicates, parse_constant=_no_constant)
    except UnicodeDecodeError:
        raise BadRequest("request is not UTF-8 text") from None
    except (json.JSONDecodeError, RecursionError) as e:
        raise BadRequest(f"request is not valid JSON: {e}") from None


def encode_json(obj: Any) -> bytes:
    """Compact UTF-8 JSON; raises TypeError/ValueError for values JSON cannot hold."""
    return json.dumps(obj, ensure_ascii=False, allow_nan=False, separators=(",", ":")).encode()


# -- paths ----------------------------------------------------------------------------------


# -- requests -------------------------------------------------------------------------------


_EXPECTED: dict[str, str] = {
    "str": "a string", "int": "an integer", "bool": "a boolean", "float": "a number",
    "path": "a path", "paths": "an array of paths", "strs": "an array of strings",
    "strmap": "an object of strings",
    "run": 'an object {"argv": [strings, at least one], "exit": integer or null, "signal": string or null}',
}


def _check_arg(op: str, name: str, spec: Arg, value: Any) -> Any:
    what = f"{op}: argument '{name}'"
    kind = spec.kind
    if kind == "path":
        return decode_path(value, what)
    if kind == "paths" and isinstance(value, list):
        return [decode_path(v, f"{what}[{i}]") for i, v in enumerate(value)]
    if kind in ("str", "strs"):
        _check_text(what, [value] if isinstance(value, str) else value)
    if kind == "strmap" and isinstance(value, dict):
        _check_text(what, [*value, *value.values()])
    if kind == "run" and _is_run(value):
        _check_text(what, [*value["argv"], value["signal"]])
    ok = {
        "str": isinstance(value, str),
        "int": isinstance(value, int) and not isinstance(value, bool),
        "bool": isinstance(value, bool),
        "float": isinstance(value, int | float) and not isinstance(value, bool),
        "strs": isinstance(value, list) and all(isinstance(v, str) for v in value),
        "strmap": isinstance(value, dict) and all(isinstance(v, str) for v in value.values()),
        "run": _is_run(value),
        "paths": False,
    }[kind]
    if not ok:
        raise BadRequest(f"{what} must be {_EXPECTED[kind]}, got {json_kind(value)}", arg=name)
    return float(value) if kind == "float" else value


def _is_run(value: Any) -> bool:
    """mark's ``run``: the command ``snapctl run`` ran, and how it ended (null before it ends)."""
    if not isinstance(value, dict) or set(value) != {"argv", "exit", "signal"}:
        return False
    argv, code, sig = value["argv"], value["exit"], value["signal"]
    return (
        isinstance(argv, list) and bool(argv) and all(isinstance(a, str) for a in argv)
        and (code is None or isinstance(code, int) and not isinstance(code, bool))
        and (sig is None or isinstance(sig, str))
    )


def _check_text(what: str, values: Any) -> None:
    """JSON's ``\\udXXX`` escapes can spell a lone surrogate, which is no text at all: it
    could be neither stored nor sent back. Refused here, like any other malformed value."""
    for v in values if isinstance(values, list) else ():
        if isinstance(v, str):
            try:
                v.encode("utf-8")
            except UnicodeEncodeError:
                raise BadRequest(f"{what} is not valid Unicode text (it holds a lone surrogate)") from None


def validate_args(op: str, args: Mapping[str, Any]) -> dict[str, Any]:
    """Check ``args`` against the op's table. Unknown names are refused, never ignored: a
    newer client's argument (mark's ``interrupted``) dropped in silence would be a request
    half done; the refusal names it (``details.arg``) and what the op accepts."""
    table = OP_ARGS[op]
    for name in args:
        if name not in table:
            known = ", ".join(sorted(table)) or "none"
            raise BadRequest(f"{op}: unknown argument '{name}' (accepted: {known}); {NEWER_CLIENT}", arg=name)
    out: dict[str, Any] = {}
    for name, spec in table.items():
        if name not in args or args[name] is None:
            if spec.required:
                raise BadRequest(f"{op}: missing required argument '{name}'", arg=name)
            continue
        out[name] = _check_arg(op, name, spec, args[name])
    return out


def parse_request(raw: bytes, max_bytes: int) -> Request:
    """Validate one request frame. The version is checked before the op and arguments, so a
    client of an incompatible version gets "upgrade/restart" rather than "unknown op"; an op
    or argument added since the daemon's release gets ``bad_request`` naming it."""
    if len(raw) > max_bytes:
        raise BadRequest(f"request of {len(raw)} bytes exceeds the limit of {max_bytes} bytes")
    obj = decode_json(raw)
    if not isinstance(obj, dict):
        raise BadRequest(f"request must be a JSON object, got {json_kind(obj)}")
    unknown = set(obj) - {"op", "id", "version", "args"}
    if unknown:
        raise BadRequest(f"unknown request field(s): {', '.join(sorted(unknown))}")
    version = obj.get("version")
    if not isinstance(version, int) or isinstance(version, bool):
        raise BadRequest(f"'version' must be an integer, got {json_kind(version)}")
    if version != PROTOCOL_VERSION:
        raise ProtocolMismatch(mismatch_message(PROTOCOL_VERSION, version),
                               daemon=PROTOCOL_VERSION, client=version)
    rid = obj.get("id")
    if not isinstance(rid, str) or not 0 < len(rid) <= MAX_ID_LENGTH or not rid.isprintable():
        raise BadRequest(f"'id' must be a printable string of 1-{MAX_ID_LENGTH} characters")
    op = obj.get("op")
    if not isinstance(op, str):
        raise BadRequest(f"'op' must be a string, got {json_kind(op)}")
    if op not in OPS:
        raise BadRequest(f"unknown op {op!r}: this daemon does not have it ({NEWER_CLIENT})", op=op)
    args = obj.get("args", {})
    if not isinstance(args, dict):
        raise BadRequest(f"'args' must be a JSON object, got {json_kind(args)}")
    return Request(op=op, id=rid, version=version, args=validate_args(op, args))  # type: ignore[arg-type]


def salvage_id(raw: bytes) -> str | None:
    """Best-effort id of a request that failed validation, so even its error reply can be
    matched by the client."""
    try:
        obj = json.loads(raw)
    except (ValueError, RecursionError):
        return None
    rid = obj.get("id") if isinstance(obj, dict) else None
    return rid if isinstance(rid, str) and len(rid) <= MAX_ID_LENGTH else None


def mismatch_message(daemon: Any, client: Any) -> str:
    """Which side to restart or upgrade: a newer client usually means the package was upgraded
    while the old daemon kept running."""
    older_daemon = isinstance(daemon, int) and isinstance(client, int) and daemon < client
    hint = ("restart the daemon (snapd stop; snapd start) or upgrade the client"
            if older_daemon else
            "upgrade the client, or restart the daemon from the matching version")
    return f"daemon speaks protocol {daemon}, client speaks {client}: {hint}"


def build_request(op: str, rid: str, args: Mapping[str, Any]) -> bytes:
    """The client side of ``parse_request`` (paths in ``args`` may be given as bytes)."""
    wire = {k: _encode_arg(v) for k, v in args.items()}
    return encode_json({"op": op, "id": rid, "version": PROTOCOL_VERSION, "args": wire})


def _encode_arg(value: Any) -> Any:
    if isinstance(value, bytes):
        return encode_path(value)
    if isinstance(value, list | tuple):
        return [_encode_arg(v) for v in value]
    return value


# -- replies --------------------------------------------------------------------------------


def ok_reply(rid: str | None, **fields: Any) -> dict[str, Any]:
    return {"id": rid, "ok": True, "version": PROTOCOL_VERSION, "result": fields}


def error_reply(rid: str | None, error: SnapdError) -> dict[str, Any]:
    return {"id": rid, "ok": False, "version": PROTOCOL_VERSION, "error": error.to_wire()}


def encode_error_reply(rid: str | None, error: SnapdError) -> bytes:
    """An error reply as bytes, whatever the error quotes: a refusal often repeats what was
    refused (an unknown op, an argument name), which may hold a lone surrogate that UTF-8
    cannot carry. Such strings are sent with the surrogate written out as ``\\udcXX``, so
    every bad request still gets its reply. Raises TypeError for details JSON cannot hold."""
    reply = error_reply(rid, error)
    try:
        return encode_json(reply)
    except UnicodeEncodeError:
        return encode_json(_printable_strings(reply))


def _printable_strings(obj: Any) -> Any:
    if isinstance(obj, str):
        return obj.encode("utf-8", "backslashreplace").decode("utf-8")
    if isinstance(obj, list):
        return [_printable_strings(v) for v in obj]
    if isinstance(obj, dict):
        return {_printable_strings(k): _printable_strings(v) for k, v in obj.items()}
    return obj
