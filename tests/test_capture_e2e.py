"""Capture promises against a real daemon: what a mark holds after the tree changed under it.

Each test drives a real ``snapd start`` with the real CLI (e2e_helpers) on real inotify. The
cases are the ways capture once went blind or stale: a directory taking the place of one just
moved away (watches dropped), a hard-linked file written through its other name, and randomized
bursts of directory moves checked against the disk.
"""

from __future__ import annotations

import base64
import json
import os
import random
import shutil
import signal
import stat
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from e2e_helpers import Daemon, OtherUser, describe, git, start_daemon, unavailable, wait_for

from snapd.capture.roots import fs_type
from snapd.config import load_config
from snapd.errors import NotFound
from snapd.store import trees
from snapd.store.store import Store

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    root = (tmp_path / "ws").resolve()
    root.mkdir()
    return root


def cat(d: Daemon, root: Path, mark: str, rel: str) -> bytes:
    return d.ctl("cat", mark, rel, "-w", root).stdout


def write(path: Path, data: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(data)


# -- 1. a directory taking the place of one just moved away --------------------------------------


def test_directory_replaced_by_a_moved_one_stays_watched(daemon: Daemon, ws: Path, tmp_path: Path) -> None:
    """``mv out /elsewhere && mv out.new out``: the move-out of the old ``out`` is resolved
    after ``out.new`` arrived under its name; the arrival's watches must survive that."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    write(ws / "out" / "old.txt", "old\n")
    write(ws / "out.new" / "sub" / "n.txt", "new\n")
    daemon.ctl("watch", ws)
    os.rename(ws / "out", elsewhere / "out")
    os.rename(ws / "out.new", ws / "out")
    daemon.ctl("mark", "m1", "-w", ws)  # its barrier resolves the unpaired move-out
    assert cat(daemon, ws, "m1", "out/sub/n.txt") == b"new\n"
    write(ws / "out" / "later.txt", "later\n")
    write(ws / "out" / "sub" / "n.txt", "edited\n")
    daemon.ctl("mark", "m2", "-w", ws)
    assert cat(daemon, ws, "m2", "out/later.txt") == b"later\n"
    assert cat(daemon, ws, "m2", "out/sub/n.txt") == b"edited\n"


def test_directory_moved_out_and_back_stays_watched(daemon: Daemon, ws: Path, tmp_path: Path) -> None:
    """Out of the tree and back before the move-out is resolved: the kernel hands back the same
    watch descriptors, which resolving the move-out must not drop."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    write(ws / "out" / "sub" / "a.txt", "a\n")
    daemon.ctl("watch", ws)
    os.rename(ws / "out", elsewhere / "out")
    os.rename(elsewhere / "out", ws / "out")
    daemon.ctl("mark", "m1", "-w", ws)
    write(ws / "out" / "b.txt", "b\n")
    write(ws / "out" / "sub" / "a.txt", "a2\n")
    daemon.ctl("mark", "m2", "-w", ws)
    assert cat(daemon, ws, "m2", "out/b.txt") == b"b\n"
    assert cat(daemon, ws, "m2", "out/sub/a.txt") == b"a2\n"


# -- randomized bursts of directory moves ---------------------------------------------------------


def disk_tree(root: Path) -> dict[bytes, tuple[str, int, bytes]]:
    """Every path below ``root`` as (kind, permission bits, bytes or link target); directories
    as ("dir", 0, b"") (a mark's listing here carries no directory modes)."""
    out: dict[bytes, tuple[str, int, bytes]] = {}
    for dirpath, dirnames, filenames in os.walk(os.fsencode(root)):
        for name in dirnames + filenames:
            full = os.path.join(dirpath, name)
            rel = os.path.relpath(full, os.fsencode(root))
            st = os.lstat(full)
            if stat.S_ISDIR(st.st_mode):
                out[rel] = ("dir", 0, b"")
            elif stat.S_ISLNK(st.st_mode):
                out[rel] = ("symlink", stat.S_IMODE(st.st_mode), os.readlink(full))
            else:
                out[rel] = ("file", stat.S_IMODE(st.st_mode), Path(os.fsdecode(full)).read_bytes())
    return out


class MarkReader:
    """Full trees of successive marks, from ``show`` (changes since the previous mark, so the
    path set is carried forward) and ``cat`` per file, over one in-process client."""

    def __init__(self, d: Daemon, root: Path) -> None:
        self.client, self.wsb = d.client(), os.fsencode(root)
        self.paths: set[bytes] = set()

    def tree(self, mark: str) -> dict[bytes, tuple[str, int, bytes]]:
        shown = self.client.call("show", mark=mark, workspace=self.wsb)
        assert shown["changes_total"] == len(shown["changes"]), "more changes than the reply lists"
        for ch in shown["changes"]:
            path = wire_path(ch["path"])
            if ch["status"] == "added":
                self.paths.add(path)
            elif ch["status"] == "removed":
                self.paths.discard(path)
        out: dict[bytes, tuple[str, int, bytes]] = {}
        for path in self.paths:
            try:
                got = self.client.call("cat", at=mark, path=path, workspace=self.wsb)
            except NotFound:  # a directory
                out[path] = ("dir", 0, b"")
                continue
            out[path] = (got["kind"], got["mode"], base64.b64decode(got["data_b64"]))
        return out


def wire_path(p: str | dict[str, str]) -> bytes:
    return base64.b64decode(p["b64"]) if isinstance(p, dict) else p.encode()


def _dirs(root: Path) -> list[str]:
    return sorted(os.path.relpath(p, root) for p, _, _ in os.walk(root) if Path(p) != root)


@pytest.mark.timeout(300)
def test_randomized_directory_move_bursts_match_the_disk(daemon: Daemon, ws: Path, tmp_path: Path) -> None:
    """Seeded bursts of directory renames (inside the tree, out and back, onto a freed name),
    each followed at once by writes inside the moved directories; after every mark the captured
    tree equals the disk. The seed is printed so a failure can be replayed."""
    seed = int(os.environ.get("SNAPD_TEST_SEED", random.randrange(1 << 30)))
    print(f"seed={seed} (replay with SNAPD_TEST_SEED={seed})")
    rng = random.Random(seed)
    outside = tmp_path / "outside"
    outside.mkdir()
    for name in "abcde":
        write(ws / name / "f.txt", f"{name}\n")
        write(ws / name / "x" / "g.txt", f"{name}/x\n")
    daemon.ctl("watch", ws)
    reader = MarkReader(daemon, ws)
    reader.tree(daemon.ctl_json("log", "-w", ws)["marks"][0]["id"])  # the baseline's paths
    counter = 0
    for round_ in range(20):
        for _ in range(8):
            dirs = _dirs(ws)
            kind = rng.choice(["within", "out-back", "replace", "swap", "write"])
            src = rng.choice(dirs) if dirs else None
            if kind == "within" and src is not None:
                targets = [d for d in dirs if d != src and not d.startswith(src + "/")]
                parent = ws / rng.choice(targets) if targets and rng.random() < 0.6 else ws
                dest = parent / f"m{counter}"
                os.rename(ws / src, dest)
            elif kind == "out-back" and src is not None:
                os.rename(ws / src, outside / "tmp")
                os.rename(outside / "tmp", ws / src)
            elif kind == "replace" and src is not None:
                os.rename(ws / src, outside / f"gone{counter}")
                fresh = tmp_path / f"fresh{counter}"
                write(fresh / "new.txt", f"fresh {counter}\n")
                os.rename(fresh, ws / src)
            elif kind == "swap" and len(dirs) > 1:
                one, two = rng.sample(dirs, 2)
                if not (one.startswith(two + "/") or two.startswith(one + "/")):
                    os.rename(ws / one, ws / f"t{counter}")
                    os.rename(ws / two, ws / one)
                    os.rename(ws / f"t{counter}", ws / two)
            counter += 1
            # Writes right after the moves, inside every directory, new and old names alike.
            for d in _dirs(ws):
                if rng.random() < 0.5:
                    write(ws / d / f"w{counter}.txt", f"{round_} {counter}\n")
        m = daemon.call("mark", label=f"r{round_}", workspace=os.fsencode(ws))["id"]
        got, want = reader.tree(m), disk_tree(ws)
        assert got == want, (
            f"seed={seed} round={round_}: mark differs from disk\n"
            f"only in mark: {sorted(set(got) - set(want))[:20]}\n"
            f"only on disk: {sorted(set(want) - set(got))[:20]}\n"
            f"differ: {sorted(k for k in set(got) & set(want) if got[k] != want[k])[:20]}"
        )
    shutil.rmtree(outside)


# -- 1b. a baseline's walk places the watches as it goes --------------------------------------


@pytest.mark.timeout(180)
def test_changes_made_while_the_baseline_walks_are_in_the_next_mark(tmp_path: Path, ws: Path) -> None:
    """A new workspace's baseline has each directory watched, then listed, as its walk reaches
    it, while reader processes read what it found (snapd.capture.recorder.Recorder.baseline).
    Writes, new directories, deletions and a directory rename made in every part of the tree
    while it runs, and once more right after it, are all in the next mark: a directory listed
    before a change has its watch, one listed after it reads the change."""
    rng = random.Random(20261207)
    dirs = [f"d{i:02d}/s{j}" for i in range(40) for j in range(8)]
    for d in dirs:
        for k in range(8):
            write(ws / d / f"f{k}.txt", f"{d} {k}\n" * 20)
    home = tmp_path / "snapd-home"
    daemon = start_daemon(home)
    try:
        done = threading.Event()
        answer: list[Any] = []

        def watch() -> None:
            try:
                answer.append(daemon.client(120).call("watch", path=os.fsencode(ws)))
            except BaseException as exc:  # noqa: BLE001 - handed to the test thread
                answer.append(exc)
            done.set()

        def churn(n: int) -> None:
            d = rng.choice(dirs)
            kind = rng.randrange(4)
            if kind == 0:
                write(ws / d / f"f{rng.randrange(8)}.txt", f"changed {n}\n")
            elif kind == 1:
                write(ws / d / f"new{n}" / "g.txt", f"new dir {n}\n")
            elif kind == 2:
                gone = ws / d / f"f{rng.randrange(8)}.txt"
                if gone.exists():
                    gone.unlink()
            elif (ws / d).is_dir() and not (ws / f"{d}-moved").exists():
                os.rename(ws / d, ws / f"{d}-moved")
                write(ws / f"{d}-moved" / "after.txt", f"after the move {n}\n")
                dirs.remove(d)

        threading.Thread(target=watch, daemon=True).start()
        n = 0
        while not done.is_set():
            churn(n)
            n += 1
            time.sleep(0.001)
        assert not isinstance(answer[0], BaseException), answer[0]
        for _ in range(100):  # every part of the tree, right after the baseline
            churn(n)
            n += 1
        mark = daemon.call("mark", label="after", workspace=os.fsencode(ws))["id"]
        print(f"{n} changes, {len(answer)} baseline; mark {mark}")
    finally:
        assert daemon.stop() == 0
    with Store.open(load_config(daemon.env).locations.store_dir) as store:
        tree = store.mark(mark).tree
        got = {
            p: ("dir", 0, b"") if e.kind == "dir" else (e.kind, stat.S_IMODE(e.mode), store.get(e.key))
            for p, e in trees.walk(store.load_node, tree)
        }
    want = disk_tree(ws)
    assert got == want, (
        f"the mark differs from the disk: only in the mark {sorted(set(got) - set(want))[:10]}, "
        f"only on disk {sorted(set(want) - set(got))[:10]}, "
        f"differ {sorted(k for k in set(got) & set(want) if got[k] != want[k])[:10]}"
    )


# -- 2. hard links --------------------------------------------------------------------------------


def ws_status(d: Daemon, root: Path) -> dict[str, Any]:
    return next(w for w in d.call("status")["workspaces"] if w["root"] == str(root))


def test_hard_link_written_through_one_name_is_captured_under_all(daemon: Daemon, ws: Path) -> None:
    """inotify reports only the name written through; every other name of the file inside the
    root must be captured too — links made before the watch, after it, and across a restart."""
    write(ws / "a", "one\n")
    os.link(ws / "a", ws / "b")
    daemon.ctl("watch", ws)
    with open(ws / "a", "a") as fh:
        fh.write("more\n")
    daemon.ctl("mark", "m1", "-w", ws)
    assert cat(daemon, ws, "m1", "a") == cat(daemon, ws, "m1", "b") == b"one\nmore\n"

    write(ws / "sub" / "c", "c\n")
    daemon.ctl("mark", "m2", "-w", ws)
    os.link(ws / "sub" / "c", ws / "d")  # the link is made while watched
    daemon.ctl("mark", "m3", "-w", ws)
    with open(ws / "d", "a") as fh:
        fh.write("through d\n")
    daemon.ctl("mark", "m4", "-w", ws)
    assert cat(daemon, ws, "m4", "sub/c") == cat(daemon, ws, "m4", "d") == b"c\nthrough d\n"
    assert ws_status(daemon, ws)["hardlinks_rechecked"] == 0, "every name is inside: no re-check"


def test_hard_links_known_again_after_a_restart(tmp_path: Path, ws: Path) -> None:
    write(ws / "a", "one\n")
    os.link(ws / "a", ws / "b")
    home = tmp_path / "snapd-home"
    d = start_daemon(home)
    try:
        d.ctl("watch", ws)
    finally:
        assert d.stop() == 0
    d = start_daemon(home, d.env)
    try:
        with open(ws / "b", "a") as fh:
            fh.write("more\n")
        d.ctl("mark", "m1", "-w", ws)
        assert cat(d, ws, "m1", "a") == cat(d, ws, "m1", "b") == b"one\nmore\n"
    finally:
        assert d.stop() == 0


def test_hard_link_to_a_name_outside_or_ignored_is_rechecked_at_each_mark(
    daemon: Daemon, ws: Path, tmp_path: Path
) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    write(outside / "x", "x0\n")
    os.link(outside / "x", ws / "l")
    write(ws / ".gitignore", "ign/\n")
    write(ws / "ign" / "y", "y0\n")
    os.link(ws / "ign" / "y", ws / "k")
    daemon.ctl("watch", ws)
    daemon.ctl("mark", "m1", "-w", ws)
    assert ws_status(daemon, ws)["hardlinks_rechecked"] == 2
    with open(outside / "x", "a") as fh:
        fh.write("x1\n")
    with open(ws / "ign" / "y", "a") as fh:
        fh.write("y1\n")
    daemon.ctl("mark", "m2", "-w", ws)
    assert cat(daemon, ws, "m2", "l") == b"x0\nx1\n"
    assert cat(daemon, ws, "m2", "k") == b"y0\ny1\n"
    os.unlink(outside / "x")  # the last other name gone: nothing left to re-check for l
    write(ws / "l", "x0\nx1\nlocal\n")
    daemon.ctl("mark", "m3", "-w", ws)
    assert ws_status(daemon, ws)["hardlinks_rechecked"] == 1


# -- 3. a directory that cannot be listed ---------------------------------------------------------


def test_unreadable_directory_is_reported_as_such_once(nobody: OtherUser) -> None:
    """As uid 65534 (root lists anything): ``d`` is mode 0311. Its cause — permission denied —
    is reported once in the marks (not as an inotify watch limit, not on every mark), and in
    status while it lasts; once readable again, what is inside is captured."""
    ws = nobody.top / "ws"
    nobody.run("mkdir", "-p", ws / "d", ws / "ok")
    nobody.run("sh", "-c", "echo h > d/h && echo f > ok/f && chmod 311 d", cwd=ws)
    d = nobody.start_daemon(nobody.top / "home" / "snapd")
    try:
        base = d.ctl_json("watch", ws)["baseline"]
        m1 = d.ctl_json("mark", "m1", "-w", ws)
        m2 = d.ctl_json("mark", "m2", "-w", ws)
        status = next(w for w in d.ctl_json("status")["workspaces"] if w["root"] == str(ws))
        said = [*base["summary"].get("warnings", []), *m1["summary"]["warnings"]]
        everything = json.dumps([base, m1, m2, status])
        assert "max_user_watches" not in everything and "watch limit" not in everything, everything
        assert not status["scan_every_mark"], status
        assert [w for w in said if "Permission denied: d" in w] and len(said) == 1, said
        assert m2["summary"]["warnings"] == [], "nothing changed: not repeated"
        assert [w for w in status["warnings"] if "Permission denied: d" in w], status

        nobody.run("chmod", "755", ws / "d")
        nobody.run("sh", "-c", "echo h2 > d/h && echo n > d/new", cwd=ws)
        m3 = d.ctl_json("mark", "m3", "-w", ws)
        assert d.ctl("cat", "m3", "d/h", "-w", ws).stdout == b"h2\n"
        assert d.ctl("cat", "m3", "d/new", "-w", ws).stdout == b"n\n"
        assert m3["summary"]["warnings"] == []
        status = next(w for w in d.ctl_json("status")["workspaces"] if w["root"] == str(ws))
        assert status["warnings"] == [], status
    finally:
        assert d.stop() == 0, d.log()[-3000:]


def ctl_status(d: Daemon, root: Path) -> dict[str, Any]:
    """:func:`ws_status` through snapctl, for a daemon of another uid (it refuses root's requests)."""
    return next(w for w in d.ctl_json("status")["workspaces"] if w["root"] == str(root))


def test_a_watched_directory_made_unreadable_keeps_its_watch_when_watches_are_placed_again(
    nobody: OtherUser,
) -> None:
    """As uid 65534: ``src`` is watched, then made 0300. ``inotify_add_watch`` checks read
    permission only when placing a watch, so its watch still reports; placing every watch again
    (the rules changed; a rollback's capture does the same) is refused for ``src`` (EACCES) and
    must keep that watch and those below it, not remove them: a later ``rm src/tool.sh`` is in
    the next mark (model seed 20260508/6 step 88: a rollback wrote the stale file back)."""
    ws = nobody.top / "ws"
    nobody.run("mkdir", "-p", ws / "src" / "docs")
    nobody.run("sh", "-c", "echo v1 > src/tool.sh && echo d > src/docs/a.md", cwd=ws)
    d = nobody.start_daemon(nobody.top / "home" / "snapd")
    try:
        d.ctl("watch", ws)
        watched = ctl_status(d, ws)["watches"]
        nobody.run("chmod", "300", ws / "src")
        nobody.run("sh", "-c", "echo '*.log' > .gitignore", cwd=ws)  # every watch placed again
        m1 = d.ctl_json("mark", "m1", "-w", ws)
        status = ctl_status(d, ws)
        assert status["watches"] == watched, json.dumps(status)
        assert m1["summary"]["warnings"] == [] and status["warnings"] == [], json.dumps([m1, status])

        nobody.run("rm", ws / "src" / "tool.sh")
        nobody.run("sh", "-c", "echo d2 > src/docs/a.md", cwd=ws)
        d.ctl("mark", "m2", "-w", ws)
        gone = d.ctl("cat", "m2", "src/tool.sh", "-w", ws, check=False)
        assert gone.returncode != 0, "m2 kept the deleted src/tool.sh"
        assert d.ctl("cat", "m2", "src/docs/a.md", "-w", ws).stdout == b"d2\n"
    finally:
        nobody.run("chmod", "755", ws / "src")
        assert d.stop() == 0, d.log()[-3000:]


# -- 4. roots inside a VCS directory --------------------------------------------------------------


def refused(d: Daemon, path: Path, *words: bytes, cwd: Path | None = None) -> None:
    """``watch PATH`` (or, with ``cwd``, a mark from there) is refused: workspace_refused, exit 7."""
    args = ("mark", "m", "--json") if cwd is not None else ("watch", path, "--json")
    cp = d.ctl(*args, cwd=cwd, check=False)
    assert cp.returncode == 7, describe(cp)
    error = json.loads(cp.stdout)["error"]
    assert error["code"] == "workspace_refused", error
    for word in words:
        assert word.decode() in error["message"], error


def test_roots_inside_a_vcs_directory_are_refused(daemon: Daemon, tmp_path: Path) -> None:
    top = tmp_path.resolve()
    repo = top / "repo"
    (repo / "sub").mkdir(parents=True)
    git(repo, "init", "-q")
    write(repo / "f.txt", "f\n")
    git(repo, "add", "f.txt")
    git(repo, "commit", "-q", "-m", "one")
    git(repo, "worktree", "add", "-q", str(top / "wt"))  # wt/.git -> repo/.git/worktrees/wt
    sep = top / "gitdirs" / "sep.git"
    (top / "gitdirs").mkdir()
    (top / "sepwt").mkdir()
    git(top / "sepwt", "init", "-q", f"--separate-git-dir={sep}")  # sepwt/.git -> gitdirs/sep.git
    write(top / "sepwt" / "g.txt", "g\n")
    git(top / "sepwt", "add", "g.txt")
    git(top / "sepwt", "commit", "-q", "-m", "one")
    git(top / "sepwt", "worktree", "add", "-q", str(top / "sepwt2"))  # -> gitdirs/sep.git/worktrees/sepwt2
    git(top, "init", "-q", "--bare", str(top / "bare.git"))
    for vcs in (".hg", ".jj", ".svn"):
        (repo / "sub" / vcs / "store").mkdir(parents=True)

    for bad in (
        repo / ".git",
        repo / ".git" / "refs",
        repo / ".git" / "worktrees" / "wt",
        repo / "sub" / ".hg",
        repo / "sub" / ".jj" / "store",
        repo / "sub" / ".svn",
        sep,
        sep / "refs" / "heads",
        sep / "worktrees" / "sepwt2",
        top / "bare.git",
        top / "bare.git" / "objects",
    ):
        refused(daemon, bad, b"version-control directory")
    assert daemon.call("status")["workspaces"] == []

    # A mark from inside .git registers the work tree around it, never .git.
    m = daemon.ctl_json("mark", "from-git-dir", cwd=repo / ".git" / "refs")
    assert m["workspace"] == str(repo)
    assert daemon.ctl("cat", m["id"], "f.txt", "-w", repo).stdout == b"f\n"
    # A separate git directory has no work tree around it: refused, clearly.
    refused(daemon, sep, b"version-control directory", cwd=sep / "refs")
    # Work trees whose .git is a file are fine.
    for ok in (top / "wt", top / "sepwt2"):
        daemon.ctl("watch", ok)
    roots = sorted(w["root"] for w in daemon.call("status")["workspaces"])
    assert roots == sorted(str(p) for p in (repo, top / "wt", top / "sepwt2")), roots


def test_a_workspace_stored_inside_git_is_refused_at_start(tmp_path: Path) -> None:
    """An older snapd accepted ``repo/.git``: at start-up it is refused and no longer watched
    (its history stays until forgotten); a mark from inside ``.git`` then registers ``repo``."""
    repo = (tmp_path / "repo").resolve()
    repo.mkdir()
    git(repo, "init", "-q")
    home = tmp_path / "snapd-home"
    d = start_daemon(home)
    assert d.stop() == 0
    store = Store.open(home / "store")
    try:
        store.add_workspace(os.fsencode(repo / ".git"))
    finally:
        store.close()
    d = start_daemon(home, d.env)
    try:
        w = wait_for(lambda: next(iter(d.call("status")["workspaces"]), {}).get("error"), what="refused")
        assert "version-control directory" in str(w), w
        assert d.call("status")["workspaces"][0]["watching"] is False
        cp = d.ctl("watch", repo / ".git", check=False)
        assert cp.returncode == 7 and b"version-control directory" in cp.stderr, describe(cp)
        assert d.ctl_json("mark", "m", cwd=repo / ".git")["workspace"] == str(repo)
        roots = {w["root"]: w.get("state") for w in d.call("status")["workspaces"]}
        assert roots.get(str(repo)) == "ready", roots
    finally:
        assert d.stop() == 0


# -- 5. pseudo file systems -----------------------------------------------------------------------


@pytest.mark.parametrize("path", ["/proc", "/proc/self", "/sys", "/sys/kernel", "/dev", "/dev/pts"])
def test_pseudo_file_systems_are_refused(daemon: Daemon, path: str) -> None:
    kind = fs_type(Path(path).resolve())
    if kind not in ("proc", "sysfs", "devtmpfs", "devpts"):
        unavailable(f"{path} is on {kind} here, not the pseudo file system this test expects")
    refused(daemon, Path(path), f"{kind} file system".encode())
    assert daemon.call("status")["workspaces"] == []


def _mount(kind: str, where: Path) -> None:
    where.mkdir(parents=True, exist_ok=True)
    cp = subprocess.run(["mount", "-t", kind, kind, str(where)], capture_output=True, timeout=30)
    if cp.returncode != 0:
        unavailable(f"cannot mount {kind} at {where}: {cp.stderr.decode(errors='replace')}")


def _umount(where: Path) -> None:
    subprocess.run(["umount", "-l", str(where)], capture_output=True, timeout=30)


def test_tmpfs_is_accepted_and_a_pseudo_fs_mounted_inside_refused(daemon: Daemon, tmp_path: Path) -> None:
    mnt = (tmp_path / "mnt").resolve()
    jail = (tmp_path / "jail").resolve()
    _mount("tmpfs", mnt)
    try:
        write(mnt / "a.txt", "on tmpfs\n")
        daemon.ctl("watch", mnt)
        m = daemon.ctl_json("mark", "m", "-w", mnt)
        assert daemon.ctl("cat", m["id"], "a.txt", "-w", mnt).stdout == b"on tmpfs\n"
        daemon.ctl("unwatch", mnt)
        _mount("proc", jail / "proc")
        try:
            refused(daemon, jail, b"proc file system is mounted inside it")
        finally:
            _umount(jail / "proc")
    finally:
        _umount(mnt)



def _cat_stopped_and_continued(daemon: Daemon, ws: Path, data: bytes, *extra: str) -> bytes:
    """``snapctl cat m big.bin EXTRA`` under PYTHONUNBUFFERED, its output read through a pipe
    16 KiB at a time, the CLI stopped and continued after each read (while it writes into the
    room just made); its stdout, after a clean exit."""
    (ws / "big.bin").write_bytes(data)
    daemon.ctl_json("watch", ws)
    daemon.ctl_json("mark", "m", "-w", ws)
    env = dict(daemon.env, PYTHONUNBUFFERED="1")
    argv = [*daemon.python, "-m", "snapd", "cat", "m", "big.bin", "-w", str(ws), *extra]
    p = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert p.stdout is not None and p.stderr is not None
    got = bytearray()
    try:
        while chunk := os.read(p.stdout.fileno(), 16 << 10):
            got += chunk
            if p.poll() is None:
                os.kill(p.pid, signal.SIGSTOP)
                time.sleep(0.002)
                os.kill(p.pid, signal.SIGCONT)
    finally:
        if p.poll() is None:
            os.kill(p.pid, signal.SIGCONT)
    err = p.stderr.read()
    assert p.wait(30) == 0, err
    return bytes(got)


def test_cat_sends_every_byte_through_a_pipe_while_the_cli_is_stopped_and_continued(
    daemon: Daemon, ws: Path
) -> None:
    """``snapctl cat M FILE > out`` is how a user takes a file back: every byte must come out,
    even when the CLI is stopped and continued (^Z, a freezer) while the pipe is full. Under
    PYTHONUNBUFFERED (set for the service, and often in shells) its stdout was a raw file: the
    interrupted write(2) took part of the bytes and the rest was dropped, exit 0."""
    data = os.urandom(3 << 20)
    got = _cat_stopped_and_continued(daemon, ws, data)
    assert len(got) == len(data) and got == data


def test_json_output_arrives_whole_through_a_pipe_while_the_cli_is_stopped_and_continued(
    daemon: Daemon, ws: Path
) -> None:
    """The same for text: ``snapctl cat --json`` prints 4 MiB of JSON with print(), whose text
    layer dropped what an interrupted raw write did not take (under PYTHONUNBUFFERED)."""
    data = os.urandom(3 << 20)
    got = _cat_stopped_and_continued(daemon, ws, data, "--json")
    assert base64.b64decode(json.loads(got)["data_b64"]) == data
