"""Packs and index files: how objects are laid out in a remote repository (pure: bytes in, out).

A pack (``data/<2 hex>/<sha256 of its bytes>``) is its blobs, sealed one by one and
concatenated, then its sealed header, then the sealed header's length as 4 bytes little-endian.
A blob's plaintext is one codec byte then the payload (``snapd.store.objects.encode``), sealed
with the aad ``b"blob:" + key``: a blob the server moves to another key's place does not open.
The header (aad ``b"pack-header"``) is the JSON list of ``[key, offset, length]``, one per
blob in pack order; the blobs tile the bytes before the header exactly (first at 0, each where
the last ended), so a reader checks every offset against the pack it holds and nothing in a
pack goes unaccounted. A reader needs only an index (or the header) to fetch one blob as a
byte range; the caller decodes it with ``objects.decode``, which proves its bytes are the key's.

An index file (``index/<sha256 of its bytes>``) is sealed (aad ``b"index"``) zstd-compressed
JSON ``{"packs": [{"id", "blobs": [[key, offset, length]...]}], "supersedes": [index ids]}``:
where each object of some packs lies. A doomed list (``doomed/<sha256 of the file>``, aad
``b"doomed"``) names packs prune is about to delete. Nothing read from a server is trusted for
a length or an offset: each is bounded before it is used.
"""

from __future__ import annotations

import re
import struct
from typing import Any, Final, NamedTuple

from snapd.errors import CorruptObject
from snapd.remote.crypto import OVERHEAD, MasterKey, corrupt, open_sealed, seal, sha256_hex
from snapd.remote.fields import INT_MAX, array, dump_json, integer, load_json, load_object, text
from snapd.store import objects

PACK_TARGET: Final = 16 * 1024 * 1024
"""A pack is finished once it holds this many bytes (a larger blob makes a pack of its own)."""
HEADER_AAD: Final = b"pack-header"
INDEX_AAD: Final = b"index"
DOOMED_AAD: Final = b"doomed"
LENGTH: Final = struct.Struct("<I")
MIN_BLOB: Final = OVERHEAD + 1  # a sealed codec byte and an empty payload
MAX_INDEX_JSON: Final = 1 << 30
"""The most an index file's JSON may decompress to (~10 million objects)."""
ID_RE: Final = re.compile(r"^[0-9a-f]{64}$")


class Blob(NamedTuple):
    """Where one object's sealed blob lies in its pack."""

    key: str
    offset: int
    length: int


class IndexFile(NamedTuple):
    """One index file: the blobs of each pack it names (pack id -> blobs in pack order), and
    the index files it supersedes (written by prune only)."""

    packs: dict[str, list[Blob]]
    supersedes: list[str]


def pack_name(pack_id: str) -> str:
    return f"data/{pack_id[:2]}/{pack_id}"


def index_name(index_id: str) -> str:
    return f"index/{index_id}"


def blob_aad(key: str) -> bytes:
    return b"blob:" + key.encode("ascii")


class PackWriter:
    """A pack being filled: ``add`` seals each object's encoding; ``finish`` gives the bytes
    to upload (named ``pack_name(sha256_hex(bytes))``) and where each blob lies."""

    def __init__(self, master: MasterKey, target: int = PACK_TARGET) -> None:
        self.master = master
        self.target = target
        self.size = 0
        self._parts: list[bytes] = []
        self.blobs: list[Blob] = []  # so far, in pack order
        self._keys: set[str] = set()

    def __len__(self) -> int:
        return len(self.blobs)

    def fits(self, size: int) -> bool:
        """Whether an encoding of ``size`` bytes (codec byte and payload) belongs in this pack:
        it stays within the target, or the pack is empty (a blob past the target is a pack of
        its own)."""
        return not self.blobs or self.size + size + OVERHEAD <= self.target

    def add(self, key: str, codec_payload: bytes) -> bool:
        """Append the object ``key``, encoded as its codec byte then its payload; True once
        the pack is full (the caller finishes it). A key already in this pack is not added
        twice."""
        objects.parse_key(key)
        if not codec_payload:
            raise ValueError(f"object {key}: an encoding has at least its codec byte")
        if key not in self._keys:
            sealed = seal(self.master, codec_payload, blob_aad(key))
            self._keys.add(key)
            self.blobs.append(Blob(key, self.size, len(sealed)))
            self._parts.append(sealed)
            self.size += len(sealed)
        return self.size >= self.target

    def finish(self) -> tuple[bytes, list[Blob]]:
        """The pack's bytes, and its blobs (the writer is then empty again)."""
        header = seal(self.master, dump_json([list(b) for b in self.blobs]), HEADER_AAD)
        data = b"".join([*self._parts, header, LENGTH.pack(len(header))])
        blobs = self.blobs
        self.size, self._parts, self.blobs, self._keys = 0, [], [], set()
        return data, blobs


def read_blob(
    master: MasterKey,
    data: bytes,
    key: str,
    name: str | None = None,
    offset: int = 0,
    length: int | None = None,
) -> tuple[int, bytes]:
    """The ``(codec, payload)`` of object ``key`` from ``data``: the blob's own bytes (a byte
    range fetched), or a whole pack with the blob's ``offset`` and ``length``. ``name``: the
    pack's object name, for errors. The caller runs ``objects.decode`` on the result."""
    what = f"object {key}" + (f" in {name}" if name else "")
    if length is None:
        length = len(data) - offset
    if not (0 <= offset and MIN_BLOB <= length and offset + length <= len(data)):
        raise corrupt(what, f"its blob at {offset}+{length} is not within the {len(data)} bytes read")
    plaintext = open_sealed(master, data[offset : offset + length], blob_aad(key), what)
    return plaintext[0], plaintext[1:]


def header_length(tail: bytes) -> int:
    """The sealed header's length, from a pack's last 4 bytes (a server's word: bound it)."""
    (length,) = LENGTH.unpack_from(tail, len(tail) - LENGTH.size)
    return int(length)


def parse_header(master: MasterKey, data: bytes, name: str, pack_size: int | None = None) -> list[Blob]:
    """The blobs a pack's header lists, each checked to lie where the format says.

    ``data``: the whole pack, or (with ``pack_size``, the pack's size as listed) any tail of
    it holding at least the header and its length: a ranged GET, not the whole pack."""
    what = f"pack {name}"
    size = len(data) if pack_size is None else pack_size
    if len(data) > size:
        raise corrupt(what, f"{len(data)} bytes were read of its {size}")
    if len(data) < LENGTH.size + OVERHEAD:
        raise corrupt(what, f"{len(data)} bytes are too few to hold a header")
    length = header_length(data)
    start = size - LENGTH.size - length  # where the header starts in the pack
    if not (OVERHEAD <= length and start >= size - len(data)):
        raise corrupt(what, f"its header length {length} does not fit the {len(data)} bytes read")
    tail = len(data) - LENGTH.size
    header_what = f"the header of {what}"
    header = open_sealed(master, data[tail - length : tail], HEADER_AAD, header_what)
    blobs = blob_list(load_json(header, header_what), header_what)
    end = 0
    for blob in blobs:
        if blob.offset != end:
            raise corrupt(what, f"its blob {blob.key} is at {blob.offset}, not where the last ended ({end})")
        end = blob.offset + blob.length
    if end != start:
        raise corrupt(what, f"its blobs end at {end}, not where its header starts ({start})")
    return blobs


def blob_list(value: Any, what: str) -> list[Blob]:
    """``[[key, offset, length]...]`` read strictly: keys valid and distinct, sizes sane.

    An index lists every object of a repository: the checks run inline and a message is made
    only for a failure (~1 us an entry)."""
    blobs: list[Blob] = []
    seen: set[str] = set()
    match = objects.KEY_RE.match
    for n, item in enumerate(array(value, what, "the blob list")):
        if type(item) is not list or len(item) != 3:
            raise corrupt(what, f"blob {n} is not [key, offset, length]")
        key, offset, length = item
        if type(key) is not str or match(key) is None:
            raise corrupt(what, f"blob {n}'s key {key!r} is not an object key")
        if type(offset) is not int or not 0 <= offset <= INT_MAX:
            integer(offset, what, f"blob {n}'s offset")
        if type(length) is not int or not MIN_BLOB <= length <= INT_MAX:
            integer(length, what, f"blob {n}'s length", MIN_BLOB)
        if key in seen:
            raise corrupt(what, f"it lists object {key} twice")
        seen.add(key)
        blobs.append(Blob(key, offset, length))
    return blobs


def index_json(index: IndexFile) -> bytes:
    """An index file's plaintext JSON (what a cache keeps)."""
    packs = [{"id": pack, "blobs": [list(b) for b in blobs]} for pack, blobs in index.packs.items()]
    return dump_json({"packs": packs, "supersedes": list(index.supersedes)})


def parse_index_json(data: bytes, name: str) -> IndexFile:
    """An index file's plaintext JSON read strictly (``name``: ``index/<id>``, for errors)."""
    what = f"index file {name}"
    doc = load_object(data, what)
    packs: dict[str, list[Blob]] = {}
    for n, item in enumerate(doc.items("packs")):
        if type(item) is not dict:
            raise corrupt(what, f"pack {n} is not a JSON object")
        pack = text(item.get("id"), what, f"pack {n}'s id")
        if not ID_RE.match(pack) or pack in packs:
            raise corrupt(what, f"pack {n}'s id {pack!r} is not a SHA-256 or is listed twice")
        packs[pack] = blob_list(item.get("blobs"), f"{what} (pack {pack})")
    supersedes = [text(old, what, "supersedes") for old in doc.items("supersedes")]
    if not all(ID_RE.match(old) for old in supersedes):
        raise corrupt(what, "it supersedes a name that is not an index id")
    return IndexFile(packs, supersedes)


def encode_index(master: MasterKey, index: IndexFile) -> bytes:
    """An index file's bytes (named ``index_name(sha256_hex(bytes))``)."""
    return seal(master, objects.compress(index_json(index)), INDEX_AAD)


def decode_index(master: MasterKey, data: bytes, name: str) -> IndexFile:
    """The index file ``name`` (``index/<id>``) from its bytes: its name must be their hash."""
    what = f"index file {name}"
    if name != index_name(sha256_hex(data)):
        raise corrupt(what, "its bytes do not hash to its name")
    frame = open_sealed(master, data, INDEX_AAD, what)
    try:
        plaintext = objects.decompress(frame, MAX_INDEX_JSON)
    except CorruptObject as exc:
        raise corrupt(what, exc.message) from None
    return parse_index_json(plaintext, name)


class Doomed(NamedTuple):
    """A doomed list (``doomed/<sha256 of the file>``, aad ``b"doomed"``): packs prune found
    unreferenced at ``time``; pushers treat their objects as absent, prune deletes them once
    they are still unreferenced a grace later."""

    packs: frozenset[str]
    time: int  # ns since the epoch


def doomed_name(data: bytes) -> str:
    return "doomed/" + sha256_hex(data)


def encode_doomed(master: MasterKey, doomed: Doomed) -> bytes:
    """A doomed list's bytes (named ``doomed_name(bytes)``)."""
    return seal(master, dump_json({"packs": sorted(doomed.packs), "time": doomed.time}), DOOMED_AAD)


def decode_doomed(master: MasterKey, data: bytes, name: str) -> Doomed:
    what = f"doomed list {name}"
    if name != doomed_name(data):
        raise corrupt(what, "its bytes do not hash to its name")
    doc = load_object(open_sealed(master, data, DOOMED_AAD, what), what)
    packs = [text(pack, what, "packs") for pack in doc.items("packs")]
    if not all(ID_RE.match(pack) for pack in packs):
        raise corrupt(what, "it lists a name that is not a pack id")
    return Doomed(frozenset(packs), doc.number("time"))
