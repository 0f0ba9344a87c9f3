"""A rollback plan on the wire and in the journal, and as shown to a person (pure).

The journal holds the plan as JSON: whatever recovery reads back after a crash must be exactly
the plan that was confirmed. The lines a person confirms (``describe``) and the difference
between two plans (``plan_difference``, the tests' helper) are checked word for word. Written to kill
the mutants mutmut found surviving here (docs/reliability.md).
"""

from __future__ import annotations

import json

import pytest
from plan_difference import difference

from snapd.errors import BadRequest
from snapd.rollback.ops import Op, Plan, token_of
from snapd.store.trees import Entry

F = Entry("file", 0o644, 3, "a" * 32 + ".0")
F2 = Entry("file", 0o755, 5, "b" * 32 + ".1")
L = Entry("symlink", 0o777, 4, "c" * 32 + ".0")
D = Entry("dir", 0o750, 0, "d" * 32 + ".0")

OPS = [
    Op("write", b"a.txt", F2, F),
    Op("write", b"new.txt", F, None),
    Op("symlink", b"l", L, F),
    Op("symlink", b"l2", L, None),
    Op("mkdir", b"d", D, None),
    Op("chmod", b"d", D, Entry("dir", 0o700, 0, D.key)),
    Op("chmod", b"", D, None),  # the root's own mode
    Op("remove", b"gone", None, F),
    Op("rmdir", b"old", None, D),
    Op("write", b"big.bin", F, F2, forced="over size cap"),
    Op("remove", b"bad\xff/x", None, F),
]


def test_every_op_survives_the_journal_exactly() -> None:
    for op in OPS:
        back = Op.from_json(json.loads(json.dumps(op.to_json())))
        assert back == op, (op, back)
    assert OPS[0].to_json() == {
        "kind": "write",
        "path": "a.txt",
        "entry": ["file", 0o755, 5, F2.key],
        "expect": ["file", 0o644, 3, F.key],
    }
    assert OPS[9].to_json()["forced"] == "over size cap" and "forced" not in OPS[1].to_json()
    assert OPS[10].to_json()["path"] == {"b64": "YmFk/y94"}
    assert OPS[6].to_json()["path"] == ""


@pytest.mark.parametrize(
    "obj",
    [
        {"kind": "rename", "path": "a", "entry": None, "expect": None},
        {"kind": "write", "path": "a", "entry": ["fifo", 0, 0, "k"], "expect": None},
        {"kind": "remove", "path": "", "entry": None, "expect": None},  # only chmod may name the root
        {"kind": "remove", "path": "a//b", "entry": None, "expect": None},
        {"kind": "remove", "path": "a/../b", "entry": None, "expect": None},
        {"kind": "remove", "path": "./a", "entry": None, "expect": None},
    ],
)
def test_a_damaged_journal_op_is_refused(obj: dict[str, object]) -> None:
    with pytest.raises((ValueError, BadRequest)):
        Op.from_json(obj)


def test_what_a_person_confirms() -> None:
    assert [op.describe() for op in OPS] == [
        "restore a.txt",
        "recreate new.txt",
        "restore symlink l",
        "recreate symlink l2",
        "create directory d",
        "set mode 0750 on d",
        "set mode 0750 on the workspace root",
        "delete gone",
        "delete directory old",
        "restore big.bin (not captured: over size cap)",
        "delete bad\\xff/x",
    ]
    assert Op("chmod", b"x", None, None).describe() == "chmod x"
    assert Op("write", b"esc\x1b[2J", F, F).describe() == "restore esc\\x1b[2J"


def _plan(ops: list[Op], kept: list[tuple[bytes, str]] | None = None) -> Plan:
    left = ((b"ign", "ignored at the mark"),)
    return Plan(tuple(ops), tuple(kept or ()), {"restore": len(ops)}, left)


def test_the_plan_as_sent() -> None:
    p = _plan(OPS[:2], [(b"k", "unreadable")])
    assert p.to_json() == {
        "token": token_of(p.ops, p.kept, p.left),
        "counts": {"restore": 2},
        "ops": [OPS[0].to_json(), OPS[1].to_json()],
        "kept": [{"path": "k", "reason": "unreadable"}],
        "left": [{"path": "ign", "reason": "ignored at the mark"}],
    }


def test_what_changed_between_two_plans_line_by_line() -> None:
    old = _plan(
        [OPS[0], OPS[7], Op("write", b"same", F, F), Op("write", b"s2", F, F2)], [(b"k1", "a"), (b"k2", "b")]
    )
    new = _plan(
        [Op("write", b"a.txt", F, F), OPS[1], Op("write", b"same", F, F), Op("write", b"s2", F, F)],
        [(b"k2", "b"), (b"k3", "special file")],
    )
    assert difference(old, new) == [
        "~ a.txt: restore a.txt (its state changed)",
        "- no longer: delete gone",
        "+ recreate new.txt",
        "~ s2: restore s2 (its state changed)",
        "- no longer kept: k1",
        "+ keep k3: special file",
    ]
    changed = _plan([Op("remove", b"a.txt", None, F)])
    assert difference(old, changed)[0] == "~ a.txt: delete a.txt (was: restore a.txt)"
    assert difference(old, old) == [] and difference(new, new) == []
    nested = _plan([Op("write", b"a/b", F, None), Op("write", b"a.b", F, None)])
    assert difference(nested, _plan([])) == ["- no longer: recreate a/b", "- no longer: recreate a.b"]


def test_a_path_with_several_ops_is_compared_as_a_whole() -> None:
    """A change of type is two ops on one path (remove, then create): the difference shows both,
    in order, and paths (kept ones too) come in tree order, not byte order."""
    was = _plan([Op("rmdir", b"p", None, D), Op("write", b"p", F, None)], [(b"a/b", "x"), (b"a.b", "y")])
    now = _plan([Op("rmdir", b"p", None, D), Op("symlink", b"p", L, None)])
    assert difference(was, now) == [
        "~ p: delete directory p; recreate symlink p (was: delete directory p; recreate p)",
        "- no longer kept: a/b",
        "- no longer kept: a.b",
    ]
