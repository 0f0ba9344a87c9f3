"""End-to-end tests of rollback, undo and diff (docs/rollback.md; issue 5's Tests section).

A real ``snapd start`` process, the real socket, real files: the CLI (``python -m snapd``) for
what users type, :class:`snapd.ipc.client.Client` over the same socket where a test needs speed or
the raw reply (stale plan tokens, concurrent requests).

What is proved here, and how:

- the contract against a model lives in ``test_model_rollback.py`` (a seeded randomized run
  and fixed scenarios, with ``git check-ignore`` as the judge of what is ignored);
- crash recovery: the daemon is SIGKILLed at random points of a 3000-file rollback, restarted,
  and the workspace must be exactly the target (journal found) or one of the two states (no
  journal), with no ``.snapd-*~`` left and ``status`` saying a recovery happened;
- containment (symlinks to outside), uncapturable paths in the way (size cap, unreadable as
  another uid, FIFO), concurrency (writer during apply, mark during apply, racing rollbacks),
  the CLI's plan/confirm/token behaviour, and ``diff``/``show``/``cat``.

Waiting is poll-until-deadline; the only sleeps choose *when* to kill the daemon.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import random
import shutil
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from e2e_helpers import (
    NOBODY,
    Daemon,
    OtherUser,
    Pty,
    Snap,
    cli_mark,
    cli_rollback,
    describe,
    no_cookies,
    run_ctl,
    snap_diff,
    snapshot,
    start_daemon,
    unavailable,
    wait_for,
    write,
)

from snapd.errors import PlanChanged
from snapd.ipc.client import Client

# -- helpers --------------------------------------------------------------------------------------


def b(path: Path | str) -> bytes:
    return os.fsencode(path)


def tree_digest(root: Path) -> str:
    """A digest of everything under ``root``: names, kinds, modes, contents, link texts."""
    h = hashlib.sha256()
    for p, v in sorted(snapshot(root).items()):
        h.update(repr((p, v)).encode())
    return h.hexdigest()


def temps(root: Path) -> list[str]:
    """``.snapd-*~`` files (rollback temps, barrier cookies) anywhere under ``root``."""
    return no_cookies(root)


def ws_status(d: Daemon, root: Path) -> dict[str, Any]:
    st_ = d.call("status")
    (w,) = [w for w in st_["workspaces"] if w["root"] == str(root)]
    return w


def wait_ready(d: Daemon, root: Path, timeout: float = 60.0) -> dict[str, Any]:
    def ready() -> dict[str, Any] | None:
        w = ws_status(d, root)
        return w if w.get("state") == "ready" else None

    w = wait_for(ready, timeout, what=f"workspace {root} ready")
    assert isinstance(w, dict)
    return w


def mark(d: Daemon, root: Path, label: str) -> str:
    m = d.call("mark", label=label, workspace=b(root))
    return str(m["id"])




def failure(cp: subprocess.CompletedProcess[bytes], d: Daemon) -> str:
    return describe(cp) + "\n--- daemon log ---\n" + d.log()[-3000:]


# -- fixtures -------------------------------------------------------------------------------------


def watched(d: Daemon, root: Path) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    root = root.resolve()
    out = d.ctl_json("watch", root)
    assert out["workspace"] == str(root)
    return root


@pytest.fixture
def ws(tmp_path: Path, daemon: Daemon) -> Path:
    return watched(daemon, tmp_path / "proj" / "ws")


# == 1. the contract against a model: tests/test_model_rollback.py (randomized, and scenarios) ====


# == 2. SIGKILL at random points of a large rollback, then restart and recovery ==================


def build_two_states(d: Daemon, root: Path, n: int = 3000) -> tuple[str, str, Snap, Snap]:
    """State A (``n`` files in 30 directories), marked; then state B, marked. B rewrites two
    thirds of the files, deletes a sixth, adds as many, changes modes and adds a directory."""
    for i in range(n):
        write(root / f"d{i % 30:02d}" / f"f{i:05d}.txt", f"A {i}\n" * (1 + i % 7))
    mark_a = mark(d, root, "state-a")
    snap_a = snapshot(root)
    for i in range(n):
        p = root / f"d{i % 30:02d}" / f"f{i:05d}.txt"
        if i % 6 == 0:
            p.unlink()
        elif i % 3:
            p.write_bytes(f"B {i}\n".encode() * (1 + i % 5))
        if i % 6 == 1:
            p.chmod(0o755)
        if i % 6 == 2:
            write(root / f"d{i % 30:02d}" / f"g{i:05d}.txt", f"new in B {i}\n")
    write(root / "only-b" / "deep" / "x.txt", "B only\n")
    mark_b = mark(d, root, "state-b")
    snap_b = snapshot(root)
    assert snap_a != snap_b
    return mark_a, mark_b, snap_a, snap_b


@pytest.mark.timeout(300)
def test_sigkill_during_large_rollback_is_recovered_at_restart(tmp_path: Path) -> None:
    """kill -9 at random points of a 3000-file rollback; restart: finished, or never started.

    With the journal found at restart the workspace must be exactly the target and ``status``
    must say so; without it (killed before the journal was written or after it was removed) it
    is exactly one of the two states. Never a ``.snapd-*~`` left, never a journal left.
    """
    home = tmp_path / "snapd-home"
    seed = int(os.environ.get("SNAPD_TEST_SEED", "0")) or random.randrange(1, 2**32)
    print(f"kill points seeded with {seed} (SNAPD_TEST_SEED={seed} replays them)")
    rng = random.Random(seed)
    seed_note = f"(seed {seed}: SNAPD_TEST_SEED={seed} replays)"
    d = start_daemon(home)
    root = watched(d, tmp_path / "proj" / "big")
    try:
        mark_a, mark_b, snap_a, snap_b = build_two_states(d, root)
        states = {mark_a: snap_a, mark_b: snap_b}
        st_ = d.call("status")
        ws_id = ws_status(d, root)["id"]
        journal = Path(st_["store"]["path"]) / "journal" / f"workspace-{ws_id}.json"

        # How long one rollback takes here (B -> A), so kills land inside it.
        t0 = time.monotonic()
        cp = d.ctl("rollback", "--to", mark_a, "--yes", "-w", root, timeout=120)
        took = time.monotonic() - t0
        assert snapshot(root) == snap_a, snap_diff(snapshot(root), snap_a)
        current = mark_a
        outcomes = []
        for i in range(6):
            target = mark_b if current == mark_a else mark_a
            proc = subprocess.Popen(
                [sys.executable, "-m", "snapd", "rollback", "--to", target, "--yes", "-w", str(root)],
                env=d.env,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                stdin=subprocess.DEVNULL,
            )
            if i == 0:
                delay = 0.0  # before the request even arrives
            else:
                wait_for(
                    lambda p=proc: journal.exists() or p.poll() is not None, 60, 0.001, "rollback started"
                )
                delay = rng.uniform(0, took * 1.1)
            time.sleep(delay)  # chooses the crash point; not a wait for a condition
            d.proc.kill()
            d.proc.wait(10)
            had_journal = journal.exists()
            proc.kill()  # its call's deadline is an hour (rollbacks can be long): do not wait it out
            proc.wait(10)
            d.close_clients()
            d = start_daemon(home)
            w = wait_ready(d, root)
            got = snapshot(root)
            outcomes.append((round(delay, 3), had_journal, got == states[target]))
            assert temps(root) == [], f"temp files left after recovery {seed_note}: {temps(root)}"
            assert not journal.exists(), f"journal left after recovery {seed_note}\n{d.log()[-3000:]}"
            if had_journal:
                assert got == states[target], (
                    f"kill {i} (after {delay:.3f}s, journal found): not the target after recovery "
                    f"{seed_note}\n{snap_diff(got, states[target])}\n{d.log()[-3000:]}"
                )
                assert w["recovered_rollback"] is not None, w
                assert w["recovered_rollback"]["conflicts"] == [], w["recovered_rollback"]
                shown = json.loads(d.ctl("status", "--json").stdout)
                (sw,) = [x for x in shown["workspaces"] if x["root"] == str(root)]
                assert sw["recovered_rollback"] is not None
                assert any("interrupted" in x for x in shown["warnings"]), shown["warnings"]
            else:
                assert got in (states[current], states[target]), (
                    f"kill {i}: neither state without a journal {seed_note}\n{snap_diff(got, states[target])}"
                )
                assert w["recovered_rollback"] is None, w
            current = target if got == states[target] else current
            # The restarted daemon captured the recovered state: a mark equals it.
            m = mark(d, root, f"after-kill-{i}")
            assert d.call("diff", **{"from": m}, workspace=b(root), stat=True)["files"] == []
            assert not d.call("diff", **{"from": m, "to": current}, workspace=b(root), stat=True)["files"]
        print(f"kills (delay s, journal found, target reached): {outcomes}; one rollback took {took:.2f}s")
        assert any(h for _, h, _ in outcomes), f"no kill landed while the journal existed: {outcomes}"
        # Undo after all this returns exactly to the newest pre-rollback mark: the state before
        # the last rollback that began (a kill after its pre-rollback mark, before its journal,
        # leaves that mark equal to the state it was killed in).
        log_ = d.call("log", workspace=b(root), limit=100)["marks"]
        pre = max((m for m in log_ if m["kind"] == "pre-rollback"), key=lambda m: m["created"])
        pre_vs_a = d.call("diff", **{"from": pre["id"], "to": mark_a}, workspace=b(root), stat=True)
        same_as_a = not pre_vs_a["files"]
        cp = d.ctl("undo", "--yes", "-w", root, check=False, timeout=120)
        assert cp.returncode == 0, failure(cp, d)
        want = snap_a if same_as_a else snap_b
        assert snapshot(root) == want, f"{seed_note}\n{snap_diff(snapshot(root), want)}"
    finally:
        code = d.stop()
        assert code == 0, d.log()[-3000:]


# == 3. symlinks to outside the workspace ========================================================


@pytest.mark.timeout(60)
def test_directory_and_file_swapped_for_symlinks_to_outside(daemon: Daemon, ws: Path, tmp_path: Path) -> None:
    """Nothing outside changes; the workspace gets the mark's directory and file back."""
    outside = tmp_path / "outside"
    write(outside / "x.txt", "outside x\n")
    write(outside / "sub" / "y.txt", "outside y\n")
    write(outside / "file.txt", "outside file\n")
    write(ws / "d" / "x.txt", "ws x at M\n")
    write(ws / "d" / "sub" / "y.txt", "ws y at M\n")
    write(ws / "d" / "only-m.txt", "only at M\n")
    write(ws / "f.txt", "ws f at M\n", 0o600)
    write(ws / "e" / "inner" / "z.txt", "z at M\n")
    os.symlink(outside, ws / "was-link")  # a symlink to outside at M, a directory now
    m = mark(daemon, ws, "m")
    at_m = snapshot(ws)

    shutil.rmtree(ws / "d")
    os.symlink(outside, ws / "d")
    (ws / "f.txt").unlink()
    os.symlink(outside / "file.txt", ws / "f.txt")
    shutil.rmtree(ws / "e" / "inner")
    os.symlink(outside / "sub", ws / "e" / "inner")
    (ws / "was-link").unlink()
    write(ws / "was-link" / "x.txt", "a directory now\n")
    before = tree_digest(outside)

    cp = daemon.ctl("rollback", "--to", m, "--yes", "--json", "-w", ws, check=False)
    assert tree_digest(outside) == before, "rollback changed files outside the workspace"
    got = snapshot(ws)
    assert got == at_m, snap_diff(got, at_m) + "\n" + failure(cp, daemon)
    assert cp.returncode == 0, failure(cp, daemon)
    assert got == at_m, snap_diff(got, at_m)
    assert (ws / "d").is_dir() and not (ws / "d").is_symlink()
    assert os.readlink(ws / "was-link") == str(outside)
    assert temps(ws) == [] and temps(outside) == []

    # And back again with undo: the symlinks return, still nothing outside changes.
    cp = daemon.ctl("undo", "--yes", "-w", ws, check=False)
    assert cp.returncode == 0, failure(cp, daemon)
    assert tree_digest(outside) == before
    assert os.readlink(ws / "d") == str(outside) and os.readlink(ws / "f.txt") == str(outside / "file.txt")


# == 4. paths the pre-rollback mark cannot hold, in the way of a rollback ========================


@pytest.mark.timeout(90)
def test_over_cap_file_and_fifo_in_the_way_are_kept_unless_forced(tmp_path: Path) -> None:
    home = tmp_path / "snapd-home"
    home.mkdir(mode=0o700)
    (home / "config.toml").write_text('size_cap = "1 KiB"\n')
    d = start_daemon(home)
    try:
        ws = watched(d, tmp_path / "proj" / "ws")
        write(ws / "big.txt", "small at M\n")
        write(ws / "pipe", "a regular file at M\n")
        write(ws / "keep.txt", "unchanged\n")
        write(ws / "mod.txt", "at M\n")
        m = mark(d, ws, "m")
        at_m = snapshot(ws)

        write(ws / "big.txt", b"B" * 2048)  # over the cap now: the pre-rollback mark cannot hold it
        (ws / "pipe").unlink()
        os.mkfifo(ws / "pipe")
        write(ws / "newdir" / "plain.txt", "captured\n")
        os.mkfifo(ws / "newdir" / "fifo")
        write(ws / "new-big.bin", b"N" * 4096)  # uncaptured, absent at M: kept unless --force
        write(ws / "mod.txt", "changed\n")
        before = snapshot(ws)

        dry = d.ctl("rollback", "--to", m, "--dry-run", "-w", ws, check=False)
        assert dry.returncode == 10, failure(dry, d)
        assert snapshot(ws) == before
        out = dry.stdout.decode()
        for p in ("big.txt", "pipe", "newdir", "new-big.bin"):
            assert f"kept: {p} (" in out, out

        cp = d.ctl("rollback", "--to", m, "--yes", "--json", "-w", ws, check=False)
        assert cp.returncode == 10, failure(cp, d)
        res = json.loads(cp.stdout)
        kept = {k["path"]: k["reason"] for k in res["kept"]}
        assert {"big.txt", "pipe", "newdir", "new-big.bin"} <= kept.keys(), kept
        assert "size cap" in kept["big.txt"] and "special" in kept["pipe"], kept
        assert res["ok"] is False
        got = snapshot(ws)
        assert got["big.txt"] == before["big.txt"] and got["pipe"] == before["pipe"]
        assert got["newdir/fifo"] == before["newdir/fifo"] and got["newdir"][0] == "dir"
        assert got["new-big.bin"] == before["new-big.bin"]
        assert got["mod.txt"] == at_m["mod.txt"], "the rest of the plan is applied"
        assert "newdir/plain.txt" not in got

        plain = d.ctl("rollback", "--to", m, "--yes", "-w", ws, check=False)  # the listing on stderr
        assert plain.returncode == 10
        assert b"kept: pipe" in plain.stderr and b"kept: big.txt" in plain.stderr, failure(plain, d)

        cp = d.ctl("rollback", "--to", m, "--yes", "--force", "-w", ws, check=False)
        assert cp.returncode == 0, failure(cp, d)
        got = snapshot(ws)
        assert got == at_m, snap_diff(got, at_m)
        assert temps(ws) == []
    finally:
        assert d.stop() == 0, d.log()[-3000:]


@pytest.mark.timeout(90)
def test_unreadable_file_in_the_way_is_kept_unless_forced(nobody: OtherUser) -> None:
    """Root reads anything, so the daemon and the CLI run as uid 65534 here (tests that
    check permissions run the other side as another uid); the file is mode 000."""
    ws = nobody.top / "ws"
    ws.mkdir()
    write(ws / "secret.txt", "secret at M\n")
    write(ws / "plain.txt", "plain at M\n")
    for p in (ws, ws / "secret.txt", ws / "plain.txt"):
        os.chown(p, NOBODY, NOBODY)
    d = nobody.start_daemon(nobody.top / "home" / "snapd")
    try:
        d.ctl("watch", ws)
        m = d.ctl_json("mark", "m", "-w", ws)["id"]
        (ws / "secret.txt").write_text("secret now: not readable by the daemon\n")
        (ws / "secret.txt").chmod(0o000)
        (ws / "plain.txt").write_text("plain now\n")
        d.ctl("mark", "n", "-w", ws)

        cp = d.ctl("rollback", "--to", m, "--yes", cwd=ws, check=False)
        assert cp.returncode == 10, describe(cp)
        assert b"kept: secret.txt" in cp.stderr and b"unreadable" in cp.stderr, describe(cp)
        assert (ws / "secret.txt").read_text() == "secret now: not readable by the daemon\n"
        assert stat.S_IMODE((ws / "secret.txt").stat().st_mode) == 0
        assert (ws / "plain.txt").read_text() == "plain at M\n"

        cp = d.ctl("rollback", "--to", m, "--yes", "--force", cwd=ws, check=False)
        assert cp.returncode == 0, describe(cp)
        assert (ws / "secret.txt").read_text() == "secret at M\n"
        assert stat.S_IMODE((ws / "secret.txt").stat().st_mode) == 0o644
        assert temps(ws) == []
    finally:
        assert d.stop() == 0, d.log()[-3000:]


# == 5. concurrency: a writer during the apply, a mark during a rollback, racing rollbacks =======


def journal_of(d: Daemon, root: Path) -> Path:
    st_ = d.call("status")
    return Path(st_["store"]["path"]) / "journal" / f"workspace-{ws_status(d, root)['id']}.json"


@pytest.mark.timeout(120)
def test_writer_during_apply_is_a_conflict_and_is_captured(daemon: Daemon, ws: Path) -> None:
    """A path changed after the pre-rollback mark is left as the writer made it, reported as a
    conflict (non-zero exit), and captured by the next mark (own writes are recognised by content,
    not by silencing the path)."""
    mark_a, _, snap_a, _ = build_two_states(daemon, ws, n=2000)
    write(ws / "zzz" / "hot.txt", "hot before the rollback\n")  # sorted last: written last
    daemon.call("mark", label="hot", workspace=b(ws))
    journal = journal_of(daemon, ws)
    written: list[bytes] = []
    outcome: dict[str, Any] = {}

    def writer() -> None:
        wait_for(journal.exists, 60, 0.0005, "the apply started")
        data = b"the writer's change, made during the apply\n"
        with open(ws / "zzz" / "hot.txt", "wb") as fh:  # in place: same inode
            fh.write(data)
        written.append(data)
        outcome["journal_after_write"] = journal.exists()

    t = threading.Thread(target=writer)
    t.start()
    cp = daemon.ctl("rollback", "--to", mark_a, "--yes", "--json", "-w", ws, check=False, timeout=120)
    t.join(60)
    assert written, "the writer never saw the apply start"
    assert outcome["journal_after_write"], "the apply finished before the writer wrote: too fast to test"
    res = json.loads(cp.stdout)
    assert (ws / "zzz" / "hot.txt").read_bytes() == written[0], "the writer's change was clobbered"
    assert [c["path"] for c in res["conflicts"]] == ["zzz/hot.txt"], res["conflicts"]
    assert cp.returncode == 10 and res["ok"] is False, failure(cp, daemon)
    got = snapshot(ws)
    want = dict(snap_a, zzz=got["zzz"], **{"zzz/hot.txt": got["zzz/hot.txt"]})
    assert got == want, snap_diff(got, want)
    after = daemon.call("mark", label="after", workspace=b(ws))
    cat = daemon.call("cat", at=after["id"], path=b"zzz/hot.txt", workspace=b(ws))
    assert base64.b64decode(cat["data_b64"]) == written[0]
    assert daemon.call("diff", **{"from": after["id"]}, workspace=b(ws), stat=True)["files"] == []
    # Repeating the rollback must not share the first one's pre-rollback mark: that mark never
    # held the writer's change, which the repeat deletes. Undo brings it back.
    again = daemon.call("rollback_apply", to=mark_a, workspace=b(ws))
    assert again["pre_rollback"] not in (None, res["pre_rollback"]), again
    assert not (ws / "zzz" / "hot.txt").exists()
    daemon.call("undo", workspace=b(ws))
    assert (ws / "zzz" / "hot.txt").read_bytes() == written[0]


@pytest.mark.timeout(120)
def test_mark_sent_while_a_rollback_runs(daemon: Daemon, ws: Path) -> None:
    """The mark waits for the rollback and holds its result, not a mixture of the two states."""
    mark_a, mark_b, snap_a, snap_b = build_two_states(daemon, ws, n=2000)
    journal = journal_of(daemon, ws)
    res: dict[str, Any] = {}

    def roll() -> None:
        with Client(daemon.endpoint, 120.0) as c:
            res.update(c.call("rollback_apply", to=mark_a, workspace=b(ws)))

    t = threading.Thread(target=roll)
    t.start()
    wait_for(journal.exists, 60, 0.0005, "the apply started")
    with Client(daemon.endpoint, 120.0) as c:
        sent_during = journal.exists()
        during = c.call("mark", label="during", workspace=b(ws))
    assert sent_during, "the rollback finished before the mark was sent: too fast to test"
    t.join(120)
    assert res.get("ok") is True, res
    assert snapshot(ws) == snap_a
    stray = daemon.call("diff", **{"from": mark_a, "to": during["id"]}, workspace=b(ws), stat=True)["files"]
    assert stray == [], f"the mark taken during the rollback is not the rolled-back state: {stray[:10]}"
    assert daemon.call("show", mark=during["id"], workspace=b(ws))["kind"] == "user"


@pytest.mark.timeout(120)
def test_two_rollbacks_racing(daemon: Daemon, ws: Path) -> None:
    """Both finish; the workspace is exactly one target; undo gives the other one back."""
    mark_a, mark_b, snap_a, snap_b = build_two_states(daemon, ws, n=1500)
    write(ws / "c.txt", "neither state\n")  # a third state, so both rollbacks have work to do
    third = snapshot(ws)
    results: dict[str, Any] = {}
    go = threading.Barrier(2)

    def roll(to: str) -> None:
        with Client(daemon.endpoint, 120.0) as c:
            go.wait()
            try:
                results[to] = c.call("rollback_apply", to=to, workspace=b(ws))
            except Exception as exc:  # noqa: BLE001 - reported below
                results[to] = exc

    threads = [threading.Thread(target=roll, args=(m,)) for m in (mark_a, mark_b)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    for m in (mark_a, mark_b):
        assert isinstance(results.get(m), dict) and results[m]["ok"], results.get(m)
    got = snapshot(ws)
    assert got in (snap_a, snap_b), "the workspace is a mixture of the two targets"
    other = snap_b if got == snap_a else snap_a
    last = mark_a if got == snap_a else mark_b
    first = mark_b if last == mark_a else mark_a
    assert results[last]["applied"] > 0 and results[first]["applied"] > 0, "one rollback did nothing"
    cp = daemon.ctl("undo", "--yes", "-w", ws, check=False, timeout=120)
    assert cp.returncode == 0, failure(cp, daemon)
    assert snapshot(ws) == other
    cp = daemon.ctl("undo", "--yes", "-w", ws, check=False, timeout=120)
    assert cp.returncode == 0, failure(cp, daemon)
    assert snapshot(ws) == got
    assert third != got


# == 6. the CLI: plan, confirm, token, paths, JSON, undo of undo, git HEAD =======================


def three_files(ws: Path) -> None:
    write(ws / "a.txt", "a at M\n")
    write(ws / "b.txt", "b at M\n")
    write(ws / "sub" / "c.txt", "c at M\n")
    write(ws / "other" / "d.txt", "d at M\n")


def change_three(ws: Path) -> None:
    write(ws / "a.txt", "a now\n")
    (ws / "b.txt").unlink()
    write(ws / "sub" / "c.txt", "c now\n", 0o755)
    write(ws / "sub" / "new.txt", "new\n")
    write(ws / "other" / "d.txt", "d now\n")


@pytest.mark.timeout(60)
def test_dry_run_and_refusal_without_a_terminal_change_nothing(daemon: Daemon, ws: Path) -> None:
    three_files(ws)
    m = mark(daemon, ws, "m")
    change_three(ws)
    before = snapshot(ws)
    marks_before = len(daemon.call("log", workspace=b(ws), limit=100)["marks"])

    cp = daemon.ctl("rollback", "--to", m, "--dry-run", "-w", ws)
    out = cp.stdout.decode()
    for line in ("restore a.txt", "recreate b.txt", "restore sub/c.txt", "delete sub/new.txt"):
        assert f"  {line}\n" in out, out
    assert "rollback of " in out and " to " + m in out
    assert snapshot(ws) == before

    cp = run_ctl(daemon.env, "rollback", "--to", m, "-w", ws, input=b"y\n")  # stdin is a pipe
    assert cp.returncode == 2, describe(cp)
    assert b"--yes" in cp.stderr and b"refusing" in cp.stderr, describe(cp)
    assert snapshot(ws) == before
    marks_after = daemon.call("log", workspace=b(ws), limit=100)["marks"]
    assert len(marks_after) == marks_before, "a refused rollback took a pre-rollback mark"

    # An undo with something to undo, refused the same way: it changes nothing either.
    daemon.ctl("rollback", "--to", m, "--yes", "-w", ws)
    rolled = snapshot(ws)
    assert rolled != before
    marks_before = len(daemon.call("log", workspace=b(ws), limit=100)["marks"])
    cp = run_ctl(daemon.env, "undo", "-w", ws, input=b"y\n")
    assert cp.returncode == 2, describe(cp)
    assert b"--yes" in cp.stderr and b"refusing" in cp.stderr, describe(cp)
    assert snapshot(ws) == rolled
    marks_after = daemon.call("log", workspace=b(ws), limit=100)["marks"]
    assert len(marks_after) == marks_before, "a refused undo took a pre-rollback mark"


@pytest.mark.timeout(60)
def test_paths_after_double_dash_limit_the_rollback(daemon: Daemon, ws: Path) -> None:
    three_files(ws)
    m = mark(daemon, ws, "m")
    at_m = snapshot(ws)
    change_three(ws)
    before = snapshot(ws)
    cp = daemon.ctl("rollback", "--to", m, "--yes", "--json", "--", "sub", "b.txt", cwd=ws)
    res = json.loads(cp.stdout)
    assert {op["path"] for op in res["plan"]["ops"]} == {"b.txt", "sub/c.txt", "sub/new.txt"}, res["plan"]
    got = snapshot(ws)
    for p in ("b.txt", "sub", "sub/c.txt"):
        assert got[p] == at_m[p], p
    assert "sub/new.txt" not in got
    for p in ("a.txt", "other/d.txt"):
        assert got[p] == before[p], f"{p} is outside the paths given and must not change"
    cp = daemon.ctl("rollback", "--to", m, "--yes", "--", "no/such/path", cwd=ws, check=False)
    assert cp.returncode == 6, describe(cp)


@pytest.mark.timeout(60)
def test_json_output_shape(daemon: Daemon, ws: Path) -> None:
    three_files(ws)
    m = mark(daemon, ws, "m")
    change_three(ws)
    plan = daemon.ctl_json("rollback", "--to", m, "--dry-run", "-w", ws)
    assert {"workspace", "target", "plan", "lines", "git_head_mark", "git_head_now"} <= plan.keys()
    assert plan["workspace"] == str(ws)
    assert plan["target"]["id"] == m and plan["target"]["label"] == "m"
    assert {"token", "counts", "ops", "kept"} <= plan["plan"].keys()
    assert plan["plan"]["counts"] == {"restore": 3, "recreate": 1, "delete": 1, "mode": 0, "type": 0}, plan
    for op in plan["plan"]["ops"]:
        assert {"kind", "path", "entry", "expect"} <= op.keys()
    t0 = time.time()
    res = daemon.ctl_json("rollback", "--to", m, "--yes", "-w", ws)
    for p in ("a.txt", "b.txt", "sub/c.txt"):  # restored files get the current time: tools rebuild
        assert (ws / p).stat().st_mtime >= t0 - 1, p
    assert {
        "pre_rollback",
        "applied",
        "conflicts",
        "kept",
        "ok",
        "replaced_symlinks",
        "temps_removed",
    } <= res.keys()
    assert res["ok"] is True and res["conflicts"] == [] and res["kept"] == []
    assert res["applied"] == 5 and res["plan"]["token"] == plan["plan"]["token"]
    pre = daemon.call("show", mark=res["pre_rollback"], workspace=b(ws))
    assert pre["kind"] == "pre-rollback"
    err = daemon.ctl("rollback", "--to", "no-such-mark", "--yes", "--json", "-w", ws, check=False)
    assert err.returncode == 6
    assert json.loads(err.stdout)["error"]["code"] == "not_found"


@pytest.mark.timeout(60)
def test_stale_plan_token_and_identical_replan(daemon: Daemon, ws: Path) -> None:
    three_files(ws)
    m = mark(daemon, ws, "m")
    change_three(ws)
    c = daemon.client(30.0)
    plan = c.call("rollback_plan", to=m, workspace=b(ws))
    token = plan["plan"]["token"]

    # Rewriting a file with the same bytes changes nothing in the plan.
    (ws / "a.txt").write_text("a now\n")
    assert c.call("rollback_plan", to=m, workspace=b(ws))["plan"]["token"] == token

    # A path in the plan changes: plan_changed, with the new plan; nothing was touched.
    write(ws / "sub" / "c.txt", "c changed after the plan\n")
    before = snapshot(ws)
    with pytest.raises(PlanChanged) as info:
        c.call("rollback_apply", to=m, workspace=b(ws), token=token)
    new = info.value.details
    assert new["plan"]["token"] != token
    assert any(op["path"] == "sub/c.txt" for op in new["plan"]["ops"])
    assert snapshot(ws) == before, "a stale plan changed files"

    # Re-planned, identical: applies with that token.
    again = c.call("rollback_plan", to=m, workspace=b(ws))
    assert again["plan"]["token"] == new["plan"]["token"]
    res = c.call("rollback_apply", to=m, workspace=b(ws), token=again["plan"]["token"])
    assert res["ok"] is True


@pytest.mark.timeout(60)
def test_identical_replan_applies_silently(daemon: Daemon, ws: Path) -> None:
    """A change that leaves the plan as it was (same bytes rewritten, a path outside ``-- PATH``)
    keeps the token valid."""
    three_files(ws)
    m = mark(daemon, ws, "m")
    change_three(ws)
    c = daemon.client(30.0)
    plan = c.call("rollback_plan", to=m, workspace=b(ws), paths=[b"sub"])
    token = plan["plan"]["token"]
    (ws / "sub" / "c.txt").write_text("c now\n")  # same bytes, new mtime
    write(ws / "other" / "d.txt", "d changed again, outside the paths\n")
    res = c.call("rollback_apply", to=m, workspace=b(ws), paths=[b"sub"], token=token)
    assert res["ok"] is True and res["plan"]["token"] == token
    assert (ws / "sub" / "c.txt").read_text() == "c at M\n"
    assert (ws / "other" / "d.txt").read_text() == "d changed again, outside the paths\n"


@pytest.mark.timeout(60)
def test_terminal_confirmation_and_a_plan_that_changed_meanwhile(daemon: Daemon, ws: Path) -> None:
    """On a terminal: shows the plan, asks; a path changed while asking shows the difference and
    asks again; "n" changes nothing. Then "y" twice applies."""
    three_files(ws)
    m = mark(daemon, ws, "m")
    change_three(ws)
    t = Pty(daemon.env, "rollback", "--to", m, cwd=ws)
    t.read_until(b"apply this rollback? [y/N]")
    (ws / "sub" / "new.txt").unlink()
    before = snapshot(ws)
    t.send(b"y\n")
    out = t.read_until(b"apply the new plan? [y/N]")
    assert b"the plan is now different" in out
    assert b"- no longer: delete sub/new.txt" in out, out
    t.send(b"n\n")
    assert t.finish() == 1, t.out
    assert b"nothing changed" in t.out
    assert snapshot(ws) == before

    # Changed again while asking, but the plan stays identical (same bytes): no second question.
    t = Pty(daemon.env, "rollback", "--to", m, cwd=ws)
    t.read_until(b"apply this rollback? [y/N]")
    (ws / "a.txt").write_text("a now\n")
    t.send(b"y\n")
    assert t.finish() == 0, t.out
    assert b"rolled back:" in t.out and b"apply the new plan" not in t.out, t.out
    assert (ws / "other" / "d.txt").read_text() == "d at M\n"


@pytest.mark.timeout(60)
def test_a_path_that_changed_again_while_asking_is_named(daemon: Daemon, ws: Path) -> None:
    """Its plan line reads the same ("restore a.txt") but the op now expects other bytes: the
    second question names the path, not only that the plan differs."""
    three_files(ws)
    m = mark(daemon, ws, "m")
    change_three(ws)
    t = Pty(daemon.env, "rollback", "--to", m, cwd=ws)
    t.read_until(b"apply this rollback? [y/N]")
    (ws / "a.txt").write_text("a changed once more, other bytes\n")
    t.send(b"y\n")
    out = t.read_until(b"apply the new plan? [y/N]")
    assert b"~ restore a.txt (the path changed again since the plan was shown)" in out, out
    t.send(b"n\n")
    assert t.finish() == 1, t.out
    assert (ws / "a.txt").read_text() == "a changed once more, other bytes\n"


@pytest.mark.timeout(60)
def test_undo_of_undo_is_redo(daemon: Daemon, ws: Path) -> None:
    three_files(ws)
    m = mark(daemon, ws, "m")
    at_m = snapshot(ws)
    change_three(ws)
    now = snapshot(ws)
    cp = daemon.ctl("undo", "--yes", "-w", ws, check=False)
    assert cp.returncode == 6 and b"nothing to undo" in cp.stderr, describe(cp)
    daemon.ctl("rollback", "--to", m, "--yes", "-w", ws)
    assert snapshot(ws) == at_m
    daemon.ctl("undo", "--yes", "-w", ws)
    assert snapshot(ws) == now
    daemon.ctl("undo", "--yes", "-w", ws)
    assert snapshot(ws) == at_m
    daemon.ctl("undo", "--yes", "-w", ws)
    assert snapshot(ws) == now
    kinds = [x["kind"] for x in daemon.call("log", workspace=b(ws), limit=100)["marks"]]
    assert kinds[:4] == ["pre-rollback"] * 4, kinds


def git(cwd: Path, env: dict[str, str], *args: str) -> str:
    cp = subprocess.run(["git", *args], cwd=cwd, env=env, capture_output=True, check=True)
    return cp.stdout.decode().strip()


@pytest.mark.timeout(60)
def test_git_head_warning_when_head_moved(daemon: Daemon, tmp_path: Path) -> None:
    if shutil.which("git") is None:
        unavailable("git is not installed")
    root = tmp_path / "repo"
    root.mkdir()
    env = dict(
        daemon.env,
        GIT_AUTHOR_NAME="t",
        GIT_AUTHOR_EMAIL="t@e",
        GIT_COMMITTER_NAME="t",
        GIT_COMMITTER_EMAIL="t@e",
    )
    git(root, env, "init", "-q", "-b", "main")
    write(root / "f.txt", "one\n")
    git(root, env, "add", "f.txt")
    git(root, env, "commit", "-q", "-m", "one")
    root = watched(daemon, root)
    m = mark(daemon, root, "m")
    head_m = git(root, env, "rev-parse", "HEAD")
    write(root / "f.txt", "two\n")
    git(root, env, "commit", "-q", "-am", "two")
    head_now = git(root, env, "rev-parse", "HEAD")
    plan = daemon.ctl_json("rollback", "--to", m, "--dry-run", "-w", root)
    assert plan["git_head_mark"] == head_m and plan["git_head_now"] == head_now
    assert any(
        "git HEAD" in w and head_now[:12] in w and head_m[:12] in w for w in plan.get("warnings", [])
    ), plan
    cp = daemon.ctl("rollback", "--to", m, "--dry-run", "-w", root)
    assert b"warning: git HEAD" in cp.stderr, describe(cp)
    git_dir = tree_digest(root / ".git")
    daemon.ctl("rollback", "--to", m, "--yes", "-w", root)
    assert (root / "f.txt").read_text() == "one\n"
    assert tree_digest(root / ".git") == git_dir, "rollback touched .git"
    same = daemon.ctl_json("rollback", "--to", mark(daemon, root, "now"), "--dry-run", "-w", root)
    assert not same.get("warnings"), same


# == 7. diff, show, cat ==========================================================================


@pytest.mark.timeout(60)
def test_diff_show_and_cat(daemon: Daemon, ws: Path) -> None:
    write(ws / "text.txt", "line 1\nline 2\nline 3\n")
    write(ws / "bin.dat", b"\x00\x01\x02binary\xff" * 10)
    write(ws / "sub" / "keep.txt", "keep\n")
    write(ws / "mode.sh", "#!/bin/sh\n")
    a = mark(daemon, ws, "a")
    write(ws / "text.txt", "line 1\nline two\nline 3\nline 4\n")
    write(ws / "bin.dat", b"\x00\x01\x02BINARY\xfe" * 12)
    write(ws / "sub" / "keep.txt", "changed\n")
    (ws / "mode.sh").chmod(0o755)
    write(ws / "added.txt", "added\n")
    bm = mark(daemon, ws, "b")

    out = daemon.ctl("diff", a, bm, cwd=ws).stdout.decode()
    assert "\x1b[" not in out, "colour without a terminal"
    assert "-line 2\n+line two\n" in out and "+line 4\n" in out, out
    assert "Binary file bin.dat differs (100 -> 120 bytes)" in out, out
    assert "\x00" not in out and "BINARY" not in out, "binary bytes printed"
    assert "+added\n" in out
    assert "mode      mode.sh 0644 -> 0755" in out, out

    stat_out = daemon.ctl("diff", a, bm, "--stat", cwd=ws).stdout.decode()
    assert "modified  text.txt +2 -1" in stat_out, stat_out
    assert "added     added.txt" in stat_out and "@@" not in stat_out

    only = daemon.ctl("diff", a, bm, "--", "sub", cwd=ws).stdout.decode()
    assert "sub/keep.txt" in only and "text.txt" not in only and "bin.dat" not in only, only

    write(ws / "live.txt", "only in the workspace\n")
    live = daemon.ctl("diff", bm, cwd=ws).stdout.decode()  # against the workspace now
    assert "+only in the workspace" in live and "text.txt" not in live, live
    js = daemon.ctl_json("diff", a, bm, "-w", ws)
    assert {f["path"]: f["status"] for f in js["files"]} == {
        "text.txt": "modified",
        "bin.dat": "modified",
        "sub/keep.txt": "modified",
        "mode.sh": "mode",
        "added.txt": "added",
    }, js

    # Colour on a terminal, none with NO_COLOR.
    for no_color, want_escape in ((None, True), ("1", False)):
        env = dict(daemon.env)
        env.pop("NO_COLOR", None)
        if no_color:
            env["NO_COLOR"] = no_color
        t = Pty(env, "diff", a, bm, cwd=ws)
        assert t.finish() == 0
        assert (b"\x1b[" in t.out) is want_escape, (no_color, t.out[:300])

    shown = daemon.ctl("show", bm, cwd=ws).stdout.decode()
    assert f"mark {bm}  b" in shown
    for line in ("modified text.txt", "added    added.txt", "mode     mode.sh"):
        assert line in shown, shown
    assert daemon.ctl_json("show", "a", cwd=ws)["id"] == a

    assert daemon.ctl("cat", a, "text.txt", cwd=ws).stdout == b"line 1\nline 2\nline 3\n"
    assert daemon.ctl("cat", "a", "bin.dat", cwd=ws).stdout == b"\x00\x01\x02binary\xff" * 10
    assert daemon.ctl("cat", bm, ws / "sub" / "keep.txt", "-w", ws, cwd="/").stdout == b"changed\n"
    missing = daemon.ctl("cat", a, "added.txt", cwd=ws, check=False)
    assert missing.returncode == 6, describe(missing)


def test_cli_plan_token_applies_only_the_plan_that_was_shown(daemon: Daemon, ws: Path) -> None:
    """`rollback --yes --plan-token T` (an editor confirmed the plan of `--dry-run --json`): if the
    workspace changed so that the plan differs, nothing is applied and the error carries the
    new plan; with the token of an unchanged plan it applies."""
    write(ws / "a.txt", "one\n")
    m1 = cli_mark(daemon, ws, "m1")
    write(ws / "a.txt", "two\n")
    plan = json.loads(daemon.ctl("rollback", "--to", m1, "--dry-run", "--json", cwd=ws).stdout)
    write(ws / "late.txt", "appeared after the plan was shown\n")
    code, reply = cli_rollback(daemon, ws, "--to", m1, "--plan-token", plan["plan"]["token"])
    assert code == PlanChanged.exit_code and reply["error"]["code"] == "plan_changed", reply
    assert any("late.txt" in line for line in reply["error"]["details"]["lines"])
    assert (ws / "a.txt").read_text() == "two\n" and (ws / "late.txt").exists()
    fresh = reply["error"]["details"]["plan"]["token"]
    code, reply = cli_rollback(daemon, ws, "--to", m1, "--plan-token", fresh)
    assert code == 0 and reply["applied"] == 2, reply
    assert (ws / "a.txt").read_text() == "one\n" and not (ws / "late.txt").exists()
