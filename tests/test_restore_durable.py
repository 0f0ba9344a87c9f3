"""A restore is durable when it returns, and a disk that fails before its sync stops it
(docs/rollback.md, "Restore into another directory"). The fill (``snapd/rollback/fill.py``)
fsyncs no file of its own: it writes the tree and syncs the target's file system once at the
end, through a descriptor opened before the first write. These tests restore onto a real XFS
file system on a loop device and cut it like a power failure (``xfs_io -x -c shutdown``
without ``-f``: whatever was not made durable is lost; tests/disks.py):

- cut right after ``write_tree`` returned: after the remount, every file, mode, symlink and
  empty directory it counted is there, byte for byte. Without the final sync the cut loses
  them (XFS keeps new files in its in-memory log until something forces it).
- cut right before the sync: the restore does not return a result; it raises the error that
  says the target holds part of the tree.
- a FUSE file system over the XFS one (tests/fuse_passthrough.py: fsync is the backing file's,
  as sshfs's): a ``syncfs`` sends its server nothing, so there each file and directory is
  fsynced; cut after the restore returned, nothing it counted is lost.
- a file system mounted on a directory of the target while the restore runs: not the
  target's, so not filled (a conflict); its disk cut afterwards loses nothing counted.
"""

from __future__ import annotations

import os
import random
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from disks import XfsDisk, _run, mounted, need_mounts, umount, xfs_disk
from e2e_helpers import snap_diff, snapshot, unavailable, write
from ingest_helpers import ingest_tree

from snapd.errors import SnapdError
from snapd.rollback.restore import write_tree
from snapd.store import safeio
from snapd.store.store import Store

pytestmark = [pytest.mark.powercut, pytest.mark.timeout(300)]


def a_tree(root: Path) -> None:
    """300 files of random sizes (some empty, a few over 1 MiB) in nested directories of
    several modes, symlinks, an empty directory and an executable."""
    rng = random.Random(21)
    for i in range(300):
        size = rng.choice((0, 10, 700, 5000, 70_000, 1_300_000)) if i % 37 else 2_000_000
        write(root / f"d{i % 7}/e{i % 5}/f{i}.bin", rng.randbytes(size), rng.choice((0o644, 0o600, 0o755)))
    write(root / "bin/tool", b"#!/bin/sh\necho hi\n", 0o755)
    (root / "empty").mkdir()
    os.symlink("d1/e1/f1.bin", root / "link")
    os.symlink("nowhere", root / "dangling")
    (root / "d3").chmod(0o750)
    (root / "d4/e2").chmod(0o711)


@pytest.fixture
def captured(tmp_path: Path) -> Iterator[tuple[Store, str, Path]]:
    """``a_tree`` captured into a real store on the ordinary disk: the store, the tree, the source."""
    src = tmp_path / "src"
    a_tree(src)
    with Store.open(tmp_path / "store") as store:
        yield store, ingest_tree(store, store.add_workspace(os.fsencode(src)), src).tree, src


@pytest.fixture
def disk(tmp_path: Path) -> Iterator[XfsDisk]:
    need_mounts("mkfs.xfs", "xfs_io", "losetup")
    with xfs_disk(tmp_path / "xfs") as d:
        yield d


def test_what_a_restore_returned_survives_a_power_cut(
    captured: tuple[Store, str, Path], disk: XfsDisk
) -> None:
    store, tree, src = captured
    dest = disk.mount / "copy"
    done = write_tree(dest, tree, 0o751, store.load_node, store.get, store.hasher, [])
    assert done.ok and done.counts["files"] == 301, done
    disk.cut()  # nothing else forced the log: only what the restore made durable survives
    disk.remount()
    got, want = snapshot(dest), snapshot(src)
    assert got == want, snap_diff(got, want)
    assert os.stat(dest).st_mode & 0o7777 == 0o751


def test_a_disk_cut_before_the_sync_stops_the_restore(
    captured: tuple[Store, str, Path], disk: XfsDisk, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every file was written and every mode set when the file system dies; the sync that
    would have made them durable fails, and the restore says so rather than returning."""
    store, tree, _ = captured
    real = safeio.syncfs

    def cut_then_sync(fd: int) -> None:
        disk.cut()
        real(fd)

    monkeypatch.setattr(safeio, "syncfs", cut_then_sync)
    dest = disk.mount / "copy"
    with pytest.raises(SnapdError) as raised:
        write_tree(dest, tree, 0o751, store.load_node, store.get, store.hasher, [])
    message = raised.value.message
    assert f"the restore into {dest} stopped part-way" in message, message
    assert "making the restored tree durable" in message and "remove it and restore again" in message, message


def test_a_restore_into_a_fuse_file_system_is_durable_when_it_returns(
    captured: tuple[Store, str, Path], disk: XfsDisk, tmp_path: Path
) -> None:
    """A FUSE file system's ``syncfs`` sends its server no request (only virtiofs's does), so
    a fill that trusted it would make nothing durable there: the fill fsyncs each file and
    directory through the server instead (found by an attack on the single sync)."""
    try:
        import fuse  # type: ignore[import-untyped]  # noqa: F401  (the test extra's fusepy)
    except (ImportError, OSError) as exc:
        unavailable(f"needs fusepy and libfuse2 (apt-get install libfuse2 fuse): {exc}")
    if not Path("/dev/fuse").exists():
        unavailable("needs /dev/fuse")
    store, tree, src = captured
    backing, mnt = disk.mount / "backing", tmp_path / "fuse"
    backing.mkdir()
    mnt.mkdir()
    script = Path(__file__).parent / "fuse_passthrough.py"
    server = subprocess.Popen([sys.executable, script, backing, mnt], stderr=subprocess.PIPE)
    try:
        end = time.monotonic() + 20
        while not mounted(mnt):
            assert server.poll() is None and time.monotonic() < end, server.stderr and server.stderr.read()
            time.sleep(0.05)
        done = write_tree(mnt / "copy", tree, 0o751, store.load_node, store.get, store.hasher, [])
        assert done.ok and done.counts["files"] == 301, done
        disk.cut()  # the power cut, right after the restore returned
    finally:
        if mounted(mnt):
            umount(mnt)
        server.wait(timeout=20)
    disk.remount()
    got, want = snapshot(backing / "copy"), snapshot(src)
    assert got == want, snap_diff(got, want)


def test_a_file_system_mounted_in_the_target_meanwhile_is_not_filled(
    captured: tuple[Store, str, Path], disk: XfsDisk, tmp_path: Path
) -> None:
    """Another process mounts a disk on ``DEST/d1`` as the restore begins: the target's final
    sync would not cover it, and it is not the target's. ``d1`` is a conflict, with what it
    would have held; nothing is written there; the rest is restored."""
    store, tree, src = captured
    dest = tmp_path / "copy"
    _run("umount", disk.mount)

    def meanwhile(key: str) -> bytes:
        if not mounted(dest / "d1"):
            (dest / "d1").mkdir(mode=0o755, exist_ok=True)  # made already by the writers, or not
            _run("mount", disk.loop, dest / "d1")
        return store.get(key)

    try:
        done = write_tree(dest, tree, 0o751, store.load_node, meanwhile, store.hasher, [])
        assert mounted(dest / "d1")
        why = dict(done.conflicts)
        mounted_why = "another file system was mounted there meanwhile: left as it is"
        assert why.pop(b"d1") == mounted_why, done.conflicts
        assert why and all(p.startswith(b"d1/") and v == "d1 was left as it is" for p, v in why.items()), why
        assert os.listdir(dest / "d1") == [], "nothing is written into another file system"
    finally:
        if mounted(dest / "d1"):
            umount(dest / "d1")
        _run("mount", disk.loop, disk.mount)
    got = {p: v for p, v in snapshot(dest).items() if p != "d1"}
    want = {p: v for p, v in snapshot(src).items() if not p.startswith("d1")}
    assert got == want, snap_diff(got, want)
