"""Text shown to a person: one function renders every name, label, message and path.

File names, labels, mark messages, agent and session names come from other programs and may
hold any byte. Printed raw, an ESC byte drives the terminal (colours, cursor moves, window
titles, even answer-back), a carriage return overwrites what was shown, a bidi override
reorders it. :func:`shown` makes such text inert:

- undecodable bytes (from ``bytes`` input, or lone surrogates that ``os.fsdecode`` made of
  them) become ``\\xNN``;
- control characters (C0, DEL, C1), line and paragraph separators and bidi controls become
  ``\\xNN`` / ``\\uNNNN`` (a tab is kept only where asked: diff lines);
- everything else, including a literal backslash, is left as it is.

The result holds no control character and is valid UTF-8, so applying :func:`shown` to its
own output changes nothing: the CLI may pass whole lines through it, whatever part of them
the daemon already rendered. This module is pure and imports nothing of snapd, so both the
CLI and the daemon side (rollback plans, error messages) use it.
"""

from __future__ import annotations

# Bidi embeddings/overrides/isolates and marks, and the Unicode line/paragraph separators:
# invisible, yet they reorder or break what is displayed.
_INVISIBLE = frozenset(
    [0x200E, 0x200F, 0x2028, 0x2029, *range(0x202A, 0x202F), *range(0x2066, 0x206A)]
)


def _escape(c: str, tabs: bool) -> str:
    o = ord(c)
    if o < 0x20 or o == 0x7F:
        return c if (tabs and c == "\t") else f"\\x{o:02x}"
    if 0x80 <= o < 0xA0 or o in _INVISIBLE:
        return f"\\u{o:04x}"
    if 0xDC80 <= o <= 0xDCFF:  # a byte os.fsdecode could not decode (surrogateescape)
        return f"\\x{o - 0xDC00:02x}"
    if 0xD800 <= o <= 0xDFFF:  # any other lone surrogate cannot be printed at all
        return f"\\u{o:04x}"
    return c


def shown(value: str | bytes, *, tabs: bool = False) -> str:
    """``value`` made safe for a terminal (see the module docstring); ``tabs`` keeps tabs."""
    text = value.decode("utf-8", "backslashreplace") if isinstance(value, bytes) else value
    if text.isprintable():  # the common case: nothing to escape
        return text
    return "".join(c if c.isprintable() else _escape(c, tabs) for c in text)


def count(n: float, noun: str, plural: str | None = None) -> str:
    """``"1 file"``, ``"2 files"``, ``"1.5 days"``: counts shown to people agree with their
    nouns (a float shows as its shortest form: a setting of ``1.0`` days is "1 day")."""
    shown_n = f"{n:g}" if isinstance(n, float) else str(n)
    return f"{shown_n} {noun if n == 1 else (plural or noun + 's')}"
