"""Daemon life cycle, end to end: restarts without gaps, degraded modes that say so,
background mode, and the systemd notification protocol.

Each test spawns real ``snapd start`` processes on a temporary ``SNAPD_HOME`` and drives them
over the real socket; the only simulation is the watch limit (``watch_limit``, a seam in the
watcher) and treating this machine's file system type as event-less (``scan_fs_types``).
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import signal
import socket
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from e2e_helpers import base_env, run_ctl, start_daemon, unavailable, wait_for

from snapd.capture.roots import fs_type
from snapd.capture.statcache import RACY_NS, StatCache
from snapd.config import load_config
from snapd.daemon.service import Service
from snapd.daemon.service_unit import REPO_EXEC, choose_unit_dir, render
from snapd.errors import ConfigError
from snapd.store.store import Store

pytestmark = pytest.mark.timeout(120)


def _ws(tmp_path: Path, files: int = 20) -> Path:
    root = tmp_path / "ws"
    for d in ("src", "docs", "deep/a/b"):
        (root / d).mkdir(parents=True, exist_ok=True)
    for i in range(files):
        (root / "src" / f"f{i}.txt").write_text(f"file {i}\n")
    (root / "docs" / "readme.md").write_text("hello\n")
    return root


def _status_ws(d: Any, root: Path) -> dict[str, Any]:
    st = d.call("status")
    return next(w for w in st["workspaces"] if w["root"] == str(root))


def _paths(show: dict[str, Any]) -> dict[str, str]:
    return {c["path"]: c["status"] for c in show["changes"]}


def test_restart_after_kill_captures_everything_changed_while_down(tmp_path: Path) -> None:
    home = tmp_path / "home-snapd"
    root = _ws(tmp_path)
    d = start_daemon(home)
    d.ctl("watch", str(root))
    d.ctl("mark", "before", "-w", str(root))
    os.kill(d.pid, signal.SIGKILL)
    d.proc.wait(10)
    # while snapd is down: modify, create, delete, chmod, a new directory with files
    (root / "src" / "f1.txt").write_text("changed while down\n")
    (root / "src" / "new.txt").write_text("new\n")
    (root / "src" / "f2.txt").unlink()
    os.chmod(root / "src" / "f3.txt", 0o600)
    (root / "deep" / "a" / "b" / "c").mkdir()
    (root / "deep" / "a" / "b" / "c" / "x.txt").write_text("x\n")
    (root / "stale").mkdir()
    (root / ".snapd-4242-7~").write_text("")  # a cookie left by the killed daemon
    d2 = start_daemon(home, d.env)
    try:
        m = d2.ctl_json("mark", "after", "-w", str(root))
        show = d2.ctl_json("show", m["id"], "-w", str(root))
        got = _paths(show)
        assert got["src/f1.txt"] == "modified"
        assert got["src/new.txt"] == "added"
        assert got["src/f2.txt"] == "removed"
        assert got["src/f3.txt"] == "mode"
        assert got["deep/a/b/c/x.txt"] == "added"
        assert got["stale"] == "added"
        assert not (root / ".snapd-4242-7~").exists()
        assert not any(".snapd-" in p for p in got)
        cat = d2.ctl("cat", "after", "src/f1.txt", "-w", str(root))
        assert cat.stdout == b"changed while down\n"
    finally:
        assert d2.stop() == 0


def test_restart_with_nothing_changed_reads_no_file(tmp_path: Path) -> None:
    home = tmp_path / "home-snapd"
    root = _ws(tmp_path, files=200)
    old = time.time() - 3600  # mtimes well outside the racy window
    for p in root.rglob("*"):
        os.utime(p, (old, old))
    d = start_daemon(home)
    d.ctl("watch", str(root))
    assert d.stop() == 0
    d2 = start_daemon(home, d.env)
    try:
        w = wait_for(lambda: (x := _status_ws(d2, root)).get("state") == "ready" and x)
        assert w["counters"]["files_read"] == 0, w
        assert w["files"] == 201
        m = d2.ctl_json("mark", "m", "-w", str(root))
        assert m["summary"]["changed"] == 0
    finally:
        assert d2.stop() == 0


def test_racy_rewrite_in_the_same_tick_is_recaptured(tmp_path: Path) -> None:
    """A file rewritten with the same size and mtime right after it was read is read again."""
    home = tmp_path / "home-snapd"
    root = _ws(tmp_path, files=1)
    target = root / "src" / "f0.txt"
    d = start_daemon(home)
    d.ctl("watch", str(root))  # reads f0.txt: its mtime is "now", inside the racy window
    st = target.stat()
    os.kill(d.pid, signal.SIGKILL)
    d.proc.wait(10)
    target.write_text("file X\n")  # same size
    os.utime(target, ns=(st.st_atime_ns, st.st_mtime_ns))  # same mtime
    d2 = start_daemon(home, d.env)
    try:
        d2.ctl("mark", "after", "-w", str(root))
        assert d2.ctl("cat", "after", "src/f0.txt", "-w", str(root)).stdout == b"file X\n"
    finally:
        assert d2.stop() == 0


def test_stat_cache_racy_rule() -> None:
    sig = (0o100644, 5, 1_000 * 10**9, 1_000 * 10**9, 7)
    cache = StatCache({b"f": (sig, 1_000 * 10**9 + RACY_NS + 1)})
    assert cache.is_clean(b"f", sig, now_ns=5_000 * 10**9)
    cache.set(b"g", sig, 1_000 * 10**9 + RACY_NS // 2)  # read within the tick: not trusted
    assert not cache.is_clean(b"g", sig, now_ns=5_000 * 10**9)
    assert not cache.is_clean(b"f", sig[:4] + (8,), now_ns=5_000 * 10**9)
    cache.set(b"d", (0o040755, 0, 1, 1, 9), 10)
    cache.set(b"d/x", sig, 10)
    cache.remove(b"d")
    assert b"d/x" not in cache and b"d" not in cache and len(cache) == 2


def test_stat_cache_keeps_its_file_count() -> None:
    """``files()`` (asked by every status) is kept as entries come, change type and go, not
    counted over the whole cache: it equals a count of the regular files at every step."""
    reg, d, link = (0o100644, 1, 1, 1, 1), (0o040755, 0, 1, 1, 2), (0o120777, 1, 1, 1, 3)
    cache = StatCache({b"a": (reg, 1), b"d": (d, 1), b"d/x": (reg, 1), b"l": (link, 1)})

    def counted() -> int:
        return sum(1 for p in cache.paths() if stat.S_ISREG(cache.get(p)[0][0]))  # type: ignore[index]

    assert cache.files() == counted() == 2
    steps = [
        lambda: cache.set(b"d/y", reg, 2), lambda: cache.set(b"d/y", reg, 3),  # new, then again
        lambda: cache.set(b"a", link, 2), lambda: cache.set(b"l", reg, 2),  # a type changes
        lambda: cache.set(b"d/e", d, 2), lambda: cache.set(b"d/e/z", reg, 2),
        lambda: cache.remove(b"d"), lambda: cache.remove(b"gone"), lambda: cache.remove(b"l"),
    ]
    for step in steps:
        step()
        assert cache.files() == counted()
    assert cache.files() == 0 and len(cache) == 1


def test_stat_cache_links() -> None:
    """Other names of a linked file come from the inode index; names whose file has more links
    than names known here are loose (re-checked at each mark)."""
    f = lambda ino: (0o100644, 5, 1, 1, ino)  # noqa: E731
    cache = StatCache({b"a": (f(7), 1), b"b": (f(7), 1), b"c": (f(8), 1)})
    assert cache.linked(b"a") == set(), "not known to be linked: no index is built"
    cache.note_links(b"a", (1, 7), 2)
    assert cache.linked(b"a") == {b"b"} and cache.loose_links() == [b"a"]
    cache.note_links(b"b", (1, 7), 2)
    assert cache.loose_links() == []
    cache.note_links(b"a", (1, 7), 3)  # a third name, not (yet) captured
    cache.note_links(b"b", (1, 7), 3)
    assert cache.loose_links() == [b"a", b"b"]
    cache.set(b"d", f(7), 1)  # ... now captured; the index follows
    cache.note_links(b"d", (1, 7), 3)
    assert cache.linked(b"b") == {b"a", b"d"} and cache.loose_links() == []
    cache.set(b"d", f(9), 1)  # replaced by another file
    cache.note_links(b"d", (1, 9), 1)
    cache.note_links(b"a", (1, 7), 2)
    cache.note_links(b"b", (1, 7), 2)
    assert cache.linked(b"b") == {b"a"} and cache.loose_links() == []
    cache.remove(b"a")
    assert cache.loose_links() == [b"b"] and cache.linked(b"b") == set()


def test_vanished_root_shows_in_status_and_marks_fail_clearly(tmp_path: Path) -> None:
    home = tmp_path / "home-snapd"
    root = _ws(tmp_path)
    other = _ws(tmp_path / "o")
    d = start_daemon(home)
    d.ctl("watch", str(root))
    d.ctl("watch", str(other))
    assert d.stop() == 0
    subprocess.run(["rm", "-rf", str(root)], check=True)
    d2 = start_daemon(home, d.env)
    try:
        w = wait_for(lambda: (x := _status_ws(d2, root)).get("error") and x)
        assert "no longer exists" in w["error"]
        st = d2.call("status")
        assert any(str(root) in x for x in st["warnings"])
        cp = d2.ctl("mark", "m", "-w", str(root), check=False)
        assert cp.returncode != 0 and b"no longer exists" in cp.stderr
        d2.ctl("mark", "fine", "-w", str(other))  # the other workspace is unaffected
        # replaced: a new directory at the same path is not silently given the old history
        _ws(tmp_path)
    finally:
        assert d2.stop() == 0
    d3 = start_daemon(home, d.env)
    try:
        w = wait_for(lambda: (x := _status_ws(d3, root)).get("error") and x)
        assert "replaced" in w["error"]
        cp = d3.ctl("mark", "m", "-w", str(root), check=False)
        assert cp.returncode != 0 and b"replaced" in cp.stderr
    finally:
        assert d3.stop() == 0


def _config(home: Path, text: str) -> None:
    home.mkdir(parents=True, exist_ok=True)
    (home / "config.toml").write_text(text)


def test_watch_shortfall_scans_every_mark_and_warns(tmp_path: Path) -> None:
    home = tmp_path / "home-snapd"
    root = _ws(tmp_path)
    env = base_env(home)
    env["SNAPD_WATCH_LIMIT"] = "1"  # the root only: no events from any subdirectory
    d = start_daemon(home, env)
    try:
        d.ctl("watch", str(root))
        w = _status_ws(d, root)
        assert w["scan_every_mark"] and w["watch_failures"] > 0
        # snapd's own setting caused it: the warning names that setting, not the kernel's sysctl
        # (which cannot help: issue 14, point 7)
        assert any("watch_limit" in x for x in w["warnings"]), w["warnings"]
        assert not any("max_user_watches" in x for x in w["warnings"]), w["warnings"]
        (root / "deep" / "a" / "b" / "new.txt").write_text("unwatched dir\n")
        (root / "src" / "f0.txt").write_text("edited\n")
        m = d.ctl_json("mark", "m", "-w", str(root))
        assert any("watch_limit" in x for x in m["summary"]["warnings"])
        got = _paths(d.ctl_json("show", m["id"], "-w", str(root)))
        assert got["deep/a/b/new.txt"] == "added" and got["src/f0.txt"] == "modified"
    finally:
        assert d.stop() == 0


WATCH_LIMIT = 4  # inotify watches the daemon's user namespace may hold: the root and three more


def in_user_namespace(limit: int) -> tuple[str, ...]:
    """A command prefix that runs its program as root in a new user namespace whose inotify
    watch limit is ``limit``. Those limits are per user namespace (/proc/sys/user/), and the
    namespace's root may lower them: ``inotify_add_watch`` then really fails with ENOSPC."""
    if shutil.which("unshare") is None:
        unavailable("needs unshare (util-linux)")
    lower = f"echo {limit} > /proc/sys/user/max_inotify_watches"
    probe = subprocess.run(["unshare", "--user", "--map-root-user", "sh", "-c", lower], capture_output=True)
    if probe.returncode != 0:
        unavailable(f"cannot lower the watch limit in a user namespace: {probe.stderr.decode()[-300:]}")
    return ("unshare", "--user", "--map-root-user", "sh", "-c", lower + ' && exec "$0" "$@"', sys.executable)


def test_real_watch_limit_exhaustion_scans_every_mark_and_warns(tmp_path: Path) -> None:
    home = tmp_path / "home-snapd"
    root = _ws(tmp_path)
    for i in range(6):
        (root / "many" / f"d{i}").mkdir(parents=True)
    d = start_daemon(home, python=in_user_namespace(WATCH_LIMIT))
    try:
        d.ctl("watch", str(root))
        w = _status_ws(d, root)
        assert w["watches"] == WATCH_LIMIT and w["watch_failures"] > 0, w
        assert w["scan_every_mark"] and any("inotify watch limit" in x for x in w["warnings"]), w
        # The kernel said no (no seam is set), for these directories:
        refused = [
            e["path"]
            for e in map(json.loads, d.log().splitlines())
            if e.get("event") == "watcher.add_failed" and e.get("error") == os.strerror(errno.ENOSPC)
        ]
        assert len(refused) >= 3 and "SNAPD_WATCH_LIMIT" not in d.env, refused
        for n, rel in enumerate(refused[:3]):  # every mark warns, and every mark is complete
            (root / rel / f"new{n}.txt").write_text(f"in an unwatched directory {n}\n")
            (root / "src" / "f1.txt").write_text(f"edit {n}\n")
            m = d.ctl_json("mark", f"m{n}", "-w", str(root))
            assert any("inotify watch limit" in x for x in m["summary"]["warnings"]), m["summary"]
            got = _paths(d.ctl_json("show", m["id"], "-w", str(root)))
            assert got[f"{rel}/new{n}.txt"] == "added" and got["src/f1.txt"] == "modified", got
    finally:
        assert d.stop() == 0


def test_eventless_file_system_scans_every_mark_and_warns(tmp_path: Path) -> None:
    home = tmp_path / "home-snapd"
    root = _ws(tmp_path)
    kind = fs_type(root)
    _config(home, f'scan_fs_types = ["{kind}"]\nwatch_limit = 1\n')
    d = start_daemon(home)
    try:
        d.ctl("watch", str(root))
        w = _status_ws(d, root)
        assert w["scan_every_mark"]
        assert any("delivers no change events" in x for x in w["warnings"])
        (root / "src" / "sub").mkdir()
        (root / "src" / "sub" / "n.txt").write_text("n\n")
        m = d.ctl_json("mark", "m", "-w", str(root))
        assert any("no change events" in x for x in m["summary"]["warnings"])
        assert _paths(d.ctl_json("show", m["id"], "-w", str(root)))["src/sub/n.txt"] == "added"
    finally:
        assert d.stop() == 0


def test_background_start_status_stop(tmp_path: Path) -> None:
    home = tmp_path / "home-snapd"
    env = base_env(home)
    start = [sys.executable, "-m", "snapd", "start", "--background"]
    cp = subprocess.run(start, env=env, capture_output=True, timeout=60, cwd="/")
    assert cp.returncode == 0, cp.stderr
    assert b"started in the background" in cp.stdout
    st = run_ctl(env, "status", "--json")
    assert st.returncode == 0, st.stderr
    pid = int(json.loads(st.stdout)["pid"])
    try:
        assert (home / "snapd.log").exists()
        assert (home / "snapd.log").stat().st_mode & 0o077 == 0
        again = subprocess.run(start, env=env, capture_output=True, timeout=60, cwd="/")
        assert again.returncode != 0 and b"already" in again.stderr
        assert run_ctl(env, "stop").returncode == 0
        wait_for(lambda: not _alive(pid), 15)
        assert run_ctl(env, "status").returncode != 0
    finally:
        if _alive(pid):  # never leave a detached daemon behind a failed test
            os.kill(pid, signal.SIGKILL)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie child of ours would count as alive: it is not ours here (own session)
    return True


def test_ready_and_watchdog_datagrams(tmp_path: Path) -> None:
    home = tmp_path / "home-snapd"
    sock_path = tmp_path / "notify.sock"
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(str(sock_path))
    sock.settimeout(20)
    env = base_env(home)
    env["NOTIFY_SOCKET"] = str(sock_path)
    env["WATCHDOG_USEC"] = "400000"  # pet every 0.2 s
    d = start_daemon(home, env)
    try:
        messages: list[str] = []
        while not any(m.startswith("WATCHDOG=1") for m in messages):
            messages.append(sock.recv(4096).decode())
        assert messages[0].startswith("READY=1")
        assert sock.recv(4096).decode() == "WATCHDOG=1"  # and again: it keeps petting
    finally:
        assert d.stop() == 0
        tail = []
        sock.settimeout(5)
        try:
            while True:
                tail.append(sock.recv(4096).decode())
                if tail[-1].startswith("STOPPING=1"):
                    break
        except TimeoutError:
            pass
        sock.close()
    assert tail and tail[-1].startswith("STOPPING=1")


def test_checked_in_unit_is_the_template() -> None:
    unit = Path(__file__).resolve().parent.parent / "systemd" / "snapd.service"
    assert unit.read_text() == render(REPO_EXEC)
    text = unit.read_text()
    for needed in ("Type=notify", "WatchdogSec=", "Restart=on-failure"):
        assert needed in text
    for forbidden in ("ProtectHome", "PrivateTmp"):
        assert forbidden not in text


def test_install_service_without_a_user_manager(tmp_path: Path) -> None:
    env = {**base_env(tmp_path / "h"), "XDG_CONFIG_HOME": str(tmp_path / "cfg")}
    env.pop("DBUS_SESSION_BUS_ADDRESS", None)
    env["XDG_RUNTIME_DIR"] = str(tmp_path / "no-runtime")
    cp = subprocess.run(
        [sys.executable, "-m", "snapd", "install-service"], env=env, capture_output=True, timeout=60, cwd="/"
    )
    assert cp.returncode == 0, cp.stderr
    unit = tmp_path / "cfg" / "systemd" / "user" / "snapd.service"
    assert unit.exists()
    assert f"ExecStart={sys.executable} -m snapd start" in unit.read_text()
    assert b"systemctl --user daemon-reload" in cp.stdout


def test_uninstall_service_without_a_user_manager(tmp_path: Path) -> None:
    """Issue 31, point 12: there was no uninstall-service. Without a user manager it removes
    the unit install-service wrote, says there was nothing to stop, and a second run has
    nothing to do; a unit of that name it did not write is left, and said so. (With a real
    manager: tests/test_systemd_service.py.)"""
    env = {**base_env(tmp_path / "h"), "XDG_CONFIG_HOME": str(tmp_path / "cfg")}
    env.pop("DBUS_SESSION_BUS_ADDRESS", None)
    env["XDG_RUNTIME_DIR"] = str(tmp_path / "no-runtime")
    snapd = [sys.executable, "-m", "snapd"]
    installed = subprocess.run([*snapd, "install-service"], env=env, capture_output=True, timeout=60)
    assert installed.returncode == 0, installed.stderr
    unit = tmp_path / "cfg" / "systemd" / "user" / "snapd.service"
    assert unit.exists()
    cp = subprocess.run([*snapd, "uninstall-service"], env=env, capture_output=True, timeout=60, cwd="/")
    assert cp.returncode == 0, cp.stderr
    assert not unit.exists()
    assert f"removed {unit}".encode() in cp.stdout and b"nothing was running under it" in cp.stdout, cp.stdout
    again = subprocess.run([*snapd, "uninstall-service"], env=env, capture_output=True, timeout=60, cwd="/")
    assert again.returncode == 0 and b"no snapd service unit is installed" in again.stdout, again.stdout
    unit.write_text("[Service]\nExecStart=/usr/bin/true\n")  # the user's own unit of that name
    mine = subprocess.run([*snapd, "uninstall-service"], env=env, capture_output=True, timeout=60, cwd="/")
    assert mine.returncode == 0 and unit.exists() and b"did not write it" in mine.stdout, mine.stdout


def test_the_unit_goes_where_the_user_manager_reads_units(tmp_path: Path) -> None:
    """The manager's unit path decides (its own XDG_CONFIG_HOME, not the shell's); the shell's
    directory when the manager reads it or there is none to ask, with a note when that
    directory is not the default one. (A real manager: tests/test_systemd_service.py.)"""
    home = tmp_path / "home"
    default, custom = home / ".config/systemd/user", tmp_path / "cfg/systemd/user"
    env = {"HOME": str(home), "XDG_CONFIG_HOME": str(tmp_path / "cfg")}
    manager = [home / ".config/systemd/user.control", Path("/etc/systemd/user"), default,
               home / ".local/share/systemd/user", Path("/usr/lib/systemd/user")]
    assert choose_unit_dir({"HOME": str(home)}, manager) == (default, None)
    assert choose_unit_dir(env, [custom, *manager]) == (custom, None)
    chosen, note = choose_unit_dir(env, manager)
    assert chosen == default and note and f"does not read {custom}" in note, note
    chosen, note = choose_unit_dir(env, [])
    assert chosen == custom and note and "only if its own environment sets XDG_CONFIG_HOME" in note, note
    assert choose_unit_dir({"HOME": str(home)}, []) == (default, None)
    with pytest.raises(ConfigError, match="reads units only from /etc/systemd/user"):
        choose_unit_dir(env, [Path("/etc/systemd/user")])


def test_ignored_paths_are_counted_not_hidden(tmp_path: Path) -> None:
    home = tmp_path / "home-snapd"
    root = _ws(tmp_path)
    (root / ".gitignore").write_text("*.log\nbuild/\n")
    (root / "a.log").write_text("x")
    (root / "build").mkdir()
    (root / "build" / "out.o").write_text("o")
    (root / "notes.txt~").write_text("backup")
    d = start_daemon(home)
    try:
        r = d.ctl_json("watch", str(root))
        ignored = r["ignored"]
        assert ignored["counts"] == {"gitignore": 2, "editor": 1}, ignored
        assert "a.log" in ignored["examples"]["gitignore"]
        m = d.ctl_json("mark", "m", "-w", str(root))
        assert m["summary"]["ignored"]["total"] == 3
        out = d.ctl("status").stdout.decode()
        assert "ignored: 3" in out
    finally:
        assert d.stop() == 0


def test_a_baseline_follows_the_gitignore_files_of_every_depth(tmp_path: Path) -> None:
    """The baseline's rules learn from the watcher's listings which directories hold no
    ``.gitignore`` (and do not look for one there); those that hold one still count, at any
    depth, with negations below and nothing of theirs applied to siblings."""
    home = tmp_path / "home-snapd"
    root = _ws(tmp_path)
    files = {
        "a/.gitignore": "*.log\nbuild/\n",
        "a/x.log": "ignored by a/",
        "a/b/c/.gitignore": "!keep.log\n",
        "a/b/c/keep.log": "re-included below",
        "a/b/c/y.log": "ignored by a/",
        "a/b/build/o.txt": "ignored directory",
        "d/x.log": "a sibling: a/'s rules do not reach it",
        "d/e/f/g.txt": "deep",
    }
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    d = start_daemon(home)
    try:
        r = d.ctl_json("watch", str(root))
        ignored = r["ignored"]
        assert ignored["counts"] == {"gitignore": 3}, ignored
        assert sorted(ignored["examples"]["gitignore"]) == ["a/b/build", "a/b/c/y.log", "a/x.log"], ignored
        for rel in ("a/b/c/keep.log", "d/x.log", "d/e/f/g.txt", "a/.gitignore"):
            assert d.ctl("cat", "baseline", rel, "-w", str(root)).stdout.decode() == files[rel]
    finally:
        assert d.stop() == 0


def test_claude_code_hook_marks_turns_with_the_session(tmp_path: Path) -> None:
    home = tmp_path / "home-snapd"
    root = _ws(tmp_path, files=2)
    d = start_daemon(home)
    try:
        env = {**d.env, "SNAPD_AUTO_START": "false"}  # the hook must not start another daemon below
        d.ctl("watch", root)  # not a git work tree: a user-wide hook marks it once it is watched

        def run_hook(label: str) -> subprocess.CompletedProcess[bytes]:
            name = {"turn-start": "UserPromptSubmit", "turn-end": "Stop"}[label]
            event = json.dumps({"session_id": "abc-123", "cwd": str(root), "hook_event_name": name})
            return run_ctl(env, "hook", "claude-code", input=event.encode(), timeout=60)

        cp = run_hook("turn-start")
        assert cp.returncode == 0 and cp.stdout == b"", cp  # nothing may reach Claude's context
        (root / "src" / "f0.txt").write_text("edited by the agent\n")
        cp = run_hook("turn-end")
        assert cp.returncode == 0 and cp.stdout == b"", cp
        log = d.ctl_json("log", "-w", str(root))
        start, end = log["marks"][1], log["marks"][0]
        assert (start["label"], end["label"]) == ("turn-start", "turn-end")
        assert start["agent"] == "claude-code" and start["session"] == "abc-123"
        assert end["summary"]["counts"] == {"modified": 1}
        # a daemon that is gone never blocks the prompt: exit 0, the reason on stderr
        assert d.stop() == 0
        cp = run_hook("turn-start")
        assert cp.returncode == 0 and cp.stdout == b"" and b"no snapd daemon is running" in cp.stderr
    finally:
        if d.alive():
            d.stop()


def test_directories_created_while_down_are_watched_after_restart(tmp_path: Path) -> None:
    """Known directories are watched without listing them at start; new ones must still be."""
    home = tmp_path / "home-snapd"
    root = _ws(tmp_path, files=3)
    d = start_daemon(home)
    d.ctl("watch", str(root))
    os.kill(d.pid, signal.SIGKILL)
    d.proc.wait(10)
    (root / "newdir" / "sub").mkdir(parents=True)
    (root / "newdir" / "sub" / "first.txt").write_text("made while down\n")
    (root / "docs" / "inner").mkdir()
    d2 = start_daemon(home, d.env)
    try:
        d2.ctl("mark", "after-restart", "-w", str(root))
        assert (
            d2.ctl("cat", "after-restart", "newdir/sub/first.txt", "-w", str(root)).stdout
            == b"made while down\n"
        )
        for rel in ("newdir/sub/later.txt", "newdir/later.txt", "docs/inner/later.txt", "src/later.txt"):
            (root / rel).write_text(rel + "\n")
        m = d2.ctl_json("mark", "later", "-w", str(root))
        got = _paths(d2.ctl_json("show", m["id"], "-w", str(root)))
        for rel in ("newdir/sub/later.txt", "newdir/later.txt", "docs/inner/later.txt", "src/later.txt"):
            assert got.get(rel) == "added", (rel, got)
        w = _status_ws(d2, root)
        assert not w["scan_every_mark"] and w["watch_failures"] == 0
    finally:
        assert d2.stop() == 0


def test_the_daemon_applies_retention_by_itself(tmp_path: Path) -> None:
    home = tmp_path / "home-snapd"
    root = _ws(tmp_path, files=1)
    env = {**base_env(home), "SNAPD_GC_INTERVAL_S": "1", "SNAPD_RETENTION_MAX_MARKS": "2"}
    d = start_daemon(home, env)
    try:
        d.ctl("watch", str(root))
        for i in range(5):
            (root / "src" / "f0.txt").write_text(f"version {i}\n")
            d.ctl("mark", f"m{i}", "-w", str(root))
        log = wait_for(lambda: (x := d.ctl_json("log", "-w", str(root)))["pruned"] >= 4 and x, 30)
        assert [m["label"] for m in log["marks"]] == ["m4", "m3"]
        assert d.ctl("verify").returncode == 0
    finally:
        assert d.stop() == 0



@pytest.mark.timeout(60)
def test_a_request_before_start_up_lists_the_workspaces_waits_for_them(tmp_path: Path) -> None:
    """The daemon answers on its socket before the service has listed the stored workspaces
    (seen once under load: a rollback right after a restart got "not watched"). A request in
    that moment waits for start-up instead, then finds its workspace."""
    root = (tmp_path / "ws").resolve()
    root.mkdir()
    (root / "f").write_text("f\n")
    store = Store.open(tmp_path / "store")
    store.add_workspace(os.fsencode(root))
    cfg = load_config({}, {"home": str(tmp_path / "snapd")})
    service = Service(store, cfg, (tmp_path / "home",), lambda: None)
    outcome: dict[str, Any] = {}

    def request() -> None:
        try:
            outcome["reply"] = service.rollback.op_rollback_plan(workspace=os.fsencode(root), to="baseline")
        except Exception as exc:  # the failure this test exists for
            outcome["error"] = exc

    t = threading.Thread(target=request)
    t.start()
    t.join(0.5)
    assert "error" not in outcome, outcome  # before start(): waiting, not refused
    service.start()
    t.join(30)
    try:
        assert "reply" in outcome, outcome
        assert outcome["reply"]["target"]["label"] == "baseline"
    finally:
        service.stop()
        store.close()


def test_rollback_plan_sees_a_file_made_in_an_unwatched_directory(tmp_path: Path) -> None:
    """With a watch shortfall no event reports a file made in an unwatched directory: the
    rollback's re-check of the captured files cannot see a new one, so its plan (shown, and
    applied) must come from a scan of everything, as a mark's does."""
    home = tmp_path / "home-snapd"
    root = _ws(tmp_path)
    env = base_env(home)
    env["SNAPD_WATCH_LIMIT"] = "1"  # the root only
    d = start_daemon(home, env)
    try:
        d.ctl("watch", str(root))
        m = d.ctl_json("mark", "m", "-w", str(root))["id"]
        (root / "deep" / "a" / "b" / "new.txt").write_text("unwatched dir\n")
        out = d.ctl("rollback", "--to", m, "--dry-run", "-w", str(root)).stdout.decode()
        assert "  delete deep/a/b/new.txt\n" in out, out
    finally:
        assert d.stop() == 0


def with_bind_mount(src: Path, dst: Path) -> tuple[str, ...]:
    """A command prefix that runs its program in a new mount namespace where ``src`` is also
    mounted at ``dst`` (only that program sees the second path's contents)."""
    if shutil.which("unshare") is None:
        unavailable("needs unshare (util-linux)")
    bind = f"mount --bind {src} {dst}"
    ns = ("unshare", "-m", "--propagation", "private", "sh", "-c")
    probe = subprocess.run([*ns, bind], capture_output=True)
    if probe.returncode != 0:
        unavailable(f"cannot bind-mount in a mount namespace: {probe.stderr.decode()[-300:]}")
    return (*ns, bind + ' && exec "$0" "$@"', sys.executable)


def test_a_directory_mounted_twice_in_the_workspace_scans_every_mark(tmp_path: Path) -> None:
    """inotify has one watch per directory: a directory bind-mounted at a second path in the
    workspace gets its events under one name only, so changes made through the other were
    marked under the wrong name (and a rollback's per-file re-check missed new ones)."""
    home = tmp_path / "home-snapd"
    root = _ws(tmp_path)
    (root / "a").mkdir()
    (root / "b").mkdir()
    (root / "a" / "f.txt").write_text("one\n")
    d = start_daemon(home, python=with_bind_mount(root / "a", root / "b"))
    try:
        d.ctl("watch", str(root))
        w = _status_ws(d, root)
        assert w["scan_every_mark"] and any("also mounted" in x for x in w["warnings"]), w
        m0 = d.ctl_json("mark", "m0", "-w", str(root))["id"]
        (root / "a" / "f.txt").write_text("two\n")  # both names show it (one inode)
        (root / "a" / "g.txt").write_text("new\n")
        m1 = d.ctl_json("mark", "m1", "-w", str(root))
        got = _paths(d.ctl_json("show", m1["id"], "-w", str(root)))
        want = {"a/f.txt": "modified", "b/f.txt": "modified", "a/g.txt": "added", "b/g.txt": "added"}
        assert got == want, got
        out = d.ctl("rollback", "--to", m0, "--dry-run", "-w", str(root)).stdout.decode()
        assert "  delete a/g.txt\n" in out and "  delete b/g.txt\n" in out, out
    finally:
        assert d.stop() == 0
