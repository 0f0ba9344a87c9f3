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
(and the 100k tree, of django's 500k tree, ``--size 500k``: more releases) are exact prefixes
of the same ordered list (archives in the order below, paths sorted bytewise
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

# The 500k tree: the 100k tree's releases, then every other release of 3.2.x to 4.2.x (by
# version) until 500,000 files: a workspace of many checkouts of one project, as a monorepo
# that vendors them would be. Django only (issue 33's 500k row).
MORE: dict[str, list[tuple[str, str, str]]] = {
    "django": [("django", v, h) for v, h in [
        ("3.2", "21f0f9643722675976004eb683c55d33c05486f94506672df3d6a141546f389d"),
        ("3.2.1", "95c13c750f1f214abadec92b82c2768a5e795e6c2ebd0b4126f895ce9efffcdd"),
        ("3.2.2", "0a1d195ad65c52bf275b8277b3d49680bd1137a5f55039a806f25f6b9752ce3d"),
        ("3.2.3", "13ac78dbfd189532cad8f383a27e58e18b3d33f80009ceb476d7fcbfc5dcebd8"),
        ("3.2.4", "66c9d8db8cc6fe938a28b7887c1596e42d522e27618562517cc8929eb7e7f296"),
        ("3.2.5", "3da05fea54fdec2315b54a563d5b59f3b4e2b1e69c3a5841dda35019c01855cd"),
        ("3.2.6", "f27f8544c9d4c383bbe007c57e3235918e258364577373d4920e9162837be022"),
        ("3.2.7", "95b318319d6997bac3595517101ad9cc83fe5672ac498ba48d1a410f47afecd2"),
        ("3.2.8", "f6d2c4069c9b9bfac03bedff927ea1f9e0d29e34525cec8a68fd28eb2a8df7af"),
        ("3.2.9", "51284300f1522ffcdb07ccbdf676a307c6678659e1284f0618e5a774127a6a08"),
        ("3.2.10", "074e8818b4b40acdc2369e67dcd6555d558329785408dcd25340ee98f1f1d5c4"),
        ("3.2.11", "69c94abe5d6b1b088bf475e09b7b74403f943e34da107e798465d2045da27e75"),
        ("3.2.12", "9772e6935703e59e993960832d66a614cf0233a1c5123bc6224ecc6ad69e41e2"),
        ("3.2.13", "6d93497a0a9bf6ba0e0b1a29cccdc40efbfc76297255b1309b3a884a688ec4b6"),
        ("3.2.14", "677182ba8b5b285a4e072f3ac17ceee6aff1b5ce77fd173cc5b6a2d3dc022fcf"),
        ("3.2.15", "f71934b1a822f14a86c9ac9634053689279cd04ae69cb6ade4a59471b886582b"),
        ("3.2.16", "3adc285124244724a394fa9b9839cc8cd116faf7d159554c43ecdaa8cdf0b94d"),
        ("3.2.17", "644288341f06ebe4938eec6801b6bd59a6534a78e4aedde2a153075d11143894"),
        ("3.2.18", "08208dfe892eb64fff073ca743b3b952311104f939e7f6dae954fe72dcc533ba"),
        ("3.2.19", "031365bae96814da19c10706218c44dff3b654cc4de20a98bd2d29b9bde469f0"),
        ("3.2.20", "dec2a116787b8e14962014bf78e120bba454135108e1af9e9b91ade7b2964c40"),
        ("3.2.21", "a5de4c484e7b7418e6d3e52a5b8794f0e6b9f9e4ce3c037018cf1c489fa87f3c"),
        ("3.2.22", "83b6d66b06e484807d778263fdc7f9186d4dc1862fcfa6507830446ac6b060ba"),
        ("3.2.23", "82968f3640e29ef4a773af2c28448f5f7a08d001c6ac05b32d02aeee6509508b"),
        ("3.2.24", "aaee9fb0fb4ebd4311520887ad2e33313d368846607f82a9a0ed461cd4c35b18"),
        ("3.2.25", "7ca38a78654aee72378594d63e51636c04b8e28574f5505dff630895b5472777"),
        ("4.0.1", "2485eea3cc4c3bae13080dee866ebf90ba9f98d1afe8fda89bfb0eb2e218ef86"),
        ("4.0.2", "110fb58fb12eca59e072ad59fc42d771cd642dd7a2f2416582aa9da7a8ef954a"),
        ("4.0.3", "77ff2e7050e3324c9b67e29b6707754566f58514112a9ac73310f60cd5261930"),
        ("4.0.4", "4e8177858524417563cc0430f29ea249946d831eacb0068a1455686587df40b5"),
        ("4.0.5", "f7431a5de7277966f3785557c3928433347d998c1e6459324501378a291e5aab"),
        ("4.0.6", "a67a793ff6827fd373555537dca0da293a63a316fe34cb7f367f898ccca3c3ae"),
        ("4.0.7", "9c6d5ad36be798e562ddcaa6b17b1c3ff2d3c4f529a47432b69fb9a30f847461"),
        ("4.0.8", "07e6433f263c3839939cfabeb6d7557841e0419e47759a7b7d37f6d44d40adcb"),
        ("4.0.9", "7cc034a72f99536c5feb39d1575f2952b86ffa409f109efeb2c8b398985f78a7"),
        ("4.1.1", "a153ffd5143bf26a877bfae2f4ec736ebd8924a46600ca089ad96b54a1d4e28e"),
        ("4.1.2", "b8d843714810ab88d59344507d4447be8b2cf12a49031363b6eed9f1b9b2280f"),
        ("4.1.3", "678bbfc8604eb246ed54e2063f0765f13b321a50526bdc8cb1f943eda7fa31f1"),
        ("4.1.4", "d38a4e108d2386cb9637da66a82dc8d0733caede4c83c4afdbda78af4214211b"),
        ("4.1.5", "ff56ebd7ead0fd5dbe06fe157b0024a7aaea2e0593bb3785fb594cf94dad58ef"),
        ("4.1.6", "bceb0fe1a386781af0788cae4108622756cd05e7775448deec04a71ddf87685d"),
        ("4.1.8", "43253f4b4a2c3a1694cd52d3517847271934c84dbd060ca0e82a9f90e569dab3"),
        ("4.1.9", "e9f074a84930662104871bfcea55c3c180c50a0a47739db82435deae6cbaf032"),
        ("4.1.10", "56343019a9fd839e2e5bf203daf45f25af79d5bffa4c71d56eae4f4404d82ade"),
        ("4.1.11", "7b134688965dd331ca4d11ed38e5ce594caed0e906689a9b95251c29c2c03990"),
        ("4.1.12", "d02483ad49872238fa59875c1269293fe4f17ecee13c121893607cc0b284696b"),
        ("4.2.1", "7efa6b1f781a6119a10ac94b4794ded90db8accbe7802281cd26f8664ffed59c"),
        ("4.2.2", "2a6b6fbff5b59dd07bef10bcb019bee2ea97a30b2a656d51346596724324badf"),
        ("4.2.3", "45a747e1c5b3d6df1b141b1481e193b033fd1fdbda3ff52677dc81afdaacbaed"),
        ("4.2.4", "7e4225ec065e0f354ccf7349a22d209de09cc1c074832be9eb84c51c1799c432"),
        ("4.2.6", "08f41f468b63335aea0d904c5729e0250300f6a1907bf293a65499496cdbc68f"),
        ("4.2.7", "8e0f1c2c2786b5c0e39fe1afce24c926040fad47c8ea8ad30aaf1188df29fc41"),
        ("4.2.8", "d69d5e36cc5d9f4eb4872be36c622878afcdce94062716cf3e25bcedcb168b62"),
        ("4.2.9", "12498cc3cb8bc8038539fef9e90e95f507502436c1f0c3a673411324fa675d14"),
        ("4.2.10", "b1260ed381b10a11753c73444408e19869f3241fc45c985cd55a30177c789d13"),
        ("4.2.13", "837e3cf1f6c31347a1396a3f6b65688f2b4bb4a11c580dcb628b5afe527b68a5"),
        ("4.2.14", "fc6919875a6226c7ffcae1a7d51e0f2ceaf6f160393180818f6c95f51b1e7b96"),
        ("4.2.15", "c77f926b81129493961e19c0e02188f8d07c112a1162df69bfab178ae447f94a"),
        ("4.2.16", "6f1616c2786c408ce86ab7e10f792b8f15742f7b7b7460243929cb371e7f1dad"),
        ("4.2.17", "6b56d834cc94c8b21a8f4e775064896be3b4a4ca387f2612d4406a5927cd2fdc"),
        ("4.2.18", "52ae8eacf635617c0f13b44f749e5ea13dc34262819b2cc8c8636abb08d82c4b"),
        ("4.2.19", "6c833be4b0ca614f0a919472a1028a3bbdeb6f056fa04023aeb923346ba2c306"),
        ("4.2.21", "b54ac28d6aa964fc7c2f7335138a54d78980232011e0cd2231d04eed393dcb0d"),
        ("4.2.22", "e726764b094407c313adba5e2e866ab88f00436cad85c540a5bf76dc0a912c9e"),
        ("4.2.23", "42fdeaba6e6449d88d4f66de47871015097dc6f1b87910db00a91946295cfae4"),
        ("4.2.24", "40cd7d3f53bc6cd1902eadce23c337e97200888df41e4a73b42d682f23e71d80"),
        ("4.2.25", "2391ab3d78191caaae2c963c19fd70b99e9751008da22a0adcc667c5a4f8d311"),
        ("4.2.26", "9398e487bcb55e3f142cb56d19fbd9a83e15bb03a97edc31f408361ee76d9d7a"),
        ("4.2.27", "b865fbe0f4a3d1ee36594c5efa42b20db3c8bbb10dff0736face1c6e4bda5b92"),
        ("4.2.28", "a4b9cd881991add394cafa8bb3b11ad1742d1e1470ba99c3ef53dc540316ccfe"),
        ("4.2.29", "86d91bc8086569c8d08f9c55888b583a921ac1f95ed3bdc7d5659d4709542014"),
        ("4.2.30", "4ebc7a434e3819db6cf4b399fb5b3f536310a30e8486f08b66886840be84b37c"),
    ]],
}

SIZES: dict[str, int | None] = {"1k": 1_000, "10k": 10_000, "100k": None, "500k": 500_000}  # None: every file
ALL = ("1k", "10k", "100k")  # --size all; 500k is asked for by name (3 GB, minutes to build)


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
    if size == "500k" and corpus not in MORE:
        sys.exit(f"no 500k tree of the {corpus} corpus: only of {', '.join(MORE)}")
    pins = PINNED[corpus] + (MORE[corpus] if size == "500k" else [])
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
        for size in ALL if args.size == "all" else [args.size]:
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
