"""Damage: which workspace paths and marks need an object the store cannot read.

A read that fails raises :class:`CorruptObject` or :class:`MissingObject` naming the object
whose bytes are bad or gone: a delta's base, when the damage is below it in its chain
(:mod:`snapd.store.deltas`). Nobody can act on a key; this module says what it means in
paths:

- :class:`Unreadable`: one content a path needs that could not be read, the link of its chain
  that is damaged, and the reason a rollback (or a restore) lists for the path.
- :func:`spread`: the objects whose reads fail because of damaged ones: themselves and every
  object stored as a delta through them, at any depth.
- :func:`locate`: every reference to such objects: paths in mark trees (with the marks), in
  the latest capture and in the versions between marks; an unreadable tree node names its
  directory, a mark's ignore-rule inputs the mark.
- :func:`explain`: the error of a failed read, raised again naming the paths under the trees
  a request was reading.

All of it runs on the error path only: :func:`spread` reads the delta links of the whole
catalog and :func:`locate` every distinct tree node of the history once; nothing here is on
the path of a read that succeeds.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping
from typing import Any, NamedTuple

from snapd.display import shown
from snapd.errors import CorruptObject, MissingObject, StoreError
from snapd.paths import encode_path
from snapd.store import fan, nodes, objects, trees
from snapd.store.store import Store

ReadError = CorruptObject | MissingObject
EXAMPLES = 10  # paths a message names (the reply's details list them all)


class Unreadable(NamedTuple):
    """A content ``key`` that could not be read because object ``damaged`` (``key`` itself,
    or a link of its delta chain) is ``problem``: ``corrupt`` or ``missing``."""

    key: str
    damaged: str
    problem: str
    what: str = "its stored content"  # what the content is to the path

    @classmethod
    def of(cls, exc: ReadError) -> Unreadable:
        """From the error of a read (``Store.get`` names both objects)."""
        damaged = str(exc.details.get("key") or "?")
        problem = "missing" if isinstance(exc, MissingObject) else "corrupt"
        return cls(str(exc.details.get("object") or damaged), damaged, problem)

    @property
    def reason(self) -> str:
        state = "corrupt in the store" if self.problem == "corrupt" else "missing from the store"
        if self.damaged == self.key:
            return f"{self.what} (object {self.key}) is {state}"
        through = f"is read through its delta base {self.damaged}"
        return f"{self.what} (object {self.key}) {through}, which is {state}"

    def to_wire(self, path: bytes) -> dict[str, Any]:
        return {
            "path": encode_path(path),
            "reason": self.reason,
            "object": self.key,
            "damaged": self.damaged,
            "problem": self.problem,
        }


def spread(store: Store, damaged: Iterable[str]) -> dict[str, str]:
    """Each object whose read fails because of a ``damaged`` one (itself included, and every
    object stored as a delta through it) -> that damaged object. One pass over the catalog's
    delta links (keys compared as stored: no conversion per row)."""
    cause = {objects.db_key(k): k for k in damaged}
    children: dict[bytes | str, list[bytes | str]] = {}
    for key, base in store.catalog.read().execute("SELECT key, base FROM objects WHERE base IS NOT NULL"):
        children.setdefault(base, []).append(key)
    out: dict[bytes | str, str] = dict(cause)
    frontier = list(cause)
    while frontier:
        k = frontier.pop()
        for child in children.get(k, ()):
            if child not in out:
                out[child] = out[k]
                frontier.append(child)
    return {objects.py_key(k): v for k, v in out.items()}


Found = list[tuple[bytes, str, str]]
"""(path below a node, key, kind) of each reference found under it: a file's or symlink's
content, or a directory (``dir``) whose node cannot be read."""


def finder(store: Store, bad: Collection[str]) -> Callable[[str], Found]:
    """The references to ``bad`` keys under a tree node (memoized: a node shared by many
    trees is read once); a node that cannot be read is a reference at its own path. A node's
    keys are read straight out of its encoding (:func:`nodes.node_keys`); only a node with a
    reference below it is decoded, for its names."""
    memo: dict[str, Found] = {}
    bad_db = {objects.db_key(k) for k in bad}

    def node_of(key: str) -> trees.Node | None:
        """Node ``key`` — None when nothing below it is bad, so its names are not needed."""
        cached = store.cached_node(key)  # not cached from here: the walk would evict what marks use
        if isinstance(cached, fan.FanNode):  # a wide directory: a bad part makes it unreadable
            return _whole(key, cached.parts, cached)
        if cached is not None:
            return cached
        data = store.get(key)
        if fan.is_fan(data):  # read whole (its parts read and verified)
            return _whole(key, [part.key for part in fan.decode(data)], None) or store.decode_node(data)[0]
        contents, dirs = nodes.node_keys(data)
        if not bad_db.intersection(contents) and not any(under(objects.py_key(d)) for d in dirs):
            return None
        return nodes.decode_node(data)

    def _whole(key: str, parts: Iterable[str], node: trees.Node | None) -> trees.Node | None:
        """``node`` (a wide directory's, or None: read it), unless one of its ``parts`` is bad: then
        the directory is unreadable, at its own path (a part is no entry a walk meets)."""
        if any(part in bad for part in parts):
            raise CorruptObject(f"tree node {key} has a part that cannot be read")
        return node

    def under(key: str) -> Found:
        found = memo.get(key)
        if found is not None:
            return found
        node: trees.Node | None = None
        unreadable = key in bad
        if not unreadable:
            try:
                node = node_of(key)
            except (CorruptObject, MissingObject):
                unreadable = True
        found = [(b"", key, "dir")] if unreadable else []
        for name, e in (node or {}).items():
            if e.kind == "dir":
                found += [(name + b"/" + p if p else name, k, kind) for p, k, kind in under(e.key)]
            elif e.key in bad:
                found.append((name, e.key, e.kind))
        memo[key] = found
        return found

    return under


class Reference(NamedTuple):
    """A path of a workspace that needs an unreadable object, and where it does."""

    workspace: int
    path: bytes  # b"": the root directory, or (kind "rules") no path at all
    kind: str  # "file", "symlink", "dir", or "rules" (a mark's recorded ignore-rule inputs)
    key: str
    marks: tuple[str, ...]  # marks whose tree holds it there, oldest first
    latest: bool  # the workspace's latest capture holds it there
    history: bool  # a version recorded between marks holds it

    def to_wire(self, roots: Mapping[int, bytes]) -> dict[str, Any]:
        return {
            "workspace": encode_path(roots.get(self.workspace, b"?")),
            "path": encode_path(self.path),
            "kind": self.kind,
            "object": self.key,
            "marks": list(self.marks),
            "latest": self.latest,
            "history": self.history,
        }


def locate(store: Store, bad: Collection[str], workspace: int | None = None) -> list[Reference]:
    """Every reference to the ``bad`` keys (usually :func:`spread`'s) in the history of
    ``workspace`` (None: of every workspace), by workspace and path."""
    db = store.catalog.read()
    args = [workspace] if workspace is not None else []
    only = ("WHERE workspace=?", "WHERE id=?", " AND workspace=?") if args else ("", "", "")
    rows = db.execute(
        f"SELECT id, workspace, tree, rules, ignored FROM marks {only[0]} ORDER BY seq", args
    ).fetchall()
    sql = f"SELECT DISTINCT workspace, tree, rules, ignored FROM states {only[0]}"
    states = db.execute(sql, args).fetchall()
    heads = db.execute(f"SELECT id, head FROM workspaces {only[1]}", args).fetchall()
    under = finder(store, bad)
    refs: dict[tuple[int, bytes, str, str], dict[str, Any]] = {}

    def ref(ws: int, path: bytes, key: str, kind: str) -> dict[str, Any]:
        return refs.setdefault((ws, path, kind, key), {"marks": [], "latest": False, "history": False})

    def records(rules: str | None, names: str | None) -> list[tuple[str, str]]:
        """What a mark or a state records beside its tree that is bad: (key, kind)."""
        found = [(objects.py_key(k), kind) for k, kind in ((rules, "rules"), (names, "ignored")) if k]
        return [(k, kind) for k, kind in found if k in bad]

    for mark_id, ws, tree, rules, names in rows:
        for path, key, kind in under(tree):
            ref(ws, path, key, kind)["marks"].append(mark_id)
        for key, kind in records(rules, names):
            ref(ws, b"", key, kind)["marks"].append(mark_id)
    for ws, tree, rules, names in states:  # what the captures between marks recorded: history
        for path, key, kind in under(tree):
            ref(ws, path, key, kind)["history"] = True
        for key, kind in records(rules, names):
            ref(ws, b"", key, kind)["history"] = True
    for ws, head in heads:
        if head is not None:
            for path, key, kind in under(head):
                ref(ws, path, key, kind)["latest"] = True
    wanted = [objects.db_key(k) for k in bad]
    for i in range(0, len(wanted), 400):
        chunk = wanted[i : i + 400]
        slots = ",".join("?" * len(chunk))
        sql = f"SELECT workspace, path, object, kind FROM versions WHERE object IN ({slots})"
        for ws, path, key, kind in db.execute(sql + only[2], [*chunk, *args]):
            ref(ws, bytes(path), objects.py_key(key), kind)["history"] = True
    return [
        Reference(ws, path, kind, key, tuple(seen["marks"]), seen["latest"], seen["history"])
        for (ws, path, kind, key), seen in sorted(refs.items())
    ]


def where(path: bytes, kind: str) -> str:
    """A reference's path as a person reads it."""
    if kind == "rules":
        return "the ignore-rule inputs it recorded"
    if kind == "ignored":
        return "the ignored names it recorded"
    if not path:
        return "the workspace root"
    return f"the directory {shown(path)}" if kind == "dir" else shown(path)


def explain(store: Store, exc: ReadError, trees_read: Mapping[str, str | None], doing: str) -> StoreError:
    """``exc``, a read that failed while ``doing`` something with the trees in ``trees_read``
    (what each is, for a person -> its root key), as the same error naming the paths of
    those trees that need the damaged object (every one in ``details["paths"]``)."""
    damaged = str(exc.details.get("key") or "")
    bad = spread(store, [damaged]) if damaged else {}
    under = finder(store, bad)
    named: list[dict[str, Any]] = []
    for label, tree in trees_read.items():
        for path, key, kind in under(tree) if tree is not None else []:
            text = where(path, kind)
            named.append({"in": label, "path": encode_path(path), "kind": kind, "object": key, "text": text})
    lines = [f"{n['text']} at {n['in']}" for n in named[:EXAMPLES]]
    more = f" and {len(named) - EXAMPLES} more" if len(named) > EXAMPLES else ""
    needed = f"; it is needed by {', '.join(lines)}{more}" if named else ""
    message = f"{doing}: {exc.message}{needed}. `snapctl verify` lists every path and mark it affects"
    details = {k: v for k, v in exc.details.items() if k != "paths"}
    return type(exc)(message, **details, paths=[{k: v for k, v in n.items() if k != "text"} for n in named])
