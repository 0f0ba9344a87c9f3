"""Packs, index files, doomed lists, mark records and the config of a remote repository
(snapd/remote/packs.py, records.py): pure, no server. Each round-trips; every flipped byte is
refused by name; a blob moved to another key's place, a record moved to another mark's name,
an offset or a length past the bytes read, and every malformed field are refused as
RemoteCorrupt; no plaintext (a canary) shows in what is sealed."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from snapd.errors import RemoteCorrupt
from snapd.remote import crypto, packs, records
from snapd.remote.packs import Blob, Doomed, IndexFile, PackWriter
from snapd.store import objects, refs
from snapd.store import records as store_records

pytestmark = pytest.mark.timeout(120)

CANARY = b"canary-51d0a9-never-in-the-bucket"
MASTER = crypto.new_master()


def key_of(content: bytes) -> str:
    return objects.base_key(objects.xxh3_hex(content), len(content))


def encoded(content: bytes) -> bytes:
    codec, payload = objects.encode(content)
    return bytes([codec]) + payload


def flipped(data: bytes, i: int, mask: int = 0x01) -> bytes:
    return data[:i] + bytes([data[i] ^ mask]) + data[i + 1 :]


def make_pack(contents: list[bytes], target: int = packs.PACK_TARGET) -> tuple[bytes, list[Blob]]:
    writer = PackWriter(MASTER, target)
    for content in contents:
        writer.add(key_of(content), encoded(content))
    return writer.finish()


def content_of(data: bytes, blob: Blob, name: str = "data/00/x") -> bytes:
    codec, payload = packs.read_blob(MASTER, data, blob.key, name, blob.offset, blob.length)
    return objects.decode(blob.key, codec, payload)


# ---- packs


@settings(max_examples=60, deadline=None)
@given(contents=st.lists(st.binary(max_size=3000), min_size=0, max_size=12, unique=True))
def test_a_pack_round_trips_whole_as_ranges_and_from_its_tail(contents: list[bytes]) -> None:
    data, blobs = make_pack(contents)
    assert [b.key for b in blobs] == [key_of(c) for c in contents]
    name = packs.pack_name(crypto.sha256_hex(data))
    assert packs.parse_header(MASTER, data, name) == blobs
    for content, blob in zip(contents, blobs, strict=True):
        assert content_of(data, blob) == content
        ranged = data[blob.offset : blob.offset + blob.length]
        codec, payload = packs.read_blob(MASTER, ranged, blob.key, name)
        assert objects.decode(blob.key, codec, payload) == content
    need = 4 + packs.header_length(data[-4:])
    for tail in (need, need + 1, len(data)):
        assert packs.parse_header(MASTER, data[-tail:], name, pack_size=len(data)) == blobs


def test_no_plaintext_in_a_pack() -> None:
    data, _ = make_pack([CANARY, CANARY * 100, b"x" + CANARY])
    assert CANARY[:10] not in data and key_of(CANARY).encode() not in data


def test_the_writer_fills_to_its_target_and_a_big_blob_is_a_pack_of_its_own() -> None:
    writer = PackWriter(MASTER, target=1000)
    assert writer.fits(10**6)  # empty: anything goes in
    small = [bytes([n]) * 200 + b"%d" % n for n in range(10)]
    full = [writer.add(key_of(c), bytes([objects.CODEC_RAW]) + c) for c in small[:4]]
    assert full == [False, False, False, False] and len(writer) == 4
    assert not writer.fits(200)
    assert writer.add(key_of(small[4]), bytes([objects.CODEC_RAW]) + small[4])
    assert writer.add(key_of(small[4]), bytes([objects.CODEC_RAW]) + small[4])  # not again, still full
    data, blobs = writer.finish()
    assert len(blobs) == 5 and len(writer) == 0 and writer.size == 0
    assert packs.parse_header(MASTER, data, "data/00/p") == blobs
    assert writer.fits(10**6)


def test_a_key_added_twice_is_packed_once() -> None:
    writer = PackWriter(MASTER)
    writer.add(key_of(CANARY), encoded(CANARY))
    writer.add(key_of(CANARY), encoded(CANARY))
    data, blobs = writer.finish()
    assert len(blobs) == 1 and packs.parse_header(MASTER, data, "p") == blobs


def test_every_flipped_byte_of_a_pack_is_refused_by_name() -> None:
    contents = [CANARY, CANARY * 20]
    data, blobs = make_pack(contents)
    name = packs.pack_name(crypto.sha256_hex(data))
    header_start = blobs[-1].offset + blobs[-1].length
    for i in range(len(data)):
        bad = flipped(data, i, 0x01 if i % 2 else 0x80)
        if i >= header_start:
            with pytest.raises(RemoteCorrupt, match=f"pack {name}"):
                packs.parse_header(MASTER, bad, name)
            continue
        assert packs.parse_header(MASTER, bad, name) == blobs  # the header still stands
        blob = next(b for b in blobs if b.offset <= i < b.offset + b.length)
        with pytest.raises(RemoteCorrupt, match=f"object {blob.key} in {name} is corrupt"):
            content_of(bad, blob, name)


def test_a_blob_moved_to_another_key_s_place_does_not_open() -> None:
    one, two = CANARY, CANARY + b"2"
    data, (a, b) = make_pack([one, two])
    sealed_a = data[a.offset : a.offset + a.length]
    with pytest.raises(RemoteCorrupt, match=f"object {b.key}"):
        packs.read_blob(MASTER, sealed_a, b.key, "p")
    # the same bytes swapped in the pack, the header left as it was
    sealed_b = data[b.offset : b.offset + b.length]
    swapped = sealed_b + sealed_a + data[b.offset + b.length :]
    moved = [Blob(a.key, 0, len(sealed_b)), Blob(b.key, len(sealed_b), len(sealed_a))]
    for blob in moved:
        with pytest.raises(RemoteCorrupt):
            packs.read_blob(MASTER, swapped, blob.key, "p", blob.offset, blob.length)


@pytest.mark.parametrize(
    ("offset", "length"), [(-1, 60), (0, 10**9), (10**9, 60), (0, 5), (0, packs.MIN_BLOB - 1), (2**70, 2**70)]
)
def test_an_offset_or_length_past_the_bytes_read_is_refused(offset: int, length: int) -> None:
    data, (blob,) = make_pack([CANARY])
    with pytest.raises(RemoteCorrupt, match=f"object {blob.key} in data/00/x is corrupt: its blob at"):
        packs.read_blob(MASTER, data, blob.key, "data/00/x", offset, length)


def sealed_header_pack(blob_bytes: bytes, header: Any) -> bytes:
    sealed = crypto.seal(MASTER, json.dumps(header).encode(), packs.HEADER_AAD)
    return blob_bytes + sealed + len(sealed).to_bytes(4, "little")


K = key_of(CANARY)


@pytest.mark.parametrize(
    "header",
    [
        {"blobs": []},
        [[K, 0]],
        [[K, 0, 100, 1]],
        [[K, "0", 100]],
        [[K, 0, True]],
        [[K, 0, 100.0]],
        [["not-a-key", 0, 100]],
        [[K.upper(), 0, 100]],
        [[K, 0, 50], [K, 50, 50]],  # one key twice
        [[K, 0, 99]],  # ends before the header
        [[K, 0, 101]],  # runs into the header
        [[K, 1, 99]],  # a gap at the start
        [[K, 0, 40], [key_of(b"other"), 60, 40]],  # a gap between
        [[K, 0, 60], [key_of(b"other"), 40, 60]],  # overlapping
        [[K, 0, 10], [key_of(b"other"), 10, 90]],  # a blob shorter than a seal
        "text",
        None,
    ],
    ids=repr,
)
def test_a_sealed_header_that_lies_is_refused(header: Any) -> None:
    data = sealed_header_pack(bytes(100), header)
    with pytest.raises(RemoteCorrupt, match="data/ab/cd"):
        packs.parse_header(MASTER, data, "data/ab/cd")


@pytest.mark.parametrize("cut", [0, 3, 4, 20, 31])
def test_a_pack_too_short_or_with_a_header_length_past_it_is_refused(cut: int) -> None:
    data, _ = make_pack([CANARY])
    with pytest.raises(RemoteCorrupt, match=f"pack p is corrupt: {cut} bytes are too few|its header length"):
        packs.parse_header(MASTER, data[:cut], "p")
    huge = data[:-4] + (2**32 - 1).to_bytes(4, "little")
    with pytest.raises(RemoteCorrupt, match="its header length 4294967295 does not fit"):
        packs.parse_header(MASTER, huge, "p")
    need = 4 + packs.header_length(data[-4:])
    with pytest.raises(RemoteCorrupt, match=r"pack p is corrupt: its header length \d+ does not fit"):
        packs.parse_header(MASTER, data[-(need - 1) :], "p", pack_size=len(data))
    with pytest.raises(RemoteCorrupt, match="pack p is corrupt: .* were read of its"):  # a tail past its pack
        packs.parse_header(MASTER, data, "p", pack_size=len(data) - 1)


# ---- index files


index_files = st.builds(
    IndexFile,
    packs=st.dictionaries(
        st.binary(min_size=32, max_size=32).map(lambda b: b.hex()),
        st.lists(st.binary(max_size=50), unique=True, max_size=4).map(
            lambda cs: [Blob(key_of(c), n * 100, 100) for n, c in enumerate(cs)]
        ),
        max_size=4,
    ),
    supersedes=st.lists(st.binary(min_size=32, max_size=32).map(lambda b: b.hex()), max_size=3),
)


@settings(max_examples=100, deadline=None)
@given(index=index_files)
def test_an_index_file_round_trips(index: IndexFile) -> None:
    data = packs.encode_index(MASTER, index)
    name = packs.index_name(crypto.sha256_hex(data))
    assert packs.decode_index(MASTER, data, name) == index
    assert packs.parse_index_json(packs.index_json(index), name) == index


def an_index() -> IndexFile:
    pack = crypto.sha256_hex(CANARY)
    return IndexFile({pack: [Blob(K, 0, 100), Blob(key_of(b"x"), 100, 30)]}, [crypto.sha256_hex(b"old")])


def test_every_flipped_byte_of_an_index_file_is_refused_by_name() -> None:
    data = packs.encode_index(MASTER, an_index())
    name = packs.index_name(crypto.sha256_hex(data))
    assert K.encode() not in data and crypto.sha256_hex(CANARY).encode() not in data
    for i in range(len(data)):
        bad = flipped(data, i)
        with pytest.raises(RemoteCorrupt, match=f"index file {name} is corrupt: its bytes do not hash"):
            packs.decode_index(MASTER, bad, name)
        # renamed to the hash of its new bytes, it still does not open
        renamed = packs.index_name(crypto.sha256_hex(bad))
        with pytest.raises(RemoteCorrupt, match=f"index file {renamed} is corrupt: it does not authenticate"):
            packs.decode_index(MASTER, bad, renamed)


def sealed_index(doc: Any) -> tuple[bytes, str]:
    data = crypto.seal(MASTER, objects.compress(json.dumps(doc).encode()), packs.INDEX_AAD)
    return data, packs.index_name(crypto.sha256_hex(data))


P = "ab" * 32


@pytest.mark.parametrize(
    "doc",
    [
        [],
        {"packs": []},
        {"supersedes": []},
        {"packs": {}, "supersedes": []},
        {"packs": [P], "supersedes": []},
        {"packs": [{"id": P}], "supersedes": []},
        {"packs": [{"blobs": []}], "supersedes": []},
        {"packs": [{"id": "ab", "blobs": []}], "supersedes": []},
        {"packs": [{"id": P.upper(), "blobs": []}], "supersedes": []},
        {"packs": [{"id": P, "blobs": []}, {"id": P, "blobs": []}], "supersedes": []},
        {"packs": [{"id": P, "blobs": [[K, -1, 100]]}], "supersedes": []},
        {"packs": [{"id": P, "blobs": [[K, 0, 3]]}], "supersedes": []},
        {"packs": [{"id": P, "blobs": [[K, 0, None]]}], "supersedes": []},
        {"packs": [{"id": P, "blobs": [["../x", 0, 100]]}], "supersedes": []},
        {"packs": [], "supersedes": ["../../keys"]},
        {"packs": [], "supersedes": [1]},
        {"packs": [], "supersedes": None},
    ],
    ids=repr,
)
def test_a_malformed_index_file_is_refused_by_name(doc: Any) -> None:
    data, name = sealed_index(doc)
    with pytest.raises(RemoteCorrupt, match=f"index file {name} "):
        packs.decode_index(MASTER, data, name)


def test_an_index_file_whose_json_is_not_zstd_or_too_large_is_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    plain = crypto.seal(MASTER, b'{"packs":[],"supersedes":[]}', packs.INDEX_AAD)
    name = packs.index_name(crypto.sha256_hex(plain))
    with pytest.raises(
        RemoteCorrupt, match=f"index file {name} is corrupt: a zstd frame does not decompress"
    ):
        packs.decode_index(MASTER, plain, name)
    monkeypatch.setattr(packs, "MAX_INDEX_JSON", 20)
    data, name = sealed_index({"packs": [], "supersedes": []})
    with pytest.raises(RemoteCorrupt, match="past the limit of 20"):
        packs.decode_index(MASTER, data, name)


def test_an_index_file_sealed_as_another_kind_does_not_open() -> None:
    frame = objects.compress(packs.index_json(an_index()))
    for aad in (b"mark", b"pack-header", b"doomed", b""):
        data = crypto.seal(MASTER, frame, aad)
        with pytest.raises(RemoteCorrupt, match="it does not authenticate"):
            packs.decode_index(MASTER, data, packs.index_name(crypto.sha256_hex(data)))


# ---- doomed lists


def test_a_doomed_list_round_trips_and_refuses_every_flipped_byte() -> None:
    doomed = Doomed(frozenset({P, "cd" * 32}), 1_700_000_000_123_456_789)
    data = packs.encode_doomed(MASTER, doomed)
    name = packs.doomed_name(data)
    assert packs.decode_doomed(MASTER, data, name) == doomed
    for i in range(len(data)):
        with pytest.raises(RemoteCorrupt, match=f"doomed list {name} is corrupt: its bytes do not hash"):
            packs.decode_doomed(MASTER, flipped(data, i), name)
        bad = flipped(data, i)
        with pytest.raises(RemoteCorrupt, match="it does not authenticate"):
            packs.decode_doomed(MASTER, bad, packs.doomed_name(bad))


@pytest.mark.parametrize(
    "doc", [{"packs": ["x"], "time": 1}, {"packs": [P]}, {"time": 1}, {"packs": [P], "time": -1}], ids=repr
)
def test_a_malformed_doomed_list_is_refused(doc: Any) -> None:
    data = crypto.seal(MASTER, json.dumps(doc).encode(), packs.DOOMED_AAD)
    with pytest.raises(RemoteCorrupt, match="doomed list doomed/"):
        packs.decode_doomed(MASTER, data, packs.doomed_name(data))


# ---- mark records and the config

STORE = "0123456789abcdef0123456789abcdef"


def a_mark(**changes: Any) -> store_records.Mark:
    mark = store_records.Mark(
        id=refs.new_mark_id(),
        workspace=7,
        seq=12,
        label=CANARY.decode() + "-label",
        message="é message " + CANARY.decode(),
        agent="claude",
        session="s-42",
        created=1_780_000_000_000_000_001,
        git_head="a" * 40,
        tree=key_of(b"tree node"),
        kind="turn",
        pinned=True,
        summary={"added": 3, "paths": ["a/b", "c"]},
        rules=key_of(b"rules"),
        root_mode=0o755,
        absent=(b"gone",),
        ignored=key_of(b"ignored"),
    )
    return mark.__class__(**{**mark.__dict__, **changes})


WORKSPACE = b"/home/ann/" + CANARY + b"/\xff\xfe-not-utf8"


def a_record(mark: store_records.Mark | None = None) -> records.MarkRecord:
    return records.mark_record(
        MASTER,
        mark or a_mark(),
        host="box-" + CANARY.decode(),
        store=STORE,
        workspace=WORKSPACE,
        objects=120,
        nbytes=2**40,
        pushed=1_780_000_000_500_000_000,
    )


RECORD = a_record()


@pytest.mark.parametrize(
    "changes",
    [
        {},
        {"message": None, "agent": None, "session": None, "git_head": None},
        {"rules": None, "ignored": None},
    ],
    ids=repr,
)
def test_a_mark_record_round_trips_every_field(changes: dict[str, Any]) -> None:
    mark = a_mark(**changes)
    record = a_record(mark)
    assert record.name == records.mark_name(MASTER, STORE, mark.id)
    assert record.name.startswith("marks/") and len(record.name) == 6 + 64
    data = records.encode_mark(MASTER, record)
    back = records.decode_mark(MASTER, data, record.name)
    assert back == record
    for field in records.RemoteMark._fields:
        assert getattr(back.mark, field) == getattr(mark, field)
    assert back.workspace == WORKSPACE and back.bytes == 2**40 and back.objects == 120


def test_a_mark_record_shows_no_plaintext_and_its_name_nothing() -> None:
    record = a_record()
    data = records.encode_mark(MASTER, record)
    assert CANARY[:10] not in data and CANARY[:10] not in record.name.encode()
    assert record.mark.id.encode() not in data and STORE.encode() not in data
    assert record.mark.id not in record.name and STORE not in record.name


def test_every_flipped_byte_of_a_mark_record_is_refused_by_name() -> None:
    record = a_record(a_mark(summary={}, message=None))
    data = records.encode_mark(MASTER, record)
    for i in range(len(data)):
        with pytest.raises(RemoteCorrupt, match=f"mark record {record.name} is corrupt"):
            records.decode_mark(MASTER, flipped(data, i), record.name)


def test_a_mark_record_under_another_mark_s_name_is_refused() -> None:
    one, two = a_record(), a_record()
    data = records.encode_mark(MASTER, one)
    with pytest.raises(
        RemoteCorrupt, match=f"mark record {two.name} is corrupt: it holds the record of another mark"
    ):
        records.decode_mark(MASTER, data, two.name)
    other_store = records.mark_name(MASTER, "f" * 32, one.mark.id)
    with pytest.raises(RemoteCorrupt, match="another mark"):
        records.decode_mark(MASTER, data, other_store)


def record_doc(**changes: Any) -> tuple[dict[str, Any], str]:
    record = RECORD
    doc = json.loads(crypto.open_sealed(MASTER, records.encode_mark(MASTER, record), records.MARK_AAD, "x"))
    for path, value in changes.items():
        where = doc
        *parents, last = path.split(".")
        for parent in parents:
            where = where[parent]
        if value is ...:
            del where[last]
        else:
            where[last] = value
    return doc, record.name


@pytest.mark.parametrize(
    "changes",
    [
        {"version": 2},
        {"version": ...},
        {"host": ...},
        {"host": 1},
        {"store": "xyz"},
        {"store": ...},
        {"workspace": ...},
        {"workspace": {"b64": "!!"}},
        {"workspace": 5},
        {"mark": ...},
        {"mark": []},
        {"objects": -1},
        {"objects": "1"},
        {"bytes": ...},
        {"bytes": 1.5},
        {"pushed": True},
        *({f"mark.{field}": ...} for field in records.RemoteMark._fields),
        {"mark.id": "Not/An/Id"},
        {"mark.seq": "12"},
        {"mark.label": None},
        {"mark.message": 3},
        {"mark.created": -5},
        {"mark.tree": "../../etc"},
        {"mark.tree": None},
        {"mark.kind": None},
        {"mark.summary": []},
        {"mark.rules": "nope"},
        {"mark.root_mode": 0o10000},
        {"mark.root_mode": "755"},
        {"mark.ignored": 1},
    ],
    ids=repr,
)
def test_a_malformed_mark_record_is_refused_by_name(changes: dict[str, Any]) -> None:
    doc, name = record_doc(**changes)
    data = crypto.seal(MASTER, json.dumps(doc).encode(), records.MARK_AAD)
    with pytest.raises(RemoteCorrupt, match=f"mark record {name} (is corrupt|is format version)") as info:
        records.decode_mark(MASTER, data, name)
    assert "another mark" not in info.value.message  # refused for the field, not the name
    assert records.decode_mark(
        MASTER, crypto.seal(MASTER, json.dumps(record_doc()[0]).encode(), b"mark"), name
    )


def test_the_config_round_trips_and_refuses_damage() -> None:
    config = records.RepoConfig("ab" * 16, 1_780_000_000_000_000_000)
    data = records.encode_config(MASTER, config)
    assert records.decode_config(MASTER, data) == config
    for i in range(len(data)):
        with pytest.raises(RemoteCorrupt, match="the repository's config is corrupt"):
            records.decode_config(MASTER, flipped(data, i))
    for doc in (
        {"version": 1, "id": "xyz", "created": 1},
        {"version": 1, "id": "ab" * 16},
        {"id": "ab" * 16},
    ):
        sealed = crypto.seal(MASTER, json.dumps(doc).encode(), records.CONFIG_AAD)
        with pytest.raises(RemoteCorrupt, match="the repository's config"):
            records.decode_config(MASTER, sealed)
