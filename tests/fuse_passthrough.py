"""A pass-through FUSE file system for the tests (tests/test_restore_durable.py): every call
goes to a backing directory, and fsync is the backing file's fsync, as sshfs's
fsync@openssh.com and most FUSE servers do. ``python fuse_passthrough.py BACKING MOUNT`` serves
in the foreground until unmounted. Needs fusepy (the test extra) and libfuse2."""

import errno
import os
import sys

from fuse import FUSE, FuseOSError, Operations  # type: ignore[import-untyped]


class Passthrough(Operations):
    """Every call on the backing directory; fsync is the backing file's fsync (as sshfs's
    fsync@openssh.com and most FUSE file systems do)."""

    def __init__(self, root):
        self.root = root

    def _p(self, path):
        return os.path.join(self.root, path.lstrip("/"))

    def __call__(self, op, *args):
        try:
            return super().__call__(op, *args)
        except OSError as exc:
            raise FuseOSError(exc.errno or errno.EIO) from exc

    def getattr(self, path, fh=None):
        st = os.lstat(self._p(path))
        return {
            k: getattr(st, k)
            for k in (
                "st_mode",
                "st_nlink",
                "st_uid",
                "st_gid",
                "st_size",
                "st_atime",
                "st_mtime",
                "st_ctime",
            )
        }

    def access(self, path, mode):
        pass

    def readdir(self, path, fh):
        return [".", "..", *os.listdir(self._p(path))]

    def readlink(self, path):
        return os.readlink(self._p(path))

    def mkdir(self, path, mode):
        os.mkdir(self._p(path), mode)

    def rmdir(self, path):
        os.rmdir(self._p(path))

    def unlink(self, path):
        os.unlink(self._p(path))

    def symlink(self, target, source):
        os.symlink(source, self._p(target))

    def chmod(self, path, mode):
        os.chmod(self._p(path), mode)

    def chown(self, path, uid, gid):
        os.chown(self._p(path), uid, gid)

    def utimens(self, path, times=None):
        os.utime(self._p(path), times)

    def statfs(self, path):
        st = os.statvfs(self._p(path))
        return {
            k: getattr(st, k)
            for k in (
                "f_bavail",
                "f_bfree",
                "f_blocks",
                "f_bsize",
                "f_favail",
                "f_ffree",
                "f_files",
                "f_flag",
                "f_frsize",
                "f_namemax",
            )
        }

    def create(self, path, mode, fi=None):
        return os.open(self._p(path), os.O_RDWR | os.O_CREAT | os.O_EXCL, mode)

    def open(self, path, flags):
        return os.open(self._p(path), flags & ~(os.O_CREAT | os.O_EXCL))

    def read(self, path, size, offset, fh):
        return os.pread(fh, size, offset)

    def write(self, path, data, offset, fh):
        return os.pwrite(fh, data, offset)

    def truncate(self, path, length, fh=None):
        os.truncate(self._p(path), length)

    def flush(self, path, fh):
        return 0

    def release(self, path, fh):
        os.close(fh)

    def fsync(self, path, datasync, fh):
        os.fsync(fh)

    def opendir(self, path):
        return 0

    def releasedir(self, path, fh):
        return 0

    def fsyncdir(self, path, datasync, fh):
        fd = os.open(self._p(path), os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


if __name__ == "__main__":
    FUSE(Passthrough(sys.argv[1]), sys.argv[2], foreground=True, nothreads=True)
