"""The remote repository's cryptography: sealing, name MACs, hashes and the password KDF.

Everything a repository holds is sealed on the client with AES-256-GCM: a random 12-byte nonce,
then the ciphertext and its 16-byte tag (``nonce || ct+tag``). Each kind of object is sealed
with its own associated data (the *aad*: ``b"blob:" + key``, ``b"index"``, ``b"mark"``...), so
a sealed object the server moves to where another kind (or another blob) belongs does not open.
A random 96-bit nonce per seal is safe far past what a repository holds (the bound is ~2^32
seals per key).

Object names the server sees are hashes of the bytes (SHA-256: anyone can check a pack or an
index without the password) or MACs (HMAC-SHA256 with the master's ``mac`` key: a mark
record's name tells the server nothing about the mark, yet the same mark always gets the same
name). The master keys are random; a password only opens a key file (``keys.py``), through a
key-encryption key derived with Argon2id, memory-hard so that guessing passwords costs memory
as well as time.

This is the only module that imports ``cryptography`` (imported by the remote commands only).
"""

from __future__ import annotations

import hashlib
import hmac
import os
from typing import Final, NamedTuple

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.argon2 import Argon2id

from snapd.errors import RemoteCorrupt

KEY_BYTES: Final = 32
NONCE_BYTES: Final = 12
TAG_BYTES: Final = 16
OVERHEAD: Final = NONCE_BYTES + TAG_BYTES
"""How many bytes sealing adds to a plaintext."""


class MasterKey(NamedTuple):
    """A repository's secrets: ``encrypt`` seals every object, ``mac`` names mark records."""

    encrypt: bytes
    mac: bytes


class KdfCost(NamedTuple):
    """Argon2id's cost: passes over memory, memory in KiB, parallel lanes."""

    iterations: int
    memory_kib: int
    lanes: int


DEFAULT_COST: Final = KdfCost(iterations=3, memory_kib=64 * 1024, lanes=4)
"""What a key file is made with unless a caller says otherwise (~0.25 s on one core)."""
LOW_COST: Final = KdfCost(iterations=1, memory_kib=64, lanes=1)
"""For tests only, and only ever passed explicitly: no guess is expensive at this cost."""
MAX_COST: Final = KdfCost(iterations=16, memory_kib=1024 * 1024, lanes=16)
"""The most a key file may ask of a reader (the file comes from the server: a cost past this
is refused as corrupt rather than spent). Every key file listed is tried, by a daemon that
also captures history: 16 times the default's memory, passes and lanes is a generous ceiling
for a password that must be stronger, never one a hostile server can use to take gigabytes or
minutes per try."""


def new_master() -> MasterKey:
    return MasterKey(encrypt=os.urandom(KEY_BYTES), mac=os.urandom(KEY_BYTES))


def seal_with(key: bytes, plaintext: bytes, aad: bytes) -> bytes:
    """``plaintext`` sealed with the raw 32-byte ``key``: ``nonce || ct+tag``."""
    nonce = os.urandom(NONCE_BYTES)
    return nonce + AESGCM(key).encrypt(nonce, plaintext, aad)


def open_with(key: bytes, sealed: bytes, aad: bytes) -> bytes | None:
    """The plaintext of ``sealed``, or None when it does not authenticate with ``key`` and
    ``aad`` (another key, tampered with, truncated, or sealed for another place)."""
    if len(sealed) < OVERHEAD:
        return None
    try:
        return AESGCM(key).decrypt(sealed[:NONCE_BYTES], sealed[NONCE_BYTES:], aad)
    except InvalidTag:
        return None


def seal(key: MasterKey, plaintext: bytes, aad: bytes) -> bytes:
    return seal_with(key.encrypt, plaintext, aad)


def open_sealed(key: MasterKey, sealed: bytes, aad: bytes, what: str) -> bytes:
    """The plaintext of ``sealed``; ``RemoteCorrupt`` naming ``what`` when it does not open
    (with the master key, a failure is damage or tampering, never a wrong password)."""
    plaintext = open_with(key.encrypt, sealed, aad)
    if plaintext is None:
        raise corrupt(what, "it does not authenticate (tampered with, damaged or truncated)")
    return plaintext


def corrupt(what: str, why: str) -> RemoteCorrupt:
    """The one shape of a remote corruption error: the object named, then why."""
    return RemoteCorrupt(f"{what} is corrupt: {why}", object=what)


def name_mac(key: MasterKey, text: str) -> str:
    """HMAC-SHA256 of ``text`` (UTF-8) with the master's ``mac`` key, as 64 hex digits."""
    return hmac.new(key.mac, text.encode("utf-8"), hashlib.sha256).hexdigest()


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def derive_kek(password: str, salt: bytes, cost: KdfCost) -> bytes:
    """The key-encryption key a password gives with ``salt`` at ``cost`` (Argon2id, 32 bytes).

    The password is taken as UTF-8; a password that is not valid Unicode (a lone surrogate
    from a file name or environment) keeps its exact bytes through ``surrogateescape``."""
    kdf = Argon2id(
        salt=salt,
        length=KEY_BYTES,
        iterations=cost.iterations,
        lanes=cost.lanes,
        memory_cost=cost.memory_kib,
    )
    return kdf.derive(password.encode("utf-8", "surrogateescape"))
