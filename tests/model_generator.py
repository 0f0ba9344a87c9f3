"""The generator of the rollback model (:mod:`rollback_model`): chooses the next step from the disk
as it is now, every choice from one seeded ``Random``, so a seed and the list of operations left
out fix the whole run. Names, patterns and modes come from small pools, so steps collide often.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Sequence
from typing import Final

from e2e_helpers import Snap
from model_steps import SIZE_CAP, Step, depth, rows, under

# Operations that hit a failure issue 8 already lists stay out of the generator until that fix
# lands (the point number is the value). Turn one on by deleting its line; turn everything
# on with SNAPD_MODEL_STRICT=1. (Every point was here until its fix landed: 1, 2, 3, 4, 5, 9, 10, 12.)
OFF_UNTIL_FIXED: Final[dict[str, int]] = {}

# ``snapctl revert A..B`` steps (issue 34), judged by the model's own three-way model
# (:func:`model_oracle.revert_expected`). Off: the generator makes none (rows files and their
# line edits stay: the rollbacks take them back too).
REVERT_STEPS: Final = True

DIR_NAMES: Final = ("a", "b", "src", "pkg", "out", "out.new", "build", "__pycache__", "docs")
FILE_NAMES: Final = (
    "f", "g.txt", "m.py", "x.log", "keep.log", ".env", "README", "m.pyc", "n.o", "db.sqlite3"
)
PATTERNS: Final = (
    ".env",
    "*.sqlite3",
    "*.log",
    "!keep.log",
    "__pycache__/",
    "*.pyc",
    "build/",
    "/out",
    "out/",
    "*.o",
    "b/",
    "docs/*.txt",
    "a/f",
    "[z-a]",  # git accepts it and matches nothing
)
FILE_MODES: Final = (0o644, 0o644, 0o600, 0o755, 0o444, 0o400, 0o640)
UNREADABLE_FILE_MODES: Final = (0o000, 0o200)
DIR_MODES: Final = (0o755, 0o755, 0o700, 0o750, 0o555, 0o500)
UNLISTABLE_DIR_MODES: Final = (0o311, 0o300, 0o000)
ROOT_MODES: Final = (0o755, 0o700, 0o750)
LINK_TARGETS: Final = ("f", "../f", "nowhere", ".", "src", "/etc/hostname", "a/f", "../../outside")
# Times (ns) to date a path with: past either end of an int64 of nanoseconds (2262, 1677), far
# past it (2400, 9999, 1600), and before 1970. A file system keeps what it can (ext4: 1901-2446).
FAR_TIMES: Final = (
    2**63,
    13_569_465_600 * 10**9 + 1,  # 2400-01-01
    253_402_300_799 * 10**9 + 999_999_999,  # 9999-12-31T23:59:59.999999999
    -(2**63) - 1,
    -11_676_096_000 * 10**9,  # 1600-01-01
    -2_208_988_800 * 10**9,  # 1900-01-01
    -1,
)
GIT_COMMANDS: Final = (
    ("checkout", "-q", "other"),
    ("checkout", "-q", "main"),
    ("checkout", "-q", "--", "."),
    ("stash", "-q"),
    ("stash", "-q", "-u"),
    ("stash", "pop", "-q"),
    ("add", "-A"),
    ("commit", "-qam", "work"),
    ("clean", "-fdxq"),  # deletes what git ignores: the precious files a rollback brings back
)


class Generator:
    """Chooses the next step from the disk as it is now; every choice comes from one ``Random``."""

    WEIGHTS: Final = {
        "write": 12,
        "save": 3,
        "append": 4,
        "unlink": 4,
        "mkdir": 5,
        "rmtree": 2,
        "rename": 5,
        "out_and_back": 2,
        "replace_dir": 2,
        "move_in": 2,
        "swap_dirs": 2,
        "exchange": 3,
        "hardlink": 2,
        "fleeting_link": 2,
        "link_web": 2,
        "link_outside": 1,
        "write_outside": 1,
        "symlink": 3,
        "chmod": 4,
        "unreadable_file": 1,
        "unlistable_dir": 1,
        "chmod_root": 1,
        "gitignore": 4,
        "exclude": 1,
        "git": 4,
        "mkfifo": 1,
        "far_time": 2,
        "big": 1,
        "pause": 2,
        "rmtree_root": 1,
        "remake_root": 1,
        "mark": 10,
        "instant": 4,
        "rollback": 7,
        "undo": 4,
        "rows": 4,
        "edit_lines": 9,
        "revert": 5,
        "span": 8,
    }

    def __init__(self, rng: random.Random, off: Iterable[str]) -> None:
        self.rng = rng
        self.off = frozenset(off)
        off = self.off if REVERT_STEPS else self.off | {"revert", "span"}
        self.weights = {k: v for k, v in self.WEIGHTS.items() if k not in off}
        self.n = 0
        self.outside_names: list[str] = []  # files outside the tree with a hard link inside
        self.queued: list[Step] = []  # a revert set up by construction (see "span"), step by step

    def data(self) -> str:
        """A content spec (see :func:`content`): short, so step lists stay readable."""
        rng, self.n = self.rng, self.n + 1
        kind = rng.random()
        if kind < 0.1:
            return "empty"
        if kind < 0.7:
            return f"v{self.n}*{rng.randint(1, 4)}"
        if kind < 0.85:
            return f"bin{self.n}*{rng.randint(1, 64)}"
        return f"line{self.n}*{rng.randint(40, 400)}"

    def span(self, disk: Snap, files: Sequence[str]) -> Step | None:
        """A revert whose merge is known by construction: a rows file edited between two new
        marks, edited again after them — far from those lines (they merge), on the same ones
        or on a neighbour (they clash) — then the span reverted. Queued, and mixed with other
        steps as they come (one may overwrite the file: then it is just another revert)."""
        rng = self.rng
        shaped = [p for p in files if (r := rows(disk[p][2])) and len(r) >= 4]
        if not shaped:
            self.n += 1
            spec = f"rows{self.n}*{rng.randint(4, 12)}"
            return Step("write", (rng.choice(files) if files else "g.txt", spec, 0o644))
        p = rng.choice(shaped)
        k = len(rows(disk[p][2]) or ())
        first = rng.randrange(k)
        how = rng.choice(("far", "far", "same", "next"))
        far = [i for i in range(k) if abs(i - first) > 1]
        later = {"far": rng.choice(far) if far else first, "same": first, "next": min(first + 1, k - 1)}[how]
        a, b = f"m{self.n + 1}", f"m{self.n + 3}"
        self.n += 4
        self.queued = [
            Step("edit_lines", (p, (first,), self.n - 2)),
            Step("mark", (b,)),
            Step("edit_lines", (p, (later,), self.n)),
            Step("revert", (a, b, "", "markers" if rng.random() < 0.3 else "refuse")),
        ]
        return Step("mark", (a,))

    def next(self, disk: Snap, marks: Sequence[str], can_undo: bool) -> Step | None:
        rng = self.rng
        if self.queued and rng.random() < 0.75:
            return self.queued.pop(0)
        op = rng.choices(list(self.weights), weights=list(self.weights.values()))[0]
        if "rule_file_writes" in self.off:  # the ordinary operations leave rule files alone
            disk = {p: v for p, v in disk.items() if p.rpartition("/")[2] != ".gitignore"}
        dirs = [""] + sorted(p for p, v in disk.items() if v[0] == "dir" and p != ".")
        roomy = [d for d in dirs if depth(d) < 3]
        files = sorted(p for p, v in disk.items() if v[0] == "file")
        nondirs = sorted(p for p, v in disk.items() if v[0] != "dir")
        subdirs = dirs[1:]
        dir_modes = [m for m in DIR_MODES if m & 0o200 or "readonly_dirs" not in self.off]

        def new_path(names: Sequence[str]) -> str:
            d = rng.choice(roomy)
            return f"{d}/{rng.choice(names)}" if d else rng.choice(names)

        def fresh(names: Sequence[str]) -> str:
            """A new path not on disk, if a few tries find one (a link cannot be made over one)."""
            for _ in range(4):
                p = new_path(names)
                if p not in disk:
                    break
            return p

        def any_file() -> str:
            return rng.choice(files) if files and rng.random() < 0.8 else new_path(FILE_NAMES)

        match op:
            case "write" | "save":
                return Step(op, (any_file(), self.data(), rng.choice(FILE_MODES)))
            case "append" if files:
                return Step(op, (rng.choice(files), self.data()))
            case "unlink" if nondirs:
                return Step(op, (rng.choice(nondirs),))
            case "mkdir":
                return Step(op, (new_path(DIR_NAMES), rng.choice(dir_modes)))
            case "rmtree" if subdirs:
                return Step(op, (rng.choice(subdirs),))
            case "rename" if len(disk) > 1:
                src = rng.choice(sorted(p for p in disk if p != "."))
                names = DIR_NAMES if disk[src][0] == "dir" else FILE_NAMES
                dst = rng.choice(files) if disk[src][0] != "dir" and files and rng.random() < 0.3 else None
                return Step(op, (src, dst or new_path(names)))
            case "out_and_back" if subdirs:
                src = rng.choice(subdirs)
                dst = src if rng.random() < 0.5 else new_path(DIR_NAMES)
                inside = rng.choice(("", "", "f", "zz-new.txt"))
                return Step(op, (src, dst, inside))
            case "move_in":
                modes = dir_modes + ([] if "unlistable_dir" in self.off else list(UNLISTABLE_DIR_MODES))
                return Step(op, (new_path(DIR_NAMES), rng.choice(modes), self.data()))
            case "replace_dir" if len(subdirs) >= 2:
                a, b = rng.sample(subdirs, 2)
                if not (under(a, b) or under(b, a)):
                    return Step(op, (a, b, self.n))
            case "swap_dirs" if len(subdirs) >= 2:
                a, b = rng.sample(subdirs, 2)
                if not (under(a, b) or under(b, a)):
                    return Step(op, (a, b))
            case "exchange" if len(disk) > 2:
                # Two directories mostly (nested at different depths as it falls), else any two
                # paths: a file and a directory, two files, a symlink.
                anything = sorted(p for p in disk if p != ".")
                pool = subdirs if len(subdirs) >= 2 and rng.random() < 0.7 else anything
                a, b = rng.sample(pool, 2)
                if not (under(a, b) or under(b, a)):
                    return Step(op, (a, b))
            case "hardlink" if files:
                return Step(op, (rng.choice(files), new_path(FILE_NAMES)))
            case "fleeting_link" if files:
                self.n += 1
                gone = rng.choice(("rm", "rm", "rmtree", "move_out"))
                where = fresh(FILE_NAMES if gone == "rm" else DIR_NAMES)
                return Step(op, (rng.choice(files), where, self.data(), gone, self.n))
            case "link_web" if len(files) >= 2:
                src, over = rng.sample(files, 2)
                return Step(op, (src, fresh(FILE_NAMES), fresh(FILE_NAMES), over, self.data()))
            case "link_outside":
                self.n += 1
                return Step(op, (new_path(FILE_NAMES), f"hl-{self.n}", self.data()))
            case "write_outside" if self.outside_names:
                return Step(op, (rng.choice(self.outside_names), self.data()))
            case "symlink":
                return Step(op, (new_path(FILE_NAMES + DIR_NAMES), rng.choice(LINK_TARGETS)))
            case "chmod" if len(disk) > 1:
                p = rng.choice(sorted(q for q, v in disk.items() if v[0] in ("file", "dir") and q != "."))
                return Step(op, (p, rng.choice(dir_modes if disk[p][0] == "dir" else FILE_MODES)))
            case "unreadable_file" if files:
                return Step("chmod", (rng.choice(files), rng.choice(UNREADABLE_FILE_MODES)))
            case "unlistable_dir" if subdirs:
                return Step("chmod", (rng.choice(subdirs), rng.choice(UNLISTABLE_DIR_MODES)))
            case "chmod_root":
                return Step("chmod", ("", rng.choice(ROOT_MODES)))
            case "gitignore":
                where = "" if rng.random() < 0.7 else rng.choice(dirs)
                if rng.random() < 0.15:
                    return Step(op, (where, None))
                return Step(op, (where, tuple(rng.sample(PATTERNS, rng.randint(0, 4)))))
            case "exclude":
                return Step(op, (tuple(rng.sample(PATTERNS, rng.randint(0, 2))),))
            case "git":
                cmds = [
                    c
                    for c in GIT_COMMANDS
                    if not ("branch_checkout" in self.off and c[:2] == ("checkout", "-q") and c[2] != "--")
                    and not ("index_changes" in self.off and c[0] in ("add", "commit"))
                ]
                return Step(op, (rng.choice(cmds),))
            case "mkfifo":
                return Step(op, (new_path(FILE_NAMES),))
            case "far_time":  # any path, the root included; a symlink itself
                p = rng.choice([""] + sorted(q for q in disk if q != "."))
                return Step("utime", (p, rng.choice(FAR_TIMES)))
            case "pause":
                return Step(op, (rng.choice((20, 100, 200)),))
            case "rmtree_root" if len(disk) > 1:
                return Step(op)
            case "remake_root":
                name = rng.choice(("", "", *FILE_NAMES))
                return Step(op, (rng.choice(ROOT_MODES), name, self.data() if name else ""))
            case "big":
                return Step("write", (any_file(), f"big*{SIZE_CAP + 1 + rng.randint(0, 99)}", 0o644))
            case "mark":
                self.n += 1
                return Step(op, (f"m{self.n}",))
            case "instant":  # a time target between marks, with a twin mark taken then
                self.n += 1
                return Step(op, (f"t{self.n}",))
            case "rollback" if marks:
                return Step(op, (rng.choice(marks),))
            case "rows":  # a file of rows (every line names its index): line edits merge predictably
                self.n += 1
                spec = f"rows{self.n}*{rng.randint(3, 12)}"
                return Step("write", (any_file(), spec, rng.choice(FILE_MODES)))
            case "edit_lines" if files:
                shaped = [p for p in files if rows(disk[p][2])]
                p = rng.choice(shaped) if shaped and rng.random() < 0.9 else rng.choice(files)
                n = len(rows(disk[p][2]) or disk[p][2].splitlines()) or 1
                self.n += 1
                lines = tuple(sorted(rng.sample(range(n), min(n, rng.choice((1, 1, 2, 3))))))
                return Step(op, (p, lines, self.n))
            case "span" if not self.queued:
                return self.span(disk, files)
            case "revert":  # two marks, older first; a span limited to one path at times
                ordered = sorted((m for m in marks if m.startswith("m")), key=lambda m: int(m[1:]))
                if len(ordered) >= 2:  # the last span half of the time: later edits are on top of it
                    last = len(ordered) - 1
                    pair = (last - 1, last) if rng.random() < 0.5 else rng.sample(range(len(ordered)), 2)
                    a, b = sorted(pair)
                    only = ""
                    if len(disk) > 1 and rng.random() < 0.25:
                        only = rng.choice(sorted(p for p in disk if p != "."))
                    how = "markers" if rng.random() < 0.3 else "refuse"
                    return Step(op, (ordered[a], ordered[b], only, how))
            case "undo" if can_undo:
                return Step(op)
        return None

    def note(self, step: Step) -> None:
        if step.op == "link_outside":
            self.outside_names.append(step.args[1])
