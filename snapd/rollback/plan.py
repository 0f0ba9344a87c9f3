"""Rollback planning: the exact list of operations that turns the captured state into a mark's.

A plan is computed from two trees only — ``current`` (the barrier'd pre-rollback mark, i.e.
what the workspace holds now as far as snapd could capture it) and ``target`` (mark M) — so it
is pure and can be shown, compared and confirmed before anything is touched. What a plan is
made of (:class:`~snapd.rollback.ops.Op`, :class:`~snapd.rollback.ops.Plan`, the token) is
:mod:`snapd.rollback.ops`; which differences it looks at, :mod:`snapd.rollback.scope`; the order
of its ops and the chmods around read-only directories, :mod:`snapd.rollback.modes`.

Invariants:
- applying ``ops`` in sequence is valid and yields ``target`` for every path in scope (the
  order: :mod:`snapd.rollback.modes`);
- a path whose current content could not be captured (``uncapturable``) is never overwritten
  or deleted, nor is a directory holding one, nor anything inside one: such changes are left
  out and listed in ``kept`` — unless ``force``, where the ops touching it carry ``forced``
  (the reason) and apply replaces whatever is there without comparing it (but one that M's
  rules ignore is never touched, even to clear the way for its directory's removal);
- a path absent at M that M's rules ignore (as what it is now, or as a directory: a symlink
  named like a ``build/`` pattern) is ``left`` when M's ignored ``names`` hold it or a directory
  above it (it was there, ignored), and deleted like any path absent at M when they do not
  (it did not exist then, as ``git checkout`` would). A mark that recorded no names (an older
  store's) leaves it, and ``kept`` (loud) one that its rules ignore only as a directory;
- a directory that cannot be listed now, where M has a directory it could list, is ``kept``
  with everything under it, with or without ``force``: what it holds now is unknown, so
  nothing there is changed;
- a directory that could not be listed at M nor now is ``left`` by name (what it holds is
  unknown on both sides; only the children captured by name are compared);
- a path M holds as ``uncaptured`` (there, but its content could not be captured) is never
  deleted or replaced, with or without ``force``: when it differs from M it is ``kept`` with
  nothing done under it (there is nothing to restore it from);
- ``token`` is a digest of the ops, ``kept`` and ``left``: equal plans have equal tokens, so a
  re-plan that changed nothing is recognised.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence

from snapd.errors import NotFound
from snapd.paths import ancestors, at_or_below, strictly_below
from snapd.rollback import modes, scope
from snapd.rollback.ops import COUNT, MKDIR_MODE, Op, Plan, ops_for, parts, show
from snapd.store import trees
from snapd.store.ignored import IgnoredNames

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
    names: IgnoredNames | None = None,
    precious: Callable[[bytes], bool] | None = None,
) -> Plan:
    """The operations that make the workspace captured as ``current`` hold ``target``.

    ``only`` limits the plan to those paths and everything below them (plus the parent
    directories they need); ``uncapturable`` maps paths on disk that ``current`` could not
    hold to the reason. ``target_ignores`` and ``ignored_below`` say what the mark's rules
    ignore: such paths are never touched (``left``), nor is a directory that holds one.
    ``root_modes``: the root's mode now and at the mark (None: unknown). ``absent``: paths the
    mark knows were absent whatever its rules say (a pre-rollback mark's: what its rollback
    created), so they are deleted even where those rules ignore them. ``names``: the top-most
    ignored entries present at M (None: not recorded), which tell an ignored path that was
    there from one that was not. ``precious``: whether the mark's rules capture a file only
    because it is precious (its ops say so). Raises NotFound for an ``only`` path that exists
    neither now nor at M.
    """
    tops = scope.normalize_only(only)
    differences = scope.differences(load, current, target, tops)
    unc = scope.Uncaptured({**scope.uncaptured_now(differences), **(uncapturable or {})})
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
        and scope.listed_dir(trees.lookup(load, target, u))
    ]

    def in_current(path: bytes) -> bool:
        return current is not None and trees.lookup(load, current, path) is not None

    def ignored_at_mark(u: bytes) -> str | None:
        """Why M's rules ignore the uncapturable ``u``: as what it is now, or, not in the
        current tree, as either kind."""
        now = trees.lookup(load, current, u) if current is not None else None
        kinds = (False, True) if now is None else (now.kind == "dir",)
        if names is not None and not names.covers(u):
            return None  # not there at M: judged like any path absent then
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
        group = ops_for(d)
        if not group:
            continue
        # (each search guarded by its list being non-empty: a restore's plan from nothing has
        # ~10^5 differences and empty lists, and a generator made for nothing costs 1-2 s there)
        made = bool(absent) and any(at_or_below(d.path, a) for a in absent)  # absent at M whatever its rules
        if (unrestorable and any(strictly_below(d.path, k) for k in unrestorable)) or (
            not made and left and any(strictly_below(d.path, k) for k in left)
        ):
            continue  # below an ignored directory (never touched), or below a path kept as it is
        if d.new is None and (hidden := inside_unlisted(d.path)) is not None:
            left[d.path] = f"inside {show(hidden)}, which could not be listed at the mark"
            continue
        blind = next((u for u in blind_now if at_or_below(d.path, u)), None) if blind_now else None
        if blind is not None:
            kept[blind] = f"cannot be listed now ({unc.reasons[blind]}): what it holds is unknown"
            continue
        if trees.is_uncaptured(d.new):
            kept[d.path] = f"not captured at the mark ({trees.uncaptured_reason(d.new)}): cannot be restored"
            unrestorable.append(d.path)
            continue
        outer = next((k for k in kept_dirs if strictly_below(d.path, k)), None) if kept_dirs else None
        if outer is not None:
            kept[d.path] = f"its directory {show(outer)} is kept"
            continue
        if d.new is None and d.old is not None and not made:
            why = ignores(d.path, d.old.kind == "dir")
            as_dir = ignores(d.path, True) if d.old.kind != "dir" else None
            if names is not None:  # M recorded its ignored names: exact either way
                if (why or as_dir) is not None and names.covers(d.path):
                    left[d.path] = f"ignored at the mark ({why or as_dir}), and there then"
                    continue
                # else: not there at M (nor anything above it that M ignored): deleted below
            elif why is not None:  # absent at M because its rules ignored it, not because it did not exist
                left[d.path] = f"ignored at the mark ({why})"
                continue
            elif as_dir is not None:  # no names recorded: an ignored directory may have been here
                kept[d.path] = (
                    f"the mark's rules ignore a directory of this name ({as_dir}): one may have been "
                    "there, so this is left as it is"
                )
                continue
        blocker = next((u for u in map(unc.blocker, group) if u is not None), None) if unc.reasons else None
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
        groups[d.path] = (COUNT[d.status], group)
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
        ops.extend(modes.root_mode(root_modes))
    ops.extend(modes.open_read_only_dirs(load, current, ops, root_modes[0]))
    if precious is not None:
        ops = [
            dataclasses.replace(op, precious=True) if _is_file_op(op) and precious(op.path) else op
            for op in ops
        ]
    ordered = tuple(sorted(ops, key=modes.order))
    kept_t = tuple(sorted(kept.items(), key=lambda kv: parts(kv[0])))
    left_t = tuple(sorted(left.items(), key=lambda kv: parts(kv[0])))
    return Plan(ordered, kept_t, counts, left_t)


def _is_file_op(op: Op) -> bool:
    """An op on a file or symlink (precious applies to no directory)."""
    entry = op.entry or op.expect
    return op.kind in ("write", "symlink", "remove", "chmod") and entry is not None and entry.kind != "dir"


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
    for holder in sorted(left, key=parts):
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


def from_nothing(load: trees.Load, target: str, root_modes: tuple[int | None, int | None]) -> Plan:
    """:func:`plan` from no current state to ``target`` (a restore's: ``plan(load, None,
    target, root_modes=root_modes)``, the same plan) in one walk of the tree, without sorting.

    From nothing every path is added and nothing is ignored, kept or left but what the mark
    holds without content, so the walk's order (parents first, names in byte order, which is
    the order of :func:`modes.order` within each phase) is already the plan's: the
    directories' mkdirs, then the files and symlinks, then the directories' modes deepest
    first (by depth, each depth in walk order). A restore of 122k entries spent a third of its
    plan's time sorting them."""
    mkdirs: list[Op] = []
    files: list[Op] = []
    modes_by_depth: list[list[Op]] = []
    kept: list[tuple[bytes, str]] = []
    for path, entry in trees.walk(load, target):
        if trees.is_uncaptured(entry):
            why = f"not captured at the mark ({trees.uncaptured_reason(entry)}): cannot be restored"
            kept.append((path, why))
        elif entry.kind != "dir":
            files.append(Op("write" if entry.kind == "file" else "symlink", path, entry, None))
        else:
            mkdirs.append(Op("mkdir", path, entry, None))
            if entry.mode != MKDIR_MODE:
                depth = path.count(b"/")
                while len(modes_by_depth) <= depth:
                    modes_by_depth.append([])
                made_as = trees.Entry("dir", MKDIR_MODE, 0, entry.key)
                modes_by_depth[depth].append(Op("chmod", path, entry, made_as))
    made = [*mkdirs, *files]
    for level in reversed(modes_by_depth):
        made.extend(level)
    own = modes.root_mode(root_modes)
    root = [*own, *modes.open_read_only_dirs(load, None, [*made, *own], root_modes[0])]
    early = [op for op in root if modes.order(op)[0] == 0]
    late = [op for op in root if modes.order(op)[0] != 0]
    counts = dict.fromkeys(("restore", "recreate", "delete", "mode", "type"), 0)
    counts["recreate"] = len(mkdirs) + len(files)
    ordered = (*sorted(early, key=modes.order), *made, *sorted(late, key=modes.order))
    return Plan(ordered, tuple(kept), counts, ())

