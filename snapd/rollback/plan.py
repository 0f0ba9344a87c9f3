"""Rollback planning: the exact list of operations that turns the captured state into a mark's.

A plan is computed from two trees only — ``current`` (the barrier'd pre-rollback mark, i.e.
what the workspace holds now as far as snapd could capture it) and ``target`` (mark M) — so it
is pure and can be shown, compared and confirmed before anything is touched. Every
:class:`Op` carries both the state it produces (``entry``) and the captured state it replaces
(``expect``, None = the path must be absent): :mod:`snapd.rollback.apply` re-checks ``expect`` right
before each change and recognises already-done work by ``entry``.

Invariants:
- applying ``ops`` in sequence is valid and yields ``target`` for every path in scope: all
  removals first (files, then directories deepest-first), so a type change never meets its
  own old kind; then directories parents-first; then contents; then directory modes
  deepest-first, so a directory that is read-only at M is still filled first. Directories are
  created 0700 (private while being filled) and get their mode at the end. The only early
  ``chmod`` is one that gives the owner back write+search on a directory that needs it;
- a path whose current content could not be captured (``uncapturable``) is never overwritten
  or deleted, nor is a directory holding one, nor anything inside one: such changes are left
  out and listed in ``kept`` — unless ``force``, where the ops touching it carry ``forced``
  (the reason) and apply replaces whatever is there without comparing it (but one that M's
  rules ignore is never touched, even to clear the way for its directory's removal);
- a path absent at M that M's rules ignore as a directory but not as what it is now (a symlink
  named like a ``build/`` pattern) may have been an ignored directory at M, which no mark
  records: it is ``kept`` (loud), never deleted;
- a directory that cannot be listed now, where M has a directory it could list, is ``kept``
  with everything under it, with or without ``force``: what it holds now is unknown, so
  nothing there is changed;
- a directory that could not be listed at M nor now is ``left`` by name (what it holds is
  unknown on both sides; only the children captured by name are compared);
- a path M holds as ``uncaptured`` (there, but its content could not be captured) is never
  deleted or replaced, with or without ``force``: when it differs from M it is ``kept`` with
  nothing done under it (there is nothing to restore it from);
- ``token`` is a digest of the ops and ``kept``: equal plans have equal tokens, so a re-plan
  that changed nothing is recognised, and any change shows up in :meth:`Plan.difference`.
"""

from __future__ import annotations

import hashlib
import json
import stat
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from snapd.display import shown
from snapd.errors import NotFound, UsageError
from snapd.paths import ancestors, at_or_below, decode_path, encode_path, strictly_below
from snapd.store import trees
from snapd.store.trees import Difference, Entry

OpKind = Literal["mkdir", "write", "symlink", "chmod", "remove", "rmdir"]
MKDIR_MODE = 0o700
"""Mode of a directory apply creates; its mark's mode is set by a later chmod op."""
_OWNER_WX = stat.S_IWUSR | stat.S_IXUSR


show = shown  # paths in plans and reasons are shown to people: one rendering (snapd.display)


def _entry_json(e: Entry | None) -> list[Any] | None:
    return None if e is None else [e.kind, e.mode, e.size, e.key]


def _entry_from(v: Any) -> Entry | None:
    if v is None:
        return None
    kind, mode, size, key = v
    if kind not in trees.KIND_CODES:
        raise ValueError(f"bad entry kind {kind!r}")
    return Entry(kind, int(mode), int(size), str(key))


@dataclass(frozen=True, slots=True)
class Op:
    """Make ``path`` hold ``entry`` (None for removals), replacing the captured ``expect``."""

    kind: OpKind
    path: bytes
    entry: Entry | None
    expect: Entry | None
    forced: str | None = None  # why the current content could not be captured (force only)

    def to_json(self) -> dict[str, Any]:
        out = {"kind": self.kind, "path": encode_path(self.path), "entry": _entry_json(self.entry)}
        out["expect"] = _entry_json(self.expect)
        if self.forced is not None:
            out["forced"] = self.forced
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
        return cls(kind, path, _entry_from(obj["entry"]), _entry_from(obj["expect"]), forced)

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
        return text + (f" (not captured: {self.forced})" if self.forced else "")

    def _canonical(self) -> list[Any]:
        return [self.kind, self.path.hex(), _entry_json(self.entry), _entry_json(self.expect), self.forced]


@dataclass(frozen=True)
class Plan:
    ops: tuple[Op, ...]
    kept: tuple[tuple[bytes, str], ...]  # differences left in place: the rollback is not exact
    counts: Mapping[str, int]  # restore, recreate, delete, mode, type
    token: str
    left: tuple[tuple[bytes, str], ...] = ()  # ignored at the mark: never touched, and no difference

    def to_json(self) -> dict[str, Any]:
        return {
            "token": self.token,
            "counts": dict(self.counts),
            "ops": [op.to_json() for op in self.ops],
            "kept": [{"path": encode_path(p), "reason": r} for p, r in self.kept],
            "left": [{"path": encode_path(p), "reason": r} for p, r in self.left],
        }

    def difference(self, other: Plan) -> list[str]:
        """What changed from this plan to ``other``, one line each (empty: identical)."""
        lines: list[str] = []
        mine, theirs = _by_path(self.ops), _by_path(other.ops)
        for path in sorted(mine.keys() | theirs.keys(), key=_parts):
            a, b = mine.get(path, ()), theirs.get(path, ())
            if a == b:
                continue
            if not a:
                lines.extend(f"+ {op.describe()}" for op in b)
            elif not b:
                lines.extend(f"- no longer: {op.describe()}" for op in a)
            else:
                was = "; ".join(op.describe() for op in a)
                now = "; ".join(op.describe() for op in b)
                lines.append(
                    f"~ {show(path)}: {now}" + (f" (was: {was})" if was != now else " (its state changed)")
                )
        old_kept, new_kept = dict(self.kept), dict(other.kept)
        for path in sorted(old_kept.keys() | new_kept.keys(), key=_parts):
            if old_kept.get(path) == new_kept.get(path):
                continue
            if path in new_kept:
                lines.append(f"+ keep {show(path)}: {new_kept[path]}")
            else:
                lines.append(f"- no longer kept: {show(path)}")
        return lines


def _parts(path: bytes) -> list[bytes]:
    return path.split(b"/")


def _by_path(ops: Iterable[Op]) -> dict[bytes, tuple[Op, ...]]:
    out: dict[bytes, tuple[Op, ...]] = {}
    for op in ops:
        out[op.path] = out.get(op.path, ()) + (op,)
    return out


def _create(path: bytes, new: Entry) -> list[Op]:
    if new.kind == "dir":
        ops = [Op("mkdir", path, new, None)]
        if new.mode != MKDIR_MODE:
            ops.append(Op("chmod", path, new, Entry("dir", MKDIR_MODE, 0, new.key)))
        return ops
    return [Op("write" if new.kind == "file" else "symlink", path, new, None)]


def _ops_for(d: Difference) -> list[Op]:
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


_COUNT = {"modified": "restore", "added": "recreate", "removed": "delete", "mode": "mode", "type": "type"}


def _order(op: Op) -> tuple[int, int, list[bytes]]:
    """Phase, then parents-first (depth 0) or deepest-first (minus the depth), then name."""
    parts = _parts(op.path)
    if op.kind == "chmod" and op.entry is not None and op.entry.kind == "dir":
        old = op.expect.mode if op.expect is not None else MKDIR_MODE
        if (old & _OWNER_WX) != _OWNER_WX and (op.entry.mode & _OWNER_WX) == _OWNER_WX:
            return (0, 0, parts)  # give the owner write+search back before working inside
        return (5, -len(parts) if op.path else 0, parts)  # the root (b"") is the shallowest: last
    if op.kind == "remove":
        return (1, 0, parts)
    if op.kind == "rmdir":
        return (2, -len(parts), parts)
    if op.kind == "mkdir":
        return (3, 0, parts)
    return (4, 0, parts)  # write, symlink, chmod of a file


def _status(old: Entry | None, new: Entry | None) -> trees.Status | None:
    """trees.diff's judgement for one path (a directory's own key is not a change)."""
    if old == new:
        return None
    if old is None:
        return "added"
    if new is None:
        return "removed"
    if old.kind != new.kind:
        return "type"
    if old.kind != "dir" and (old.key != new.key or old.size != new.size):
        return "modified"
    return "mode" if old.mode != new.mode else None


def _differences(
    load: trees.Load, current: str | None, target: str, only: Sequence[bytes]
) -> list[Difference]:
    if not only:
        return list(trees.diff(load, current, target))

    def at(root: str | None, path: bytes) -> Entry | None:
        return trees.lookup(load, root, path) if root is not None else None

    found: dict[bytes, Difference] = {}
    for top in only:
        cur, tgt = at(current, top), at(target, top)
        if tgt is not None:  # its parents must be directories, as they are at M
            for anc in ancestors(top):
                ca, ta = at(current, anc), at(target, anc)
                if ca is None or ca.kind != "dir":
                    found.setdefault(anc, Difference(anc, "added" if ca is None else "type", ca, ta))
        status = _status(cur, tgt)
        if status is not None:
            found[top] = Difference(top, status, cur, tgt)
        sub_old = cur.key if cur is not None and cur.kind == "dir" else None
        sub_new = tgt.key if tgt is not None and tgt.kind == "dir" else None
        if sub_old is not None or sub_new is not None:
            for d in trees.diff(load, sub_old, sub_new, top + b"/"):
                found[d.path] = d
    return sorted(found.values(), key=lambda d: _parts(d.path))


def _listed_dir(e: Entry | None) -> bool:
    return e is not None and e.kind == "dir" and not trees.unlisted(e)


def _uncaptured_now(differences: Iterable[Difference]) -> dict[bytes, str]:
    """The paths of the current tree whose content it could not hold, with why."""
    return {d.path: trees.uncaptured_reason(d.old) for d in differences if trees.is_uncaptured(d.old)}


def _normalize_only(only: Sequence[bytes]) -> list[bytes]:
    tops: list[bytes] = []
    for p in sorted(set(only), key=_parts):
        try:
            trees.split_path(p)
        except ValueError:
            raise UsageError(f"{show(p)!r} is not a path inside the workspace") from None
        if not any(at_or_below(p, q) for q in tops):
            tops.append(p)
    return tops


class _Uncaptured:
    """Where the paths the pre-rollback mark could not hold lie, for quick questions."""

    def __init__(self, reasons: Mapping[bytes, str]) -> None:
        self.reasons = dict(reasons)
        self.below: dict[bytes, list[bytes]] = {}  # directory -> uncaptured paths under it
        for u in sorted(self.reasons, key=_parts):
            for anc in ancestors(u):
                self.below.setdefault(anc, []).append(u)

    def at_or_above(self, path: bytes) -> bytes | None:
        for p in [*ancestors(path), path]:
            if p in self.reasons:
                return p
        return None

    def blocker(self, op: Op) -> bytes | None:
        """The uncaptured path ``op`` would overwrite or delete, if any (chmod never does)."""
        if op.kind == "chmod":
            return None
        hit = self.at_or_above(op.path)
        if hit is None and op.kind in ("remove", "rmdir") and op.path in self.below:
            hit = self.below[op.path][0]
        return hit

    def why(self, path: bytes, u: bytes) -> str:
        if u == path:
            return self.reasons[u]
        if strictly_below(u, path):
            return f"holds {show(u)}, not captured: {self.reasons[u]}"
        return f"inside {show(u)}, not captured: {self.reasons[u]}"


TargetIgnores = Callable[[bytes, bool], "str | None"]
"""(path, is_dir) -> why the mark's own rules ignore it, or None when they capture it."""
IgnoredBelow = Callable[[bytes], "list[tuple[bytes, str]]"]
"""directory -> the entries on disk directly inside it that the mark's rules ignore and that
the current tree does not hold (paths, with why)."""


def plan(
    load: trees.Load,
    current: str | None,
    target: str,
    *,
    only: Sequence[bytes] = (),
    uncapturable: Mapping[bytes, str] | None = None,
    force: bool = False,
    target_ignores: TargetIgnores | None = None,
    ignored_below: IgnoredBelow | None = None,
    root_modes: tuple[int | None, int | None] = (None, None),
    absent: Sequence[bytes] = (),
) -> Plan:
    """The operations that make the workspace captured as ``current`` hold ``target``.

    ``only`` limits the plan to those paths and everything below them (plus the parent
    directories they need); ``uncapturable`` maps paths on disk that ``current`` could not
    hold to the reason. ``target_ignores`` and ``ignored_below`` say what the mark's rules
    ignore: such paths are never touched (``left``), nor is a directory that holds one.
    ``root_modes``: the root's mode now and at the mark (None: unknown). ``absent``: paths the
    mark knows were absent whatever its rules say (a pre-rollback mark's: what its rollback
    created), so they are deleted even where those rules ignore them. Raises NotFound for an
    ``only`` path that exists neither now nor at M.
    """
    tops = _normalize_only(only)
    differences = _differences(load, current, target, tops)
    unc = _Uncaptured({**_uncaptured_now(differences), **(uncapturable or {})})
    ignores: TargetIgnores = target_ignores or (lambda p, d: None)
    for top in tops:
        exists = (current is not None and trees.lookup(load, current, top) is not None) or (
            trees.lookup(load, target, top) is not None
        )
        if not exists and unc.at_or_above(top) is None and top not in unc.below:
            raise NotFound(f"{show(top)} exists neither in the workspace nor in the mark")
    groups: dict[bytes, tuple[str, list[Op]]] = {}  # path -> (its difference's count key, ops)
    kept: dict[bytes, str] = {}
    left: dict[bytes, str] = {}
    kept_dirs: list[bytes] = []  # directories not created: nothing can go inside them
    forced_removals: set[bytes] = set()
    extra: list[Op] = []  # forced removals of uncaptured paths
    unlisted: dict[bytes, bool] = {}
    unrestorable: list[bytes] = []  # not captured at M: nothing to restore them from
    # directories that cannot be listed now, where M knows their contents: what they hold now is
    # unknown (a new file inside can be neither seen nor held), so they are kept as they are
    blind_now = [
        u
        for u in unc.reasons
        if current is not None
        and trees.unlisted(trees.lookup(load, current, u))
        and _listed_dir(trees.lookup(load, target, u))
    ]

    def in_current(path: bytes) -> bool:
        return current is not None and trees.lookup(load, current, path) is not None

    def ignored_at_mark(u: bytes) -> str | None:
        """Why M's rules ignore the uncapturable ``u``: as what it is now, or, not in the
        current tree, as either kind."""
        now = trees.lookup(load, current, u) if current is not None else None
        kinds = (False, True) if now is None else (now.kind == "dir",)
        return next((rule for is_dir in kinds if (rule := ignores(u, is_dir)) is not None), None)

    def inside_unlisted(path: bytes) -> bytes | None:
        """The directory above ``path`` that could not be listed at M, if any."""
        for anc in ancestors(path):
            if anc not in unlisted:
                unlisted[anc] = trees.unlisted(trees.lookup(load, target, anc))
            if unlisted[anc]:
                return anc
        return None

    for d in differences:
        group = _ops_for(d)
        if not group:
            continue
        made = any(at_or_below(d.path, a) for a in absent)  # absent at M whatever its rules
        if any(strictly_below(d.path, k) for k in unrestorable) or (
            not made and any(strictly_below(d.path, k) for k in left)
        ):
            continue  # below an ignored directory (never touched), or below a path kept as it is
        if d.new is None and (hidden := inside_unlisted(d.path)) is not None:
            left[d.path] = f"inside {show(hidden)}, which could not be listed at the mark"
            continue
        blind = next((u for u in blind_now if at_or_below(d.path, u)), None)
        if blind is not None:
            kept[blind] = f"cannot be listed now ({unc.reasons[blind]}): what it holds is unknown"
            continue
        if trees.is_uncaptured(d.new):
            kept[d.path] = f"not captured at the mark ({trees.uncaptured_reason(d.new)}): cannot be restored"
            unrestorable.append(d.path)
            continue
        outer = next((k for k in kept_dirs if strictly_below(d.path, k)), None)
        if outer is not None:
            kept[d.path] = f"its directory {show(outer)} is kept"
            continue
        if d.new is None and d.old is not None and not made:
            why = ignores(d.path, d.old.kind == "dir")
            if why is not None:  # absent at M because its rules ignored it, not because it did not exist
                left[d.path] = f"ignored at the mark ({why})"
                continue
            as_dir = ignores(d.path, True) if d.old.kind != "dir" else None
            if as_dir is not None:  # a mark records no ignored names: an ignored directory may have been here
                kept[d.path] = (
                    f"the mark's rules ignore a directory of this name ({as_dir}): one may have been "
                    "there, so this is left as it is"
                )
                continue
        blocker = next((u for u in map(unc.blocker, group) if u is not None), None)
        if blocker is not None and not force:
            if blocker == d.path and any(strictly_below(d.path, k) for k in kept):
                continue  # named already: its directory is kept because it holds this path
            kept[d.path] = unc.why(d.path, blocker)
            if any(op.kind == "mkdir" for op in group):
                kept_dirs.append(d.path)
            continue
        if blocker is not None:
            if unc.at_or_above(d.path) is not None:  # replace what is there without comparing
                group = [Op(op.kind, op.path, op.entry, op.expect, unc.reasons[blocker]) for op in group]
            for u in unc.below.get(d.path, ()):  # clear the way for removing this directory
                if u in forced_removals or u in left or in_current(u):
                    continue  # (a path the current tree holds is a difference: judged on its own)
                if (ignored := ignored_at_mark(u)) is not None:  # never touched, even forced: the
                    left[u] = f"ignored at the mark ({ignored})"  # directory stays (see below)
                    continue
                forced_removals.add(u)
                extra.append(Op("remove", u, None, None, unc.reasons[u]))
        groups[d.path] = (_COUNT[d.status], group)
    _keep_what_holds_ignored(groups, kept, left, ignored_below)
    for u in unc.reasons:  # unknown then and now: whatever changed in it is left, and said so
        if u not in kept and u not in left and (not tops or any(at_or_below(u, t) for t in tops)):
            if current is not None and trees.unlisted(trees.lookup(load, current, u)):
                if trees.unlisted(trees.lookup(load, target, u)):
                    left[u] = "could not be listed at the mark, nor now: what it holds is left as it is"
    for u, why in unc.reasons.items():  # uncaptured paths that did not exist at M (point: delete them)
        if u in forced_removals or u in groups or u in kept or u in left:
            continue
        if tops and not any(at_or_below(u, t) for t in tops):
            continue
        if any(strictly_below(u, x) for x in (*left, *kept)) or trees.lookup(load, target, u) is not None:
            continue
        ignored = ignored_at_mark(u)
        hidden = inside_unlisted(u)
        if ignored is not None:
            left[u] = f"ignored at the mark ({ignored})"
        elif hidden is not None:
            left[u] = f"inside {show(hidden)}, which could not be listed at the mark"
        elif not force:
            kept[u] = f"not captured ({why}): did not exist at the mark"
        else:
            forced_removals.add(u)
            extra.append(Op("remove", u, None, None, why))
    counts = dict.fromkeys(("restore", "recreate", "delete", "mode", "type"), 0)
    ops: list[Op] = []
    for count, group in groups.values():
        counts[count] += 1
        ops.extend(group)
    counts["delete"] += len(extra)
    ops.extend(extra)
    if not tops:
        ops.extend(_root_mode(root_modes))
    ops.extend(_open_read_only_dirs(load, current, ops, root_modes[0]))
    ordered = tuple(sorted(ops, key=_order))
    kept_t = tuple(sorted(kept.items(), key=lambda kv: _parts(kv[0])))
    left_t = tuple(sorted(left.items(), key=lambda kv: _parts(kv[0])))
    canonical = {
        "ops": [op._canonical() for op in ordered],
        "kept": [[p.hex(), r] for p, r in kept_t],
        "left": [[p.hex(), r] for p, r in left_t],
    }
    token = hashlib.sha256(json.dumps(canonical, sort_keys=True).encode()).hexdigest()[:32]
    return Plan(ordered, kept_t, counts, token, left_t)


def _keep_what_holds_ignored(
    groups: dict[bytes, tuple[str, list[Op]]],
    kept: dict[bytes, str],
    left: dict[bytes, str],
    ignored_below: IgnoredBelow | None,
) -> None:
    """A directory the plan would remove but that holds a path the mark's rules ignore stays:
    ``left`` when M has nothing there (no difference remains), ``kept`` when M has a file or a
    symlink in its place (a difference that cannot be undone without touching ignored data)."""
    if ignored_below is not None:
        for path, (_, group) in list(groups.items()):
            if any(op.kind == "rmdir" and op.forced is None for op in group):
                for p, why in ignored_below(path):
                    left.setdefault(p, why)
    for holder in sorted(left, key=_parts):
        for anc in ancestors(holder):
            entry = groups.get(anc)
            if entry is None or not any(op.kind == "rmdir" for op in entry[1]):
                continue
            del groups[anc]
            why = f"holds {show(holder)}, ignored at the mark"
            if any(op.kind in ("write", "symlink") for op in entry[1]):
                kept[anc] = why  # M has a non-directory here
            else:
                left[anc] = why


def _root_mode(root_modes: tuple[int | None, int | None]) -> list[Op]:
    now, then = root_modes
    if now is None or then is None or now == then:
        return []
    return [Op("chmod", b"", Entry("dir", then, 0, ""), Entry("dir", now, 0, ""))]


def _open_read_only_dirs(
    load: trees.Load, current: str | None, ops: Sequence[Op], root_mode: int | None
) -> list[Op]:
    """Chmods that give the owner write and search permission on the existing directories the
    ops work in, for the length of the apply, and give them their mode back afterwards."""
    need: dict[bytes, int] = {}
    for op in ops:
        if not op.path:
            continue
        parent = op.path.rpartition(b"/")[0]
        need[parent] = need.get(parent, 0) | _OWNER_WX
        for anc in [b"", *ancestors(parent)] if parent else []:
            need[anc] = need.get(anc, 0) | stat.S_IXUSR
    own: dict[bytes, list[Op]] = {}
    removed = {op.path for op in ops if op.kind in ("rmdir", "remove")}
    for op in ops:
        if op.kind == "chmod":
            own.setdefault(op.path, []).append(op)
    out: list[Op] = []
    for path, bits in need.items():
        if path:
            now = trees.lookup(load, current, path) if current is not None else None
            if now is None or now.kind != "dir":
                continue  # created by the plan (0700 while filled), or not a directory now
        elif root_mode is None:
            continue
        else:
            now = Entry("dir", root_mode, 0, "")
        mine = own.get(path, [])
        if now.mode & bits == bits or any(op.entry and op.entry.mode & bits == bits for op in mine):
            continue  # open already, or the plan's own chmod opens it first (see _order)
        opened = Entry("dir", now.mode | _OWNER_WX, 0, now.key)
        out.append(Op("chmod", path, opened, now))
        if not mine and path not in removed:  # else the plan's own chmod sets the mark's mode at the end
            out.append(Op("chmod", path, now, opened))
    return out
