"""The daemon's remotes: the ``[remotes.NAME]`` tables, one open repository per remote, the
secrets clients sent, and each remote's push record (docs/remote.md, "Daemon and on-mark
pushing").

A repository is opened (its key file unlocked with the password: an Argon2id derivation) at
its first use and kept open, so its view of the repository carries over from one push to the
next (an incremental push costs its own writes, docs/remote.md). The password is, first found:
the request's, the one that opened the repository last (memory only, never written), the
remote's ``password_file``, the daemon's own ``SNAPD_REMOTE_PASSWORD``. ``AWS_*`` credentials
the same way: the request's, the last that worked, then the daemon's environment and profile
files (:mod:`snapd.remote.s3`).

``snapd.remote`` is imported here only inside the methods that reach a repository: a daemon
with no remote never loads it (nor ``cryptography``, nor ``obstore``).

The remotes' tables are read with the rest of the configuration at start and changed by
``remote add`` / ``remote remove``, which edit ``config.toml`` (:mod:`snapd.remote_config`); a
hand edit takes effect at the next start, like every setting. Which repository id each remote
has is kept in ``<data_dir>/remotes/names.json``, so ``status`` can count what is pending
before the repository has been opened (after a restart, with the server down).
"""

from __future__ import annotations

import hmac
import json
import os
import socket
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import structlog

from snapd import remote_config
from snapd.errors import NotFound, RemoteError, SnapdError, UsageError
from snapd.rollback.running import Op, Running, Tracker
from snapd.store.records import WorkspaceRecord
from snapd.store.store import Store

if TYPE_CHECKING:
    from snapd.remote.push import PushResult
    from snapd.remote.repo import Repository
    from snapd.remote.spec import RemoteSpec

log = structlog.get_logger("snapd.remotes")
NAMES_FILE = "names.json"


@dataclass
class _Open:
    repo: Repository
    password: str = field(repr=False)  # secrets: never in a repr, a log line or a traceback's
    credentials: dict[str, str] = field(repr=False)
    url: str = ""


@dataclass
class PushRecord:
    """What ``status`` shows of a remote's pushes."""

    last_push: dict[str, Any] | None = None  # time (s), marks, objects, bytes, requests
    last_error: dict[str, Any] | None = None  # time (s), code, message
    skipped: dict[str, Any] | None = None  # as last_error: marks a push left (damaged locally)

    def error(self) -> dict[str, Any] | None:
        return self.last_error or self.skipped


class Remotes:
    def __init__(
        self,
        store: Store,
        tables: Mapping[str, Mapping[str, str]],
        config_file: Path,
        data_dir: Path,
        running: Running,
        password: str | None = None,
    ) -> None:
        """``password``: the daemon's own ``SNAPD_REMOTE_PASSWORD`` (None: not set)."""
        self.store, self.config_file, self.running = store, config_file, running
        self.cache_dir = data_dir / "remotes"
        self.host = socket.gethostname()
        self._tables = {name: dict(t) for name, t in tables.items()}
        self.env_password = password or None
        self._adding = threading.Lock()  # one remote add at a time: two inits of one prefix
        self._lock = threading.Lock()  # the dicts below
        self._open: dict[str, _Open] = {}
        self._opening: dict[str, threading.Lock] = {}  # one unlock at a time per remote
        self._busy: dict[str, threading.Lock] = {}  # one push or prune at a time per remote
        self.records: dict[str, PushRecord] = {}
        self._skipped: dict[str, set[str]] = {}  # remote -> marks a push skipped (damaged here)
        self._working = 0  # remote operations in flight (working)
        self._ids = self._read_ids()  # name -> repository id

    # -- the tables ---------------------------------------------------------------------------

    def names(self) -> list[str]:
        with self._lock:
            return sorted(self._tables)

    def table(self, name: str) -> dict[str, str]:
        with self._lock:
            table = self._tables.get(name)
        if table is None:
            known = ", ".join(self.names()) or "none yet (`snapctl remote add NAME URL`)"
            raise NotFound(f"no remote named {name!r} (remotes: {known})")
        return dict(table)

    def on_mark(self) -> list[str]:
        """The remotes to push each mark to."""
        with self._lock:
            return sorted(n for n, t in self._tables.items() if t.get("push") == "on-mark")

    def spec(self, name: str) -> RemoteSpec:
        return _spec(name, self.table(name))

    def add(
        self, name: str, fields: Mapping[str, str], password: str | None, credentials: Mapping[str, str]
    ) -> tuple[Repository, bool]:
        """Open the repository at ``fields``' URL, or make one where the prefix is empty, then
        write the table into config.toml. Nothing is written to the file when the repository
        cannot be opened (wrong password, unreachable, not empty and not a repository). One add
        at a time: two at once could both find a prefix empty."""
        with self._adding:
            return self._add(name, fields, password, credentials)

    def _add(
        self, name: str, fields: Mapping[str, str], password: str | None, credentials: Mapping[str, str]
    ) -> tuple[Repository, bool]:
        from snapd.remote.backend import open_backend
        from snapd.remote.repo import Repository
        from snapd.remote.spec import check_endpoint, check_region, parse_url

        remote_config.check_name(name)
        fields = dict(fields)
        if "endpoint" in fields:  # its own rules, before the S3 client sees it
            fields["endpoint"] = check_endpoint(fields["endpoint"])
        if "region" in fields:
            check_region(fields["region"])
        remote_config.check_table(name, fields, f"remote add {name}")
        if name in self.names():
            raise UsageError(f"a remote named {name!r} exists already (`snapctl remote remove {name}` first)")
        parse_url(fields["url"])
        if not password and "password_file" in fields:
            password = _read_password_file(fields["password_file"], name)
        password = password or self.env_password
        if not password:
            raise UsageError(_NO_PASSWORD.format(name=name))
        backend = open_backend(_spec(name, fields), credentials)
        created = next(iter(backend.list("")), None) is None
        if created:
            repo = Repository.init(backend, password, self.cache_dir)
        else:
            repo = Repository.open(backend, password, self.cache_dir)
        remote_config.add_table(self.config_file, name, fields)
        with self._lock:
            self._tables[name] = dict(fields)
            self._open[name] = _Open(repo, password, dict(credentials), fields["url"])
            self.records[name] = PushRecord()
        self._remember_id(name, repo.id)
        return repo, created

    def remove(self, name: str) -> None:
        self.table(name)
        remote_config.remove_table(self.config_file, name)
        with self._lock:
            self._tables.pop(name, None)
            self._open.pop(name, None)
            self.records.pop(name, None)
            self._skipped.pop(name, None)
        self._remember_id(name, None)

    # -- repositories ---------------------------------------------------------------------------

    def repository(
        self, name: str, password: str | None = None, credentials: Mapping[str, str] | None = None
    ) -> Repository:
        """``name``'s repository, open. A request's password or credentials other than those
        that opened it open it again (so a wrong one is refused, never ignored)."""
        from snapd.remote.backend import open_backend
        from snapd.remote.repo import Repository

        spec = self.spec(name)
        with self._lock:
            opening = self._opening.setdefault(name, threading.Lock())
        with opening:
            with self._lock:
                known = self._open.get(name)
            if known is not None and known.url != spec.url:
                known = None
            same_password = password is None or (
                known is not None and hmac.compare_digest(password.encode(), known.password.encode())
            )
            same_credentials = not credentials or (
                known is not None and dict(credentials) == known.credentials
            )
            if known is not None and same_password and same_credentials:
                return known.repo
            if password is None:
                password = known.password if known is not None else self._fallback_password(spec)
            creds = dict(credentials) if credentials else (known.credentials if known is not None else {})
            repo = Repository.open(open_backend(spec, creds), password, self.cache_dir)
            with self._lock:
                if name in self._tables:
                    self._open[name] = _Open(repo, password, creds, spec.url)
            self._remember_id(name, repo.id)
            return repo

    def _fallback_password(self, spec: RemoteSpec) -> str:
        if spec.password_file:
            return _read_password_file(spec.password_file, spec.name)
        if self.env_password:
            return self.env_password
        raise UsageError(_NO_PASSWORD.format(name=spec.name))

    def change_password(
        self, name: str, old: str | None, new: str, credentials: Mapping[str, str] | None
    ) -> str:
        """Give ``name``'s repository the password ``new`` (a key file of its own), deleting the
        key files ``old`` opens (default: the password it is open with). Returns the old one."""
        repo = self.repository(name, old, credentials)
        with self._lock:
            known = self._open.get(name)
        old = old if old is not None else (known.password if known is not None else "")
        repo.change_password(old, new)
        with self._lock:
            if known is not None:
                known.password = new
        return old

    @contextmanager
    def working(self, op: Op, url: str, target: Path | str) -> Iterator[Tracker]:
        """A remote operation in flight: in ``status``'s ``running`` table, and counted
        (:meth:`in_flight`), since its requests cannot be cancelled."""
        with self._lock:
            self._working += 1
        try:
            with self.running.one(op, url, target) as tracker:
                yield tracker
        finally:
            with self._lock:
                self._working -= 1

    def in_flight(self) -> int:
        """Remote operations still running (at stop: left waiting on a server)."""
        with self._lock:
            return self._working

    def busy(self, name: str) -> threading.Lock:
        """Held while a push or a prune runs against ``name``."""
        with self._lock:
            return self._busy.setdefault(name, threading.Lock())

    # -- pushing --------------------------------------------------------------------------------

    def push(
        self,
        name: str,
        workspaces: Sequence[WorkspaceRecord],
        password: str | None = None,
        credentials: Mapping[str, str] | None = None,
        *,
        wait: bool = True,
    ) -> PushResult | None:
        """Push every mark of ``workspaces`` that ``name``'s repository lacks, and record them
        in the store (``pushed``). ``wait=False`` (the on-mark pusher): None at once when
        another push of this remote runs, and the marks a push skipped (objects damaged in the
        local store) are not tried again: a manual push tries them. Its outcome is
        :attr:`records`' to show."""
        from snapd.remote.push import push

        lock = self.busy(name)
        if not lock.acquire(blocking=wait):
            return None
        try:
            with self.working("push", self.table(name)["url"], name) as tracker:
                tracker.phase("opening the repository")
                try:
                    repo = self.repository(name, password, credentials)
                    ids = [w.id for w in workspaces]
                    roots = {w.id: w.root for w in workspaces}
                    todo = self.store.unpushed(repo.id, ids)
                    if not wait:
                        todo = [m for m in todo if m.id not in self.skipping(name)]
                    tracker.phase("listing the repository")
                    marks = [(m, roots[m.workspace]) for m in todo]
                    result = push(self.store, repo, marks, self.host, tracker)
                    self.store.record_pushed(repo.id, result.landed)
                except SnapdError as exc:
                    self._note(name, error=exc)
                    raise
                self._note(name, result=result)
                return result
        finally:
            lock.release()

    def _note(self, name: str, *, result: PushResult | None = None, error: SnapdError | None = None) -> None:
        from snapd.remote.unreadable import describe  # loaded by the push already

        with self._lock:
            record = self.records.setdefault(name, PushRecord())
            if error is not None:
                record.last_error = {"time": time.time(), "code": error.code, "message": error.message}
                log.warning("remote.push_failed", remote=name, code=error.code, error=error.message)
                return
            assert result is not None
            record.last_error = None
            known = self._skipped.setdefault(name, set())
            known.difference_update(result.landed)
            new = [s for s in result.skipped if s.mark not in known]
            known.update(s.mark for s in result.skipped)
            if new:  # once per mark: the on-mark pusher does not try it again
                record.skipped = {"time": time.time(), "code": _SKIP_CODES[new[0].problem],
                                  "message": describe(new)}  # fmt: skip
            elif not known:
                record.skipped = None
            record.last_push = {
                "time": time.time(), "marks": result.marks, "present": result.present,
                "objects": result.objects, "bytes": result.bytes, "requests": result.requests,
            }  # fmt: skip
        if result.skipped:  # each push that leaves marks: the on-mark pusher's only once per mark
            log.warning("remote.push_skipped", remote=name, marks=[s.mark for s in result.skipped],
                        error=describe(result.skipped))  # fmt: skip
        if result.marks:
            log.info("remote.pushed", remote=name, marks=result.marks, objects=result.objects,
                     bytes=result.bytes, requests=result.requests)

    def skipping(self, name: str) -> set[str]:
        """The marks a push to ``name`` skipped, their objects damaged in the local store."""
        with self._lock:
            return set(self._skipped.get(name, ()))

    def pending(self, name: str, *, queued: bool = False) -> int | None:
        """Marks of the watched workspaces not yet in ``name``'s repository (``queued``: less
        those a push skipped, which the on-mark pusher leaves); None while its id is unknown
        (never opened)."""
        with self._lock:
            repo_id = self._ids.get(name)
        if repo_id is None:
            return None
        watched = [w.id for w in self.store.workspaces() if w.watching]
        left = self.store.unpushed(repo_id, watched)
        skipped = self.skipping(name) if queued else set()
        return sum(m.id not in skipped for m in left)

    def status(self) -> list[dict[str, Any]]:
        """Each remote as ``status`` and ``remote_list`` show it: its table's keys (as of now: a
        remote removed meanwhile is not listed) and its push state."""
        with self._lock:
            tables = {name: dict(t) for name, t in sorted(self._tables.items())}
        out = []
        for name, t in tables.items():
            with self._lock:
                record = self.records.get(name) or PushRecord()
                busy = self._busy.get(name)
            out.append({
                **t, "name": name, "push": t.get("push", "manual"),
                "pending": self.pending(name), "pushing": bool(busy and busy.locked()),
                "last_push": record.last_push, "last_error": record.error(),
            })  # fmt: skip
        return out

    # -- names.json -----------------------------------------------------------------------------

    def _read_ids(self) -> dict[str, str]:
        try:
            data = json.loads((self.cache_dir / NAMES_FILE).read_text())
        except (OSError, ValueError):
            return {}  # a cache: rebuilt as repositories are opened
        if not isinstance(data, dict):
            return {}
        out: dict[str, str] = {}
        for name, entry in data.items():
            table = self._tables.get(name)
            if isinstance(entry, dict) and table is not None and entry.get("url") == table["url"]:
                out[name] = str(entry.get("id"))
        return out

    def _remember_id(self, name: str, repo_id: str | None) -> None:
        with self._lock:
            if repo_id is None:
                self._ids.pop(name, None)
            elif self._ids.get(name) == repo_id:
                return
            else:
                self._ids[name] = repo_id
            tables = self._tables
            data = {n: {"url": tables[n]["url"], "id": i} for n, i in self._ids.items() if n in tables}
        try:
            _write_atomic(self.cache_dir / NAMES_FILE, json.dumps(data, indent=1, sort_keys=True).encode())
        except OSError as exc:  # a cache: status shows pending as unknown until the next open
            log.warning("remote.names_not_written", error=str(exc))


_SKIP_CODES = {"corrupt": "corrupt_object", "missing": "missing_object"}


def _spec(name: str, t: Mapping[str, str]) -> RemoteSpec:
    from snapd.remote.spec import PushMode, RemoteSpec

    push: PushMode = "on-mark" if t.get("push") == "on-mark" else "manual"
    return RemoteSpec(
        name, t["url"], t.get("endpoint"), t.get("region"), t.get("profile"), t.get("password_file"), push
    )


_NO_PASSWORD = (
    "no password for remote {name}: set SNAPD_REMOTE_PASSWORD or pass --password-file (or set "
    "password_file in its [remotes.{name}] table, which on-mark pushing needs after a restart)"
)


def _read_password_file(path: str, name: str) -> str:
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except (OSError, UnicodeDecodeError) as exc:
        why = exc.strerror if isinstance(exc, OSError) else "not UTF-8 text"
        raise RemoteError(f"remote {name}: its password file {path} cannot be read: {why}") from None
    password = text.rstrip("\r\n")
    if not password:
        raise RemoteError(f"remote {name}: its password file {path} is empty")
    return password


def _write_atomic(path: Path, data: bytes) -> None:
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
    try:
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)

