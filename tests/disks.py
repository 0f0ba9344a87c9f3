"""Real file systems for the power-loss, disk-full and unmount tests: images on loop devices
(an ext4 one to unmount and mount again, an XFS one that can be cut like a power failure),
and small tmpfs mounts that fill up.

Everything here needs root (mount, losetup) and cleans up in ``finally`` blocks: unmount, then
detach the loop device, whatever failed. A machine that cannot give a test its file system
makes the test fail under ``CI`` and skip elsewhere (:func:`e2e_helpers.unavailable`).

The power cut is ``xfs_io -x -c shutdown MOUNT`` *without* ``-f``: XFS stops at once and its
in-memory log is thrown away, so whatever was not made durable (fsync, or a log force that an
fsync caused) is gone after the next mount, which replays the on-disk log. This is how
xfstests simulates a power failure. Until the unmount, every read and write on the mount fails
with EIO, which is how the daemon first meets the cut.
"""

from __future__ import annotations

import errno
import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from e2e_helpers import unavailable

XFS_IMAGE_BYTES = 400 << 20  # mkfs.xfs wants at least 300 MB


def _run(*argv: str | os.PathLike[str], timeout: float = 60.0, setup: bool = False) -> str:
    """Run a command; its output. A failure fails the test, or with ``setup`` (the machine
    cannot give the test its file system: no loop device, no right to mount) is
    :func:`unavailable`."""
    cp = subprocess.run([os.fspath(a) for a in argv], capture_output=True, timeout=timeout)
    if cp.returncode != 0:
        why = f"{' '.join(map(os.fspath, argv))}: rc={cp.returncode} {cp.stderr.decode(errors='replace')}"
        if setup:
            unavailable(why)
        raise AssertionError(why)
    return cp.stdout.decode().strip()


def need_mounts(*tools: str) -> None:
    """Root and the given programs, or :func:`unavailable` saying what is missing."""
    if os.geteuid() != 0:
        unavailable(f"mounting file systems needs root (running as uid {os.geteuid()})")
    missing = [t for t in ("mount", "umount", *tools) if shutil.which(t) is None]
    if missing:
        unavailable(f"needs {', '.join(missing)} (apt-get install xfsprogs util-linux)")


def umount(mount: Path, deadline_s: float = 20.0) -> None:
    """Unmount, retrying while something still holds it (a process being killed)."""
    end = time.monotonic() + deadline_s
    while True:
        cp = subprocess.run(["umount", os.fspath(mount)], capture_output=True, timeout=60)
        if cp.returncode == 0:
            return
        if time.monotonic() > end:
            raise AssertionError(f"umount {mount}: {cp.stderr.decode(errors='replace')}")
        time.sleep(0.1)


def mounted(mount: Path) -> bool:
    """From the mount table: ``os.path.ismount`` says False for a cut file system (EIO)."""
    with open("/proc/self/mounts", encoding="utf-8") as f:
        points = {line.split()[1].replace("\\040", " ") for line in f}
    return os.fspath(mount) in points


class LoopDisk:
    """A file system of type :attr:`FS` in an image file on a loop device, mounted at
    :attr:`mount`; it can be unmounted and mounted again (same device, same files)."""

    FS = "ext4"
    SIZE = 16 << 20
    TOOLS: tuple[str, ...] = ()

    def __init__(self, top: Path) -> None:
        self.image = top / f"{self.FS}.img"
        self.mount = top / self.FS
        self.loop = ""

    def setup(self) -> None:
        need_mounts("losetup", f"mkfs.{self.FS}", *self.TOOLS)
        if not Path("/dev/loop-control").exists():
            unavailable("no loop devices (/dev/loop-control is missing)")
        self.mount.mkdir(parents=True)
        with open(self.image, "wb") as f:
            f.truncate(self.SIZE)
        self.loop = _run("losetup", "-f", "--show", self.image, setup=True)
        _run(f"mkfs.{self.FS}", "-q", self.loop)
        _run("mount", self.loop, self.mount, setup=True)

    def unmount(self) -> None:
        umount(self.mount)

    def mount_again(self) -> None:
        _run("mount", self.loop, self.mount)

    def close(self) -> None:
        try:
            if mounted(self.mount):
                umount(self.mount)
        finally:
            if self.loop:
                _run("losetup", "-d", self.loop)
                self.loop = ""


class XfsDisk(LoopDisk):
    """An XFS file system that can be cut like a power failure; see the module doc."""

    FS = "xfs"
    SIZE = XFS_IMAGE_BYTES
    TOOLS = ("xfs_io",)

    def cut(self) -> None:
        """The power cut: the file system stops, and its unwritten log is lost."""
        _run("xfs_io", "-x", "-c", "shutdown", self.mount)

    def remount(self) -> None:
        """Unmount the cut file system and mount it again: XFS replays its on-disk log. If the
        cut superblock is still alive (another mount namespace holds a copy of the mount,
        e.g. a test run elsewhere that called ``unshare -m`` while it was mounted), ``mount``
        attaches that one again and every access fails with EIO: say so, not what the daemon
        meets next."""
        self.unmount()
        self.mount_again()
        try:
            os.listdir(self.mount)
        except OSError as exc:
            if exc.errno != errno.EIO:
                raise
            raise AssertionError(
                f"{self.mount} is still cut after mount: its superblock outlived the unmount; "
                f"mount namespaces that still hold it: {_holders(self.loop) or 'none found'}"
            ) from exc


def _holders(device: str) -> list[str]:
    """Processes whose mount namespace has ``device`` mounted (pid and command), one per
    namespace, this process's namespace left out."""
    mine = os.readlink("/proc/self/ns/mnt")
    seen: dict[str, str] = {}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            ns = os.readlink(f"/proc/{pid}/ns/mnt")
            if ns == mine or ns in seen:
                continue
            with open(f"/proc/{pid}/mounts", encoding="utf-8") as f:
                if any(line.split()[0] == device for line in f):
                    with open(f"/proc/{pid}/cmdline", "rb") as c:
                        argv = c.read().replace(b"\0", b" ").decode(errors="replace")
                    seen[ns] = f"pid {pid}: {argv}"
        except OSError:
            continue
    return list(seen.values())


@contextmanager
def loop_disk(top: Path, kind: type[LoopDisk] = LoopDisk) -> Iterator[LoopDisk]:
    disk = kind(top)
    try:
        disk.setup()
        yield disk
    finally:
        disk.close()


@contextmanager
def xfs_disk(top: Path) -> Iterator[XfsDisk]:
    with loop_disk(top, XfsDisk) as disk:
        assert isinstance(disk, XfsDisk)
        yield disk


@contextmanager
def tmpfs(mount: Path, size: int) -> Iterator[Path]:
    """A tmpfs of ``size`` bytes mounted at ``mount`` (created), unmounted afterwards."""
    need_mounts()
    mount.mkdir(parents=True)
    _run("mount", "-t", "tmpfs", "-o", f"size={size},mode=0755", "tmpfs", mount, setup=True)
    try:
        yield mount
    finally:
        umount(mount)


def fill(path: Path, leave: int = 0) -> int:
    """Write ``path`` until its file system is full, or has only about ``leave`` bytes free;
    the bytes written. Unlink it to free them."""
    chunk = b"\xa5" * (1 << 16)
    st = os.statvfs(path.parent)
    budget = st.f_bavail * st.f_frsize - leave if leave else None
    written = 0
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        while budget is None or written < budget:
            piece = chunk if budget is None else chunk[: budget - written]
            try:
                n = os.write(fd, piece)
            except OSError as exc:
                if exc.errno != errno.ENOSPC:
                    raise
                if len(chunk) == 1:
                    break
                chunk = chunk[: len(chunk) // 2]
                continue
            written += n
    finally:
        os.close(fd)
    return written
