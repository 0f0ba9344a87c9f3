"""Path arithmetic and path names, pure: every layer and the CLI share this one definition.

Paths inside a workspace are ``bytes`` relative to its root, ``/``-separated, never starting or
ending with ``/``; ``b""`` is the root itself. Linux file names are bytes, so nothing here
decodes them except :func:`encode_path`, which puts them on the wire without loss.

Two relations are different questions and have two names: :func:`at_or_below` (the path is
``top`` or inside it) and :func:`strictly_below` (inside it, not ``top`` itself).

snapd's own files in a workspace are all named ``.snapd-*~``: the temps a rollback writes
beside their targets (:func:`temp_name`) and the barrier cookies the watcher creates in the
root (:func:`cookie_name`). Capture never records any such name (:func:`is_snapd_name`);
crash clean-up deletes only the exact cookie shape (:func:`is_cookie_name`), since a
``.snapd-*~`` a user made could be anything.

The files ``snapctl integrate AGENT --project DIR`` writes into a workspace (the agent's hook
settings, :data:`INTEGRATION_FILES`) are snapd's own too while git does not track them: capture
never records them, so a rollback never rewrites or removes them — rolling back a turn must not
switch off the hooks that mark the next one. A tracked one is the user's (README: what git
tracks is always captured); the CLI merges snapd's hooks back after a rollback.
"""

from __future__ import annotations

import binascii
import os
import re
from typing import Any, Final

from snapd.errors import BadRequest

SNAPD_PREFIX: Final = ".snapd-"
SNAPD_SUFFIX: Final = "~"
_SNAPD_PREFIX_B: Final = SNAPD_PREFIX.encode()  # asked of every name a walk meets
_SNAPD_SUFFIX_B: Final = SNAPD_SUFFIX.encode()
_COOKIE_RE: Final = re.compile(rb"\.snapd-[0-9]+-[0-9]+~")
#: Workspace-relative paths of the files snapd's agent integrations write (see the docstring).
INTEGRATION_FILES: Final = frozenset(
    {
        b".claude/settings.local.json",
        b".codex/hooks.json",
        b".gemini/settings.json",
        b".opencode/plugin/snapd.js",
    }
)


# -- relations ------------------------------------------------------------------------------


def at_or_below(path: bytes, top: bytes) -> bool:
    """``path`` is ``top`` or lies inside it (``top == b""`` holds everything)."""
    return path == top or not top or path.startswith(top + b"/")


def strictly_below(path: bytes, top: bytes) -> bool:
    """``path`` lies inside ``top`` and is not ``top`` itself."""
    return path != top and at_or_below(path, top)


def ancestors(path: bytes) -> list[bytes]:
    """The directories holding ``path``, outermost first, the root (``b""``) left out:
    ``a/b/c`` -> ``[a, a/b]``."""
    parts = path.split(b"/")
    return [b"/".join(parts[:i]) for i in range(1, len(parts))]


def join(parent: bytes, name: bytes) -> bytes:
    """``name`` inside ``parent`` (``parent == b""``: the root)."""
    return parent + b"/" + name if parent else name


# -- snapd's own names ----------------------------------------------------------------------


def temp_name() -> str:
    """A fresh, unguessable temp name ``.snapd-<hex>~`` for a file written then renamed."""
    return f"{SNAPD_PREFIX}{os.urandom(6).hex()}{SNAPD_SUFFIX}"


def cookie_name(pid: int, n: int) -> bytes:
    """The name of barrier cookie ``n`` of process ``pid``: ``.snapd-<pid>-<n>~``."""
    return b".snapd-%d-%d~" % (pid, n)


def is_snapd_name(name: str | bytes) -> bool:
    """Any of snapd's own names, ``.snapd-*~`` (temps and cookies): never captured or shown."""
    if isinstance(name, str):
        return name.startswith(SNAPD_PREFIX) and name.endswith(SNAPD_SUFFIX)
    return name.startswith(_SNAPD_PREFIX_B) and name.endswith(_SNAPD_SUFFIX_B)


def is_integration_file(rel: bytes) -> bool:
    """One of the agent-integration files snapd writes into a workspace (never captured)."""
    return rel in INTEGRATION_FILES


def is_cookie_name(name: bytes) -> bool:
    """Exactly a barrier cookie's shape (what crash clean-up may delete)."""
    return _COOKIE_RE.fullmatch(name) is not None


# -- the wire -------------------------------------------------------------------------------


def encode_path(path: bytes) -> str | dict[str, str]:
    """Paths are bytes on Linux; JSON strings are Unicode. Valid UTF-8 travels as a string,
    anything else as ``{"b64": ...}`` of the exact bytes, so no file name is ever mangled."""
    try:
        return path.decode("utf-8")
    except UnicodeDecodeError:
        import base64  # deferred, like below: only names that are not UTF-8 need it

        return {"b64": base64.b64encode(path).decode("ascii")}


def decode_path(obj: Any, what: str = "path") -> bytes:
    """Inverse of ``encode_path``; rejects shapes that cannot be a file name."""
    if isinstance(obj, str):
        try:
            raw = obj.encode("utf-8")
        except UnicodeEncodeError:
            raise BadRequest(
                f"{what} contains a lone surrogate; send undecodable names as {{\"b64\": ...}}"
            ) from None
    elif isinstance(obj, dict) and set(obj) == {"b64"} and isinstance(obj["b64"], str):
        import base64  # deferred: every hook and snapctl command loads this module

        try:
            raw = base64.b64decode(obj["b64"], validate=True)
        except (binascii.Error, ValueError):
            raise BadRequest(f"{what}: 'b64' is not valid base64") from None
    else:
        raise BadRequest(f"{what} must be a string or {{\"b64\": \"...\"}}, got {json_kind(obj)}")
    if not raw:
        raise BadRequest(f"{what} is empty")
    if b"\0" in raw:
        raise BadRequest(f"{what} contains a NUL byte")
    return raw


def json_kind(value: Any) -> str:
    """What a JSON value is, in words, for messages about a value of the wrong shape."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    return "an object"
