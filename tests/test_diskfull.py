"""Full disks, for real: small tmpfs mounts under the store, or under the workspace.

Each case fills a real file system (:func:`disks.fill`) and drives a real daemon with the real
CLI. A baseline, a mark, a rollback and GC each meet ENOSPC; each must fail with a clear
"disk full" error and exit code 8, leave the store consistent (``verify``), keep the daemon
serving, and succeed once the space is freed — with nothing the failed operation saw lost. A
rollback that fills the *workspace's* disk half-way is finished once space is freed, never
left half done.

The catalog's write-ahead log keeps its size between checkpoints, so a disk filled while it
has room lets small transactions through; the cases that must hit ENOSPC in SQLite restart the
daemon first (a clean stop checkpoints and removes the log).
"""

from __future__ import annotations

import os
import random
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from disks import fill, tmpfs
from e2e_helpers import Daemon, Snap, base_env, describe, no_cookies, snap_diff, snapshot, start_daemon

pytestmark = [pytest.mark.powercut, pytest.mark.timeout(300)]

STORE_FS = 48 << 20
BIG = 2 << 20  # random bytes: an object file of its own, too big for the space left


@dataclass
class FullStore:
    """A daemon whose ``SNAPD_HOME`` is on a small tmpfs that the test fills and frees."""

    fs: Path
    env: dict[str, str]
    d: Daemon

    @property
    def filler(self) -> Path:
        return self.fs / "filler"

    def fill(self) -> None:
        assert fill(self.filler) > 0

    def free(self) -> None:
        self.filler.unlink()

    def restart(self) -> None:
        """Stop (SQLite checkpoints and removes its log) and start again: the next catalog
        write needs new space."""
        assert self.d.stop() == 0
        self.d = start_daemon(self.fs / "home", self.env)

    def fails_full(self, *args: str) -> subprocess.CompletedProcess[bytes]:
        """``snapctl ARGS`` fails with exit 8 saying the disk is full; the daemon still serves
        and its store is consistent."""
        cp = self.d.ctl(*args, check=False, timeout=60)
        assert cp.returncode == 8 and b"disk full" in cp.stderr, describe(cp)
        assert b"Traceback" not in cp.stderr
        self.serving()
        return cp

    def serving(self) -> None:
        assert self.d.alive()
        self.d.ctl("status")
        cp = self.d.ctl("verify")
        assert b"clean" in cp.stdout, describe(cp)
        crashed = [ln for ln in self.d.log().splitlines() if "request.crashed" in ln]
        assert not crashed, crashed


@pytest.fixture
def store(tmp_path: Path) -> Iterator[FullStore]:
    with tmpfs(tmp_path / "storefs", STORE_FS) as fs:
        env = base_env(fs / "home")
        env.update(SNAPD_RETENTION_GRACE_S="1", SNAPD_GC_INTERVAL_S="100000")
        full = FullStore(fs, env, start_daemon(fs / "home", env))
        try:
            yield full
        finally:
            if full.filler.exists():
                full.free()
            code = full.d.stop()
            assert code == 0, full.d.log()[-3000:]


def workspace(root: Path, rng: random.Random, files: int = 8) -> Path:
    for i in range(files):
        d = root / ["a", "b/c"][i % 2]
        d.mkdir(parents=True, exist_ok=True)
        (d / f"f{i}.txt").write_bytes(f"file {i} {rng.random()}\n".encode() * 20)
    return root


def cat(d: Daemon, mark: str, ws: Path, rel: str) -> bytes:
    return d.ctl("cat", mark, str(ws / rel), "-w", str(ws)).stdout


def rollback_stopped_by_a_full_disk(d: Daemon, fs: Path, rng: random.Random) -> tuple[Path, str, Snap]:
    """A workspace on the tmpfs ``fs`` whose rollback to its mark ``m`` stopped part-way: the
    disk holds one restored big file, not three (``fs/filler``: unlink it to free the space).
    The workspace, ``m``, and the workspace as it was at ``m``."""
    ws = workspace(fs / "ws", rng)
    for i in range(3):
        (ws / f"big{i}.bin").write_bytes(rng.randbytes(BIG))
    d.ctl("watch", str(ws))
    at_m = snapshot(ws)
    m = d.ctl_json("mark", "m", "-w", str(ws))["id"]
    for i in range(3):
        (ws / f"big{i}.bin").write_bytes(rng.randbytes(BIG))
    fill(fs / "filler", leave=3 << 20)
    cp = d.ctl("rollback", "--to", m, "-y", "-w", str(ws), check=False, timeout=60)
    assert cp.returncode == 8 and b"stopped part-way" in cp.stderr, describe(cp)
    return ws, m, at_m


def test_baseline_on_a_full_store_fails_cleanly_then_succeeds(store: FullStore, tmp_path: Path) -> None:
    rng = random.Random(1)
    ws = workspace(tmp_path / "ws", rng)
    big = [rng.randbytes(BIG) for _ in range(3)]
    for i, data in enumerate(big):
        (ws / f"big{i}.bin").write_bytes(data)
    store.fill()
    store.fails_full("watch", str(ws))
    store.free()
    out = store.d.ctl_json("watch", str(ws))
    baseline = out["baseline"]["id"]
    for i, data in enumerate(big):
        assert cat(store.d, baseline, ws, f"big{i}.bin") == data


def test_marks_on_a_full_store_fail_cleanly_and_lose_nothing(store: FullStore, tmp_path: Path) -> None:
    rng = random.Random(2)
    ws = workspace(tmp_path / "ws", rng)
    store.d.ctl("watch", str(ws))
    # An object file that does not fit.
    big = rng.randbytes(BIG)
    (ws / "big.bin").write_bytes(big)
    store.fill()
    store.fails_full("mark", "full", "-w", str(ws))
    store.free()
    m = store.d.ctl_json("mark", "freed", "-w", str(ws))
    assert cat(store.d, m["id"], ws, "big.bin") == big
    # Rows the catalog cannot take: many small objects, kept inside SQLite.
    store.restart()
    small = {f"s{i}.bin": rng.randbytes(300_000) for i in range(20)}
    store.fill()
    for name, data in small.items():
        (ws / name).write_bytes(data)
    store.fails_full("mark", "full-again", "-w", str(ws))
    labels = [x["label"] for x in store.d.ctl_json("log", "-w", str(ws))["marks"]]
    assert "full" not in labels and "full-again" not in labels, labels
    store.free()
    m = store.d.ctl_json("mark", "freed-again", "-w", str(ws))
    for name, data in small.items():
        assert cat(store.d, m["id"], ws, name) == data


def test_a_failed_mark_forgets_what_it_read_of_a_linked_files_other_names(
    store: FullStore, tmp_path: Path
) -> None:
    """``ln a b; echo x >> b; rm b``: the mark reads ``a`` because ``b`` went (the only event
    is ``b``'s). When that mark's commit fails, ``a``'s new signature must not stay in the stat
    cache: only ``b`` is queued again, and ``a``'s new bytes would never be read."""
    ws = workspace(tmp_path / "ws", random.Random(4))
    a, b = ws / "a" / "linked.txt", ws / "a" / "other-name.txt"
    a.write_bytes(b"before\n")
    os.link(a, b)
    store.d.ctl("watch", str(ws))
    store.restart()  # the next catalog write needs new space
    store.fill()
    with b.open("ab") as f:
        f.write(b"written through the other name\n")
    b.unlink()
    store.fails_full("mark", "full", "-w", str(ws))
    store.free()
    m = store.d.ctl_json("mark", "freed", "-w", str(ws))
    assert cat(store.d, m["id"], ws, "a/linked.txt") == a.read_bytes()


def test_rollback_on_a_full_store_changes_nothing(store: FullStore, tmp_path: Path) -> None:
    rng = random.Random(3)
    ws = workspace(tmp_path / "ws", rng)
    store.d.ctl("watch", str(ws))
    at_m = snapshot(ws)
    m = store.d.ctl_json("mark", "m", "-w", str(ws))["id"]
    (ws / "a" / "f0.txt").write_bytes(b"edited\n")
    (ws / "new.bin").write_bytes(rng.randbytes(BIG))  # the pre-rollback mark must hold it
    store.fill()
    now = snapshot(ws)
    store.fails_full("rollback", "--to", m, "-y", "-w", str(ws))
    assert snapshot(ws) == now, snap_diff(snapshot(ws), now)
    store.free()
    store.d.ctl("rollback", "--to", m, "-y", "-w", str(ws))
    assert snapshot(ws) == at_m, snap_diff(snapshot(ws), at_m)
    store.d.ctl("undo", "-y", "-w", str(ws))
    assert snapshot(ws) == now, snap_diff(snapshot(ws), now)


def test_gc_on_a_full_store_fails_cleanly_then_reclaims(store: FullStore, tmp_path: Path) -> None:
    rng = random.Random(4)
    ws = workspace(tmp_path / "ws", rng)
    store.env["SNAPD_RETENTION_MAX_MARKS"] = "2"
    store.env["SNAPD_RETENTION_MAX_AGE_DAYS"] = str(2 / 86400)  # versions age out: content goes too
    store.restart()
    store.d.ctl("watch", str(ws))
    for k in range(6):
        for i in range(10):
            (ws / f"g{i}.bin").write_bytes(rng.randbytes(100_000))
        store.d.ctl("mark", f"m{k}", "-w", str(ws))
    # The superseded versions age out 2 s after the last mark: only then may their content go.
    aged_out = time.monotonic() + 2.5
    newest = store.d.ctl_json("log", "-w", str(ws))["marks"][0]["id"]
    store.restart()  # GC's deletions need new space in the catalog's log
    store.fill()
    store.fails_full("gc")
    warnings = store.d.ctl_json("status")["warnings"]
    assert any("the last GC failed" in w and "disk" in w for w in warnings), warnings
    store.free()
    # A condition of the test, not a wait for a result: the start-up and the CLI got fast
    # enough for all of the above to fit in 2 s, and nothing had aged out yet (CI, session 5).
    time.sleep(max(0.0, aged_out - time.monotonic()))
    out = store.d.ctl_json("gc")
    assert out["evicted"] and out["objects_deleted"] > 0, out
    warnings = store.d.ctl_json("status")["warnings"]
    assert not any("the last GC failed" in w for w in warnings), warnings
    for i in range(10):
        assert cat(store.d, newest, ws, f"g{i}.bin") == (ws / f"g{i}.bin").read_bytes()
    store.serving()


def test_rollback_that_fills_the_workspace_disk_is_finished_once_space_is_freed(tmp_path: Path) -> None:
    rng = random.Random(5)
    d = start_daemon(tmp_path / "snapd-home")
    try:
        with tmpfs(tmp_path / "wsfs", 16 << 20) as fs:
            ws = workspace(fs / "ws", rng)
            for i in range(3):
                (ws / f"big{i}.bin").write_bytes(rng.randbytes(BIG))
            d.ctl("watch", str(ws))
            at_m = snapshot(ws)
            m = d.ctl_json("mark", "m", "-w", str(ws))["id"]
            # Since M: the big files rewritten, a directory of new files, one small file gone.
            for i in range(3):
                (ws / f"big{i}.bin").write_bytes(rng.randbytes(BIG))
            (ws / "n").mkdir()
            for i in range(5):
                (ws / "n" / f"x{i}.txt").write_bytes(rng.randbytes(1000))
            (ws / "a" / "f0.txt").unlink()
            before = snapshot(ws)
            fill(fs / "filler", leave=3 << 20)  # room for one restored big file, not three
            cp = d.ctl("rollback", "--to", m, "-y", "-w", str(ws), check=False, timeout=60)
            assert cp.returncode == 8 and b"disk full" in cp.stderr, describe(cp)
            assert b"stopped part-way" in cp.stderr and b"Undo returns" in cp.stderr, describe(cp)
            temps = no_cookies(ws)  # cookies, and temp files: .snapd-*~
            assert not temps, f"temp files left in the workspace: {temps}"
            half = snapshot(ws)
            assert half not in (at_m, before), "the disk filled before the rollback began"
            st = d.ctl_json("status")
            assert any("not finished yet" in w for w in st["warnings"]), st["warnings"]
            # Space comes back: the next request finishes the rollback first.
            (fs / "filler").unlink()
            m2 = d.ctl_json("mark", "after", "-w", str(ws))
            assert snapshot(ws) == at_m, snap_diff(snapshot(ws), at_m)
            assert any("was finished" in w for w in m2["summary"]["warnings"]), m2["summary"]
            d.ctl("undo", "-y", "-w", str(ws))
            assert snapshot(ws) == before, snap_diff(snapshot(ws), before)
            assert d.stop() == 0
    finally:
        if d.alive():
            d.stop()


def test_forget_abandons_an_unfinished_rollback_and_a_new_workspace_never_finishes_it(tmp_path: Path) -> None:
    """Found by a review: `forget` deleted the workspace's rows and kept its rollback journal.
    Workspace ids are reused once the highest is forgotten, so watching again (here: the same
    directory) handed the new workspace the old journal, and its start rolled that rollback
    forward over files the user had since let be. Now forget says it abandons the rollback,
    deletes the journal durably, and a new workspace deletes any journal under its id."""
    rng = random.Random(7)
    d = start_daemon(tmp_path / "snapd-home")
    try:
        with tmpfs(tmp_path / "wsfs", 16 << 20) as fs:
            ws, m, _ = rollback_stopped_by_a_full_disk(d, fs, rng)
            journals = list((tmp_path / "snapd-home").rglob("workspace-*.json"))
            assert len(journals) == 1, journals
            (fs / "filler").unlink()
            half = snapshot(ws)
            info = d.call("forget", workspace=os.fsencode(ws), dry_run=True)
            assert info["unfinished_rollback"] is True, info
            out = d.ctl("forget", "--yes", "-w", str(ws)).stdout.decode()
            assert "abandoned an unfinished rollback" in out, out
            assert not journals[0].exists(), "forget kept the journal of the abandoned rollback"
            assert snapshot(ws) == half
            d.ctl("watch", str(ws))  # a new workspace, given the forgotten one's id
            assert snapshot(ws) == half, "the new workspace finished the forgotten rollback"
            st = d.ctl_json("status")
            assert not any("rollback" in w for w in st["warnings"]), st["warnings"]
            assert d.stop() == 0
    finally:
        if d.alive():
            d.stop()


def test_gc_keeps_what_an_unfinished_rollback_still_has_to_write(tmp_path: Path) -> None:
    """Found by a review: a rollback stopped by a full disk waits in its journal for space,
    and GC did not count the journal as a reference. Once retention evicted the target mark
    (here: its age) the sweep deleted the contents the journal still had to write, and the
    rollback could never finish ("object … is missing" at every request). GC now keeps every
    object a journal names."""
    rng = random.Random(11)
    home = tmp_path / "snapd-home"
    home.mkdir()
    (home / "config.toml").write_text("[retention]\nmax_age_days = 0.00002\ngrace_s = 0.001\n")  # 1.7 s
    d = start_daemon(home)
    try:
        with tmpfs(tmp_path / "wsfs", 16 << 20) as fs:
            ws, m, at_m = rollback_stopped_by_a_full_disk(d, fs, rng)
            time.sleep(2)  # every mark but the pre-rollback one (the newest) is past the age window
            gc = d.ctl_json("gc")
            assert {"id": m, "reason": "age"} in gc["evicted"], f"the mark stayed: nothing tested ({gc})"
            (fs / "filler").unlink()
            cp = d.ctl("mark", "after", "-w", str(ws), check=False)
            assert cp.returncode == 0 and b"not finished" not in cp.stderr, describe(cp)
            assert snapshot(ws) == at_m, snap_diff(snapshot(ws), at_m)
            assert d.stop() == 0
    finally:
        if d.alive():
            d.stop()
