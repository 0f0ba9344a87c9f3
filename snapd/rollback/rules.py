"""A rollback judges every path under the mark's own ignore rules: :func:`rules_at` rebuilds
them (its ``.gitignore`` files from its tree, the rest from the inputs it recorded). What they
ignore is never touched (:func:`ignored_below` names it on disk). What today's rules leave out
but the mark's capture (a ``.gitignore`` changed since) is found by :func:`left_out`, so the
plan's current state and the pre-rollback mark hold it before anything is written or deleted.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterable

from snapd.capture import ignore, reader
from snapd.capture.workspace import Workspace
from snapd.paths import is_integration_file
from snapd.rollback import plan
from snapd.store import treediff, trees
from snapd.store.records import Mark


def rules_at(ws: Workspace, mark: Mark) -> ignore.IgnoreRules:
    """The ignore rules ``mark`` was captured with: rule files from its tree, the rest from the
    inputs it recorded (a mark from before they were recorded: today's outside inputs)."""
    load = ws.store.load_node
    inputs = ignore.RuleInputs.decode(ws.store.get(mark.rules)) if mark.rules else ws.rules.inputs

    def file_at(rel: bytes) -> bytes | None:
        e = trees.lookup(load, mark.tree, rel)
        return ws.store.get(e.key) if e is not None and e.kind == "file" else None

    def gitignore(rel_dir: bytes) -> bytes | None:
        return file_at(rel_dir + b"/.gitignore" if rel_dir else b".gitignore")

    return ignore.IgnoreRules.from_inputs(inputs, gitignore, file_at(ignore.SNAPDIGNORE) or b"")


def left_out(ws: Workspace, current: str, target: Mark, m_rules: ignore.IgnoreRules) -> list[bytes]:
    """Paths on disk that today's rules leave out of ``current`` but the plan may write or
    delete: the plan must see them, and the pre-rollback mark must hold them, first.

    Two kinds. Paths in M's tree that exist on disk but not in ``current`` (a path ignored now
    that M holds — perhaps a pre-rollback mark's own extra). And paths absent at M that M's
    rules capture while today's ignore them: none when the rules are equal; among the paths
    whose tracked status changed when only git's index did; found by a walk judged by M's
    rules otherwise."""
    now = ws.rules
    load = ws.store.load_node
    found: dict[bytes, None] = {}
    rule_files_differ = False
    for d in treediff.diff(load, current, target.tree):  # one pass: held paths and changed rule files
        rule_files_differ = rule_files_differ or now.is_rule_file(d.path)
        if d.old is None and d.new is not None and _on_disk(ws.rootb, d.path):
            found[d.path] = None
    for a in target.absent:  # created by the rollback after it: deleted whatever the rules
        if _on_disk(ws.rootb, a) and trees.lookup(load, current, a) is None:
            found[a] = None
            if _is_dir(ws.rootb, a):
                found.update((rel, None) for rel, _ in reader.walk(ws.rootb, lambda r, d: False, a))
    if now.same_outside(m_rules.inputs) and not rule_files_differ:
        if now.inputs.tracked == m_rules.inputs.tracked:
            return list(found)
        candidates: Iterable[tuple[bytes, bool]] = (
            (p, _is_dir(ws.rootb, p)) for p in now.inputs.tracked ^ m_rules.inputs.tracked
        )
    else:
        candidates = reader.walk(ws.rootb, m_rules.is_ignored, descend=m_rules.dir_may_contain_captured)
    for rel, is_dir in candidates:
        if not os.path.lexists(ws.rootb + b"/" + rel) or m_rules.is_ignored(rel, is_dir):
            continue
        if now.is_ignored(rel, is_dir) and trees.lookup(load, current, rel) is None:
            found[rel] = None
    return list(found)


def _on_disk(root: bytes, rel: bytes) -> bool:
    return reader.parents_real(root, rel) and os.path.lexists(root + b"/" + rel)


def still_there(root: bytes, skipped: dict[bytes, str]) -> dict[bytes, str]:
    """``skipped`` without the paths known to be gone (one that cannot be looked at stays)."""
    out = {}
    for rel, why in skipped.items():
        try:
            os.lstat(root + b"/" + rel)
        except (FileNotFoundError, NotADirectoryError):
            continue
        except OSError:
            pass
        out[rel] = why
    return out


def _is_dir(root: bytes, rel: bytes) -> bool:
    try:
        return stat.S_ISDIR(os.lstat(root + b"/" + rel).st_mode)
    except OSError:
        return False


def ignored_below(
    ws: Workspace, current: str, m_rules: ignore.IgnoreRules
) -> plan.IgnoredBelow:
    load = ws.store.load_node

    def below(rel_dir: bytes) -> list[tuple[bytes, str]]:
        """Entries on disk in ``rel_dir`` that ``current`` lacks and M's rules ignore."""
        if not reader.parents_real(ws.rootb, rel_dir + b"/x"):
            return []
        try:
            names = os.listdir(ws.rootb + b"/" + rel_dir)
        except OSError:
            return []
        out = []
        for name in names:
            rel = rel_dir + b"/" + name
            if trees.lookup(load, current, rel) is not None:
                continue
            why = m_rules.reason(rel, _is_dir(ws.rootb, rel))
            if is_integration_file(rel):  # the agent's hooks: kept like an ignored file, never removed
                out.append((rel, "snapd's agent integration (a rollback leaves it)"))
            elif why is not None and why != "snapd":
                out.append((rel, f"ignored at the mark ({why})"))
        return out

    return below
