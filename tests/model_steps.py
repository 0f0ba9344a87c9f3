"""The steps of the rollback model (:mod:`rollback_model`): one concrete action with every argument
fixed (replayable without the generator), the file operations that carry them out in a workspace,
and the fixed git work tree every round starts from. The operations run as the workspace's user:
in this process, or in a forked child that switched uid (e2e_helpers.OtherUser.do), so they are
plain functions of their arguments, and an error is the user's command failing.
"""

from __future__ import annotations

import json
import os
import random
import re
import shutil
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from renames import exchange

SIZE_CAP: Final = 8192  # small, so that a file over the cap is cheap to make


def parent(p: str) -> str:
    return p.rpartition("/")[0]


def depth(p: str) -> int:
    return 0 if p in ("", ".") else p.count("/") + 1


def under(p: str, q: str) -> bool:
    """``p`` is ``q`` or below it."""
    return p == q or p.startswith(q + "/")


# == steps =======================================================================================


@dataclass(frozen=True)
class Step:
    """One concrete action with every argument fixed: replayable without the generator."""

    op: str
    args: tuple[Any, ...] = ()

    def to_json(self) -> list[Any]:
        return [self.op, *self.args]

    @staticmethod
    def from_json(raw: Sequence[Any]) -> Step:
        return Step(str(raw[0]), tuple(tuple(a) if isinstance(a, list) else a for a in raw[1:]))

    def shell(self) -> str:
        """The step as a person would type it (approximately: the JSON is the exact form)."""
        a = self.args
        data = lambda spec: f"<{spec}>"  # noqa: E731
        match self.op:
            case "write":
                return f"printf {data(a[1])} > {a[0]}; chmod {a[2]:o} {a[0]}"
            case "save":
                return f"printf {data(a[1])} > {a[0]}.new; chmod {a[2]:o} {a[0]}.new; mv {a[0]}.new {a[0]}"
            case "append":
                return f"printf {data(a[1])} >> {a[0]}"
            case "unlink":
                return f"rm {a[0]}"
            case "mkdir":
                return f"mkdir -m {a[1]:o} {a[0]}"
            case "rmtree":
                return f"rm -rf {a[0]}"
            case "rename":
                return f"mv -T {a[0]} {a[1]}"
            case "out_and_back":
                extra = f"; printf x > $OUT/moved/{a[2]}" if a[2] else ""
                return f"mv {a[0]} $OUT/moved{extra}; mv $OUT/moved {a[1]}"
            case "move_in":
                fill = f"printf {data(a[2])} | tee $OUT/in/h > $OUT/in/sub/f"
                return f"mkdir -p $OUT/in/sub; {fill}; chmod {a[1]:o} $OUT/in; mv $OUT/in {a[0]}"
            case "replace_dir":
                return f"mv {a[0]} $OUT/old-{a[2]} && mv {a[1]} {a[0]}"
            case "swap_dirs":
                return f"mv {a[0]} {a[0]}.swap; mv {a[1]} {a[0]}; mv {a[0]}.swap {a[1]}"
            case "exchange":
                return f"mv --exchange {a[0]} {a[1]}"
            case "hardlink":
                return f"ln {a[0]} {a[1]}"
            case "fleeting_link":  # a second name written through and gone in one settle
                if a[3] == "rm":
                    return f"ln {a[0]} {a[1]}; printf {data(a[2])} >> {a[1]}; rm {a[1]}"
                gone = f"rm -rf {a[1]}" if a[3] == "rmtree" else f"mv {a[1]} $OUT/gone-{a[4]}"
                return f"mkdir {a[1]}; ln {a[0]} {a[1]}/x; printf {data(a[2])} >> {a[1]}/x; {gone}"
            case "link_web":  # a link of a link, written through, renamed over a file; both gone
                s, n1, n2, over = a[:4]
                through = f"printf {data(a[4])} >> {n2}"
                return f"ln {s} {n1}; ln {n1} {n2}; {through}; mv {n2} {over}; rm {n1} {over}"
            case "link_outside":
                return f"printf {data(a[2])} > $OUT/{a[1]}; ln $OUT/{a[1]} {a[0]}"
            case "write_outside":
                return f"printf {data(a[1])} > $OUT/{a[0]}  # in place"
            case "symlink":
                return f"ln -s {a[1]} {a[0]}"
            case "chmod":
                return f"chmod {a[1]:o} {a[0] or '.'}"
            case "gitignore":
                where = f"{a[0]}/.gitignore" if a[0] else ".gitignore"
                return f"rm {where}" if a[1] is None else f"printf '{chr(92)}n'.join({list(a[1])}) > {where}"
            case "exclude":
                return f"printf ... > .git/info/exclude  # {list(a[0])}"
            case "git":
                return "git " + " ".join(a[0])
            case "mkfifo":
                return f"mkfifo {a[0]}"
            case "utime":
                return f"touch -h -d @{seconds(a[1])} {a[0] or '.'}"
            case "pause":
                return f"sleep {a[0] / 1000}"
            case "rmtree_root":
                return "rm -rf $WS"
            case "remake_root":
                fill = f"; printf {data(a[2])} > $WS/{a[1]}" if a[1] else ""
                return f"rm -rf $WS; mkdir -m {a[0]:o} $WS{fill}"
            case "mark":
                return f"snapctl mark {a[0]}"
            case "instant":
                return f"snapctl diff m0 >/dev/null; {a[0]}=@$(date -u +%FT%T.%NZ); snapctl mark {a[0]}-twin"
            case "rollback":
                return f"snapctl rollback --to {a[0]} --yes"
            case "undo":
                return "snapctl undo --yes"
            case "edit_lines":
                return f"sed -i '{';'.join(f'{i + 1}s/.*/e{a[2]}.{i}/' for i in a[1])}' {a[0]}"
            case "revert":
                how = " --conflicts=markers" if a[3] == "markers" else ""
                return f"snapctl revert {a[0]}..{a[1]} --yes{how}{f' -- {a[2]}' if a[2] else ''}"
        return f"{self.op} {a}"


def seconds(ns: int) -> str:
    """Nanoseconds since the epoch as ``touch -d @`` takes them: seconds, a point, nine digits."""
    whole, frac = divmod(abs(ns), 10**9)
    return f"{'-' if ns < 0 else ''}{whole}.{frac:09d}"


def content(spec: str) -> bytes:
    """The bytes a content spec stands for: ``empty``, ``vN*K`` (K lines "vN"), ``lineN*K``,
    ``binN*K`` (K bytes, random but fixed by N), ``big*K`` (K bytes "B"), ``rowsN*K`` (K rows
    "rN.0" ... "rN.K-1": every line names its own index, see :func:`rows`)."""
    if spec == "empty":
        return b""
    word, _, k = spec.partition("*")
    n = int(k)
    if word.startswith("rows"):
        return "".join(f"r{word[4:]}.{i}\n" for i in range(n)).encode()
    if word.startswith("bin"):
        return random.Random(word).randbytes(n)
    if word == "big":
        return b"B" * n
    return f"{word}\n".encode() * n


ROW: Final = re.compile(rb"[re][0-9]+\.([0-9]+)\n")


def rows(data: bytes) -> list[bytes] | None:
    """The lines of a rows file, or None for any other content. A rows file's every line names
    its own index (``r7.0``, ``e12.1``, ``r7.2``: made by a ``rowsN*K`` spec, then edited in
    place by :func:`edit_rows`), so two versions of it can only match line i to line i: the one
    alignment any line diff finds, which is what lets the model predict a three-way merge."""
    lines = data.splitlines(keepends=True)
    for i, line in enumerate(lines):
        m = ROW.fullmatch(line)
        if m is None or int(m.group(1)) != i:
            return None
    return lines or None


def edit_rows(data: bytes, indices: Sequence[int], n: int) -> bytes:
    """``data`` with line i replaced by ``eN.i`` for each i of ``indices`` it has (any file)."""
    lines = data.splitlines(keepends=True)
    for i in indices:
        if i < len(lines):
            lines[i] = f"e{n}.{i}\n".encode()
    return b"".join(lines)


def dump_steps(steps: Sequence[Step]) -> str:
    return json.dumps([s.to_json() for s in steps])


def load_steps(text: str) -> list[Step]:
    return [Step.from_json(x) for x in json.loads(text)]


# == the file operations (run as the workspace's user, in a forked child for another uid) ========


def _fd_write(path: Path, data: bytes, flags: int, mode: int | None) -> None:
    # O_NONBLOCK: a FIFO the steps left at that name (made there, or moved there by a rename
    # or an exchange) fails the write (ENXIO: no reader) instead of blocking it for good.
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK | flags, 0o644)
    try:
        os.write(fd, data)
        if mode is not None:
            os.fchmod(fd, mode)
    finally:
        os.close(fd)


def _rm_rf(top: Path) -> None:
    """``rm -rf``, as the owner: read-only and unlistable directories are opened first."""
    if not top.is_symlink() and top.is_dir():
        os.chmod(top, 0o700)
        for name in os.listdir(top):
            _rm_rf(top / name)
        os.rmdir(top)
    else:
        os.unlink(top)


def _git(root: Path, env: dict[str, str], args: Sequence[str]) -> None:
    subprocess.run(["git", *args], cwd=root, env=env, check=True, capture_output=True, timeout=60)


@dataclass
class World:
    """Where the steps happen: the workspace, a directory outside it, and git's environment."""

    root: Path
    outside: Path
    git_env: dict[str, str]

    def apply(self, step: Step) -> None:
        r, out, a = self.root, self.outside, step.args
        match step.op:
            case "write":
                _fd_write(r / a[0], content(a[1]), os.O_TRUNC, a[2])
            case "save":
                tmp = r / f"{a[0]}.new"
                _fd_write(tmp, content(a[1]), os.O_TRUNC | os.O_EXCL, a[2])
                os.rename(tmp, r / a[0])
            case "append":
                _fd_write(r / a[0], content(a[1]), os.O_APPEND, None)
            case "edit_lines":  # an editor's save in place: read, change lines, write back
                _fd_write(r / a[0], edit_rows((r / a[0]).read_bytes(), a[1], a[2]), os.O_TRUNC, None)
            case "unlink":
                os.unlink(r / a[0])
            case "mkdir":
                os.mkdir(r / a[0])
                os.chmod(r / a[0], a[1])
            case "rmtree":
                shutil.rmtree(r / a[0])
            case "rename":
                os.rename(r / a[0], r / a[1])
            case "out_and_back":
                moved = out / f"moved-{time.monotonic_ns()}"  # (a failed move back leaves it there)
                os.rename(r / a[0], moved)
                if a[2]:
                    _fd_write(moved / a[2], b"changed while outside\n", os.O_TRUNC, None)
                os.rename(moved, r / a[1])
            case "move_in":  # a directory made elsewhere (an unpacked archive) moved into the tree
                made = out / f"in-{time.monotonic_ns()}"
                os.mkdir(made)
                _fd_write(made / "h", content(a[2]), os.O_TRUNC, None)
                os.mkdir(made / "sub")
                _fd_write(made / "sub" / "f", content(a[2]), os.O_TRUNC, None)
                os.chmod(made, a[1])
                os.rename(made, r / a[0])
            case "replace_dir":
                os.rename(r / a[0], out / f"old-{a[2]}")
                os.rename(r / a[1], r / a[0])
            case "swap_dirs":
                os.rename(r / a[0], r / f"{a[0]}.swap")
                os.rename(r / a[1], r / a[0])
                os.rename(r / f"{a[0]}.swap", r / a[1])
            case "exchange":  # renameat2(RENAME_EXCHANGE): both names swap at once
                exchange(r / a[0], r / a[1])
            case "hardlink":
                os.link(r / a[0], r / a[1], follow_symlinks=False)
            case "fleeting_link":
                if a[3] == "rm":
                    os.link(r / a[0], r / a[1], follow_symlinks=False)
                    _fd_write(r / a[1], content(a[2]), os.O_APPEND, None)
                    os.unlink(r / a[1])
                else:
                    os.mkdir(r / a[1])
                    os.link(r / a[0], r / a[1] / "x", follow_symlinks=False)
                    _fd_write(r / a[1] / "x", content(a[2]), os.O_APPEND, None)
                    if a[3] == "rmtree":
                        shutil.rmtree(r / a[1])
                    else:
                        os.rename(r / a[1], out / f"gone-{a[4]}-{time.monotonic_ns()}")
            case "link_web":
                s, n1, n2, over = (r / x for x in a[:4])
                os.link(s, n1, follow_symlinks=False)
                os.link(n1, n2, follow_symlinks=False)
                _fd_write(n2, content(a[4]), os.O_APPEND, None)
                os.rename(n2, over)
                os.unlink(n1)
                os.unlink(over)
            case "link_outside":
                _fd_write(out / a[1], content(a[2]), os.O_TRUNC, None)
                os.link(out / a[1], r / a[0])
            case "write_outside":
                _fd_write(out / a[0], content(a[1]), os.O_TRUNC, None)
            case "symlink":
                os.symlink(a[1], r / a[0])
            case "chmod":
                os.chmod(r / a[0] if a[0] else r, a[1], follow_symlinks=False)
            case "gitignore":
                where = r / a[0] / ".gitignore"
                if a[1] is None:
                    os.unlink(where)
                else:
                    _fd_write(where, "".join(f"{x}\n" for x in a[1]).encode(), os.O_TRUNC, None)
            case "exclude":
                (r / ".git" / "info").mkdir(exist_ok=True)
                _fd_write(r / ".git/info/exclude", "".join(f"{x}\n" for x in a[0]).encode(), os.O_TRUNC, None)
            case "git":
                _git(r, self.git_env, a[0])
            case "mkfifo":
                os.mkfifo(r / a[0])
            case "utime":  # a date far from now: past the stat cache's 44-byte row (issue 30, 4)
                os.utime(r / a[0] if a[0] else r, ns=(a[1], a[1]), follow_symlinks=False)
            case "pause":  # lets the daemon's timers run (pending moves resolve after 50 ms)
                time.sleep(a[0] / 1000)
            case "rmtree_root":  # the workspace itself gone, .git with it
                _rm_rf(r)
            case "remake_root":  # ... and a new directory made at its path (with a file in it)
                _rm_rf(r)
                os.mkdir(r)
                os.chmod(r, a[0])
                if a[1]:
                    _fd_write(r / a[1], content(a[2]), os.O_TRUNC, None)
            case _:
                raise ValueError(f"unknown step {step.op}")


def git_env(env: dict[str, str]) -> dict[str, str]:
    """The daemon's environment (no global or system git config) plus a committer."""
    ident = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@e", "GIT_COMMITTER_NAME": "t"}
    return {**env, **ident, "GIT_COMMITTER_EMAIL": "t@e"}


def make_repo(w: World) -> None:
    """The fixed starting point of every round: a git work tree with two branches, tracked files
    (one of them matched by an ignore pattern), ignored files and an untracked one."""
    r, g = w.root, lambda *args: _git(w.root, w.git_env, args)
    g("init", "-q", "-b", "main")
    for rel, data, mode in (
        ("README", b"readme\n", 0o644),
        ("src/app.py", b"print('v1')\n", 0o644),
        ("src/tool.sh", b"#!/bin/sh\necho v1\n", 0o755),
        (".gitignore", b"*.log\n.env\n__pycache__/\n", 0o644),
        ("keep.log", b"tracked although ignored\n", 0o644),
    ):
        (r / rel).parent.mkdir(parents=True, exist_ok=True)
        _fd_write(r / rel, data, os.O_TRUNC, mode)
    g("add", "-f", ".")
    g("commit", "-qm", "one")
    g("checkout", "-qb", "other")
    _fd_write(r / "src/app.py", b"print('other')\n", os.O_TRUNC, None)
    (r / "docs").mkdir()
    _fd_write(r / "docs/guide.txt", b"guide\n", os.O_TRUNC, None)
    os.unlink(r / "src/tool.sh")
    _fd_write(r / ".gitignore", b"*.log\n.env\n__pycache__/\nbuild/\n", os.O_TRUNC, None)
    g("add", "-A")
    g("commit", "-qm", "other")
    g("checkout", "-q", "main")
    (r / "src/__pycache__").mkdir()
    _fd_write(r / "src/__pycache__/app.pyc", b"\x00pyc", os.O_TRUNC, None)
    _fd_write(r / ".env", b"SECRET=1\n", os.O_TRUNC, 0o600)
    _fd_write(r / "notes.txt", b"untracked notes\n", os.O_TRUNC, None)
