"""GC's mark phase in a process of its own (snapd.daemon.gcchild, snapd.store.gcmark).

The daemon's GC hands its mark phase (the live set: every key the store keeps) to a child
process so that its transient memory never lands in the daemon's heap (issue 33). These tests
hold what that must not change: the same objects deleted as when the phase ran in the daemon,
the holds still sparing what a concurrent mark reuses, errors raised as their own class, a
child that fails losing nothing, and no child left behind.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from e2e_helpers import Daemon, base_env, start_daemon, wait_for

from snapd.config import Retention
from snapd.daemon.gcchild import ChildMarkPhase
from snapd.errors import MissingObject
from snapd.store import gc, objects, trees
from snapd.store.holds import GcHolds
from snapd.store.store import Store
from snapd.store.verify import verify

pytestmark = pytest.mark.timeout(120)

DAY_NS = 86_400 * 10**9


def _history(path: Path) -> tuple[Store, int, list[str], int]:
    """A store with 12 marks over one workspace: each replaces a file of fresh content, adds
    one to a directory, and keeps a shared file; the first adds two releases of one file
    (repack makes one a delta of the other). The versions are 40 days old but the last two
    marks'; one delta chain (a file grown a line at a time). Returns the store, the
    workspace, the marks' ids (oldest first) and a `now` 20 days after the first mark."""
    s = Store.open(path)
    ws = s.add_workspace(b"/ws")
    t0 = time.time_ns()
    tree = None
    ids = []
    grown = b""
    for i in range(12):
        grown += b"line %d of a file that grows by a line a mark\n" % i
        with s.batch() as b:
            fresh = os.urandom(8_000)
            edits = {
                b"fresh": trees.Entry("file", 0o644, len(fresh), b.put(fresh)),
                b"dir/n%02d" % i: trees.Entry("file", 0o644, 10, b.put(b"n%08d\n" % i)),
                b"shared": trees.Entry("file", 0o644, 6, b.put(b"shared")),
                b"grown": trees.Entry("file", 0o644, len(grown), b.put(grown)),
            }
            if i == 0:  # two releases of one file side by side: repack makes one a delta
                lib = b"".join(b"def function_%d(x):\n    return x * %d\n" % (n, n) for n in range(150))
                for rel, data in ((b"rel1", lib), (b"rel2", lib.replace(b"* 7\n", b"* 8\n"))):
                    edits[rel + b"/lib.py"] = trees.Entry("file", 0o644, len(data), b.put(data))
            tree = b.apply(tree, edits)
            when = t0 + i * 2 * DAY_NS
            for p, e in edits.items():  # the last two marks' versions recent, the others' 40 days old
                b.add_version(ws, p, when if i >= 10 else t0 - 40 * DAY_NS + i, e)
            ids.append(b.add_mark(ws, f"m{i}", tree, created=when).id)
    return s, ws, ids, t0 + 20 * DAY_NS


def _keys(s: Store) -> set[str]:
    return {objects.py_key(k) for (k,) in s.catalog.read().execute("SELECT key FROM objects")}


@pytest.mark.parametrize(
    "policy",
    [
        Retention(max_marks=5, grace_s=0),
        Retention(max_age_days=7, grace_s=0),
        Retention(budget_bytes=40_000, grace_s=0, max_age_days=30),
        Retention(max_marks=3),  # everything within the grace: counted as waiting, none deleted
    ],
    ids=["count", "age", "budget", "grace"],
)
def test_the_child_deletes_exactly_what_the_daemon_would(tmp_path: Path, policy: Retention) -> None:
    here, _, _, now = _history(tmp_path / "here")
    here.close()
    shutil.copytree(tmp_path / "here", tmp_path / "child")
    here, child = Store.open(tmp_path / "here"), Store.open(tmp_path / "child")
    try:
        a = gc.run(here, policy, now=now)
        with ChildMarkPhase(child) as phase:
            b = gc.run(child, policy, now=now, mark=phase)
        summary = phase.summary()
        assert summary["fallback"] is None and summary["pid"] not in (None, os.getpid()), summary
        budget = [m for m, why in a.evicted if why == "budget"]
        # the unreferenced objects (again after the budget's kept bytes and fewest marks), the
        # repack's plan
        assert summary["steps"] == (5 if budget else 2), (summary, a.evicted)
        assert summary["max_rss"] and summary["max_rss"] > 1_000_000, summary
        assert (a.evicted, a.objects_deleted, a.bytes_freed, a.versions_deleted) == (
            b.evicted, b.objects_deleted, b.bytes_freed, b.versions_deleted
        )
        assert (a.waiting, a.waiting_bytes, a.waiting_until, a.warnings) == (
            b.waiting, b.waiting_bytes, b.waiting_until, b.warnings
        )
        assert (a.repacked, a.repack_saved) == (b.repacked, b.repack_saved) and a.repacked >= 1
        assert _keys(here) == _keys(child)
        assert a.objects_deleted > 0 or a.waiting > 0, "the scenario must leave something unreferenced"
        assert bool(budget) == (policy.budget_bytes == 40_000), a.evicted
        assert verify(child).ok
    finally:
        here.close()
        child.close()


def test_a_mark_that_reuses_a_dead_object_while_the_child_marks_is_spared(tmp_path: Path) -> None:
    """The child reads the catalog before the mark below commits; the sweep's holds, in the
    daemon, must still spare the old content the mark reuses (as when the phase ran there)."""
    s = Store.open(tmp_path / "store")
    ws = s.add_workspace(b"/x")
    old, new = os.urandom(5000), os.urandom(5000)
    with s.batch() as b:
        k_old = b.put(old)
        t0 = b.apply(None, {b"f": trees.Entry("file", 0o644, len(old), k_old)})
        b.add_mark(ws, "old", t0, created=time.time_ns() - 30 * DAY_NS)
    with s.batch() as b:
        t1 = b.apply(t0, {b"f": trees.Entry("file", 0o644, len(new), b.put(new))})
        b.add_mark(ws, "new", t1)

    class ThenAMark(ChildMarkPhase):
        def unreferenced(self, *args, **kwargs):  # type: ignore[no-untyped-def]
            found = super().unreferenced(*args, **kwargs)
            assert k_old in {objects.py_key(k) for k, _, _ in found.dead}
            with s.batch() as b:  # the user reverts f while GC runs: the mark reuses a dead object
                key = b.put(old)
                b.add_mark(ws, "revert", b.apply(t1, {b"f": trees.Entry("file", 0o644, len(old), key)}))
            return found

    with ThenAMark(s) as phase:
        gc.run(s, Retention(max_marks=1, grace_s=0), mark=phase)
    assert phase.fallback is None and phase.steps >= 1
    assert verify(s).ok
    revert = s.resolve(ws, "revert")
    entry = trees.lookup(s.load_node, revert.tree, b"f")
    assert entry is not None and s.get(entry.key) == old
    s.close()


def test_an_error_in_the_child_is_raised_as_its_own_class_and_nothing_is_deleted(tmp_path: Path) -> None:
    s = Store.open(tmp_path / "store")
    ws = s.add_workspace(b"/nowhere")
    with s.batch() as b:
        below = b.put(b"only the lost directory holds this " * 10)
        loose = b.put(b"nobody holds this " * 10)
        tree = b.apply(None, {b"d/e/x": trees.Entry("file", 0o644, 350, below)})
        b.add_mark(ws, "m", tree)
    lost = trees.lookup(s.load_node, tree, b"d")
    assert lost is not None
    with s.catalog.write() as c:
        c.execute("DELETE FROM objects WHERE key=?", (objects.db_key(lost.key),))
    with ChildMarkPhase(s) as phase, pytest.raises(MissingObject):
        gc.run(s, Retention(grace_s=0), mark=phase)
    assert phase.fallback is None and phase.pid is not None
    assert s.has(below) and s.has(loose)
    s.close()


@pytest.mark.parametrize(
    "argv",
    [
        ["/nonexistent/python"],  # cannot start
        [sys.executable, "-c", "import sys; sys.stdin.buffer.read(1)"],  # dies on its first step
        [sys.executable, "-c", "import sys; sys.stdin.buffer.read(1); print('garbage'); sys.stdout.flush()"],
    ],
    ids=["cannot-start", "dies", "garbage"],
)
def test_a_child_that_fails_leaves_the_gc_to_the_daemon_and_loses_nothing(
    tmp_path: Path, argv: list[str]
) -> None:
    policy = Retention(max_marks=5, grace_s=0)
    here, _, _, now = _history(tmp_path / "here")
    here.close()
    shutil.copytree(tmp_path / "here", tmp_path / "child")
    here, child = Store.open(tmp_path / "here"), Store.open(tmp_path / "child")
    try:
        a = gc.run(here, policy, now=now)
        with ChildMarkPhase(child, argv=argv) as phase:
            b = gc.run(child, policy, now=now, mark=phase)
        assert phase.fallback is not None and "ran in the daemon" in phase.fallback
        assert phase.steps == 0
        assert (a.evicted, a.objects_deleted, a.bytes_freed) == (b.evicted, b.objects_deleted, b.bytes_freed)
        assert a.objects_deleted > 0 and _keys(here) == _keys(child) and verify(child).ok
    finally:
        here.close()
        child.close()


def _gone(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ")[-1].startswith("Z")  # a zombie has ended
    except FileNotFoundError:
        return True


def test_the_child_ends_with_the_run_and_when_the_daemon_dies(tmp_path: Path) -> None:
    s, _, _, now = _history(tmp_path / "store")
    with ChildMarkPhase(s) as phase:
        gc.run(s, Retention(max_marks=5, grace_s=0), now=now, mark=phase)
        pid = phase.pid
        assert pid is not None and not _gone(pid)
    assert _gone(pid)
    s.close()
    # A parent killed while its child waits for the next step: the child reads EOF and exits.
    script = textwrap.dedent(
        f"""
        import os, sys, time
        from pathlib import Path
        from snapd.config import Retention
        from snapd.daemon.gcchild import ChildMarkPhase
        from snapd.store.store import Store
        s = Store.open(Path({str(tmp_path / "store")!r}))
        phase = ChildMarkPhase(s)
        phase.kept_bytes(Retention(), {now}, set())
        print(phase.pid, flush=True)
        time.sleep(600)
        """
    )
    parent = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, cwd="/")
    assert parent.stdout is not None
    child = int(parent.stdout.readline())
    assert not _gone(child)
    parent.send_signal(signal.SIGKILL)
    parent.wait()
    wait_for(lambda: _gone(child), what="the orphaned mark process exits", timeout=20)


def test_a_mark_process_busy_in_a_step_is_killed_with_the_daemon(tmp_path: Path) -> None:
    """A parent killed while its child walks (busy, not reading its pipe, so no EOF tells it):
    the kernel kills the child with it (``PR_SET_PDEATHSIG``). An orphan walking on kept the
    store's file system busy: the power-cut test's unmount after a kill -9 failed."""
    s, _, _, now = _history(tmp_path / "store")
    s.close()
    pid_file = tmp_path / "child.pid"
    slow_child = textwrap.dedent(
        f"""
        import os, sys, time
        from snapd.store import gcmark
        def walk(*args):  # a walk of a store far larger than this one
            open({str(pid_file)!r}, "w").write(str(os.getpid()))
            time.sleep(600)
        gcmark.Here.kept_bytes = walk
        sys.exit(gcmark.main())
        """
    )
    script = textwrap.dedent(
        f"""
        import sys
        from pathlib import Path
        from snapd.config import Retention
        from snapd.daemon.gcchild import ChildMarkPhase
        from snapd.store.store import Store
        s = Store.open(Path({str(tmp_path / "store")!r}))
        ChildMarkPhase(s, argv=[sys.executable, "-c", {slow_child!r}]).kept_bytes(Retention(), {now}, set())
        """
    )
    parent = subprocess.Popen([sys.executable, "-c", script], cwd="/", start_new_session=True)
    child = None
    try:
        wait_for(lambda: pid_file.exists() and pid_file.read_text() != "", what="the child walks", timeout=30)
        child = int(pid_file.read_text())
        assert not _gone(child)
        parent.send_signal(signal.SIGKILL)
        parent.wait()
        wait_for(lambda: _gone(child), what="the busy mark process is killed with its parent", timeout=10)
    finally:
        try:
            os.killpg(parent.pid, signal.SIGKILL)  # this test failed: leave no orphan behind
        except ProcessLookupError:
            pass
        parent.wait()


def _daemon_with_marks(tmp_path: Path, marks: int, **env: str) -> tuple[Daemon, Path]:
    """A real daemon (retention's grace 10 ms, ``env`` on top) watching a workspace with
    ``marks`` marks of one changing file."""
    home = tmp_path / "snapd-home"
    d = start_daemon(home, {**base_env(home), "SNAPD_RETENTION_GRACE_S": "0.01", **env})
    try:
        root = tmp_path / "ws"
        root.mkdir()
        d.ctl("watch", root)
        for i in range(marks):
            (root / "f.bin").write_bytes(os.urandom(3000))
            d.ctl("mark", f"m{i}", "-w", root)
    except BaseException:
        d.stop()
        raise
    return d, root


def test_the_daemons_gc_marks_in_a_process_of_its_own(tmp_path: Path) -> None:
    """`snapctl gc` on a real daemon: the mark phase ran in another process (its pid, steps and
    peak memory in the reply), and the GC did its work: the evicted marks' content is gone,
    the store verifies."""
    d, _ = _daemon_with_marks(tmp_path, 5, SNAPD_RETENTION_MAX_AGE_DAYS="0.000001")
    try:
        time.sleep(0.2)  # past the grace period and the age window
        rep = d.ctl_json("gc")
        phase = rep["mark_phase"]
        assert phase["pid"] not in (None, d.pid) and phase["fallback"] is None, rep
        assert phase["steps"] >= 1 and phase["max_rss"] > 1_000_000, rep
        assert len(rep["evicted"]) == 5 and rep["objects_deleted"] >= 4, rep  # all but the newest
        assert _gone(phase["pid"])
        d.ctl("verify")
    finally:
        assert d.stop() == 0


def test_a_sweeps_touched_keys_are_the_candidates_batches_held_before_or_after_it_knew_them() -> None:
    """While the mark phase walks, every hold is kept (as a digest); once the sweep knows its
    candidates, only theirs: a candidate held and released during the walk, or after, is
    spared to the sweep's end; nothing is spared once it ends."""
    h = GcHolds()
    with h.sweeping():
        with h.lock:
            h.hold("k1")
            h.hold("k2")
        h.release(["k1", "k2"])
        with h.lock:
            assert h.spared("k1") and h.spared("k2") and not h.spared("k3")  # before the candidates
        h.narrow(["k1", "k3", "k4"])
        with h.lock:
            h.hold("k3")
        h.release(["k3"])
        with h.lock:
            assert h.spared("k1") and h.spared("k3")
            assert not h.spared("k4") and not h.spared("k2")
    with h.lock:
        assert not any(h.spared(k) for k in ("k1", "k2", "k3"))


def test_a_second_sweep_beside_a_running_one_is_refused() -> None:
    """Two sweeps at once would share one set of touched keys, and the first to end would
    clear the other's: the second is refused (the daemon runs its GCs one at a time)."""
    h = GcHolds()
    with h.sweeping():
        with pytest.raises(RuntimeError, match="one at a time"), h.sweeping():
            pass
        with h.lock:
            h.hold("k1")
        h.release(["k1"])
        with h.lock:
            assert h.spared("k1")  # the refused one left the running sweep's keys alone


def test_gcs_asked_for_at_once_run_one_after_the_other(tmp_path: Path) -> None:
    """Several `snapctl gc` at once (and the periodic run beside them) all succeed: the daemon
    runs them one at a time instead of two sweeps sharing the holds."""
    d, root = _daemon_with_marks(tmp_path, 3)
    try:
        env = {**d.env}
        procs = [
            subprocess.Popen([sys.executable, "-m", "snapd", "gc", "--json"], env=env, cwd=root,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE)
            for _ in range(4)
        ]
        outs = [(p.wait(60), *p.communicate()) for p in procs]
        assert all(code == 0 for code, _, _ in outs), outs
        d.ctl("verify")
    finally:
        assert d.stop() == 0
