"""A remote repository in a directory (``file:///DIR``): local, or a mounted network share.

Each object is a file at its name under the root; writes go through the store's safe file
operations (temp file, fsync, rename, fsync of the directory), so an object is absent or
whole, as on S3. Temp files left by a crash are ``.snapd-*~`` names, which listings skip.
Library unit tests use this backend too: it keeps the same contract as the S3 one
(:mod:`snapd.remote.backend`).
"""

from __future__ import annotations

import errno
import os
import threading
from collections.abc import Iterator
from pathlib import Path

from snapd.errors import (
    DiskFull,
    RemoteDenied,
    RemoteError,
    RemoteFull,
    RemoteMissing,
    RemoteUnreachable,
    StoreError,
)
from snapd.paths import is_snapd_name
from snapd.remote.names import Listed, check_name, check_prefix, check_range
from snapd.store import safeio

_DENIED = (errno.EACCES, errno.EPERM, errno.EROFS)


class FileBackend:
    """The objects of one repository as files under ``root``."""

    def __init__(self, root: Path, *, url: str | None = None) -> None:
        self.root = root
        self.url = url or root.as_uri()
        self.requests = 0
        self._count = threading.Lock()
        self._root_seen = False

    def _root_there(self) -> bool:
        """Whether the root exists or can be made in an existing parent: a repository on a disk
        that is not mounted must not quietly land on the disk below the mount point."""
        if not self._root_seen:
            self._root_seen = self.root.is_dir() or self.root.parent.is_dir()
        return self._root_seen

    def _counted(self) -> None:
        with self._count:
            self.requests += 1

    def put(self, name: str, data: bytes) -> None:
        path = self.root / check_name(name)
        self._counted()
        if not self._root_there():
            raise RemoteUnreachable(
                f"{self.url}: cannot write {name}: neither {self.root} nor its parent exists (is the disk "
                "mounted?): the directory is created, its parent never is",
                object=name,
            )
        try:
            safeio.ensure_dir(path.parent)
            safeio.write_atomic(path, data)
        except DiskFull as exc:
            raise RemoteFull(
                f"{self.url}: no space left to write {name} ({len(data)} bytes) in {self.root}: free "
                "some space there and push again (nothing written is trusted until its index lands)"
            ) from exc
        except StoreError as exc:
            raise self._error(exc.__cause__, "write", name) from exc

    def get(self, name: str, start: int = 0, end: int | None = None) -> bytes:
        path = self.root / check_name(name)
        check_range(self.url, name, start, end)
        self._counted()
        try:
            with open(path, "rb") as f:
                f.seek(start)
                return f.read() if end is None else f.read(end - start)
        except (FileNotFoundError, NotADirectoryError) as exc:
            raise RemoteMissing(f"{self.url}: {name} is not there ({path})", object=name) from exc
        except OSError as exc:
            raise self._error(exc, "read", name) from exc

    def list(self, prefix: str) -> Iterator[Listed]:
        check_prefix(prefix)
        top = self.root / prefix.rpartition("/")[0] if "/" in prefix else self.root
        self._counted()
        if not top.is_dir():
            return
        for here, dirs, files in os.walk(top, onerror=self._walk_error):
            dirs.sort()
            rel = os.path.relpath(here, self.root)
            for file in sorted(files):
                if is_snapd_name(file):
                    continue
                name = file if rel == "." else f"{rel}/{file}"
                if not name.startswith(prefix):
                    continue
                try:
                    st = os.lstat(os.path.join(here, file))
                except FileNotFoundError:
                    continue  # deleted while listed: as if listed a moment later
                yield Listed(name, st.st_size, st.st_mtime_ns)

    def delete(self, name: str) -> None:
        path = self.root / check_name(name)
        self._counted()
        try:
            safeio.unlink(path)
        except StoreError as exc:
            raise self._error(exc.__cause__, "delete", name) from exc

    def _walk_error(self, exc: OSError) -> None:
        raise self._error(exc, "list", "")

    def _error(self, cause: BaseException | None, what: str, name: str) -> RemoteError:
        """The error for an OS error met while ``what``-ing object ``name`` (or the listing)."""
        reason = cause.strerror if isinstance(cause, OSError) and cause.strerror else str(cause)
        subject = name or f"the objects under {self.root}"
        if isinstance(cause, OSError) and cause.errno in _DENIED:
            return RemoteDenied(f"{self.url}: may not {what} {subject}: {reason}", object=name)
        return RemoteError(f"{self.url}: could not {what} {subject}: {reason}", object=name)
