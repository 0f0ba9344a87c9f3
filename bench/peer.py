"""Time the peer (the side-git snapshotter in shared/bench/sidegit) and measure disk use.

Each peer call is the script run as-is, so its figures include bash and git start-up, as a
tool calling it per turn would pay them. Helpers here also measure and mutate workspaces:
``du_bytes`` counts like ``du`` (allocated blocks, each hardlinked inode once) and
``change_files`` makes the deterministic "N changed files" of an incremental test.

    python bench/peer.py --tree bench/data/tree-10k --tree bench/data/tree-100k
        writes bench/data/peer_baseline.txt (the tree is copied first: it is never modified)
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent
DATA = BENCH / "data"
WORK = DATA / "work"  # same file system as the trees: never tmpfs
SIDEGIT = Path(os.environ.get("SIDEGIT", "/work/shared/bench/sidegit"))


def _sidegit(*args: str | os.PathLike[str]) -> tuple[float, str]:
    t0 = time.perf_counter()
    out = subprocess.run(
        ["bash", str(SIDEGIT), *map(str, args)], check=True, stdout=subprocess.PIPE, text=True
    ).stdout
    return time.perf_counter() - t0, out.strip()


def peer_init(ws: str | os.PathLike[str], gitdir: str | os.PathLike[str]) -> float:
    return _sidegit("init", ws, gitdir)[0]


def peer_snap(ws: str | os.PathLike[str], gitdir: str | os.PathLike[str], label: str) -> tuple[float, str]:
    """Snapshot the whole workspace; (seconds, commit id)."""
    return _sidegit("snap", ws, gitdir, label)


def peer_reset(ws: str | os.PathLike[str], gitdir: str | os.PathLike[str], commit: str) -> float:
    """Make the workspace equal the commit (files created since are deleted); seconds."""
    return _sidegit("reset", ws, gitdir, commit)[0]


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


def drop_caches() -> bool:
    """Best effort: sync and drop the page cache; whether the kernel let us."""
    os.sync()
    try:
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("3\n")
        return True
    except OSError:
        return False


def cache_note(drop: bool) -> str:
    """Drop the page cache if asked (it is machine-wide: other sessions feel it); say what
    happened. Timings are warm-cache either way: trees are read once before a timing."""
    if not drop:
        return "page cache not dropped"
    return "page cache dropped" if drop_caches() else "drop_caches refused"


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


def copy_tree(src: str | os.PathLike[str], label: str) -> Path:
    """A private copy of a corpus tree under bench/data/work, so benchmarks can modify it."""
    WORK.mkdir(parents=True, exist_ok=True)
    dest = Path(tempfile.mkdtemp(prefix=f"{label}-", dir=WORK)) / "ws"
    subprocess.run(["cp", "-a", "--", str(src), str(dest)], check=True)
    return dest


def count(root: str | os.PathLike[str]) -> tuple[int, int]:
    """(regular files, apparent bytes) under root."""
    files = nbytes = 0
    for dirpath, _dirs, names in os.walk(root):
        for name in names:
            st = os.lstat(os.path.join(dirpath, name))
            files += 1
            nbytes += st.st_size
    return files, nbytes


def baseline(tree: Path, runs: int, changed: int, first_runs: int) -> list[str]:
    """The peer's figures on one tree, as report lines."""
    ws = copy_tree(tree, tree.name)
    gitdir = ws.parent / "sidegit"
    try:
        files, nbytes = count(ws)
        warm(ws)
        firsts: list[float] = []
        for _ in range(first_runs):  # each into a fresh gitdir; the last one is kept
            shutil.rmtree(gitdir, ignore_errors=True)
            peer_init(ws, gitdir)
            os.sync()  # no writeback of the copy or the last gitdir during the timing
            firsts.append(peer_snap(ws, gitdir, "baseline")[0])
        first = statistics.median(firsts)
        du_first = du_bytes(gitdir)
        pool = list_files(ws)
        snaps: list[float] = []
        for i in range(runs):
            change_files(ws, changed, seed=1000 + i, files=pool)
            s, commit = peer_snap(ws, gitdir, f"turn-{i}")
            snaps.append(s)
        du_after = du_bytes(gitdir)
        resets: list[float] = []
        for i in range(runs):
            change_files(ws, changed, seed=2000 + i, files=pool)
            resets.append(peer_reset(ws, gitdir, commit))
        clean = subprocess.run(
            ["git", f"--git-dir={gitdir}", f"--work-tree={ws}", "status", "--porcelain"],
            check=True,
            stdout=subprocess.PIPE,
        ).stdout
        return [
            f"tree {tree.name}: {files} files, {nbytes} bytes ({nbytes / 1e6:.1f} MB)",
            f"  first snap (warm cache), median {first:8.3f} s   "
            f"{files / first:9.0f} files/s  {nbytes / 1e6 / first:7.1f} MB/s"
            f"  (runs: {' '.join(f'{s:.3f}' for s in firsts)})",
            f"  gitdir du after first snap     {du_first} bytes ({du_first / 1e6:.1f} MB)",
            f"  snap after {changed} changed files   median {statistics.median(snaps):.3f} s"
            f"  (runs: {' '.join(f'{s:.3f}' for s in snaps)})",
            f"  reset to previous commit after {changed} changed files   median "
            f"{statistics.median(resets):.3f} s  (runs: {' '.join(f'{s:.3f}' for s in resets)})"
            f"{'' if not clean else '  WORKSPACE NOT CLEAN AFTER RESET'}",
            f"  gitdir du after {runs} more snaps  {du_after} bytes ({du_after / 1e6:.1f} MB)",
        ]
    finally:
        shutil.rmtree(ws.parent, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser(description="measure the side-git peer")
    ap.add_argument(
        "--tree", type=Path, action="append", help="corpus tree (repeatable; default tree-10k and tree-100k)"
    )
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--changed", type=int, default=10)
    ap.add_argument("--first-runs", type=int, default=3, help="first snaps, fresh gitdir each")
    ap.add_argument("--out", type=Path, default=DATA / "peer_baseline.txt")
    ap.add_argument("--drop-caches", action="store_true", help="drop the page cache at start")
    args = ap.parse_args()
    trees = args.tree or [DATA / "tree-10k", DATA / "tree-100k"]
    git = subprocess.run(["git", "--version"], check=True, stdout=subprocess.PIPE, text=True).stdout.strip()
    lines = [
        f"# peer baseline: {SIDEGIT} ({git}), {time.strftime('%Y-%m-%d %H:%M:%S')}",
        f"# nproc {os.cpu_count()}, {cache_note(args.drop_caches)}, "
        f"load average at start {os.getloadavg()[0]:.2f} (other sessions share the machine)",
    ]
    for tree in trees:
        if not tree.is_dir():
            sys.exit(f"{tree} missing: run python bench/make_tree.py first")
        lines += baseline(tree, args.runs, args.changed, args.first_runs)
        lines.append(f"  load average after {os.getloadavg()[0]:.2f}")
        print("\n".join(lines[-7:]), flush=True)
    args.out.write_text("\n".join(lines) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
