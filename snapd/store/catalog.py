"""The catalog: SQLite tables for objects, workspaces, marks, versions and evictions.

Durability rules (docs/storage.md: an acknowledged mark survives a crash): WAL mode with
``synchronous=FULL`` so a committed
transaction survives power loss; every write is an explicit ``BEGIN IMMEDIATE`` transaction on
the single writer connection, serialised by a lock; readers use their own connections and see
only committed state. Small objects live inline in the ``objects`` table, so their bytes
commit atomically with the rows that refer to them; large ones are files that the store makes
durable before the transaction that names them commits.

The store records its format version in ``meta`` and refuses one it does not know.

Every SQLite failure that is the disk's, not the code's (full, I/O error, a page that reads
back wrong, busy) leaves this module as a :class:`StoreError` (:class:`DiskFull` when the disk
is full), whichever statement or row fetch met it: the connections and cursors handed out are
:class:`_Connection`/:class:`_Cursor`, which translate them. A failed transaction is rolled
back (SQLite may already have done so) and nothing it wrote is visible; the daemon replies
with the error and keeps serving. Constraint and programming errors stay what they are: bugs.
"""

from __future__ import annotations

import os
import sqlite3
import threading
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from snapd import memtrim, statrow
from snapd.errors import DiskFull, StoreError, StoreFormatError
from snapd.store import objects, safeio
from snapd.store.checkpoint import BACKSTOP_PAGES, Checkpointer, log_limit

FORMAT_VERSION = 10
# Each entry upgrades a store of that format to the next one; they run in order on open.
# Format 1 lacked the marks' rule inputs and root mode, and the workspace's last rollback (such
# marks are judged under today's outside rules, and their root mode is not restored).
# Format 2 lacked ``workspaces.pruned_before`` (the time before which retention has deleted
# versions: recorded by each GC from then on), and allowed labels starting with ``@``, which
# format 3 reserves for time references. Such labels are kept as they are: those marks are
# reached by their id (see docs/protocol.md, "Time references").
# Format 3 lacked ``marks.absent`` (the paths a pre-rollback mark's rollback created), and its
# trees hold no ``uncaptured`` entries (kind 4), which older code cannot read.
# Format 4 stored every object whole; format 5 adds ``objects.base`` and ``objects.depth`` for
# deltas (codec 2: compressed against the base object's content). Existing objects stay whole
# and read as before; older code cannot read a delta, hence the new format.
# Format 5 stored object keys as text; format 6 stores ``objects.key``, ``objects.base`` and
# ``versions.object`` as 18-20 byte blobs (``objects.db_key``), which older code cannot look up.
# Format 6 stored a stat-cache entry as six columns; format 7 as one blob (``snapd.statrow``),
# which a restart loads without building an int per field. Older code cannot read it.
# Format 7 lacked ``marks.ignored`` and ``workspaces.ignored`` (the names of the top-most
# ignored entries present at each mark, and now: snapd.store.ignored), and recorded a workspace's
# state only at marks. Format 8 adds ``states``: every commit's head tree with the rule inputs,
# root mode and ignored names of that moment, so a time between marks is what a mark taken then
# would hold (snapd.store.history). Older marks keep NULL names: a rollback to one leaves what
# its rules ignore, as before; a workspace lists its directories once at its first start after
# the upgrade to learn its current set. Older code would let GC delete the nodes only states
# reference.
# Format 8 lacked ``pushed`` (which marks have landed in which remote repository:
# snapd.store.pushed) and the ``store_id`` meta key (made at first need, not by the upgrade).
# Older code would ignore both, but a downgrade and upgrade again would push every mark anew
# under a new store id: hence a new format.
# The stat cache: each path's entry packed (snapd.statrow.ROW), format 7 on.
_STATS = "workspace INTEGER NOT NULL, path BLOB NOT NULL, sig BLOB NOT NULL, PRIMARY KEY (workspace, path)"
# What each commit captured (format 8 on): the head tree and what a mark would record beside it.
# ``partial``: a capture between marks while events could not be trusted (a watch shortfall, a
# file system without events), which saw only part of the tree.
_STATES = """CREATE TABLE states (
    id INTEGER PRIMARY KEY,
    workspace INTEGER NOT NULL,
    time INTEGER NOT NULL,
    tree TEXT NOT NULL,
    rules TEXT,
    root_mode INTEGER,
    ignored TEXT,
    partial INTEGER NOT NULL DEFAULT 0
)"""
_STATES_INDEX = "CREATE INDEX states_time ON states (workspace, time)"
# The marks each remote repository holds (format 9 on): ``repo`` is its id, ``at`` when the
# mark's record landed (ns). The on-mark queue is every mark not in here for that repository.
_PUSHED = (
    "CREATE TABLE pushed (repo TEXT NOT NULL, mark TEXT NOT NULL, at INTEGER NOT NULL,"
    " PRIMARY KEY (repo, mark)) WITHOUT ROWID"
)
_MIGRATIONS: dict[str, tuple[str, ...]] = {
    "1": (
        "ALTER TABLE marks ADD COLUMN rules TEXT",
        "ALTER TABLE marks ADD COLUMN root_mode INTEGER",
        "ALTER TABLE workspaces ADD COLUMN last_rollback TEXT",
    ),
    "2": ("ALTER TABLE workspaces ADD COLUMN pruned_before INTEGER",),
    "3": ("ALTER TABLE marks ADD COLUMN absent BLOB",),
    "4": (
        "ALTER TABLE objects ADD COLUMN base TEXT",
        "ALTER TABLE objects ADD COLUMN depth INTEGER NOT NULL DEFAULT 0",
    ),
    "5": (
        "UPDATE objects SET key = snapd_db_key(key), base = snapd_db_key(base)",
        "UPDATE versions SET object = snapd_db_key(object) WHERE object IS NOT NULL",
    ),
    "6": (
        f"CREATE TABLE stats_7 ({_STATS}) WITHOUT ROWID",
        "INSERT INTO stats_7 SELECT workspace, path, snapd_stat_row(mode, size, mtime, ctime, ino, read)"
        " FROM stats ORDER BY workspace, path",
        "DROP TABLE stats",
        "ALTER TABLE stats_7 RENAME TO stats",
    ),
    "7": (
        "ALTER TABLE marks ADD COLUMN ignored TEXT",
        "ALTER TABLE workspaces ADD COLUMN ignored TEXT",
        _STATES,
        _STATES_INDEX,
    ),
    "8": (_PUSHED,),
    # 9 -> 10: directories of more than 1,024 names are written in parts (snapd.store.fan);
    # the nodes a store holds stay as they are, read as before (nothing to convert)
    "9": (),
}

# Object keys (objects.key, objects.base, versions.object) are BLOBs from format 6 on
# (objects.db_key); the columns keep the TEXT declaration format 5 gave them, which stores a
# BLOB as it is, so a new store and an upgraded one have one schema.
SCHEMA = f"""
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE objects (
    key TEXT PRIMARY KEY,
    size INTEGER NOT NULL,
    codec INTEGER NOT NULL,
    stored INTEGER NOT NULL,
    external INTEGER NOT NULL,
    created INTEGER NOT NULL,
    data BLOB,
    base TEXT,
    depth INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE workspaces (
    id INTEGER PRIMARY KEY,
    root BLOB NOT NULL UNIQUE,
    created INTEGER NOT NULL,
    watching INTEGER NOT NULL DEFAULT 1,
    head TEXT,
    root_id TEXT,
    last_rollback TEXT,
    pruned_before INTEGER,
    ignored TEXT
);
CREATE TABLE marks (
    id TEXT PRIMARY KEY,
    workspace INTEGER NOT NULL REFERENCES workspaces(id),
    seq INTEGER NOT NULL,
    label TEXT NOT NULL,
    message TEXT,
    agent TEXT,
    session TEXT,
    created INTEGER NOT NULL,
    git_head TEXT,
    tree TEXT NOT NULL,
    kind TEXT NOT NULL,
    pinned INTEGER NOT NULL DEFAULT 0,
    summary TEXT,
    rules TEXT,
    root_mode INTEGER,
    absent BLOB,
    ignored TEXT,
    UNIQUE (workspace, seq)
);
CREATE INDEX marks_label ON marks (workspace, label, seq);
CREATE TABLE versions (
    id INTEGER PRIMARY KEY,
    workspace INTEGER NOT NULL,
    path BLOB NOT NULL,
    time INTEGER NOT NULL,
    kind TEXT,
    mode INTEGER,
    object TEXT
);
CREATE INDEX versions_path ON versions (workspace, path, time);
CREATE INDEX versions_time ON versions (time);
CREATE TABLE stats ({_STATS}) WITHOUT ROWID;
{_STATES};
{_STATES_INDEX};
CREATE TABLE evictions (
    id INTEGER PRIMARY KEY,
    workspace INTEGER NOT NULL,
    mark TEXT NOT NULL,
    label TEXT NOT NULL,
    created INTEGER NOT NULL,
    evicted INTEGER NOT NULL,
    reason TEXT NOT NULL
);
{_PUSHED};
"""


def disk_error(exc: sqlite3.Error) -> bool:
    """Whether ``exc`` is the disk's doing (full, I/O, unreadable, busy), not a bug of ours."""
    return isinstance(exc, sqlite3.OperationalError) or type(exc) is sqlite3.DatabaseError


def store_error(exc: sqlite3.Error, path: Path) -> StoreError:
    """The user-facing error for a disk failure SQLite reported on the catalog at ``path``."""
    name = getattr(exc, "sqlite_errorname", "") or type(exc).__name__
    if name.startswith("SQLITE_FULL") or "full" in str(exc).lower():
        return DiskFull(
            f"disk full: the catalog {path} could not be written ({exc}); free some space on that "
            "disk and retry. What failed was not recorded; everything acknowledged before is kept"
        )
    try:  # SQLite words an I/O error as corruption at times: ask the disk itself
        os.close(os.open(path, os.O_RDONLY | os.O_CLOEXEC))
        disk = ""
    except OSError as probe:
        disk = f"the disk holding the store fails ({probe.strerror}); "
    return StoreError(
        f"{disk}the catalog {path} could not be read or written: {exc} ({name}). What failed was "
        "not recorded; if the disk failed or went away, restart snapd once it is back: every "
        "acknowledged mark is kept",
        sqlite_error=name,
    )


class _Cursor(sqlite3.Cursor):
    """A cursor whose disk failures are :class:`StoreError` (see the module docstring)."""

    def _fail(self, exc: sqlite3.Error) -> StoreError:
        conn = self.connection
        assert isinstance(conn, _Connection)
        return store_error(exc, conn.path)

    def _guard(self, call: Callable[..., Any], *args: Any) -> Any:
        try:
            return call(*args)
        except sqlite3.Error as exc:
            if not disk_error(exc):
                raise
            raise self._fail(exc) from exc

    def execute(self, sql: str, parameters: Any = (), /) -> _Cursor:
        self._guard(super().execute, sql, parameters)
        return self

    def executemany(self, sql: str, seq_of_parameters: Iterable[Any], /) -> _Cursor:
        self._guard(super().executemany, sql, seq_of_parameters)
        return self

    def __next__(self) -> Any:
        return self._guard(super().__next__)

    def fetchone(self) -> Any:
        return self._guard(super().fetchone)

    def fetchall(self) -> list[Any]:
        rows: list[Any] = self._guard(super().fetchall)
        return rows

    def fetchmany(self, size: int | None = 1) -> list[Any]:
        rows: list[Any] = self._guard(super().fetchmany, size)
        return rows


class _Connection(sqlite3.Connection):
    """A connection whose statements run on :class:`_Cursor`.

    Each cursor is made by ``cursor()``, never by calling the class: a connection keeps a weak
    reference to every cursor made on it, and only ``cursor()`` drops the dead ones (every 200
    cursors). Made by the class, a daemon's connection kept one per statement for as long as it
    lived: ~87 a mark, ~8 MB per 1,000 marks (``bench/bench_soak.py --in-process``)."""

    path: Path

    def execute(self, sql: str, parameters: Any = (), /) -> _Cursor:
        return self.cursor(_Cursor).execute(sql, parameters)

    def executemany(self, sql: str, seq_of_parameters: Iterable[Any], /) -> _Cursor:
        return self.cursor(_Cursor).executemany(sql, seq_of_parameters)


def objects_by_key(conn: sqlite3.Connection, columns: str, keys: list[str]) -> Iterator[Any]:
    """``SELECT key, columns FROM objects`` for ``keys``: one query per 500 keys (SQLite caps
    the parameters of a statement), not one per key. The key comes back as Python's (format
    6 stores it as a blob: :func:`objects.db_key`); the other columns as stored."""
    for i in range(0, len(keys), 500):
        chunk = [objects.db_key(k) for k in keys[i : i + 500]]
        marks = ",".join("?" * len(chunk))
        for key, *rest in conn.execute(f"SELECT key, {columns} FROM objects WHERE key IN ({marks})", chunk):
            yield (objects.py_key(key), *rest)


def _connect(path: Path) -> _Connection:
    try:
        conn = sqlite3.connect(
            path, isolation_level=None, check_same_thread=False, timeout=30.0, factory=_Connection
        )
    except sqlite3.Error as exc:
        raise store_error(exc, path) from exc
    assert isinstance(conn, _Connection)
    conn.path = path
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=FULL")
    conn.execute("PRAGMA foreign_keys=ON")
    conn.create_function("snapd_db_key", 1, _db_key, deterministic=True)  # the 5 -> 6 upgrade
    conn.create_function("snapd_stat_row", 6, statrow.pack, deterministic=True)  # 6 -> 7
    return conn


def _db_key(value: str | bytes | None) -> str | bytes | None:
    """A format 5 key (text) as format 6 stores it; a value already converted stays as it is."""
    return objects.db_key(value) if isinstance(value, str) else value


class CatalogReader:
    """The catalog of a store the daemon writes, opened by another process to read alone
    (the GC's mark phase): one query-only connection, no schema set-up or migration, no
    checkpoints. The store must exist and have this snapd's format."""

    def __init__(self, path: Path) -> None:
        self.path = path
        if not path.is_file():
            raise StoreError(f"no store catalog at {path}")
        self._conn = _connect(path)
        try:
            self._conn.execute("PRAGMA query_only=ON")
            row = self._conn.execute("SELECT value FROM meta WHERE key='format'").fetchone()
        except sqlite3.Error as exc:
            self._conn.close()
            raise store_error(exc, path) from exc
        if row is None or row[0] != str(FORMAT_VERSION):
            self._conn.close()
            raise StoreFormatError(
                f"the store {path.parent} has format {row[0] if row else 'none'}; this snapd reads "
                f"format {FORMAT_VERSION}"
            )

    def read(self) -> sqlite3.Connection:
        return self._conn

    def close(self) -> None:
        self._conn.close()


class Catalog:
    """One writer connection (serialised), one reader connection per thread."""

    def __init__(self, path: Path) -> None:
        self.path = path
        try:
            if not path.exists():
                # Create the file ourselves so it (and the -wal/-shm files SQLite derives from
                # its mode) is private whatever the umask.
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW, safeio.FILE_MODE)
                os.close(fd)
                safeio.fsync_dir(path.parent)
            os.chmod(path, safeio.FILE_MODE)
        except OSError as exc:
            raise safeio.os_error(exc, "create", path) from exc
        self._w = _connect(path)
        self._init_schema()
        # Checkpoints run on their own thread (snapd.store.checkpoint), not in a mark's COMMIT.
        self._w.execute(f"PRAGMA wal_autocheckpoint={BACKSTOP_PAGES}")
        page_size = int(self._w.execute("PRAGMA page_size").fetchone()[0])
        # The log keeps its length when started over: commits overwrite, not extend, the file.
        self._w.execute(f"PRAGMA journal_size_limit={log_limit(page_size)}")
        self._checkpointer = Checkpointer(path, _connect, page_size)
        self._lock = threading.RLock()
        self._local = threading.local()
        self._readers: list[sqlite3.Connection] = []
        # SUM(objects.stored), counted once and then kept by each commit (stored_bytes).
        self._stored: int | None = None
        self._stored_delta = 0
        self._commit_lock = threading.Lock()  # a COMMIT and its tally, or the one count

    def _init_schema(self) -> None:
        have = self._w.execute("SELECT name FROM sqlite_master WHERE type='table' AND name='meta'").fetchone()
        if have is None:
            self._w.execute("PRAGMA auto_vacuum=INCREMENTAL")
            self._w.execute("VACUUM")  # auto_vacuum takes effect on an empty database
            self._w.execute("BEGIN IMMEDIATE")
            for stmt in SCHEMA.split(";"):
                if stmt.strip():
                    self._w.execute(stmt)
            self._w.execute("INSERT INTO meta (key, value) VALUES ('format', ?)", (str(FORMAT_VERSION),))
            self._w.execute("COMMIT")
            safeio.step("catalog.create")
            return
        row = self._w.execute("SELECT value FROM meta WHERE key='format'").fetchone()
        found = row[0] if row else "none"
        if found in _MIGRATIONS:
            # One transaction: a crash anywhere in it leaves the store as it was, upgraded at
            # the next open (the crash tests interrupt it after each statement).
            self._w.execute("BEGIN IMMEDIATE")
            while found in _MIGRATIONS:
                for stmt in _MIGRATIONS[found]:
                    self._w.execute(stmt)
                    safeio.step("catalog.migrate")
                found = str(int(found) + 1)
            self._w.execute("UPDATE meta SET value=? WHERE key='format'", (found,))
            self._w.execute("COMMIT")
            safeio.step("catalog.commit")
        if found != str(FORMAT_VERSION):
            raise StoreFormatError(
                f"the store {self.path.parent} has format {found}, and this snapd understands "
                f"format {FORMAT_VERSION}: run the snapd version that wrote it, or move the "
                "store aside to start a new history"
            )

    @contextmanager
    def write(self) -> Iterator[sqlite3.Connection]:
        """A ``BEGIN IMMEDIATE`` transaction on the writer connection; commits on success.

        On any failure (the body's, or the commit's: a full disk, an I/O error) it is rolled
        back and the error raised; nothing it wrote is visible.
        """
        with self._lock:
            conn = self._w
            conn.execute("BEGIN IMMEDIATE")
            self._stored_delta = 0
            try:
                yield conn
                with self._commit_lock:
                    conn.execute("COMMIT")
                    if self._stored is not None:
                        self._stored += self._stored_delta
            except BaseException:
                # SQLite rolls some failures back itself; a rollback that fails too leaves the
                # connection to SQLite's own recovery at the next statement (or next open).
                if conn.in_transaction:
                    try:
                        conn.execute("ROLLBACK")
                    except StoreError:
                        pass
                raise
            safeio.step("catalog.commit")
        self._checkpointer.poke()
        memtrim.after_writes.wrote()

    def stored_changed(self, delta: int) -> None:
        """Inside :meth:`write`: objects taking ``delta`` bytes were inserted (deleted when
        negative). Every statement that inserts or deletes ``objects`` rows says so here."""
        self._stored_delta += delta

    def stored_bytes(self) -> int:
        """What every stored object takes, ``SUM(objects.stored)``. Counted once (it reads the
        whole table, inline data included: tens of ms at 100k files, and ``status`` asks on
        every call), then kept by each commit's :meth:`stored_changed`. The count holds the
        commit lock, so no commit lands between it and the tallies that follow."""
        stored = self._stored
        if stored is None:
            with self._commit_lock:
                if self._stored is None:
                    row = self.read().execute("SELECT COALESCE(SUM(stored), 0) FROM objects").fetchone()
                    self._stored = int(row[0])
                stored = self._stored
        return stored

    def read(self) -> sqlite3.Connection:
        """This thread's read-only connection (sees committed state only)."""
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is None:
            conn = _connect(self.path)
            conn.execute("PRAGMA query_only=ON")
            self._local.conn = conn
            with self._lock:
                self._readers.append(conn)
        return conn

    def close(self) -> None:
        self._checkpointer.close()
        with self._lock:
            for conn in self._readers:
                conn.close()
            self._readers.clear()
            self._w.close()
