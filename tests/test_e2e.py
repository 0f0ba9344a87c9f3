"""End-to-end: a real ``snapd start`` process, driven by the real ``snapctl`` and by
:class:`snapd.ipc.client.Client` over the real socket.

Each test gets its own ``SNAPD_HOME`` (``tmp_path/"snapd-home"``) and ``HOME`` (``tmp_path/"home"``,
from conftest), so nothing touches the developer's files. The ``daemon`` fixture starts the
daemon, waits until ``status`` answers, and on teardown stops it with ``snapctl stop`` (SIGKILL
as a last resort, which fails the test) and checks that it exited 0.

Scenarios: workspaces, what is captured, marks and their barrier (docs/architecture.md), and
the protocol's error handling (docs/protocol.md).
"""

from __future__ import annotations

import base64
import json
import os
import pwd
import shutil
import signal
import subprocess
import sys
import threading
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from e2e_helpers import (
    Daemon,
    base_env,
    describe,
    git,
    no_cookies,
    raw_call,
    raw_json,
    request,
    run_ctl,
    start_daemon,
)

from snapd.errors import NotFound
from snapd.ipc import protocol
from snapd.ipc.client import Client

# -- fixtures -------------------------------------------------------------------------------------


# ``daemon`` and ``ws`` come from conftest.py.


def b(path: Path) -> bytes:
    return os.fsencode(path)


def wire_path(p: str | dict[str, str]) -> bytes:
    return base64.b64decode(p["b64"]) if isinstance(p, dict) else p.encode()


def change_map(shown: dict[str, Any]) -> dict[bytes, str]:
    assert shown["changes_total"] == len(shown["changes"]), "more changes than the reply lists"
    return {wire_path(ch["path"]): ch["status"] for ch in shown["changes"]}


def ping(d: Daemon) -> None:
    assert d.alive(), "daemon died\n" + d.log()[-4000:]
    assert d.call("ping")["pong"] is True


# -- 1. write, then mark at once ------------------------------------------------------------------


@pytest.mark.timeout(90)
def test_write_then_mark_without_pause_cli(daemon: Daemon, ws: Path) -> None:
    """`echo x > f && snapctl mark m`: the mark holds f's new bytes (semantics 3), 20 times."""
    script = 'printf "%s\\n" "$1" > f && printf "%s" "$1" > "new-$2" && exec "$3" -m snapd mark "m$2" --json'
    c = daemon.client()
    previous: str | None = None
    for i in range(20):
        content = f"round {i:02d} " + "x" * (i % 3)  # same length as the last round, often
        cp = subprocess.run(
            ["sh", "-c", script, "sh", content, str(i), sys.executable],
            cwd=ws,
            env=daemon.env,
            capture_output=True,
            timeout=60,
        )
        assert cp.returncode == 0, describe(cp)
        mark = json.loads(cp.stdout)
        assert mark["workspace"] == str(ws) and mark["label"] == f"m{i}"
        cat = daemon.ctl("cat", f"m{i}", "f", cwd=ws)
        assert cat.stdout == (content + "\n").encode(), f"round {i}: mark lacks the write before it"
        shown = c.call("show", mark=mark["id"], workspace=b(ws))
        changes = change_map(shown)
        assert changes.get(f"new-{i}".encode()) == "added", changes
        assert changes.get(b"f") == ("added" if previous is None else "modified"), changes
        previous = content
    shown_cli = daemon.ctl_json("show", "m19", cwd=ws)
    assert change_map(shown_cli) == {b"f": "modified", b"new-19": "added"}
    assert no_cookies(ws) == []


@pytest.mark.timeout(60)
def test_write_then_mark_without_pause_client(daemon: Daemon, ws: Path) -> None:
    """The same race, faster: same-size rewrites within one mtime tick, marked at once."""
    c = daemon.client()
    f = ws / "same-size.txt"
    for i in range(150):
        data = f"{i:06d}".encode()
        with open(f, "wb") as fh:  # same size every time: only content (and mtime) differ
            fh.write(data)
        m = c.call("mark", label=f"r{i}", workspace=b(ws))
        got = c.call("cat", at=m["id"], path=b"same-size.txt", workspace=b(ws))
        assert base64.b64decode(got["data_b64"]) == data, f"iteration {i}"
    # New directories: the file's events may come before the watch on its directory exists.
    for i in range(40):
        deep = ws / f"n{i}" / "a" / "b"
        deep.mkdir(parents=True)
        (deep / "x.txt").write_bytes(b"deep %d" % i)
        m = c.call("mark", label=f"deep{i}", workspace=b(ws))
        got = c.call("cat", at=m["id"], path=f"n{i}/a/b/x.txt".encode(), workspace=b(ws))
        assert base64.b64decode(got["data_b64"]) == b"deep %d" % i, f"iteration {i}"
    # A directory renamed and then written into, marked at once.
    for i in range(40):
        os.rename(ws / f"n{i}", ws / f"r{i}")
        (ws / f"r{i}" / "a" / "b" / "x.txt").write_bytes(b"moved %d" % i)
        m = c.call("mark", label=f"moved{i}", workspace=b(ws))
        changes = change_map(c.call("show", mark=m["id"], workspace=b(ws)))
        assert changes == {
            f"n{i}".encode(): "removed",
            f"n{i}/a".encode(): "removed",
            f"n{i}/a/b".encode(): "removed",
            f"n{i}/a/b/x.txt".encode(): "removed",
            f"r{i}".encode(): "added",
            f"r{i}/a".encode(): "added",
            f"r{i}/a/b".encode(): "added",
            f"r{i}/a/b/x.txt".encode(): "added",
        }, changes
        got = c.call("cat", at=m["id"], path=f"r{i}/a/b/x.txt".encode(), workspace=b(ws))
        assert base64.b64decode(got["data_b64"]) == b"moved %d" % i, f"iteration {i}"


@pytest.mark.timeout(30)
def test_retried_mark_with_the_same_id_is_taken_once(daemon: Daemon, ws: Path) -> None:
    payload = request("mark", {"label": "retried", "workspace": str(ws)}, rid="retry-0001")
    first = raw_json(daemon.endpoint, payload)
    second = raw_json(daemon.endpoint, payload)  # a new connection, as a retrying client would
    assert first["ok"] is True and second == first
    labels = [m["label"] for m in daemon.call("log", workspace=b(ws))["marks"]]
    assert labels == ["retried", "baseline"], labels
    other = request("mark", {"label": "different", "workspace": str(ws)}, rid="retry-0001")
    _error(raw_json(daemon.endpoint, other), "bad_request")
    ping(daemon)


# -- 2. inotify queue overflow --------------------------------------------------------------------


@pytest.mark.timeout(120)
def test_sigstop_flood_of_20000_files_is_complete(daemon: Daemon, ws: Path) -> None:
    """Events overflow the inotify queue while the daemon is stopped: the mark still has all."""
    n_dirs, per_dir = 20, 1000
    c = daemon.client(120.0)
    for d in range(n_dirs):  # watched before the flood, so its events land in the queue
        (ws / f"d{d:02d}").mkdir()
    c.call("mark", label="dirs", workspace=b(ws))
    os.kill(daemon.pid, signal.SIGSTOP)
    try:
        for d in range(n_dirs):
            sub = ws / f"d{d:02d}"
            for j in range(per_dir):
                (sub / f"f{j:04d}").write_bytes(b"%d/%d\n" % (d, j))
    finally:
        os.kill(daemon.pid, signal.SIGCONT)
    mark = daemon.ctl_json("mark", "after-flood", cwd=ws, timeout=120)
    shown = daemon.ctl_json("show", mark["id"], cwd=ws)
    added = mark["summary"]["counts"].get("added", 0)
    total = n_dirs * per_dir
    assert added == total and mark["summary"]["counts"] == {"added": total}, mark["summary"]
    assert shown["changes_total"] == total, shown["changes_total"]
    st = daemon.call("status")
    (w,) = st["workspaces"]
    assert w["files"] == total, w
    if int(Path("/proc/sys/fs/inotify/max_queued_events").read_text()) < 2 * total:
        assert w["overflows"] >= 1, "the flood should have overflowed the queue (rescan path untested)"
    for d, j in ((0, 0), (7, 513), (19, 999)):
        got = c.call("cat", at=mark["id"], path=f"d{d:02d}/f{j:04d}".encode(), workspace=b(ws))
        assert base64.b64decode(got["data_b64"]) == b"%d/%d\n" % (d, j)
    # Deleting them all while stopped again is just as complete.
    os.kill(daemon.pid, signal.SIGSTOP)
    try:
        for d in range(n_dirs):
            shutil.rmtree(ws / f"d{d:02d}")
    finally:
        os.kill(daemon.pid, signal.SIGCONT)
    gone = daemon.ctl_json("mark", "after-delete", cwd=ws, timeout=120)
    assert gone["summary"]["counts"] == {"removed": total + n_dirs}, gone["summary"]


# -- 3. editors' saves ----------------------------------------------------------------------------


@pytest.mark.timeout(60)
def test_atomic_saves_and_sed_in_place(daemon: Daemon, ws: Path) -> None:
    c = daemon.client()
    doc = ws / "doc.txt"
    doc.write_text("original\n")
    c.call("mark", label="before", workspace=b(ws))

    def mark_and_check(label: str, expected: bytes) -> None:
        m = c.call("mark", label=label, workspace=b(ws))
        got = c.call("cat", at=m["id"], path=b"doc.txt", workspace=b(ws))
        assert base64.b64decode(got["data_b64"]) == expected, label
        assert change_map(c.call("show", mark=m["id"], workspace=b(ws))) == {b"doc.txt": "modified"}, label

    for i in range(15):  # write temp, fsync, rename over (VS Code, JetBrains, most libraries)
        tmp = ws / f".doc.txt.{i}.tmp"
        with open(tmp, "wb") as fh:
            fh.write(b"atomic save %d\n" % i)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, doc)
        mark_and_check(f"save-{i}", b"atomic save %d\n" % i)

    # vim's default: rename the original to a backup, write a new file, delete the backup.
    os.rename(doc, ws / "doc.txt~")
    (ws / "4913").write_bytes(b"")  # vim's writability probe
    os.unlink(ws / "4913")
    doc.write_text("vim save\n")
    os.unlink(ws / "doc.txt~")
    mark_and_check("vim", b"vim save\n")

    # sed -i (temp file sedXXXXXX, rename over), marked with no pause in between.
    cp = subprocess.run(
        [
            "sh",
            "-c",
            'sed -i "s/vim/sed/" doc.txt && exec "$1" -m snapd mark sed-i --json',
            "sh",
            sys.executable,
        ],
        cwd=ws,
        env=daemon.env,
        capture_output=True,
        timeout=30,
    )
    assert cp.returncode == 0, describe(cp)
    assert daemon.ctl("cat", "sed-i", "doc.txt", cwd=ws).stdout == b"sed save\n"
    assert change_map(daemon.ctl_json("show", "sed-i", cwd=ws)) == {b"doc.txt": "modified"}
    assert sorted(os.listdir(ws)) == ["doc.txt"]


# -- 4. file names that are not UTF-8 -------------------------------------------------------------


@pytest.mark.timeout(60)
def test_non_utf8_names_through_cli_and_protocol(daemon: Daemon, ws: Path) -> None:
    name = b"caf\xe9"
    sub = b"d\xff"
    wsb = b(ws)
    with open(wsb + b"/" + name, "wb") as fh:
        fh.write(b"latin-1 name\n")
    os.mkdir(wsb + b"/" + sub)
    with open(wsb + b"/" + sub + b"/in\xfener", "wb") as fh:
        fh.write(b"nested\n")
    os.mkfifo(wsb + b"/fifo\xfd")  # skipped (a FIFO), and reported with its name
    mark = daemon.ctl_json("mark", "nonutf8", cwd=ws)
    assert {"b64": base64.b64encode(name).decode()} in mark["summary"]["examples"]["added"], mark["summary"]

    shown = daemon.ctl_json("show", mark["id"], cwd=ws)
    raw_paths = [ch["path"] for ch in shown["changes"]]
    assert {"b64": base64.b64encode(name).decode()} in raw_paths, raw_paths
    assert {"b64": base64.b64encode(sub + b"/in\xfener").decode()} in raw_paths, raw_paths
    assert change_map(shown)[name] == "added"

    # CLI: the argument is the name's exact bytes (as a shell would pass them).
    cat = daemon.ctl("cat", mark["id"], name, cwd=ws)
    assert cat.stdout == b"latin-1 name\n"
    cat = daemon.ctl("cat", "nonutf8", wsb + b"/" + sub + b"/in\xfener", cwd=ws)  # absolute
    assert cat.stdout == b"nested\n"
    cat = daemon.ctl("cat", "-w", ws, "nonutf8", sub + b"/in\xfener", cwd="/")
    assert cat.stdout == b"nested\n"
    # Human output shows undecodable bytes as \xNN.
    human = daemon.ctl("show", mark["id"], cwd=ws).stdout.decode()
    assert "caf\\xe9" in human, human

    # Protocol: the path as {"b64": ...} in a raw request.
    reply = raw_json(
        daemon.endpoint,
        request(
            "cat", {"path": {"b64": base64.b64encode(name).decode()}, "at": mark["id"], "workspace": str(ws)}
        ),
    )
    assert reply["ok"] is True, reply
    assert base64.b64decode(reply["result"]["data_b64"]) == b"latin-1 name\n"
    # And through the Client (bytes are encoded for us).
    got = daemon.client().call("cat", at=mark["id"], path=name, workspace=wsb)
    assert base64.b64decode(got["data_b64"]) == b"latin-1 name\n"
    # Status and log must still be answerable with such names in the workspace.
    (w,) = daemon.ctl_json("status")["workspaces"]
    assert {"b64": base64.b64encode(b"fifo\xfd").decode()} in w["skipped_examples"], w
    assert "fifo\\xfd" in daemon.ctl("status").stdout.decode()
    assert daemon.ctl_json("log", cwd=ws)["marks"][0]["id"] == mark["id"]
    daemon.ctl("log", cwd=ws)


# -- 5. many clients, many workspaces -------------------------------------------------------------


@pytest.mark.timeout(120)
def test_twenty_clients_marking_five_workspaces(daemon: Daemon, tmp_path: Path) -> None:
    roots = []
    for i in range(5):
        top = tmp_path / "multi" / f"w{i}"
        top.mkdir(parents=True)
        roots.append(top.resolve())
        daemon.call("watch", path=b(roots[-1]))
    n_clients, rounds = 20, 3
    start = threading.Barrier(n_clients)
    results: list[tuple[int, int, str, dict[str, Any]]] = []
    errors: list[BaseException] = []
    lock = threading.Lock()

    def worker(k: int) -> None:
        root = roots[k % 5]
        try:
            with Client(daemon.endpoint, 60.0) as c:
                start.wait(30)
                for r in range(rounds):
                    content = f"client {k} round {r}\n"
                    (root / f"c{k}.txt").write_text(content)
                    (root / f"c{k}-r{r}.txt").write_text(content)
                    m = c.call("mark", label=f"c{k}-r{r}", workspace=b(root), agent=f"client{k}")
                    with lock:
                        results.append((k, r, content, m))
        except BaseException as exc:  # reported below
            with lock:
                errors.append(exc)

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(n_clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(100)
    assert not any(t.is_alive() for t in threads), "a client hung"
    assert errors == [], errors
    assert len(results) == n_clients * rounds
    ids = [m["id"] for *_, m in results]
    assert len(set(ids)) == len(ids), "mark ids are not unique"

    c = daemon.client(30.0)
    for root in roots:
        log = c.call("log", workspace=b(root), limit=1000)
        kinds = Counter(m["kind"] for m in log["marks"])
        assert kinds == {"baseline": 1, "user": (n_clients // 5) * rounds}, (root, kinds)
        seqs = [m["seq"] for m in log["marks"]]
        assert len(set(seqs)) == len(seqs)
    for k, r, content, m in results:
        root = roots[k % 5]
        assert m["workspace"] == str(root)
        got = c.call("cat", at=m["id"], path=f"c{k}.txt".encode(), workspace=b(root))
        assert base64.b64decode(got["data_b64"]).decode() == content, (k, r)
        got = c.call("cat", at=m["id"], path=f"c{k}-r{r}.txt".encode(), workspace=b(root))
        assert base64.b64decode(got["data_b64"]).decode() == content, (k, r)
    for root in roots:
        assert no_cookies(root) == []


# -- 6. protocol errors over the real socket ------------------------------------------------------


def _error(reply: dict[str, Any], code: str) -> dict[str, Any]:
    assert reply["ok"] is False, reply
    assert reply["version"] == 1
    assert reply["error"]["code"] == code, reply
    assert reply["error"]["message"], reply
    err: dict[str, Any] = reply["error"]
    return err


@pytest.mark.timeout(60)
def test_a_newer_clients_op_or_argument_is_refused_by_name_and_the_daemon_keeps_serving(
    daemon: Daemon, ws: Path
) -> None:
    """docs/protocol.md, "Versions and additions": within a version the protocol only grows, so
    a client newer than the daemon may send an op or an argument the daemon lacks. It gets a
    bad_request naming it and saying what to do — never a silently ignored argument — and the
    daemon serves the next request; `ping` lists each op with its arguments beforehand."""
    ops = daemon.call("ping")["ops"]
    assert ops["mark"] == sorted(protocol.OP_ARGS["mark"]) and set(ops) == protocol.OPS, ops
    ep = daemon.endpoint
    err = _error(raw_json(ep, request("frobnicate", {"cwd": str(ws)})), "bad_request")
    assert err["details"] == {"op": "frobnicate"} and "restart the daemon" in err["message"], err
    newer = request("mark", {"label": "x", "cwd": str(ws), "someday": True})
    err = _error(raw_json(ep, newer), "bad_request")
    assert err["details"] == {"arg": "someday"} and "accepted: agent, cwd," in err["message"], err
    assert "restart the daemon" in err["message"], err
    assert daemon.ctl_json("log", cwd=ws)["marks"][0]["label"] != "x"  # refused whole: no mark
    reply = raw_json(ep, request("mark", {"label": "x", "cwd": str(ws)}))
    assert reply["ok"] is True and reply["result"]["label"] == "x", reply


@pytest.mark.timeout(90)
def test_protocol_error_paths_keep_the_daemon_serving(daemon: Daemon, ws: Path, tmp_path: Path) -> None:
    ep = daemon.endpoint
    c = daemon.client()
    c.call("mark", label="one", workspace=b(ws))

    def bad(payload: bytes, code: str, *, rid: str | None = "keep") -> dict[str, Any]:
        reply = raw_json(ep, payload)
        err = _error(reply, code)
        if rid == "keep":
            try:
                sent = json.loads(payload)
            except ValueError:
                sent = None
            if isinstance(sent, dict) and isinstance(sent.get("id"), str):
                assert reply["id"] == sent["id"], reply
        ping(daemon)
        return err

    assert bad(b"{not json", "bad_request")["message"]
    assert raw_json(ep, b"{not json")["id"] is None
    bad(b"\xff\xfe", "bad_request")
    bad(b"[1, 2, 3]", "bad_request")
    bad(b'"just a string"', "bad_request")
    bad(json.dumps({"id": "x1", "version": 1}).encode(), "bad_request")  # missing op
    err = bad(request("frobnicate"), "bad_request")
    assert "frobnicate" in err["message"]
    bad(request("mark", {"label": 5, "workspace": str(ws)}), "bad_request")  # wrong type
    bad(request("log", {"limit": True, "workspace": str(ws)}), "bad_request")  # bool is no int
    bad(request("show", {"workspace": str(ws)}), "bad_request")  # missing required
    bad(request("ping", {"bogus": 1}), "bad_request")  # unknown argument
    bad(request("ping", extra_field=1), "bad_request")
    bad(request("cat", {"path": "", "workspace": str(ws)}), "bad_request")
    bad(request("cat", {"path": {"b64": "!!"}, "workspace": str(ws)}), "bad_request")
    bad(b'{"op": "ping", "op": "ping", "id": "d", "version": 1}', "bad_request")  # duplicate key
    err = bad(request("ping", version=2), "protocol_mismatch")
    assert "restart" in err["message"] or "upgrade" in err["message"], err
    err = bad(request("frobnicate", version=99), "protocol_mismatch")  # version checked first
    bad(request("ping", version="1"), "bad_request")

    # Frame layouts: a REQ-style delimiter is fine, two JSON frames are not.
    frames = raw_call(ep, [b"", request("ping")])
    assert frames is not None and frames[0] == b"" and json.loads(frames[-1])["ok"] is True
    frames = raw_call(ep, [request("ping"), request("ping")])
    assert frames is not None, "no reply to a two-frame request"
    _error(json.loads(frames[-1]), "bad_request")
    ping(daemon)

    # Oversized: dropped by ZeroMQ without a reply; the daemon keeps serving.
    big = request("mark", {"label": "big", "message": "x" * (2 << 20), "workspace": str(ws)})
    assert raw_call(ep, [big], timeout=1.5) is None
    ping(daemon)
    assert [m["label"] for m in c.call("log", workspace=b(ws))["marks"]][0] == "one"

    # Mark references.
    bad(request("show", {"mark": "no-such-label", "workspace": str(ws)}), "not_found")
    bad(request("show", {"mark": "1zzzzzzzzz", "workspace": str(ws)}), "not_found")
    bad(request("show", {"mark": "1zz", "workspace": str(ws)}), "usage")  # prefix too short
    bad(request("pin", {"mark": "no-such-label", "workspace": str(ws)}), "not_found")
    bad(request("mark", {"label": "has space", "workspace": str(ws)}), "usage")
    bad(request("mark", {"label": "42", "workspace": str(ws)}), "usage")

    # cat outside the workspace.
    bad(request("cat", {"path": "/etc/passwd", "workspace": str(ws)}), "usage")
    bad(request("cat", {"path": "../outside.txt", "workspace": str(ws)}), "usage")
    bad(request("cat", {"path": "nope.txt", "workspace": str(ws)}), "not_found")

    # Refused workspaces.
    real_home = Path(pwd.getpwuid(os.getuid()).pw_dir).resolve()
    (ws / "sub").mkdir()
    (ws / "file.txt").write_text("x")
    refused = {
        "/": "/",
        "home": str(real_home),
        "snapd home": str(daemon.snapd_home),
        "inside snapd home": str(daemon.snapd_home / "store"),
        "holds snapd home": str(tmp_path),
        "inside a workspace": str(ws / "sub"),
        "holds a workspace": str(tmp_path / "proj"),
        "a file": str(ws / "file.txt"),
    }
    for why, path in refused.items():
        err = bad(request("watch", {"path": path}), "workspace_refused")
        assert err["message"], why
    # A path that does not exist is not_found, as docs/protocol.md lists (issue 14, point 11).
    err = bad(request("watch", {"path": str(tmp_path / "does-not-exist")}), "not_found")
    assert "does not exist" in err["message"]
    # The overlapping root was not registered as a side effect.
    roots = [w["root"] for w in daemon.call("status")["workspaces"]]
    assert roots == [str(ws)], roots
    # Other ops still work on the real workspace.
    assert c.call("mark", label="after-errors", workspace=b(ws))["label"] == "after-errors"


@pytest.mark.timeout(30)
def test_watch_of_home_from_environment_refused(daemon: Daemon) -> None:
    """$HOME as the daemon's environment has it is the user's home (config.py reads HOME first)."""
    env_home = Path(daemon.env["HOME"]).resolve()
    reply = raw_json(daemon.endpoint, request("watch", {"path": str(env_home)}))
    _error(reply, "workspace_refused")
    ping(daemon)
    cp = daemon.ctl("watch", env_home, check=False)
    assert cp.returncode == 7 and b"home" in cp.stderr, describe(cp)


@pytest.mark.timeout(60)
def test_refusals_through_the_cli(daemon: Daemon, ws: Path) -> None:
    cp = daemon.ctl("watch", "/", check=False)
    assert cp.returncode == 7, describe(cp)
    assert b"/" in cp.stderr and b"refus" in cp.stderr, describe(cp)
    cp = daemon.ctl("show", "nothing-like-this", cwd=ws, check=False)
    assert cp.returncode == 6 and b"nothing-like-this" in cp.stderr, describe(cp)
    cp = daemon.ctl("show", "nothing-like-this", "--json", cwd=ws, check=False)
    assert cp.returncode == 6, describe(cp)
    assert json.loads(cp.stdout)["error"]["code"] == "not_found"
    cp = daemon.ctl("cat", "baseline", "/etc/passwd", cwd=ws, check=False)
    assert cp.returncode == 2 and b"outside" in cp.stderr, describe(cp)
    ping(daemon)


@pytest.mark.timeout(60)
def test_ambiguous_mark_prefix(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two marks whose ids share a prefix (planted in the store while the daemon is down)."""
    root = tmp_path / "proj" / "ws"
    root.mkdir(parents=True)
    root = root.resolve()
    (root / "a.txt").write_text("a\n")
    d = start_daemon(tmp_path / "snapd-home")
    try:
        d.ctl("watch", root)
    finally:
        assert d.stop() == 0
    from snapd.config import load_config
    from snapd.store import batch as batch_mod
    from snapd.store import store as store_mod

    ids = iter(["7abcd00001", "7abcd00002"])
    monkeypatch.setattr(batch_mod, "new_mark_id", lambda: next(ids))
    store = store_mod.Store.open(load_config(d.env).locations.store_dir)
    try:
        (w,) = store.workspaces()
        head = store.head(w.id)
        assert head is not None
        with store.batch() as batch:
            batch.add_mark(w.id, "planted-1", head)
            batch.add_mark(w.id, "planted-2", head)
            batch.commit()
    finally:
        store.close()
    monkeypatch.undo()

    d = start_daemon(tmp_path / "snapd-home")
    try:
        reply = raw_json(d.endpoint, request("show", {"mark": "7abc", "workspace": str(root)}))
        err = _error(reply, "ambiguous")
        assert "7abcd00001" in err["message"] and "7abcd00002" in err["message"], err
        ping(d)
        cp = d.ctl("show", "7abcd", cwd=root, check=False)
        assert cp.returncode == 6 and b"ambiguous" in cp.stderr, describe(cp)
        assert d.ctl_json("show", "7abcd00002", cwd=root)["label"] == "planted-2"
        ping(d)
    finally:
        assert d.stop() == 0


# -- 7. no daemon ---------------------------------------------------------------------------------


@pytest.mark.timeout(60)
def test_client_without_daemon_fails_fast_and_clearly(tmp_path: Path) -> None:
    env = base_env(tmp_path / "snapd-home")
    work = tmp_path / "work"
    work.mkdir()
    for args in (("status",), ("mark", "m"), ("log",), ("stop",)):
        cp = run_ctl(env, *args, cwd=work, timeout=30)
        assert cp.returncode == 3, describe(cp)
        assert b"no snapd daemon" in cp.stderr and b"snapd start" in cp.stderr, describe(cp)
    cp = run_ctl(env, "status", "--json", cwd=work, timeout=30)
    assert cp.returncode == 3
    assert json.loads(cp.stdout)["error"]["code"] == "daemon_unavailable"

    # A stale socket and endpoint file after kill -9: still "no daemon", and a new start works.
    d = start_daemon(tmp_path / "snapd-home")
    d.proc.kill()
    d.proc.wait(10)
    cp = run_ctl(env, "status", cwd=work, timeout=30)
    assert cp.returncode == 3 and b"no snapd daemon" in cp.stderr, describe(cp)
    d2 = start_daemon(tmp_path / "snapd-home")
    try:
        ping(d2)
    finally:
        assert d2.stop() == 0


@pytest.mark.timeout(60)
def test_client_with_a_frozen_daemon_gives_up_at_its_deadline(daemon: Daemon, ws: Path) -> None:
    os.kill(daemon.pid, signal.SIGSTOP)
    try:
        cp = daemon.ctl("--timeout", "2", "status", check=False, timeout=20)
        assert cp.returncode in (3, 9), describe(cp)
        assert cp.stderr.startswith(b"snapctl: "), describe(cp)
        cp = daemon.ctl("--timeout", "2", "mark", "frozen", cwd=ws, check=False, timeout=20)
        assert cp.returncode in (3, 9), describe(cp)
    finally:
        os.kill(daemon.pid, signal.SIGCONT)
    ping(daemon)


# -- 8. one daemon per SNAPD_HOME -----------------------------------------------------------------


@pytest.mark.timeout(60)
def test_second_start_refused_first_keeps_serving(daemon: Daemon, ws: Path) -> None:
    cp = subprocess.run(
        [sys.executable, "-m", "snapd", "start"], env=daemon.env, capture_output=True, timeout=30, cwd=ws
    )
    assert cp.returncode == 4, describe(cp)
    assert b"already running" in cp.stderr, describe(cp)
    ping(daemon)
    st = daemon.ctl_json("status")  # through the endpoint file, which the second must not touch
    assert st["pid"] == daemon.pid
    (ws / "after.txt").write_text("still captured\n")
    m = daemon.ctl_json("mark", "after-second-start", cwd=ws)
    assert daemon.ctl("cat", m["id"], "after.txt", cwd=ws).stdout == b"still captured\n"


# -- 9. stopping --------------------------------------------------------------------------------


@pytest.mark.timeout(60)
def test_sigterm_exits_zero_and_restart_resumes(tmp_path: Path) -> None:
    root = tmp_path / "proj" / "ws"
    root.mkdir(parents=True)
    root = root.resolve()
    d = start_daemon(tmp_path / "snapd-home")
    try:
        d.ctl("watch", root)
        (root / "a.txt").write_text("one\n")
        d.ctl("mark", "first", cwd=root)
        d.proc.send_signal(signal.SIGTERM)
        assert d.wait_exit(10) == 0, d.log()[-4000:]
        assert "daemon.stopped" in d.log()
    finally:
        d.stop()
    # Changes made while no daemon runs are found at the next start.
    (root / "a.txt").write_text("two\n")
    (root / "b.txt").write_text("new\n")
    d = start_daemon(tmp_path / "snapd-home")
    try:
        m = d.ctl_json("mark", "second", cwd=root)
        assert m["summary"]["counts"] == {"added": 1, "modified": 1}, m["summary"]
        assert d.ctl("cat", "second", "a.txt", cwd=root).stdout == b"two\n"
        assert d.ctl("cat", "first", "a.txt", cwd=root).stdout == b"one\n"
        d.proc.send_signal(signal.SIGINT)
        assert d.wait_exit(10) == 0, d.log()[-4000:]
    finally:
        d.stop()


@pytest.mark.timeout(60)
def test_python_m_snapd_stop(tmp_path: Path) -> None:
    d = start_daemon(tmp_path / "snapd-home")
    try:
        cp = run_ctl(d.env, "stop", timeout=20)
        assert cp.returncode == 0, describe(cp)
        assert f"pid {d.pid}".encode() in cp.stdout
        assert d.wait_exit(10) == 0, d.log()[-4000:]
        cp = run_ctl(d.env, "status", timeout=20)
        assert cp.returncode == 3 and b"no snapd daemon" in cp.stderr, describe(cp)
    finally:
        d.stop()


# -- 10. marks from unwatched directories, git ----------------------------------------------------


@pytest.mark.timeout(60)
def test_mark_registers_git_top_and_respects_git(daemon: Daemon, tmp_path: Path) -> None:
    repo = tmp_path / "proj" / "repo"
    (repo / "src" / "deep").mkdir(parents=True)
    repo = repo.resolve()
    git(repo, "init", "-q")
    (repo / ".gitignore").write_text("*.log\nbuild/\n")
    (repo / "tracked.log").write_text("tracked despite *.log\n")
    (repo / "other.log").write_text("ignored\n")
    (repo / "src" / "a.py").write_text("print('a')\n")
    (repo / "build").mkdir()
    (repo / "build" / "out.o").write_bytes(b"\0obj")
    (repo / "vendor" / "lib").mkdir(parents=True)
    (repo / "vendor" / "lib" / ".git").write_text("gitdir: ../../.git/modules/lib\n")  # submodule
    (repo / "vendor" / "lib" / "x.c").write_text("int x;\n")
    (repo / "vendor" / ".hg").mkdir()
    (repo / "vendor" / ".hg" / "store").write_text("hg\n")
    git(repo, "add", ".gitignore", "src/a.py", "vendor/lib/x.c")
    git(repo, "add", "-f", "tracked.log")
    git(repo, "commit", "-q", "-m", "one")
    head1 = git(repo, "rev-parse", "HEAD")

    m = daemon.ctl_json("mark", "from-subdir", cwd=repo / "src" / "deep")
    assert m["workspace"] == str(repo)
    assert m["git_head"] == head1
    st = daemon.call("status")
    assert [w["root"] for w in st["workspaces"]] == [str(repo)]
    baseline = daemon.ctl_json("show", "baseline", cwd=repo)
    captured = set(change_map(baseline))
    assert {b".gitignore", b"tracked.log", b"src/a.py", b"vendor/lib/x.c"} <= captured, captured
    leaked = [
        p
        for p in captured
        if p == b".git"
        or p.startswith(b".git/")
        or b"/.git" in p
        or b".hg" in p
        or p in (b"other.log", b"build/out.o", b"build")
    ]
    assert leaked == [], leaked
    assert daemon.ctl("cat", "from-subdir", "tracked.log", cwd=repo).stdout == b"tracked despite *.log\n"
    for path in ("other.log", ".git/HEAD", "build/out.o", "vendor/lib/.git", "vendor/.hg/store"):
        cp = daemon.ctl("cat", "from-subdir", path, cwd=repo, check=False)
        assert cp.returncode == 6, (path, describe(cp))

    # A commit rewrites .git; an ignored file appears; a tracked one changes: the mark shows
    # exactly the captured changes and the new HEAD.
    (repo / "src" / "a.py").write_text("print('b')\n")
    git(repo, "commit", "-q", "-am", "two")
    head2 = git(repo, "rev-parse", "HEAD")
    (repo / "more.log").write_text("ignored too\n")
    (repo / "tracked.log").write_text("changed\n")
    m2 = daemon.ctl_json("mark", "after-commit", cwd=repo / "src")
    assert m2["git_head"] == head2 != head1
    assert change_map(daemon.ctl_json("show", m2["id"], cwd=repo)) == {
        b"src/a.py": "modified",
        b"tracked.log": "modified",
    }

    # Outside any repo: the current directory becomes the workspace.
    plain = (tmp_path / "plain").resolve()
    plain.mkdir()
    (plain / "p.txt").write_text("p\n")
    m3 = daemon.ctl_json("mark", "plain-first", cwd=plain)
    assert m3["workspace"] == str(plain) and m3["git_head"] is None
    assert daemon.ctl("cat", "plain-first", "p.txt", cwd=plain).stdout == b"p\n"
    assert no_cookies(repo) == [] and no_cookies(plain) == []


# -- 11. cookies, moves out of the workspace -------------------------------------------------------


@pytest.mark.timeout(60)
def test_no_cookies_left_and_moves_out_are_deletions(daemon: Daemon, ws: Path, tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    c = daemon.client()
    (ws / "keep.txt").write_text("keep\n")
    (ws / "leaving.txt").write_text("bye\n")
    (ws / "dir").mkdir()
    (ws / "dir" / "inner.txt").write_text("inner\n")
    first = c.call("mark", label="first", workspace=b(ws))
    for i in range(30):
        c.call("mark", label=f"empty-{i}", workspace=b(ws))
        assert no_cookies(ws) == [], i
    shutil.move(str(ws / "leaving.txt"), str(outside / "leaving.txt"))
    cp = daemon.ctl("--timeout", "10", "mark", "moved-out", "--json", cwd=ws, timeout=20)
    moved = json.loads(cp.stdout)
    assert change_map(c.call("show", mark=moved["id"], workspace=b(ws))) == {b"leaving.txt": "removed"}
    os.rename(ws / "dir", outside / "dir")
    m = c.call("mark", label="dir-out", workspace=b(ws))
    assert change_map(c.call("show", mark=m["id"], workspace=b(ws))) == {
        b"dir": "removed",
        b"dir/inner.txt": "removed",
    }
    os.rename(outside / "dir", ws / "back")
    m = c.call("mark", label="dir-in", workspace=b(ws))
    changes = change_map(c.call("show", mark=m["id"], workspace=b(ws)))
    assert changes == {b"back": "added", b"back/inner.txt": "added"}, changes
    got = c.call("cat", at=m["id"], path=b"back/inner.txt", workspace=b(ws))
    assert base64.b64decode(got["data_b64"]) == b"inner\n"
    # No mark ever captured a cookie.
    for mark in c.call("log", workspace=b(ws), limit=1000)["marks"]:
        names = change_map(c.call("show", mark=mark["id"], workspace=b(ws)))
        assert not [n for n in names if n.split(b"/")[-1].startswith(b".snapd-")], names
    assert first["id"] and no_cookies(ws) == []


# -- 12. the rest of the CLI ----------------------------------------------------------------------


@pytest.mark.timeout(60)
def test_cli_log_pin_verify_gc_status(daemon: Daemon, ws: Path) -> None:
    for i in range(3):
        (ws / f"f{i}.txt").write_text(f"{i}\n")
        daemon.ctl("mark", f"step-{i}", "--agent", "tester", "--session", "s1", cwd=ws)
    lines = daemon.ctl("log", "-n", "2", cwd=ws).stdout.decode().splitlines()
    assert len(lines) == 2 and "step-2" in lines[0] and "step-1" in lines[1], lines
    log = daemon.ctl_json("log", "-n", "10", cwd=ws)
    assert [m["label"] for m in log["marks"]] == ["step-2", "step-1", "step-0", "baseline"]
    assert daemon.ctl_json("log", "--agent", "tester", cwd=ws)["marks"][0]["agent"] == "tester"

    assert daemon.ctl_json("pin", "step-1", cwd=ws)["pinned"] is True
    assert "[pinned]" in daemon.ctl("log", cwd=ws).stdout.decode()
    assert daemon.ctl_json("show", "step-1", cwd=ws)["pinned"] is True
    out = daemon.ctl("unpin", "step-1", cwd=ws).stdout.decode()
    assert "unpinned" in out
    assert daemon.ctl_json("show", "step-1", cwd=ws)["pinned"] is False

    assert daemon.ctl_json("verify")["clean"] is True
    daemon.ctl("verify", "--sample")
    daemon.ctl("gc")
    assert "would_evict" in daemon.ctl_json("gc", "--dry-run")
    gc = daemon.ctl_json("gc")
    assert gc["evicted"] == [] and gc["warnings"] == [], gc

    st = daemon.ctl_json("status")
    assert st["pid"] == daemon.pid
    assert st["endpoint"] == daemon.endpoint
    (w,) = st["workspaces"]
    assert w["root"] == str(ws) and w["watching"] is True
    assert w["files"] == 3, w
    human = daemon.ctl("status").stdout.decode()
    assert str(ws) in human and f"pid {daemon.pid}" in human

    # unwatch keeps history; forget removes it.
    daemon.ctl("unwatch", ws)
    assert daemon.ctl_json("log", cwd=ws)["marks"][0]["label"] == "step-2"
    assert daemon.ctl_json("forget", "--yes", ws)["forgotten_marks"] == 4  # no terminal: --yes
    cp = daemon.ctl("log", cwd=ws, check=False)
    assert cp.returncode == 6, describe(cp)
    with pytest.raises(NotFound):
        daemon.client().call("show", mark="step-2", workspace=b(ws))
