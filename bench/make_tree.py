"""Build the benchmark corpora: two real trees of different shapes, at about 1k, 10k and 100k files.

``django``: "N released versions of one real project", side by side, as a workspace that holds
many checkouts or vendored copies does. Every version is its PyPI sdist (fetched with pip),
extracted to ``django-100k/django-<version>/``. 100,795 files, 644 MB, 14,475 distinct
contents; small files (6 kB on average), one directory for every two files.

``npm``: larger files, deeper and wider directories. npm tarballs (fetched with ``npm pack``,
which runs no package script): TypeScript (single files of 3-9 MB), the Monaco editor (up to
10 levels deep, ~90 MB per release), and Material UI's icons (21,000+ files in one directory).
About 98k files, ~400 MB.

Both are pinned by the sha256 of each archive as the registry serves it. The 1k and 10k trees
are exact prefixes of the same ordered list (archives in the order below, paths sorted bytewise
inside each). Plain files only: no ``.git``, ``.gitignore`` or symlink is made, so snapd and
git see exactly the same files. Each tree is built in ``<tree>.tmp`` and renamed into place;
``<tree>.json`` beside it records its figures; a tree whose JSON exists is not rebuilt
(``--force`` does). Benchmarks that modify files work on a copy.

    python bench/make_tree.py --corpus all --size all
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

MUI = "@mui/icons-material"
# (name, version, sha256 of the archive). Django: minor releases plus a few patch releases of
# each, as a store sees them: much shared, some changed.
PINNED: dict[str, list[tuple[str, str, str]]] = {
    "django": [("django", v, h) for v, h in [
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
    ]],
    # Mixed so that the 1k and 10k prefixes hold each shape too.
    "npm": [
        ("typescript", "5.4.5", "154fae77169f04155ac52d521ac59abb07c9be29ea3744732adbf9f14abb2440"),
        ("monaco-editor", "0.45.0", "1aa02fd4319545377de0ae10faab957f75ae0060dcc7c09915950613f232c4ab"),
        (MUI, "5.14.19", "28919078e725dbd70da38cf85db3609c3ca0ae65f90ae771b5a9bd9eed30148e"),
        ("typescript", "5.6.3", "ef67f8d8ad895858024b7339d3e34bf112cae3c5db1f538c3079038b17ae30fa"),
        ("monaco-editor", "0.52.0", "5dbda58750b13452de39affcea703af096022d8e3546c67ed5d3bd072763f939"),
        (MUI, "5.15.20", "fc85b671ecdcf5d014ed332ee16de84baa4bd163350a6e2fbad95a028e1b9a8c"),
        (MUI, "5.16.7", "be107272d8bb06d62624937880fb68ee9708542f4536f788f01220b593e681fa"),
    ],
}

SIZES: dict[str, int | None] = {"1k": 1_000, "10k": 10_000, "100k": None}  # None: every file


def tree_dir(corpus: str, size: str) -> Path:
    return DATA / f"{corpus}-{size}"


def archive_path(corpus: str, name: str, version: str) -> Path:
    if corpus == "npm":  # npm pack names @scope/pkg as scope-pkg-VERSION.tgz
        return CACHE / "npm" / f"{name.lstrip('@').replace('/', '-')}-{version}.tgz"
    # Releases from 5.1.x/5.2.x on name the sdist in lower case (PEP 625).
    for fname in (f"Django-{version}.tar.gz", f"django-{version}.tar.gz"):
        if (CACHE / fname).exists():
            return CACHE / fname
    return CACHE / f"Django-{version}.tar.gz"


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def download(corpus: str, name: str, version: str, sha256: str) -> Path:
    """Fetch one archive into the cache with the registry's ordinary client; check its pin."""
    path = archive_path(corpus, name, version)
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        if corpus == "npm":
            cmd = ["npm", "pack", "--silent", "--pack-destination", str(path.parent), f"{name}@{version}"]
        else:
            cmd = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--no-binary", ":all:",
                   f"{name}=={version}", "-d", str(path.parent)]
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
        path = archive_path(corpus, name, version)
    if not path.exists():
        sys.exit(f"the registry client did not produce {path}")
    if sha256_file(path) != sha256:
        sys.exit(f"{path}: sha256 differs from the pinned one; delete it and retry")
    return path


def members(path: Path) -> list[tarfile.TarInfo]:
    """The archive's regular files, sorted by their path inside its top directory."""
    with tarfile.open(path) as tar:
        files = [m for m in tar.getmembers() if m.isfile()]
    return sorted(files, key=lambda m: os.fsencode(m.name.split("/", 1)[1]))


def build(corpus: str, size: str, force: bool) -> dict[str, Any]:
    dest = tree_dir(corpus, size)
    info = dest.with_suffix(".json")
    if info.exists() and dest.is_dir() and not force:
        return dict(json.loads(info.read_text()), skipped=True)
    limit = SIZES[size]
    pins = PINNED[corpus]
    with ThreadPoolExecutor(4) as pool:  # pip's metadata step is slow, the network is not
        paths = list(pool.map(lambda p: download(corpus, *p), pins))

    tmp = dest.with_name(dest.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    if force:
        shutil.rmtree(dest, ignore_errors=True)
        info.unlink(missing_ok=True)
    tmp.mkdir(parents=True)
    left = limit
    used: list[str] = []
    for (name, version, _), path in zip(pins, paths, strict=True):
        if left is not None and left <= 0:
            break
        files = members(path)
        if left is not None:
            files = files[:left]
            left -= len(files)
        extract(path, files, tmp / f"{name.lstrip('@').replace('/', '-')}-{version}")
        used.append(f"{name} {version}")
    os.rename(tmp, dest)
    figures = dict(measure(dest), size=size, corpus=corpus, archives=used)
    info.write_text(json.dumps(figures, indent=1) + "\n")
    return figures


def extract(path: Path, files: list[tarfile.TarInfo], into: Path) -> None:
    """Extract the given members with the top directory ("Django-X/", "package/") stripped."""
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
    """Files, apparent bytes, allocated bytes (as du), distinct contents, directories, the
    deepest path (components below the root), the widest directory and the largest file."""
    files = nbytes = alloc = dirs = depth = widest = largest = 0
    digests: set[bytes] = set()
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        dirs += 1
        widest = max(widest, len(dirnames) + len(filenames))
        depth = max(depth, len(Path(dirpath).relative_to(root).parts) + (1 if filenames else 0))
        alloc += os.lstat(dirpath).st_blocks * 512
        for name in filenames:
            p = os.path.join(dirpath, name)
            st = os.lstat(p)
            files += 1
            nbytes += st.st_size
            largest = max(largest, st.st_size)
            alloc += st.st_blocks * 512
            with open(p, "rb") as f:
                digests.add(hashlib.blake2b(f.read(), digest_size=16).digest())
    return {"files": files, "bytes": nbytes, "du_bytes": alloc, "distinct": len(digests), "dirs": dirs,
            "depth": depth, "widest": widest, "largest": largest}


def record(name: str, fig: dict[str, Any]) -> None:
    """Keep the tree's figures in docs/bench-results/corpora.json (committed), for the docs."""
    path = BENCH.parent / "docs" / "bench-results" / "corpora.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    known = json.loads(path.read_text()) if path.exists() else {}
    known[name] = {k: v for k, v in fig.items() if k != "skipped"}
    path.write_text(json.dumps(known, indent=1, sort_keys=True) + "\n")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--corpus", choices=[*PINNED, "all"], default="all")
    ap.add_argument("--size", choices=[*SIZES, "all"], default="all")
    ap.add_argument("--force", action="store_true", help="rebuild even if the tree exists")
    args = ap.parse_args()
    for corpus in PINNED if args.corpus == "all" else [args.corpus]:
        for size in SIZES if args.size == "all" else [args.size]:
            t0 = time.perf_counter()
            fig = build(corpus, size, args.force)
            state = "exists" if fig.get("skipped") else f"built in {time.perf_counter() - t0:.1f} s"
            record(tree_dir(corpus, size).name, fig)
            print(
                f"{tree_dir(corpus, size)}: {fig['files']} files, {fig['bytes']} bytes "
                f"({fig['bytes'] / 1e6:.1f} MB, du {fig['du_bytes'] / 1e6:.1f} MB), "
                f"{fig['distinct']} distinct contents, {fig['dirs']} directories, depth {fig['depth']}, "
                f"widest directory {fig['widest']} entries, largest file {fig['largest']} bytes, "
                f"{len(fig['archives'])} archives [{state}]"
            )


if __name__ == "__main__":
    main()
