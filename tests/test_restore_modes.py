"""A restore's modes and its end, attacked (session 22's adversarial review of the restore's
speed-ups: the collector paused, the plan in one walk, modes asked of the create and of
``mkdir``, the end opening only the directories with a mode left to give).

Each mode is what the tree says, whatever else masks a create (a set-group-ID target, a
default ACL, a FUSE server's own umask, the process's umask), for a user whom modes bind too;
no other user reads during the fill what it may not read at the end; the one-walk plan is
``plan()``'s for modes the restore tests' strategy never draws."""

from __future__ import annotations

import gc
import os
import shutil
import stat
import subprocess
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from e2e_helpers import snap_diff, snapshot, unavailable, write
from hypothesis import given, settings
from hypothesis import strategies as st
from ingest_helpers import ingest_tree
from test_fill import captured, every_kind, restore, restore_as_nobody  # noqa: F401  (the fixture)
from test_restore import Mem, f, ln, names

from snapd.daemon import heap
from snapd.rollback import ending
from snapd.rollback.plan import from_nothing, plan
from snapd.rollback.restore import write_tree
from snapd.store import trees
from snapd.store.store import Store
from snapd.store.trees import Dir

pytestmark = pytest.mark.timeout(120)

ODD_DIR_MODES = [
    0o000, 0o100, 0o200, 0o300, 0o500, 0o555, 0o700, 0o711, 0o755, 0o775, 0o777, 0o1777, 0o2775, 0o3777
]
ROOT_MODES = [None, 0o000, 0o100, 0o200, 0o300, 0o500, 0o700, 0o755, 0o777, 0o1777, 0o2775]

adv_paths = st.lists(names, min_size=1, max_size=5).map(b"/".join)
adv_specs = st.one_of(
    st.tuples(st.just("file"), st.sampled_from(["x", ""]), st.sampled_from([0o000, 0o644, 0o4755, 0o1644])),
    st.tuples(st.just("link"), st.sampled_from(["a", "../b"]), st.just(0)),
    st.tuples(st.just("dir"), st.just(""), st.sampled_from(ODD_DIR_MODES)),
    st.tuples(st.just("odd"), st.just(""), st.just(0)),
)


@settings(max_examples=400, deadline=None)
@given(
    st.dictionaries(adv_paths, adv_specs, max_size=14),
    st.sampled_from(ROOT_MODES),
    st.sampled_from(ROOT_MODES),
)
def test_from_nothing_equals_plan_for_odd_directory_and_root_modes(
    spec: dict[bytes, tuple[str, str, int]], now: int | None, then: int | None
) -> None:
    """from_nothing against plan(load, None, ...) and plan(load, empty, ...) with directory
    modes the shipped strategy never draws (0000, 0100, 0200, 0300, sticky, set-group-ID),
    root modes 0000..3777, uncaptured entries and deeper trees."""
    m = Mem()
    changes: dict[bytes, trees.Change] = {}
    for path, (kind, content, mode) in spec.items():
        if any(path.startswith(q + b"/") for q in spec if spec[q][0] != "dir"):
            continue
        if kind == "odd":
            changes[path] = trees.uncaptured("unreadable", 0o600, 3, None)
        else:
            made = f(content, mode) if kind == "file" else ln(content) if kind == "link" else Dir(mode)
            changes[path] = made
    target, empty = m.tree(changes), m.tree({})
    general = plan(m.load, empty, target, root_modes=(now, then))
    one_walk = from_nothing(m.load, target, (now, then))
    for fast in (plan(m.load, None, target, root_modes=(now, then)), one_walk):
        assert fast.ops == general.ops and fast.kept == general.kept and fast.left == general.left
        assert dict(fast.counts) == dict(general.counts)


@pytest.mark.parametrize("root_now", [None, 0o000, 0o300, 0o755])
def test_from_nothing_equals_plan_on_a_real_captured_tree(
    captured: tuple[Store, str, Path], root_now: int | None  # noqa: F811
) -> None:
    """The real every_kind tree (captured by the ingest), both root modes known."""
    store, tree, _ = captured
    a = plan(store.load_node, None, tree, root_modes=(root_now, 0o751))
    b = from_nothing(store.load_node, tree, (root_now, 0o751))
    assert a.ops == b.ops and a.kept == b.kept and dict(a.counts) == dict(b.counts)


@pytest.mark.parametrize("absent", [False, True])
def test_into_an_empty_set_group_id_target_every_mode_is_exact(
    captured: tuple[Store, str, Path], tmp_path: Path, absent: bool  # noqa: F811
) -> None:
    """DEST an empty directory with the set-group-ID bit (a shared project directory, 2775:
    common). A directory made with its final mode inherits S_ISGID from its parent, and the
    fill no longer chmods it at the end: the user gets ``bin`` 2755, ``deep/a`` 2755, ...
    where the mark had 0755 (before session 22 every made directory was chmodded). Every
    directory below inherits it too, so the whole copy differs from REF. (``absent``: DEST made
    by the restore inside a 2775 directory holds, since apply chmods the new root 0700.)"""
    store, tree, src = captured
    want = snapshot(src, with_root=True)
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o2775)
    dest = shared / "copy" if absent else shared  # absent: made by the restore inside a 2775 dir
    done = restore(store, tree, dest)
    assert done.ok, (done.conflicts, done.not_restored)
    got = snapshot(dest, with_root=True)
    assert got == want, snap_diff(got, want)


def _default_acl(path: Path) -> None:
    """A default ACL u::rwx g::r-x o::--- (what `setfacl -d -m o::- DIR` leaves), set raw."""
    import struct

    undefined = 0xFFFFFFFF
    entries = [(0x01, 7, undefined), (0x04, 5, undefined), (0x20, 0, undefined)]
    blob = struct.pack("<I", 2) + b"".join(struct.pack("<HHI", *e) for e in entries)
    try:
        os.setxattr(path, "system.posix_acl_default", blob)
    except OSError as exc:
        unavailable(f"no POSIX ACLs on {path}'s file system: {exc}")


@pytest.mark.parametrize("absent", [False, True])
def test_into_a_target_with_a_default_acl_every_mode_is_exact(
    captured: tuple[Store, str, Path], tmp_path: Path, absent: bool  # noqa: F811
) -> None:
    """DEST an empty directory with a default ACL (no access for others: a team directory).
    A default ACL replaces the umask: a file created 0644 is made 0640, a directory made 0755
    is 0750. The fill now trusts the create's mode whenever the *umask* keeps it, so the
    restored ``plain.txt`` is 0640 (0644 at REF), ``bin`` 0750, ... and nothing says so
    (before session 22 every file was fchmodded and every made directory chmodded)."""
    store, tree, src = captured
    want = snapshot(src, with_root=True)
    team = tmp_path / "team"
    team.mkdir(mode=0o755)
    _default_acl(team)
    dest = team / "copy" if absent else team  # absent: made by the restore, inheriting the ACL
    done = restore(store, tree, dest)
    assert done.ok, (done.conflicts, done.not_restored)
    got = snapshot(dest, with_root=True)
    assert got == want, snap_diff(got, want)


def _as_nobody(*argv: str) -> bool:
    cmd = ["setpriv", "--reuid", "65534", "--regid", "65534", "--clear-groups", *argv]
    return subprocess.run(cmd, capture_output=True, timeout=30).returncode == 0


def test_nobody_reads_nothing_during_the_fill_that_it_cannot_at_the_end(
    captured: tuple[Store, str, Path], monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest  # noqa: F811
) -> None:
    """REF's root is 0700 (a private workspace); DEST an existing empty 0755 directory (made
    with `mkdir` under umask 022). The root's mode is given last, so for the whole fill DEST
    is 0755 -- and its subdirectories are now made 0755/0711 too (before session 22: 0700 while
    filled), so any user on the machine can list and read the whole private tree while it is
    restored (``deep/a/.../leaf``, ``bin/``), and keep a descriptor of a directory opened then
    after the restore closes DEST. At the end nobody may reach anything."""
    store, tree, _ = captured
    base = Path(tempfile.mkdtemp(dir="/tmp"))  # pytest's own directories are private to root
    request.addfinalizer(lambda: shutil.rmtree(base))
    base.chmod(0o755)
    dest = base / "copy"
    dest.mkdir(mode=0o755)
    leaf = dest / "deep/a/b/c/d/e/f/g/h/leaf"
    seen: dict[str, bool] = {}
    finish = ending.Ending.run

    def spying(self: ending.Ending, *a: object, **k: object) -> object:
        seen["list bin"] = _as_nobody("ls", str(dest / "bin"))
        seen["read leaf"] = _as_nobody("cat", str(leaf))
        return finish(self, *a, **k)

    monkeypatch.setattr(ending.Ending, "run", spying)
    done = write_tree(dest, tree, 0o700, store.load_node, store.get, store.hasher, [])
    assert done.ok
    at_end = {"list bin": _as_nobody("ls", str(dest / "bin")), "read leaf": _as_nobody("cat", str(leaf))}
    assert at_end == {"list bin": False, "read leaf": False}
    assert seen == at_end, f"during the fill nobody could: {seen}"


def test_the_collector_is_enabled_again_after_a_restore_that_fails() -> None:
    """heap.paused: an exception inside (a damaged object, ENOSPC) re-enables the collector;
    two overlapping pauses from two threads end with it enabled; a pause begun while not
    managed does not leave it disabled when managed flips on meanwhile."""
    was = heap._managed
    try:
        heap.manage(True)
        with pytest.raises(RuntimeError):
            with heap.paused():
                raise RuntimeError("damaged object")
        assert gc.isenabled()
        inside, leave = threading.Event(), threading.Event()

        def other() -> None:
            with heap.paused():
                inside.set()
                leave.wait(10)

        t = threading.Thread(target=other)
        t.start()
        inside.wait(10)
        with heap.paused():
            pass
        assert not gc.isenabled()  # the other restore still runs
        leave.set()
        t.join(10)
        assert gc.isenabled() and heap._pausing == 0
        heap.manage(False)
        with heap.paused():
            heap.manage(True)
            with heap.paused():
                pass
        assert gc.isenabled() and heap._pausing == 0
    finally:
        heap.manage(was)
        gc.enable()


def test_a_directory_with_a_mode_left_removed_before_the_end_is_said(
    captured: tuple[Store, str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch  # noqa: F811
) -> None:
    """Another process removes ``ro`` (0555: made 0700, given its mode at the end) after the
    fill filled it: the end cannot give it its mode, and says so (a conflict). What another
    process removes of what the restore wrote, and the restore does not touch again, is not
    reported (a file never was; docs/rollback.md)."""
    victim = "ro"
    store, tree, _ = captured
    dest = tmp_path / "copy"
    finish = ending.Ending.run

    def racing(self: ending.Ending, *a: object, **k: object) -> object:
        moved = tmp_path / "moved"
        os.chmod(dest / victim, 0o700)
        os.rename(dest / victim, moved)
        return finish(self, *a, **k)

    monkeypatch.setattr(ending.Ending, "run", racing)
    done = restore(store, tree, dest)
    assert not done.ok and os.fsencode(victim) in dict(done.conflicts), (done.ok, done.conflicts)


def test_a_directory_swapped_for_a_symlink_before_the_end_leaves_outside_alone(
    captured: tuple[Store, str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch  # noqa: F811
) -> None:
    """``ro`` (0555: given its mode at the end) replaced by a symlink to a directory outside
    DEST just before the end: the outside directory keeps its mode, a conflict is said."""
    store, tree, _ = captured
    dest = tmp_path / "copy"
    outside = tmp_path / "outside"
    outside.mkdir(mode=0o755)
    (outside / "sub").mkdir(mode=0o755)
    finish = ending.Ending.run

    def racing(self: ending.Ending, *a: object, **k: object) -> object:
        os.rename(dest / "ro", tmp_path / "ro-moved")
        os.symlink(outside, dest / "ro")
        return finish(self, *a, **k)

    monkeypatch.setattr(ending.Ending, "run", racing)
    done = restore(store, tree, dest)
    assert stat.S_IMODE(outside.stat().st_mode) == 0o755
    assert stat.S_IMODE((outside / "sub").stat().st_mode) == 0o755
    assert not done.ok and b"ro" in dict(done.conflicts), done.conflicts


def odd_modes(root: Path) -> None:
    """Directories 0100/0200/0300 (owner cannot list or cannot search), 0777, 1777, 2775, 3777
    each holding a file and a subdirectory; files 0000, 0666, 0777, 2755, 6755."""
    for i in range(9):
        d = root / f"d{i}"
        write(d / "f", f"{i}\n", (0o000, 0o666, 0o777, 0o2755, 0o6755, 0o644, 0o600, 0o444, 0o640)[i])
        (d / "sub").mkdir()
        (d / "sub").chmod((0o755, 0o700, 0o2775, 0o555)[i % 4])
    modes = (0o100, 0o200, 0o300, 0o777, 0o1777, 0o2775, 0o3777, 0o711, 0o750)
    for i, mode in reversed(list(enumerate(modes))):
        (root / f"d{i}").chmod(mode)
    root.chmod(0o755)


@pytest.fixture
def odd_captured(tmp_path: Path) -> Iterator[tuple[Store, str, Path]]:
    if os.geteuid() != 0:
        pytest.skip("needs root")
    src = tmp_path / "src"
    odd_modes(src)
    with Store.open(tmp_path / "store") as store:
        tree = ingest_tree(store, store.add_workspace(os.fsencode(src)), src).tree
        yield store, tree, src


@pytest.mark.parametrize("umask", [0o000, 0o002, 0o077, 0o277])
@pytest.mark.parametrize("dest_mode", [None, 0o755, 0o700])
def test_odd_modes_are_exact_under_any_umask(
    odd_captured: tuple[Store, str, Path], tmp_path: Path, umask: int, dest_mode: int | None
) -> None:
    store, tree, src = odd_captured
    want = snapshot(src, with_root=True)
    dest = tmp_path / "copy"
    if dest_mode is not None:
        dest.mkdir()
        dest.chmod(dest_mode)
    before = os.umask(umask)
    try:
        done = write_tree(dest, tree, 0o755, store.load_node, store.get, store.hasher, [])
    finally:
        os.umask(before)
    assert done.ok, done.conflicts
    got = snapshot(dest, with_root=True)
    assert got == want, snap_diff(got, want)


@pytest.mark.parametrize("umask", [0o000, 0o022, 0o277])
def test_odd_modes_are_exact_as_a_user_whom_modes_bind(
    odd_captured: tuple[Store, str, Path], umask: int, request: pytest.FixtureRequest
) -> None:
    store, tree, src = odd_captured
    want = snapshot(src, with_root=True)
    got = snapshot(restore_as_nobody(request, store, tree, 0o755, umask), with_root=True)
    assert got == want, snap_diff(got, want)


def test_into_a_fuse_file_system_whose_server_masks_modes_every_mode_is_exact(tmp_path: Path) -> None:
    """A FUSE server applies its own creation mask (sftp-server under sshfs runs with umask
    022; here tests/fuse_passthrough.py, run with umask 022). A user with umask 002 (Debian's
    default for user-private groups) restores a file 0664: the fill sees its own umask keep
    0664, so it trusts the create and never fchmods: the copy is 0644 (before session 22:
    0664, by the fchmod every file got)."""
    import sys

    from disks import mounted, umount

    pytest.importorskip("fuse")
    if os.geteuid() != 0 or not Path("/dev/fuse").exists():
        pytest.skip("needs root and /dev/fuse")
    src = tmp_path / "src"
    write(src / "shared.txt", "group-writable\n", 0o664)
    write(src / "d/inner.txt", "also\n", 0o664)
    src.chmod(0o755)
    backing, mnt = tmp_path / "backing", tmp_path / "fuse"
    backing.mkdir()
    mnt.mkdir()
    with Store.open(tmp_path / "store") as store:
        tree = ingest_tree(store, store.add_workspace(os.fsencode(src)), src).tree
        script = Path(__file__).parent / "fuse_passthrough.py"
        server = subprocess.Popen(
            [sys.executable, script, backing, mnt], stderr=subprocess.PIPE, preexec_fn=lambda: os.umask(0o022)
        )
        try:
            import time

            end = time.monotonic() + 20
            while not mounted(mnt):
                assert server.poll() is None and time.monotonic() < end
                time.sleep(0.05)
            before = os.umask(0o002)
            try:
                done = write_tree(mnt / "copy", tree, 0o755, store.load_node, store.get, store.hasher, [])
            finally:
                os.umask(before)
            assert done.ok, done.conflicts
        finally:
            if mounted(mnt):
                umount(mnt)
            server.wait(timeout=20)
    got, want = snapshot(backing / "copy", with_root=True), snapshot(src, with_root=True)
    assert got == want, snap_diff(got, want)
