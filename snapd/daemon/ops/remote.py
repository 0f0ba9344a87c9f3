"""Ops on remote repositories (docs/remote.md, docs/protocol.md "Remote ops"): remote_add,
remote_list, remote_remove, remote_log, remote_prune, remote_passwd, push, remote_verify, and
the remote side of ``restore`` (:func:`restore_from_remote`).

Each takes the remote's ``name`` (push: optional, the only remote), and may carry the
repository ``password`` and the client's ``AWS_*`` ``credentials``
(:class:`snapd.daemon.remotes.Remotes` says what is used when they are absent). Neither is
logged nor written anywhere. ``snapd.remote`` is imported inside the ops, never at the
daemon's start. Push, verify and prune show their progress in ``status``'s ``running`` table
(op ``push``/``verify``/``prune``, target the remote's name).
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from snapd.daemon import heap
from snapd.daemon.pusher import Pusher
from snapd.daemon.registry import Registry
from snapd.daemon.remotes import Remotes
from snapd.daemon.wire import wire_paths
from snapd.errors import CorruptObject, MissingObject, RemoteCorrupt, RemoteMissing, UsageError
from snapd.paths import encode_path
from snapd.rollback import restore
from snapd.rollback.running import Running
from snapd.store.store import Store

if TYPE_CHECKING:
    from snapd.remote.records import MarkRecord


def _aws(credentials: Mapping[str, str] | None) -> dict[str, str]:
    """The request's ``AWS_*`` values; anything else a client sent is dropped."""
    return {k: v for k, v in (credentials or {}).items() if k.startswith("AWS_") and v}


def record_json(r: MarkRecord) -> dict[str, Any]:
    """A mark record on the wire: the mark as ``log`` shows one, with where it came from."""
    m = r.mark
    return {
        "id": m.id, "seq": m.seq, "label": m.label, "kind": m.kind, "message": m.message,
        "agent": m.agent, "session": m.session, "git_head": m.git_head,
        "created": m.created / 1e9, "created_ns": m.created, "summary": wire_paths(m.summary),
        "host": r.host, "store": r.store, "workspace": encode_path(r.workspace),
        "objects": r.objects, "bytes": r.bytes, "pushed": r.pushed / 1e9,
    }  # fmt: skip


class RemoteOps:
    def __init__(
        self, store: Store, registry: Registry, remotes: Remotes, pusher: Pusher, running: Running
    ) -> None:
        self.store, self.registry, self.remotes = store, registry, remotes
        self.pusher, self.running = pusher, running

    def op_remote_add(
        self,
        name: str,
        url: str,
        password: str | None = None,
        credentials: dict[str, str] | None = None,
        endpoint: str | None = None,
        region: str | None = None,
        profile: str | None = None,
        password_file: bytes | None = None,
        push: str | None = None,
    ) -> dict[str, Any]:
        """Open the repository at ``url`` (or make one on an empty prefix), then write the
        remote into config.toml. Refused, nothing written, on a wrong password."""
        given = {
            "url": url, "endpoint": endpoint, "region": region, "profile": profile,
            "password_file": os.fsdecode(password_file) if password_file is not None else None,
            "push": push,
        }  # fmt: skip
        fields = {k: v for k, v in given.items() if v is not None}
        repo, created = self.remotes.add(name, fields, password, _aws(credentials))
        if fields.get("push") == "on-mark":
            self.pusher.wake()
        out: dict[str, Any] = {
            "name": name, "url": url, "repo_id": repo.id, "created": created,
            "push": fields.get("push", "manual"), "config_file": str(self.remotes.config_file),
        }  # fmt: skip
        if created:
            out["warning"] = (
                f"a new repository was made at {url}: its password is not stored by snapd, and a lost "
                "password is an unrecoverable loss of everything in it"
            )
        remembered = "password_file" in fields or self.remotes.env_password
        if fields.get("push") == "on-mark" and not remembered:
            out["warnings"] = [
                f"remote {name} pushes on each mark with the password this command sent, which the daemon "
                "keeps in memory only: after a restart it needs password_file (--password-file) or "
                "SNAPD_REMOTE_PASSWORD in the daemon's environment"
            ]
        return out

    def op_remote_list(self) -> dict[str, Any]:
        return {"remotes": self.remotes.status(), "config_file": str(self.remotes.config_file)}

    def op_remote_remove(self, name: str) -> dict[str, Any]:
        """The remote's table goes from config.toml; the repository is left as it is."""
        url = self.remotes.table(name)["url"]
        self.remotes.remove(name)
        return {"name": name, "url": url, "removed": True, "config_file": str(self.remotes.config_file)}

    def op_remote_log(
        self,
        name: str,
        password: str | None = None,
        credentials: dict[str, str] | None = None,
        host: str | None = None,
        workspace: bytes | None = None,
    ) -> dict[str, Any]:
        """Every machine's marks in the repository, newest first (``host``, ``workspace``: only
        those; the workspace is the path as its host had it, not a local one)."""
        repo = self.remotes.repository(name, password, _aws(credentials))
        repo.refresh()
        found = [
            r for r in repo.marks()
            if (host is None or r.host == host) and (workspace is None or r.workspace == workspace)
        ]  # fmt: skip
        found.sort(key=lambda r: (r.mark.created, r.mark.seq), reverse=True)
        return {"name": name, "repo_id": repo.id, "marks": [record_json(r) for r in found]}

    def op_remote_prune(
        self,
        name: str,
        password: str | None = None,
        credentials: dict[str, str] | None = None,
        keep_last: int | None = None,
        keep_within_s: float | None = None,
        grace_s: float | None = None,
        dry_run: bool = False,
    ) -> dict[str, Any]:
        """The one op that deletes in a repository: under its lock (docs/remote.md, "Prune")."""
        from snapd.remote.prune import DEFAULT_GRACE_S, PrunePolicy, prune

        policy = PrunePolicy(keep_last, keep_within_s)
        grace = DEFAULT_GRACE_S if grace_s is None else grace_s
        repo = self.remotes.repository(name, password, _aws(credentials))
        with self.remotes.busy(name), self.remotes.working("prune", repo.backend.url, name) as tracker:
            tracker.phase("listing the repository")
            result = prune(repo, policy, grace, dry_run, tracker, host=self.remotes.host)
        warnings = []
        if grace < DEFAULT_GRACE_S:  # pushers list the repository again only past half the default
            warnings.append(
                f"a grace of {grace:g} s is shorter than the {DEFAULT_GRACE_S / 3600:g} h pushers count on: "
                "a push in flight from any machine may have counted on a pack this prune deletes; use a "
                "short grace only while nothing pushes to this repository (docs/remote.md, prune)"
            )
        return {"name": name, "repo_id": repo.id, **dataclasses.asdict(result), "warnings": warnings}

    def op_remote_passwd(
        self,
        name: str,
        new_password: str,
        password: str | None = None,
        credentials: dict[str, str] | None = None,
    ) -> dict[str, Any]:
        """A key file for ``new_password``, then the old one's deleted (docs/remote.md)."""
        if not new_password:
            raise UsageError("the new password is empty")
        old = self.remotes.change_password(name, password, new_password, _aws(credentials))
        out: dict[str, Any] = {"name": name, "changed": True, "warnings": []}
        password_file = self.remotes.table(name).get("password_file")
        if password_file is not None and old:
            out["warnings"].append(f"{password_file} (remote {name}'s password_file) still holds the old "
                                   "password: write the new one there")
        return out

    def op_push(
        self,
        name: str | None = None,
        workspace: bytes | None = None,
        cwd: bytes | None = None,
        password: str | None = None,
        credentials: dict[str, str] | None = None,
    ) -> dict[str, Any]:
        """Every mark the repository lacks: of one workspace (``workspace``/``cwd``), else of
        every workspace of the store."""
        name = name or self._only_remote()
        if workspace is not None or cwd is not None:
            ws_id, _ = self.registry.stored(workspace, cwd)
            spaces = [w for w in self.store.workspaces() if w.id == ws_id]
        else:
            spaces = self.store.workspaces()
        result = self.remotes.push(name, spaces, password, _aws(credentials))
        assert result is not None  # a waiting push always runs
        self.pusher.wake()  # marks taken while it ran, for an on-mark remote
        return {
            "name": name, "repo_id": self.remotes.repository(name).id, "marks": result.marks,
            "present": result.present, "objects": result.objects,
            "bytes": result.bytes, "packs": result.packs, "resumed": result.resumed,
            "requests": result.requests, "workspaces": [str(Path(os.fsdecode(w.root))) for w in spaces],
            "skipped": [
                {"mark": s.mark, "label": s.label, "workspace": encode_path(s.workspace), "reason": s.reason,
                 "problem": s.problem, "paths": list(s.paths)}
                for s in result.skipped
            ],
        }  # fmt: skip

    def _only_remote(self) -> str:
        names = self.remotes.names()
        if len(names) == 1:
            return names[0]
        if not names:
            raise UsageError("no remote to push to: add one first (`snapctl remote add NAME URL`)")
        raise UsageError(f"say which remote to push to: {', '.join(names)}")

    def op_remote_verify(
        self,
        name: str,
        password: str | None = None,
        credentials: dict[str, str] | None = None,
        sample: float | None = None,
    ) -> dict[str, Any]:
        """Read back and check everything (or a ``sample`` fraction of the packs)."""
        from snapd.remote.verify import verify

        if sample is not None and not 0 < sample <= 1:
            raise UsageError(f"a sample is a fraction in (0, 1], got {sample}")
        repo = self.remotes.repository(name, password, _aws(credentials))
        with self.remotes.working("verify", repo.backend.url, name) as tracker:
            tracker.phase("listing the repository")  # verify reads it all itself, damaged records too
            result = verify(repo, sample, tracker)
        problems = [
            {
                "problem": p.problem, "object": p.object, "message": p.describe(), "key": p.key,
                "refs": [
                    {"mark": r.mark, "host": r.host, "workspace": encode_path(r.workspace),
                     "path": encode_path(r.path)}
                    for r in p.refs
                ],
            }
            for p in result.problems
        ]  # fmt: skip
        return {
            "name": name, "repo_id": repo.id, "ok": result.ok, "packs": result.packs,
            "packs_read": result.packs_read, "blobs": result.blobs, "marks": result.marks,
            "nodes": result.nodes, "bytes_read": result.bytes_read, "sample": result.sample,
            "leftovers": result.leftovers, "problems": problems,
        }  # fmt: skip


def restore_from_remote(
    remotes: Remotes,
    running: Running,
    own_dirs: Iterable[Path],
    hasher: Any,
    *,
    name: str,
    ref: str,
    target: bytes,
    host: str | None,
    workspace: bytes | None,
    password: str | None,
    credentials: Mapping[str, str] | None,
) -> dict[str, Any]:
    """``restore --from NAME``: the mark ``ref`` names in the repository (of ``host``, of the
    ``workspace`` path it was pushed from, when given) written into ``target`` by the one
    writer, :func:`snapd.rollback.restore.write_tree`, from the remote's readers."""
    from snapd.remote.fetch import readers

    repo = remotes.repository(name, password, _aws(credentials))
    dest = Path(os.fsdecode(target))
    refused: dict[str, str] = {}  # content key -> why the remote's copy was refused

    def checked(key: str) -> bytes:
        """A content that fails its check is the writer's unreadable content, as a damaged
        local object is: its paths are listed as not restored, the rest is written."""
        try:
            return get(key)
        except (RemoteCorrupt, RemoteMissing) as exc:
            refused[key] = "corrupt" if isinstance(exc, RemoteCorrupt) else "missing"
            lost = CorruptObject if isinstance(exc, RemoteCorrupt) else MissingObject
            raise lost(exc.message, key=key) from exc

    with remotes.working("restore", repo.backend.url, dest) as tracker:
        tracker.phase("listing the repository")
        repo.refresh()
        record = repo.find(ref, host, workspace)
        tracker.phase("reading the mark's tree")
        load, get = readers(repo, record)
        with heap.paused():  # the plan and the fill; the listing and the readers' fetch run before
            done = restore.write_tree(
                dest, record.mark.tree, record.mark.root_mode, load, checked, hasher, own_dirs, tracker
            )

    def reason(why: str) -> str:
        for key, problem in refused.items():
            if f"(object {key})" in why:
                return f"its content (object {key}) is {problem} in remote {name}: refused, not written"
        return why

    reply: dict[str, Any] = {
        "workspace": os.fsdecode(record.workspace),
        "target": str(done.target),
        "made": done.made,
        "mark": record_json(record),
        "counts": done.counts,
        "written": done.counts["files"] + done.counts["symlinks"] + done.counts["dirs"],
        "not_restored": [{"path": encode_path(p), "reason": reason(why)} for p, why in done.not_restored],
        "conflicts": [{"path": encode_path(p), "reason": why} for p, why in done.conflicts],
        "ok": done.ok,
        "remote": name,
        "host": record.host,
    }
    out: dict[str, Any] = wire_paths(reply)
    return out

