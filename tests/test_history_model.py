"""Time references and the workspace as captured at an instant, against models (hypothesis).

- :mod:`snapd.timeref`: relative forms against the clock given; absolute forms with an offset;
  local times against ``zoneinfo``'s own reading of the zone (a different method from the
  module's), the repeated and the skipped hour refused; the wire form round-trips.
- :func:`snapd.store.history.at_time`: a random history of writes, deletions of files and of
  whole directories (one deletion row, as for a directory moved away), type changes and
  directory modes, with marks in between, written into a real store as the capture writes it
  (versions with one time per capture; marks after their captures). The workspace rebuilt at
  any instant must equal the model's state at that instant.
"""

from __future__ import annotations

import calendar
import datetime
import time
import zoneinfo
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from snapd import timeref
from snapd.config import DAY_NS, Retention
from snapd.errors import NotFound, UsageError
from snapd.paths import ancestors, strictly_below
from snapd.store import gc, history, trees
from snapd.store.records import Mark
from snapd.store.records import State as StoreState
from snapd.store.store import Store

BERLIN = zoneinfo.ZoneInfo("Europe/Berlin")
NS = timeref.NS


def zone_offset(zone: datetime.tzinfo) -> timeref.Offset:
    def offset(t: int) -> int:
        off = datetime.datetime.fromtimestamp(t, zone).utcoffset()
        assert off is not None
        return int(off.total_seconds())

    return offset


# -- time references ------------------------------------------------------------------------------


@given(n=st.integers(0, 10**9 - 1), unit=st.sampled_from("smhd"), now=st.integers(10**18, 2 * 10**18))
def test_relative_times_count_back_from_the_clock(n: int, unit: str, now: int) -> None:
    """Back to 1970; further is "too far back", never a negative year quoted (issue 31, 8)."""
    # the units' seconds written out here: the module's own table would agree with any mistake
    seconds = {"s": 1, "m": 60, "h": 3600, "d": 86_400}[unit]
    want = now - n * seconds * NS
    if want < 0:
        with pytest.raises(UsageError, match="too far back"):
            timeref.resolve(f"@{n}{unit}", now, zone_offset(BERLIN))
    else:
        assert timeref.resolve(f"@{n}{unit}", now, zone_offset(BERLIN)) == want


def test_yesterday_is_24_hours_ago() -> None:
    assert timeref.resolve("@yesterday", 10**18, zone_offset(BERLIN)) == 10**18 - 86_400 * NS


@given(ns=st.integers(0, 4 * 10**18))
def test_the_wire_form_round_trips_to_the_nanosecond(ns: int) -> None:
    assert timeref.parse_wire(timeref.wire(ns)) == ns


@given(
    t=st.integers(0, 4 * 10**9),
    east=st.integers(-14 * 60, 14 * 60).map(lambda m: m * 60),
    sep=st.sampled_from(["T", " "]),
)
def test_an_explicit_offset_is_taken_as_given(t: int, east: int, sep: str) -> None:
    wall = datetime.datetime.fromtimestamp(t + east, datetime.UTC)
    sign = "-" if east < 0 else "+"
    hh, mm = divmod(abs(east) // 60, 60)
    ref = f"@{wall:%Y-%m-%d}{sep}{wall:%H:%M:%S}{sign}{hh:02d}:{mm:02d}"
    assert timeref.parse_wire(ref) == t * NS
    assert timeref.resolve(ref, 0, zone_offset(BERLIN)) == t * NS


@given(t=st.integers(calendar.timegm((2020, 1, 1, 0, 0, 0)), calendar.timegm((2031, 1, 1, 0, 0, 0))))
@settings(max_examples=400)
def test_local_times_resolve_as_zoneinfo_reads_them(t: int) -> None:
    """A local wall-clock time names the one instant that shows it; one shown twice (fold)
    is refused. zoneinfo is the oracle: it tells a repeated wall time by its two folds."""
    wall = datetime.datetime.fromtimestamp(t, BERLIN).replace(tzinfo=None)
    ref = f"@{wall:%Y-%m-%dT%H:%M:%S}"
    first, second = (wall.replace(tzinfo=BERLIN, fold=f) for f in (0, 1))
    if first.utcoffset() != second.utcoffset():  # the hour the clock is set back: shown twice
        with pytest.raises(UsageError, match="happened twice"):
            timeref.resolve(ref, 0, zone_offset(BERLIN))
    else:
        assert timeref.resolve(ref, 0, zone_offset(BERLIN)) == t * NS


@pytest.mark.parametrize(
    ("ref", "why"),
    [
        ("@2026-10-25T02:30", "happened twice"),  # Berlin sets the clock back from 03:00 to 02:00
        ("@2026-10-25 02:00:00", "happened twice"),
        ("@2026-03-29 02:30", "never happened"),  # ... and forward from 02:00 to 03:00
        ("@2026-13-01T00:00", "not a valid date"),
        ("@2026-02-30T00:00", "not a valid date"),
        ("@5 minutes", "not a time"),
        ("@", "not a time"),
    ],
)
def test_times_that_name_no_single_instant_are_refused(ref: str, why: str) -> None:
    with pytest.raises(UsageError, match=why):
        timeref.resolve(ref, 0, zone_offset(BERLIN))


def test_the_daemon_takes_only_absolute_times_with_their_offset() -> None:
    for ref in ("@10m", "@yesterday", "@2026-11-30T14:03:05"):
        with pytest.raises(UsageError, match="client"):
            timeref.parse_wire(ref)
    assert timeref.parse_wire("@2026-11-30T14:03:05+01:00") == timeref.parse_wire("@2026-11-30T13:03:05Z")


# -- the workspace at an instant ----------------------------------------------------------------

PATHS = [b"a", b"a/x", b"a/b", b"a/b/y", b"c", b"c/z", b"w"]
DIR_MODES = [0o755, 0o700, 0o750]
State = dict[bytes, tuple[str, int, bytes]]  # path -> (kind, mode, content)

ops = st.lists(
    st.one_of(
        st.tuples(st.just("write"), st.sampled_from(PATHS), st.sampled_from([b"1", b"22", b""]),
                  st.sampled_from([0o644, 0o600])),
        st.tuples(st.just("delete"), st.sampled_from(PATHS)),
        st.tuples(st.just("mkdir"), st.sampled_from(PATHS), st.sampled_from(DIR_MODES)),
        st.tuples(st.just("mark"), st.sampled_from(["user", "user", "pre-rollback"])),
    ),
    max_size=30,
)


class Model:
    """The workspace as the capture sees it, and the rows a capture would write for each change."""

    def __init__(self) -> None:
        self.state: State = {}
        self.rows: list[tuple[bytes, tuple[str, int, bytes] | None]] = []

    def _dir(self, p: bytes, mode: int) -> None:
        if self.state.get(p, ("",))[0] != "dir":
            self._drop_below(p)
        self.state[p] = ("dir", mode, b"")
        self.rows.append((p, self.state[p]))

    def _drop_below(self, p: bytes) -> None:
        for q in [q for q in self.state if strictly_below(q, p)]:
            del self.state[q]

    def _parents(self, p: bytes) -> None:
        for a in ancestors(p):
            if self.state.get(a, ("",))[0] != "dir":
                self._dir(a, 0o755)

    def step(self, op: tuple[object, ...]) -> None:
        self.rows = []
        kind, path = op[0], op[1]
        assert isinstance(path, bytes)
        if kind == "write":
            self._parents(path)
            self._drop_below(path)  # a directory replaced by a file: gone with all it held
            self.state[path] = ("file", int(op[3]), bytes(op[2]))  # type: ignore[call-overload]
            self.rows.append((path, self.state[path]))
        elif kind == "mkdir":
            self._parents(path)
            self._dir(path, int(op[2]))  # type: ignore[call-overload]
        elif kind == "delete" and path in self.state:
            self._drop_below(path)
            del self.state[path]
            self.rows.append((path, None))  # one row, as for a directory moved away


def _entries(store: Store, tree: str) -> dict[bytes, tuple[str, int, int, str]]:
    walked = trees.walk(store.load_node, tree)
    return {p: (e.kind, e.mode, e.size, "" if e.kind == "dir" else e.key) for p, e in walked}


def _tree_of(state: State, keys: dict[bytes, str]) -> dict[bytes, trees.Change]:
    return {
        p: trees.Dir(mode) if kind == "dir" else trees.Entry("file", mode, len(data), keys[data])
        for p, (kind, mode, data) in state.items()
    }


@given(steps=ops, probes=st.lists(st.integers(0, 40_000), min_size=1, max_size=12))
# A directory deleted (or replaced by a file) and made again after a mark: nothing it held
# at the mark comes back.
@example(steps=[("write", b"a/x", b"1", 0o644), ("mark", "user"), ("delete", b"a"), ("mkdir", b"a", 0o700)],
         probes=[40_000])
@example(steps=[("write", b"a/b/y", b"1", 0o644), ("mark", "user"), ("write", b"a", b"22", 0o600),
                ("write", b"a/x", b"1", 0o644)], probes=[4000, 5000, 6000])
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_the_workspace_at_any_instant_is_the_state_captured_then(
    tmp_path_factory: pytest.TempPathFactory, steps: list[tuple[object, ...]], probes: list[int]
) -> None:
    store = Store.open(tmp_path_factory.mktemp("s"))
    try:
        ws = store.add_workspace(b"/model/ws")
        model = Model()
        truth: list[tuple[int, State]] = []
        keys: dict[bytes, str] = {}
        with store.batch() as batch:
            for data in (b"1", b"22", b""):
                keys[data] = batch.put(data)
        for i, op in enumerate([("mark", "baseline"), *steps]):
            t = 1000 + i * 1000
            with store.batch() as batch:
                if op[0] == "mark":
                    tree = batch.apply(None, _tree_of(model.state, keys))
                    batch.add_mark(ws, "m", tree, kind=str(op[1]), created=t)
                else:
                    model.step(op)
                    for path, row in model.rows:  # one capture: one time for all its rows
                        entry = None
                        if row is not None:
                            kind, mode, data = row
                            entry = trees.Entry("dir", mode, 0, "") if kind == "dir" else trees.Entry(
                                "file", mode, len(data), keys[data]
                            )
                        batch.add_version(ws, path, t, entry)
            truth.append((t, dict(model.state)))
        for probe in probes:
            want = [state for t, state in truth if t <= probe]
            at = history.at_time(store, ws, probe, now=10**12)
            if not want:  # before the workspace's history: its baseline (issue 31, point 8)
                want = [truth[0][1]]
                assert at.instant == truth[0][0] and at.base.kind == "baseline", probe
            with store.batch() as batch:
                expected = batch.apply(None, _tree_of(want[-1], keys))
            assert _entries(store, at.tree) == _entries(store, expected), (probe, steps)
    finally:
        store.close()


def test_a_time_whose_versions_retention_deleted_is_refused(tmp_path: Path) -> None:
    """GC records where it pruned versions; a rebuild that would need them is refused, one
    that starts from a mark after that point is not."""
    with Store.open(tmp_path / "s") as store:
        ws = store.add_workspace(b"/model/ws")
        day = DAY_NS
        with store.batch() as batch:
            key = batch.put(b"x")
            old = batch.add_mark(ws, "m", batch.apply(None, {}), created=day)
            batch.add_version(ws, b"f", 2 * day, trees.Entry("file", 0o644, 1, key))
        with store.batch() as batch:
            f = {b"f": trees.Entry("file", 0o644, 1, key)}
            batch.add_mark(ws, "m", batch.apply(None, f), created=20 * day)
        store.set_pinned(old.id, True)  # kept by retention, so it stays the base for day 3
        with store.catalog.write() as c:  # the workspace predates the cutoff
            c.execute("UPDATE workspaces SET created=0 WHERE id=?", (ws,))
        assert history.at_time(store, ws, 3 * day, now=4 * day).used == {b"f": 2 * day}
        gc.run(store, Retention(max_age_days=10), now=21 * day)
        assert history.pruned_before(store, ws) == 11 * day
        with pytest.raises(NotFound, match="retention deleted"):
            history.at_time(store, ws, 3 * day, now=21 * day)
        assert history.at_time(store, ws, 20 * day, now=21 * day).base.created == 20 * day
        assert old.id != history.at_time(store, ws, 20 * day, now=21 * day).base.id


def test_the_states_inside_the_age_window_keep_their_trees_through_gc(tmp_path: Path) -> None:
    """A state's tree may be referenced by nothing else (a capture between marks, the head long
    moved on): GC keeps it while the state is inside the age window, and deletes older states
    with their versions, so a time there is refused rather than read from swept nodes."""
    with Store.open(tmp_path / "s") as store:
        ws = store.add_workspace(b"/model/ws")
        day, now = DAY_NS, time.time_ns() + NS  # the objects' own times are the real clock's
        with store.batch() as batch:
            key, other = batch.put(b"between marks"), batch.put(b"old state")
            batch.add_mark(ws, "m", batch.apply(None, {}), created=now - 13 * day)
            old = batch.apply(None, {b"o": trees.Entry("file", 0o644, 9, other)})
            batch.add_state(StoreState(ws, now - 12 * day, old, None, 0o700))
            mid = batch.apply(None, {b"d/f": trees.Entry("file", 0o600, 13, key)})
            batch.add_state(StoreState(ws, now - day, mid, None, 0o750))
            batch.set_head(ws, batch.apply(None, {}))
        with store.catalog.write() as c:  # the workspace predates the cutoff
            c.execute("UPDATE workspaces SET created=0 WHERE id=?", (ws,))
        gc.run(store, Retention(max_age_days=10, grace_s=0), now=now)
        at = history.at_time(store, ws, now - day + 1, now=now)
        assert at.root_mode == 0o750
        files = {p: e.key for p, e in trees.walk(store.load_node, at.tree) if e.kind == "file"}
        assert files == {b"d/f": key}
        assert store.get(key) == b"between marks"
        with pytest.raises(NotFound, match="retention deleted"):
            history.at_time(store, ws, now - 12 * day + 1, now=now)
        assert not store.has(other), "the object of a state past the age window was kept"


def _mark(seq: int, kind: str, created: int) -> Mark:
    return Mark(f"m{seq}", 1, seq, kind, None, None, None, created, None, "t", kind, False, {})


def test_the_base_of_a_rebuild_is_never_a_pre_rollback_mark_when_another_is_there() -> None:
    """``base_mark`` (pure): the newest mark at or before the instant that is not a
    pre-rollback mark; a pre-rollback mark only when nothing else came before."""
    user, pre, later = _mark(2, "user", 2000), _mark(3, "pre-rollback", 3000), _mark(4, "user", 9000)
    newest_first = [later, pre, user, _mark(1, "baseline", 1000)]
    assert history.base_mark(newest_first, 5000) == user
    assert history.base_mark(newest_first, 3000) == user
    assert history.base_mark(newest_first, 9000) == later
    assert history.base_mark([pre], 5000) == pre
    assert history.base_mark(newest_first, 999) is None


def test_a_legacy_rebuild_after_a_rollback_starts_from_the_mark_before_it(tmp_path: Path) -> None:
    """History older than format 8 (no recorded states) is rebuilt from a base mark plus the
    versions after it. A pre-rollback mark holds what the capture never recorded as versions
    (the extras the rollback held: ignored files it was about to touch), so a rebuild from it
    would show a file that was never captured at that instant. The base is the user mark."""
    with Store.open(tmp_path / "s") as store:
        ws = store.add_workspace(b"/model/ws")
        with store.batch() as batch:
            one, two = batch.put(b"1"), batch.put(b"22")
            f1 = {b"f": trees.Entry("file", 0o644, 1, one)}
            user = batch.add_mark(ws, "m", batch.apply(None, f1), created=1000)
            batch.add_version(ws, b"f", 2000, trees.Entry("file", 0o644, 2, two))
            held = {
                b"f": trees.Entry("file", 0o644, 2, two),
                b"build.log": trees.Entry("file", 0o600, 1, one),  # an extra it held: no version
            }
            batch.add_mark(ws, "pre-rollback", batch.apply(None, held), kind="pre-rollback", created=3000)
            batch.add_version(ws, b"f", 4000, trees.Entry("file", 0o644, 1, one))
        db = store.catalog.read()
        if db.execute("SELECT 1 FROM sqlite_master WHERE name='states'").fetchone():
            with store.catalog.write() as c:
                c.execute("DELETE FROM states")  # format 8 on: as if this history predates them
        at = history.at_time(store, ws, 5000, now=10**12)
        assert at.base.id == user.id
        assert _entries(store, at.tree) == {b"f": ("file", 0o644, 1, one)}
