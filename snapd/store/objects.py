"""Object encoding: content keys, compression, and verified decoding.

An object is an immutable byte string named by its key: the xxh3-128 digest of the content
(32 hex digits) and its size, ``<digest>-<size>``. xxh3 is fast but not collision-resistant
against crafted input, so the store compares bytes whenever a key already exists and, on a
real collision, names the second content ``<digest>-<size>.1`` (``.2``...). The digest in a
key always describes the content, so every read can be re-hashed: a payload whose content does
not hash to its key is corruption and is never returned.

Payloads are zstd frames, or the raw bytes when compression does not shrink them (files that
are already compressed), or a **delta**: a zstd frame compressed with another object's content
(its *base*, usually the path's previous version) as a raw-content dictionary, so a small edit
costs a few dozen bytes. Decoding a delta needs the base's content, itself verified; chains
are at most :data:`MAX_DEPTH` deltas long, so a read costs a bounded number of object reads.
Whatever the codec, the decoded bytes are checked against the key. This is the only module
that imports ``xxhash`` and ``zstandard``.
"""

from __future__ import annotations

import hashlib
import re
import threading
from collections.abc import Callable
from typing import Final

import xxhash
import zstandard

from snapd.errors import CorruptObject

CODEC_RAW: Final = 0
CODEC_ZSTD: Final = 1
CODEC_DELTA: Final = 2
ZSTD_LEVEL: Final = 3
DELTA_LEVEL: Final = 1  # with a dictionary, level 1 is both faster and as small as 3 on edits
MAX_DEPTH: Final = 8
"""Longest delta chain: reading an object costs at most this many extra object reads."""
DELTA_GAIN: Final = 2
"""A delta is kept only if it is at most 1/DELTA_GAIN of the whole encoding's size."""

Hasher = Callable[[bytes], str]
"""Content -> 32 lower-case hex digits. Injectable so tests can force collisions."""

KEY_RE: Final = re.compile(r"^([0-9a-f]{32})-([0-9]+)(?:\.([1-9][0-9]*))?$")


def xxh3_hex(data: bytes) -> str:
    return xxhash.xxh3_128_hexdigest(data)


def xxh3_64_digest(key: str) -> bytes:
    """8 bytes standing for an object key where a set of many would cost too much (a sweep's
    touched keys, :mod:`snapd.store.holds`): equal keys, equal digests; a collision is rare."""
    return xxhash.xxh3_64_digest(key.encode())


def fingerprint(data: bytes) -> bytes:
    """A cryptographic digest standing in for the bytes wherever a content is compared without
    them: a batch re-meeting a content, a content read by a reader process (SHA-256:
    collision-resistant, unlike xxh3, and the fastest here)."""
    return hashlib.sha256(data).digest()


def base_key(digest: str, size: int) -> str:
    return f"{digest}-{size}"


def variant_key(base: str, n: int) -> str:
    """The n-th colliding content's key (n == 0 is the base key itself)."""
    return base if n == 0 else f"{base}.{n}"


def parse_key(key: str) -> tuple[str, int]:
    """Validate a key before any I/O; return (digest, size)."""
    m = KEY_RE.match(key)
    if m is None:
        raise CorruptObject(f"malformed object key {key!r}")
    return m.group(1), int(m.group(2))


def db_key(key: str) -> bytes | str:
    """``key`` as the catalog stores it (format 6): the digest's 16 bytes, then the size and
    the variant (if any) as LEB128 varints: 18-20 bytes instead of 36-40 characters. A text that
    is not an object key (an uncaptured entry's ``!INODE.MTIME_NS!REASON``) stays text: a BLOB
    and a TEXT never compare equal in SQLite, so the two cannot be confused."""
    m = KEY_RE.match(key)
    if m is None:
        return key
    digest, size, variant = m.groups()
    out = bytearray(bytes.fromhex(digest))
    for n in (int(size), *((int(variant),) if variant else ())):
        while n >= 0x80:
            out.append(n & 0x7F | 0x80)
            n >>= 7
        out.append(n)
    return bytes(out)


def py_key(value: bytes | str) -> str:
    """The key a catalog value stands for (the inverse of :func:`db_key`)."""
    if isinstance(value, str):
        return value
    numbers: list[int] = []
    n = shift = 0
    for byte in value[16:]:
        n |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            numbers.append(n)
            n = shift = 0
    if len(value) < 17 or shift or not 1 <= len(numbers) <= 2 or (len(numbers) == 2 and numbers[1] == 0):
        raise CorruptObject(f"malformed object key in the catalog: {bytes(value).hex()}")
    key = base_key(bytes(value[:16]).hex(), numbers[0])
    return variant_key(key, numbers[1]) if len(numbers) == 2 else key


_local = threading.local()


def _compressor() -> zstandard.ZstdCompressor:
    # zstd contexts are not thread safe; one per thread, reused across objects.
    c = getattr(_local, "cctx", None)
    if c is None:
        c = _local.cctx = zstandard.ZstdCompressor(level=ZSTD_LEVEL)
    return c


def _decompressor() -> zstandard.ZstdDecompressor:
    d = getattr(_local, "dctx", None)
    if d is None:
        d = _local.dctx = zstandard.ZstdDecompressor()
    return d


def encode(data: bytes) -> tuple[int, bytes]:
    """Compress ``data``; keep it raw when zstd does not make it smaller."""
    if len(data) < 64:
        return CODEC_RAW, data
    packed = _compressor().compress(data)
    if len(packed) >= len(data):
        return CODEC_RAW, data
    return CODEC_ZSTD, packed


def compress(data: bytes) -> bytes:
    """One zstd frame of ``data``, its size in the frame's header (a remote's index files)."""
    return _compressor().compress(data)


def decompress(frame: bytes, limit: int) -> bytes:
    """The bytes of one zstd frame; ``CorruptObject`` if it is damaged or would pass ``limit``
    bytes (a frame's own size is checked before any memory is taken for it)."""
    try:
        size = zstandard.frame_content_size(frame)
        if size > limit:
            raise CorruptObject(f"a zstd frame of {size} bytes is past the limit of {limit}")
        return _decompressor().decompress(frame, max_output_size=limit)
    except zstandard.ZstdError as exc:
        raise CorruptObject(f"a zstd frame does not decompress: {exc}") from exc


_DELTA_FORMAT: Final = zstandard.FORMAT_ZSTD1_MAGICLESS


def _raw_dict(base: bytes) -> zstandard.ZstdCompressionDict:
    return zstandard.ZstdCompressionDict(base, dict_type=zstandard.DICT_TYPE_RAWCONTENT)


MAX_DELTA_WINDOW_LOG: Final = 27  # what a decompressor accepts without being told (128 MiB)
MAX_DELTA_HASH_LOG: Final = 24  # a 64 MiB match table, for bases of 128 MiB and more


def delta_params(base_size: int, size: int) -> zstandard.ZstdCompressionParameters:
    """The compression parameters of a delta of ``size`` bytes against a base of ``base_size``.

    The level's own parameters are sized for the input, not for a large dictionary: zstd
    matches only the part of a dictionary inside its window, and its fast strategy only the
    positions its hash table still holds. So the window covers base and data, and the table
    has a slot per 8 bytes of base. Measured on the npm corpus (an edit in the middle of a
    15.6 MB source map): 3,228,298 bytes with the level's parameters, 1,508 with these; a line
    appended to a 522 KB file: 33,390 against 71. Bases under ~128 KiB keep the level's."""
    level = zstandard.ZstdCompressionParameters.from_level
    params = level(DELTA_LEVEL, source_size=size, dict_size=base_size)
    window_log = max(params.window_log, min(MAX_DELTA_WINDOW_LOG, (base_size + size).bit_length()))
    hash_log = max(params.hash_log, min(MAX_DELTA_HASH_LOG, base_size.bit_length() - 3))
    return level(
        DELTA_LEVEL,
        source_size=size,
        dict_size=base_size,
        window_log=window_log,
        hash_log=hash_log,
        write_dict_id=False,
        format=_DELTA_FORMAT,
    )


def encode_delta(base: bytes, data: bytes) -> bytes:
    """``data`` as one zstd frame compressed with ``base`` as a raw-content dictionary.

    The frame has no magic number (codec 2 says what it is: 4 bytes of a ~50-byte delta)."""
    params = delta_params(len(base), len(data))
    return zstandard.ZstdCompressor(compression_params=params, dict_data=_raw_dict(base)).compress(data)


def worth_delta(delta: bytes, data: bytes, whole: tuple[int, bytes] | None) -> tuple[int, bytes] | None:
    """None when a delta of ``data`` saves enough over its whole encoding (``whole``, or
    computed here) to be worth its extra read; else the whole encoding, to store instead.

    A delta under 1/16 of the content is worth it whatever the whole encoding (zstd does not
    shrink source text or tree nodes 8-fold): that encoding is then never computed."""
    if whole is None and len(delta) * 8 * DELTA_GAIN <= len(data):
        return None
    whole = whole or encode(data)
    return None if len(delta) * DELTA_GAIN <= len(whole[1]) else whole


def matches(key: str, data: bytes, hasher: Hasher = xxh3_hex) -> bool:
    """Whether ``data`` is the content ``key`` names (length and digest)."""
    digest, size = parse_key(key)
    return len(data) == size and hasher(data) == digest


def decode(
    key: str, codec: int, payload: bytes, hasher: Hasher = xxh3_hex, base: bytes | None = None
) -> bytes:
    """Decode a stored payload and prove it is the content ``key`` names.

    ``base``: for a delta, the (verified) content of the object it was compressed against."""
    digest, size = parse_key(key)
    try:
        if codec == CODEC_RAW:
            data = payload
        elif codec == CODEC_ZSTD:
            data = _decompressor().decompress(payload, max_output_size=size)
        elif codec == CODEC_DELTA and base is not None:
            dctx = zstandard.ZstdDecompressor(dict_data=_raw_dict(base), format=_DELTA_FORMAT)
            data = dctx.decompress(payload, max_output_size=size)
        else:
            raise CorruptObject(f"object {key} has unknown codec {codec}", key=key)
    except zstandard.ZstdError as exc:
        raise CorruptObject(f"object {key} does not decompress: {exc}", key=key) from exc
    if len(data) != size or hasher(data) != digest:
        raise CorruptObject(f"object {key} is corrupt: its content does not match its key", key=key)
    return bytes(data)
