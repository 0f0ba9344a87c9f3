"""Workspace roots: which directories may be one, how one is recognised, what it sits on.

Roots are real paths; refused are ``/``, the home directory itself, a
directory that holds snapd's own directories or lies inside them, one that overlaps another
workspace, and places that are not a project's files (:func:`check_place`):

* inside (or equal to) a VCS directory — a path component named ``.git``, ``.hg``, ``.jj`` or
  ``.svn``, or a directory shaped like a git directory (``HEAD`` plus ``objects/`` and
  ``refs/``, or plus ``commondir``): that covers bare repositories and the git directories
  ``.git`` files point to (``git worktree``'s ``.git/worktrees/X``, submodules'
  ``.git/modules/X``, ``--separate-git-dir``). A rollback there would rewrite git's own state.
* on a pseudo file system (proc, sysfs, devtmpfs, cgroup...), or holding one mounted below:
  kernel interfaces, not files — their baseline never ends and a rollback would write kernel
  settings. tmpfs and overlay are ordinary files and are accepted.

A root is recognised by ``dev:inode:generation`` — inode numbers are
reused at once (``rm -r d; mkdir d`` gets the same one on ext4), the generation tells the two
apart where the file system keeps one — so a directory replaced under the same path is not
silently given the old one's history. Roots on file systems that deliver no inotify events
are detected from the mount table, so the daemon can scan instead of missing changes.
"""

from __future__ import annotations

import fcntl
import os
import re
import struct
from collections.abc import Iterable
from pathlib import Path

from snapd.capture.ignore import VCS_NAMES
from snapd.errors import NotFound, WorkspaceRefused

FS_IOC_GETVERSION = 0x80087601  # _IOR('v', 1, long)
EVENTLESS_FS = frozenset(
    {"nfs", "nfs4", "cifs", "smb3", "smbfs", "9p", "v9fs", "drvfs", "sshfs", "fuse", "afs", "ceph"}
)
PSEUDO_FS = frozenset(
    {
        "proc",
        "sysfs",
        "devtmpfs",
        "devpts",
        "cgroup",
        "cgroup2",
        "debugfs",
        "tracefs",
        "securityfs",
        "bpf",
        "pstore",
        "configfs",
        "fusectl",
        "mqueue",
        "binfmt_misc",
        "efivarfs",
    }
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
        if vcs_dir_holding(other) is not None:
            continue  # accepted by an older snapd, refused now: it must not block its work tree
        if other != root and (other in root.parents or root in other.parents):
            raise WorkspaceRefused(
                f"refusing to watch {root}: it overlaps the workspace {other}"
                + ("" if watching else f" (unwatched, its history kept: `snapctl watch {other}` resumes it)")
            )
    check_place(root)
    return root


def check_place(root: Path) -> None:
    """WorkspaceRefused when real path ``root`` lies in a VCS directory or on (or above) a
    pseudo file system; also asked of stored workspaces at start-up, which older versions
    may have accepted."""
    vcs = vcs_dir_holding(root)
    if vcs is not None:
        raise WorkspaceRefused(
            f"refusing to watch {root}: it is inside the version-control directory {vcs}, which "
            "snapd never captures nor writes; watch the work tree instead"
        )
    kind = fs_type(root)
    if kind in PSEUDO_FS:
        raise WorkspaceRefused(
            f"refusing to watch {root}: it is on a {kind} file system, a kernel interface rather "
            "than files (nothing there can be captured or rolled back)"
        )
    below = [(m, k) for m, k in mounts() if k in PSEUDO_FS and root in Path(m).parents]
    if below:
        mount, kind = below[0]
        raise WorkspaceRefused(
            f"refusing to watch {root}: a {kind} file system is mounted inside it at {mount} "
            "(a kernel interface rather than files)"
        )


def vcs_dir_holding(path: Path) -> Path | None:
    """The outermost VCS directory that real path ``path`` is in or is, or None: a component
    named like one (``.git``, ``.hg``, ``.jj``, ``.svn``), or a directory shaped like a git
    directory, as bare repositories and the targets of ``.git`` files are."""
    for top in reversed([path, *path.parents]):
        if os.fsencode(top.name) in VCS_NAMES or _is_git_dir(top):
            return top
    return None


def _is_git_dir(d: Path) -> bool:
    """Shaped as git requires of a git directory: ``HEAD``, and ``objects/`` with ``refs/``
    (a repository) or ``commondir`` (a linked worktree's directory)."""
    try:
        if not (d / "HEAD").is_file():
            return False
        return ((d / "objects").is_dir() and (d / "refs").is_dir()) or (d / "commondir").is_file()
    except OSError:
        return False


def identity(root: Path) -> str:
    """``dev:inode:generation`` of the directory at ``root``; NotFound if it is gone."""
    try:
        fd = os.open(os.fsencode(root), os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        raise NotFound(
            f"workspace root {root} no longer exists: `snapctl rollback --to MARK -w {root}` "
            f"recreates it as at a mark, `snapctl restore MARK --target DIR -w {root}` writes a "
            f"mark elsewhere; or move it back (or remount it) and `snapctl watch {root}`"
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


def check_root(root: Path, known_id: str | None) -> str:
    """The identity of the directory at ``root``, which must be ``known_id`` (the directory
    whose history this is) unless that is None: NotFound when nothing is there,
    WorkspaceRefused when another directory is. When the file system that held it is not
    mounted, both say so: its files are not gone, and mounting it back is the cure — not
    ``forget``, which would delete a history that is still good."""
    try:
        now = identity(root)
    except NotFound as exc:
        raise NotFound((known_id and unmounted(root, known_id)) or exc.message) from None
    if known_id is not None and now != known_id:
        raise WorkspaceRefused(
            unmounted(root, known_id)
            or f"the directory {root} was replaced by another one since snapd captured it (its "
            f"history belongs to the old one): `snapctl rollback --to MARK -w {root}` rolls the new "
            f"one back and goes on with the history there (what it holds now is kept first: "
            f"`snapctl undo` returns it), `snapctl restore MARK --target DIR -w {root}` writes a "
            "mark elsewhere; or put the old directory back and `snapctl watch` it"
        )
    return now


def root_state(root: Path, known_id: str | None) -> str | None:
    """What became of the directory whose history this is: None when it is at ``root``,
    ``"missing"`` when nothing is there, ``"new"`` when another directory is. A root on a file
    system that is not mounted is not gone (WorkspaceRefused: mount it back), nor is a path that
    holds something else than a directory, or one that cannot be opened (refused, saying why)."""
    try:
        check_root(root, known_id)
        return None
    except NotFound as exc:
        if known_id and unmounted(root, known_id):
            raise WorkspaceRefused(exc.message) from None
        if os.path.lexists(root):
            raise WorkspaceRefused(
                f"{root} is not a directory snapd can open now ({_why_unopenable(root)}): "
                "nothing was changed"
            ) from None
        return "missing"
    except WorkspaceRefused:
        if known_id and unmounted(root, known_id):
            raise
        return "new"


def _why_unopenable(root: Path) -> str:
    try:
        os.close(os.open(os.fsencode(root), os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC))
    except OSError as exc:
        return exc.strerror or str(exc)
    return "it changed while looked at"


def replaced(root: Path, known_id: str) -> str | None:
    """Why the directory at ``root`` is not the one recognised as ``known_id`` when the
    workspace started (:func:`check_root`), or None; NotFound if nothing is there any more."""
    try:
        check_root(root, known_id or None)
    except WorkspaceRefused as exc:
        return exc.message
    return None


def unmounted(root: Path, known_id: str) -> str | None:
    """What to do when the file system that held the directory ``known_id`` names is not
    mounted now (its device is in no mount, and ``root``, or what is left of its path, is on
    another one); None otherwise."""
    device = known_id.split(":", 1)[0]
    if not device.isdigit():
        return None
    dev = int(device)
    here = next((p for p in (root, *root.parents) if os.path.lexists(p)), Path("/"))
    try:
        if os.stat(here).st_dev == dev or dev in {d for d, _, _ in _mountinfo()}:
            return None
    except OSError:
        return None
    return (
        f"the file system that holds {root} (device {os.major(dev)}:{os.minor(dev)}) is not "
        f"mounted: its files are not gone. Mount it back, then `snapctl watch {root}` resumes "
        "the workspace with its history (a scan catches up with what changed meanwhile)"
    )


def mounts() -> list[tuple[str, str]]:
    """(mount point, file system type) of every mount, in /proc/self/mountinfo's order (a
    later mount at the same point hides an earlier one)."""
    return [(point, kind) for _, point, kind in _mountinfo()]


def _mountinfo() -> list[tuple[int, str, str]]:
    """(device, mount point, file system type) of every mount in /proc/self/mountinfo."""
    out = []
    try:
        with open("/proc/self/mountinfo", "rb") as fh:
            for line in fh:
                left, _, right = line.partition(b" - ")
                fields = left.split()
                if len(fields) > 4 and right:
                    major, _, minor = fields[2].partition(b":")
                    # Blanks, tabs, newlines and backslashes in mount points are octal escapes.
                    point = re.sub(rb"\\([0-7]{3})", lambda m: bytes([int(m[1], 8)]), fields[4])
                    out.append((os.makedev(int(major), int(minor)), os.fsdecode(point),
                                right.split()[0].decode("ascii", "replace")))
    except (OSError, ValueError):
        pass
    return out


def fs_type(path: Path) -> str:
    """File system type of the mount holding ``path``."""
    best, kind = "", "unknown"
    target = str(path)
    for mount, fstype in mounts():
        inside = target == mount or target.startswith(mount.rstrip("/") + "/")
        if inside and len(mount) >= len(best):
            best, kind = mount, fstype
    return kind


def delivers_events(kind: str, extra_eventless: Iterable[str] = ()) -> bool:
    """False for network, FUSE and VM-shared file systems: inotify sees no remote changes."""
    return not (kind in EVENTLESS_FS or kind in extra_eventless or kind.startswith("fuse"))
