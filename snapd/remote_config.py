"""The ``[remotes.NAME]`` tables of ``config.toml``: where each remote repository is and how it
is reached (docs/operations.md, "Remotes"; docs/remote.md).

::

    [remotes.backup]
    url = "s3://my-bucket/snapd"        # or file:///mnt/backup/snapd
    endpoint = "http://127.0.0.1:9000"  # a server other than AWS (MinIO, Garage, R2...)
    region = "us-east-1"
    profile = "snapd"                   # of ~/.aws/credentials
    password_file = "/home/me/.config/snapd/backup.pass"
    push = "on-mark"                    # or "manual" (the default)

Read with the other settings (:func:`snapd.config.load_config`): strictly by the daemon (a bad
table stops ``snapd start`` with an error naming the file and the key), leniently by a client
(the table is left out, with a warning). Only the shape is checked here; the URL's own rules are
:func:`snapd.remote.spec.parse_url`'s, which ``remote add`` applies before anything is written
(this module stays free of ``snapd.remote``: every client loads it).

``remote add`` and ``remote remove`` edit the file with tomlkit (:func:`add_table`,
:func:`remove_table`), which keeps the user's comments and layout; the file is replaced
atomically. No password is ever written here: only the path of a file holding one.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, MutableMapping
from pathlib import Path
from typing import Any

from snapd.errors import ConfigError, NotFound, UsageError
from snapd.settings import Problems

TABLE = "remotes"
#: Each key of a remote's table, and what its value must be (every one is a string).
KEYS: dict[str, str] = {
    "url": "a URL, s3://BUCKET/PREFIX or file:///DIR",
    "endpoint": "an http:// or https:// URL",
    "region": "a region name",
    "profile": "a profile name of the shared credentials file",
    "password_file": "an absolute path",
    "push": 'one of "manual", "on-mark"',
}
PUSH_MODES = ("manual", "on-mark")
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
#: What ``remote add`` writes above a new table (the password is never in the file).
LOST_PASSWORD = (
    "the repository password is not stored here: a lost password is an unrecoverable loss "
    "of everything in the repository"
)

Remotes = Mapping[str, Mapping[str, str]]


def check_name(name: str) -> str:
    """A remote's name: 1-64 letters, digits, ``_ . -``, starting with a letter or digit."""
    if not _NAME.fullmatch(name):
        raise UsageError(
            f"{name!r} is not a remote name: 1-64 letters, digits, '_', '.' or '-', starting with a "
            "letter or digit"
        )
    return name


def _value_problem(key: str, value: Any) -> str | None:
    """Why ``value`` cannot be the ``key`` of a remote's table, or None."""
    if not isinstance(value, str) or not value:
        return KEYS[key]
    if key == "url" and not value.startswith(("s3://", "file://")):
        return KEYS[key]
    if key == "endpoint" and not value.startswith(("http://", "https://")):
        return KEYS[key]
    if key == "password_file" and not os.path.isabs(value):
        return KEYS[key]
    if key == "push" and value not in PUSH_MODES:
        return KEYS[key]
    return None


def check_table(name: str, table: Any, where: str) -> dict[str, str]:
    """One remote's table as the daemon uses it; :class:`ConfigError` naming ``where`` (the
    file, or the request) and the key for anything else."""
    what, key = f"{where}: {TABLE}.{name}", f"{TABLE}.{name}"
    if not _NAME.fullmatch(name):
        raise ConfigError(f"{what}: not a remote name (letters, digits, '_', '.', '-')", key=key)
    if not isinstance(table, Mapping):
        raise ConfigError(f"{what} must be a table ([{TABLE}.{name}]), got {table!r}", key=key)
    for k, value in table.items():
        if k not in KEYS:
            known = ", ".join(KEYS)
            raise ConfigError(f"{what}: unknown key '{k}' (known: {known})", key=f"{key}.{k}")
        why = _value_problem(k, value)
        if why is not None:
            raise ConfigError(f"{what}.{k} must be {why}, got {value!r}", key=f"{key}.{k}")
    if "url" not in table:
        raise ConfigError(f"{what} has no url (s3://BUCKET/PREFIX or file:///DIR)", key=f"{key}.url")
    return {k: str(v) for k, v in table.items()}


def parse(raw: Any, where: str, problems: Problems) -> dict[str, dict[str, str]]:
    """The ``remotes`` value of a config file: every table checked (:func:`check_table`); a bad
    one is raised (daemon) or left out with a warning (client), as ``problems`` says."""
    if not isinstance(raw, Mapping):
        problems.report(ConfigError(f"{where}: '{TABLE}' must hold [{TABLE}.NAME] tables", key=TABLE))
        return {}
    out: dict[str, dict[str, str]] = {}
    for name, table in raw.items():
        try:
            out[name] = check_table(name, table, where)
        except ConfigError as e:
            problems.report(e)
    return out


# -- editing config.toml ----------------------------------------------------------------------


def _load(path: Path) -> Any:
    import tomlkit  # deferred: only remote add/remove edit the file

    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        text = ""
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(f"config file {path} cannot be read: {e}", file=str(path)) from None
    try:
        return tomlkit.parse(text)
    except tomlkit.exceptions.ParseError as e:
        raise ConfigError(f"config file {path}: not valid TOML: {e}", file=str(path)) from None


def _save(path: Path, doc: Any) -> None:
    """Replace the file atomically (temp file, fsync, rename), keeping its mode."""
    import tomlkit

    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        mode = path.stat().st_mode & 0o7777
    except FileNotFoundError:
        mode = 0o600
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, mode)
        try:
            os.write(fd, tomlkit.dumps(doc).encode())
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except OSError as e:
        tmp.unlink(missing_ok=True)
        why = e.strerror or str(e)
        raise ConfigError(f"config file {path} cannot be written: {why}", file=str(path)) from None


def add_table(path: Path, name: str, fields: Mapping[str, str]) -> None:
    """Write ``[remotes.NAME]`` with ``fields`` into ``path`` (made if absent), keeping the
    rest of the file as it is. A remote of that name already there is refused."""
    import tomlkit

    check_table(check_name(name), fields, "remote add")
    doc = _load(path)
    remotes = doc.get(TABLE)
    if remotes is None:
        remotes = tomlkit.table(is_super_table=True)
        doc[TABLE] = remotes
    elif not isinstance(remotes, Mapping):
        raise ConfigError(f"config file {path}: '{TABLE}' is not a table", file=str(path))
    if name in remotes:
        raise UsageError(f"a remote named {name!r} is in {path} already (`snapctl remote remove {name}` "
                         "first)")
    table = tomlkit.table()
    table.add(tomlkit.comment(LOST_PASSWORD))
    for key in KEYS:
        if key in fields:
            table[key] = fields[key]
    remotes[name] = table
    _save(path, doc)


def remove_table(path: Path, name: str) -> None:
    """Delete ``[remotes.NAME]`` from ``path``, keeping the rest of the file as it is."""
    doc = _load(path)
    remotes = doc.get(TABLE)
    if not isinstance(remotes, MutableMapping) or name not in remotes:
        raise NotFound(f"no remote named {name!r} in {path}")
    del remotes[name]
    if not remotes:
        del doc[TABLE]
    _save(path, doc)
