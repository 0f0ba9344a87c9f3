"""``verify``: re-hash what the catalog references and say which marks a problem affects.

Checked: every tree node reachable from a mark or a workspace head (always — a tree is needed to know what it
references), every file and symlink object those trees name, and every object a version row
names, and every mark's rule inputs. With ``sample`` in (0, 1), that fraction of the content
objects is re-hashed instead of all of them (nodes are still all read). A missing or corrupt
object is reported with the marks whose trees reach it.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from snapd.errors import CorruptObject, MissingObject
from snapd.store import objects, trees
from snapd.store.store import Store


@dataclass
class VerifyReport:
    checked: int = 0
    missing: dict[str, list[str]] = field(default_factory=dict)  # key -> affected mark ids
    corrupt: dict[str, list[str]] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not self.missing and not self.corrupt


def verify(store: Store, sample: float | None = None, seed: int | None = None) -> VerifyReport:
    report = VerifyReport()
    bad: dict[str, str] = {}  # key -> "missing" | "corrupt"
    contents: set[str] = set()
    below: dict[str, set[str]] = {}  # node key -> bad keys beneath it (memo)

    def check(key: str) -> bool:
        report.checked += 1
        try:
            store.get(key)
        except MissingObject:
            bad[key] = "missing"
            return False
        except CorruptObject:
            bad[key] = "corrupt"
            return False
        return True

    def node_bad(key: str) -> set[str]:
        if key in below:
            return below[key]
        found: set[str] = set()
        below[key] = found
        try:
            node = store.load_node(key)
            report.checked += 1
        except (MissingObject, CorruptObject) as exc:
            bad[key] = "missing" if isinstance(exc, MissingObject) else "corrupt"
            found.add(key)
            return found
        for entry in node.values():
            if entry.kind == "dir":
                found |= node_bad(entry.key)
            elif trees.holds_object(entry):
                contents.add(entry.key)
        return found

    db = store.catalog.read()
    marks = db.execute("SELECT id, tree FROM marks").fetchall()
    heads = [h for (h,) in db.execute("SELECT head FROM workspaces WHERE head IS NOT NULL")]
    # The states' trees share almost every node with the marks and the head: each is walked once.
    heads += [t for (t,) in db.execute("SELECT DISTINCT tree FROM states")]
    for head in heads:
        node_bad(head)
    for _, tree in marks:
        node_bad(tree)
    named = db.execute("SELECT DISTINCT object FROM versions WHERE object IS NOT NULL")
    contents.update(objects.py_key(k) for (k,) in named)
    rules = dict(db.execute("SELECT id, rules FROM marks WHERE rules IS NOT NULL").fetchall())
    contents.update(rules.values())
    names = dict(db.execute("SELECT id, ignored FROM marks WHERE ignored IS NOT NULL").fetchall())
    contents.update(names.values())
    contents.update(k for (k,) in db.execute("SELECT ignored FROM workspaces WHERE ignored IS NOT NULL"))
    for rules_key, names_key in db.execute("SELECT DISTINCT rules, ignored FROM states"):
        contents.update(k for k in (rules_key, names_key) if k)
    keys = sorted(contents - below.keys())
    if sample is not None and 0 < sample < 1:
        rng = random.Random(seed)
        keys = [k for k in keys if rng.random() < sample]
    for key in keys:
        check(key)
    if bad:
        for mark_id, tree in marks:
            own = (rules.get(mark_id), names.get(mark_id))
            hit = {k for k in bad if k in node_bad(tree) or k in own or _reaches(store, tree, k)}
            for k in hit:
                (report.missing if bad[k] == "missing" else report.corrupt).setdefault(k, []).append(mark_id)
        for k, why in bad.items():
            (report.missing if why == "missing" else report.corrupt).setdefault(k, [])
    return report


def _reaches(store: Store, tree: str, key: str) -> bool:
    try:
        return any(e.key == key for _, e in trees.walk(store.load_node, tree))
    except (MissingObject, CorruptObject):
        return False
