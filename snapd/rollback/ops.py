"""What a rollback plan is made of: :class:`Op` (one change to one path) and :class:`Plan`.

Pure data with a wire form (``to_json``/``Op.from_json``, journaled by :mod:`snapd.rollback.journal`)
and the lines people confirm (``Op.describe``). Every op carries both the state it produces
(``entry``, None for removals) and the captured state it replaces (``expect``, None = the path
must be absent): :mod:`snapd.rollback.apply` re-checks ``expect`` right before each change and
recognises already-done work by ``entry``. The ops one difference between two trees needs
(:func:`ops_for`) are here too; how a plan picks and orders them is :mod:`snapd.rollback.plan`.

Invariant: ``Plan.token`` is a digest of the ordered ops, ``kept`` and ``left`` (:func:`token_of`),
so equal plans have equal tokens and a re-plan that changed nothing is recognised.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any, Literal

from snapd.display import shown
from snapd.errors import UsageError
from snapd.paths import decode_path, encode_path
from snapd.store import nodes, trees
from snapd.store.treediff import Difference
from snapd.store.trees import Entry

OpKind = Literal["mkdir", "write", "symlink", "chmod", "remove", "rmdir"]
MKDIR_MODE = 0o700
"""Mode of a directory apply creates; its mark's mode is set by a later chmod op."""

show = shown  # paths in plans and reasons are shown to people: one rendering (snapd.display)


def _entry_json(e: Entry | None) -> list[Any] | None:
    return None if e is None else [e.kind, e.mode, e.size, e.key]


def _entry_from(v: Any) -> Entry | None:
    if v is None:
        return None
    kind, mode, size, key = v
    if kind not in nodes.KIND_CODES:
        raise ValueError(f"bad entry kind {kind!r}")
    return Entry(kind, int(mode), int(size), str(key))


def parts(path: bytes) -> list[bytes]:
    """Sort key of a path: component by component, so a directory's children follow it."""
    return path.split(b"/")


@dataclass(frozen=True, slots=True)
class Op:
    """Make ``path`` hold ``entry`` (None for removals), replacing the captured ``expect``."""

    kind: OpKind
    path: bytes
    entry: Entry | None
    expect: Entry | None
    forced: str | None = None  # why the current content could not be captured (force only)
    precious: bool = False  # a file git ignores that the mark's rules keep (a label: no effect)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"kind": self.kind, "path": encode_path(self.path)}
        out["entry"], out["expect"] = _entry_json(self.entry), _entry_json(self.expect)
        if self.forced is not None:
            out["forced"] = self.forced
        if self.precious:
            out["precious"] = True
        return out

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> Op:
        kind = obj["kind"]
        if kind not in ("mkdir", "write", "symlink", "chmod", "remove", "rmdir"):
            raise ValueError(f"bad op kind {kind!r}")
        # b"" is the root itself: only its mode is ever set (decode_path refuses empty names)
        path = b"" if kind == "chmod" and obj["path"] == "" else decode_path(obj["path"])
        if path:
            trees.split_path(path)
        forced = obj.get("forced")
        precious = obj.get("precious") is True
        return cls(kind, path, _entry_from(obj["entry"]), _entry_from(obj["expect"]), forced, precious)

    def describe(self) -> str:
        p = show(self.path) if self.path else "the workspace root"

        if self.kind == "write":
            text = f"restore {p}" if self.expect is not None else f"recreate {p}"
        elif self.kind == "symlink":
            text = f"restore symlink {p}" if self.expect is not None else f"recreate symlink {p}"
        elif self.kind == "mkdir":
            text = f"create directory {p}"
        elif self.kind == "chmod":
            text = f"set mode {self.entry.mode:04o} on {p}" if self.entry else f"chmod {p}"
        elif self.kind == "remove":
            text = f"delete {p}"
        else:
            text = f"delete directory {p}"
        text += " (precious: ignored by git, kept by snapd)" if self.precious else ""
        return text + (f" (not captured: {self.forced})" if self.forced else "")

    def canonical(self) -> list[Any]:
        """The op as the token digests it."""
        return [self.kind, self.path.hex(), _entry_json(self.entry), _entry_json(self.expect), self.forced]


@dataclass(frozen=True)
class Plan:
    ops: tuple[Op, ...]
    kept: tuple[tuple[bytes, str], ...]  # differences left in place: the rollback is not exact
    counts: Mapping[str, int]  # restore, recreate, delete, mode, type
    left: tuple[tuple[bytes, str], ...] = ()  # ignored at the mark: never touched, and no difference

    @cached_property
    def token(self) -> str:
        """:func:`token_of` the plan, made when first asked for: a restore's plan of 160,000 ops
        never is, and would spend a second on it."""
        return token_of(self.ops, self.kept, self.left)

    def to_json(self) -> dict[str, Any]:
        return {
            "token": self.token,
            "counts": dict(self.counts),
            "ops": [op.to_json() for op in self.ops],
            "kept": [{"path": encode_path(p), "reason": r} for p, r in self.kept],
            "left": [{"path": encode_path(p), "reason": r} for p, r in self.left],
        }


TOKEN_LENGTH = 32  # hex digits of a plan's token (:func:`token_of`)


def check_token(token: str | None) -> None:
    """A token that no plan could have (not 32 hex digits) is refused as what it is: not the
    token of a plan — rather than taken for a plan that changed."""
    if token is not None and (len(token) != TOKEN_LENGTH or token.strip("0123456789abcdef")):
        raise UsageError(
            f"{shown(token)} is not the token of a plan (a plan's token is {TOKEN_LENGTH} hex digits: "
            "`plan.token` in `snapctl rollback --dry-run --json`); nothing was changed"
        )


def token_of(ops: Sequence[Op], kept: Sequence[tuple[bytes, str]], left: Sequence[tuple[bytes, str]]) -> str:
    """The digest that names a plan: equal ops (in order), kept and left paths, equal token."""
    canonical = {
        "ops": [op.canonical() for op in ops],
        "kept": [[p.hex(), r] for p, r in kept],
        "left": [[p.hex(), r] for p, r in left],
    }
    return hashlib.sha256(json.dumps(canonical, sort_keys=True).encode()).hexdigest()[:32]


def _create(path: bytes, new: Entry) -> list[Op]:
    if new.kind == "dir":
        ops = [Op("mkdir", path, new, None)]
        if new.mode != MKDIR_MODE:
            ops.append(Op("chmod", path, new, Entry("dir", MKDIR_MODE, 0, new.key)))
        return ops
    return [Op("write" if new.kind == "file" else "symlink", path, new, None)]


def ops_for(d: Difference) -> list[Op]:
    """The ops that turn ``d.old`` into ``d.new`` at ``d.path`` (a symlink's mode: none)."""
    old, new = d.old, d.new
    if d.status == "mode":
        assert new is not None
        return [] if new.kind == "symlink" else [Op("chmod", d.path, new, old)]  # Linux has no lchmod
    ops: list[Op] = []
    if d.status in ("removed", "type"):
        assert old is not None
        ops.append(Op("rmdir" if old.kind == "dir" else "remove", d.path, None, old))
    if d.status in ("added", "type"):
        assert new is not None
        ops.extend(_create(d.path, new))
    if d.status == "modified":
        assert new is not None
        ops.append(Op("write" if new.kind == "file" else "symlink", d.path, new, old))
    return ops


COUNT = {"modified": "restore", "added": "recreate", "removed": "delete", "mode": "mode", "type": "type"}
"""The plan's count a difference adds to, by its status."""
