"""The small sealed records of a remote repository: mark records and the config.

A mark record (``marks/<name>``, aad ``b"mark"``) is what makes a mark exist remotely: it is
written last, once every object its tree needs is indexed. Its name is
``hmac-sha256(mac key, store_id + "/" + mark_id)``: the server learns nothing from it, and
the same mark pushed twice gets the same name (a push lists ``marks/`` and never rewrites
one). Decoding checks the name against the record's own store and mark, so a record copied or
moved to another mark's name is refused. The workspace travels as a wire path
(``snapd.paths.encode_path``: UTF-8, or ``{"b64"}`` for other bytes); labels, messages,
agents and paths are plaintext only inside the seal.

The config (``config``, aad ``b"config"``) names the repository. Every field is read strictly
(``fields.py``): any missing or mistyped field refuses the record as ``RemoteCorrupt`` naming it.
"""

from __future__ import annotations

import re
from typing import Any, Final, NamedTuple

from snapd.errors import BadRequest, CorruptObject
from snapd.paths import decode_path, encode_path
from snapd.remote.crypto import MasterKey, corrupt, name_mac, open_sealed, seal
from snapd.remote.fields import Fields, dump_json, load_object
from snapd.store import objects, records, refs

VERSION: Final = 1
MARK_AAD: Final = b"mark"
CONFIG_AAD: Final = b"config"
CONFIG_NAME: Final = "config"
STORE_ID_RE: Final = re.compile(r"^[0-9a-f]{32}$")


class RemoteMark(NamedTuple):
    """A mark as a mark record carries it: ``records.Mark`` without what only its own store
    means (workspace row id, pin, a pre-rollback mark's absent paths)."""

    id: str
    seq: int
    label: str
    message: str | None
    agent: str | None
    session: str | None
    created: int  # ns since the epoch
    git_head: str | None
    tree: str
    kind: str
    summary: dict[str, Any]
    rules: str | None
    root_mode: int | None
    ignored: str | None

    @classmethod
    def of(cls, mark: records.Mark) -> RemoteMark:
        return cls(*(getattr(mark, field) for field in cls._fields))


class MarkRecord(NamedTuple):
    """One mark record (``name``: its object name, ``marks/<hmac hex>``)."""

    name: str
    host: str
    store: str  # the pushing store's id (32 hex)
    workspace: bytes  # the workspace root's path on the pushing host
    mark: RemoteMark
    objects: int  # objects the mark needs
    pushed: int  # ns since the epoch
    bytes: int  # their content's bytes (last: a field annotated ``bytes`` after it would not type)


def mark_name(master: MasterKey, store: str, mark_id: str) -> str:
    """The object name of the record of mark ``mark_id`` of store ``store``."""
    return "marks/" + name_mac(master, f"{store}/{mark_id}")


def mark_record(
    master: MasterKey,
    mark: records.Mark,
    *,
    host: str,
    store: str,
    workspace: bytes,
    objects: int,
    nbytes: int,
    pushed: int,
) -> MarkRecord:
    """The record a push writes for ``mark``, named."""
    return MarkRecord(
        mark_name(master, store, mark.id),
        host,
        store,
        workspace,
        RemoteMark.of(mark),
        objects,
        pushed,
        nbytes,
    )


def encode_mark(master: MasterKey, record: MarkRecord) -> bytes:
    doc = {
        "version": VERSION,
        "host": record.host,
        "store": record.store,
        "workspace": encode_path(record.workspace),
        "mark": record.mark._asdict(),
        "objects": record.objects,
        "bytes": record.bytes,
        "pushed": record.pushed,
    }
    return seal(master, dump_json(doc), MARK_AAD)


def decode_mark(master: MasterKey, data: bytes, name: str) -> MarkRecord:
    """The mark record ``name`` (``marks/<hex>``) from its bytes; refused unless its name is
    the one its own store and mark give."""
    what = f"mark record {name}"
    doc = load_object(open_sealed(master, data, MARK_AAD, what), what)
    doc.version(VERSION)
    store = doc.string("store")
    if not STORE_ID_RE.match(store):
        raise corrupt(what, f"its store id {store!r} is not 32 hex digits")
    try:
        workspace = decode_path(doc.value.get("workspace"), "workspace")
    except BadRequest as exc:
        raise corrupt(what, exc.message) from None
    mark = _remote_mark(doc.sub("mark"))
    if name != mark_name(master, store, mark.id):
        raise corrupt(what, f"it holds the record of another mark (mark {mark.id} of store {store})")
    return MarkRecord(
        name=name,
        host=doc.string("host"),
        store=store,
        workspace=workspace,
        mark=mark,
        objects=doc.number("objects"),
        pushed=doc.number("pushed"),
        bytes=doc.number("bytes"),
    )


def _remote_mark(f: Fields) -> RemoteMark:
    mark_id = f.string("id")
    if not refs.ID_SHAPE.match(mark_id):
        raise corrupt(f.what, f"its mark id {mark_id!r} is not a mark id")
    summary = f.sub("summary").value
    return RemoteMark(
        id=mark_id,
        seq=f.number("seq"),
        label=f.string("label"),
        message=f.opt_string("message"),
        agent=f.opt_string("agent"),
        session=f.opt_string("session"),
        created=f.number("created"),
        git_head=f.opt_string("git_head"),
        tree=_key(f, "tree"),
        kind=f.string("kind"),
        summary=summary,
        rules=None if f.opt_string("rules") is None else _key(f, "rules"),
        root_mode=f.opt_number("root_mode", 0, 0o7777),
        ignored=None if f.opt_string("ignored") is None else _key(f, "ignored"),
    )


def _key(f: Fields, field: str) -> str:
    key = f.string(field)
    try:
        objects.parse_key(key)
    except CorruptObject:
        raise corrupt(f.what, f"its {field} {key!r} is not an object key") from None
    return key


class RepoConfig(NamedTuple):
    """The repository's config: its id (32 hex: names its local cache) and creation time."""

    id: str
    created: int  # ns since the epoch


def encode_config(master: MasterKey, config: RepoConfig) -> bytes:
    return seal(
        master, dump_json({"version": VERSION, "id": config.id, "created": config.created}), CONFIG_AAD
    )


def decode_config(master: MasterKey, data: bytes) -> RepoConfig:
    what = f"the repository's {CONFIG_NAME}"
    doc = load_object(open_sealed(master, data, CONFIG_AAD, what), what)
    doc.version(VERSION)
    repo_id = doc.string("id")
    if not STORE_ID_RE.match(repo_id):
        raise corrupt(what, f"its id {repo_id!r} is not 32 hex digits")
    return RepoConfig(repo_id, doc.number("created"))
