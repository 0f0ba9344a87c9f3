"""The remote repository's cryptography and key files (snapd/remote/crypto.py, keys.py): pure,
no server. Sealing round-trips and refuses every flipped byte, a truncation, another aad and
another key by naming the object; no plaintext shows in what is sealed; a key file opens with
its password only, refuses damage by name, and a password change keeps the master."""

from __future__ import annotations

import base64
import hashlib
import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from snapd.errors import RemoteCorrupt
from snapd.remote import crypto, keys
from snapd.remote.crypto import LOW_COST, MasterKey

pytestmark = pytest.mark.timeout(60)

CANARY = b"canary-7f3c1e-do-not-leak"
MASTER = crypto.new_master()


def flipped(data: bytes, i: int, mask: int = 0x01) -> bytes:
    return data[:i] + bytes([data[i] ^ mask]) + data[i + 1 :]


@settings(max_examples=200, deadline=None)
@given(plaintext=st.binary(max_size=2048), aad=st.binary(max_size=64))
def test_seal_round_trips_and_adds_nonce_and_tag(plaintext: bytes, aad: bytes) -> None:
    sealed = crypto.seal(MASTER, plaintext, aad)
    assert len(sealed) == len(plaintext) + crypto.OVERHEAD
    assert crypto.open_sealed(MASTER, sealed, aad, "x") == plaintext


def test_every_flipped_byte_of_a_sealed_object_is_refused_by_name() -> None:
    sealed = crypto.seal(MASTER, CANARY * 3, b"mark")
    for i in range(len(sealed)):
        for mask in (0x01, 0x80):
            with pytest.raises(RemoteCorrupt, match="marks/abc is corrupt") as info:
                crypto.open_sealed(MASTER, flipped(sealed, i, mask), b"mark", "marks/abc")
            assert info.value.details == {"object": "marks/abc"}


@settings(max_examples=100, deadline=None)
@given(cut=st.integers(min_value=0, max_value=80))
def test_a_truncated_or_extended_sealed_object_is_refused(cut: int) -> None:
    sealed = crypto.seal(MASTER, CANARY * 2, b"index")
    with pytest.raises(RemoteCorrupt, match="index/1"):
        crypto.open_sealed(MASTER, sealed[: len(sealed) - 1 - cut % len(sealed)], b"index", "index/1")
    with pytest.raises(RemoteCorrupt, match="index/1"):
        crypto.open_sealed(MASTER, sealed + bytes(1 + cut), b"index", "index/1")


def test_another_aad_or_another_master_does_not_open() -> None:
    sealed = crypto.seal(MASTER, CANARY, b"blob:" + b"a" * 32 + b"-10")
    with pytest.raises(RemoteCorrupt):
        crypto.open_sealed(MASTER, sealed, b"blob:" + b"b" * 32 + b"-10", "blob")
    with pytest.raises(RemoteCorrupt):
        crypto.open_sealed(MASTER, sealed, b"index", "blob")
    with pytest.raises(RemoteCorrupt):
        crypto.open_sealed(crypto.new_master(), sealed, b"blob:" + b"a" * 32 + b"-10", "blob")
    # the mac key plays no part in sealing: a master with the same encrypt key opens it
    same = MasterKey(encrypt=MASTER.encrypt, mac=bytes(32))
    assert crypto.open_sealed(same, sealed, b"blob:" + b"a" * 32 + b"-10", "blob") == CANARY


def test_no_plaintext_in_sealed_output_and_nonces_differ() -> None:
    plaintext = CANARY * 50
    one, two = crypto.seal(MASTER, plaintext, b"mark"), crypto.seal(MASTER, plaintext, b"mark")
    assert CANARY[:8] not in one and CANARY[:8] not in two
    assert one[: crypto.NONCE_BYTES] != two[: crypto.NONCE_BYTES] and one != two


def test_name_mac_is_a_keyed_deterministic_hex_name() -> None:
    name = crypto.name_mac(MASTER, "store/mark")
    assert name == crypto.name_mac(MASTER, "store/mark")
    assert len(name) == 64 and int(name, 16) >= 0
    assert name != crypto.name_mac(MASTER, "store/mark2")
    assert name != crypto.name_mac(crypto.new_master(), "store/mark")
    assert name != hashlib.sha256(b"store/mark").hexdigest()
    assert crypto.sha256_hex(CANARY) == hashlib.sha256(CANARY).hexdigest()


def test_new_masters_are_random_and_32_bytes() -> None:
    one, two = crypto.new_master(), crypto.new_master()
    assert len(one.encrypt) == len(one.mac) == 32 and one != two and one.encrypt != one.mac


# ---- key files


def key_file(password: str = "hunter2", master: MasterKey = MASTER) -> bytes:
    return keys.make_key_file(master, password, host="box", user="ann", cost=LOW_COST)


def test_a_key_file_opens_with_its_password_only() -> None:
    data = key_file("correct horse")
    assert keys.open_key_file(data, "correct horse") == MASTER
    assert keys.open_key_file(data, "correct horse", name=keys.key_file_name(data)) == MASTER
    assert keys.open_key_file(data, "correct hors") is None
    assert keys.open_key_file(data, "") is None
    read = keys.read_key_file(data)
    assert (read.host, read.user, read.cost) == ("box", "ann", LOW_COST)
    assert read.name == "keys/" + hashlib.sha256(data).hexdigest()


def test_a_key_file_shows_neither_password_nor_master() -> None:
    password = CANARY.decode()
    data = key_file(password)
    text = data.decode("ascii")
    assert password not in text
    for secret in (MASTER.encrypt, MASTER.mac):
        assert base64.b64encode(secret).decode() not in text and secret.hex() not in text
        assert secret not in data


def test_a_password_change_keeps_the_master() -> None:
    old = key_file("old password")
    master = keys.open_key_file(old, "old password")
    assert master is not None
    new = key_file("new password", master)
    assert keys.key_file_name(new) != keys.key_file_name(old)
    assert keys.open_key_file(new, "new password") == MASTER
    assert keys.open_key_file(new, "old password") is None
    assert keys.open_key_file(old, "new password") is None


def test_the_default_cost_is_the_design_s_and_low_is_only_explicit() -> None:
    assert crypto.DEFAULT_COST == crypto.KdfCost(iterations=3, memory_kib=65536, lanes=4)
    data = keys.make_key_file(MASTER, "pw", host="h", user="u")
    assert keys.read_key_file(data).cost == crypto.DEFAULT_COST
    assert keys.open_key_file(data, "pw") == MASTER


def test_every_flipped_byte_of_a_named_key_file_is_refused_by_name() -> None:
    data = key_file("pw")
    name = keys.key_file_name(data)
    for i in range(len(data)):
        with pytest.raises(RemoteCorrupt, match=f"key file {name} is corrupt"):
            keys.open_key_file(flipped(data, i), "pw", name=name)


def test_a_flipped_byte_of_an_unnamed_key_file_never_opens_to_another_master() -> None:
    """Unnamed, a flip in the sealed part or the KDF's inputs does not open; one in the
    unauthenticated notes (created, host, user) may: it still gives the one master."""
    data = key_file("pw")
    opened = 0
    for i in range(len(data)):
        try:
            master = keys.open_key_file(flipped(data, i), "pw")
        except RemoteCorrupt as exc:
            assert "key file keys/" in exc.message
            continue
        assert master in (None, MASTER)
        opened += master is not None
    assert 0 < opened < len(data) // 2


def mangled(change: dict[str, Any]) -> bytes:
    doc = json.loads(key_file("pw"))
    doc.update(change)
    return json.dumps({k: v for k, v in doc.items() if v is not ...}).encode()


@pytest.mark.parametrize(
    "change",
    [
        {"version": 2},
        {"version": True},
        {"kdf": "scrypt"},
        {"iterations": ...},
        {"iterations": 0},
        {"iterations": 1.0},
        {"memory_kib": 2**40},
        {"memory_kib": "64"},
        {"lanes": 0},
        {"salt": "not base64!"},
        {"salt": base64.b64encode(b"1234567").decode()},
        {"data": ...},
        {"data": 12},
        {"created": -1},
        {"host": None},
        {"user": ...},
    ],
    ids=repr,
)
def test_a_malformed_key_file_is_refused_by_name(change: dict[str, Any]) -> None:
    data = mangled(change)
    with pytest.raises(RemoteCorrupt, match=f"key file {keys.key_file_name(data)} "):
        keys.open_key_file(data, "pw")


@pytest.mark.parametrize(
    "change",
    [{"memory_kib": 2 * 1024 * 1024}, {"iterations": 32}, {"lanes": 32, "memory_kib": 1 << 16}],
    ids=repr,
)
def test_a_key_file_asking_more_than_a_reader_spends_is_refused_before_any_derivation(
    change: dict[str, Any],
) -> None:
    """The cost is the server's word: 2 GiB or 32 passes per try (and a try per key file
    listed) would let a hostile server take the daemon's memory or minutes on every open."""
    data = mangled(change)
    with pytest.raises(RemoteCorrupt, match=f"key file {keys.key_file_name(data)} "):
        keys.read_key_file(data)


@pytest.mark.parametrize("data", [b"", b"\xff\xfe", b"[1, 2]", b"{", b'"text"'], ids=repr)
def test_a_key_file_that_is_not_a_json_object_is_refused(data: bytes) -> None:
    with pytest.raises(RemoteCorrupt, match="key file keys/"):
        keys.open_key_file(data, "pw")


def test_a_master_json_that_opens_but_is_malformed_is_refused() -> None:
    salt = bytes(16)
    kek = crypto.derive_kek("pw", salt, LOW_COST)
    doc = json.loads(key_file("pw"))
    doc["salt"] = base64.b64encode(salt).decode()
    doc["data"] = base64.b64encode(
        crypto.seal_with(kek, b'{"encrypt":"AAAA","mac":"AAAA"}', keys.AAD)
    ).decode()
    with pytest.raises(RemoteCorrupt, match="'encrypt' is not 32-32 bytes"):
        keys.open_key_file(json.dumps(doc).encode(), "pw")
