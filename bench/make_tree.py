"""Build the benchmark corpus: real source trees of about 1k, 10k and 100k files.

Shape: "N released versions of one real project", side by side, as a workspace that holds many
checkouts or vendored copies of the same code does. The project is Django; every version is its
PyPI sdist (immutable, pinned below by sha256), extracted to ``tree-100k/django-<version>/``.

- tree-100k: all 15 versions, complete: 100,795 files, 644 MB (1.08 GB allocated), 14,475
  distinct contents — near the reference shape of 85k files / 1.1 GB / 17 versions / 16.5k
  distinct contents.
- tree-10k: 4.0 complete + the first 3,443 files of 4.0.10 (60.9 MB, 6,411 distinct).
- tree-1k: the first 1,000 files of 4.0 (11.5 MB, 908 distinct).
  tree-10k and tree-1k are exact prefixes of the same ordered list (versions in the order
  below, paths sorted bytewise inside each version).

Plain files only: no ``.git`` is made inside (the sdists carry none, nor any ``.gitignore`` or
symlink, so snapd and git see exactly the same files). Each tree is built in ``<tree>.tmp`` and
renamed into place, and ``<tree>.json`` beside it records its figures; a tree whose JSON exists
is not rebuilt (``--force`` does). Benchmarks that modify files must work on a copy.

    python bench/make_tree.py --size 100k      # or 10k, 1k, all
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tarfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
DATA = BENCH / "data"
CACHE = DATA / "cache"

PROJECT = "django"
# Versions in tree order, with the sha256 of each sdist as PyPI serves it (sha256sum of the
# downloaded file). Minor releases plus a few patch releases of each, as a store sees them:
# much shared, some changed.
PINNED: list[tuple[str, str]] = [
    ("4.0", "d5a8a14da819a8b9237ee4d8c78dfe056ff6e8a7511987be627192225113ee75"),
    ("4.0.10", "2c2f73c16b11cb272c6d5e3b063f0d1be06f378d8dc6005fbe8542565db659cc"),
    ("4.1", "032f8a6fc7cf05ccd1214e4a2e21dfcd6a23b9d575c6573cacc8c67828dbe642"),
    ("4.1.7", "44f714b81c5f190d9d2ddad01a532fe502fa01c4cb8faf1d081f4264ed15dcd8"),
    ("4.1.13", "94a3f471e833c8f124ee7a2de11e92f633991d975e3fa5bdd91e8abd66426318"),
    ("4.2", "c36e2ab12824e2ac36afa8b2515a70c53c7742f0d6eaefa7311ec379558db997"),
    ("4.2.5", "5e5c1c9548ffb7796b4a8a4782e9a2e5a3df3615259fc1bfd3ebc73b646146c1"),
    ("4.2.11", "6e6ff3db2d8dd0c986b4eec8554c8e4f919b5c1ff62a5b4390c17aff2ed6e5c4"),
    ("4.2.20", "92bac5b4432a64532abb73b2ac27203f485e40225d2640a7fbef2b62b876e789"),
    ("5.0", "7d29e14dfbc19cb6a95a4bd669edbde11f5d4c6a71fdaa42c2d40b6846e807f7"),
    ("5.0.7", "bd4505cae0b9bd642313e8fb71810893df5dc2ffcacaa67a33af2d5cd61888f2"),
    ("5.1", "848a5980e8efb76eea70872fb0e4bc5e371619c70fffbe48e3e1b50b2c09455d"),
    ("5.1.6", "1e39eafdd1b185e761d9fab7a9f0b9fa00af1b37b25ad980a8aa0dac13535690"),
    ("5.2", "1a47f7a7a3d43ce64570d350e008d2949abe8c7e21737b351b6a1611277c6d89"),
    ("5.2.5", "0745b25681b129a77aae3d4f6549b62d3913d74407831abaa0d9021a03954bae"),
]

SIZES: dict[str, int | None] = {"1k": 1_000, "10k": 10_000, "100k": None}  # None: every file


def tree_dir(size: str) -> Path:
    return DATA / f"tree-{size}"


def sdist_path(version: str) -> Path:
    # Releases from 5.1.x/5.2.x on name the sdist in lower case (PEP 625).
    for name in (f"Django-{version}.tar.gz", f"django-{version}.tar.gz"):
        if (CACHE / name).exists():
            return CACHE / name
    return CACHE / f"Django-{version}.tar.gz"


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def download(version: str) -> Path:
    """Fetch one sdist into the cache with pip (the ordinary PyPI client), check its pin."""
    if not sdist_path(version).exists():
        CACHE.mkdir(parents=True, exist_ok=True)
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "download",
                "-q",
                "--no-deps",
                "--no-binary",
                ":all:",
                f"{PROJECT}=={version}",
                "-d",
                str(CACHE),
            ],
            check=True,
            stdout=subprocess.DEVNULL,
        )
    path = sdist_path(version)
    if not path.exists():
        sys.exit(f"pip did not produce {path}")
    if sha256_file(path) != dict(PINNED)[version]:
        sys.exit(f"{path}: sha256 differs from the pinned one; delete it and retry")
    return path


def members(path: Path) -> list[tarfile.TarInfo]:
    """The sdist's regular files, sorted by their path inside the version directory."""
    with tarfile.open(path) as tar:
        files = [m for m in tar.getmembers() if m.isfile()]
    return sorted(files, key=lambda m: os.fsencode(m.name.split("/", 1)[1]))


def build(size: str, force: bool) -> dict[str, Any]:
    dest = tree_dir(size)
    info = dest.with_suffix(".json")
    if info.exists() and dest.is_dir() and not force:
        return dict(json.loads(info.read_text()), skipped=True)
    limit = SIZES[size]
    versions = [v for v, _ in PINNED]
    if limit is None:  # pip's metadata step is slow, the network is not: fetch in parallel
        with ThreadPoolExecutor(4) as pool:
            list(pool.map(download, versions))

    tmp = dest.with_name(dest.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    if force:
        shutil.rmtree(dest, ignore_errors=True)
        info.unlink(missing_ok=True)
    tmp.mkdir(parents=True)
    left = limit
    used: list[str] = []
    for version in versions:
        if left is not None and left <= 0:
            break
        path = download(version)
        files = members(path)
        if left is not None:
            files = files[:left]
            left -= len(files)
        extract(path, files, tmp / f"django-{version}")
        used.append(version)
    os.rename(tmp, dest)
    figures = dict(measure(dest), size=size, project=PROJECT, versions=used)
    info.write_text(json.dumps(figures, indent=1) + "\n")
    return figures


def extract(path: Path, files: list[tarfile.TarInfo], into: Path) -> None:
    """Extract the given members with the top directory ("Django-X/") stripped."""
    wanted = {m.name for m in files}

    def strip(member: tarfile.TarInfo, dest: str) -> tarfile.TarInfo | None:
        if member.name not in wanted:
            return None
        member = tarfile.data_filter(member, dest)  # no absolute paths, links out, setuid…
        return member.replace(name=member.name.split("/", 1)[1], deep=False)

    into.mkdir(parents=True)
    with tarfile.open(path) as tar:
        tar.extractall(into, members=[m for m in tar.getmembers() if m.name in wanted], filter=strip)


def measure(root: Path) -> dict[str, int]:
    """Files, apparent bytes, allocated bytes (as du) and distinct contents of a tree."""
    files = nbytes = alloc = 0
    digests: set[bytes] = set()
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        alloc += os.lstat(dirpath).st_blocks * 512
        for name in filenames:
            p = os.path.join(dirpath, name)
            st = os.lstat(p)
            files += 1
            nbytes += st.st_size
            alloc += st.st_blocks * 512
            with open(p, "rb") as f:
                digests.add(hashlib.blake2b(f.read(), digest_size=16).digest())
    return {"files": files, "bytes": nbytes, "du_bytes": alloc, "distinct": len(digests)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--size", choices=[*SIZES, "all"], default="all")
    ap.add_argument("--force", action="store_true", help="rebuild even if the tree exists")
    args = ap.parse_args()
    for size in SIZES if args.size == "all" else [args.size]:
        t0 = time.perf_counter()
        fig = build(size, args.force)
        state = "exists" if fig.get("skipped") else f"built in {time.perf_counter() - t0:.1f} s"
        vers = fig["versions"]
        print(
            f"{tree_dir(size)}: {fig['files']} files, {fig['bytes']} bytes "
            f"({fig['bytes'] / 1e6:.1f} MB, du {fig['du_bytes'] / 1e6:.1f} MB), "
            f"{fig['distinct']} distinct contents, {len(vers)} versions "
            f"({vers[0]}..{vers[-1]}) [{state}]"
        )


if __name__ == "__main__":
    main()
