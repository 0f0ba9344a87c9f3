"""Key files: the master keys sealed under a password (``keys/<sha256 of the file>``).

A repository's master keys are random and never change; what a password opens is a key file:
plaintext JSON naming the KDF and its cost, a salt, and the master keys (as JSON) sealed with
the key-encryption key Argon2id derives from the password and the salt (aad ``b"snapd-key"``).
Any key file that opens gives the same master, so a password change writes a new key file
(a new salt too) and deletes the old one: nothing else in the repository is touched. A lost
password is a lost repository: no one can open its objects without a key file that opens.

A key file that does not open with a password is not an error here (``None``): a repository
may hold key files of several passwords, and the caller tries each. A key file that cannot be
read (not JSON, a field missing, a cost past ``MAX_COST``, a name that is not the hash of its
bytes) is ``RemoteCorrupt`` naming it. The cost is read from the file, within bounds, so a
file made at a lower cost (tests) opens as well.
"""

from __future__ import annotations

import os
import time
from typing import Final, NamedTuple

from snapd.remote.crypto import (
    DEFAULT_COST,
    KEY_BYTES,
    MAX_COST,
    KdfCost,
    MasterKey,
    corrupt,
    derive_kek,
    open_with,
    seal_with,
    sha256_hex,
)
from snapd.remote.fields import b64, dump_json, load_object

VERSION: Final = 1
KDF: Final = "argon2id"
AAD: Final = b"snapd-key"
SALT_BYTES: Final = 16
MIN_SALT_BYTES: Final = 8  # Argon2's own minimum
MAX_SALT_BYTES: Final = 64
MAX_SEALED_BYTES: Final = 4096  # the master's JSON is ~100 bytes
MAX_FILE_BYTES: Final = 64 * 1024
"""The most a key file may weigh (its sealed master in base64 and a few short fields): a reader
does not fetch a larger one."""
DIR: Final = "keys/"


class KeyFile(NamedTuple):
    """A key file as read, before any password is tried."""

    name: str  # keys/<sha256 of the file's bytes>
    cost: KdfCost
    salt: bytes
    sealed: bytes
    created: int  # ns since the epoch
    host: str
    user: str


def key_file_name(data: bytes) -> str:
    return DIR + sha256_hex(data)


def make_key_file(
    master: MasterKey, password: str, *, host: str, user: str, cost: KdfCost = DEFAULT_COST
) -> bytes:
    """A new key file opening ``master`` with ``password`` (its name: ``key_file_name``)."""
    salt = os.urandom(SALT_BYTES)
    inner = dump_json({"encrypt": b64(master.encrypt), "mac": b64(master.mac)})
    return dump_json(
        {
            "version": VERSION,
            "kdf": KDF,
            "iterations": cost.iterations,
            "memory_kib": cost.memory_kib,
            "lanes": cost.lanes,
            "salt": b64(salt),
            "data": b64(seal_with(derive_kek(password, salt, cost), inner, AAD)),
            "created": time.time_ns(),
            "host": host,
            "user": user,
        }
    )


def read_key_file(data: bytes, name: str | None = None) -> KeyFile:
    """The fields of a key file, checked (``name``: the name it was listed under, which must
    be the hash of its bytes; None: named by its bytes, nothing to compare)."""
    actual = key_file_name(data)
    what = f"key file {name or actual}"
    if name is not None and name != actual:
        raise corrupt(what, "its name is not the SHA-256 of its bytes")
    fields = load_object(data, what)
    fields.version(VERSION)
    if fields.string("kdf") != KDF:
        raise corrupt(what, f"its KDF is not {KDF}")
    lanes = fields.number("lanes", 1, MAX_COST.lanes)
    cost = KdfCost(
        iterations=fields.number("iterations", 1, MAX_COST.iterations),
        memory_kib=fields.number("memory_kib", 8 * lanes, MAX_COST.memory_kib),
        lanes=lanes,
    )
    return KeyFile(
        name=name or actual,
        cost=cost,
        salt=fields.b64("salt", MIN_SALT_BYTES, MAX_SALT_BYTES),
        sealed=fields.b64("data", 1, MAX_SEALED_BYTES),
        created=fields.number("created"),
        host=fields.string("host"),
        user=fields.string("user"),
    )


def open_key_file(data: bytes, password: str, *, name: str | None = None) -> MasterKey | None:
    """The master keys, or None when ``data`` does not open with ``password``.

    ``name``: the name it was listed under (``keys/<sha256>``): a file whose bytes changed is
    then refused as corrupt, not taken for another password's."""
    key_file = read_key_file(data, name)
    inner = open_with(derive_kek(password, key_file.salt, key_file.cost), key_file.sealed, AAD)
    if inner is None:
        return None
    what = f"key file {key_file.name}"
    fields = load_object(inner, what)
    return MasterKey(
        encrypt=fields.b64("encrypt", KEY_BYTES, KEY_BYTES),
        mac=fields.b64("mac", KEY_BYTES, KEY_BYTES),
    )
