"""Directory modes during a rollback: the order of a plan's ops, and the chmods that let it
work inside directories that are read-only now or at the mark.

Invariants (the order :func:`order` gives): all removals first (files, then directories
deepest-first), so a type change never meets its own old kind; then directories
parents-first; then contents; then directory modes deepest-first, so a directory that is
read-only at M is still filled first. Directories are created 0700 (``MKDIR_MODE``: private
while being filled) and get their mode at the end. The only early ``chmod`` is one that gives
the owner back write+search on a directory that needs it; an existing directory the ops work
in that lacks it is opened for the length of the apply and given its mode back afterwards
(:func:`open_read_only_dirs`).
"""

from __future__ import annotations

import stat
from collections.abc import Sequence

from snapd.paths import ancestors
from snapd.rollback.ops import MKDIR_MODE, Op, parts
from snapd.store import trees
from snapd.store.trees import Entry

_OWNER_WX = stat.S_IWUSR | stat.S_IXUSR


def order(op: Op) -> tuple[int, int, list[bytes]]:
    """Phase, then parents-first (depth 0) or deepest-first (minus the depth), then name."""
    names = parts(op.path)
    if op.kind == "chmod" and op.entry is not None and op.entry.kind == "dir":
        old = op.expect.mode if op.expect is not None else MKDIR_MODE
        if (old & _OWNER_WX) != _OWNER_WX and (op.entry.mode & _OWNER_WX) == _OWNER_WX:
            return (0, 0, names)  # give the owner write+search back before working inside
        return (5, -len(names) if op.path else 0, names)  # the root (b"") is the shallowest: last
    if op.kind == "remove":
        return (1, 0, names)
    if op.kind == "rmdir":
        return (2, -len(names), names)
    if op.kind == "mkdir":
        return (3, 0, names)
    return (4, 0, names)  # write, symlink, chmod of a file


def root_mode(root_modes: tuple[int | None, int | None]) -> list[Op]:
    """The chmod of the root itself (path b""), from its mode now to the mark's, if both are known."""
    now, then = root_modes
    if now is None or then is None or now == then:
        return []
    return [Op("chmod", b"", Entry("dir", then, 0, ""), Entry("dir", now, 0, ""))]


def open_read_only_dirs(
    load: trees.Load, current: str | None, ops: Sequence[Op], root_mode: int | None
) -> list[Op]:
    """Chmods that give the owner write and search permission on the existing directories the
    ops work in, for the length of the apply, and give them their mode back afterwards."""
    need: dict[bytes, int] = {}
    for op in ops:
        if not op.path:
            continue
        parent = op.path.rpartition(b"/")[0]
        if parent and current is None:  # from nothing, no directory but the root is there: searched
            need[b""] = need.get(b"", 0) | stat.S_IXUSR
            continue
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
            continue  # open already, or the plan's own chmod opens it first (see order)
        opened = Entry("dir", now.mode | _OWNER_WX, 0, now.key)
        out.append(Op("chmod", path, opened, now))
        if not mine and path not in removed:  # else the plan's own chmod sets the mark's mode at the end
            out.append(Op("chmod", path, now, opened))
    return out
