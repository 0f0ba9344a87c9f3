"""Ops on files across marks: diff (two marks, or a mark and the workspace now), cat (a file's
bytes at a mark or time), history (a file's recorded changes).

A path recorded as not captured (over the size cap, a FIFO...) has no bytes to show or compare:
``cat`` says so and why, and ``diff`` lists the reason instead of a diff.
"""

from __future__ import annotations

import base64
from typing import Any

from snapd.config import Retention
from snapd.daemon import history as daemon_history
from snapd.daemon import textdiff
from snapd.daemon.registry import Registry, relative_path
from snapd.display import shown
from snapd.errors import CorruptObject, MissingObject, NotFound, UsageError
from snapd.paths import at_or_below, encode_path
from snapd.store import damage, history, treediff, trees
from snapd.store.store import Store


class FileOps:
    def __init__(self, store: Store, registry: Registry, policy: Retention) -> None:
        self.store, self.registry, self.policy = store, registry, policy

    def op_diff(
        self,
        workspace: bytes | None = None,
        cwd: bytes | None = None,
        paths: list[bytes] | None = None,
        stat: bool = False,
        session: str | None = None,
        **refs: str | None,
    ) -> dict[str, Any]:
        """``refs``: ``from`` (required) and ``to`` (default: the workspace now), which are
        Python keywords."""
        ws_id, root = self.registry.stored(workspace, cwd)
        frm, to = refs.get("from"), refs.get("to")
        if frm is None:
            raise UsageError("say which mark to diff from")
        old, old_at = history.resolve(self.store, ws_id, frm, session)
        new_at = None
        if to is None:  # the live workspace: capture it first
            ws, _ = self.registry.find(workspace, cwd)
            new_tree, new_name = ws.capture_to_now(), "the workspace now"
        else:
            new, new_at = history.resolve(self.store, ws_id, to, session)
            new_tree, new_name = new.tree, f"{new.id} ({new.label})"
        only = [relative_path(root, p, cwd) for p in paths or []]
        try:
            files = [
                self._file_diff(d, stat)
                for d in treediff.diff(self.store.load_node, old.tree, new_tree)
                if not only or any(at_or_below(d.path, p) for p in only)
            ]
        except (CorruptObject, MissingObject) as exc:
            read = {f"mark {old.id} ({old.label})": old.tree, new_name: new_tree}
            raise damage.explain(self.store, exc, read, "cannot diff") from exc
        out: dict[str, Any] = {
            "workspace": str(root),
            "from": {"id": old.id, "label": old.label},
            "to": new_name,
            "files": files,
        }
        for key, at in (("from_time", old_at), ("to_time", new_at)):
            if at is not None:
                out[key] = history.describe(at)
        return out

    def _file_diff(self, d: treediff.Difference, stat: bool) -> dict[str, Any]:
        """One changed path of a diff: status, modes, and the text diff (``stat``: line counts
        only) or why there are no bytes to compare."""
        record: dict[str, Any] = {"path": encode_path(d.path), "status": d.status}
        if d.old is not None:
            record["old_mode"] = d.old.mode
        if d.new is not None:
            record["new_mode"] = d.new.mode
        contents = [e for e in (d.old, d.new) if e is not None and e.kind != "dir"]
        if any(trees.is_uncaptured(e) for e in contents):  # no bytes to compare on that side
            record["not_captured"] = [trees.uncaptured_reason(e) for e in contents if trees.is_uncaptured(e)]
        elif contents and d.status != "mode":
            a = self.store.get(d.old.key) if d.old is not None and d.old.kind != "dir" else None
            b = self.store.get(d.new.key) if d.new is not None and d.new.kind != "dir" else None
            record.update(textdiff.file_diff(d.path, d.status, a, b))
            if stat:
                record.pop("diff", None)
        return record

    def op_cat(
        self,
        path: bytes,
        workspace: bytes | None = None,
        cwd: bytes | None = None,
        at: str | None = None,
        session: str | None = None,
    ) -> dict[str, Any]:
        ws_id, root = self.registry.stored(workspace, cwd)
        rel = relative_path(root, path, cwd, whole="`snapctl show MARK` lists what a mark changed")
        target, at_time = history.resolve(self.store, ws_id, at, session) if at else (None, None)
        tree = target.tree if target is not None else self.store.head(ws_id)
        try:
            return self._cat(rel, tree, at, at_time)
        except (CorruptObject, MissingObject) as exc:  # name the file, or the directory, it needs
            where = at or "the latest capture"
            doing = f"cannot read {shown(rel)} at {where}"
            raise damage.explain(self.store, exc, {where: tree}, doing) from exc

    def _cat(
        self, rel: bytes, tree: str | None, at: str | None, at_time: history.AtTime | None
    ) -> dict[str, Any]:
        """``rel``'s content in ``tree`` (the target named ``at``, or the latest capture)."""
        entry = trees.lookup(self.store.load_node, tree, rel) if tree else None
        if entry is not None and entry.kind == "dir":  # not_found, as it always was: no file there
            raise NotFound(
                f"{shown(rel)} is a directory at {at or 'the latest capture'}: cat shows a file's "
                f"content; name a file in it (`snapctl history {shown(rel)}` lists what changed in it)"
            )
        if entry is None:
            raise NotFound(f"{shown(rel)} is not a captured file at {at or 'the latest capture'}")
        if trees.is_uncaptured(entry):
            why = trees.uncaptured_reason(entry)
            where = at or "the latest capture"
            raise NotFound(f"{shown(rel)} was there at {where}, but not captured ({why})")
        data = self.store.get(entry.key)
        return {
            "kind": entry.kind,
            "mode": entry.mode,
            "size": len(data),
            "data_b64": base64.b64encode(data).decode(),
            **({"time": history.describe(at_time)} if at_time is not None else {}),
        }

    def op_history(
        self, path: bytes, workspace: bytes | None = None, cwd: bytes | None = None
    ) -> dict[str, Any]:
        ws_id, root = self.registry.stored(workspace, cwd)
        rel = relative_path(root, path, cwd, whole="`snapctl log` lists the workspace's marks")
        return daemon_history.history_reply(self.store, ws_id, str(root), rel, self.policy)
