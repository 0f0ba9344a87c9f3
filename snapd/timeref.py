"""Time references: ``@90s``, ``@10m``, ``@2h``, ``@3d``, ``@yesterday``, ``@2026-11-30T14:03:05``.

Wherever a mark reference is accepted, a reference that starts with ``@`` is a time (labels
may not start with ``@``). It names the workspace *as captured* at that instant.

Two sides, two rules (docs/protocol.md, "Time references"):

- the client (:func:`resolve`) reads every form: relative ones against its own clock, an ISO
  8601 time without an offset as local time. A local time that a clock change makes ambiguous
  (the repeated hour in autumn) or nonexistent (the skipped hour in spring) is refused: it
  names no single instant. It sends the result as :func:`wire` text, an absolute UTC instant;
- the daemon (:func:`parse_wire`) accepts only absolute times that carry their offset, so a
  time never depends on the daemon's clock or time zone.

Everything here is pure: the clock and the local time zone are arguments. A zone is a
function from a UTC instant (seconds) to its offset east of UTC (seconds), which is all a
clock-change check needs, and which both ``zoneinfo`` and the C library can answer.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable

from snapd.errors import UsageError

NS = 1_000_000_000
UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86_400}
DAY_S = 86_400

Offset = Callable[[int], int]  # UTC instant (s) -> seconds east of UTC in force then

_RELATIVE = re.compile(r"^([0-9]{1,9})([smhd])$")
_ISO = re.compile(
    r"^(\d{4})-(\d{2})-(\d{2})[T ](\d{2}):(\d{2})(?::(\d{2})(?:[.,](\d{1,9}))?)?"
    r"(Z|z|[+-]\d{2}:?\d{2})?$"
)
FORMS = (
    "@90s, @10m, @2h, @3d, @yesterday, @2026-11-30T14:03:05 or @'2026-11-30 14:03' "
    "(local time unless it ends in Z or ±HH:MM)"
)


def is_time(ref: str) -> bool:
    """Whether ``ref`` is a time reference rather than a mark reference."""
    return ref.startswith("@")


def wire(ns: int) -> str:
    """The instant ``ns`` (since the epoch, UTC) as the daemon takes it: ``@…Z`` to the ns."""
    secs, frac = divmod(ns, NS)
    y, mo, d, h, mi, s = _civil(secs)
    return f"@{y:04d}-{mo:02d}-{d:02d}T{h:02d}:{mi:02d}:{s:02d}.{frac:09d}Z"


def shown(ns: int, offset: Offset) -> str:
    """The instant ``ns`` for people, in local time with its offset, to the second rounded
    *up*: typed back as a time reference it names that instant or just after, never before
    (``@2026-11-30T14:03:06+01:00``)."""
    secs = -(-ns // NS)
    return _with_offset(secs, offset(secs))


def _civil(secs: int) -> tuple[int, int, int, int, int, int]:
    t = time.gmtime(secs)
    return t.tm_year, t.tm_mon, t.tm_mday, t.tm_hour, t.tm_min, t.tm_sec


def resolve(ref: str, now_ns: int, offset: Offset) -> int:
    """The instant (ns since the epoch, UTC) that the user's ``ref`` names (client side). One
    before 1970 is refused as too far back: nothing was captured then, and its wire form would
    quote a year (negative, for ``@999999999d``) the user never typed."""
    body = _body(ref)
    if body == "yesterday":
        ns = now_ns - DAY_S * NS
    elif m := _RELATIVE.match(body):
        ns = now_ns - int(m.group(1)) * UNITS[m.group(2)] * NS
    else:
        ns = _absolute(ref, body, offset)
    if ns < 0:
        raise UsageError(
            f"{ref} is too far back: it names a time before 1970, long before anything was "
            "captured (`snapctl log` lists a workspace's marks, oldest last)"
        )
    return ns


def parse_wire(ref: str) -> int:
    """The instant of an absolute ``ref`` that carries its offset (daemon side)."""
    body = _body(ref)
    if body == "yesterday" or _RELATIVE.match(body):
        raise UsageError(
            f"{ref}: a relative time reaches the daemon unresolved; the client turns it into an "
            "absolute instant first (send @YYYY-MM-DDTHH:MM:SSZ)"
        )
    return _absolute(ref, body, None)


def _body(ref: str) -> str:
    if not is_time(ref):
        raise UsageError(f"{ref!r} is not a time reference (one starts with @: {FORMS})")
    return ref[1:].strip()


def _absolute(ref: str, body: str, offset: Offset | None) -> int:
    import calendar  # deferred: a few ms at import, paid by every snapctl command otherwise

    m = _ISO.match(body)
    if not m:
        raise UsageError(f"{ref!r} is not a time this understands: use {FORMS}")
    y, mo, d, h, mi = (int(g) for g in m.groups()[:5])
    s = int(m.group(6) or 0)
    frac = int((m.group(7) or "").ljust(9, "0") or 0)
    if not (1 <= mo <= 12 and 1 <= d <= calendar.monthrange(y, mo)[1] and h < 24 and mi < 60 and s < 60):
        raise UsageError(f"{ref!r} is not a valid date and time")
    wall = calendar.timegm((y, mo, d, h, mi, s, 0, 0, 0))  # the wall clock read as if UTC
    zone = m.group(8)
    if zone is not None:
        if zone in ("Z", "z"):
            east = 0
        else:
            sign = -1 if zone[0] == "-" else 1
            digits = zone[1:].replace(":", "")
            hours, minutes = int(digits[:2]), int(digits[2:])
            if hours > 23 or minutes > 59:
                raise UsageError(f"{ref!r} has an invalid UTC offset {zone}")
            east = sign * (hours * 3600 + minutes * 60)
        return (wall - east) * NS + frac
    if offset is None:
        raise UsageError(
            f"{ref}: a local time reaches the daemon without its offset; the client resolves it "
            "(send @YYYY-MM-DDTHH:MM:SSZ)"
        )
    return local_instant(ref, wall, offset) * NS + frac


def local_instant(ref: str, wall: int, offset: Offset) -> int:
    """The one UTC instant (s) whose local wall clock reads ``wall`` (wall time as if UTC).

    Candidates come from the offsets in force a day either side (clock changes are months
    apart); each is kept if the zone really shows ``wall`` then. None: the clock skipped that
    time; two: it showed it twice. Both are refused, naming the choices."""
    guesses = (wall - offset(wall - DAY_S), wall - offset(wall + DAY_S))
    found = sorted({t for t in guesses if t + offset(t) == wall})
    if len(found) == 1:
        return found[0]
    if not found:
        raise UsageError(
            f"{ref}: that local time never happened (the clock skipped it at a change to summer "
            "time): give the time in UTC (…Z) or with its offset (…+01:00)"
        )
    choices = " or ".join(_with_offset(t, offset(t)) for t in found)
    raise UsageError(
        f"{ref}: that local time happened twice (the clock was set back): say which, {choices}",
        choices=choices,
    )


def _with_offset(t: int, east: int) -> str:
    y, mo, d, h, mi, s = _civil(t + east)
    sign = "-" if east < 0 else "+"
    hh, mm = divmod(abs(east) // 60, 60)
    return f"@{y:04d}-{mo:02d}-{d:02d}T{h:02d}:{mi:02d}:{s:02d}{sign}{hh:02d}:{mm:02d}"
