"""Bit rot is reported by path (issue 30, point 5), against a real daemon.

A byte of a stored object is flipped on disk, the way a failing disk does it: in a file's
content, in the base of a delta chain, in a tree node. Then ``rollback``, ``undo``, ``cat``,
``diff`` and ``verify`` must name the workspace paths (and marks) that need it, exit non-zero,
restore everything else exactly, lose nothing (``undo`` still works for the rest), and the
daemon must keep serving.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from contextlib import closing, contextmanager
from pathlib import Path
from typing import Any

import pytest
from e2e_helpers import (
    Daemon,
    cli_mark,
    cli_rollback,
    cli_undo,
    snapshot,
    start_daemon,
    unavailable,
    wait_for,
    write,
)

from snapd.config import load_config
from snapd.store import deltas, nodes, objects, trees
from snapd.store.objects import CODEC_DELTA, xxh3_hex

pytestmark = pytest.mark.timeout(120)


# -- the store on disk, read and damaged behind the daemon's back ------------------------------


def store_dir(d: Daemon) -> Path:
    return load_config(d.env).locations.store_dir


@contextmanager
def catalog(d: Daemon) -> Iterator[sqlite3.Connection]:
    with closing(sqlite3.connect(store_dir(d) / "catalog.sqlite", timeout=10)) as conn:
        yield conn


def read_object(d: Daemon, key: str) -> bytes:
    """An object's verified content, read from the catalog the way the store reads it."""

    def payload(k: str, external: int, data: bytes | None) -> bytes:
        return (store_dir(d) / "objects" / k[:2] / k).read_bytes() if external else bytes(data or b"")

    with catalog(d) as conn:
        rows = dict(deltas.read_chains(conn, [key]))[key]
    return deltas.decode_chain(key, rows, payload, xxh3_hex)


def entry_at(d: Daemon, mark: str, path: bytes) -> trees.Entry:
    with catalog(d) as conn:
        (tree,) = conn.execute("SELECT tree FROM marks WHERE id=?", (mark,)).fetchone()
    found = trees.lookup(lambda k: nodes.decode_node(read_object(d, k)), tree, path)
    assert found is not None, (mark, path)
    return found


def link(d: Daemon, key: str) -> tuple[int, str | None]:
    """(codec, delta base) of a stored object."""
    with catalog(d) as conn:
        codec, base = conn.execute(
            "SELECT codec, base FROM objects WHERE key=?", (objects.db_key(key),)
        ).fetchone()
    return int(codec), None if base is None else objects.py_key(base)


def flip(d: Daemon, key: str) -> None:
    """Flip one byte in the middle of ``key``'s stored payload (its row, or its file)."""
    with catalog(d) as conn:
        external, data = conn.execute(
            "SELECT external, data FROM objects WHERE key=?", (objects.db_key(key),)
        ).fetchone()
        if external:
            path = store_dir(d) / "objects" / key[:2] / key
            raw = bytearray(path.read_bytes())
            raw[len(raw) // 2] ^= 0x40
            path.write_bytes(bytes(raw))
            return
        raw = bytearray(data)
        raw[len(raw) // 2] ^= 0x40
        conn.execute("UPDATE objects SET data=? WHERE key=?", (bytes(raw), objects.db_key(key)))
        conn.commit()


def text(n: int, tag: str) -> str:
    """n lines that compress about 2-fold (hex): a small edit of them is stored as a delta."""
    return "".join(f"{tag} {i:05d} {xxh3_hex(f'{tag}{i}'.encode())}\n" for i in range(n))


def serves(d: Daemon, ws: Path) -> None:
    """The daemon answers, marks the workspace, and no rollback is left unfinished."""
    cp = d.ctl("mark", "after", cwd=ws)
    assert b"not finished" not in cp.stderr, cp.stderr
    status = d.ctl_json("status")
    assert not [w for w in status["warnings"] if "not finished" in w], status["warnings"]


def damaged(reply: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {e["path"]: e for e in reply.get("damaged", [])}


def verify_refs(d: Daemon) -> tuple[int, dict[str, Any], str]:
    """``verify --json``: (exit, reply, the text output of ``verify``)."""
    cp = d.ctl("verify", "--json", check=False)
    plain = d.ctl("verify", check=False)
    return cp.returncode, json.loads(cp.stdout), plain.stdout.decode()


# -- the tests ---------------------------------------------------------------------------------


def test_a_corrupt_file_is_named_and_everything_else_restored(daemon: Daemon, ws: Path) -> None:
    write(ws / "a.txt", text(40, "a"))
    write(ws / "b.txt", text(40, "b"))
    write(ws / "sub/c.txt", "c at m\n")
    m = cli_mark(daemon, ws, "m")
    at_m = snapshot(ws)
    write(ws / "a.txt", "a changed\n")
    write(ws / "b.txt", "b changed\n")
    write(ws / "sub/c.txt", "c changed\n")
    write(ws / "new.txt", "created since m\n")
    cli_mark(daemon, ws, "n")
    before = snapshot(ws)
    key = entry_at(daemon, m, b"a.txt").key
    flip(daemon, key)

    cp = daemon.ctl("cat", m, "a.txt", cwd=ws, check=False)
    assert cp.returncode == 8 and b"a.txt" in cp.stderr and key.encode() in cp.stderr, cp

    rc, r = cli_rollback(daemon, ws, "--to", m)
    assert rc == 10, r
    assert set(damaged(r)) == {"a.txt"}, r
    hurt = damaged(r)["a.txt"]
    assert hurt["object"] == key and hurt["problem"] == "corrupt" and m in hurt["marks"], hurt
    assert "corrupt" in hurt["reason"] and r["ok"] is False and r["pre_rollback"]
    assert {k["path"] for k in r["kept"]} == {"a.txt"}, "every path left differing is in kept too"
    after = snapshot(ws)
    assert after == {**at_m, "a.txt": before["a.txt"]}, "everything else is as at the mark"
    assert not list(ws.rglob(".snapd-*~")), "no temp file left"

    rc, v, shown = verify_refs(daemon)
    assert rc == 1 and v["clean"] is False
    (entry,) = [x for x in v["damaged"] if x["object"] == key]
    refs = {p["path"]: p for p in entry["paths"]}
    assert set(refs) == {"a.txt"} and m in refs["a.txt"]["marks"], entry
    assert "a.txt" in shown and m in shown, shown

    rc, u = cli_undo(daemon, ws)  # the pre-rollback mark's objects are sound: everything comes back
    assert rc == 0, u
    assert snapshot(ws) == before
    serves(daemon, ws)


def test_the_text_of_a_rollback_names_the_path(daemon: Daemon, ws: Path) -> None:
    write(ws / "a.txt", text(40, "a"))
    write(ws / "b.txt", "b at m\n")
    m = cli_mark(daemon, ws, "m")
    write(ws / "a.txt", "a changed\n")
    write(ws / "b.txt", "b changed\n")
    flip(daemon, entry_at(daemon, m, b"a.txt").key)
    cp = daemon.ctl("rollback", "--to", m, "--yes", cwd=ws, check=False)
    err = cp.stderr.decode()
    assert cp.returncode == 10 and "damaged: a.txt" in err and "corrupt" in err, cp
    assert "kept" not in err, "said once, as damaged (--force would not help)"
    assert (ws / "b.txt").read_text() == "b at m\n" and (ws / "a.txt").read_text() == "a changed\n"
    serves(daemon, ws)


def test_a_corrupt_delta_base_names_every_path_through_it(daemon: Daemon, ws: Path) -> None:
    """The base of a chain is damaged: every content stored as a delta through it is
    unreadable, in every path and mark that holds one."""
    v1 = text(200, "log")
    write(ws / "a.txt", v1)
    m1 = cli_mark(daemon, ws, "m1")
    write(ws / "a.txt", v1 + "second\n")
    write(ws / "copy.txt", v1 + "second\n")  # the same content: the same object
    write(ws / "b.txt", "b at m2\n")
    m2 = cli_mark(daemon, ws, "m2")
    at_m2 = snapshot(ws)
    write(ws / "a.txt", "rewritten\n")
    write(ws / "copy.txt", "rewritten too\n")
    write(ws / "b.txt", "b changed\n")
    cli_mark(daemon, ws, "m3")
    before = snapshot(ws)
    base, top = entry_at(daemon, m1, b"a.txt").key, entry_at(daemon, m2, b"a.txt").key
    if link(daemon, top) != (CODEC_DELTA, base):
        unavailable(f"a.txt at m2 is not stored as a delta of its version at m1: {link(daemon, top)}")
    flip(daemon, base)

    rc, r = cli_rollback(daemon, ws, "--to", m2)
    assert rc == 10, r
    assert set(damaged(r)) == {"a.txt", "copy.txt"}, r
    for path in ("a.txt", "copy.txt"):
        hurt = damaged(r)[path]
        assert (hurt["object"], hurt["damaged"]) == (top, base) and m2 in hurt["marks"], hurt
        assert base in hurt["reason"] and "delta base" in hurt["reason"], hurt
    assert snapshot(ws) == {**at_m2, "a.txt": before["a.txt"], "copy.txt": before["copy.txt"]}

    rc, v, shown = verify_refs(daemon)
    assert rc == 1
    (entry,) = [x for x in v["damaged"] if x["object"] == base]
    refs = {(p["path"], p["object"]): p for p in entry["paths"]}
    assert {m1} <= set(refs["a.txt", base]["marks"]), refs
    assert {m2} <= set(refs["a.txt", top]["marks"]) and {m2} <= set(refs["copy.txt", top]["marks"]), refs
    assert "copy.txt" in shown and base in shown and "needed by 2 paths" in shown, shown

    rc, u = cli_undo(daemon, ws)
    assert rc == 0, u
    assert snapshot(ws) == before
    serves(daemon, ws)


def test_undo_names_a_corrupt_path_and_restores_the_rest(daemon: Daemon, ws: Path) -> None:
    write(ws / "a.txt", "a at m\n")
    write(ws / "b.txt", "b at m\n")
    m = cli_mark(daemon, ws, "m")
    write(ws / "a.txt", text(40, "work on a"))
    write(ws / "b.txt", "work on b\n")
    rc, r = cli_rollback(daemon, ws, "--to", m)
    assert rc == 0, r
    pre = r["pre_rollback"]
    key = entry_at(daemon, pre, b"a.txt").key
    flip(daemon, key)  # the work the rollback replaced, as the pre-rollback mark holds it

    rc, u = cli_undo(daemon, ws)
    assert rc == 10, u
    assert set(damaged(u)) == {"a.txt"} and pre in damaged(u)["a.txt"]["marks"], u
    assert (ws / "b.txt").read_text() == "work on b\n", "the rest of the undo is done"
    assert (ws / "a.txt").read_text() == "a at m\n", "the damaged path is left as it is"
    rc, again = cli_undo(daemon, ws)  # a second undo redoes: the rollback's state comes back
    assert rc == 0, again
    assert (ws / "b.txt").read_text() == "b at m\n" and (ws / "a.txt").read_text() == "a at m\n"
    serves(daemon, ws)


def test_a_path_that_changes_kind_is_left_as_it_is(daemon: Daemon, ws: Path) -> None:
    """At the mark ``p`` is a file, now a directory: its removal runs before its write, so
    the content is read first; a damaged one leaves the directory (and what is in it)."""
    write(ws / "p", text(40, "p"))
    write(ws / "q.txt", "q at m\n")
    m = cli_mark(daemon, ws, "m")
    (ws / "p").unlink()
    write(ws / "p/inside.txt", "made since\n")
    write(ws / "q.txt", "q changed\n")
    flip(daemon, entry_at(daemon, m, b"p").key)
    rc, r = cli_rollback(daemon, ws, "--to", m)
    assert rc == 10 and set(damaged(r)) == {"p"}, r
    assert (ws / "p/inside.txt").read_text() == "made since\n"
    assert (ws / "q.txt").read_text() == "q at m\n"
    serves(daemon, ws)


def test_a_corrupt_tree_node_names_the_directory(tmp_path: Path, daemon: Daemon, ws: Path) -> None:
    """A directory's node at a mark is damaged (found after a restart: a node read before is
    cached verified). The rollback refuses before writing anything, naming the directory;
    cat, diff and verify name it too."""
    write(ws / "src/pkg/mod.py", "x = 1\n")
    write(ws / "top.txt", "top at m\n")
    m = cli_mark(daemon, ws, "m")
    write(ws / "src/pkg/mod.py", "x = 2\n")
    write(ws / "top.txt", "top changed\n")
    cli_mark(daemon, ws, "n")
    before = snapshot(ws)
    node = entry_at(daemon, m, b"src/pkg").key
    daemon.stop()
    d = start_daemon(daemon.snapd_home, daemon.env)
    try:
        flip(d, node)
        rc, r = cli_rollback(d, ws, "--to", m)
        assert rc == 8 and r["error"]["code"] == "corrupt_object", r
        message = r["error"]["message"]
        assert "the directory src/pkg" in message and "nothing was changed" in message, message
        assert {(p["path"], p["kind"]) for p in r["error"]["details"]["paths"]} == {("src/pkg", "dir")}
        assert snapshot(ws) == before, "nothing was written"
        assert d.ctl_json("log", cwd=ws)["marks"][0]["label"] == "n", "no pre-rollback mark either"

        cp = d.ctl("cat", m, "src/pkg/mod.py", cwd=ws, check=False)
        assert cp.returncode == 8 and b"the directory src/pkg" in cp.stderr, cp
        cp = d.ctl("cat", m, "top.txt", cwd=ws)  # the rest of the mark reads back
        assert cp.stdout == b"top at m\n"
        cp = d.ctl("diff", m, cwd=ws, check=False)
        assert cp.returncode == 8 and b"the directory src/pkg" in cp.stderr, cp
        cp = d.ctl("show", m, cwd=ws, check=False)
        assert cp.returncode == 8 and b"the directory src/pkg" in cp.stderr, cp

        rc, v, shown = verify_refs(d)
        assert rc == 1
        (entry,) = [x for x in v["damaged"] if x["object"] == node]
        assert [(p["path"], p["kind"], p["marks"]) for p in entry["paths"]] == [("src/pkg", "dir", [m])]
        assert "directory src/pkg" in shown, shown

        serves(d, ws)
    finally:
        d.stop()


def test_a_rollback_recovered_after_a_crash_lists_a_damaged_path_and_finishes(
    daemon: Daemon, ws: Path
) -> None:
    """The daemon dies after the first rename of a rollback; before it starts again, the
    content of another path of the plan rots. Recovery finishes the rest and lists that path:
    the journal is gone and the workspace is not stuck in an unfinished rollback."""
    for name in ("a.txt", "b.txt", "c.txt"):
        write(ws / name, f"{name} at m\n")
    m = cli_mark(daemon, ws, "m")
    for name in ("a.txt", "b.txt", "c.txt"):
        write(ws / name, f"{name} changed\n")
    cli_mark(daemon, ws, "n")
    before = snapshot(ws)
    home, env = daemon.snapd_home, daemon.env
    daemon.stop()
    d = start_daemon(home, env, crash_after="apply.rename:1")
    cp = d.ctl("rollback", "--to", m, "--yes", cwd=ws, check=False)
    assert d.wait_exit(20) == 86, (cp, d.log()[-3000:])
    assert (ws / "a.txt").read_text() == "a.txt at m\n" and (ws / "c.txt").read_text() == "c.txt changed\n"
    flip(d, entry_at(d, m, b"c.txt").key)
    d = start_daemon(home, env)
    try:
        def recovered() -> dict[str, Any] | None:
            w = d.call("status")["workspaces"][0]
            return w.get("recovered_rollback") if w.get("state") == "ready" else None

        done = wait_for(recovered, 30, what="the rollback is recovered")
        assert isinstance(done, dict) and [p for p, _ in done["damaged"]] == ["c.txt"], done
        assert (ws / "b.txt").read_text() == "b.txt at m\n"
        assert (ws / "c.txt").read_text() == "c.txt changed\n"
        assert not list((store_dir(d) / "journal").glob("*.json")), "the journal is gone"
        (said,) = [w for w in d.call("status")["warnings"] if "finished" in w]
        assert "c.txt" in said and "damaged" in said, said
        serves(d, ws)
        rc, u = cli_undo(d, ws)
        assert rc == 0, u
        assert snapshot(ws) == before
    finally:
        d.stop()


def test_a_symlink_whose_captured_state_is_damaged_is_left_and_says_so(daemon: Daemon, ws: Path) -> None:
    """A symlink's re-check compares its text with the captured one: when that cannot be read,
    the path is left as it is and the reason says it is what it holds now that is damaged."""
    (ws / "link").symlink_to("target-at-m")
    write(ws / "f.txt", "f at m\n")
    m = cli_mark(daemon, ws, "m")
    (ws / "link").unlink()
    (ws / "link").symlink_to("target-now")
    write(ws / "f.txt", "f changed\n")
    n = cli_mark(daemon, ws, "n")
    flip(daemon, entry_at(daemon, n, b"link").key)
    rc, r = cli_rollback(daemon, ws, "--to", m)
    assert rc == 10 and set(damaged(r)) == {"link"}, r
    assert "holds now" in damaged(r)["link"]["reason"], r
    assert (ws / "link").readlink() == Path("target-now") and (ws / "f.txt").read_text() == "f at m\n"
    serves(daemon, ws)


def test_verify_shows_a_bounded_list_and_json_every_path(daemon: Daemon, ws: Path) -> None:
    """One object shared by 15 paths (the same content): the text names 10 and says how many
    more, --json lists all 15, each with its mark."""
    same = text(30, "shared")
    for i in range(15):
        write(ws / f"copies/c{i:02d}.txt", same)
    m = cli_mark(daemon, ws, "m")
    key = entry_at(daemon, m, b"copies/c00.txt").key
    flip(daemon, key)
    rc, v, shown = verify_refs(daemon)
    assert rc == 1
    (entry,) = [x for x in v["damaged"] if x["object"] == key]
    assert sorted(p["path"] for p in entry["paths"]) == [f"copies/c{i:02d}.txt" for i in range(15)]
    assert all(p["marks"] == [m] and p["latest"] for p in entry["paths"]), entry
    assert "needed by 15 paths" in shown and "… and 5 more (--json lists them all)" in shown, shown
    assert sum("copies/c" in line for line in shown.splitlines()) == 10, shown


def test_a_content_equal_to_a_damaged_object_is_captured_again(daemon: Daemon, ws: Path) -> None:
    """A file written with the very content of a damaged object: the capture must not fail on
    the old damage (every mark of the workspace failed with "object … is corrupt", and no
    change was captured), nor refer to it: the content is stored again, under a collision
    key, and reads back; the old mark's path is still reported damaged."""
    same = text(40, "a")
    write(ws / "a.txt", same)
    m = cli_mark(daemon, ws, "m")
    write(ws / "a.txt", "changed\n")
    cli_mark(daemon, ws, "n")
    key = entry_at(daemon, m, b"a.txt").key
    flip(daemon, key)
    write(ws / "copy.txt", same)
    write(ws / "other.txt", "other\n")
    o = cli_mark(daemon, ws, "o")
    again = entry_at(daemon, o, b"copy.txt").key
    assert again != key and again.startswith(key + "."), (again, key)
    assert daemon.ctl("cat", o, "copy.txt", cwd=ws).stdout == same.encode()
    assert daemon.ctl("cat", o, "other.txt", cwd=ws).stdout == b"other\n"
    cp = daemon.ctl("cat", m, "a.txt", cwd=ws, check=False)
    assert cp.returncode == 8 and b"a.txt" in cp.stderr, cp
    rc, r = cli_rollback(daemon, ws, "--to", o)  # nothing to change: the mark is the tree
    assert rc == 0 and r["pre_rollback"] is None, r
    serves(daemon, ws)
