"""``verify``: re-hash what the catalog references and say which marks a problem affects.

Checked: every tree node reachable from a mark or a workspace head (always — a tree is needed to know what it
references), every file and symlink object those trees name, and every object a version row
names, and every mark's rule inputs. With ``sample`` in (0, 1), that fraction of the content
objects is re-hashed instead of all of them (nodes are still all read). A missing or corrupt
object is reported with the marks whose trees reach it, and each damaged object with every
workspace path that needs it, directly or through a delta chain, and where (marks, the latest
capture, the versions between marks): :mod:`snapd.store.damage`.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import NamedTuple

from snapd.errors import CorruptObject, MissingObject
from snapd.store import damage, objects, trees
from snapd.store.store import Store


class Damage(NamedTuple):
    """One damaged object (``problem``: corrupt or missing) and every reference to what
    cannot be read because of it: itself, and the objects stored as deltas through it."""

    key: str
    problem: str
    refs: list[damage.Reference]


@dataclass
class VerifyReport:
    checked: int = 0
    missing: dict[str, list[str]] = field(default_factory=dict)  # key -> affected mark ids
    corrupt: dict[str, list[str]] = field(default_factory=dict)
    damage: list[Damage] = field(default_factory=list)  # by damaged object: the paths that need it

    @property
    def ok(self) -> bool:
        return not self.missing and not self.corrupt


def verify(store: Store, sample: float | None = None, seed: int | None = None) -> VerifyReport:
    report = VerifyReport()
    bad: dict[str, tuple[str, str]] = {}  # key -> ("missing" | "corrupt", the damaged link of its chain)
    contents: set[str] = set()
    below: dict[str, set[str]] = {}  # node key -> bad keys beneath it (memo)

    def failed(key: str, exc: CorruptObject | MissingObject) -> None:
        u = damage.Unreadable.of(exc)
        bad[key] = (u.problem, u.damaged)

    def check(key: str) -> bool:
        report.checked += 1
        try:
            store.get(key)
        except (CorruptObject, MissingObject) as exc:
            failed(key, exc)
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
            failed(key, exc)
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
        _locate(store, bad, report)
    return report


def _locate(store: Store, bad: dict[str, tuple[str, str]], report: VerifyReport) -> None:
    """Each bad key with the marks that hold it, and each damaged object with every path
    that needs it (through delta chains too): the whole history read once, on this error
    path only."""
    causes = damage.spread(store, {cause for _, cause in bad.values()})
    problems = {cause: why for why, cause in bad.values()} | {k: why for k, (why, _) in bad.items()}
    refs = damage.locate(store, causes.keys() | bad.keys())
    for k, (why, _) in bad.items():
        (report.missing if why == "missing" else report.corrupt).setdefault(k, [])
    by_cause: dict[str, list[damage.Reference]] = {}
    for ref in refs:
        if ref.key in bad:
            marks = (report.missing if bad[ref.key][0] == "missing" else report.corrupt)[ref.key]
            marks.extend(m for m in ref.marks if m not in marks)
        by_cause.setdefault(causes.get(ref.key) or bad[ref.key][1], []).append(ref)
    for cause in sorted({c for _, c in bad.values()} | by_cause.keys()):
        report.damage.append(Damage(cause, problems.get(cause, "corrupt"), by_cause.get(cause, [])))
