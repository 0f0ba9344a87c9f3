"""The peer (the side-git snapshotter in shared/bench/sidegit) and the workspace helpers.

What the peer does: each call is the script run as-is (bash plus plain git commands: ``add
-A``, ``write-tree``, ``commit-tree``, ``update-ref``; ``read-tree --reset -u`` to reset), so
its figures include bash and git start-up, as a tool calling it per turn would pay them. By
default git **never fsyncs** (git 2.39's ``core.fsync`` default syncs nothing but packs it
writes itself, and a snapshot writes loose objects). ``fsync=True`` runs the same script with
``git -c core.fsync=all`` on every git call (given through GIT_CONFIG_COUNT, which is what
``-c`` sets), so every object, the index and the refs are fsynced, as snapd fsyncs its
objects and commits its catalog with ``synchronous=FULL``.

Helpers: ``du_bytes`` counts like ``du`` (allocated blocks, each hardlinked inode once);
``peer_gc`` packs the peer's repository (``git gc``: packed, with deltas) and returns its
size; ``change_files`` makes the deterministic "N changed files" of an incremental test.
"""

from __future__ import annotations

import os
import random
import subprocess
import tempfile
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent
DATA = BENCH / "data"
WORK = DATA / "work"  # same file system as the trees: never tmpfs
SIDEGIT = Path(os.environ.get("SIDEGIT", "/work/shared/bench/sidegit"))


def sidegit_argv(*args: str | os.PathLike[str]) -> list[str]:
    """The command line of one peer call (the script run as-is, through bash)."""
    return ["bash", str(SIDEGIT), *map(str, args)]


def sidegit_env(fsync: bool = False) -> dict[str, str]:
    """The environment of a peer call; with ``fsync``, ``core.fsync=all`` for every git call."""
    env = dict(os.environ)
    if fsync:
        env.update(GIT_CONFIG_COUNT="1", GIT_CONFIG_KEY_0="core.fsync", GIT_CONFIG_VALUE_0="all")
    return env


def _sidegit(*args: str | os.PathLike[str], fsync: bool = False) -> tuple[float, str]:
    env = sidegit_env(fsync)
    t0 = time.perf_counter()
    out = subprocess.run(sidegit_argv(*args), check=True, stdout=subprocess.PIPE, text=True, env=env).stdout
    return time.perf_counter() - t0, out.strip()


def peer_init(ws: str | os.PathLike[str], gitdir: str | os.PathLike[str]) -> float:
    return _sidegit("init", ws, gitdir)[0]


def peer_snap(
    ws: str | os.PathLike[str], gitdir: str | os.PathLike[str], label: str, fsync: bool = False
) -> tuple[float, str]:
    """Snapshot the whole workspace; (seconds, commit id)."""
    return _sidegit("snap", ws, gitdir, label, fsync=fsync)


def peer_reset(ws: str | os.PathLike[str], gitdir: str | os.PathLike[str], commit: str) -> float:
    """Make the workspace equal the commit (files created since are deleted); seconds."""
    return _sidegit("reset", ws, gitdir, commit)[0]


def peer_gc(gitdir: str | os.PathLike[str]) -> int:
    """``git gc`` the peer's repository (packs with deltas, drops the loose copies); its du."""
    subprocess.run(["git", f"--git-dir={gitdir}", "gc", "-q"], check=True)
    return du_bytes(gitdir)


def du_bytes(path: str | os.PathLike[str]) -> int:
    """Allocated bytes under path as ``du -s --block-size=1`` counts them."""
    seen: set[tuple[int, int]] = set()
    total = 0
    for dirpath, _dirs, files in os.walk(path):
        for p in [dirpath, *(os.path.join(dirpath, f) for f in files)]:
            st = os.lstat(p)
            if st.st_nlink > 1:
                key = (st.st_dev, st.st_ino)
                if key in seen:
                    continue
                seen.add(key)
            total += st.st_blocks * 512
    return total


def drop_caches() -> None:
    """Write back and drop the page cache, dentries and inodes (machine-wide; root only).
    Nothing reads the tree after this: a timing that follows is cold."""
    os.sync()
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("3\n")


def warm(root: str | os.PathLike[str]) -> int:
    """Read every file once so that a timing starts from a warm page cache; bytes read."""
    n = 0
    for dirpath, _dirs, files in os.walk(root):
        for name in files:
            p = os.path.join(dirpath, name)
            if os.path.isfile(p) and not os.path.islink(p):
                with open(p, "rb") as f:
                    while block := f.read(1 << 20):
                        n += len(block)
    return n


def list_files(ws: str | os.PathLike[str]) -> list[bytes]:
    """Regular files under ws as sorted relative byte paths (``.git`` dirs skipped)."""
    root = os.fsencode(ws)
    out: list[bytes] = []
    for dirpath, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if d != b".git"]
        for name in files:
            p = os.path.join(dirpath, name)
            if os.path.isfile(p) and not os.path.islink(p):
                out.append(os.path.relpath(p, root))
    out.sort()
    return out


def change_files(
    ws: str | os.PathLike[str], n: int, seed: int, files: list[bytes] | None = None
) -> list[bytes]:
    """Append one line to n existing files picked by seed; their relative byte paths.

    The same seed on the same file list picks the same files; each call changes their content
    again (the line is appended, not replaced). Pass ``files`` (from ``list_files``) to avoid
    re-walking a large tree per call.
    """
    pool = list_files(ws) if files is None else files
    picked = sorted(random.Random(seed).sample(pool, n))
    root = os.fsencode(ws)
    for i, rel in enumerate(picked):
        with open(os.path.join(root, rel), "ab") as f:
            f.write(b"# snapd bench change seed=%d i=%d\n" % (seed, i))
    return picked


class Changes:
    """Successive :func:`change_files` calls on one pool of files, seeds 1, 2, 3…: each call
    changes ``n`` other (or the same, again) files, reproducibly."""

    def __init__(self, ws: str | os.PathLike[str], n: int, files: list[bytes]) -> None:
        self.ws, self.n, self.files, self.seed = ws, n, files, 0

    def __call__(self) -> list[bytes]:
        self.seed += 1
        return change_files(self.ws, self.n, seed=self.seed, files=self.files)


def copy_tree(src: str | os.PathLike[str], label: str) -> Path:
    """A private copy of a corpus tree under bench/data/work, so benchmarks can modify it."""
    WORK.mkdir(parents=True, exist_ok=True)
    dest = Path(tempfile.mkdtemp(prefix=f"{label}-", dir=WORK)) / "ws"
    subprocess.run(["cp", "-a", "--", str(src), str(dest)], check=True)
    return dest


def remove(path: str | os.PathLike[str]) -> None:
    """``rm -rf``: removes a 100k-file scratch tree without Python's per-entry overhead."""
    subprocess.run(["rm", "-rf", "--", str(path)], check=False)


def count(root: str | os.PathLike[str]) -> tuple[int, int]:
    """(regular files, apparent bytes) under root."""
    files = nbytes = 0
    for dirpath, _dirs, names in os.walk(root):
        for name in names:
            st = os.lstat(os.path.join(dirpath, name))
            files += 1
            nbytes += st.st_size
    return files, nbytes
