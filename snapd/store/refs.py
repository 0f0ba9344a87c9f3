"""Mark ids, labels, and how a user's reference to a mark is read.

A mark id is 10 characters: a digit, then nine of Crockford's base32 alphabet in lower case
(``3kq9m2x7ab``). Labels can never take that shape — a label that starts with a digit must
contain something other than lower-case letters and digits (``2024-06-01`` is fine, ``42`` is
not) — so a reference is never both an id (or id prefix) and a label.

A reference is: a full id; a unique id prefix (4+ characters); a label (the newest mark with
it); or ``LABEL~N`` / ``ID~N`` (N marks before that one in the same workspace). One that starts
with ``@`` is a time (:mod:`snapd.timeref`), never a mark: no label may start with ``@`` (a
store from before format 3 may hold such labels; their marks are reached by id).

The labels of snapd's own marks, ``pre-rollback`` and ``baseline`` (:data:`OWN_LABELS`), are
not a user's to take: a user's mark so labelled would be what ``pre-rollback~N`` (or
``baseline``) names. A store made before they were refused may hold user marks with them:
such a label names only snapd's own marks of that kind, and those user marks are reached by
id, as the ``@`` labels are.
"""

from __future__ import annotations

import re
import secrets
from dataclasses import dataclass

from snapd.errors import UsageError

ID_ALPHABET = "0123456789abcdefghjkmnpqrstvwxyz"
ID_LEN = 10
MIN_PREFIX = 4
MAX_LABEL = 200

ID_SHAPE = re.compile(r"^[0-9][0-9a-z]*$")
FULL_ID = re.compile(rf"^[0-9][{ID_ALPHABET}]{{{ID_LEN - 1}}}$")
_BACK = re.compile(r"^(.+)~([0-9]+)$")


#: label -> the kind of snapd's own marks that carry it (the only marks the label names)
OWN_LABELS = {"pre-rollback": "pre-rollback", "baseline": "baseline"}
_OWN_WHAT = {"pre-rollback": "the mark taken before each rollback", "baseline": "a workspace's first capture"}


def new_mark_id() -> str:
    return secrets.choice("0123456789") + "".join(secrets.choice(ID_ALPHABET) for _ in range(ID_LEN - 1))


def validate_label(label: str) -> str:
    """Return ``label`` if a mark may carry it, else raise UsageError saying why."""
    if not label:
        raise UsageError("a mark label cannot be empty")
    if len(label) > MAX_LABEL:
        raise UsageError(f"a mark label is at most {MAX_LABEL} characters")
    if any(c.isspace() or not c.isprintable() for c in label):
        raise UsageError(f"mark label {label!r} contains whitespace or control characters")
    if label.startswith("@"):
        raise UsageError(
            f"mark label {label!r} starts with '@', which is reserved for time references (@10m, @yesterday…)"
        )
    if label in OWN_LABELS:
        raise UsageError(
            f"mark label {label!r} is snapd's own ({_OWN_WHAT[label]}): `{label}` and `{label}~N` "
            "name those marks, so choose another label"
        )
    if "~" in label:
        raise UsageError(f"mark label {label!r} contains '~', which references use for 'N before'")
    if ID_SHAPE.match(label):
        raise UsageError(
            f"mark label {label!r} looks like a mark id: labels that start with a digit need "
            "another character, such as '-' or an upper-case letter"
        )
    return label


@dataclass(frozen=True)
class Ref:
    """A parsed reference: ``base`` is an id, id prefix or label; ``back`` counts marks before."""

    base: str
    back: int
    is_id: bool


def parse_ref(text: str) -> Ref:
    if not text:
        raise UsageError("an empty mark reference")
    if text.startswith("@"):
        raise UsageError(
            f"{text} is a time, and this needs a mark (an id or a label): times are taken by "
            "rollback, diff and cat. A mark labelled with a leading @ before snapd reserved it "
            "is reached by its id (`snapctl log`)"
        )
    back = 0
    m = _BACK.match(text)
    if m:
        text, digits = m.group(1), m.group(2)
        if len(digits) > 6:
            raise UsageError(f"{text}~{digits}: that is more marks back than any history holds")
        back = int(digits)
    if ID_SHAPE.match(text):
        if len(text) < MIN_PREFIX:
            raise UsageError(f"mark id prefix {text!r} is too short: give at least {MIN_PREFIX} characters")
        return Ref(text, back, True)
    return Ref(text, back, False)
