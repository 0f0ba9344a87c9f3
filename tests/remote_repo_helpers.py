"""Helpers for the library tests of a remote repository (verify, prune): a store with marks
captured straight from real files, a repository on a real backend (a directory, or the rclone
S3 server), a backend that records every request, and the check that a mark restores exactly
from a fresh repository view (a new cache directory: nothing known but what the server holds)."""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

import pytest
from ingest_helpers import capture_paths, ingest_tree
from remote_server import S3Server

from snapd.remote import crypto, fetch
from snapd.remote.backend import Backend, Listed, open_backend
from snapd.remote.files import FileBackend
from snapd.remote.push import push
from snapd.remote.records import MarkRecord
from snapd.remote.repo import Repository
from snapd.store import trees
from snapd.store.records import Mark
from snapd.store.store import Store

PASSWORD = "correct horse battery staple"
HOST = "sandbox-1"


class Call(NamedTuple):
    op: str
    name: str
    start: int = 0
    end: int | None = None


class Recording:
    """A backend that records each call before handing it on (the requests counted exactly)."""

    def __init__(self, inner: Backend) -> None:
        self.inner = inner
        self.url = inner.url
        self.calls: list[Call] = []
        self._lock = threading.Lock()

    @property
    def requests(self) -> int:
        return self.inner.requests

    @requests.setter
    def requests(self, value: int) -> None:
        self.inner.requests = value

    def _record(self, call: Call) -> None:
        with self._lock:
            self.calls.append(call)

    def put(self, name: str, data: bytes) -> None:
        self._record(Call("put", name))
        self.inner.put(name, data)

    def get(self, name: str, start: int = 0, end: int | None = None) -> bytes:
        self._record(Call("get", name, start, end))
        return self.inner.get(name, start, end)

    def list(self, prefix: str) -> Iterator[Listed]:
        self._record(Call("list", prefix))
        return self.inner.list(prefix)

    def delete(self, name: str) -> None:
        self._record(Call("delete", name))
        self.inner.delete(name)


class Where(NamedTuple):
    backend: Backend
    folder: Path  # where the server keeps the repository's objects as files


def make_backend(kind: str, tmp_path: Path, request: pytest.FixtureRequest) -> Where:
    """A real backend: a directory (``file``) or the rclone S3 server (``s3``)."""
    if kind == "file":
        root = tmp_path / "remote"
        root.mkdir()
        return Where(FileBackend(root), root)
    server: S3Server = request.getfixturevalue("s3_server")
    spec = server.spec("snapd", "repo")
    return Where(open_backend(spec, server.credentials), server.folder / "snapd" / "repo")


def new_repo(backend: Backend, tmp_path: Path) -> Repository:
    return Repository.init(backend, PASSWORD, tmp_path / "cache-init", cost=crypto.LOW_COST)


def fresh(backend: Backend, tmp_path: Path, name: str) -> Repository:
    """The repository opened from a new cache directory: a second machine's view."""
    repo = Repository.open(backend, PASSWORD, tmp_path / f"cache-{name}")
    repo.refresh()
    return repo


class Workspace:
    """A real directory, its store, and its marks (captured without a daemon)."""

    def __init__(self, tmp_path: Path, name: str = "ws") -> None:
        self.root = tmp_path / name
        self.root.mkdir()
        self.store = Store.open(tmp_path / f"store-{name}")
        self.ws = self.store.add_workspace(os.fsencode(self.root))
        self.marks: list[Mark] = []

    def write(self, rel: str, data: bytes) -> None:
        path = self.root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)

    def baseline(self, files: dict[str, bytes]) -> Mark:
        for rel, data in files.items():
            self.write(rel, data)
        (self.root / "empty").mkdir(exist_ok=True)
        os.symlink("a.txt", self.root / "link")
        mark = self.store.mark(ingest_tree(self.store, self.ws, self.root).mark_id)
        self.marks.append(mark)
        return mark

    def mark(self, label: str, files: dict[str, bytes]) -> Mark:
        for rel, data in files.items():
            self.write(rel, data)
        mark = capture_paths(self.store, self.ws, self.root, [r.encode() for r in files], label)
        self.marks.append(mark)
        return mark

    def push(self, repo: Repository, *marks: Mark) -> None:
        push(self.store, repo, [(m, os.fsencode(self.root)) for m in marks], HOST)

    def contents(self, mark: Mark) -> list[tuple[bytes, str, int, bytes | None]]:
        return [
            (path, e.kind, e.mode, self.store.get(e.key) if e.kind in ("file", "symlink") else None)
            for path, e in trees.walk(self.store.load_node, mark.tree)
        ]

    def close(self) -> None:
        self.store.close()


def record_of(repo: Repository, mark: Mark) -> MarkRecord:
    return repo.find(mark.id)


def restored(repo: Repository, mark: Mark) -> list[tuple[bytes, str, int, bytes | None]]:
    """Mark ``mark``'s tree as the repository gives it back: every path, kind, mode, content."""
    load, get = fetch.readers(repo, record_of(repo, mark))
    return [
        (path, e.kind, e.mode, get(e.key) if e.kind in ("file", "symlink") else None)
        for path, e in trees.walk(load, record_of(repo, mark).mark.tree)
    ]


def flip_byte(path: Path, offset: int) -> None:
    data = bytearray(path.read_bytes())
    data[offset] ^= 0x40
    path.write_bytes(bytes(data))


def listing(backend: Backend) -> dict[str, int]:
    return {x.name: x.size for x in backend.list("")}
