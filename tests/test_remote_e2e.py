"""History that outlives the machine (issue 32), end to end: real daemons (each its own
``SNAPD_HOME``, a machine of its own), the real CLI, and a real S3 server (``rclone serve s3``,
tests/remote_server.py) whose folder the tests read and tamper with.

The daemons are started without any secret in their environment: the password
(``SNAPD_REMOTE_PASSWORD``) and the ``AWS_*`` credentials reach them only in the CLI's requests.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import secrets
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from e2e_helpers import Daemon, Pty, describe, run_ctl, snap_diff, snapshot, start_daemon, wait_for, write
from remote_server import MakeServer, S3Server

pytestmark = [pytest.mark.remote, pytest.mark.timeout(600)]

PASSWORD = "correct horse battery staple, remote"
BUCKET, PREFIX = "snapd", "repo"
URL = f"s3://{BUCKET}/{PREFIX}"
MiB = 1 << 20

Ran = tuple[int, Any, subprocess.CompletedProcess[bytes]]  # exit code, JSON, the process


class Machines:
    """``machines(name, server)``: a daemon of its own SNAPD_HOME (another machine, as far as
    snapd can tell), whose CLI environment carries ``password`` and the server's credentials."""

    def __init__(self, top: Path) -> None:
        self.top = top
        self.started: list[Daemon] = []

    def __call__(self, name: str, server: S3Server, password: str = PASSWORD) -> Daemon:
        home = self.top / name / "snapd-home"
        home.parent.mkdir()
        d = start_daemon(home)
        self.started.append(d)
        d.env = {**d.env, "SNAPD_REMOTE_PASSWORD": password, **server.credentials}
        return d

    def killed_and_started_again(self, d: Daemon) -> Daemon:
        """SIGKILL ``d`` (a sandbox killed) unless it is dead already, then a daemon on the same
        SNAPD_HOME."""
        d.proc.kill()
        d.proc.wait(10)
        self.started.remove(d)
        again = start_daemon(d.snapd_home)
        self.started.append(again)
        again.env = d.env
        return again



@pytest.fixture
def machines(tmp_path: Path) -> Iterator[Machines]:
    made = Machines(tmp_path)
    try:
        yield made
    finally:
        codes = [d.stop() for d in made.started]
        assert codes == [0] * len(codes), codes


def add_remote(d: Daemon, server: S3Server, name: str = "backup") -> dict[str, Any]:
    server.spec(BUCKET, PREFIX)  # the bucket, a folder of the server's
    out: dict[str, Any] = d.ctl_json("remote", "add", name, URL, "--endpoint", server.endpoint)
    return out


def ctl(d: Daemon, *args: Any, timeout: float = 300.0) -> Ran:
    """``snapctl ARGS --json`` as ``d``'s user: (exit code, its JSON, the process)."""
    cp = run_ctl(d.env, *args, "--json", timeout=timeout)
    try:
        return cp.returncode, json.loads(cp.stdout), cp
    except json.JSONDecodeError:
        raise AssertionError(describe(cp) + "\n--- daemon log ---\n" + d.log()[-4000:]) from None


def push(d: Daemon, *args: str) -> dict[str, Any]:
    code, out, cp = ctl(d, "push", *args)
    assert code == 0, describe(cp) + d.log()[-3000:]
    return dict(out)


def remote_log(d: Daemon, *args: str) -> list[dict[str, Any]]:
    code, out, cp = ctl(d, "remote", "log", "backup", *args)
    assert code == 0, describe(cp)
    return list(out["marks"])


def restore_from(d: Daemon, ref: str, dest: Path, *args: str) -> Ran:
    dest.parent.mkdir(parents=True, exist_ok=True)
    return ctl(d, "restore", ref, "--target", dest, "--from", "backup", *args)


def watched(d: Daemon, root: Path) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    root = root.resolve()
    d.ctl_json("watch", root)
    return root


def mark(d: Daemon, ws: Path, label: str, *extra: str) -> str:
    return str(d.ctl_json("mark", label, *extra, cwd=ws)["id"])


def repo_dir(server: S3Server) -> Path:
    return server.folder / BUCKET / PREFIX


def objects(server: S3Server) -> dict[str, bytes]:
    """Every object of the repository on the server's disk: name → bytes."""
    root = repo_dir(server)
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def packs(server: S3Server) -> dict[str, bytes]:
    return {name: data for name, data in objects(server).items() if name.startswith("data/")}


def whole(name: str, data: bytes) -> bool:
    """A pack fully written: its name is the SHA-256 of its bytes."""
    return hashlib.sha256(data).hexdigest() == name.rsplit("/", 1)[-1]


def random_file(path: Path, size: int, seed: int) -> None:
    write(path, hashlib.shake_256(seed.to_bytes(8, "little")).digest(size), 0o644)


# == (1) round trip =================================================================================


def tricky_tree(root: Path) -> None:
    """Every kind snapd keeps, with modes, and names that are not plain ASCII."""
    write(root / "src/app.py", "print('hello')\n")
    write(root / "bin/run.sh", "#!/bin/sh\necho run\n", 0o755)
    write(root / "secret.key", os.urandom(64), 0o600)
    write(root / "read-only.txt", "do not touch\n", 0o444)
    write(root / "empty-file", b"")
    random_file(root / "data/big.bin", 3 * MiB + 17, seed=1)
    write(root / "naïve ☃.txt", "unicode name\n")
    write(Path(os.fsdecode(bytes(root) + b"/caf\xe9.txt")), b"a name that is not UTF-8\n")
    (root / "empty-dir").mkdir()
    (root / "empty-dir").chmod(0o700)
    (root / "deep/er/est").mkdir(parents=True)
    (root / "private").mkdir()
    write(root / "private/notes.md", "# notes\n", 0o640)
    (root / "private").chmod(0o750)
    os.symlink("src/app.py", root / "link-to-file")
    os.symlink("nowhere/at/all", root / "dangling")
    os.symlink("src", root / "link-to-dir")
    os.symlink("/etc/hostname", root / "absolute-link")


def test_a_mark_pushed_here_is_restored_exactly_on_a_machine_with_no_history(
    s3_server: S3Server, machines: Machines, tmp_path: Path
) -> None:
    a = machines("a", s3_server)
    ws = watched(a, tmp_path / "work" / "proj")
    tricky_tree(ws)
    m1 = mark(a, ws, "m1")
    want_m1 = snapshot(ws)
    (ws / "src/app.py").write_text("print('changed')\n")
    (ws / "dangling").unlink()
    (ws / "empty-dir").rmdir()
    write(ws / "new/file.txt", "new\n")
    m2 = mark(a, ws, "m2")
    want_m2 = snapshot(ws)

    added = add_remote(a, s3_server)
    assert added["created"] is True, added
    pushed = push(a)
    assert pushed["marks"] >= 2 and pushed["objects"] > 0, pushed
    again = push(a)  # nothing new: nothing sent
    assert again["marks"] == 0 and again["objects"] == 0, again
    assert b"nothing to push" in a.ctl("push").stdout

    b = machines("b", s3_server)
    opened = add_remote(b, s3_server)
    assert opened["created"] is False and opened["repo_id"] == added["repo_id"], opened
    assert b.ctl_json("status")["workspaces"] == []  # no history of its own
    for ref, want in ((m1, want_m1), (m2, want_m2), ("m1", want_m1)):
        dest = tmp_path / "b-restores" / ref
        code, out, cp = restore_from(b, ref, dest)
        assert code == 0 and out["ok"], describe(cp) + b.log()[-3000:]
        got = snapshot(dest)
        assert got == want, f"restore of {ref}:\n{snap_diff(got, want)}"


# == (2) resume after the server's death ============================================================

PAYLOAD = 48 * MiB  # that does not compress: several packs, uploaded in parallel
#: How long the proxy holds each request: the time the test has to see the last pack land and
#: cut before the index the push sends next lands (reading and hashing 48 MiB on a busy machine)
HELD_S = 1.0


class Landed:
    """The whole packs on the server's disk that were not there before (hashed once each)."""

    def __init__(self, server: S3Server, before: set[str]) -> None:
        self.server, self.before = server, before
        self.seen: dict[tuple[str, int, int], bool] = {}

    def now(self) -> dict[str, int]:
        out = {}
        data = repo_dir(self.server) / "data"
        for path in data.rglob("*") if data.exists() else ():
            name = str(path.relative_to(repo_dir(self.server)))
            try:
                st = path.stat()
            except FileNotFoundError:
                continue
            if name in self.before or not path.is_file():
                continue
            key = (name, st.st_size, st.st_mtime_ns)
            if key not in self.seen:
                self.seen[key] = whole(name, path.read_bytes())
            if self.seen[key]:
                out[name] = st.st_size
        return out


@pytest.mark.parametrize("cut", ["a pack landed", "every pack landed"])
def test_a_push_cut_by_the_server_s_death_leaves_no_mark_and_resumes_without_resending(
    s3_servers: MakeServer, machines: Machines, tmp_path: Path, cut: str
) -> None:
    """The server is killed (SIGKILL) once the first of the push's packs is whole on its disk, or
    once all are (the index and the record not yet: each request is held HELD_S on its way)."""
    server = s3_servers(proxy=True)
    a = machines("a", server)
    ws = watched(a, tmp_path / "proj")
    write(ws / "first.txt", "first\n")
    m0 = mark(a, ws, "m0")
    add_remote(a, server)
    push(a)
    for i in range(8):
        random_file(ws / f"blob-{i}.bin", PAYLOAD // 8, seed=100 + i)
    m1 = mark(a, ws, "m1")
    want = snapshot(ws)
    landing = Landed(server, set(packs(server)))
    assert server.proxy is not None
    server.proxy.delay_s = HELD_S

    proc = subprocess.Popen([sys.executable, "-m", "snapd", "push", "--json"], env=a.env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        def ready() -> bool:
            assert proc.poll() is None, f"the push ended before the cut ({cut}): {proc.communicate()}"
            sizes = landing.now()
            return bool(sizes) if cut == "a pack landed" else sum(sizes.values()) >= PAYLOAD
        wait_for(ready, 120, interval=0.005, what=f"the push's packs land ({cut})")
        server.kill()
        out, err = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode != 0, (out, err)
    error = json.loads(out)["error"]
    assert error["code"].startswith("remote"), error
    server.proxy.delay_s = 0.0
    server.restart()
    landed = {n: (repo_dir(server) / n).read_bytes() for n in landing.now()}

    # Nothing half-written is read as a mark: m0 is listed, m1 is not and cannot be restored.
    b = machines("b", server)
    add_remote(b, server)
    listed = {m["id"] for m in remote_log(b)}
    assert m0 in listed and m1 not in listed, listed
    code, refused, cp = restore_from(b, m1, tmp_path / "too-early")
    assert code != 0 and refused["error"]["code"] == "not_found", describe(cp)

    resumed = push(a)
    assert resumed["marks"] == 1, resumed
    for name, data in landed.items():  # never rewritten, never deleted
        assert (repo_dir(server) / name).read_bytes() == data, name
    sent_again = sum(landing.now().values()) - sum(map(len, landed.values()))
    if cut == "every pack landed":  # acknowledged, journaled: indexed, not one sent again
        assert resumed["packs"] == 0 and resumed["bytes"] == 0 and sent_again == 0, resumed
        assert resumed["resumed"] == len(landed), resumed
    else:  # what landed is sent again only if its answer was lost in the cut: one pack at most
        total = sum(landing.now().values())
        most = PAYLOAD * 1.02 + max(map(len, landed.values()))
        assert total <= most, f"{total} bytes of packs for {PAYLOAD}: what landed was sent again"
    assert m1 in {m["id"] for m in remote_log(b)}
    dest = tmp_path / "restored"
    code, out_, cp = restore_from(b, m1, dest)
    assert code == 0, describe(cp)
    assert snapshot(dest) == want, snap_diff(snapshot(dest), want)


def test_a_push_cut_by_the_daemon_s_death_resumes_from_its_journal_once_it_is_started_again(
    s3_servers: MakeServer, machines: Machines, tmp_path: Path
) -> None:
    """A sandbox killed mid-push: once every pack is whole on the server (its index and record
    not yet sent: each request is held HELD_S), the network goes (the server is killed, so no
    held request lands later) and the daemon gets SIGKILL. Started again on the same
    SNAPD_HOME, its push indexes what landed from the journal and sends none of it again."""
    server = s3_servers(proxy=True)
    a = machines("a", server)
    ws = watched(a, tmp_path / "proj")
    for i in range(8):
        random_file(ws / f"blob-{i}.bin", PAYLOAD // 8, seed=300 + i)
    m1 = mark(a, ws, "m1")
    want = snapshot(ws)
    add_remote(a, server)
    landing = Landed(server, set())
    assert server.proxy is not None
    server.proxy.delay_s = HELD_S
    proc = subprocess.Popen([sys.executable, "-m", "snapd", "push", "--json"], env=a.env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        def every_pack_landed() -> bool:
            assert proc.poll() is None, f"the push ended before the cut: {proc.communicate()}"
            return sum(landing.now().values()) >= PAYLOAD
        wait_for(every_pack_landed, 120, interval=0.005, what="the push's packs land")
        server.kill()  # first: the requests the proxy holds must not land after the daemon's death
        a.proc.kill()
        out, err = proc.communicate(timeout=60)  # the client sees its daemon gone
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 3 and json.loads(out)["error"]["code"] == "daemon_unavailable", (out, err)
    time.sleep(HELD_S + 0.5)  # what the proxy still held meets the dead server, not the next one
    server.restart()
    a = machines.killed_and_started_again(a)
    server.proxy.delay_s = 0.0
    landed = {n: (repo_dir(server) / n).read_bytes() for n in landing.now()}
    assert m1 not in {m["id"] for m in remote_log(a)}

    resumed = push(a)
    assert resumed["marks"] >= 1 and resumed["packs"] == 0 and resumed["bytes"] == 0, resumed
    assert resumed["resumed"] == len(landed), resumed
    assert {n: (repo_dir(server) / n).read_bytes() for n in landing.now()} == landed
    b = machines("b", server)
    add_remote(b, server)
    code, out_, cp = restore_from(b, m1, tmp_path / "restored")
    assert code == 0, describe(cp)
    assert snapshot(tmp_path / "restored") == want


# == (3) no plaintext on the server =================================================================


def test_the_bucket_holds_no_content_name_label_or_message_in_clear(
    s3_server: S3Server, machines: Machines, tmp_path: Path
) -> None:
    tag = secrets.token_hex(6)
    canaries = {
        "content": f"canary-content-{tag}", "file name": f"canary-name-{tag}",
        "label": f"canary-label-{tag}", "message": f"canary-message-{tag}",
        "workspace": f"canary-ws-{tag}", "agent": f"canary-agent-{tag}", "session": f"canary-session-{tag}",
    }
    a = machines("a", s3_server)
    ws = watched(a, tmp_path / canaries["workspace"])
    write(ws / f"{canaries['file name']}.txt", canaries["content"] * 3 + "\n")
    write(ws / "dir" / canaries["file name"] / "x", "x")
    mark(a, ws, canaries["label"], "-m", canaries["message"], "--agent", canaries["agent"],
         "--session", canaries["session"])
    add_remote(a, s3_server)
    push(a)
    stored = objects(s3_server)
    assert any(n.startswith("marks/") for n in stored) and any(n.startswith("data/") for n in stored), stored
    for what, canary in canaries.items():
        needle = canary.encode()
        assert not [n for n in stored if canary in n], f"the {what} is in an object's name"
        found = [n for n, data in stored.items() if needle in data]
        assert not found, f"the {what} is in clear in {found}"
    # and it is all there: restored with the password
    b = machines("b", s3_server)
    add_remote(b, s3_server)
    code, out, cp = restore_from(b, canaries["label"], tmp_path / "back")
    assert code == 0, describe(cp)
    assert snapshot(tmp_path / "back") == snapshot(ws)


# == (4) tampering refused by path ==================================================================


def test_a_flipped_byte_in_a_pack_is_refused_by_path_and_nothing_else_is_lost(
    s3_server: S3Server, machines: Machines, tmp_path: Path
) -> None:
    a = machines("a", s3_server)
    ws = watched(a, tmp_path / "proj")
    write(ws / "keep/a.txt", "a\n")
    write(ws / "keep/b.txt", "b\n", 0o600)
    os.symlink("keep/a.txt", ws / "link")
    random_file(ws / "victim.bin", 17 * MiB, seed=7)  # over a pack's target size: a pack of its own
    m1 = mark(a, ws, "m1")
    want = snapshot(ws)
    add_remote(a, s3_server)
    push(a)

    name, data = max(packs(s3_server).items(), key=lambda kv: len(kv[1]))
    assert len(data) > 16 * MiB, "the 17 MiB file's pack"
    flipped = bytearray(data)
    flipped[len(data) // 2] ^= 0x01
    (repo_dir(s3_server) / name).write_bytes(bytes(flipped))

    b = machines("b", s3_server)
    add_remote(b, s3_server)
    dest = tmp_path / "restored"
    code, out, cp = restore_from(b, m1, dest)
    assert code != 0, describe(cp)
    said = json.dumps(out)
    assert "victim.bin" in said, describe(cp)
    human = run_ctl(b.env, "restore", m1, "--target", tmp_path / "restored-2", "--from", "backup",
                    timeout=300)
    assert human.returncode != 0 and b"victim.bin" in human.stdout + human.stderr, describe(human)
    got = snapshot(dest)
    rest = {p: e for p, e in want.items() if p != "victim.bin"}
    assert {p: e for p, e in got.items() if p != "victim.bin"} == rest, snap_diff(got, want)
    assert "victim.bin" not in got, "a file whose bytes failed authentication was written"

    code, verified, cp = ctl(b, "verify", "--remote", "backup")
    assert code != 0 and verified["ok"] is False, describe(cp)
    said = json.dumps(verified["problems"])
    assert "victim.bin" in said and name.rsplit("/", 1)[-1] in said, verified

    # nothing lost here either: the local store is not the remote
    code, local, cp = ctl(a, "restore", m1, "--target", tmp_path / "local", "-w", ws)
    assert code == 0, describe(cp)
    assert snapshot(tmp_path / "local") == want


# == (5) two writers at once ========================================================================


def test_two_stores_pushing_to_one_prefix_at_once_both_land_completely(
    s3_servers: MakeServer, machines: Machines, tmp_path: Path
) -> None:
    """Started together, each push held 0.2 s a request: the two run at the same time (each
    takes longer than the moment between their starts), and share one object (common.bin)."""
    s3_server = s3_servers(proxy=True)
    shared = hashlib.shake_256(b"shared").digest(2 * MiB)
    sides: dict[str, tuple[Daemon, Path, str, dict[str, Any]]] = {}
    for i, name in enumerate(("a", "b")):
        d = machines(name, s3_server)
        ws = watched(d, tmp_path / name / "proj")
        write(ws / "common.bin", shared)
        for j in range(4):
            random_file(ws / f"own-{j}.bin", 4 * MiB, seed=1000 * (i + 1) + j)
        write(ws / f"{name}.txt", f"{name}\n")
        m = mark(d, ws, "turn-end")  # one label on both: told apart by id or workspace
        sides[name] = (d, ws, m, snapshot(ws))
    add_remote(sides["a"][0], s3_server)
    assert add_remote(sides["b"][0], s3_server)["created"] is False

    assert s3_server.proxy is not None
    s3_server.proxy.delay_s = 0.2
    started = time.monotonic()
    procs = [subprocess.Popen([sys.executable, "-m", "snapd", "push", "--json"], env=d.env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE) for d, *_ in sides.values()]
    launched = time.monotonic() - started
    results = [p.communicate(timeout=300) for p in procs]
    took = time.monotonic() - started
    for p, (out, err) in zip(procs, results, strict=True):
        assert p.returncode == 0, (out, err)
        assert json.loads(out)["marks"] == 2, out  # each its baseline and its mark
    assert took > 3 * launched and took > 1.0, (launched, took)  # they overlapped
    s3_server.proxy.delay_s = 0.0

    c = machines("c", s3_server)
    add_remote(c, s3_server)
    listed = remote_log(c)
    stores = {m["store"] for m in listed}
    assert len(stores) == 2 and {m["host"] for m in listed} == {socket.gethostname()}, listed
    for name, (_, ws, m, want) in sides.items():
        assert {x["workspace"] for x in listed if x["id"] == m} == {str(ws)}, listed
        dest = tmp_path / "c" / f"restored-{name}"
        code, out, cp = restore_from(c, m, dest)
        assert code == 0, describe(cp)
        assert snapshot(dest) == want, snap_diff(snapshot(dest), want)
    code, verified, cp = ctl(c, "verify", "--remote", "backup")
    assert code == 0 and verified["ok"], describe(cp)
    # a label that marks of two stores' workspaces carry is refused, naming both (id, host,
    # workspace) and how to say which: nothing is written; -w names a workspace as its machine had it
    _, ws_b, m_b, _ = sides["b"]
    _, ws_a, m_a, want_a = sides["a"]
    code, out, cp = restore_from(c, "turn-end", tmp_path / "c" / "newest")
    assert code == 6 and out["error"]["code"] == "ambiguous", describe(cp)
    assert sorted(out["error"]["details"]["candidates"]) == sorted([m_a, m_b]), out
    for text in (m_a, m_b, str(ws_a), str(ws_b), "-w", "--host"):
        assert text in out["error"]["message"], (text, out)
    assert not (tmp_path / "c" / "newest").exists() or not any((tmp_path / "c" / "newest").iterdir())
    human = run_ctl(c.env, "restore", "turn-end", "--target", tmp_path / "c" / "newest", "--from", "backup")
    assert human.returncode == 6 and os.fsencode(ws_a) in human.stderr and b"Traceback" not in human.stderr, \
        describe(human)
    code, out, cp = restore_from(c, "turn-end", tmp_path / "c" / "a-by-label", "-w", str(ws_a))
    assert code == 0 and out["mark"]["id"] == m_a, describe(cp)
    assert snapshot(tmp_path / "c" / "a-by-label") == want_a


# == (6) a wrong password ===========================================================================


def test_a_wrong_password_is_a_clear_error_and_writes_nothing(
    s3_server: S3Server, machines: Machines, tmp_path: Path
) -> None:
    a = machines("a", s3_server)
    ws = watched(a, tmp_path / "proj")
    write(ws / "f.txt", "f\n")
    mark(a, ws, "m1")
    add_remote(a, s3_server)
    push(a)
    before = objects(s3_server)

    b = machines("b", s3_server, password="not the password")
    code, out, cp = ctl(b, "remote", "add", "backup", URL, "--endpoint", s3_server.endpoint)
    assert code == 5 and out["error"]["code"] == "wrong_password", describe(cp)
    human = run_ctl(b.env, "remote", "add", "backup", URL, "--endpoint", s3_server.endpoint)
    assert human.returncode == 5 and b"password" in human.stderr and b"Traceback" not in human.stderr, \
        describe(human)
    assert b.ctl_json("remote", "list")["remotes"] == []  # not added

    write(ws / "g.txt", "g\n")
    mark(a, ws, "m2")
    a.env["SNAPD_REMOTE_PASSWORD"] = "not the password either"
    code, out, cp = ctl(a, "push")
    assert code == 5 and out["error"]["code"] == "wrong_password", describe(cp)
    assert objects(s3_server) == before  # nothing written, nothing changed
    assert a.answers()


def test_a_missing_bucket_is_named_with_its_endpoint_at_add_push_and_log(
    s3_server: S3Server, machines: Machines, tmp_path: Path
) -> None:
    a = machines("a", s3_server)
    ws = watched(a, tmp_path / "proj")
    write(ws / "f.txt", "f\n")
    mark(a, ws, "m1")

    def refused(bucket: str, *args: str) -> None:
        code, out, cp = ctl(a, *args)
        assert code == 12 and out["error"]["code"] == "remote_missing", describe(cp)
        message = out["error"]["message"]
        for text in (f"bucket {bucket} does not exist", s3_server.endpoint, "create it first"):
            assert text in message, (text, message)
        assert "<Error>" not in message and "Generic S3 error" not in message, message
        human = run_ctl(a.env, *args)
        assert human.returncode == 12 and b"create it first" in human.stderr, describe(human)
        assert b"Traceback" not in human.stderr, describe(human)

    s3_server.spec(BUCKET, PREFIX)  # made before the server first lists its folder (it caches that)
    refused("absent", "remote", "add", "backup", "s3://absent/repo", "--endpoint", s3_server.endpoint)
    assert a.ctl_json("remote", "list")["remotes"] == []  # nothing recorded
    assert not (s3_server.folder / "absent").exists()  # nor made

    add_remote(a, s3_server)
    push(a)
    shutil.rmtree(s3_server.folder / BUCKET)  # removed later; a server started again knows it
    s3_server.restart()
    write(ws / "g.txt", "g\n")
    mark(a, ws, "m2")
    refused(BUCKET, "push")
    refused(BUCKET, "remote", "log", "backup")
    assert a.answers()


# == (7) remote log --json ==========================================================================


def test_remote_log_json_names_host_store_workspace_and_the_mark(
    s3_server: S3Server, machines: Machines, tmp_path: Path
) -> None:
    a = machines("a", s3_server)
    ws = watched(a, tmp_path / "proj")
    write(ws / "f.txt", "f\n")
    started = time.time()
    m1 = mark(a, ws, "turn-end", "-m", "a message", "--agent", "claude", "--session", "s-7")
    add_remote(a, s3_server)
    push(a)
    listed = remote_log(a)
    mine = [m for m in listed if m["id"] == m1]
    assert len(mine) == 1, listed
    m = mine[0]
    said = (m["label"], m["message"], m["agent"], m["session"])
    assert said == ("turn-end", "a message", "claude", "s-7"), m
    assert m["host"] == socket.gethostname() and m["workspace"] == str(ws), m
    assert isinstance(m["store"], str) and len(m["store"]) == 32, m
    assert started - 5 <= m["created"] <= time.time() + 5 and m["created"] <= m["pushed"], m
    assert {"kind", "seq", "objects", "bytes"} <= m.keys(), m
    assert listed == sorted(listed, key=lambda x: x["created"], reverse=True)
    assert remote_log(a, "--host", "no-such-host") == []
    assert {x["id"] for x in remote_log(a, "--host", socket.gethostname())} == {x["id"] for x in listed}
    assert {x["id"] for x in remote_log(a, "-w", str(ws))} == {x["id"] for x in listed}
    assert remote_log(a, "-w", str(tmp_path / "elsewhere")) == []
    human = run_ctl(a.env, "remote", "log", "backup")
    assert human.returncode == 0, describe(human)
    assert m1.encode() in human.stdout and b"turn-end" in human.stdout, describe(human)


# == (8) prune under a lock =========================================================================


def _backend(server: S3Server) -> Any:
    from snapd.remote.backend import open_backend

    return open_backend(server.spec(BUCKET, PREFIX), server.credentials)


def _plant_lock(server: S3Server, host: str, age_s: float) -> str:
    """A prune's lock object from another machine, ``age_s`` old, put through the server as
    prune puts one (a file dropped into the server's folder is not in its cached listings)."""
    from snapd.remote import crypto, keys

    backend = _backend(server)
    masters = [keys.open_key_file(backend.get(k.name), PASSWORD) for k in backend.list("keys/")]
    master = next(m for m in masters if m is not None)
    doc = {"host": host, "pid": 4242, "time": time.time_ns() - int(age_s * 1e9), "op": "prune"}
    name = f"locks/{secrets.token_hex(16)}"
    backend.put(name, crypto.seal(master, json.dumps(doc).encode(), b"lock"))
    return name


def test_prune_is_refused_while_another_holds_the_lock_then_prunes_and_keeps_what_it_keeps(
    s3_server: S3Server, machines: Machines, tmp_path: Path
) -> None:
    a = machines("a", s3_server)
    ws = watched(a, tmp_path / "proj")
    add_remote(a, s3_server)
    push(a)  # the baseline, with what every mark shares (its rule inputs): a pack no prune frees
    for i in range(3):  # a push each: each mark's own bytes in packs of their own
        random_file(ws / "payload.bin", 2 * MiB, seed=500 + i)
        last = mark(a, ws, f"m{i}")
        push(a)
    want = snapshot(ws)
    prune = ("remote", "prune", "backup", "--keep-last", "1", "--grace", "0", "--yes")

    lock = _plant_lock(s3_server, "elsewhere-host", age_s=60)
    before = objects(s3_server)
    code, out, cp = ctl(a, *prune)
    assert code == 12 and out["error"]["code"] == "remote_locked", describe(cp)
    assert "elsewhere-host" in out["error"]["message"], out
    assert objects(s3_server) == before  # nothing deleted
    assert len(remote_log(a)) >= 3

    _backend(s3_server).delete(lock)
    _plant_lock(s3_server, "long-dead-host", age_s=2 * 3600)  # stale: taken over
    code, out, cp = ctl(a, *prune)
    assert code == 0, describe(cp)
    assert any("shorter than the 24 h pushers count on" in w for w in out["warnings"]), out
    assert [m["id"] for m in remote_log(a)] == [last]
    assert not [n for n in objects(s3_server) if n.startswith("locks/")], "prune left a lock behind"
    code, out, cp = ctl(a, *prune)  # the grace is over: the doomed packs go
    assert code == 0, describe(cp)
    gone = sum(len(d) for d in before.values()) - sum(len(d) for d in objects(s3_server).values())
    assert gone >= 4 * MiB, f"only {gone} bytes freed of two dropped marks' 4 MiB"

    b = machines("b", s3_server)
    add_remote(b, s3_server)
    dest = tmp_path / "restored"
    code, out, cp = restore_from(b, last, dest)
    assert code == 0, describe(cp)
    assert snapshot(dest) == want
    code, verified, cp = ctl(b, "verify", "--remote", "backup")
    assert code == 0 and verified["ok"], describe(cp)


# == the README's walk-through ======================================================================


def test_the_readme_walk_through_runs_as_written(
    s3_server: S3Server, machines: Machines, tmp_path: Path
) -> None:
    """README.md's remote section, line by line, on two machines: MinIO's address and keys are
    this server's, its bucket is made, /tmp is this test's directory."""
    from test_readme_examples import TOP, code_block, commands

    here = machines("a", s3_server)
    there = machines("b", s3_server)
    for d in (here, there):
        for name in ("SNAPD_REMOTE_PASSWORD", *s3_server.credentials):
            d.env.pop(name)
    ws = watched(here, tmp_path / "myproject")
    write(ws / "src/app.py", "print('v1')\n")
    os.symlink("src/app.py", ws / "app")
    mark(here, ws, "turn-end")
    want = snapshot(ws)
    s3_server.spec("bucket", "snapd")
    (tmp_path / "tmp").mkdir()
    d, ran, said = here, [], []
    for line in code_block(TOP / "README.md", "sh", "## History that outlives the machine").splitlines():
        if line.startswith("# on another machine"):
            d = there
        for argv in commands(line):
            if not argv:
                continue
            if argv[0] == "export":
                for pair in argv[1:]:
                    name, value = pair.split("=", 1)
                    value = s3_server.credentials.get(name, value)
                    here.env[name] = there.env[name] = value
                continue
            assert argv[0] == "snapctl", line
            args = [s3_server.endpoint if a == "http://127.0.0.1:9000" else
                    str(tmp_path / "tmp" / a[5:]) if a.startswith("/tmp/") else a for a in argv[1:]]
            cp = d.ctl(*args, cwd=ws, check=False, timeout=300)
            assert cp.returncode == 0, f"{line}\n{describe(cp)}\n{d.log()[-3000:]}"
            ran.append(args[0])
            said.append(cp.stdout + cp.stderr)
    assert ran.count("remote") == 3 and "restore" in ran and "verify" in ran, ran
    assert b"created a new" in said[0] and b"unrecoverable" in said[0], said[0]  # remote add, here
    assert b"pushed 2 marks" in said[1], said[1]  # the baseline and turn-end
    opened = said[ran.index("restore") - 1]  # remote add, there
    assert b"opened the repository" in opened and b"unrecoverable" not in opened, opened
    assert snapshot(tmp_path / "tmp" / "myproject") == want


# == the password's sources =========================================================================


def test_a_password_file_is_read_less_its_line_end_and_refused_when_others_may_read_it(
    s3_server: S3Server, machines: Machines, tmp_path: Path
) -> None:
    a = machines("a", s3_server)
    assert add_remote(a, s3_server)["created"] is True
    b = machines("b", s3_server)
    del b.env["SNAPD_REMOTE_PASSWORD"]
    pw = tmp_path / "pw"
    pw.write_text(PASSWORD + "\n")
    args = ("remote", "add", "backup", URL, "--endpoint", s3_server.endpoint, "--password-file", pw)
    pw.chmod(0o644)
    code, out, cp = ctl(b, *args)
    assert code == 2 and "chmod 600" in out["error"]["message"], describe(cp)
    assert b.ctl_json("remote", "list")["remotes"] == []  # refused before anything was sent
    pw.chmod(0o640)
    cp = run_ctl(b.env, *args, timeout=300)
    assert cp.returncode == 0 and b"warning" in cp.stderr and b"group" in cp.stderr, describe(cp)
    assert [r["name"] for r in b.ctl_json("remote", "list")["remotes"]] == ["backup"]


# == progress ========================================================================================


def test_push_draws_its_progress_bar_on_a_terminal_and_says_what_it_sent(
    s3_servers: MakeServer, machines: Machines, tmp_path: Path
) -> None:
    server = s3_servers(proxy=True)
    a = machines("a", server)
    ws = watched(a, tmp_path / "proj")
    for i in range(6):
        random_file(ws / f"f{i}.bin", 3 * MiB, seed=900 + i)
    mark(a, ws, "m")
    add_remote(a, server)
    assert server.proxy is not None
    server.proxy.delay_s = 0.4  # each request held: the bar is drawn before the push ends
    t = Pty(a.env, "push", "backup", cwd=ws)
    assert t.finish(300) == 0, t.out
    out = t.out.replace(b"\r\n", b"\n")
    bars = re.findall(rb"\] (\d+)/(\d+) objects", out)
    assert bars, out[-2000:]
    totals = {int(b) for _, b in bars}
    assert len(totals) == 1, bars
    n = totals.pop()
    assert f"{n}/{n} objects\n".encode() in out, out[-2000:]  # drawn finished
    said = rf"pushed 2 marks to backup: {n} new objects \(.+\) in \d+ packs?, \d+ requests".encode()
    assert re.search(said, out), out


# == a password change ===============================================================================


def test_a_changed_password_opens_the_repository_and_the_old_one_no_longer_does(
    s3_server: S3Server, machines: Machines, tmp_path: Path
) -> None:
    a = machines("a", s3_server)
    ws = watched(a, tmp_path / "proj")
    write(ws / "f.txt", "f\n")
    m = mark(a, ws, "m")
    add_remote(a, s3_server)
    push(a)
    new = tmp_path / "new-password"
    new.write_text("a brand new passphrase\n")
    new.chmod(0o600)
    cp = a.ctl("remote", "passwd", "backup", "--new-password-file", new)
    assert b"password is changed" in cp.stdout and b"unrecoverable" in cp.stdout, describe(cp)
    keys = [n for n in objects(s3_server) if n.startswith("keys/")]
    assert len(keys) == 1, keys  # the old key file is gone: the old password opens nothing

    old = machines("old", s3_server)
    code, out, cp = ctl(old, "remote", "add", "backup", URL, "--endpoint", s3_server.endpoint)
    assert code == 5 and out["error"]["code"] == "wrong_password", describe(cp)
    b = machines("b", s3_server, password="a brand new passphrase")
    add_remote(b, s3_server)
    code, out, cp = restore_from(b, m, tmp_path / "restored")
    assert code == 0 and snapshot(tmp_path / "restored") == snapshot(ws), describe(cp)
    cp = b.ctl("remote", "remove", "backup")
    assert b"left as it is" in cp.stdout, describe(cp)
    assert b.ctl_json("remote", "list")["remotes"] == []
    assert keys == [n for n in objects(s3_server) if n.startswith("keys/")]


# == a full server ===================================================================================


def test_a_full_server_disk_is_a_clear_error_and_the_marks_go_on(
    s3_servers: MakeServer, machines: Machines, tmp_path: Path
) -> None:
    """The server serves from an 8 MiB tmpfs; a push of 16 MiB fails saying the server is
    full, no record is written, and the daemon goes on marking and restoring locally."""
    server = s3_servers(tmpfs=8 * MiB)
    a = machines("a", server)
    ws = watched(a, tmp_path / "proj")
    for i in range(4):
        random_file(ws / f"f{i}.bin", 4 * MiB, seed=700 + i)
    m1 = mark(a, ws, "m1")
    want = snapshot(ws)
    add_remote(a, server)
    code, out, cp = ctl(a, "push")
    assert code == 12 and out["error"]["code"] == "remote_full", describe(cp)
    human = run_ctl(a.env, "push", timeout=300)
    assert human.returncode == 12 and b"full" in human.stderr, describe(human)
    assert not [n for n in objects(server) if n.startswith("marks/")]
    write(ws / "after.txt", "after\n")
    mark(a, ws, "m2")  # the mark path is not the push's
    code, out, cp = ctl(a, "restore", m1, "--target", tmp_path / "local", "-w", ws)
    assert code == 0 and snapshot(tmp_path / "local") == want, describe(cp)
    st = a.ctl_json("status")
    assert [r["name"] for r in st["remotes"]] == ["backup"] and st["remotes"][0]["last_error"], st["remotes"]
    shown = a.ctl("status").stdout
    assert b"remote backup" in shown and b"last error" in shown and b"full" in shown, shown


def test_restore_from_and_verify_remote_show_their_progress_on_a_terminal(
    s3_servers: MakeServer, machines: Machines, tmp_path: Path
) -> None:
    server = s3_servers(proxy=True)
    a = machines("a", server)
    ws = watched(a, tmp_path / "proj")
    for i in range(40):
        write(ws / f"d{i % 4}" / f"f{i}.txt", f"file {i}\n" * 50)
    m = mark(a, ws, "m")
    add_remote(a, server)
    push(a)
    assert server.proxy is not None
    server.proxy.delay_s = 0.5  # each request held: both run long enough for the bar's polls
    t = Pty(a.env, "restore", m, "--target", tmp_path / "restored", "--from", "backup", cwd=tmp_path)
    assert t.finish(300) == 0, t.out
    out = t.out.replace(b"\r\n", b"\n")
    assert re.search(rb"restore: [^\r\n]+\xe2\x80\xa6|\] \d+/40 files", out), out  # a phase or a count
    assert b"restored mark" in out and b"40 files" in out, out[-2000:]
    assert snapshot(tmp_path / "restored") == snapshot(ws)
    v = Pty(a.env, "verify", "--remote", "backup", cwd=tmp_path)
    assert v.finish(300) == 0, v.out
    assert re.search(rb"verify: [^\r\n]+\xe2\x80\xa6|\] \d+/\d+ packs?", v.out), v.out  # a phase or a count
    assert b"clean" in v.out, v.out


# == a wide directory, stored in parts (store format 10) ============================================


def test_a_wide_directory_is_pushed_in_parts_restored_verified_and_kept_by_prune(
    s3_server: S3Server, machines: Machines, tmp_path: Path
) -> None:
    """A directory of 1,500 names is stored as a fan of parts (snapd.store.fan): a push sends
    every part, the next push after one name changed sends only the parts that changed (not
    the directory again), a machine with no history restores both marks exactly, verify walks
    the parts, and prune keeps the parts of the mark it keeps."""
    a = machines("a", s3_server)
    ws = watched(a, tmp_path / "proj")
    for i in range(1500):
        write(ws / "icons" / f"Icon{i:04d}.js", f"export default {i};\n")
    m1 = mark(a, ws, "m1")
    want_m1 = snapshot(ws)
    add_remote(a, s3_server)
    first = push(a)
    write(ws / "icons" / "Icon0777.js", "export default 'changed';\n")
    m2 = mark(a, ws, "m2")
    want_m2 = snapshot(ws)
    second = push(a)
    # the root, the fan, one part, one content (two parts should the change fall on a boundary)
    assert second["marks"] == 1 and 4 <= second["objects"] <= 5, (first, second)

    b = machines("b", s3_server)
    add_remote(b, s3_server)
    for ref, want in ((m1, want_m1), (m2, want_m2)):
        code, out, cp = restore_from(b, ref, tmp_path / "b" / ref)
        assert code == 0 and out["ok"], describe(cp) + b.log()[-3000:]
        assert snapshot(tmp_path / "b" / ref) == want, snap_diff(snapshot(tmp_path / "b" / ref), want)
    code, verified, cp = ctl(b, "verify", "--remote", "backup")
    assert code == 0 and verified["ok"], describe(cp)

    prune = ("remote", "prune", "backup", "--keep-last", "1", "--grace", "0", "--yes")
    for _ in range(2):  # the second run deletes what the first doomed
        code, out, cp = ctl(a, *prune)
        assert code == 0, describe(cp)
    code, out, cp = restore_from(b, m2, tmp_path / "after-prune")
    assert code == 0 and out["ok"], describe(cp) + b.log()[-3000:]
    assert snapshot(tmp_path / "after-prune") == want_m2
    code, verified, cp = ctl(b, "verify", "--remote", "backup")
    assert code == 0 and verified["ok"], describe(cp)
