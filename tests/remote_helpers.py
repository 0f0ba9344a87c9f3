"""Helpers for the remote repository's library tests (tests/test_remote_repo.py,
tests/test_remote_push.py): real stores, real marks, real backends, and a restore through the
one writer (``snapd.rollback.restore.write_tree``)."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

from e2e_helpers import Snap, snap_diff, snapshot, write
from ingest_helpers import capture_paths, ingest_tree

from snapd.remote import crypto
from snapd.remote.backend import Backend
from snapd.remote.fetch import readers
from snapd.remote.names import Listed
from snapd.remote.repo import Repository
from snapd.rollback.restore import Restored, write_tree
from snapd.store.objects import xxh3_hex
from snapd.store.records import Mark
from snapd.store.store import Store

PASSWORD = "correct horse battery staple"
CANARY = b"CANARY-7f3e2a-plaintext-never-leaves"


def build_tree(root: Path, files: int = 120, big: int = 0) -> None:
    """A workspace with every kind the format carries: files of several modes and sizes, a
    symlink (and a dangling one), an empty directory with its own mode, a name that is not
    UTF-8, a file holding :data:`CANARY`; ``big`` random bytes spread over extra files."""
    root.mkdir(parents=True, exist_ok=True)
    for i in range(files):
        write(root / f"src/d{i % 9}/f{i:03}.txt", f"line {i}\n" * (i % 13 + 1), 0o644 if i % 5 else 0o755)
    write(root / "secret.txt", CANARY * 3, 0o600)
    write(root / "nested/deep/er/leaf.bin", os.urandom(3000), 0o640)
    os.symlink("src/d1/f001.txt", root / "link")
    os.symlink("nowhere/at/all", root / "dangling")
    (root / "empty").mkdir(mode=0o750)
    (root / "empty").chmod(0o750)
    write(root / os.fsdecode(b"caf\xe9-latin1.txt"), b"not utf-8 name\n")
    for i in range(0, big, 256 << 10):
        write(root / f"blobs/b{i // (256 << 10):04}.bin", os.urandom(min(256 << 10, big - i)))


def baseline(store: Store, root: Path) -> Mark:
    ws = store.add_workspace(os.fsencode(root))
    return store.mark(ingest_tree(store, ws, root).mark_id)


def ten_file_mark(store: Store, root: Path, label: str = "ten") -> Mark:
    """Change ten files of ``build_tree``'s workspace; their new mark."""
    ws = store.add_workspace(os.fsencode(root))
    rels = [f"src/d{i % 9}/f{i:03}.txt" for i in range(10)]
    for rel in rels:
        write(root / rel, os.urandom(200))
    return capture_paths(store, ws, root, [r.encode() for r in rels], label)


def new_repo(backend: Backend, cache: Path) -> Repository:
    return Repository.init(backend, PASSWORD, cache, cost=crypto.LOW_COST)


def restore(repo: Repository, ref: str, dest: Path, **find: object) -> Restored:
    record = repo.find(ref, **find)  # type: ignore[arg-type]
    load, get = readers(repo, record)
    return write_tree(dest, record.mark.tree, record.mark.root_mode, load, get, xxh3_hex, [])


def same_tree(got: Path, want: Snap | Path, *, with_root: bool = False) -> None:
    """``got`` holds exactly ``want`` (a snapshot, or a directory's); ``with_root``: the root's
    own mode too (a daemon's marks record it, the ingest helper's do not)."""
    expected = want if isinstance(want, dict) else snapshot(want, with_root=with_root)
    found = snapshot(got, with_root=with_root)
    assert found == expected, snap_diff(found, expected)


class Recording:
    """A backend that passes everything to a real one and records what was asked of it (the
    names PUT, the GETs), and can run a hook after each PUT (to kill a server mid-push)."""

    def __init__(self, inner: Backend) -> None:
        self.inner = inner
        self.url = inner.url
        self.puts: list[str] = []
        self.gets: list[str] = []
        self.deletes: list[str] = []
        self.after_put: Callable[[str], None] | None = None
        self._lock = threading.Lock()

    @property
    def requests(self) -> int:
        return self.inner.requests

    @requests.setter
    def requests(self, value: int) -> None:
        self.inner.requests = value

    def put(self, name: str, data: bytes) -> None:
        self.inner.put(name, data)
        with self._lock:
            self.puts.append(name)
        if self.after_put is not None:
            self.after_put(name)

    def get(self, name: str, start: int = 0, end: int | None = None) -> bytes:
        with self._lock:
            self.gets.append(name)
        return self.inner.get(name, start, end)

    def list(self, prefix: str) -> Iterator[Listed]:
        return self.inner.list(prefix)

    def delete(self, name: str) -> None:
        with self._lock:
            self.deletes.append(name)
        self.inner.delete(name)
