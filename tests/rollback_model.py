"""The rollback contract against a model, over a real daemon (issue 8: "the test that would have
found them"). Used by ``tests/test_model_rollback.py``; runnable by hand to replay and shrink a
failure (``python tests/rollback_model.py --help``).

A seeded generator drives a real workspace — a git work tree — through what a user, an agent's
shell commands and git do to it: create, modify (in place and by atomic save), append, delete,
mkdir, rmtree, renames of files and directories, a directory moved out of the tree and back, a
directory replaced by a moved one (``mv out /elsewhere && mv out.new out``), two directories
swapped, a directory made elsewhere moved in, hard links, symlinks (dangling ones included), chmod
of files and directories (read-only ones included), ``.gitignore`` and ``.git/info/exclude`` edits
with ignored files around (``.env``, ``__pycache__/m.pyc``, ``*.log``), ``git checkout``, ``git
stash``, ``git commit``, dates far from now on any path (2400, 1600: past an int64 of
nanoseconds). Between batches it takes marks (``snapctl mark``); at random it runs
``snapctl rollback --to M --yes``, ``snapctl undo --yes`` and ``snapctl revert A..B --yes`` (judged
by the model's own three-way model: :mod:`model_revert`), and after each one it compares the
WHOLE tree — kind, permission bits, bytes, link text, the root's own mode — with the model.

The model is the rollback rules of docs/rollback.md and nothing else:

- A reference state R is what the test itself read from disk when mark M was taken, with the ignore
  rules of that moment: the ``.gitignore`` files, ``.git/info/exclude`` and git's index (tracked
  files are never ignored). "Ignored under R's rules" is decided by real git — ``git check-ignore``
  in a scratch repository holding exactly R's rule inputs — never by snapd's ignore library.
- After a rollback to R from state B, path by path: captured at R (present and not ignored, or a
  directory holding captured paths) → R's entry; present at R but ignored then → untouched (B's);
  absent at R → absent, unless ignored: by both R's rules and B's → untouched, by only one of them
  → either (see :func:`expected`); a directory that must go but still holds paths that stay is
  left (success); inside a directory the daemon could not list at R → as at R, or left and listed.
- ``undo`` is a rollback to the state before the last rollback (or undo) that changed something;
  every path that rollback's plan wrote or deleted (its ``ops``, applied or then kept) was first
  held by its pre-rollback mark, whatever the rules, so each of those comes back exactly. With
  nothing to undo, it fails and changes nothing.
- Exact or loud: exit 0 means the tree IS the expectation. A non-zero exit is accepted only when
  every differing path is named in the reply (``kept``, ``conflicts``, ``left``, or the error
  message) — a path counts as named when it, an ancestor or a descendant is listed — and, with
  the tree exactly right, only when it names a path snapd cannot capture or one with two allowed
  outcomes.

Reproducing: the seed is printed at the start and with every failure, together with the numbered
step list and the same steps as JSON: ``python tests/rollback_model.py 'JSON'`` replays them on a
fresh daemon (``--as-nobody``: as uid 65534), ``--shrink`` minimises them (delta debugging against
a real daemon, keeping the same kind of failure at the same path).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from e2e_helpers import NOBODY, Daemon, OtherUser, Snap, base_env, other_user, snapshot, start_daemon
from model_generator import OFF_UNTIL_FIXED, REVERT_STEPS, Generator
from model_oracle import GitOracle, Ref, Reply, Rules, diff_lines, expected, uncapturable, unlisted_dirs
from model_revert import RevertReply, expect, judge
from model_steps import SIZE_CAP, Step, World, dump_steps, git_env, load_steps, make_repo, under

from snapd import timeref

DEFAULT_SEED: Final = 20260508
DEFAULT_ROUNDS: Final = 18  # 12 until revert steps joined (issue 34): as many rollbacks as before
DEFAULT_STEPS: Final = 100


@dataclass
class Failure:
    """A broken promise: the seed of its round, the step that found it, the steps up to it."""

    seed: str
    step_no: int
    steps: list[Step]
    what: str

    def signature(self) -> tuple[str, str]:
        """What kind of broken promise, and at which path: a shrunk run must keep both."""
        kind = re.search(
            r"exited 0 but|without naming|without listing|although the tree is exactly|nothing to undo"
            r"|failed",
            self.what,
        )
        path = re.search(r"^    (\S+): got", self.what, re.M)
        return (kind.group(0) if kind else self.what[:40], path.group(1) if path else "")

    def report(self) -> str:
        lines = [f"seed {self.seed}: step {self.step_no} ({self.steps[self.step_no].shell()}): {self.what}"]
        lines.append("steps after the fixed set-up (`python tests/rollback_model.py JSON` replays them):")
        lines += [f"  {i:3d}  {s.shell()}" for i, s in enumerate(self.steps[: self.step_no + 1])]
        lines.append("json: " + dump_steps(self.steps[: self.step_no + 1]))
        return "\n".join(lines)


@dataclass
class Tally:
    """What the run exercised, so a run that silently did nothing is visible."""

    counts: dict[str, int] = field(default_factory=dict)

    def add(self, what: str, n: int = 1) -> None:
        self.counts[what] = self.counts.get(what, 0) + n


class Round:
    """One workspace, driven through a fixed list of steps (generated, or replayed)."""

    def __init__(self, lab: Lab, name: str, tally: Tally) -> None:
        self.lab, self.d, self.oracle, self.tally = lab, lab.d, lab.oracle, tally
        self.log_start = len(self.d.log())
        base = lab.top / name
        for p in (base, base / "ws", base / "outside"):
            lab.must(os.mkdir, p)
        self.world = World(base / "ws", base / "outside", git_env(self.d.env))
        lab.must(make_repo, self.world)
        self.root = self.world.root
        self.d.ctl("watch", self.root, cwd="/")
        self.refs: dict[str, Ref] = {}
        self.twins: dict[str, str] = {}  # an instant's label -> the id of the mark taken with it
        self.last_pre: Ref | None = None  # the state before the last rollback that changed something
        self.last_changed: bool | None = None  # whether the last rollback or undo changed anything
        self.lost = False  # the root was deleted (or re-made) and no rollback has adopted it yet
        self.ignored_cache: dict[str, set[str]] = {}  # a mark's id -> the paths its rules ignore
        self.disk = self.read()
        self.take_mark("m0")

    def read(self) -> Snap:
        """The tree with the root's own entry; a root that is gone reads as nothing at all."""
        if not os.path.lexists(self.root):
            return {}
        return snapshot(self.root, with_root=True)

    def ctl(self, *args: str) -> subprocess.CompletedProcess[bytes]:
        cut = args.index("--") if "--" in args else len(args)  # paths after "--" stay last
        opts, paths = args[:cut], args[cut:]
        if not os.path.isdir(self.root):  # gone: named with -w, from elsewhere
            return self.d.ctl(*opts, "-w", self.root, "--json", *paths, cwd="/", timeout=120, check=False)
        return self.d.ctl(*opts, "--json", *paths, cwd=self.root, timeout=120, check=False)

    def take_mark(self, label: str) -> str | None:
        cp = self.ctl("mark", label)
        if self.lost:  # refused until a rollback brings the root back under the history
            self.tally.add("marks refused: the root gone or re-made")
            if cp.returncode == 0:
                return f"snapctl mark {label} exited 0 on a root that is gone or re-made: {cp.stdout!r}"
            return None
        if cp.returncode != 0:
            return f"snapctl mark {label} failed: rc={cp.returncode} {cp.stdout!r} {cp.stderr!r}"
        self.disk = self.read()
        rules, unlisted = Rules.read(self.root, self.disk), unlisted_dirs(self.disk, self.lab.uid)
        self.refs[label] = Ref(json.loads(cp.stdout)["id"], self.disk, rules, unlisted=unlisted)
        self.tally.add("marks")
        return None

    def take_instant(self, label: str) -> str | None:
        """An instant between marks (a time target, ``@T``): everything done so far captured (a
        barrier, through ``diff``), then T, read like a mark; and a mark taken right then, its
        twin, which a rollback to T must equal (same plan, same exit)."""
        cp = self.ctl("diff", self.refs["m0"].name)
        if self.lost:  # no history to take an instant of until a rollback brings the root back
            self.tally.add("instants refused: the root gone or re-made")
            if cp.returncode == 0:
                return f"snapctl diff exited 0 on a root that is gone or re-made: {cp.stdout!r}"
            return None
        if cp.returncode != 0:
            return f"snapctl diff (to capture before {label}) failed: rc={cp.returncode} {cp.stdout!r}"
        instant = time.time_ns()
        time.sleep(0.002)  # what follows is captured after T
        self.disk = self.read()
        rules, unlisted = Rules.read(self.root, self.disk), unlisted_dirs(self.disk, self.lab.uid)
        self.refs[label] = Ref(timeref.wire(instant), self.disk, rules, unlisted=unlisted)
        cp = self.ctl("mark", f"{label}-twin")
        if cp.returncode != 0:
            return f"snapctl mark {label}-twin failed: rc={cp.returncode} {cp.stdout!r} {cp.stderr!r}"
        self.twins[label] = json.loads(cp.stdout)["id"]
        self.tally.add("instants")
        return None

    def same_as_twin(self, label: str) -> str | None:
        """``rollback --to @T`` plans exactly what the rollback to the mark taken at T plans."""

        def planned(ref: str) -> tuple[int, Any]:
            cp = self.ctl("rollback", "--to", ref, "--dry-run")
            try:
                r = json.loads(cp.stdout)
            except ValueError:
                return cp.returncode, cp.stdout[-500:]
            return cp.returncode, {k: r.get(k) for k in ("plan", "lines", "error")}

        got, want = planned(self.refs[label].name), planned(self.twins[label])
        self.tally.add("time targets compared with their twin mark")
        if got != want:
            return f"rollback to {label} (@T) plans\n{got}\nbut to the mark taken then\n{want}"
        return None

    def step(self, s: Step) -> str | None:
        """Apply one step; a broken promise comes back as text."""
        match s.op:
            case "mark":
                return self.take_mark(s.args[0])
            case "instant":
                return self.take_instant(s.args[0])
            case "rollback":
                ref = self.refs.get(s.args[0])
                if ref is None:  # a replay without that mark's step
                    return None
                if s.args[0] in self.twins and (err := self.same_as_twin(s.args[0])):
                    return err
                what = "time rollback" if s.args[0] in self.twins else "rollback"
                return self.check(ref, self.ctl("rollback", "--to", ref.name, "--yes"), what)
            case "undo":
                return self.check(self.last_pre, self.ctl("undo", "--yes"), "undo")
            case "revert":
                return self.revert(*s.args)
        err = self.lab.act(self.world.apply, s)
        self.tally.add("failed user commands" if err else f"op {s.op}")
        self.lost = self.lost or (err is None and s.op in ("rmtree_root", "remake_root"))
        self.disk = self.read()
        return None

    def ignored_at(self, ref: Ref) -> set[str]:
        """The paths of ``ref.disk`` its own rules ignore (asked of git once per mark)."""
        if ref.name not in self.ignored_cache:
            self.ignored_cache[ref.name] = self.oracle.ignored(ref.rules, ref.disk)
        return self.ignored_cache[ref.name]

    def revert(self, a: str, b: str, only: str, how: str) -> str | None:
        """``snapctl revert A..B --yes``, judged by the model's own three-way model
        (:mod:`model_revert`): exact (exit 0, the tree is the model), refused (exit 13, nothing
        written, every clash listed with its hunks) or loud (exit 10, what differs named)."""
        ra, rb = self.refs.get(a), self.refs.get(b)
        if ra is None or rb is None:  # a replay without that mark's step
            return None
        if self.lost:  # no workspace to revert in until a rollback brings the root back
            self.tally.add("reverts skipped: the root gone or re-made")
            return None
        before, uid, ig = self.disk, self.lab.uid, self.oracle.ignored
        rules = Rules.read(self.root, before)
        doubt = ig(rules, before) | ig(rules, ra.disk) | ig(rules, rb.disk) | uncapturable(before, uid)
        everything = ra.disk.keys() | rb.disk.keys() | before.keys()
        for ref in (ra, rb):
            doubt |= self.ignored_at(ref) | uncapturable(ref.disk, uid)
            doubt |= {p for p in ref.disk if ref.unknown(p)}
            # below an ignored directory there at A or B: what it held then is not known (a
            # mark records the names of the top-most ignored entries, not what is in them)
            hidden = [q for q in self.ignored_at(ref) if ref.disk[q][0] == "dir"]
            doubt |= {p for p in everything if any(under(p, q) for q in hidden)}
        markers = how == "markers"
        ex = expect(ra.disk, rb.disk, before, doubt, only, markers)
        opts = ["--conflicts=markers"] if markers else []
        cp = self.ctl("revert", f"{ra.name}..{rb.name}", "--yes", *opts, *(["--", only] if only else []))
        after = self.read()
        self.disk = after
        reply = RevertReply.parse(cp.stdout)
        if cp.returncode == 6 and only and after == before and (only in doubt or only not in before):
            # `-- PATH` naming what snapd does not capture (ignored, not capturable): not_found,
            # as for a rollback (a revert's span limited to it holds nothing either)
            self.tally.add("reverts limited to a path snapd does not capture: not found")
            return None
        verdict, broken = judge(ex, before, after, cp.returncode, reply, markers)
        self.tally.add("reverts")
        self.tally.add(f"reverts {verdict}")
        if reply.markers:
            self.tally.add("reverts with markers written")
        for what, n in (("paths changed in spans", ex.spans), ("of them not judged", ex.unjudged),
                        ("rows merges predicted", ex.rows_merged), ("clashes predicted", len(ex.clashes))):
            self.tally.add(f"revert {what}", n)
        self.last_changed = after != before
        if after != before:
            self.tally.add("reverts that changed something")
            changed = {p for p in before.keys() | after.keys() if before.get(p) != after.get(p)}
            self.last_pre = Ref("pre-revert", before, rules, frozenset(changed | reply.planned),
                                unlisted_dirs(before, uid))
        if broken:
            out = f"exit {cp.returncode}; stdout {cp.stdout[-1500:]!r}; stderr {cp.stderr[-800:]!r}"
            return f"{broken}\n{out}"
        return None

    def workspace_state(self) -> str:
        st = json.loads(self.d.ctl("status", "--json", cwd="/").stdout)
        return str(next(w for w in st["workspaces"] if w["root"] == str(self.root)).get("state"))

    def check(self, ref: Ref | None, cp: subprocess.CompletedProcess[bytes], what: str) -> str | None:
        before, after = self.disk, self.read()
        self.disk = after
        if self.lost:
            self.tally.add(f"{what}s of a root gone or re-made")
            self.lost = self.workspace_state() == "error"  # adopted unless refused before it
        if "." not in before and "." in after:  # the root was gone: made (0700) before the mark
            before = {".": ("dir", 0o700)}
        reply = Reply.parse(cp.stdout)
        out = reply_summary(cp)
        if ref is None:  # nothing to undo: fails, changes nothing
            self.tally.add("undos with nothing to undo")
            self.last_changed = False
            if after != before or cp.returncode == 0:
                return f"undo with nothing to undo: {out}\n{diff_lines(after, before)}"
            return None
        rules_before = Rules.read(self.root, before)
        ig = self.oracle.ignored
        ignored_at_ref, ignored_then = ig(ref.rules, ref.disk), ig(ref.rules, before)
        want = expected(ref, before, after, ignored_at_ref, ignored_then, ig(rules_before, before))
        differ = sorted(p for p in want.keys() | after.keys() if after.get(p) not in want.get(p, {None}))
        self.tally.add(f"{what}s")
        self.last_changed = after != before
        if after != before:
            self.tally.add(f"{what}s that changed something")
            # Held: every path its plan writes or deletes, whether or not the write was done (an
            # ignored directory the plan deletes but keeps, holding what cannot be captured, is
            # held all the same: undo brings it back if it goes), and every path that changed.
            changed = {p for p in before.keys() | after.keys() if before.get(p) != after.get(p)}
            unlisted = unlisted_dirs(before, self.lab.uid)
            held = frozenset(changed | reply.planned)
            self.last_pre = Ref(f"pre-{what}", before, rules_before, held, unlisted)
        if cp.returncode == 0 and differ:
            return f"{what} exited 0 but the tree is not the model:\n{diff_lines(after, want)}\n{out}"
        # (a path R's rules ignore is never touched, so it needs no listing, unlisted or not)
        never_touched = (ignored_at_ref | ignored_then) - ref.held
        unlisted = [
            p
            for p in before.keys() | after.keys()
            if ref.unknown(p) and after.get(p) != ref.disk.get(p) and not reply.names(p, self.root)
            and not (p in never_touched and after.get(p) == before.get(p))
        ]
        if unlisted:
            return (
                f"{what} left paths inside a directory unlisted at the mark without listing them:\n"
                f"{diff_lines(after, {p: frozenset({ref.disk.get(p)}) for p in unlisted}, unlisted)}\n{out}"
            )
        if cp.returncode != 0:
            silent = [p for p in differ if not reply.names(p, self.root)]
            if silent:
                return (
                    f"{what} exited {cp.returncode} without naming every path that differs; "
                    f"unnamed:\n{diff_lines(after, want, silent)}\n{out}"
                )
            # Exact, yet loud: right only about a path where the model allows more than one outcome
            # (snapd would have changed it, could not hold it first, and says so), or one that
            # snapd cannot capture, then or now (it cannot know the tree is right there). (A mark
            # records the names of the ignored entries present, so a non-directory that R's rules
            # ignore as a directory is decided exactly: no longer a reason to be loud.)
            blind = uncapturable(ref.disk, self.lab.uid) | uncapturable(before, self.lab.uid)
            # (or one inside a directory snapd could not list at R: it cannot know what is there)
            defensible = [
                p for p in reply.blocking()
                if len(want.get(p, ())) > 1 or any(under(q, p) for q in blind) or ref.unknown(p)
            ]
            if not differ and not defensible:
                return f"{what} exited {cp.returncode} although the tree is exactly the model: {out}"
            self.tally.add(f"loud because: {loud_reason(reply)}")
            if not differ:
                self.tally.add(f"{what}s exact, loud about a path that could have changed")
                return None
            self.tally.add(f"{what}s loud and accepted")
        return None


def loud_reason(reply: Reply) -> str:
    """Why a rollback was loud, as one class (the report counts them: a high loud rate says
    little unless it says why)."""
    reasons = " ".join(r for r in reply.listed.values() if not r.startswith("left:")) or reply.message
    for needle, label in (
        ("size cap", "a file over the size cap"),
        ("special file", "a special file (FIFO)"),
        ("unreadable directory", "a directory it cannot list"),
        ("cannot be listed", "a directory it cannot list"),
        ("unreadable", "an unreadable file"),
        ("conflicts:", "a conflict"),
    ):
        if needle in reasons:
            return label
    return reasons[:60] or "no reason given"


def reply_summary(cp: subprocess.CompletedProcess[bytes]) -> str:
    """The parts of a rollback reply that matter to a reader: exit, ok, counts, what it listed."""
    try:
        r = json.loads(cp.stdout)
    except ValueError:
        return f"exit {cp.returncode}; stdout {cp.stdout[-800:]!r}; stderr {cp.stderr[-800:]!r}"
    keep = ("ok", "applied", "conflicts", "kept", "left", "error", "pre_rollback")
    return f"exit {cp.returncode}; reply " + json.dumps({k: r[k] for k in keep if k in r})


# == running ======================================================================================


@dataclass(frozen=True)
class Settings:
    """One run: the seed, its size, and which known failures are kept out of it."""

    seed: str
    rounds: int
    steps: int
    off: frozenset[str] = frozenset(OFF_UNTIL_FIXED)

    @staticmethod
    def from_env(env: dict[str, str]) -> Settings:
        raw = env.get("SNAPD_MODEL_SEED", "") or str(DEFAULT_SEED)
        seed = str(time.time_ns() % 10**9) if raw == "random" else raw
        rounds = int(env.get("SNAPD_MODEL_ROUNDS", DEFAULT_ROUNDS))
        cfg = Settings(seed, rounds, int(env.get("SNAPD_MODEL_STEPS", DEFAULT_STEPS)))
        return cfg.strict() if env.get("SNAPD_MODEL_STRICT") == "1" else cfg

    def strict(self) -> Settings:
        return Settings(self.seed, self.rounds, self.steps, frozenset())

    def describe(self) -> str:
        off = ", ".join(f"{k} ({OFF_UNTIL_FIXED[k]})" for k in sorted(self.off)) or "none"
        return (
            f"SNAPD_MODEL_SEED={self.seed} SNAPD_MODEL_ROUNDS={self.rounds} SNAPD_MODEL_STEPS={self.steps}"
            f"{' SNAPD_MODEL_STRICT=1' if not self.off else ''}; off until fixed (issue 8 point): {off}"
            f"; revert steps {'on' if REVERT_STEPS and 'revert' not in self.off else 'off'}"
        )


class Lab:
    """A daemon, its workspaces under ``top`` and the git oracle; the daemon, the CLI and every file
    operation run as ``who`` (another uid), or as this process when ``who`` is None. ``top`` is the
    caller's to remove."""

    def __init__(self, top: Path, who: OtherUser | None = None) -> None:
        self.top, self.who = top, who
        self.uid = who.uid if who else os.getuid()
        home = top / "home" / "snapd"
        self.store_dir = home / "store"
        self.must(os.makedirs, home, 0o700)
        self.must((home / "config.toml").write_text, f"size_cap = {SIZE_CAP}\n")
        if who is not None:
            self.d = who.start_daemon(home)
        else:
            env = base_env(home)
            env["HOME"] = str(top / "home")
            self.d = start_daemon(home, env, timeout=60)
        self.oracle = GitOracle(top / "oracle", git_env(self.d.env))
        self.rounds = 0

    def act(self, fn: Callable[..., object], *args: Any) -> str | None:
        """``fn(*args)`` as the lab's user: the error it raised as text, like a failed command."""
        if self.who is not None:
            return self.who.do(fn, *args)
        try:
            fn(*args)
        except (OSError, subprocess.CalledProcessError) as exc:
            return f"{type(exc).__name__}: {exc}"
        return None

    def must(self, fn: Callable[..., object], *args: Any) -> None:
        err = self.act(fn, *args)
        assert err is None, f"set-up step {fn.__name__}{args!r} as uid {self.uid}: {err}"

    def round(self, tally: Tally) -> Round:
        self.rounds += 1
        return Round(self, f"ws{self.rounds}", tally)

    def replay(self, steps: Sequence[Step], tally: Tally | None = None) -> Failure | None:
        rd = self.round(tally or Tally())
        for i, s in enumerate(steps):
            what = rd.step(s)
            if what:
                return Failure("replay", i, list(steps), what + log_excerpt(self.d, rd.log_start))
        return None

    def close(self) -> int:
        """Stop the daemon; its exit code."""
        return self.d.stop()

    def __enter__(self) -> Lab:
        return self

    def __exit__(self, *exc: object) -> None:
        if self.d.alive():
            self.close()


def run_round(lab: Lab, tally: Tally, cfg: Settings, r: int) -> Failure | None:
    """Generate and run ``cfg.steps`` steps in a fresh workspace; stop at the first broken promise."""
    off = cfg.off - {"readonly_dirs"} if lab.uid == 0 else cfg.off  # root ignores modes
    gen = Generator(random.Random(f"{cfg.seed}/{r}"), off)
    rd = lab.round(tally)
    steps: list[Step] = []
    while len(steps) < cfg.steps:
        s = gen.next(rd.disk, sorted(rd.refs), "undo_after_noop" not in cfg.off or rd.last_changed is True)
        if s is None:
            continue
        gen.note(s)
        steps.append(s)
        what = rd.step(s)
        if what:
            return Failure(f"{cfg.seed}/{r}", len(steps) - 1, steps, what + log_excerpt(lab.d, rd.log_start))
    return None


def log_excerpt(d: Daemon, since: int = 0) -> str:
    """The daemon's warnings and errors after byte ``since`` of its log (debug lines would drown them)."""
    lines = [
        ln for ln in d.log()[since:].splitlines() if '"level": "warning"' in ln or '"level": "error"' in ln
    ]
    return ("\n--- daemon warnings and errors ---\n" + "\n".join(lines[-8:])) if lines else ""


def shrink(run: Callable[[list[Step]], Failure | None], steps: list[Step], first: Failure) -> list[Step]:
    """Delta debugging: drop chunks of steps while the run still fails the same way."""
    chunk = max(1, len(steps) // 2)
    while chunk >= 1:
        i, progress = 0, False
        while i < len(steps):
            trial = steps[:i] + steps[i + chunk :]
            f = run(trial)
            if f is not None and f.signature() == first.signature():
                steps = trial[: f.step_no + 1]
                progress = True
                print(f"  shrink: {len(steps)} steps", file=sys.stderr)
            else:
                i += chunk
        if not progress:
            chunk //= 2
    return steps


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="Replay or shrink a failing step list of the rollback model.")
    p.add_argument("steps", help="a JSON step list (the 'json:' line of a failure), or a file holding it")
    p.add_argument("--as-nobody", action="store_true", help="daemon and file operations as uid 65534")
    p.add_argument("--shrink", action="store_true", help="minimise the steps while the failure stays")
    args = p.parse_args(argv)
    text = Path(args.steps).read_text() if os.path.exists(args.steps) else args.steps
    steps = load_steps(text)
    top = Path(tempfile.mkdtemp(prefix="snapd-model-"))  # pytest's temp root is 0700: not enterable
    try:
        with Lab(top, other_user(NOBODY, top) if args.as_nobody else None) as lab:
            first = lab.replay(steps)
            if first is None:
                print("no failure")
                return 0
            print(first.report())
            if args.shrink:
                small = shrink(lab.replay, steps[: first.step_no + 1], first)
                f = lab.replay(small)
                print("\nshrunk:\n" + (f.report() if f else "(no longer fails)"))
            return 1
    finally:
        shutil.rmtree(top, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
