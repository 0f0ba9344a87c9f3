"""Push and restore against a real S3 server (``rclone serve s3`` on 127.0.0.1, the fixture of
tests/remote_server.py), as a library: a real daemon's marks (rules and ignored names
included) round trip to a second repository object, an incremental push costs three
requests, a push whose server is killed resumes without sending again what landed, two stores
push to one prefix at once, nothing readable reaches the bucket, and a tampered pack is
refused by path.

The daemon's commands over the same code: tests/test_remote_e2e.py (part D)."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from e2e_helpers import snapshot, start_daemon, write
from remote_helpers import (
    CANARY,
    PASSWORD,
    Recording,
    baseline,
    build_tree,
    new_repo,
    restore,
    same_tree,
    ten_file_mark,
)
from remote_server import S3Server

from snapd.config import load_config
from snapd.errors import RemoteCorrupt, RemoteError, RemoteFull
from snapd.remote.backend import Backend, open_backend
from snapd.remote.packs import pack_name
from snapd.remote.push import push
from snapd.remote.repo import Repository
from snapd.remote.spec import RetryPolicy
from snapd.store import trees
from snapd.store.store import Store

pytestmark = [pytest.mark.remote, pytest.mark.timeout(240)]

QUICK = RetryPolicy(retries=2, timeout_s=3.0, backoff_s=0.05, connect_timeout_s=1.0, request_timeout_s=20.0)


def s3(server: S3Server, prefix: str = "repo") -> Backend:
    return open_backend(server.spec("snapd", prefix), server.credentials, QUICK)


def daemon_marks(tmp_path: Path, ws: Path) -> Path:
    """Watch ``ws`` with a real daemon, take a mark after a change, stop it; its store dir."""
    d = start_daemon(tmp_path / "snapd-home")
    try:
        d.ctl_json("watch", ws)
        write(ws / "after-baseline.txt", "written while watched\n")
        d.ctl_json("mark", "turn-1", cwd=ws)
    finally:
        assert d.stop() == 0, d.log()[-3000:]
    return load_config(d.env).locations.store_dir


def test_a_daemons_marks_round_trip_through_s3_exactly(tmp_path: Path, s3_server: S3Server) -> None:
    ws = (tmp_path / "ws").resolve()
    build_tree(ws, files=80)
    write(ws / ".gitignore", "build/\n*.log\n")
    write(ws / "build/out.o", "ignored\n")
    write(ws / "run.log", "ignored too\n")
    ws.chmod(0o751)
    store_dir = daemon_marks(tmp_path, ws)
    ignored = ("build", "run.log")
    expected = {p: e for p, e in snapshot(ws, with_root=True).items() if not p.startswith(ignored)}
    with Store.open(store_dir) as store:
        marks = sorted(store.marks(), key=lambda m: m.seq)
        assert [m.label for m in marks] == ["baseline", "turn-1"]
        assert marks[-1].rules and marks[-1].ignored and marks[-1].root_mode == 0o751
        repo = new_repo(s3(s3_server), tmp_path / "cache")
        result = push(store, repo, [(m, os.fsencode(ws)) for m in marks], "host-a")
    assert result.marks == 2 and result.landed == tuple(m.id for m in marks)
    elsewhere = Repository.open(s3(s3_server), PASSWORD, tmp_path / "elsewhere")
    record = elsewhere.find("turn-1")
    assert (record.host, record.workspace, record.mark.label) == ("host-a", os.fsencode(ws), "turn-1")
    assert elsewhere.get(record.mark.rules or "") and elsewhere.get(record.mark.ignored or "")
    restored = restore(elsewhere, "turn-1", tmp_path / "out")
    assert restored.ok
    same_tree(tmp_path / "out", expected, with_root=True)
    # Nothing readable reached the bucket: contents, names, labels, paths
    for path in s3_server.folder.rglob("*"):
        assert CANARY not in os.fsencode(path.name)
        if path.is_file():
            data = path.read_bytes()
            for plain in (CANARY, b"secret.txt", b"turn-1", os.fsencode(ws)):
                assert plain not in data, (path, plain)


def test_an_incremental_push_of_ten_files_costs_three_requests(tmp_path: Path, s3_server: S3Server) -> None:
    ws = tmp_path / "ws"
    build_tree(ws)
    backend = s3(s3_server)
    repo = new_repo(backend, tmp_path / "cache")
    with Store.open(tmp_path / "store") as store:
        first = baseline(store, ws)
        push(store, repo, [(first, os.fsencode(ws))], "h")
        second = ten_file_mark(store, ws)
        before = backend.requests
        result = push(store, repo, [(first, os.fsencode(ws)), (second, os.fsencode(ws))], "h")
    assert backend.requests - before <= 3, result
    assert restore(Repository.open(s3(s3_server), PASSWORD, tmp_path / "c2"), "ten", tmp_path / "out").ok
    same_tree(tmp_path / "out", ws)


def test_a_push_whose_server_dies_resumes_without_resending(tmp_path: Path, s3_server: S3Server) -> None:
    ws = tmp_path / "ws"
    build_tree(ws, files=60, big=3 << 20)
    new_repo(s3(s3_server), tmp_path / "cache")
    cut = Recording(s3(s3_server))

    def kill_after_six(name: str) -> None:
        if name.startswith("data/") and sum(n.startswith("data/") for n in cut.puts) == 6:
            s3_server.kill()

    cut.after_put = kill_after_six
    with Store.open(tmp_path / "store") as store:
        mark = baseline(store, ws)
        with pytest.raises(RemoteError):
            push(store, Repository.open(cut, PASSWORD, tmp_path / "cache"), [(mark, os.fsencode(ws))], "h",
                 pack_target=128 << 10)  # fmt: skip
        landed = {n for n in cut.puts if n.startswith("data/")}
        assert len(landed) >= 6 and not any(n.startswith(("index/", "marks/")) for n in cut.puts)
        s3_server.start()
        # Nothing half-written is read: no mark, no object of the packs that landed
        reader = Repository.open(s3(s3_server), PASSWORD, tmp_path / "reader")
        assert reader.marks() == [] and reader.index_files() == {}
        again = Recording(s3(s3_server))
        resumed = Repository.open(again, PASSWORD, tmp_path / "cache")
        result = push(store, resumed, [(mark, os.fsencode(ws))], "h", pack_target=128 << 10)
    assert result.resumed == len(landed)
    resent = landed & set(again.puts)
    assert not resent, f"{len(resent)} of {len(landed)} landed packs were sent again"
    assert restore(Repository.open(s3(s3_server), PASSWORD, tmp_path / "c3"), mark.id, tmp_path / "out").ok
    same_tree(tmp_path / "out", ws)


def test_two_stores_push_to_one_prefix_at_once_and_both_restore(tmp_path: Path, s3_server: S3Server) -> None:
    new_repo(s3(s3_server), tmp_path / "init-cache")
    trees_: dict[str, Path] = {}
    results: dict[str, object] = {}
    spans: dict[str, tuple[float, float]] = {}
    go = threading.Barrier(2)

    def one(name: str) -> None:
        ws = tmp_path / f"ws-{name}"
        build_tree(ws, files=150, big=1 << 20)
        (ws / "whose.txt").write_text(name)
        trees_[name] = ws
        repo = Repository.open(s3(s3_server), PASSWORD, tmp_path / f"cache-{name}")
        with Store.open(tmp_path / f"store-{name}") as store:
            mark = baseline(store, ws)
            go.wait(30)
            try:
                pairs = [(mark, os.fsencode(ws))]
                began = time.monotonic()
                results[name] = push(store, repo, pairs, f"host-{name}", pack_target=128 << 10)
                spans[name] = (began, time.monotonic())
            except BaseException as exc:  # reported by the main thread
                results[name] = exc

    threads = [threading.Thread(target=one, args=(n,)) for n in ("a", "b")]
    for t in threads:
        t.start()
    for t in threads:
        t.join(180)
    for name in ("a", "b"):
        assert not isinstance(results.get(name), BaseException), results.get(name)
    assert max(b for b, _ in spans.values()) < min(e for _, e in spans.values()), "not at once"
    reader = Repository.open(s3(s3_server), PASSWORD, tmp_path / "reader")
    assert {r.host for r in reader.marks()} == {"host-a", "host-b"}
    for name, ws in trees_.items():
        out = tmp_path / f"out-{name}"
        assert restore(reader, "baseline", out, host=f"host-{name}").ok
        same_tree(out, ws)


def test_a_tampered_pack_is_refused_naming_the_path(tmp_path: Path, s3_server: S3Server) -> None:
    ws = tmp_path / "ws"
    build_tree(ws, files=30)
    repo = new_repo(s3(s3_server), tmp_path / "cache")
    with Store.open(tmp_path / "store") as store:
        mark = baseline(store, ws)
        push(store, repo, [(mark, os.fsencode(ws))], "h")
        entry = trees.lookup(store.load_node, mark.tree, b"src/d3/f012.txt")
    assert entry is not None
    where = repo.locate(entry.key)
    pack = s3_server.folder / "snapd" / "repo" / pack_name(where.key)
    data = bytearray(pack.read_bytes())
    data[where.offset + where.length - 3] ^= 0x01
    pack.write_bytes(bytes(data))
    reader = Repository.open(s3(s3_server), PASSWORD, tmp_path / "c2")
    with pytest.raises(RemoteCorrupt, match="src/d3/f012.txt") as caught:
        restore(reader, mark.id, tmp_path / "out")
    assert caught.value.details["paths"] == ["src/d3/f012.txt"]


def test_a_full_server_disk_stops_the_push_and_the_next_push_finishes_it(
    tmp_path: Path, s3_servers: Callable[..., S3Server]
) -> None:
    server = s3_servers(tmpfs=6 << 20)
    ws = tmp_path / "ws"
    build_tree(ws, files=40, big=3 << 20)
    new_repo(s3(server), tmp_path / "cache")
    filler = server.folder / "filler"
    filler.write_bytes(b"\0" * (4 << 20))  # about 2 MiB left: not enough for the 3 MiB of blobs
    with Store.open(tmp_path / "store") as store:
        mark = baseline(store, ws)
        with pytest.raises(RemoteFull, match="s3://snapd/repo"):
            push(store, Repository.open(s3(server), PASSWORD, tmp_path / "cache"), [(mark, os.fsencode(ws))],
                 "h", pack_target=256 << 10)  # fmt: skip
        assert Repository.open(s3(server), PASSWORD, tmp_path / "reader").marks() == []
        filler.unlink()
        again = Recording(s3(server))
        result = push(store, Repository.open(again, PASSWORD, tmp_path / "cache"), [(mark, os.fsencode(ws))],
                      "h", pack_target=256 << 10)  # fmt: skip
        assert result.marks == 1 and result.resumed > 0
        assert store.mark(mark.id) == mark
    assert restore(Repository.open(s3(server), PASSWORD, tmp_path / "c2"), mark.id, tmp_path / "out").ok
    same_tree(tmp_path / "out", ws)
