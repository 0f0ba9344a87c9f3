"""The oracle of the rollback model (:mod:`rollback_model`): what a rollback to a recorded state may
leave, path by path, and what its reply names. "Ignored" is decided by real git
(``git check-ignore`` in a scratch repository holding exactly a state's rule inputs), never by
snapd's ignore code; so is which of those files are precious, hence captured (``git
check-ignore`` again, in a repository whose one rule file is the default ``precious`` list).
Pure functions over :data:`e2e_helpers.Snap` maps, except the oracle's git.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import subprocess
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from e2e_helpers import Entry, Snap, show_entry
from model_steps import SIZE_CAP, depth, parent, under

from snapd.config import PRECIOUS  # the lab's daemon runs with the default list


@dataclass(frozen=True)
class Rules:
    """The inputs of git's ignore decision at one moment: .gitignore files, info/exclude, the index."""

    gitignores: tuple[tuple[str, bytes], ...]
    exclude: bytes
    index: bytes

    @staticmethod
    def read(root: Path, disk: Snap) -> Rules:
        def raw(p: Path) -> bytes:
            try:
                return p.read_bytes()
            except FileNotFoundError:
                return b""

        gi = tuple(
            sorted(
                (p, v[2]) for p, v in disk.items() if v[0] == "file" and p.rpartition("/")[2] == ".gitignore"
            )
        )
        return Rules(gi, raw(root / ".git/info/exclude"), raw(root / ".git/index"))

    def key(self) -> str:
        return hashlib.sha256(repr(self).encode()).hexdigest()


class GitOracle:
    """``git check-ignore`` in a scratch repository that holds only a state's rule inputs."""

    def __init__(self, base: Path, env: dict[str, str]) -> None:
        self.base, self.env = base, env
        self.repos: dict[str, Path] = {}

    def _repo(self, rules: Rules) -> Path:
        k = rules.key()
        if k not in self.repos:
            repo = self.base / f"rules-{len(self.repos)}"
            repo.mkdir(parents=True)
            subprocess.run(["git", "init", "-q"], cwd=repo, env=self.env, check=True, capture_output=True)
            if rules.index:
                (repo / ".git/index").write_bytes(rules.index)
            (repo / ".git/info").mkdir(exist_ok=True)
            (repo / ".git/info/exclude").write_bytes(rules.exclude)
            for rel, data in rules.gitignores:
                (repo / rel).parent.mkdir(parents=True, exist_ok=True)
                (repo / rel).write_bytes(data)
            self.repos[k] = repo
        return self.repos[k]

    def ignored(self, rules: Rules, disk: Snap) -> set[str]:
        """The paths of ``disk`` (with their kinds there) that ``rules`` ignore."""
        names = {(p + "/" if v[0] == "dir" else p): p for p, v in disk.items() if p != "."}
        if not names:
            return set()
        cp = subprocess.run(
            ["git", "check-ignore", "--stdin", "-z"],
            cwd=self._repo(rules),
            env=self.env,
            input=b"".join(os.fsencode(n) + b"\0" for n in names),
            capture_output=True,
            timeout=60,
        )
        assert cp.returncode in (0, 1), f"git check-ignore failed: {cp.stderr!r}"
        out = {names[os.fsdecode(x)] for x in cp.stdout.split(b"\0") if x}
        return out - self._precious(out, disk)

    def _precious(self, ignored: set[str], disk: Snap) -> set[str]:
        """Of the ``ignored`` non-directories whose directory is walked (no ancestor ignored),
        those the precious list names: snapd captures them."""
        walked = [p for p in ignored if disk[p][0] != "dir" and not any(a in ignored for a in _ancestors(p))]
        if not walked:
            return set()
        repo = self.base / "precious"
        if not repo.exists():
            repo.mkdir(parents=True)
            subprocess.run(["git", "init", "-q"], cwd=repo, env=self.env, check=True, capture_output=True)
            (repo / ".gitignore").write_text("".join(f"{p}\n" for p in PRECIOUS))
        cp = subprocess.run(
            ["git", "check-ignore", "--no-index", "--stdin", "-z"],
            cwd=repo,
            env=self.env,
            input=b"".join(os.fsencode(p) + b"\0" for p in walked),
            capture_output=True,
            timeout=60,
        )
        assert cp.returncode in (0, 1), f"git check-ignore failed: {cp.stderr!r}"
        return {os.fsdecode(x) for x in cp.stdout.split(b"\0") if x}


# == the model ====================================================================================


@dataclass(frozen=True)
class Ref:
    """A state a rollback or undo returns to: the disk as the test read it, its rules, and the paths
    a pre-rollback mark holds whatever the rules (those the plan of the rollback after it writes or
    deletes, done or kept, and those that rollback changed)."""

    name: str
    disk: Snap
    rules: Rules
    held: frozenset[str] = frozenset()
    unlisted: frozenset[str] = frozenset()  # directories the daemon's uid could not list then

    def unknown(self, p: str) -> bool:
        """Is ``p`` inside a directory the daemon could not list at this state?"""
        return any(p != d and under(p, d) for d in self.unlisted) or ("." in self.unlisted and p != ".")


def uncapturable(disk: Snap, uid: int) -> set[str]:
    """Paths snapd cannot capture, as ``uid``: special files, files over the size cap, and (for
    another uid than root) unreadable files and everything in directories it cannot list."""
    out = {p for p, v in disk.items() if v[0] == "special" or (v[0] == "file" and len(v[2]) > SIZE_CAP)}
    if uid != 0:
        out |= {p for p, v in disk.items() if v[0] == "file" and not v[1] & 0o400}
        dirs = unlisted_dirs(disk, uid)
        out |= {p for p in disk if any(under(p, d) for d in dirs)}
    return out


def unlisted_dirs(disk: Snap, uid: int) -> frozenset[str]:
    """The directories of ``disk`` (all owned by ``uid``) that ``uid`` cannot list: no owner read
    or search bit. Root lists anything."""
    if uid == 0:
        return frozenset()
    return frozenset(p for p, v in disk.items() if v[0] == "dir" and v[1] & 0o500 != 0o500)


Want = frozenset[Entry | None]  # the outcomes the contract allows for one path (None: absent)


def expected(
    ref: Ref,
    before: Snap,
    after: Snap,
    ignored_at_ref: set[str],
    ignored_then: set[str],
    ignored_now: set[str],
) -> dict[str, Want]:
    """What each path may be after a rollback to ``ref`` from ``before``. (``after``, the result,
    only decides whether a directory that must go may stay because a path inside may stay.)

    ``ignored_at_ref``: paths of ``ref.disk`` that ``ref.rules`` ignore; ``ignored_then``: paths of
    ``before`` that ``ref.rules`` ignore (with their kinds in ``before``); ``ignored_now``: paths of
    ``before`` that ``before``'s own rules ignore.

    Inside a directory the daemon could not list at R, a path may be as at R or left as it is (the
    caller checks that a path left so is listed). Everything else has one outcome. A path absent at
    R that both rule sets ignore is never touched. One that R's rules ignore and today's capture is
    left when it lies below an ignored entry present at R (a mark records the names of the
    top-most ones), and deleted otherwise: it did not exist at R (as ``git checkout`` would). One
    that R's rules capture and today's ignore did not exist at R either: deleted.
    """
    captured = {p for p in ref.disk if p in ref.held or p not in ignored_at_ref}
    for p in list(captured):  # a directory holding a captured path is captured too
        q = parent(p)
        while q:
            if ref.disk.get(q, ("",))[0] == "dir":
                captured.add(q)
            q = parent(q)
    want: dict[str, Want] = {}
    for p in ref.disk.keys() | before.keys():
        if ref.unknown(p) and p not in ref.held:  # M could not know it: restored, or left and listed
            want[p] = frozenset({ref.disk.get(p), before.get(p)})
        elif p in captured or p == ".":
            want[p] = frozenset({ref.disk[p]})
        elif p in ref.disk:
            want[p] = frozenset({before.get(p)})  # ignored at R: never touched
        elif p in ref.held:
            want[p] = frozenset({None})
        elif p in ignored_then and p in ignored_now:
            want[p] = frozenset({before[p]})  # ignored then and now: never touched
        elif p in ignored_then and any(q in ref.disk and q in ignored_at_ref for q in _ancestors(p)):
            want[p] = frozenset({before[p]})  # below an ignored entry that was there at R
        else:
            want[p] = frozenset({None})
    for p in sorted(want, key=depth, reverse=True):  # a directory that must go but holds kept paths
        b = before.get(p)
        if None in want[p] and b is not None and b[0] == "dir":
            inside = [q for q in before.keys() | after.keys() if q.startswith(p + "/")]
            if any(None not in want[q] for q in inside):
                want[p] = frozenset({b})  # left as it is, and listed
            elif any(after.get(q) is not None and after.get(q) in want[q] for q in inside):
                want[p] = want[p] | {b}  # holds a path that may stay: may be left
    return want


def _ancestors(p: str) -> list[str]:
    out = []
    while (p := parent(p)):
        out.append(p)
    return out


@dataclass(frozen=True)
class Reply:
    """What a rollback's ``--json`` reply lists: paths with reasons, and its error message."""

    listed: dict[str, str]
    message: str
    planned: frozenset[str] = frozenset()  # the paths its plan writes or deletes (its ops)

    @staticmethod
    def parse(stdout: bytes) -> Reply:
        try:
            reply = json.loads(stdout)
        except ValueError:
            return Reply({}, stdout.decode(errors="replace"))
        if not isinstance(reply, dict):
            return Reply({}, "")
        listed: dict[str, str] = {}
        for key in ("conflicts", "kept", "left"):
            for item in reply.get(key) or []:
                p = _path(item.get("path") if isinstance(item, dict) and "b64" not in item else item)
                if p is not None:
                    listed[p] = f"{key}: {item.get('reason', '') if isinstance(item, dict) else ''}"
        plan = reply.get("plan")
        ops = plan.get("ops") if isinstance(plan, dict) else None
        planned = {_path(op.get("path")) for op in ops or [] if isinstance(op, dict)} - {None}
        err = reply.get("error")
        return Reply(listed, json.dumps(err) if err else "", frozenset(p for p in planned if p))

    def names(self, p: str, root: Path) -> bool:
        """Does the reply name ``p`` (itself, an ancestor or a descendant listed, or in the error)?"""
        if any(under(p, q) or under(q, p) for q in self.listed):
            return True
        m = self.message
        return bool(m) and (str(root / p) in m or f"'{p}'" in m or f'"{p}"' in m)

    def blocking(self) -> list[str]:
        """The paths listed as kept or as conflicts (not those merely left)."""
        return [p for p, r in self.listed.items() if not r.startswith("left:")]


def _path(p: object) -> str | None:
    """A path of a reply: a string, or ``{"b64": ...}`` for bytes that are not UTF-8."""
    if isinstance(p, dict) and "b64" in p:
        return os.fsdecode(base64.b64decode(p["b64"]))
    return p if isinstance(p, str) else None


def diff_lines(got: Snap, want: dict[str, Want] | Snap, only: Iterable[str] | None = None) -> str:
    def allowed(p: str) -> frozenset[Entry | None]:
        w = want.get(p)
        return w if isinstance(w, frozenset) else frozenset({w})

    paths = sorted(
        only if only is not None else {p for p in got.keys() | want.keys() if got.get(p) not in allowed(p)}
    )
    return "\n".join(
        f"    {p}: got {show_entry(got.get(p))}, want {' or '.join(sorted(map(show_entry, allowed(p))))}"
        for p in paths[:30]
    )
