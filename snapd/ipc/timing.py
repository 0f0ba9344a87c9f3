"""The daemon's own measure of its share of each request: time from receipt to reply.

The server's loop thread stamps a request when it takes it off the socket and records the
elapsed time when it hands the reply back to the socket, so the figure holds the queueing
before a worker picks the request up, the handler, the JSON encoding and the wait for the
loop to send it. It leaves out only what no daemon can see: the client's own start-up and
the socket transfer. Retries answered from the dedup cache are not counted (no work done).

Kept as a fixed-bucket histogram per op (``status --json`` shows it under ``requests``), so
the cost is one list increment per request and the memory is bounded whatever the uptime.
The bucket bounds include every target a benchmark checks (10 ms, 20 ms), so "p99 ≤ 20 ms"
is decided exactly from the counts, never interpolated. Thread-safe: the loop thread records,
a worker thread (``status``) reads.
"""

from __future__ import annotations

import bisect
import threading
from collections.abc import Callable
from typing import Any

from snapd.ipc import protocol

# Upper bounds of the buckets, milliseconds (a value equal to a bound falls in that bucket);
# one more bucket above the last bound holds everything slower.
BOUNDS_MS: tuple[float, ...] = (
    0.5, 1, 2, 3, 5, 7.5, 10, 15, 20, 30, 50, 75, 100, 150, 200, 300, 500, 750,
    1_000, 2_000, 5_000, 10_000, 30_000, 60_000,
)


class _OpHistogram:
    __slots__ = ("counts", "total_ms", "max_ms")

    def __init__(self) -> None:
        self.counts = [0] * (len(BOUNDS_MS) + 1)
        self.total_ms = 0.0
        self.max_ms = 0.0


class RequestTimings:
    """Per-op histograms of receipt-to-reply times."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._ops: dict[str, _OpHistogram] = {}

    def record(self, op: str, seconds: float) -> None:
        ms = seconds * 1000.0
        i = bisect.bisect_left(BOUNDS_MS, ms)
        with self._lock:
            h = self._ops.get(op)
            if h is None:
                h = self._ops[op] = _OpHistogram()
            h.counts[i] += 1
            h.total_ms += ms
            h.max_ms = max(h.max_ms, ms)

    def snapshot(self) -> dict[str, Any]:
        """``{"bounds_ms": [...], "ops": {op: {"count", "sum_ms", "max_ms", "buckets"}}}``;
        ``buckets`` has one count per bound plus a last one for slower requests."""
        with self._lock:
            ops = {
                op: {
                    "count": sum(h.counts),
                    "sum_ms": round(h.total_ms, 3),
                    "max_ms": round(h.max_ms, 3),
                    "buckets": list(h.counts),
                }
                for op, h in sorted(self._ops.items())
            }
        return {"bounds_ms": list(BOUNDS_MS), "ops": ops}


def quantile_bound(buckets: list[int], q: float) -> float:
    """The smallest bucket bound (ms) under which at least a fraction ``q`` of the counted
    requests fall; ``inf`` when that takes the overflow bucket, ``nan`` when nothing counted."""
    total = sum(buckets)
    if total == 0:
        return float("nan")
    need = q * total
    seen = 0
    for bound, n in zip((*BOUNDS_MS, float("inf")), buckets, strict=True):
        seen += n
        if seen >= need:
            return bound
    return float("inf")  # pragma: no cover - the loop always reaches the last bucket


def difference(after: dict[str, Any], before: dict[str, Any], op: str) -> list[int]:
    """Bucket counts of ``op`` recorded between two snapshots (a benchmark's window)."""
    a = after["ops"].get(op, {}).get("buckets") or [0] * (len(BOUNDS_MS) + 1)
    b = before["ops"].get(op, {}).get("buckets") or [0] * (len(BOUNDS_MS) + 1)
    return [x - y for x, y in zip(a, b, strict=True)]


def with_timings_in_status(
    handler: Callable[[protocol.Request, protocol.PeerInfo], dict[str, Any]], timings: RequestTimings
) -> Callable[[protocol.Request, protocol.PeerInfo], dict[str, Any]]:
    """``handler`` whose ``status`` result also carries ``requests``: the timings so far."""

    def handle(request: protocol.Request, peer: protocol.PeerInfo) -> dict[str, Any]:
        result = handler(request, peer)
        if request.op == "status" and isinstance(result, dict):
            result = {**result, "requests": timings.snapshot()}
        return result

    return handle
