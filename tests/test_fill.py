"""The fill (``snapd/rollback/fill.py``): how a restore writes a tree into a directory of its
own (``write_tree``, the one writer of ``snapctl restore`` local and ``--from``). Real stores
(a tree captured by the ingest helper), real files: every kind written exactly (as root and as
``nobody``, whom modes bind), a name a concurrent writer took left as found and listed, and
the system calls a written file costs bounded. A failing disk: tests/test_restore_durable.py."""

from __future__ import annotations

import os
import resource
import shutil
import stat
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import FsyncFaults
from e2e_helpers import snap_diff, snapshot, unavailable, write
from ingest_helpers import ingest_tree

from snapd.rollback import fill
from snapd.rollback.restore import Restored, write_tree
from snapd.store import trees
from snapd.store.store import Store

pytestmark = pytest.mark.timeout(120)
NOBODY = 65534
LATIN1 = os.fsdecode(b"caf\xe9")  # a name that is not UTF-8


def every_kind(root: Path) -> None:
    """Files of odd modes (set-user-ID, 0000, sticky), empty and large, directories 0000 (empty
    and holding a file), 0555 and 0750, empty ones, symlinks (relative, absolute, dangling, to a
    directory), names that are not UTF-8, and a deep path."""
    write(root / "plain.txt", "plain\n", 0o644)
    write(root / "bin/tool", b"#!/bin/sh\necho hi\n", 0o4755)
    write(root / "bin/gtool", b"#!/bin/sh\n", 0o2750)
    write(root / "locked.bin", os.urandom(100), 0o000)
    write(root / "empty-file", b"", 0o600)
    write(root / "big.bin", os.urandom(3 << 20), 0o640)
    write(root / "ro/a.txt", "in a read-only directory\n", 0o444)
    write(root / "ro/sub/b.txt", "deeper\n", 0o644)
    write(root / "closed/secret", "behind a 0000 directory\n", 0o600)
    write(root / f"{LATIN1}/{LATIN1}.txt", b"not utf-8 names\n", 0o644)
    write(root / "deep/a/b/c/d/e/f/g/h/leaf", "leaf\n", 0o644)
    (root / "empty-dir").mkdir()
    (root / "empty-closed").mkdir()
    (root / "sticky").mkdir()
    os.symlink("plain.txt", root / "link")
    os.symlink("/etc/hostname", root / "absolute-link")
    os.symlink("nowhere/at/all", root / "dangling")
    os.symlink("deep/a", root / "dir-link")
    os.symlink(os.fsdecode(b"caf\xe9/caf\xe9.txt"), root / f"{LATIN1}-link")
    for path, mode in (("ro/sub", 0o555), ("ro", 0o555), ("closed", 0o000), ("empty-dir", 0o750),
                       ("empty-closed", 0o000), ("sticky", 0o1777), ("deep/a/b", 0o711)):
        (root / path).chmod(mode)
    root.chmod(0o751)


@pytest.fixture
def captured(tmp_path: Path) -> Iterator[tuple[Store, str, Path]]:
    """``every_kind`` captured into a real store: the store, the tree's key, the source."""
    if os.geteuid() != 0:
        unavailable("needs root: to capture 0000 files and directories and to set set-user-ID bits")
    src = tmp_path / "src"
    every_kind(src)
    with Store.open(tmp_path / "store") as store:
        tree = ingest_tree(store, store.add_workspace(os.fsencode(src)), src).tree
        yield store, tree, src


def restore(store: Store, tree: str, dest: Path, get: Callable[[str], bytes] | None = None) -> Restored:
    return write_tree(dest, tree, 0o751, store.load_node, get or store.get, store.hasher, [])


@pytest.mark.parametrize(
    ("held", "umask"), [(fill.IN_FLIGHT_BYTES, 0o022), (1 << 20, 0o022), (fill.IN_FLIGHT_BYTES, 0o077)]
)
def test_every_kind_is_written_exactly(
    captured: tuple[Store, str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, held: int, umask: int
) -> None:
    """Kinds, bytes, modes (set-user-ID and set-group-ID files, 0000 files and directories,
    sticky), symlinks as their text, empty directories, names that are not UTF-8, the root's own
    mode: into an absent target, and into an empty one; also when the contents held for the
    writers are bounded below the size of one file (``big.bin``, 3 MiB), and whatever the
    process's umask (a mode it would strip is not left to the create)."""
    monkeypatch.setattr(fill, "IN_FLIGHT_BYTES", held)
    store, tree, src = captured
    want = snapshot(src, with_root=True)
    for dest in (tmp_path / "absent", tmp_path / "empty"):
        if dest.name == "empty":
            dest.mkdir(mode=0o700)
        before = os.umask(umask)
        try:
            done = restore(store, tree, dest)
        finally:
            os.umask(before)
        assert done.ok and done.made == (dest.name == "absent"), (done.conflicts, done.not_restored)
        got = snapshot(dest, with_root=True)
        assert got == want, snap_diff(got, want)
        kinds = [v[0] for p, v in want.items() if p != "."]
        files = [v[2] for v in want.values() if v[0] == "file"]
        counts = {"files": len(files), "symlinks": kinds.count("link"), "dirs": kinds.count("dir")}
        assert done.counts == {**counts, "bytes": sum(map(len, files))}, done.counts


def restore_as_nobody(
    request: pytest.FixtureRequest, store: Store, tree: str, root_mode: int, umask: int | None = None
) -> Path:
    """``tree`` written by a child process running as ``nobody`` (its umask ``umask``; None:
    ours) into a new target under a 0777 directory of /tmp (pytest's own are private to
    root), from nodes and contents read here first (the store is root's); the target, once the
    child said the restore was ok. The directory is removed when the test ends."""
    nodes: dict[str, trees.Node] = {}

    def load(key: str) -> trees.Node:
        return nodes.setdefault(key, store.load_node(key))

    contents = {e.key: store.get(e.key) for _, e in trees.walk(load, tree) if e.kind in ("file", "symlink")}
    base = Path(tempfile.mkdtemp(dir="/tmp"))
    request.addfinalizer(lambda: shutil.rmtree(base))  # root: modes do not stop it
    base.chmod(0o777)
    dest = base / "copy"
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            os.setgid(NOBODY)
            os.setuid(NOBODY)
            if umask is not None:
                os.umask(umask)
            get = contents.__getitem__
            done = write_tree(dest, tree, root_mode, nodes.__getitem__, get, store.hasher, [])
            code = 0 if done.ok else 2
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    return dest


def test_every_kind_is_written_exactly_as_a_user_whom_modes_bind(
    captured: tuple[Store, str, Path], request: pytest.FixtureRequest
) -> None:
    """Root ignores modes; ``nobody`` does not: 0000 and 0555 directories are filled before
    they get their modes (deepest first, the root last), a 0000 file is written through the
    descriptor that made it, set-user-ID and set-group-ID bits are kept (the user's own file,
    of the user's own group)."""
    store, tree, src = captured
    want = snapshot(src, with_root=True)
    got = snapshot(restore_as_nobody(request, store, tree, 0o751), with_root=True)
    assert got == want, snap_diff(got, want)


def test_a_name_another_process_took_meanwhile_is_left_as_found_and_listed(
    captured: tuple[Store, str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A restore writes only names it makes (``O_EXCL``): what a process wrote into the target
    meanwhile — a file where the tree has a file, a file where it has a symlink, a file where
    it has a directory, empty or not (and so everything below it) — stays as that process left it, and each
    is a conflict (the reply is not ok). A directory made there meanwhile is filled as it is,
    and a file that already holds the tree's bytes and mode is no conflict.

    The other process writes once the target's root is made, just before the restore makes its
    first subdirectory (a pool thread may make them while the first is filled, so any later
    moment would race the restore for ``empty-dir``)."""
    store, tree, src = captured
    dest = tmp_path / "copy"
    theirs = b"written by another process\n"
    once = threading.Lock()
    make_dirs = fill.make_dirs

    def meanwhile(dir_fd: int, names: list[tuple[bytes, int]], umask: int) -> list[fill.Failure]:
        with once:
            if not (dest / "plain.txt").exists():
                for name in ("plain.txt", "link", "sticky", "ro"):
                    write(dest / name, theirs, 0o600)
                (dest / "empty-dir").mkdir(mode=0o700)
                write(dest / "empty-file", b"", 0o600)  # holds the tree's entry already
        return make_dirs(dir_fd, names, umask)

    monkeypatch.setattr(fill, "make_dirs", meanwhile)
    done = restore(store, tree, dest)
    assert not done.ok
    why = dict(done.conflicts)
    below = [b"ro/a.txt", b"ro/sub", b"ro/sub/b.txt"]
    assert sorted(why) == sorted([b"link", b"plain.txt", b"sticky", b"ro", *below]), done.conflicts
    assert all(why[p].startswith("made there meanwhile, not by the restore: it is now a file") for p in
               (b"link", b"plain.txt", b"sticky", b"ro")), done.conflicts
    assert all(why[p] == "ro was left as it is" for p in below), done.conflicts
    got, want = snapshot(dest, with_root=True), snapshot(src, with_root=True)
    for name in ("plain.txt", "link", "sticky", "ro"):
        assert got.pop(name) == ("file", 0o600, theirs), name
    gone = ("plain.txt", "link", "sticky")
    want = {p: v for p, v in want.items() if p not in gone and not p.startswith("ro")}
    assert got == want, snap_diff(got, want)


def test_where_syncfs_is_not_trusted_a_file_whose_fsync_fails_is_removed_and_listed(
    captured: tuple[Store, str, Path],
    tmp_path: Path,
    fsync_faults: FsyncFaults,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """On a file system whose ``syncfs`` is not trusted (FUSE: tests/test_restore_durable.py
    shows why; here the fill is told so) each file is fsynced, and an fsync error is final:
    the file's bytes may not be on disk, so it is removed, never counted as written, and listed
    as a conflict; the rest is written, each directory fsynced."""
    monkeypatch.setattr(fill.safeio, "syncfs_reaches_disk", lambda fd: False)
    store, tree, src = captured
    dest = tmp_path / "copy"
    fsync_faults.fail_when = lambda p: p == str(dest / "ro/a.txt")
    done = restore(store, tree, dest)
    assert fsync_faults.failed == [str(dest / "ro/a.txt")]
    assert [(p, why) for p, why in done.conflicts] == [
        (b"ro/a.txt", "could not be made durable: Input/output error; removed")
    ], done.conflicts
    got, want = snapshot(dest, with_root=True), snapshot(src, with_root=True)
    want.pop("ro/a.txt")
    assert got == want, snap_diff(got, want)
    assert done.counts["files"] == 10
    dirs = {str(dest / p) for p, v in want.items() if v[0] == "dir"}
    assert dirs - {str(dest)} <= set(fsync_faults.synced), "each directory fsynced"


def test_a_directory_the_writers_made_then_taken_meanwhile_is_said_so(
    captured: tuple[Store, str, Path], tmp_path: Path
) -> None:
    """A directory after the first in its parent is made by the writers as soon as the parent
    is entered, and opened only once its earlier siblings are filled: a process that removes it
    meanwhile and puts its own file there is left as found, and the conflict says so (not
    "could not create directory"). Found by an attack on the writers' mkdirs."""
    store, tree, _ = captured
    dest = tmp_path / "copy"
    theirs = b"written by another process\n"
    once: list[bool] = []

    def meanwhile(key: str) -> bytes:  # the first content read: the root entered, bin/ being filled
        if not once:
            once.append(True)
            end = time.monotonic() + 10
            while not (dest / "sticky").is_dir() and time.monotonic() < end:
                time.sleep(0.001)
            os.rmdir(dest / "sticky")
            write(dest / "sticky", theirs, 0o600)
        return store.get(key)

    done = restore(store, tree, dest, meanwhile)
    assert (dest / "sticky").read_bytes() == theirs  # left as found
    why = dict(done.conflicts)
    assert why[b"sticky"].startswith("made there meanwhile, not by the restore: it is now a file"), why


def test_a_written_file_costs_a_few_system_calls(
    captured: tuple[Store, str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The cost that made a restore 4-10x slower than restic's (docs/rollback.md): no
    directory is walked again from the root for each write, nothing is renamed or removed,
    no directory is listed. Per file one ``open`` (and no ``fchmod`` where the create gives its
    mode); per directory one to fill it, and one to settle it only where it has a mode left
    to give; no ``fsync`` of a file or directory it made, and one ``syncfs`` of the target at
    the end (tests/test_restore_durable.py shows that it is durable then)."""
    store, tree, _ = captured
    calls: dict[str, int] = {}
    for name in ("open", "mkdir", "rename", "unlink", "listdir", "scandir", "fsync", "chmod", "fchmod"):
        real = getattr(os, name)

        def counted(*a: object, _real: Callable[..., object] = real, _name: str = name, **k: Any) -> object:
            calls[_name] = calls.get(_name, 0) + 1
            return _real(*a, **k)

        monkeypatch.setattr(os, name, counted)
    real_syncfs = fill.safeio.syncfs

    def syncfs(fd: int) -> None:
        calls["syncfs"] = calls.get("syncfs", 0) + 1
        real_syncfs(fd)

    monkeypatch.setattr(fill.safeio, "syncfs", syncfs)
    done = restore(store, tree, tmp_path / "copy")
    monkeypatch.undo()
    assert done.ok
    files, dirs = done.counts["files"], done.counts["dirs"]
    assert calls.get("rename", 0) == calls.get("unlink", 0) == 0, calls
    assert calls.get("listdir", 0) == calls.get("scandir", 0) == 0, calls
    # its end opens only the directories with a mode left to give (and those above them): the
    # read-only, sticky and 0000 ones here; the rest were made with their modes
    settled = len(("ro", "ro/sub", "closed", "empty-closed", "sticky"))
    assert calls["open"] <= files + dirs + settled + 4, (calls, files, dirs)  # + the root's
    assert calls.get("fsync", 0) == 1 and calls["syncfs"] == 1, calls  # the fsync: the root's parent (made)
    assert calls.get("chmod", 0) <= 1, calls  # the root's: made 0700 whatever the umask
    special = len(("bin/tool", "bin/gtool"))  # set-user-ID, set-group-ID: after the bytes
    assert calls.get("fchmod", 0) <= special + settled + 1, calls  # + the root's
    assert fill.WRITERS > 1


def test_directories_waiting_on_their_files_are_bounded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A directory's descriptor stays open until the files queued before it closes are written;
    no more than ``IN_FLIGHT`` directories wait so, however long the next batch takes to fill:
    a file, then 1,500 empty directories, restored under a limit of 400 open descriptors."""
    src = tmp_path / "src"
    write(src / "a/f", "first\n", 0o644)
    for i in range(1500):
        (src / f"d{i:04}").mkdir(parents=True)
    monkeypatch.setattr(fill, "BATCH", 10_000)  # never full: the file waits in the batch
    monkeypatch.setattr(fill, "BATCH_BYTES", 1 << 30)
    with Store.open(tmp_path / "store") as store:
        tree = ingest_tree(store, store.add_workspace(os.fsencode(src)), src).tree
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        resource.setrlimit(resource.RLIMIT_NOFILE, (400, hard))
        try:
            done = restore(store, tree, tmp_path / "copy")
        finally:
            resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    assert done.ok and done.counts == {"files": 1, "symlinks": 0, "dirs": 1501, "bytes": 6}, (
        done.counts, done.conflicts[:3])
    got, want = snapshot(tmp_path / "copy"), snapshot(src)
    assert got == want, snap_diff(got, want)


def test_directories_are_made_with_their_modes_unless_others_could_write_or_the_owner_not(
    captured: tuple[Store, str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A directory is made with its final mode when that lets the owner fill it and no one
    else write into it (no chmod at the end); a read-only, 0000, sticky or group/other
    writable one is made 0700 and given its mode once filled: while the restore runs no other
    user may write inside it. Even under a umask of 0, which would keep every bit."""
    store, tree, src = captured
    dest = tmp_path / "copy"
    seen: dict[str, int] = {}
    make_dirs = fill.make_dirs

    def watched(dir_fd: int, names: list[tuple[bytes, int]], umask: int) -> list[fill.Failure]:
        out = make_dirs(dir_fd, names, umask)
        for name, _ in names:
            st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
            seen[os.fsdecode(name)] = stat.S_IMODE(st.st_mode)
        return out

    monkeypatch.setattr(fill, "make_dirs", watched)
    before = os.umask(0)
    try:
        done = restore(store, tree, dest)
    finally:
        os.umask(before)
    assert done.ok, done.conflicts
    assert seen["sticky"] == 0o700 and seen["ro"] == 0o700 and seen["closed"] == 0o700, seen
    assert seen["bin"] == 0o755 and seen["empty-dir"] == 0o750, seen
    got, want = snapshot(dest, with_root=True), snapshot(src, with_root=True)
    assert got == want, snap_diff(got, want)
