"""Strict reading of the JSON a remote repository holds (key files, records, indexes, headers).

What comes back from a server is read as hostile even once it authenticates: every field a
format names must be there with its exact JSON type (a bool is not an int, a float is not an
int, an int has bounds), or the object is refused with ``RemoteCorrupt`` naming it. Nothing
here trusts a length or an offset: bounds are the caller's, given with each read. Fields a
format does not name are ignored, so a later version may add some without breaking readers.
"""

from __future__ import annotations

import base64
import binascii
import json
from typing import Any, Final

from snapd.errors import RemoteCorrupt
from snapd.remote.crypto import corrupt

INT_MAX: Final = 2**63 - 1


def load_object(data: bytes, what: str) -> Fields:
    """``data`` (UTF-8 JSON) as the object a format expects."""
    return Fields(load_json(data, what), what)


def load_json(data: bytes, what: str) -> Any:
    try:
        return json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise corrupt(what, f"it is not JSON ({exc.__class__.__name__})") from None


def dump_json(value: Any) -> bytes:
    """The one encoding the formats are written in: compact, ASCII, keys in the order given."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=True, allow_nan=False).encode("ascii")


def integer(value: Any, what: str, field: str, lo: int = 0, hi: int = INT_MAX) -> int:
    if type(value) is not int or not lo <= value <= hi:
        raise corrupt(what, f"{field} is not an integer in [{lo}, {hi}]")
    return value


def text(value: Any, what: str, field: str) -> str:
    if type(value) is not str:
        raise corrupt(what, f"{field} is not a string")
    return value


def array(value: Any, what: str, field: str) -> list[Any]:
    if type(value) is not list:
        raise corrupt(what, f"{field} is not a list")
    return value


class Fields:
    """One decoded JSON object, read field by field; each read refuses a missing or mistyped
    field by raising ``RemoteCorrupt`` that names the object and the field."""

    def __init__(self, value: Any, what: str) -> None:
        if type(value) is not dict:
            raise corrupt(what, "it is not a JSON object")
        self.value: dict[str, Any] = value
        self.what = what

    def _get(self, name: str) -> Any:
        if name not in self.value:
            raise corrupt(self.what, f"field {name!r} is missing")
        return self.value[name]

    def number(self, name: str, lo: int = 0, hi: int = INT_MAX) -> int:
        return integer(self._get(name), self.what, repr(name), lo, hi)

    def string(self, name: str) -> str:
        return text(self._get(name), self.what, repr(name))

    def opt_number(self, name: str, lo: int = 0, hi: int = INT_MAX) -> int | None:
        value = self._get(name)
        return None if value is None else integer(value, self.what, repr(name), lo, hi)

    def opt_string(self, name: str) -> str | None:
        value = self._get(name)
        return None if value is None else text(value, self.what, repr(name))

    def items(self, name: str) -> list[Any]:
        return array(self._get(name), self.what, repr(name))

    def sub(self, name: str) -> Fields:
        value = self._get(name)
        if type(value) is not dict:
            raise corrupt(self.what, f"field {name!r} is not a JSON object")
        return Fields(value, self.what)

    def b64(self, name: str, lo: int = 0, hi: int = INT_MAX) -> bytes:
        """A base64 field's bytes, between ``lo`` and ``hi`` bytes long."""
        encoded = self.string(name)
        try:
            raw = base64.b64decode(encoded, validate=True)
        except (binascii.Error, ValueError):
            raise corrupt(self.what, f"field {name!r} is not base64") from None
        if not lo <= len(raw) <= hi:
            raise corrupt(self.what, f"field {name!r} is not {lo}-{hi} bytes long")
        return raw

    def version(self, supported: int) -> int:
        """The format version, refused unless this snapd reads it."""
        found = self.number("version", 1)
        if found != supported:
            raise RemoteCorrupt(
                f"{self.what} is format version {found}; this snapd reads version {supported} "
                "(a newer snapd wrote it?)",
                object=self.what,
            )
        return found


def b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode("ascii")
