"""Configuration: where snapd keeps things, and the settings that tune it.

Each setting is defined once, below: one field with its default and, in its annotation, its
parser (:mod:`snapd.settings` derives its TOML key and ``SNAPD_*`` variable from it). The layers take
their group, not a copy: a workspace is handed ``Config.capture``, the GC ``Config.retention``.
Settings are layered defaults < TOML config file < ``SNAPD_*`` environment < overrides (flags),
and flow down as one frozen ``Config``. ``load_config`` is the only function that looks at
environment variables, and it is handed them explicitly (``main()`` passes ``os.environ``), so
tests never depend on the developer's ``HOME`` or ``XDG_*``.

The daemon loads strictly: a bad setting stops ``snapd start`` with an error naming the file
or variable. A client loads leniently (``lenient=True``): it needs nothing from the settings
but where the daemon is, so a typo in ``config.toml`` must not cut it off from a running
daemon — the bad setting keeps its default and comes back in ``Config.warnings``. Locations
are never lenient: a client that guessed them would talk to another store. ``SNAPD_*``
variables that name no setting are reported in ``warnings`` either way: a misspelled
``SNAPD_RETENTION_MAX_MARK`` must not silently keep the default.

Locations are computed, not created: the same environment gives a client and the daemon the
same paths, including the socket. A Unix socket path longer than ``IPC_PATH_MAX`` bytes cannot
be bound, so such a socket moves to a short private directory named after a hash of the
preferred one (deterministic, so clients find it too); the daemon also records the endpoint it
actually bound in ``state_dir/endpoint``. Directories are made private by
``ensure_private_dir`` when they are about to be used.
"""

# No ``from __future__ import annotations``: the settings' annotations carry their parsers
# (:mod:`snapd.settings`), read at import.
import contextlib
import errno
import os
import pwd
import stat
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, NamedTuple

from snapd import remote_config
from snapd.errors import ConfigError, PermissionRefused
from snapd.settings import (
    GiB,
    Group,
    MiB,
    Problems,
    Setting,
    abs_path,
    assemble,
    boolean,
    count,
    fs_names,
    level,
    patterns,
    read_config_file,
    read_environment,
    seconds,
    size,
    table,
    unknown_env,
)

#: sizeof(sockaddr_un.sun_path) - 1 on Linux: the longest ipc:// path libzmq can bind.
IPC_PATH_MAX = 107
SOCKET_NAME = "control.sock"
EVENTS_SOCKET_NAME = "events.sock"  # the PUB socket, beside the control socket (docs/protocol.md)
ENDPOINT_FILE = "endpoint"
LOCK_FILE = "snapd.lock"
#: The systemd user unit `snapd install-service` writes (and agent hooks start, when installed).
SERVICE_UNIT = "snapd.service"
HOOKS_DIR = "hooks"
DAY_NS = 86_400 * 10**9
#: SNAPD_* variables that are not settings: locations.
ENV_NAMES = frozenset({"SNAPD_HOME", "SNAPD_CONFIG"})
#: SNAPD_* variables that hold a secret: the remote repositories' password (docs/remote.md: read
#: by the client that sends it, and by the daemon for on-mark pushes). Known, so never warned
#: about; never copied anywhere (a service unit gets a password_file instead).
SECRET_ENV_NAMES = frozenset({"SNAPD_REMOTE_PASSWORD"})


# -- the settings (docs/operations.md, "Configuration"): each one's key, default and parser ---

#: The default ``precious`` list: files git is told to ignore because they must never be
#: committed, not because they can be made again — secrets, local settings, infrastructure
#: state, development databases (and a WAL database's log, which holds its latest writes).
#: Regenerable outputs stay out: they are never worth a rollback's bytes (docs/operations.md).
PRECIOUS: tuple[str, ...] = (
    ".env",
    ".env.*",
    ".envrc",
    ".dev.vars",
    "*.local",
    "local_settings.py",
    "secrets.toml",
    "*.tfstate",
    "*.tfstate.backup",
    "*.tfvars",
    "*.sqlite",
    "*.sqlite3",
    "*.sqlite-wal",
    "*.sqlite3-wal",
)


class CaptureSettings(NamedTuple):
    """What each workspace is given to capture with (:mod:`snapd.capture.workspace`). Its keys
    are top-level: ``size_cap``, not ``capture.size_cap``."""

    # files larger than this are skipped and listed
    size_cap: Annotated[int, Setting(size)] = 64 * MiB
    # gitignore syntax, on top of the workspace's own rules
    extra_ignore: Annotated[tuple[str, ...], Setting(patterns, env=False)] = ()
    # gitignore syntax: files git ignores that are captured anyway (secrets, dev databases)
    precious: Annotated[tuple[str, ...], Setting(patterns, env=False)] = PRECIOUS
    # a mark's wait for its cookie, then a rescan
    barrier_timeout_s: Annotated[float, Setting(seconds)] = 5.0
    # inotify watches per workspace; beyond: scan at marks
    watch_limit: Annotated[int | None, Setting(count)] = None
    # more file system types to treat as event-less
    scan_fs_types: Annotated[tuple[str, ...], Setting(fs_names, env=False)] = ()


class Retention(NamedTuple):
    """How much history is kept per workspace before the oldest unpinned marks are evicted
    (the policy: :mod:`snapd.store.retention`; the sweep: :mod:`snapd.store.gc`)."""

    max_age_days: Annotated[float, Setting(seconds)] = 14.0
    max_marks: Annotated[int, Setting(count)] = 2000
    budget_bytes: Annotated[int, Setting(size)] = 5 * GiB
    # GC never deletes an object younger than this
    grace_s: Annotated[float, Setting(seconds)] = 900.0

    @property
    def max_age_ns(self) -> int:
        return int(self.max_age_days * DAY_NS)


class Locations(NamedTuple):
    """Every path snapd uses. ``state_dir`` holds the lock and endpoint files and is the data
    directory itself: the lock must guard the store, whatever runtime directory is in use."""

    home: Path | None
    state_dir: Path
    data_dir: Path
    runtime_dir: Path
    config_file: Path

    @property
    def store_dir(self) -> Path:
        return self.data_dir / "store"

    @property
    def socket_path(self) -> Path:
        return self.runtime_dir / SOCKET_NAME

    @property
    def endpoint(self) -> str:
        return f"ipc://{self.socket_path}"

    @property
    def endpoint_file(self) -> Path:
        return self.state_dir / ENDPOINT_FILE

    @property
    def lock_file(self) -> Path:
        return self.state_dir / LOCK_FILE

    @property
    def hooks_dir(self) -> Path:
        """Where ``snapctl hook`` records each agent integration's last call and failures."""
        return self.state_dir / HOOKS_DIR

    @property
    def own_dirs(self) -> tuple[Path, ...]:
        """snapd's own directories: never inside a workspace, nor holding one."""
        return tuple(dict.fromkeys((self.state_dir, self.data_dir, self.runtime_dir, self.store_dir)))


class Config(NamedTuple):
    """The whole configuration of one daemon or client process: where things are, and every
    setting (top-level ones here, the others in their groups)."""

    locations: Locations
    log_level: Annotated[str, Setting(level)] = "info"
    log_file: Annotated[Path | None, Setting(abs_path)] = None
    request_max_bytes: Annotated[int, Setting(size)] = 1 * MiB
    # None: each command's own deadline
    client_timeout_s: Annotated[float | None, Setting(seconds)] = None
    # how often the daemon applies retention and GC
    gc_interval_s: Annotated[float, Setting(seconds)] = 3600.0
    # an agent hook starts the daemon when none is running
    auto_start: Annotated[bool, Setting(boolean)] = True
    # events a slow subscriber may fall behind before losing some
    events_queue: Annotated[int, Setting(count)] = 10_000
    capture: Annotated[CaptureSettings, Group()] = CaptureSettings()
    retention: Annotated[Retention, Group("retention")] = Retention()
    warnings: tuple[str, ...] = ()  # settings ignored (lenient load) and unknown SNAPD_* names
    # the [remotes.NAME] tables, checked (snapd.remote_config): name -> key -> value
    remotes: remote_config.Remotes = {}

    @property
    def endpoint(self) -> str:
        return self.locations.endpoint


#: Every setting by key (``size_cap``, ``retention.max_marks``...), derived from the fields above.
SETTINGS = table(Config)


def parse_setting(key: str, raw: Any) -> Any:
    """The value of setting ``key`` given as ``raw``; ValueError saying what it must be."""
    return SETTINGS[key].parse(raw)


def service_environment(env: Mapping[str, str]) -> dict[str, str]:
    """The variables of ``env`` that decide which store, config file and settings a daemon
    uses: what a service started elsewhere (systemd) must be given to match this shell."""
    names = ENV_NAMES | {k.env_name for k in SETTINGS.values() if k.env}
    names |= {"XDG_DATA_HOME", "XDG_CONFIG_HOME"}
    return {k: v for k, v in env.items() if k in names and v}


def user_unit_dirs(env: Mapping[str, str]) -> tuple[Path, ...]:
    """Where ``snapd install-service`` writes the systemd user unit: this shell's
    ``$XDG_CONFIG_HOME/systemd/user``, else ``~/.config/systemd/user`` — where a user manager
    whose own environment has no ``XDG_CONFIG_HOME`` reads units (the usual case)."""
    home = Path(env.get("HOME") or os.path.expanduser("~"))
    own = _xdg(env, "XDG_CONFIG_HOME", home, ".config") / "systemd" / "user"
    return tuple(dict.fromkeys((own, home / ".config" / "systemd" / "user")))


# -- locations ------------------------------------------------------------------------------


def _xdg(env: Mapping[str, str], name: str, home: Path, default: str) -> Path:
    """The XDG spec says relative values are invalid and must be ignored."""
    value = env.get(name, "")
    return Path(value) if value and os.path.isabs(value) else home / default


def _short_socket_dir(preferred: Path, uid: int, tmp_base: Path) -> Path:
    import hashlib  # deferred: only a socket path too long to bind needs it

    digest = hashlib.sha256(os.fsencode(preferred)).hexdigest()[:12]
    return tmp_base / f"snapd-{uid}-{digest}"


def resolve_locations(
    env: Mapping[str, str],
    snapd_home: str | None,
    config_file: str | None,
    uid: int,
    tmp_base: Path,
) -> Locations:
    """Compute every path from the environment, without touching the file system."""
    if snapd_home is not None:
        if not os.path.isabs(snapd_home):
            # Client and daemon usually run in different directories.
            raise ConfigError(f"SNAPD_HOME must be an absolute path, got {snapd_home!r}")
        root = Path(snapd_home)
        state = data = root
        runtime = root / "run"
        cfg = root / "config.toml"
    else:
        home = Path(env.get("HOME") or pwd.getpwuid(uid).pw_dir)
        data = state = _xdg(env, "XDG_DATA_HOME", home, ".local/share") / "snapd"
        cfg = _xdg(env, "XDG_CONFIG_HOME", home, ".config") / "snapd" / "config.toml"
        xdg_runtime = env.get("XDG_RUNTIME_DIR", "")
        if xdg_runtime and os.path.isabs(xdg_runtime):
            runtime = Path(xdg_runtime) / "snapd"
        else:
            runtime = tmp_base / f"snapd-{uid}"
    if len(os.fsencode(runtime / SOCKET_NAME)) > IPC_PATH_MAX:
        runtime = _short_socket_dir(runtime, uid, tmp_base)
    if config_file is not None:
        cfg = _abs_path_or_error(config_file, "SNAPD_CONFIG / --config")
    return Locations(Path(snapd_home) if snapd_home else None, state, data, runtime, cfg)


def _config_file_exists(path: Path) -> bool:
    """Whether the default config file is there; a directory above it that cannot be entered
    is said as such (``Path.exists`` raises, with a traceback, only for that)."""
    try:
        return path.exists()
    except OSError as e:
        raise unusable_dir(path.parent, e) from None


def _abs_path_or_error(value: str, source: str) -> Path:
    if not os.path.isabs(value):
        raise ConfigError(f"{source} must be an absolute path, got {value!r}")
    return Path(value)


def load_config(
    env: Mapping[str, str],
    overrides: Mapping[str, Any] | None = None,
    *,
    uid: int | None = None,
    tmp_base: Path = Path("/tmp"),
    lenient: bool = False,
) -> Config:
    """Build the configuration: defaults < config file < ``SNAPD_*`` < ``overrides``.

    ``overrides`` uses the dotted setting names (``"retention.max_marks"``) plus ``"home"``
    and ``"config_file"``, which take precedence over ``SNAPD_HOME`` and ``SNAPD_CONFIG``.
    ``uid`` and ``tmp_base`` exist so tests can exercise the ``/tmp`` fallback elsewhere.
    ``lenient``: a bad setting keeps its lower layer's value and becomes a warning (clients;
    see the module docstring) instead of raising ConfigError.
    """
    overrides = dict(overrides or {})
    uid = os.getuid() if uid is None else uid
    home = overrides.pop("home", None) or env.get("SNAPD_HOME") or None
    explicit_cfg = overrides.pop("config_file", None) or env.get("SNAPD_CONFIG") or None
    locations = resolve_locations(
        env,
        str(home) if home else None,
        str(explicit_cfg) if explicit_cfg else None,
        uid,
        tmp_base,
    )

    problems = Problems(SETTINGS, lenient)
    values: dict[str, Any] = {}
    remotes: dict[str, dict[str, str]] = {}
    if explicit_cfg is not None or _config_file_exists(locations.config_file):
        values.update(read_config_file(locations.config_file, problems, frozenset({remote_config.TABLE})))
        if remote_config.TABLE in values:
            where = f"config file {locations.config_file}"
            remotes = remote_config.parse(values.pop(remote_config.TABLE), where, problems)
    values.update(read_environment(env, problems))
    for key, raw in overrides.items():
        if key not in SETTINGS:
            raise ConfigError(f"unknown setting '{key}'", key=key)
        problems.set(values, key, raw, "command-line option")
    warnings = (*problems.warnings, *unknown_env(env, SETTINGS, ENV_NAMES | SECRET_ENV_NAMES))
    return assemble(Config, SETTINGS, values, locations=locations, warnings=warnings, remotes=remotes)


# -- private directories and the endpoint file ------------------------------------------------


def unusable_dir(path: Path, err: OSError | str) -> PermissionRefused:
    """The one error for a directory of snapd's own it cannot use (not a directory, not
    writable, on a read-only file system, not enterable): a user sees one line naming it."""
    why = err if isinstance(err, str) else err.strerror or str(err)
    if isinstance(err, OSError) and err.errno in (errno.ENOTDIR, errno.EEXIST):
        why = "it is not a directory (or a path above it is a file)"
    return PermissionRefused(
        f"{path} cannot be used as a private directory: {why} "
        "(make it a directory of yours, or set SNAPD_HOME or XDG_RUNTIME_DIR elsewhere)",
        path=str(path),
    )


def ensure_private_dir(path: Path, *, uid: int | None = None) -> Path:
    """Create ``path`` (and missing parents) as a directory only its owner can enter and write.

    The control socket and the store rely on this directory for access control, so an
    existing one is accepted only if it is a real directory (not a symlink someone planted in
    ``/tmp``) owned by ``uid``; a mode that is too open on our own directory is tightened.
    The checks run on an ``O_NOFOLLOW`` descriptor so the path cannot be swapped in between.
    Anything that makes it unusable (a file in its place, a parent not ours to write, a
    read-only file system) is :func:`unusable_dir`, before anything is written in it.
    """
    uid = os.getuid() if uid is None else uid
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        os.mkdir(path, 0o700)
    except FileExistsError:
        pass
    except OSError as e:
        raise unusable_dir(path, e) from None
    if os.path.islink(path):
        raise PermissionRefused(
            f"{path} is a symbolic link; refusing to use it as a private directory "
            "(remove it, or set XDG_RUNTIME_DIR or SNAPD_HOME)",
            path=str(path),
        )
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as e:
        raise unusable_dir(path, e) from None
    try:
        st = os.fstat(fd)
        if st.st_uid != uid:
            raise PermissionRefused(
                f"{path} belongs to uid {st.st_uid}, not to uid {uid}; refusing to use it "
                "(remove it, or set XDG_RUNTIME_DIR or SNAPD_HOME)",
                path=str(path),
            )
        if os.fstatvfs(fd).f_flag & os.ST_RDONLY:
            raise unusable_dir(path, "it is on a read-only file system")
        if stat.S_IMODE(st.st_mode) != 0o700:
            os.fchmod(fd, 0o700)
    except OSError as e:
        raise unusable_dir(path, e) from None
    finally:
        os.close(fd)
    return path


def socket_identity(path: Path) -> tuple[int, int] | None:
    """(device, inode) of the socket file at ``path``, or None if there is none."""
    try:
        st = os.lstat(path)
    except OSError:
        return None
    return (st.st_dev, st.st_ino) if stat.S_ISSOCK(st.st_mode) else None


def remove_socket(path: Path, bound: tuple[int, int] | None) -> None:
    """A clean stop leaves nothing behind: libzmq keeps an ipc socket's file, and the short
    private directory made for a long path (``/tmp/snapd-<uid>-<h>/``) would pile up in /tmp.
    Only the socket this daemon bound goes (``bound``: its :func:`socket_identity` right after
    the bind): daemons of two stores may compute one socket path (one runtime directory, two
    data directories), and the instance lock guards a store, not a path. Its directory goes
    once the last socket in it (control or events) is gone; one that holds anything else is
    left (``rmdir`` removes only an empty directory)."""
    with contextlib.suppress(OSError):
        if bound is not None and socket_identity(path) == bound:
            path.unlink()
    with contextlib.suppress(OSError):
        path.parent.rmdir()


def write_endpoint_file(state_dir: Path, endpoint: str) -> Path:
    """Record the bound endpoint atomically (temp file + fsync + rename) so a client never
    reads half of it, not even after a power cut (a rename can reach the disk before the
    bytes it names: the file would read back empty until the daemon starts again)."""
    ensure_private_dir(state_dir)
    target = state_dir / ENDPOINT_FILE
    tmp = state_dir / f".{ENDPOINT_FILE}.{os.getpid()}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        os.write(fd, endpoint.encode() + b"\n")
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, target)
    return target


def read_endpoint_file(state_dir: Path) -> str | None:
    """The endpoint a running (or crashed) daemon recorded, or None if there is none."""
    path = state_dir / ENDPOINT_FILE
    try:
        text = path.read_text(encoding="utf-8").strip()
    except FileNotFoundError:
        return None
    except (NotADirectoryError, PermissionError) as e:  # the directory itself: no daemon can be there
        raise unusable_dir(state_dir, e) from None
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(f"endpoint file {path} cannot be read: {e}") from None
    if not text.startswith("ipc://"):
        raise ConfigError(f"endpoint file {path} does not hold an ipc:// endpoint: {text!r}")
    return text


def resolve_endpoint(config: Config) -> str:
    """Where a client should connect: the endpoint the daemon recorded, else the computed one."""
    return read_endpoint_file(config.locations.state_dir) or config.endpoint
