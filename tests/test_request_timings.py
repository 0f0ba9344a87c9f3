"""The daemon's own measure of its share of each request (snapd/ipc/timing.py): receipt to
reply, per op, as a histogram in ``status --json`` under ``requests``."""

from __future__ import annotations

import math
from pathlib import Path

from e2e_helpers import Daemon, cli_mark, write

from snapd.ipc.timing import BOUNDS_MS, RequestTimings, difference, quantile_bound


def test_bounds_hold_the_targets_so_verdicts_are_exact() -> None:
    assert 10 in BOUNDS_MS and 20 in BOUNDS_MS
    assert list(BOUNDS_MS) == sorted(set(BOUNDS_MS))


def test_a_value_on_a_bound_falls_under_it_and_quantiles_are_bucket_bounds() -> None:
    t = RequestTimings()
    for ms in [1.0] * 98 + [20.0, 20.004]:
        t.record("mark", ms / 1000)
    snap = t.snapshot()
    mark = snap["ops"]["mark"]
    assert mark["count"] == 100 and sum(mark["buckets"]) == 100
    assert mark["buckets"][BOUNDS_MS.index(20)] == 1  # 20.0 ms is "<= 20"
    assert mark["buckets"][BOUNDS_MS.index(30)] == 1  # 20.004 ms is not
    assert quantile_bound(mark["buckets"], 0.5) == 1
    assert quantile_bound(mark["buckets"], 0.99) == 20
    assert quantile_bound(mark["buckets"], 1.0) == 30
    assert math.isclose(mark["max_ms"], 20.004)


def test_slower_than_the_last_bound_is_counted_not_lost() -> None:
    t = RequestTimings()
    t.record("watch", 3600.0)
    buckets = t.snapshot()["ops"]["watch"]["buckets"]
    assert buckets[-1] == 1 and quantile_bound(buckets, 0.99) == math.inf
    assert math.isnan(quantile_bound([0] * len(buckets), 0.5))


def test_difference_is_the_window_between_two_snapshots() -> None:
    t = RequestTimings()
    t.record("mark", 0.004)
    before = t.snapshot()
    t.record("mark", 0.004)
    t.record("mark", 0.012)
    window = difference(t.snapshot(), before, "mark")
    assert sum(window) == 2 and quantile_bound(window, 1.0) == 15
    assert sum(difference(t.snapshot(), before, "rollback_apply")) == 0


def test_status_json_reports_the_daemons_share_of_each_mark(daemon: Daemon, ws: Path) -> None:
    for i in range(3):
        write(ws / "f.txt", f"v{i}\n")
        cli_mark(daemon, ws, f"turn-{i}")
    st = daemon.ctl_json("status")
    req = st["requests"]
    assert req["bounds_ms"] == list(BOUNDS_MS)
    mark = req["ops"]["mark"]
    assert mark["count"] == 3 and sum(mark["buckets"]) == 3, mark
    assert 0 < mark["sum_ms"] and mark["max_ms"] <= mark["sum_ms"]
    assert len(mark["buckets"]) == len(BOUNDS_MS) + 1
    assert req["ops"]["watch"]["count"] == 1
