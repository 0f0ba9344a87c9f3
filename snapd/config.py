"""Configuration: where snapd keeps things, and the settings that tune it.

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

from __future__ import annotations

import contextlib
import hashlib
import os
import pwd
import re
import stat
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from snapd.errors import ConfigError, PermissionRefused

MiB = 1 << 20
GiB = 1 << 30
#: sizeof(sockaddr_un.sun_path) - 1 on Linux: the longest ipc:// path libzmq can bind.
IPC_PATH_MAX = 107
SOCKET_NAME = "control.sock"
EVENTS_SOCKET_NAME = "events.sock"  # the PUB socket, beside the control socket (docs/protocol.md)
ENDPOINT_FILE = "endpoint"
LOCK_FILE = "snapd.lock"
LOG_LEVELS = ("debug", "info", "warning", "error", "critical")
#: The systemd user unit `snapd install-service` writes (and agent hooks start, when installed).
SERVICE_UNIT = "snapd.service"
HOOKS_DIR = "hooks"


@dataclass(frozen=True)
class Retention:
    """How much history is kept per workspace before the oldest unpinned marks are evicted."""

    max_age_days: float = 14.0
    max_marks: int = 2000
    budget_bytes: int = 5 * GiB
    grace_s: float = 900.0  # GC never deletes an object younger than this


@dataclass(frozen=True)
class Locations:
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


@dataclass(frozen=True)
class Config:
    """The whole configuration of one daemon or client process."""

    locations: Locations
    log_level: str = "info"
    log_file: Path | None = None
    retention: Retention = field(default_factory=Retention)
    size_cap: int = 64 * MiB
    extra_ignore: tuple[str, ...] = ()
    barrier_timeout_s: float = 5.0
    request_max_bytes: int = 1 * MiB
    client_timeout_s: float | None = None  # None: each command's own deadline (see snapctl --help)
    gc_interval_s: float = 3600.0  # how often the daemon applies retention and GC
    watch_limit: int | None = None  # inotify watches per workspace; beyond: scan at every mark
    scan_fs_types: tuple[str, ...] = ()  # more file system types to treat as event-less
    auto_start: bool = True  # an agent hook starts the daemon when none is running
    events_queue: int = 10_000  # events a slow subscriber may fall behind before it loses some
    warnings: tuple[str, ...] = ()  # settings ignored (lenient load) and unknown SNAPD_* names

    @property
    def endpoint(self) -> str:
        return self.locations.endpoint


# -- settings table -------------------------------------------------------------------------

_SIZE_RE = re.compile(r"^\s*(\d+)\s*(B|KiB|MiB|GiB|TiB)?\s*$")
_UNITS = {None: 1, "B": 1, "KiB": 1 << 10, "MiB": MiB, "GiB": GiB, "TiB": 1 << 40}


def _size(v: Any) -> int:
    """Byte counts: an int, or a string such as ``"64 MiB"`` (binary units only: no guessing
    whether "MB" means 10**6 or 2**20)."""
    if isinstance(v, str) and (m := _SIZE_RE.match(v)):
        v = int(m.group(1)) * _UNITS[m.group(2)]
    if isinstance(v, int) and not isinstance(v, bool) and v > 0:
        return v
    raise ValueError('a positive size in bytes (e.g. 67108864 or "64 MiB")')


def _count(v: Any) -> int:
    if isinstance(v, str) and v.strip().isdigit():
        v = int(v)
    if isinstance(v, int) and not isinstance(v, bool) and v > 0:
        return v
    raise ValueError("a positive integer")


def _seconds(v: Any) -> float:
    if isinstance(v, str):
        try:
            v = float(v)
        except ValueError:
            raise ValueError("a positive number") from None
    if isinstance(v, int | float) and not isinstance(v, bool) and 0 < v < float("inf"):
        return float(v)
    raise ValueError("a positive number")


def _level(v: Any) -> str:
    if isinstance(v, str) and v.lower() in LOG_LEVELS:
        return v.lower()
    raise ValueError("one of " + ", ".join(LOG_LEVELS))


def _bool(v: Any) -> bool:
    if isinstance(v, bool):
        return v
    if isinstance(v, str) and v.strip().lower() in ("true", "1", "yes", "false", "0", "no"):
        return v.strip().lower() in ("true", "1", "yes")
    raise ValueError("true or false")


def _abs_path(v: Any) -> Path:
    if isinstance(v, str | Path) and Path(v).is_absolute():
        return Path(v)
    raise ValueError("an absolute path")


def _patterns(v: Any) -> tuple[str, ...]:
    if isinstance(v, list | tuple) and all(isinstance(p, str) for p in v):
        return tuple(v)
    raise ValueError("a list of gitignore patterns (strings)")


def _names(v: Any) -> tuple[str, ...]:
    if isinstance(v, list | tuple) and all(isinstance(p, str) and p for p in v):
        return tuple(v)
    raise ValueError('a list of file system type names such as ["nfs4"]')


# dotted name -> parser; the TOML table ``[retention]`` holds the ``retention.*`` keys and the
# environment variable is SNAPD_ + the name upper-cased with dots as underscores. Lists have
# no environment form: any separator would be a legal pattern character.
_SETTINGS: dict[str, Callable[[Any], Any]] = {
    "log_level": _level,
    "log_file": _abs_path,
    "size_cap": _size,
    "extra_ignore": _patterns,
    "barrier_timeout_s": _seconds,
    "request_max_bytes": _size,
    "client_timeout_s": _seconds,
    "gc_interval_s": _seconds,
    "watch_limit": _count,
    "scan_fs_types": _names,
    "auto_start": _bool,
    "events_queue": _count,
    "retention.max_age_days": _seconds,
    "retention.max_marks": _count,
    "retention.budget_bytes": _size,
    "retention.grace_s": _seconds,
}
_NO_ENV = {"extra_ignore", "scan_fs_types"}
#: SNAPD_* variables that are not settings: locations.
ENV_NAMES = frozenset({"SNAPD_HOME", "SNAPD_CONFIG"})


def service_environment(env: Mapping[str, str]) -> dict[str, str]:
    """The variables of ``env`` that decide which store, config file and settings a daemon
    uses: what a service started elsewhere (systemd) must be given to match this shell."""
    names = set(ENV_NAMES)
    names |= {_env_name(k) for k in _SETTINGS if k not in _NO_ENV} | {"XDG_DATA_HOME", "XDG_CONFIG_HOME"}
    return {k: v for k, v in env.items() if k in names and v}


def parse_setting(key: str, raw: Any) -> Any:
    """The value of setting ``key`` given as ``raw``; ValueError saying what it must be."""
    return _SETTINGS[key](raw)


def _env_name(key: str) -> str:
    return "SNAPD_" + key.upper().replace(".", "_")


class _Problems:
    """Where a bad setting goes: raised (the daemon), or kept as a warning (a client)."""

    def __init__(self, lenient: bool) -> None:
        self.lenient = lenient
        self.warnings: list[str] = []

    def report(self, error: ConfigError) -> None:
        if not self.lenient:
            raise error
        self.warnings.append(f"{error.message} (ignored here; `snapd start` refuses it)")

    def set(self, values: dict[str, Any], key: str, raw: Any, source: str) -> None:
        try:
            values[key] = _SETTINGS[key](raw)
        except ValueError as e:
            self.report(ConfigError(f"{source}: '{key}' must be {e}, got {raw!r}", key=key))


def _read_config_file(path: Path, problems: _Problems) -> dict[str, Any]:
    """Flatten the TOML file into dotted keys, rejecting anything we do not know: a typo in a
    retention key must not silently keep the default and evict history early."""
    import tomllib  # deferred: most client runs have no config file to parse

    where = f"config file {path}"
    try:
        with open(path, "rb") as f:
            data = tomllib.load(f)
    except tomllib.TOMLDecodeError as e:
        problems.report(ConfigError(f"{where}: not valid TOML: {e}", file=str(path)))
        return {}
    except OSError as e:
        problems.report(ConfigError(f"{where}: cannot be read: {e.strerror}", file=str(path)))
        return {}
    flat: dict[str, Any] = {}
    for key, value in data.items():
        if key == "retention" and isinstance(value, dict):
            flat.update({f"retention.{k}": v for k, v in value.items()})
        else:
            flat[key] = value
    out: dict[str, Any] = {}
    for key, value in flat.items():
        if key not in _SETTINGS:
            known = ", ".join(sorted(_SETTINGS))
            problems.report(ConfigError(f"{where}: unknown setting '{key}' (known: {known})", key=key))
            continue
        problems.set(out, key, value, where)
    return out


def _unknown_env(env: Mapping[str, str]) -> list[str]:
    """``SNAPD_*`` names that mean nothing to snapd, each with the nearest real name."""
    import difflib  # deferred: only a misspelled variable needs it

    known = sorted(ENV_NAMES | {_env_name(k) for k in _SETTINGS if k not in _NO_ENV})
    out = []
    for name in sorted(n for n in env if n.startswith("SNAPD_") and n not in known):
        if name in {_env_name(k) for k in _NO_ENV}:
            out.append(f"environment variable {name} is ignored: that setting has no environment "
                       "form (lists go in config.toml)")
            continue
        near = difflib.get_close_matches(name, known, n=1)
        hint = f"did you mean {near[0]}?" if near else "known: " + ", ".join(known)
        out.append(f"environment variable {name} is not a snapd setting and is ignored ({hint})")
    return out


# -- locations ------------------------------------------------------------------------------


def _xdg(env: Mapping[str, str], name: str, home: Path, default: str) -> Path:
    """The XDG spec says relative values are invalid and must be ignored."""
    value = env.get(name, "")
    return Path(value) if value and os.path.isabs(value) else home / default


def _short_socket_dir(preferred: Path, uid: int, tmp_base: Path) -> Path:
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

    problems = _Problems(lenient)
    values: dict[str, Any] = {}
    if explicit_cfg is not None or locations.config_file.exists():
        values.update(_read_config_file(locations.config_file, problems))
    for key in _SETTINGS:
        name = _env_name(key)
        if key not in _NO_ENV and env.get(name, "") != "":
            problems.set(values, key, env[name], f"environment variable {name}")
    for key, raw in overrides.items():
        if key not in _SETTINGS:
            raise ConfigError(f"unknown setting '{key}'", key=key)
        problems.set(values, key, raw, "command-line option")

    retention = Retention(**{k.split(".", 1)[1]: v for k, v in values.items() if k.startswith("retention.")})
    flat = {k: v for k, v in values.items() if not k.startswith("retention.")}
    warnings = (*problems.warnings, *_unknown_env(env))
    return replace(Config(locations), retention=retention, warnings=warnings, **flat)


# -- private directories and the endpoint file ------------------------------------------------


def ensure_private_dir(path: Path, *, uid: int | None = None) -> Path:
    """Create ``path`` (and missing parents) as a directory only its owner can enter.

    The control socket and the store rely on this directory for access control, so an
    existing one is accepted only if it is a real directory (not a symlink someone planted in
    ``/tmp``) owned by ``uid``; a mode that is too open on our own directory is tightened.
    The checks run on an ``O_NOFOLLOW`` descriptor so the path cannot be swapped in between.
    """
    uid = os.getuid() if uid is None else uid
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        pass
    if os.path.islink(path):
        raise PermissionRefused(
            f"{path} is a symbolic link; refusing to use it as a private directory "
            "(remove it, or set XDG_RUNTIME_DIR or SNAPD_HOME)",
            path=str(path),
        )
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as e:
        raise PermissionRefused(
            f"{path} cannot be used as a private directory: {e.strerror}", path=str(path)
        ) from None
    try:
        st = os.fstat(fd)
        if st.st_uid != uid:
            raise PermissionRefused(
                f"{path} belongs to uid {st.st_uid}, not to uid {uid}; refusing to use it "
                "(remove it, or set XDG_RUNTIME_DIR or SNAPD_HOME)",
                path=str(path),
            )
        if stat.S_IMODE(st.st_mode) != 0o700:
            os.fchmod(fd, 0o700)
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
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(f"endpoint file {path} cannot be read: {e}") from None
    if not text.startswith("ipc://"):
        raise ConfigError(f"endpoint file {path} does not hold an ipc:// endpoint: {text!r}")
    return text


def resolve_endpoint(config: Config) -> str:
    """Where a client should connect: the endpoint the daemon recorded, else the computed one."""
    return read_endpoint_file(config.locations.state_dir) or config.endpoint
