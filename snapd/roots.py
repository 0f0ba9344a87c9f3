"""Workspace roots: which directories may be one, how one is recognised, what it sits on.

DESIGN.md semantics 1: roots are real paths; refused are ``/``, the home directory itself, a
directory that holds snapd's own directories or lies inside them, and one that overlaps
another workspace. A root is recognised by ``dev:inode:generation`` — inode numbers are
reused at once (``rm -r d; mkdir d`` gets the same one on ext4), the generation tells the two
apart where the file system keeps one — so a directory replaced under the same path is not
silently given the old one's history. Roots on file systems that deliver no inotify events
are detected from the mount table, so the daemon can scan instead of missing changes.
"""

from __future__ import annotations

import fcntl
import os
import struct
from collections.abc import Iterable
from pathlib import Path

from snapd.errors import NotFound, WorkspaceRefused

FS_IOC_GETVERSION = 0x80087601  # _IOR('v', 1, long)
EVENTLESS_FS = frozenset(
    {"nfs", "nfs4", "cifs", "smb3", "smbfs", "9p", "v9fs", "drvfs", "sshfs", "fuse", "afs", "ceph"}
)


def validate(
    path: Path, homes: Iterable[Path], own_dirs: Iterable[Path], others: Iterable[tuple[Path, bool]]
) -> Path:
    """The real path of ``path`` if it may be a workspace; WorkspaceRefused saying why not.

    ``others``: the existing workspaces' roots, with whether each is still watched.
    """
    try:
        root = path.resolve(strict=True)
    except (FileNotFoundError, NotADirectoryError) as exc:
        raise NotFound(f"cannot watch {path}: it does not exist") from exc
    except (RuntimeError, OSError) as exc:
        raise WorkspaceRefused(f"cannot watch {path}: {getattr(exc, 'strerror', None) or exc}") from exc
    if not root.is_dir():
        raise WorkspaceRefused(f"cannot watch {root}: not a directory")
    if root == Path("/"):
        raise WorkspaceRefused("refusing to watch / : choose a project directory")
    if any(root == h.resolve() for h in homes):
        raise WorkspaceRefused(
            f"refusing to watch your home directory {root} itself: choose a project directory"
        )
    for own in own_dirs:
        own = own.resolve()
        if own == root or root in own.parents or own in root.parents:
            raise WorkspaceRefused(f"refusing to watch {root}: it overlaps snapd's own directory {own}")
    for other, watching in others:
        if other != root and (other in root.parents or root in other.parents):
            raise WorkspaceRefused(
                f"refusing to watch {root}: it overlaps the workspace {other}"
                + ("" if watching else " (unwatched; `snapctl forget` it first)")
            )
    return root


def identity(root: Path) -> str:
    """``dev:inode:generation`` of the directory at ``root``; NotFound if it is gone."""
    try:
        fd = os.open(os.fsencode(root), os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        raise NotFound(
            f"workspace root {root} no longer exists: recreate it, or `snapctl forget -w {root}`"
        ) from None
    try:
        st = os.fstat(fd)
        try:
            generation = struct.unpack("l", fcntl.ioctl(fd, FS_IOC_GETVERSION, bytes(8)))[0]
        except OSError:
            generation = 0
    finally:
        os.close(fd)
    return f"{st.st_dev}:{st.st_ino}:{generation}"


def replaced(root: Path, known_id: str) -> str | None:
    """Why the directory at ``root`` is not the one recognised as ``known_id`` when the
    workspace started (it was replaced), or None; NotFound if nothing is there any more."""
    if known_id and identity(root) != known_id:
        return (
            f"the directory {root} was replaced while snapd watched it: `snapctl forget -w "
            f"{root}`, then `snapctl watch {root}` to start a new history"
        )
    return None


def fs_type(path: Path) -> str:
    """File system type of the mount holding ``path`` (from /proc/self/mountinfo)."""
    best, kind = "", "unknown"
    target = str(path)
    try:
        with open("/proc/self/mountinfo", encoding="utf-8", errors="replace") as fh:
            for line in fh:
                left, _, right = line.partition(" - ")
                mount = left.split()[4].replace("\\040", " ")
                inside = target == mount or target.startswith(mount.rstrip("/") + "/")
                if inside and len(mount) >= len(best):
                    best, kind = mount, right.split()[0]
    except OSError:
        pass
    return kind


def delivers_events(kind: str, extra_eventless: Iterable[str] = ()) -> bool:
    """False for network, FUSE and VM-shared file systems: inotify sees no remote changes."""
    return not (kind in EVENTLESS_FS or kind in extra_eventless or kind.startswith("fuse"))
