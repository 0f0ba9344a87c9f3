"""Hard-link names that come and go between two captures, against a real daemon (issue 30, 4).

``ln a b; echo x >> b; rm b`` inside the capture thread's settle: inotify reports the write
on ``b`` only, and by the time the capture runs ``b`` is gone, so nothing named ``a`` — whose
bytes changed. The same when ``b``'s directory is removed or moved out of the tree, and in
webs of links renamed over one another. Each test checks a mark by rolling back to it: the
workspace must come back exactly as it was when the mark was taken (docs/rollback.md, "Hard
links").
"""

from __future__ import annotations

import base64
import os
import random
import shutil
import subprocess
from pathlib import Path

import pytest
from e2e_helpers import Daemon, Snap, cli_rollback, snap_diff, snapshot, write

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    root = (tmp_path / "ws").resolve()
    root.mkdir()
    return root


def append(path: Path, data: bytes) -> None:
    with open(path, "ab") as fh:
        fh.write(data)


def mark(d: Daemon, ws: Path, label: str) -> str:
    """A mark over the daemon's socket from this process: it comes within the capture thread's
    settle (the CLI's start-up alone is longer), as a hook's mark right after an edit may."""
    return str(d.call("mark", label=label, workspace=os.fsencode(ws))["id"])


def cat(d: Daemon, root: Path, mark: str, rel: str) -> bytes:
    return d.ctl("cat", mark, rel, "-w", root).stdout


def rolled_back_to(d: Daemon, ws: Path, mark: str, want: Snap) -> None:
    """Roll back to ``mark``: exit 0 and the tree exactly ``want`` (as it was at the mark)."""
    code, reply = cli_rollback(d, ws, "--to", mark)
    assert code == 0, reply
    got = snapshot(ws)
    assert got == want, f"rollback to {mark} is not the tree at that mark:\n{snap_diff(got, want)}"


def fleeting(ws: Path, shape: str, outside: Path) -> None:
    """One fleeting second name of ``a``, written through and gone again, as fast as Python goes."""
    if shape == "name":
        os.link(ws / "a", ws / "b")
        append(ws / "b", b"through b\n")
        os.unlink(ws / "b")
    elif shape == "shell":
        subprocess.run(["sh", "-c", "ln a b && echo 'through b' >> b && rm b"], cwd=ws, check=True)
    else:
        (ws / "d").mkdir()
        os.link(ws / "a", ws / "d" / "b")
        append(ws / "d" / "b", b"through b\n")
        if shape == "dir_removed":
            shutil.rmtree(ws / "d")
        else:
            os.rename(ws / "d", outside / "d")


@pytest.mark.parametrize("shape", ["name", "shell", "dir_removed", "dir_moved_out"])
def test_a_name_written_through_and_gone_before_the_capture(
    daemon: Daemon, ws: Path, tmp_path: Path, shape: str
) -> None:
    """The mark after the fleeting name holds ``a``'s new bytes; rolling back to it changes
    nothing, to the mark before brings the old bytes back, and forward again the new ones."""
    outside = tmp_path / "outside"
    outside.mkdir()
    write(ws / "a", "one\n")
    write(ws / "keep", "k\n")
    daemon.ctl("watch", ws)
    m0 = mark(daemon, ws, "m0")
    at_m0 = snapshot(ws)
    fleeting(ws, shape, outside)
    m1 = mark(daemon, ws, "m1")
    at_m1 = snapshot(ws)
    assert cat(daemon, ws, m1, "a") == b"one\nthrough b\n", "the mark kept a's old bytes"
    rolled_back_to(daemon, ws, m1, at_m1)
    rolled_back_to(daemon, ws, m0, at_m0)
    rolled_back_to(daemon, ws, m1, at_m1)


def test_a_linked_name_written_through_then_removed_after_it_was_captured(daemon: Daemon, ws: Path) -> None:
    """``b`` lives long enough to be captured as a second name of ``a``; written through and
    removed later, in one settle: its removal leads to ``a``."""
    write(ws / "a", "one\n")
    daemon.ctl("watch", ws)
    os.link(ws / "a", ws / "b")
    m0 = mark(daemon, ws, "m0")
    at_m0 = snapshot(ws)
    append(ws / "b", b"through b\n")
    os.unlink(ws / "b")
    m1 = mark(daemon, ws, "m1")
    at_m1 = snapshot(ws)
    assert cat(daemon, ws, m1, "a") == b"one\nthrough b\n"
    rolled_back_to(daemon, ws, m0, at_m0)
    rolled_back_to(daemon, ws, m1, at_m1)


def test_a_linked_name_written_through_then_renamed_over(daemon: Daemon, ws: Path) -> None:
    """``b``, a captured second name of ``a``, is written through and then replaced by a rename
    over it: the write reached ``a`` all the same."""
    write(ws / "a", "one\n")
    write(ws / "c", "c\n")
    daemon.ctl("watch", ws)
    os.link(ws / "a", ws / "b")
    mark(daemon, ws, "m0")
    append(ws / "b", b"through b\n")
    os.rename(ws / "c", ws / "b")
    m1 = mark(daemon, ws, "m1")
    at_m1 = snapshot(ws)
    assert cat(daemon, ws, m1, "a") == b"one\nthrough b\n"
    rolled_back_to(daemon, ws, m1, at_m1)


def counters(d: Daemon, ws: Path) -> dict[str, int]:
    work: dict[str, int] = next(w for w in d.call("status")["workspaces"] if w["root"] == str(ws))["counters"]
    return work


def test_ordinary_edits_atomic_saves_and_kept_links_cost_no_recheck(daemon: Daemon, ws: Path) -> None:
    """The re-check of every file is for new names that went unseen only: writes in place,
    atomic saves (a temporary name renamed over the file at once: its file is known from the
    look at the temporary name, or looked at under the new one), links kept and written
    through, new directories, renames and removals add none — marks stay O(changes)."""
    write(ws / "a", "one\n")
    write(ws / "old", "old\n")
    for n in range(20):
        write(ws / f"f{n}", "f\n")
    daemon.ctl("watch", ws)
    mark(daemon, ws, "m0")
    before = counters(daemon, ws)
    for n in range(20):  # each of 20 files written in place, then saved atomically
        write(ws / f"f{n}", f"in place {n}\n")
        tmp = ws / f".f{n}.tmp"
        write(tmp, f"saved {n}\n")
        os.rename(tmp, ws / f"f{n}")
    tmp = ws / ".a.tmp"
    write(tmp, "saved a\n")
    os.rename(tmp, ws / "a")
    os.link(ws / "a", ws / "b")
    append(ws / "b", b"through b\n")
    write(ws / "d" / "e" / "f", "new dir\n")
    os.rename(ws / "old", ws / "d" / "old")
    os.unlink(ws / "d" / "old")
    m1 = mark(daemon, ws, "m1")
    got = {k: v - before[k] for k, v in counters(daemon, ws).items()}
    assert got["rechecks"] == 0 and got["full_scans"] == 0, got
    assert cat(daemon, ws, m1, "a") == cat(daemon, ws, m1, "b") == b"saved a\nthrough b\n"


# -- webs of links ----------------------------------------------------------------------------------

NAMES = [f"{d}{n}" for d in ("", "p/", "q/r/") for n in ("a", "b", "c", "d")]
OPS = ("ln", "ln", "rename", "write", "write", "rm", "fleeting", "fleeting_dir", "new", "dir_away")


def web_step(rng: random.Random, ws: Path, outside: Path, n: int) -> str:
    """One random operation on a few names in a few directories; what it did, for the log."""
    files = [p for p in NAMES if (ws / p).is_file()]
    op = rng.choice(OPS)
    if not files or op == "new":
        p = rng.choice(NAMES)
        write(ws / p, f"new {n}\n")
        return f"new {p}"
    src = rng.choice(files)
    dst = rng.choice([p for p in NAMES if p != src])
    if op == "ln":
        if (ws / dst).exists():
            os.unlink(ws / dst)
        os.link(ws / src, ws / dst)
        return f"ln {src} {dst}"
    if op == "rename":
        os.rename(ws / src, ws / dst)
        return f"mv {src} {dst}"
    if op == "write":
        append(ws / src, f"w{n}\n".encode())
        return f"write {src}"
    if op == "rm":
        os.unlink(ws / src)
        return f"rm {src}"
    if op == "dir_away":  # a directory of names renamed away, written through there, and back
        inside = [p for p in files if p.startswith("p/")]
        os.rename(ws / "p", ws / "p.away")
        for p in inside[:2]:
            append(ws / "p.away" / p[2:], f"away{n}\n".encode())
        os.rename(ws / "p.away", ws / "p")
        return f"dir_away {inside[:2]}"
    if op == "fleeting":
        tmp = ws / rng.choice(["", "p/", "q/"]) / "tmp"
        os.link(ws / src, tmp)
        append(tmp, f"f{n}\n".encode())
        if rng.random() < 0.5:
            os.rename(tmp, ws / "t2")  # renamed first, then gone
            tmp = ws / "t2"
        os.unlink(tmp)
        return f"fleeting {src}"
    d = ws / "s"  # fleeting_dir: a second name in a new directory, removed or moved out with it
    d.mkdir()
    os.link(ws / src, d / "x")
    append(d / "x", f"d{n}\n".encode())
    if rng.random() < 0.5:
        shutil.rmtree(d)
        return f"fleeting_dir {src} rm"
    os.rename(d, outside / f"s{n}")
    return f"fleeting_dir {src} mv"


def mark_holds(d: Daemon, ws: Path, mark_id: str, want: Snap) -> list[str]:
    """The files of ``want`` whose bytes the mark does not hold."""
    wrong = []
    with d.client() as c:
        for rel, entry in sorted(want.items()):
            if entry[0] == "file":
                got = c.call("cat", at=mark_id, path=os.fsencode(rel), workspace=os.fsencode(ws))
                if base64.b64decode(got["data_b64"]) != entry[2]:
                    wrong.append(rel)
    return wrong


def test_random_webs_of_links_marks_and_rollbacks_are_exact(daemon: Daemon, ws: Path, tmp_path: Path) -> None:
    """~150 operations (links, renames over, writes through, removals, fleeting names), a mark
    every few holding every file's bytes as they are, and a rollback every few marks to a random
    earlier one giving the tree as it was at its mark. Seed printed; SNAPD_LINKS_SEED replays
    one."""
    seed = int(os.environ.get("SNAPD_LINKS_SEED", "30"))
    print(f"seed {seed}")
    rng = random.Random(seed)
    outside = tmp_path / "outside"
    outside.mkdir()
    for p in ("p", "q/r"):
        (ws / p).mkdir(parents=True)
    write(ws / "a", "a0\n")
    write(ws / "q/c", "c0\n")
    daemon.ctl("watch", ws)
    marks: list[tuple[str, Snap]] = [(mark(daemon, ws, "start"), snapshot(ws))]
    done: list[str] = []
    for n in range(150):
        done.append(web_step(rng, ws, outside, n))
        if rng.random() < 0.25:
            marks.append((mark(daemon, ws, f"m{n}"), snapshot(ws)))
            stale = mark_holds(daemon, ws, *marks[-1])
            assert not stale, f"seed {seed}, after {len(done)} steps ({'; '.join(done[-8:])}): stale {stale}"
            if rng.random() < 0.3:
                target, want = rng.choice(marks)
                code, reply = cli_rollback(daemon, ws, "--to", target)
                got = snapshot(ws)
                assert code == 0 and got == want, (
                    f"seed {seed}, after {len(done)} steps ({'; '.join(done[-8:])}): rollback to "
                    f"{target} exit {code}:\n{snap_diff(got, want)}"
                )
                done.append(f"rollback {target}")
    target, want = marks[-1]
    rolled_back_to(daemon, ws, target, want)
