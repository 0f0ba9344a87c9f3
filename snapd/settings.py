"""How a setting is declared, parsed, and read from the config file and the environment.

Each setting is one field of a ``NamedTuple`` in :mod:`snapd.config`: its default is the
field's, and its annotation carries its parser, ``Annotated[int, Setting(size)] = 64 * MiB``;
a group of them (``Config.capture``, ``Config.retention``) is a field annotated with
:class:`Group`. Everything else is derived from those fields by :func:`table`, so a setting's
name, default and parser are written once:

- its key: the field's name, or ``PREFIX.NAME`` for a field of a prefixed group (the TOML
  table ``[retention]`` holds the ``retention.*`` keys); a group without a prefix puts its
  keys at the top level (``size_cap``, not ``capture.size_cap``: the user-facing names of
  docs/operations.md);
- its environment variable: ``SNAPD_`` + the key upper-cased, dots as underscores. Lists have
  no environment form (``env=False``): any separator would be a legal pattern character.

(NamedTuples, not dataclasses: every agent hook and snapctl command loads the configuration,
and ``dataclasses`` costs them milliseconds, with ``inspect``, ``ast`` and ``dis``, at import.)

Bad values raise ValueError saying what the value must be; :class:`Problems` decides whether
that stops the process (the daemon) or becomes a warning (a client).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any, NamedTuple, TypeVar

from snapd.errors import ConfigError

T = TypeVar("T")
MiB = 1 << 20
GiB = 1 << 30
LOG_LEVELS = ("debug", "info", "warning", "error", "critical")

# -- parsers: raw value (TOML or environment string) -> value, or ValueError ----------------

_SIZE_RE = re.compile(r"^\s*(\d+)\s*(B|KiB|MiB|GiB|TiB)?\s*$")
_UNITS = {None: 1, "B": 1, "KiB": 1 << 10, "MiB": MiB, "GiB": GiB, "TiB": 1 << 40}


def size(v: Any) -> int:
    """Byte counts: an int, or a string such as ``"64 MiB"`` (binary units only: no guessing
    whether "MB" means 10**6 or 2**20)."""
    if isinstance(v, str) and (m := _SIZE_RE.match(v)):
        v = int(m.group(1)) * _UNITS[m.group(2)]
    if isinstance(v, int) and not isinstance(v, bool) and v > 0:
        return v
    raise ValueError('a positive size in bytes (e.g. 67108864 or "64 MiB")')


def count(v: Any) -> int:
    if isinstance(v, str) and v.strip().isdigit():
        v = int(v)
    if isinstance(v, int) and not isinstance(v, bool) and v > 0:
        return v
    raise ValueError("a positive integer")


def seconds(v: Any) -> float:
    if isinstance(v, str):
        try:
            v = float(v)
        except ValueError:
            raise ValueError("a positive number") from None
    if isinstance(v, int | float) and not isinstance(v, bool) and 0 < v < float("inf"):
        return float(v)
    raise ValueError("a positive number")


def level(v: Any) -> str:
    if isinstance(v, str) and v.lower() in LOG_LEVELS:
        return v.lower()
    raise ValueError("one of " + ", ".join(LOG_LEVELS))


def boolean(v: Any) -> bool:
    if isinstance(v, bool):
        return v
    if isinstance(v, str) and v.strip().lower() in ("true", "1", "yes", "false", "0", "no"):
        return v.strip().lower() in ("true", "1", "yes")
    raise ValueError("true or false")


def abs_path(v: Any) -> Path:
    if isinstance(v, str | Path) and Path(v).is_absolute():
        return Path(v)
    raise ValueError("an absolute path")


def patterns(v: Any) -> tuple[str, ...]:
    if isinstance(v, list | tuple) and all(isinstance(p, str) for p in v):
        return tuple(v)
    raise ValueError("a list of gitignore patterns (strings)")


def fs_names(v: Any) -> tuple[str, ...]:
    if isinstance(v, list | tuple) and all(isinstance(p, str) and p for p in v):
        return tuple(v)
    raise ValueError('a list of file system type names such as ["nfs4"]')


# -- declaring settings ---------------------------------------------------------------------


class Setting(NamedTuple):
    """A settings field's annotation: the parser of its raw values, whether it has a
    ``SNAPD_*`` form."""

    parse: Callable[[Any], Any]
    env: bool = True


class Group(NamedTuple):
    """A field holding a group of settings (a NamedTuple of :class:`Setting` fields); its keys
    are ``prefix.NAME``, or plain ``NAME`` without a prefix."""

    prefix: str = ""


def _specs(cls: Any) -> Iterator[tuple[str, Any, Setting | Group]]:
    """(name, annotated type, Setting or Group) of each field of ``cls`` that has one."""
    for name in cls._fields:
        hint = cls.__annotations__[name]
        for spec in getattr(hint, "__metadata__", ()):
            if isinstance(spec, Setting | Group):
                yield name, hint.__origin__, spec


class Key:
    """One setting as users name it, and where its value goes. (A plain class, not a
    dataclass: building one costs ~0.6 ms at import, and every agent hook imports this.)"""

    __slots__ = ("key", "holder", "name", "parse", "env")

    def __init__(
        self, key: str, holder: str | None, name: str, parse: Callable[[Any], Any], env: bool
    ) -> None:
        self.key = key  # "size_cap", "retention.max_marks"
        self.holder = holder  # the field of the group holding it ("retention"), None: top level
        self.name = name  # its field name
        self.parse = parse
        self.env = env  # has a SNAPD_* form

    @property
    def env_name(self) -> str:
        return "SNAPD_" + self.key.upper().replace(".", "_")


def table(cls: type[Any]) -> dict[str, Key]:
    """Every setting of ``cls`` (and of its groups) by key."""
    out: dict[str, Key] = {}
    for name, kind, spec in _specs(cls):
        if isinstance(spec, Setting):
            out[name] = Key(name, None, name, spec.parse, spec.env)
            continue
        prefix = spec.prefix + "." if spec.prefix else ""
        for inner, _, s in _specs(kind):
            assert isinstance(s, Setting), "groups hold settings, not groups"
            out[prefix + inner] = Key(prefix + inner, name, inner, s.parse, s.env)
    return out


def assemble(cls: type[T], keys: Mapping[str, Key], values: Mapping[str, Any], **rest: Any) -> T:
    """``cls`` built from parsed ``values`` (by key), each group from its own; ``rest`` are
    the fields that are not settings."""
    top: dict[str, Any] = dict(rest)
    groups: dict[str, dict[str, Any]] = {}
    for key, value in values.items():
        k = keys[key]
        if k.holder is None:
            top[k.name] = value
        else:
            groups.setdefault(k.holder, {})[k.name] = value
    for name, kind, spec in _specs(cls):
        if isinstance(spec, Group):
            top[name] = kind(**groups.get(name, {}))
    return cls(**top)


# -- reading them ---------------------------------------------------------------------------


class Problems:
    """Where a bad setting goes: raised (the daemon), or kept as a warning (a client)."""

    def __init__(self, keys: Mapping[str, Key], lenient: bool) -> None:
        self.keys = keys
        self.lenient = lenient
        self.warnings: list[str] = []

    def report(self, error: ConfigError) -> None:
        if not self.lenient:
            raise error
        self.warnings.append(f"{error.message} (ignored here; `snapd start` refuses it)")

    def set(self, values: dict[str, Any], key: str, raw: Any, source: str) -> None:
        try:
            values[key] = self.keys[key].parse(raw)
        except ValueError as e:
            self.report(ConfigError(f"{source}: '{key}' must be {e}, got {raw!r}", key=key))


def read_config_file(path: Path, problems: Problems, apart: frozenset[str] = frozenset()) -> dict[str, Any]:
    """Flatten the TOML file into dotted keys, rejecting anything we do not know: a typo in a
    retention key must not silently keep the default and evict history early. The top-level
    keys in ``apart`` (``remotes``: tables of tables) come back as they are, under their own
    name, for the caller to check."""
    import tomllib  # deferred: most client runs have no config file to parse

    where = f"config file {path}"
    try:
        with open(path, "rb") as f:
            data = tomllib.load(f)
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:  # TOML is UTF-8 text
        problems.report(ConfigError(f"{where}: not valid TOML: {e}", file=str(path)))
        return {}
    except OSError as e:
        problems.report(ConfigError(f"{where}: cannot be read: {e.strerror}", file=str(path)))
        return {}
    tables = {k.split(".", 1)[0] for k in problems.keys if "." in k}
    flat: dict[str, Any] = {}
    out: dict[str, Any] = {key: data.pop(key) for key in apart if key in data}
    for key, value in data.items():
        if key in tables and isinstance(value, dict):
            flat.update({f"{key}.{k}": v for k, v in value.items()})
        else:
            flat[key] = value
    for key, value in flat.items():
        if key not in problems.keys:
            known = ", ".join(sorted(problems.keys))
            problems.report(ConfigError(f"{where}: unknown setting '{key}' (known: {known})", key=key))
            continue
        problems.set(out, key, value, where)
    return out


def read_environment(env: Mapping[str, str], problems: Problems) -> dict[str, Any]:
    """The settings ``env`` sets (``SNAPD_*`` variables that are not empty)."""
    out: dict[str, Any] = {}
    for key, k in problems.keys.items():
        if k.env and env.get(k.env_name, "") != "":
            problems.set(out, key, env[k.env_name], f"environment variable {k.env_name}")
    return out


def unknown_env(env: Mapping[str, str], keys: Mapping[str, Key], others: frozenset[str]) -> list[str]:
    """``SNAPD_*`` names that mean nothing to snapd, each with the nearest real name
    (``others``: the variables that are not settings, such as ``SNAPD_HOME``)."""
    known = sorted(others | {k.env_name for k in keys.values() if k.env})
    listless = {k.env_name for k in keys.values() if not k.env}
    out = []
    for name in sorted(n for n in env if n.startswith("SNAPD_") and n not in known):
        import difflib  # deferred: only a misspelled variable needs it

        if name in listless:
            out.append(f"environment variable {name} is ignored: that setting has no environment "
                       "form (lists go in config.toml)")
            continue
        near = difflib.get_close_matches(name, known, n=1)
        hint = f"did you mean {near[0]}?" if near else "known: " + ", ".join(known)
        out.append(f"environment variable {name} is not a snapd setting and is ignored ({hint})")
    return out
