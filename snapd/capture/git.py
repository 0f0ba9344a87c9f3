"""Read-only git facts: which repository encloses a root (its git dir and the common dir that
linked worktrees share), HEAD, the tracked files, the work tree's top, and which linked work
tree a git dir under ``worktrees/`` belongs to.

Nothing here writes inside ``.git``: git runs with ``GIT_OPTIONAL_LOCKS=0`` (no opportunistic
index refresh) and without the location variables a hook may have set. Repository discovery
exists once, here: the ignore rules read ``<common dir>/info/exclude`` and the workspace stats
``<git dir>/index`` from the same :func:`find_repo`.
"""

from __future__ import annotations

import os
import stat
import subprocess
from pathlib import Path
from typing import Final, NamedTuple

_GIT_TIMEOUT: Final = 30.0
_MAX_FILE: Final = 1 << 20
# Set by git hooks and aliases; inherited, they would point our git at another repository.
_GIT_LOCATION_VARS: Final = frozenset(
    {
        "GIT_DIR",
        "GIT_WORK_TREE",
        "GIT_INDEX_FILE",
        "GIT_COMMON_DIR",
        "GIT_OBJECT_DIRECTORY",
        "GIT_ALTERNATE_OBJECT_DIRECTORIES",
        "GIT_NAMESPACE",
        "GIT_PREFIX",
    }
)


class Repo(NamedTuple):
    """Where a repository lives, as absolute byte paths."""

    top: bytes  # the work tree's top directory
    gitdir: bytes  # this work tree's git dir (a linked worktree's own, under the common dir)
    common: bytes  # the git dir shared by all work trees (info/exclude, objects, refs)


def read_regular(path: bytes) -> bytes | None:
    """Contents (at most 1 MiB) of a regular file; None if absent, unreadable, or a symlink
    (git >= 2.32 does not follow symlinked .gitignore files either)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        return os.read(fd, _MAX_FILE)
    except OSError:
        return None
    finally:
        os.close(fd)


def find_repo(root: bytes) -> Repo | None:
    """The repository enclosing ``root`` (work tree top, git dir, common git dir), found by looking
    for ``.git`` upwards (a directory, or a file ``gitdir: ...`` as in worktrees and
    submodules); None outside a repository."""
    current = os.path.abspath(root)
    while True:
        dotgit = os.path.join(current, b".git")
        gitdir: bytes | None = None
        if os.path.isdir(dotgit) and not os.path.islink(dotgit):
            gitdir = dotgit
        elif os.path.isfile(dotgit):
            data = read_regular(dotgit) or b""
            if data.startswith(b"gitdir:"):
                target = data[len(b"gitdir:") :].strip()
                gitdir = os.path.normpath(os.path.join(current, target))
        if gitdir is not None:
            common = gitdir
            commondir = read_regular(os.path.join(gitdir, b"commondir"))
            if commondir:
                common = os.path.normpath(os.path.join(gitdir, commondir.strip()))
            return Repo(current, gitdir, common)
        parent = os.path.dirname(current)
        if parent == current:
            return None
        current = parent


def linked_worktree(path: bytes) -> bytes | None:
    """The top of the linked work tree whose git dir (``<common dir>/worktrees/NAME``) is or
    holds ``path`` (absolute, real), or None. The work tree is the one git records in that
    directory's ``gitdir`` file (the path of the work tree's ``.git`` file, absolute or relative
    to that directory), and only if that ``.git`` file points back there: a stale record
    (the work tree moved or removed) names nothing."""
    parts = path.split(b"/")
    for i in range(len(parts) - 2, 0, -1):
        if parts[i] != b"worktrees":
            continue
        own = b"/".join(parts[: i + 2])
        if read_regular(os.path.join(own, b"commondir")) is None:  # not a linked worktree's git dir
            continue
        recorded = read_regular(os.path.join(own, b"gitdir"))
        if not recorded:
            continue
        top = os.path.dirname(os.path.normpath(os.path.join(own, recorded.strip())))
        repo = find_repo(top)
        if repo is not None and repo.top == top and os.path.realpath(repo.gitdir) == os.path.realpath(own):
            return top
    return None


def _git(root: Path, *args: str, timeout: float) -> bytes | None:
    """stdout of a read-only git command in ``root``, or None on any failure."""
    env = {k: v for k, v in os.environ.items() if k not in _GIT_LOCATION_VARS}
    env["GIT_OPTIONAL_LOCKS"] = "0"  # no opportunistic index refresh (a write)
    env["GIT_TERMINAL_PROMPT"] = "0"
    try:
        done = subprocess.run(
            ["git", "-C", os.fspath(root), *args],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            env=env,
            timeout=timeout,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    if done.returncode != 0:
        return None
    return done.stdout


def git_tracked_files(root: Path, timeout: float = _GIT_TIMEOUT) -> frozenset[bytes] | None:
    """Paths git tracks under ``root``, relative to ``root`` (``git ls-files`` run in a
    subdirectory lists that subtree relative to it). None when ``root`` is not inside a git
    work tree, git is missing, or it takes longer than ``timeout``."""
    out = _git(root, "ls-files", "-z", timeout=timeout)
    if out is None:
        return None
    return frozenset(p for p in out.split(b"\0") if p)


def git_head(root: Path, timeout: float = _GIT_TIMEOUT) -> str | None:
    """The commit HEAD names, or None (not a work tree, unborn branch, no git)."""
    out = _git(root, "rev-parse", "--verify", "--quiet", "HEAD", timeout=timeout)
    text = out.decode("ascii", "replace").strip() if out else ""
    return text or None


class HeadCache:
    """:func:`git_head` of one work tree, asking git again only when what decides HEAD changed.

    A mark records HEAD; running ``git rev-parse`` for it cost a fork and an exec on every
    mark (~3 ms, a third of a mark's budget). git stays the authority: its answer is reused
    while the files it read say the same — HEAD's text, the loose ref HEAD names (in the work
    tree's git dir and in the common one: ``refs/heads`` live there, per-worktree refs here),
    ``packed-refs`` (by stat: git replaces it whole, by rename) and a reftable's
    ``tables.list`` (rewritten with every ref update). A ref that is itself symbolic, or one
    whose name leaves ``refs/``, is never cached. ``runs``: git processes started."""

    def __init__(self, root: Path, repo: Repo) -> None:
        self.root, self.repo = root, repo
        self.runs = 0
        self._seen: tuple[object, ...] | None = None
        self._head: str | None = None

    def get(self) -> str | None:
        seen = self._inputs()
        if seen is not None and seen == self._seen:
            return self._head
        self.runs += 1
        self._head = git_head(self.root)
        self._seen = seen
        return self._head

    def _inputs(self) -> tuple[object, ...] | None:
        gitdir, common = self.repo.gitdir, self.repo.common
        head = read_regular(os.path.join(gitdir, b"HEAD"))
        if head is None:
            return None
        refs: list[bytes | None] = []
        if head.startswith(b"ref:"):
            name = head[4:].strip()
            if not name.startswith(b"refs/") or b".." in name.split(b"/"):
                return None
            refs = [read_regular(os.path.join(d, name)) for d in dict.fromkeys((gitdir, common))]
            if any(r is not None and r.startswith(b"ref:") for r in refs):
                return None
        try:
            st = os.stat(os.path.join(common, b"packed-refs"))
            packed: tuple[int, ...] = (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
        except OSError:
            packed = ()
        tables = read_regular(os.path.join(common, b"reftable", b"tables.list"))
        return head, *refs, packed, tables


def git_toplevel(path: Path, timeout: float = _GIT_TIMEOUT) -> Path | None:
    """Top of the git work tree containing ``path``, or None."""
    out = _git(path, "rev-parse", "--show-toplevel", timeout=timeout)
    if not out:
        return None
    text = out.rstrip(b"\n")
    return Path(os.fsdecode(text)) if text else None
