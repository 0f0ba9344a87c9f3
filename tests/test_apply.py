"""Apply tests on real directories: restore, re-check, containment, and crash recovery.

Trees come from a real store: a builder function lays out the *current* and the *target*
workspace, both are captured with ``ingest_tree``, and the plan between them is applied to a
fresh copy of the current layout. Success means the workspace's full listing (kinds, modes,
contents, link texts) equals the target layout's, with no temp file and no journal left.
Crash tests fork a child that dies right after the N-th persistent step, for every N, then
recover in the parent (and, for a few N, crash the recovery itself at every step too).
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import FsyncFaults
from disks import xfs_disk
from e2e_helpers import unavailable
from ingest_helpers import ingest_tree

from snapd import paths
from snapd.errors import Conflict, StoreError
from snapd.rollback.apply import ApplyResult, apply, recover
from snapd.rollback.ops import Plan
from snapd.rollback.plan import plan
from snapd.store import safeio
from snapd.store.objects import xxh3_hex
from snapd.store.store import Store

pytestmark = pytest.mark.timeout(300)

NOBODY = 65534
Builder = Callable[[Path], None]
Listing = dict[str, tuple[str, int, bytes]]


def write(path: Path, data: str | bytes, mode: int = 0o644) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data.encode() if isinstance(data, str) else data)
    path.chmod(mode)


def target_tree(ws: Path) -> None:
    ws.mkdir(parents=True)
    write(ws / "same.txt", "same")
    write(ws / "mod.txt", "old content\n" * 50)
    write(ws / "gone.txt", "deleted since M")
    write(ws / "exe.sh", "#!/bin/sh\n", 0o755)
    write(ws / "sub/deep/x.txt", "x")
    write(ws / "ro/inner.txt", "inner at M")
    write(ws / "swapdir", "a file at M")
    write(ws / "lnk2/in.txt", "a dir at M")
    (ws / "emptydir").mkdir(mode=0o750)
    (ws / "emptydir").chmod(0o750)
    os.symlink("mod.txt", ws / "link")
    os.symlink("same.txt", ws / "swap")
    (ws / "ro").chmod(0o500)


def current_tree(ws: Path) -> None:
    ws.mkdir(parents=True)
    write(ws / "same.txt", "same")
    write(ws / "mod.txt", "new content")
    write(ws / "new.txt", "created since M")
    write(ws / "exe.sh", "#!/bin/sh\n", 0o644)
    write(ws / "newdir/a/b.txt", "b")
    write(ws / "ro/inner.txt", "inner changed")
    write(ws / "swap/inside.txt", "swap is a dir now")
    write(ws / "swapdir/f", "swapdir is a dir now")
    os.symlink("elsewhere", ws / "lnk2")
    os.symlink("same.txt", ws / "link")


def listing(root: Path) -> Listing:
    out: Listing = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            p = Path(dirpath) / name
            st = p.lstat()
            rel = str(p.relative_to(root))
            if stat.S_ISLNK(st.st_mode):
                out[rel] = ("symlink", 0, os.readlink(p).encode())
            elif stat.S_ISDIR(st.st_mode):
                out[rel] = ("dir", stat.S_IMODE(st.st_mode), b"")
            elif stat.S_ISREG(st.st_mode):
                out[rel] = ("file", stat.S_IMODE(st.st_mode), p.read_bytes())
            else:
                out[rel] = ("special", stat.S_IMODE(st.st_mode), b"")
    return out


class Case:
    """Capture both layouts, plan from current to target; lay out fresh copies to apply to."""

    def __init__(self, tmp: Path, current: Builder, target: Builder, **plan_args: object) -> None:
        self.tmp, self.current = tmp, current
        with Store.open(tmp / "store") as store:
            trees = []
            for name, build in (("cur-ref", current), ("tgt-ref", target)):
                build(tmp / name)
                wid = store.add_workspace(os.fsencode(tmp / name))
                trees.append(ingest_tree(store, wid, tmp / name).tree)
            self.plan: Plan = plan(store.load_node, trees[0], trees[1], **plan_args)  # type: ignore[arg-type]
            keys = {
                e.key
                for op in self.plan.ops
                for e in (op.entry, op.expect)
                if e and e.kind not in ("dir", "uncaptured")
            }
            self.objects = {k: store.get(k) for k in keys}
        self.want = listing(tmp / "tgt-ref")
        self.before = listing(tmp / "cur-ref")
        self.n = 0

    def fresh(self) -> tuple[Path, Path]:
        self.n += 1
        ws = self.tmp / f"ws{self.n}"
        self.current(ws)
        (self.tmp / "state").mkdir(exist_ok=True)
        return ws.resolve(), self.tmp / "state" / f"journal{self.n}.json"

    def get(self, key: str) -> bytes:
        return self.objects[key]

    def apply(self, ws: Path, journal: Path, p: Plan | None = None, **kw: bool) -> ApplyResult:
        return apply(ws, p or self.plan, self.get, xxh3_hex, journal, **kw)


def no_temps(ws: Path) -> bool:
    return not any(paths.is_snapd_name(n) for _, ds, fs in os.walk(ws) for n in ds + fs)


def test_apply_restores_every_kind_of_change(tmp_path: Path) -> None:
    case = Case(tmp_path, current_tree, target_tree)
    ws, journal = case.fresh()
    start = time.time()
    result = case.apply(ws, journal)
    assert listing(ws) == case.want
    assert result.ok and not journal.exists() and no_temps(ws)
    assert (ws / "mod.txt").stat().st_mtime >= start - 1  # restored files carry the current time
    assert b"gone.txt" in result.applied and b"new.txt" in result.applied
    # applying the same plan again: everything is recognised as done, nothing conflicts
    again = case.apply(ws, journal)
    assert again.ok and listing(ws) == case.want


def test_changed_path_is_left_alone_and_reported(tmp_path: Path) -> None:
    case = Case(tmp_path, current_tree, target_tree)
    ws, journal = case.fresh()
    (ws / "mod.txt").write_bytes(b"a concurrent writer")
    (ws / "new.txt").unlink()  # already gone: its removal is done, not a conflict
    (ws / "gone.txt").write_bytes(b"someone recreated it")
    result = case.apply(ws, journal)
    assert dict(result.conflicts).keys() == {b"mod.txt", b"gone.txt"}
    assert (ws / "mod.txt").read_bytes() == b"a concurrent writer"
    assert (ws / "gone.txt").read_bytes() == b"someone recreated it"
    got, want = listing(ws), case.want
    assert {k: v for k, v in got.items() if k not in ("mod.txt", "gone.txt")} == {
        k: v for k, v in want.items() if k not in ("mod.txt", "gone.txt")
    }
    assert not journal.exists() and no_temps(ws)


def test_directory_swapped_for_symlink_outside_is_replaced(tmp_path: Path) -> None:
    def target(ws: Path) -> None:
        write(ws / "d/f", "f at M")
        write(ws / "d/g", "g at M")

    def current(ws: Path) -> None:
        write(ws / "d/f", "f now")

    outside = tmp_path / "outside"
    write(outside / "f", "outside f")
    write(outside / "keep", "outside keep")
    before = listing(outside)
    case = Case(tmp_path, current, target)
    ws, journal = case.fresh()
    for p in (ws / "d").iterdir():
        p.unlink()
    (ws / "d").rmdir()
    (ws / "d").symlink_to(outside, target_is_directory=True)
    result = case.apply(ws, journal)
    assert listing(outside) == before
    assert (ws / "d").is_dir() and not (ws / "d").is_symlink()
    assert result.replaced == (b"d",)
    assert (ws / "d/g").read_bytes() == b"g at M"  # expected absent: restored into the real dir
    assert dict(result.conflicts) == {b"d/f": "changed since the plan was made: it is gone"}


def test_file_swapped_for_symlink_outside_is_not_followed(tmp_path: Path) -> None:
    def target(ws: Path) -> None:
        write(ws / "f", "f at M")

    def current(ws: Path) -> None:
        write(ws / "f", "f now")
        write(ws / "n", "created since M")

    outside = tmp_path / "outside"
    write(outside / "secret", "outside secret", 0o600)
    before = listing(outside)
    case = Case(tmp_path, current, target)
    ws, journal = case.fresh()
    for name in ("f", "n"):
        (ws / name).unlink()
        (ws / name).symlink_to(outside / "secret")
    result = case.apply(ws, journal)
    assert listing(outside) == before
    assert (ws / "f").is_symlink() and (ws / "n").is_symlink()
    assert dict(result.conflicts).keys() == {b"f", b"n"}


def test_parent_turned_into_a_file_is_a_conflict(tmp_path: Path) -> None:
    def target(ws: Path) -> None:
        write(ws / "d/new", "new at M")

    def current(ws: Path) -> None:
        (ws / "d").mkdir(parents=True)

    case = Case(tmp_path, current, target)
    ws, journal = case.fresh()
    (ws / "d").rmdir()
    write(ws / "d", "a file now")
    result = case.apply(ws, journal)
    assert (ws / "d").read_bytes() == b"a file now"
    assert dict(result.conflicts) == {b"d/new": "d is not a directory"}


def test_uncapturable_paths_kept_unless_forced(tmp_path: Path) -> None:
    def target(ws: Path) -> None:
        write(ws / "p", "p at M")
        write(ws / "ok", "ok at M")

    def current(ws: Path) -> None:
        ws.mkdir(parents=True)
        os.mkfifo(ws / "p")
        write(ws / "ok", "ok now")
        write(ws / "newdir/x", "x")
        os.mkfifo(ws / "newdir/fifo")

    unc = {b"p": "special file", b"newdir/fifo": "special file"}
    kept = Case(tmp_path / "a", current, target, uncapturable=unc)
    assert [p for p, _ in kept.plan.kept] == [b"newdir", b"p"]
    ws, journal = kept.fresh()
    result = kept.apply(ws, journal)
    assert not result.ok and dict(result.kept).keys() == {b"newdir", b"p"}
    assert stat.S_ISFIFO((ws / "p").lstat().st_mode) and stat.S_ISFIFO((ws / "newdir/fifo").lstat().st_mode)
    assert (ws / "ok").read_bytes() == b"ok at M" and not (ws / "newdir/x").exists()

    forced = Case(tmp_path / "b", current, target, uncapturable=unc, force=True)
    ws, journal = forced.fresh()
    refused = forced.apply(ws, journal)  # a forced plan needs a forced apply
    assert dict(refused.conflicts).keys() == {b"p", b"newdir/fifo"}
    ws, journal = forced.fresh()
    result = forced.apply(ws, journal, force=True)
    assert result.ok and listing(ws) == forced.want


def test_directory_still_holding_ignored_entries_is_kept(tmp_path: Path) -> None:
    def target(ws: Path) -> None:
        ws.mkdir(parents=True)

    def current(ws: Path) -> None:
        write(ws / "build/out.txt", "captured")
        write(ws / "build/obj.o", "ignored")

    def current_without_ignored(ws: Path) -> None:
        write(ws / "build/out.txt", "captured")

    case = Case(tmp_path, current_without_ignored, target)
    case.current = current  # the workspace also holds an ignored file the trees never saw
    ws, journal = case.fresh()
    result = case.apply(ws, journal)
    assert dict(result.kept) == {b"build": "still holds paths that are not captured"}
    assert (ws / "build/obj.o").read_bytes() == b"ignored" and not (ws / "build/out.txt").exists()


def test_apply_refuses_while_a_journal_exists(tmp_path: Path) -> None:
    case = Case(tmp_path, current_tree, target_tree)
    ws, journal = case.fresh()
    journal.write_text("{}")
    with pytest.raises(Conflict):
        case.apply(ws, journal)
    assert listing(ws) == case.before


# -- crashes ----------------------------------------------------------------------------------


def _in_child(action: Callable[[], object], n: int) -> int:
    pid = os.fork()
    if pid == 0:
        code = 0
        try:
            safeio.crash_after(n)
            action()
        except BaseException:
            code = 1
        os._exit(code)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status)


def _count(action: Callable[[], object]) -> int:
    safeio.crash_after(None)
    action()
    return safeio.operations()


def _converged(case: Case, ws: Path, journal: Path) -> None:
    assert listing(ws) == case.want
    assert no_temps(ws) and not journal.exists()


def _as_nobody(action: Callable[[], bool]) -> int:
    """Run ``action`` in a child as uid/gid 65534 (root ignores modes); its exit code: 0 when it
    returned True, 2 when False, 1 when it raised."""
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            os.setgid(NOBODY)
            os.setuid(NOBODY)
            code = 0 if action() else 2
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status)


class _NobodyWorkspace:
    """A workspace laid out by ``build`` in a directory ``nobody`` can reach, owned by it."""

    def __init__(self, build: Builder) -> None:
        self.base = Path(tempfile.mkdtemp(dir="/tmp"))  # pytest's own directories are private to root
        self.base.chmod(0o755)
        self.ws, self.journal = self.base / "ws", self.base / "state" / "journal.json"
        build(self.ws)
        (self.base / "state").mkdir()

    def own(self) -> None:
        for path in [self.base, *self.base.rglob("*")]:
            os.chown(path, NOBODY, NOBODY, follow_symlinks=False)

    def close(self) -> None:
        subprocess.run(["chmod", "-R", "u+rwx", str(self.base)], check=True)
        shutil.rmtree(self.base)


def _apply_as_nobody(case: Case) -> None:
    """Lay out ``case.current`` for ``nobody`` and apply the plan as ``nobody``: exactly."""
    where = _NobodyWorkspace(case.current)
    try:
        where.own()
        assert _as_nobody(lambda: case.apply(where.ws, where.journal).ok) == 0
        assert listing(where.ws) == case.want and not where.journal.exists()
    finally:
        where.close()


def test_crash_at_every_apply_step_then_recover(tmp_path: Path) -> None:
    case = Case(tmp_path, current_tree, target_tree)
    ws, journal = case.fresh()
    total = _count(lambda ws=ws, journal=journal: case.apply(ws, journal))
    assert total > 30
    crashed, temps_removed = 0, 0
    for n in range(1, total + 1):
        ws, journal = case.fresh()
        code = _in_child(lambda ws=ws, journal=journal: case.apply(ws, journal), n)
        assert code in (0, safeio.CRASH_EXIT_CODE)
        crashed += code == safeio.CRASH_EXIT_CODE
        report = recover(ws, journal, case.get, xxh3_hex)
        if report is None and n < 3:  # died before the journal was published: nothing was touched
            assert listing(ws) == case.before
            continue
        # or it died after deleting the journal (the deletion and its directory's fsync)
        assert report is not None or n >= total - 1
        assert report is None or (report.ok and report.token == case.plan.token)
        temps_removed += report.temps_removed if report else 0
        _converged(case, ws, journal)
    assert crashed >= total - 1
    assert temps_removed > 0  # some crashes fell between a temp file's write and its rename
    assert recover(ws, journal, case.get, xxh3_hex) is None  # nothing left to recover


@pytest.mark.parametrize("fraction", [0.3, 0.6, 0.9])
def test_crash_during_recovery_at_every_step(tmp_path: Path, fraction: float) -> None:
    case = Case(tmp_path, current_tree, target_tree)
    ws, journal = case.fresh()
    n = max(4, int(_count(lambda ws=ws, journal=journal: case.apply(ws, journal)) * fraction))
    ws, journal = case.fresh()
    assert _in_child(lambda ws=ws, journal=journal: case.apply(ws, journal), n) == safeio.CRASH_EXIT_CODE
    total = _count(lambda ws=ws, journal=journal: recover(ws, journal, case.get, xxh3_hex))
    _converged(case, ws, journal)
    assert total > 0
    for m in range(1, total + 1):
        ws, journal = case.fresh()
        assert _in_child(lambda ws=ws, journal=journal: case.apply(ws, journal), n) == safeio.CRASH_EXIT_CODE
        assert _in_child(lambda ws=ws, journal=journal: recover(ws, journal, case.get, xxh3_hex), m) in (
            0,
            safeio.CRASH_EXIT_CODE,
        )
        assert recover(ws, journal, case.get, xxh3_hex) is not None or not journal.exists()
        _converged(case, ws, journal)


def test_read_only_directories_as_an_unprivileged_user(tmp_path: Path) -> None:
    """Root ignores modes, so the apply runs as ``nobody``: dirs read-only now or at M still work."""
    if os.geteuid() != 0:
        unavailable("needs root to run the apply as another uid")

    def target(ws: Path) -> None:
        write(ws / "ro_now/f", "f at M")
        write(ws / "ro_at_m/g", "g at M")
        write(ws / "new_ro/h", "h at M")
        for d in ("ro_at_m", "new_ro"):
            (ws / d).chmod(0o500)

    def current(ws: Path) -> None:
        write(ws / "ro_now/f", "f now")
        write(ws / "ro_at_m/g", "g now")
        (ws / "ro_now").chmod(0o555)

    _apply_as_nobody(Case(tmp_path, current, target))


def test_a_directory_whose_parent_loses_search_permission_gets_its_mode(tmp_path: Path) -> None:
    """Found by a review: directory modes are set deepest first, and syncing a directory's new
    mode at the end of the phase opened it through its parent, which by then had lost the
    owner's search permission to its own chmod (``x`` 0755 -> 0600): the apply failed with a
    bare PermissionError (recovery too, at every start). Each inode is opened for its sync
    right after its chmod. Run as ``nobody``: root ignores modes."""

    def target(ws: Path) -> None:
        (ws / "x/y").mkdir(parents=True)
        (ws / "x/y").chmod(0o700)
        (ws / "x").chmod(0o600)

    def current(ws: Path) -> None:
        (ws / "x/y").mkdir(parents=True)

    if os.geteuid() != 0:
        pytest.fail("needs root: to run the apply as another user")
    _apply_as_nobody(Case(tmp_path, current, target))


def test_a_temp_whose_fsync_fails_is_never_renamed_into_place(
    tmp_path: Path, fsync_faults: FsyncFaults
) -> None:
    """An fsync error is final: the content it covered may be gone from the disk, so the temp
    is dropped and its path left as it was (a conflict), never published as if it worked."""
    case = Case(tmp_path, current_tree, target_tree)
    ws, journal = case.fresh()
    fsync_faults.fail_when = lambda p: paths.is_snapd_name(os.path.basename(p)) and p.startswith(str(ws))
    result = case.apply(ws, journal)
    assert len(fsync_faults.failed) == 1, fsync_faults.failed
    (bad, why), *_ = result.conflicts
    assert len(result.conflicts) == 1 and "Input/output error" in why, result.conflicts
    got = listing(ws)
    rel = os.fsdecode(bad)
    assert got.get(rel) == case.before.get(rel) != case.want.get(rel), (rel, got.get(rel))
    assert {k: v for k, v in got.items() if k != rel} == {k: v for k, v in case.want.items() if k != rel}
    assert no_temps(ws) and not journal.exists()


@pytest.mark.parametrize(
    ("when", "swap"),
    [("apply.write_temp", "symlink"), ("apply.fsync_temp", "symlink"), ("apply.fsync_temp", "directory")],
)
def test_a_directory_swapped_during_the_apply_is_never_followed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, when: str, swap: str
) -> None:
    """The apply has begun (the first temp is written, or fsynced) when ``d`` is moved away and
    replaced: by a symlink to a directory outside, or by another directory, each holding
    exactly what the plan expects at ``d/f`` (a re-check of the path alone would pass).
    Nothing outside changes, ``d`` is a real directory, ``d/f`` is a conflict, no temp is left
    anywhere (O_NOFOLLOW on every component; the directory re-checked before each rename)."""

    def target(ws: Path) -> None:
        write(ws / "a.txt", "a at M")
        write(ws / "d/f", "f at M")

    def current(ws: Path) -> None:
        write(ws / "a.txt", "a now")
        write(ws / "d/f", "f now")

    outside = tmp_path / "outside"
    write(outside / "f", "f now")
    before = listing(outside)
    case = Case(tmp_path, current, target)
    ws, journal = case.fresh()
    moved = tmp_path / "moved-d"
    real_step = safeio.step

    def step(name: str) -> None:
        real_step(name)
        if name == when and not moved.exists():
            (ws / "d").rename(moved)
            if swap == "symlink":
                (ws / "d").symlink_to(outside, target_is_directory=True)
            else:
                write(ws / "d/f", "f now")

    monkeypatch.setattr(safeio, "step", step)
    result = case.apply(ws, journal)
    assert moved.exists(), "the swap never happened: nothing tested"
    assert listing(outside) == before
    assert (ws / "d").is_dir() and not (ws / "d").is_symlink()
    conflicts = dict(result.conflicts)
    if swap == "directory":  # staged in the old directory: caught right before the rename
        assert conflicts == {b"d/f": "its directory was replaced during the rollback"}, conflicts
        assert (ws / "d/f").read_bytes() == b"f now"
    else:
        assert b"d/f" in conflicts, conflicts
    assert (ws / "a.txt").read_bytes() == b"a at M"
    assert no_temps(ws) and no_temps(moved) and no_temps(outside)
    assert not journal.exists()


# -- power cuts: what the journal's removal leaves on a real disk ---------------------------------


@pytest.mark.powercut
def test_a_finished_rollback_leaves_no_journal_for_a_power_cut_to_bring_back(tmp_path: Path) -> None:
    """Deleting the journal is part of the apply, made durable before it returns. Found by
    test_powercut: XFS kept the deletion in its in-memory log, a power cut brought the journal
    of a rollback finished long before back, and start-up "finished" that old rollback again
    over the work done since (paths still holding its ``expect`` were rewritten)."""
    case = Case(tmp_path, current_tree, target_tree)
    ws, _ = case.fresh()
    with xfs_disk(tmp_path / "disk") as disk:
        journal = disk.mount / "journal" / "workspace-1.json"
        assert case.apply(ws, journal).ok and not journal.exists()
        disk.cut()
        disk.remount()
        assert not journal.exists(), "a finished rollback's journal came back after a power cut"


@pytest.mark.powercut
def test_a_recovered_rollback_leaves_no_journal_for_a_power_cut_to_bring_back(tmp_path: Path) -> None:
    """The same for a rollback finished by recovery: its journal's deletion is durable too."""
    case = Case(tmp_path, current_tree, target_tree)
    ws, _ = case.fresh()
    with xfs_disk(tmp_path / "disk") as disk:
        journal = disk.mount / "journal" / "workspace-1.json"
        n = _count(lambda: case.apply(case.fresh()[0], journal)) // 2
        assert _in_child(lambda: case.apply(ws, journal), n) == safeio.CRASH_EXIT_CODE
        assert journal.exists()
        assert recover(ws, journal, case.get, xxh3_hex) is not None
        _converged(case, ws, journal)
        disk.cut()
        disk.remount()
        assert not journal.exists(), "a recovered rollback's journal came back after a power cut"


@pytest.mark.powercut
@pytest.mark.parametrize("change", ["a file's mode", "a file's and a directory's modes", "every kind"])
def test_a_rollback_s_modes_survive_a_power_cut_on_the_workspace_s_disk(tmp_path: Path, change: str) -> None:
    """A chmod changes only the inode it names: fsyncing its parent directory does not carry it
    (XFS writes nothing for a directory with nothing logged). With the workspace on its own disk
    and the store elsewhere, an acknowledged rollback's modes must be there after a power cut:
    a file's alone, a file's and a directory's, and among every other kind of change."""

    def target(ws: Path) -> None:
        write(ws / "d/f", "f")
        write(ws / "x.sh", "#!/bin/sh\n", 0o755)
        if change != "a file's mode":
            (ws / "d").chmod(0o700)

    def current(ws: Path) -> None:
        write(ws / "d/f", "f")
        write(ws / "x.sh", "#!/bin/sh\n", 0o644)

    if change == "every kind":
        current, target = current_tree, target_tree
    case = Case(tmp_path, current, target)
    assert any(op.kind == "chmod" for op in case.plan.ops)
    with xfs_disk(tmp_path / "disk") as disk:
        ws = disk.mount / "ws"
        case.current(ws)
        os.sync()  # the workspace as it was before the rollback is on the disk
        journal = tmp_path / "state" / "journal.json"
        journal.parent.mkdir()
        assert case.apply(ws, journal).ok
        disk.cut()
        disk.remount()
        got = listing(ws)
        assert got == case.want, {k: (got.get(k), v) for k, v in case.want.items() if got.get(k) != v}


@pytest.mark.powercut
@pytest.mark.parametrize("what", ["a rename in a 0300 directory", "a file's mode 0100"])
def test_what_its_owner_may_not_open_is_still_made_durable(tmp_path: Path, what: str) -> None:
    """A directory of mode 0300 (write and search, no read) cannot be opened to fsync it; the
    apply once took that as "nothing to do" and acknowledged a rename a power cut then undid.
    A file of mode 0100 cannot be opened either, to fsync its new mode: its file system is
    synced (``syncfs``). Run as ``nobody`` (root opens anything), the workspace on its own disk."""

    def target(ws: Path) -> None:
        write(ws / "w/f", "f at M")
        write(ws / "x", "x", 0o100 if what == "a file's mode 0100" else 0o644)
        (ws / "w").chmod(0o300)

    def current(ws: Path) -> None:
        write(ws / "w/f", "f now" if what == "a rename in a 0300 directory" else "f at M")
        write(ws / "x", "x")
        (ws / "w").chmod(0o300)

    if os.geteuid() != 0:
        pytest.fail("needs root: to mount a disk and to run the apply as another user")
    case = Case(tmp_path, current, target)
    assert len(case.plan.ops) == 1
    base = Path(tempfile.mkdtemp(dir="/tmp"))  # pytest's own directories are private to root
    try:
        base.chmod(0o755)
        with xfs_disk(base / "disk") as disk:
            ws, journal = disk.mount / "ws", base / "state" / "journal.json"
            current(ws)
            (base / "state").mkdir()
            for path in [base / "state", ws, *ws.rglob("*")]:
                os.chown(path, NOBODY, NOBODY, follow_symlinks=False)
            os.sync()
            assert _as_nobody(lambda: case.apply(ws, journal).ok) == 0
            disk.cut()
            disk.remount()
            got = listing(ws)
            assert got == case.want, {k: (got.get(k), v) for k, v in case.want.items() if got.get(k) != v}
    finally:
        shutil.rmtree(base)


@pytest.mark.powercut
@pytest.mark.parametrize("crash_after_chmod", [1, 2], ids=["file's", "directory's"])
def test_a_mode_found_done_by_recovery_is_made_durable(tmp_path: Path, crash_after_chmod: int) -> None:
    """snapd died right after a chmod (a file's alone; a file's and a directory's, after the
    second), before syncing it;
    recovery finds the mode already there and must still sync its inode before it deletes
    the journal, or a power cut afterwards undoes a rollback that no journal finishes."""

    def target(ws: Path) -> None:
        write(ws / "d/f", "f")
        write(ws / "x.sh", "#!/bin/sh\n", 0o755)
        if crash_after_chmod == 2:
            (ws / "d").chmod(0o700)

    def current(ws: Path) -> None:
        write(ws / "d/f", "f")
        write(ws / "x.sh", "#!/bin/sh\n", 0o644)

    case = Case(tmp_path, current, target)
    modes = [(op.kind, op.path) for op in case.plan.ops]
    assert modes == [("chmod", b"x.sh"), ("chmod", b"d")][:crash_after_chmod]
    with xfs_disk(tmp_path / "disk") as disk:
        ws, journal = disk.mount / "ws", tmp_path / "state" / "journal.json"
        case.current(ws)
        journal.parent.mkdir()
        os.sync()
        pid = os.fork()
        if pid == 0:
            try:
                safeio.crash_after(crash_after_chmod, only="apply.chmod")
                case.apply(ws, journal)
            finally:
                os._exit(1)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == safeio.CRASH_EXIT_CODE
        result = recover(ws, journal, case.get, xxh3_hex)
        assert result is not None and not journal.exists()
        disk.cut()
        disk.remount()
        got = listing(ws)
        assert got == case.want, {k: (got.get(k), v) for k, v in case.want.items() if got.get(k) != v}


def test_gc_keeps_every_object_an_unfinished_rollback_reads(tmp_path: Path) -> None:
    """``journal.needs`` (what GC keeps for a rollback stopped part-way): the contents its writes
    write, and the objects its checks compare by content: a symlink's text (its target's and the
    one it expects to replace) and a file whose key is a collision variant, which is compared
    byte for byte; a plain file's expected content is compared by hash and needs no object."""
    from snapd.rollback import journal as journals
    from snapd.rollback.ops import Op
    from snapd.store.objects import variant_key
    from snapd.store.trees import Entry

    written, link_now, link_then = "a" * 32 + "-5", "b" * 32 + "-3", "c" * 32 + "-4"
    plain, collided = "d" * 32 + "-7", variant_key("e" * 32 + "-9", 1)
    ops = (
        Op("write", b"f", Entry("file", 0o644, 5, written), Entry("file", 0o644, 7, plain)),
        Op("symlink", b"l", Entry("symlink", 0o777, 4, link_then), Entry("symlink", 0o777, 3, link_now)),
        Op("chmod", b"g", Entry("file", 0o755, 9, collided), Entry("file", 0o644, 9, collided)),
        Op("remove", b"h", None, Entry("file", 0o644, 7, plain)),
    )
    p = Plan(ops, (), {})
    path = tmp_path / "journal.json"
    journals.Writer(path, tmp_path, p, [None] * len(ops), False).record(0)
    assert journals.needs(path) == {written, link_then, link_now, collided}
    assert journals.needs(tmp_path / "none.json") == set()
    path.write_text("{not json")
    assert journals.needs(path) == set()  # read() refuses it: recovery never runs it


def test_a_recovery_reopens_the_directories_its_apply_closed(tmp_path: Path) -> None:
    """Found by a review: the apply died after its last phase set ``p`` to 0600 (no search for
    the owner), with ``p/q/f`` written below it. Recovery opened ``p/q`` to remove the journaled
    temps and failed with a bare PermissionError at every start, the journal left for good.
    It now gives the owner write and search back on what the apply's own chmods closed,
    parents first, and sets their modes again at the end. As ``nobody``: root ignores modes."""

    def target(ws: Path) -> None:
        write(ws / "p/q/f", "f at M")
        (ws / "p").chmod(0o600)

    def current(ws: Path) -> None:
        write(ws / "p/q/f", "f now")

    if os.geteuid() != 0:
        pytest.fail("needs root: to run the apply as another user")
    case = Case(tmp_path, current, target)
    where = _NobodyWorkspace(current)
    try:
        where.own()
        ws, journal = where.ws, where.journal

        def crash_after_the_last_chmod() -> bool:
            safeio.crash_after(1, only="apply.chmod")
            case.apply(ws, journal)
            return False

        assert _as_nobody(crash_after_the_last_chmod) == safeio.CRASH_EXIT_CODE
        assert journal.exists() and stat.S_IMODE((ws / "p").stat().st_mode) == 0o600
        assert _as_nobody(lambda: recover(ws, journal, case.get, xxh3_hex) is not None) == 0
        assert listing(ws) == case.want and not journal.exists() and no_temps(ws)
    finally:
        where.close()


def test_a_symlink_replaced_below_a_directory_closed_at_the_end_is_no_obstacle(tmp_path: Path) -> None:
    """Found by a review: the parent of a symlink the apply replaced by a directory was synced
    again at the end of every phase, the last one too, when ``p`` above it had lost the owner's
    search permission to its own chmod: the apply failed with a bare PermissionError. It is
    synced once, at the end of the phase that replaced it. (``p/q/d/f`` is a conflict: the
    symlink's directory is never followed, so the file it expected is gone.) As ``nobody``."""

    def target(ws: Path) -> None:
        write(ws / "p/q/d/f", "f at M")
        write(ws / "p/q/d/g", "g at M")
        (ws / "p").chmod(0o600)

    def current(ws: Path) -> None:
        write(ws / "p/q/d/f", "f now")

    if os.geteuid() != 0:
        pytest.fail("needs root: to run the apply as another user")
    case = Case(tmp_path, current, target)
    where = _NobodyWorkspace(current)
    try:
        outside = where.base / "outside"
        write(outside / "f", "outside f")
        shutil.rmtree(where.ws / "p/q/d")
        (where.ws / "p/q/d").symlink_to(outside, target_is_directory=True)
        where.own()

        def applied() -> bool:
            result = case.apply(where.ws, where.journal)
            return result.replaced == (b"p/q/d",) and dict(result.conflicts).keys() == {b"p/q/d/f"}

        assert _as_nobody(applied) == 0  # 1: it raised
        got = listing(where.ws)
        assert {k: v for k, v in got.items() if k != "p/q/d/f"} == {
            k: v for k, v in case.want.items() if k != "p/q/d/f"
        }, got
        assert not where.journal.exists() and (outside / "f").read_bytes() == b"outside f"
    finally:
        where.close()


def _root_owned_r(ws: Path) -> None:
    os.chown(ws / "R", 0, 0)


@pytest.mark.parametrize(
    "shape",
    ["another user's read-only directory", "directories without search now", "a root closed at the mark"],
)
def test_every_crash_of_an_apply_as_its_user_is_recovered(tmp_path: Path, shape: str) -> None:
    """Found by a fourth review: directories recovery must open again, or must leave alone.
    ``R`` (0555) belongs to root: the apply reports it and ``R/f`` as conflicts, and recovery
    once stopped for good on chmodding it (EPERM). ``a`` and ``p`` lack search now and have
    it at the mark: a crash before phase 0 opened them left a recovery that could not reach
    ``p/f``. The root's mode at the mark lacks search: recovery could not stat ``.`` through
    it. For every crash point of the apply (as ``nobody``), recovery finishes: the journal
    goes, no temp is left, and the tree is the mark's except the conflicts."""
    plan_args: dict[str, object] = {}
    post: Callable[[Path], None] = lambda ws: None  # noqa: E731
    if shape == "another user's read-only directory":

        def target(ws: Path) -> None:
            write(ws / "R/f", "f at M")
            (ws / "R").chmod(0o555)
            write(ws / "g", "g at M")

        def current(ws: Path) -> None:
            write(ws / "R/f", "f now")
            (ws / "R").chmod(0o555)
            write(ws / "g", "g now")

        post, conflicts = _root_owned_r, {b"R", b"R/f"}
    elif shape == "directories without search now":

        def target(ws: Path) -> None:
            write(ws / "a/x", "x")
            write(ws / "p/f", "f at M")

        def current(ws: Path) -> None:
            write(ws / "a/x", "x")
            write(ws / "p/f", "f now")
            (ws / "a").chmod(0o600)
            (ws / "p").chmod(0o600)

        conflicts = set()
    else:

        def target(ws: Path) -> None:
            write(ws / "f", "f at M")

        def current(ws: Path) -> None:
            write(ws / "f", "f now")

        plan_args, conflicts = {"root_modes": (0o755, 0o600)}, set()

    if os.geteuid() != 0:
        pytest.fail("needs root: to run the apply as another user")
    case = Case(tmp_path, current, target, **plan_args)
    want = dict(case.want, **({"": ("dir", 0o600, b"")} if plan_args else {}))

    def tree(ws: Path) -> Listing:
        got = listing(ws)
        if plan_args:
            got[""] = ("dir", stat.S_IMODE(ws.stat().st_mode), b"")
        return {k: v for k, v in got.items() if os.fsencode(k) not in conflicts}

    finished = False
    for n in range(1, 40):
        where = _NobodyWorkspace(current)
        try:
            where.own()
            post(where.ws)
            ws, journal = where.ws, where.journal

            def crash_at_n(n: int = n, ws: Path = ws, journal: Path = journal) -> bool:
                safeio.crash_after(n, only="apply.")
                case.apply(ws, journal)
                return True

            code = _as_nobody(crash_at_n)
            if code == 0:  # no n-th step: every crash point is done
                finished = True
            else:
                assert code == safeio.CRASH_EXIT_CODE, f"the apply raised (crash after step {n})"

                def recovered(ws: Path = ws, journal: Path = journal) -> bool:
                    result = recover(ws, journal, case.get, xxh3_hex)
                    return result is not None and {p for p, _ in result.conflicts} == conflicts

                assert _as_nobody(recovered) == 0, f"recovery failed after a crash at step {n}"
            assert not journal.exists() and no_temps(ws), n
            assert tree(ws) == {k: v for k, v in want.items() if os.fsencode(k) not in conflicts}, n
        finally:
            where.close()
        if finished:
            break
    assert finished, "the apply had more steps than the test crashes at"


def test_a_journal_of_another_root_is_refused_and_left_in_place(tmp_path: Path) -> None:
    """A journal names the root its apply ran in; recovery of any other root refuses it with
    a clear error, touches nothing there and leaves the journal where it is (a store copied
    between machines, or a workspace id reused, must never roll one tree's apply over another)."""
    case = Case(tmp_path, current_tree, target_tree)
    ws, journal = case.fresh()
    assert _in_child(lambda: case.apply(ws, journal), 20) == safeio.CRASH_EXIT_CODE
    assert journal.exists()
    other, _ = case.fresh()  # the same layout, so the journal's ops would apply there
    with pytest.raises(StoreError, match="belongs to"):
        recover(other, journal, case.get, xxh3_hex)
    assert listing(other) == case.before and journal.exists() and no_temps(other)
    assert recover(ws, journal, case.get, xxh3_hex) is not None  # its own root: finished
    _converged(case, ws, journal)


def test_a_file_changed_in_place_with_its_size_mode_and_mtime_is_a_conflict(tmp_path: Path) -> None:
    """A concurrent writer who keeps the size and mode (and puts the mtime back) is still seen:
    the apply compares what it replaces by content, not by its stat."""
    case = Case(tmp_path, current_tree, target_tree)
    ws, journal = case.fresh()
    p = ws / "mod.txt"
    st = p.stat()
    theirs = b"NEW CONTENT"
    assert len(theirs) == st.st_size == len(b"new content")
    p.write_bytes(theirs)
    os.utime(p, ns=(st.st_atime_ns, st.st_mtime_ns))
    now = p.stat()
    assert (now.st_size, now.st_mode, now.st_mtime_ns) == (st.st_size, st.st_mode, st.st_mtime_ns)
    result = case.apply(ws, journal)
    assert dict(result.conflicts).keys() == {b"mod.txt"}
    assert p.read_bytes() == theirs
    got, want = listing(ws), case.want
    assert {k: v for k, v in got.items() if k != "mod.txt"} == {
        k: v for k, v in want.items() if k != "mod.txt"
    }
