"""The rollback contract against the model of :mod:`rollback_model` (issue 8), on a real daemon,
as root and as uid 65534.

- ``test_rollback_is_exact_or_loud_against_the_model``: the seeded randomized run, its own CI
  tier (marker ``model``): a fixed number of rounds and steps, so its time is known
  (docs/reliability.md); the seed is printed at the start and with every failure.
- ``test_scenario``: fixed step lists through the same executor and oracle, in the core tier —
  the cases random runs reach rarely, and the minimal sequence of every failure the random run
  found. One that fails on the current code for a reason issue 8 lists is ``xfail(strict=True)``
  with the point: when its fix lands the scenario passes, the xfail turns red, and the marker
  goes.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Iterator

import pytest
from e2e_helpers import User, myself, need, nobody
from rollback_model import Lab, Settings, Step, Tally, run_round


@pytest.fixture(params=["root", "uid65534"])
def user(request: pytest.FixtureRequest) -> Iterator[User]:
    if request.param == "root":
        if os.getuid() != 0:
            need("the root variant of the model test needs root")
        yield myself()
    else:
        yield nobody()


@pytest.mark.model
@pytest.mark.timeout(900)
def test_rollback_is_exact_or_loud_against_the_model(user: User) -> None:
    cfg = Settings.from_env(dict(os.environ))
    print(f"rollback model as uid {user.uid}: {cfg.describe()}", file=sys.stderr)
    tally = Tally()
    failures = []
    t0 = time.monotonic()
    with Lab(user) as lab:
        for r in range(cfg.rounds):
            f = run_round(lab, tally, cfg, r)
            if f is not None:
                failures.append(f)
                print(f"\nFAILURE in round {r}:\n{f.report()}", file=sys.stderr)
        code = lab.close()
    took = time.monotonic() - t0
    counts = dict(sorted(tally.counts.items()))
    summary = f"{cfg.rounds} rounds x {cfg.steps} steps as uid {user.uid} in {took:.1f}s: {counts}"
    print(summary, file=sys.stderr)
    assert not failures, (
        f"{len(failures)} of {cfg.rounds} rounds broke the contract ({cfg.describe()}):\n\n"
        + "\n\n".join(f.report() for f in failures)
    )
    assert code == 0, "the daemon did not exit cleanly"
    assert tally.counts.get("rollbacks that changed something", 0) > 0, summary
    assert tally.counts.get("undos that changed something", 0) > 0, summary


# == fixed scenarios ==============================================================================


def gi(*patterns: str) -> Step:
    """The root .gitignore holds ``patterns`` (none: it is removed)."""
    return Step("gitignore", ("", patterns or None))


def write(path: str, spec: str = "v1*1", mode: int = 0o644) -> Step:
    return Step("write", (path, spec, mode))


MARK, UNDO = Step("mark", ("m1",)), Step("undo")
BACK = Step("rollback", ("m1",))
BACK_TO_START = Step("rollback", ("m0",))  # m0: the mark taken right after the set-up

# name -> (steps, why it fails on the current code — the issue-8 point — or "" if it passes)
SCENARIOS: dict[str, tuple[list[Step], str]] = {
    # -- the cases of the earlier hypothesis machine -------------------------------------------
    # A directory created since M that still holds an ignored file is left: success, exit 0.
    "dir-holding-ignored": (
        [gi("*.log"), MARK, Step("mkdir", ("a", 0o755)), write("a/y.log"), write("a/f"), BACK, UNDO],
        "point 12",
    ),
    # Captured at M, ignored now with other content: M's content comes back (the pre-rollback
    # mark holds it, whatever today's rules), and undo returns the newer content.
    "ignored-now-captured-at-m": (
        [gi(), write("b.log", "v1*1"), MARK, gi("*.log"), write("b.log", "v2*2"), BACK, UNDO, UNDO],
        "point 4: the pre-rollback mark does not hold what it writes when ignored now",
    ),
    # Ignored at M, captured now: it existed at M, so it is never deleted.
    "captured-now-ignored-at-m": (
        [gi("*.log"), write("b.log", "v1*1"), MARK, gi("build/"), write("b.log", "v2*2"), BACK, UNDO],
        "point 4",
    ),
    # A directory ignored now that M captured, with other content: M's content comes back.
    "ignored-dir-captured-at-m": (
        [
            gi(),
            Step("mkdir", ("build", 0o755)),
            write("build/x", "v1*1"),
            MARK,
            gi("build/"),
            write("build/x", "v2*1"),
            write("build/f", "v3*1"),
            BACK,
            UNDO,
        ],
        "point 4: the pre-rollback mark does not hold what it writes when ignored now",
    ),
    # A directory replaced by a file: the directory and its file come back.
    "dir-replaced-by-file": (
        [
            Step("mkdir", ("a", 0o755)),
            write("a/x"),
            MARK,
            Step("rmtree", ("a",)),
            write("a", "v2*1"),
            BACK,
            UNDO,
        ],
        "",
    ),
    # A symlink named like a dir-only pattern is not a directory: git does not ignore it, so it is
    # captured, and a rollback to before it existed removes it.
    "symlink-named-like-an-ignored-dir": (
        [gi("build/"), Step("mkdir", ("a", 0o755)), MARK, Step("symlink", ("build", "a")), BACK, UNDO],
        "",
    ),
    # Type changes both ways, a dangling and an absolute symlink, modes of files and directories.
    "types-and-modes": (
        [
            gi(),
            Step("mkdir", ("a", 0o755)),
            write("a/x"),
            Step("symlink", ("c", "/etc/passwd")),
            write("b.log", "v2*1"),
            MARK,
            Step("rmtree", ("a",)),
            write("a", "v3*1"),
            Step("unlink", ("c",)),
            Step("mkdir", ("c", 0o755)),
            Step("symlink", ("c/f", "nowhere")),
            Step("chmod", ("b.log", 0o755)),
            Step("chmod", ("src", 0o555)),
            BACK,
            UNDO,
            UNDO,
        ],
        "",
    ),
    # -- the minimal sequences of what the randomized run found (docs/reliability.md) -----------
    # A directory that takes the place of one moved away: the watches of the new one are lost.
    "dir-replaced-by-a-moved-one": (
        [
            Step("mkdir", ("pkg", 0o755)),
            MARK,  # pkg is watched
            Step("replace_dir", ("src", "pkg", 1)),  # mv src $OUT/old-1 && mv pkg src
            Step("pause", (200,)),  # the move out is resolved as a deletion (after 50 ms)
            write("src/new.txt"),
            Step("mark", ("m2",)),
            Step("rmtree", ("src",)),
            Step("rollback", ("m2",)),
        ],
        "point 1",
    ),
    # A directory moved out of the tree and back: what is made in it afterwards is never captured.
    "dir-moved-out-and-back": (
        [
            Step("out_and_back", ("src", "src", "zz-new.txt")),
            MARK,
            Step("mkdir", ("src/a", 0o500)),
            Step("mark", ("m2",)),
            Step("rmtree", ("src",)),
            Step("rollback", ("m2",)),
        ],
        "point 1",
    ),
    # Two directories swapped (one of them moved in from outside, into an ignored directory) across
    # a rollback and its undo: what is written in the swapped directory afterwards is not captured.
    "dirs-swapped-around-an-undo": (
        [
            Step("move_in", ("src/__pycache__/build", 0o500, "bin1*58")),
            Step("mkdir", ("build", 0o700)),
            MARK,
            Step("mkdir", ("src/src", 0o555)),
            BACK,
            Step("swap_dirs", ("src/__pycache__/build", "build")),
            Step("swap_dirs", ("build/sub", "src")),
            UNDO,
            Step("mark", ("m2",)),
            write("build/sub/app.py", "v5*1"),
            Step("rollback", ("m2",)),
        ],
        "point 1 (by its symptom: a directory took the place of one just moved away)",
    ),
    # Written through another name of the same inode: the mark keeps the stale bytes.
    "hard-link-written-through-the-other-name": (
        [Step("hardlink", ("README", "g.txt")), write("g.txt", "line8*291"), BACK_TO_START],
        "point 2",
    ),
    # The other name is outside the tree: written there, no event inside.
    "hard-link-to-outside-written-outside": (
        [
            Step("link_outside", ("g.txt", "hl-1", "v3*3")),
            MARK,
            write("keep.log", "v16*2", 0o400),
            BACK,
            Step("write_outside", ("hl-1", "bin18*51")),
            UNDO,
        ],
        "point 2",
    ),
    # An ignored file that M held, after the rules stopped ignoring it: deleted by the rollback.
    "ignored-at-m-unignored-now": (
        [gi("__pycache__/"), BACK_TO_START],
        "point 4",
    ),
    # A file the rollback recreated, ignored by the index's rules by then: undo leaves it.
    "recreated-file-untracked-since": (
        [MARK, Step("unlink", ("keep.log",)), Step("git", (("commit", "-qam", "work"),)), BACK, UNDO],
        "point 4",
    ),
    # A FIFO and a file over the size cap created after M: not listed, survive with exit 0.
    "uncapturable-created-after-m": (
        [Step("mkfifo", ("m.pyc",)), write("g.txt", f"big*{8192 + 10}"), BACK_TO_START],
        "point 5",
    ),
    # The root's own mode.
    "root-mode": ([Step("chmod", ("", 0o750)), MARK, Step("chmod", ("", 0o700)), BACK], "point 6"),
    # The same rollback twice (the second changes nothing), then undo: back to before the first.
    "undo-after-a-repeated-rollback": (
        [write("README", "v21*1"), BACK_TO_START, BACK_TO_START, UNDO],
        "point 9",
    ),
    # An ignored directory at M replaced by a symlink (a dir-only pattern does not match it): the
    # path existed at M and M's rules ignored it, so it is never deleted (issue 8, "One rule").
    "ignored-dir-at-m-now-a-symlink": (
        [
            Step("rmtree", ("src/__pycache__",)),
            Step("symlink", ("src/__pycache__", "nowhere")),
            BACK_TO_START,
        ],
        "found by the model: breaks the rule that a path M's rules ignored is never touched",
    ),
}

# A file over the size cap at M (so M holds no bytes for it), smaller now: M cannot be restored, so
# the rollback must say so (kept, non-zero exit); it deletes the file instead, as if it had not
# existed at M.
SCENARIOS["over-the-cap-at-m"] = (
    [write("g.txt", f"big*{8192 + 4}"), MARK, write("g.txt", "v2*1"), BACK],
    "found by the model: a path absent from M because it could not be captured is deleted",
)

# Scenarios that need another uid (root ignores modes).
AS_NOBODY = {"readonly-parent-of-a-left-dir", "unlistable-dir-at-m"}
# A directory moved in while unlistable (mode 311) is stored as empty: its files go at rollback.
SCENARIOS["unlistable-dir-at-m"] = (
    [
        Step("move_in", ("pkg", 0o311, "v1*1")),
        MARK,
        Step("chmod", ("pkg", 0o755)),
        write("pkg/h", "v2*1"),
        BACK,
    ],
    "point 3",
)
# A directory left because it holds an ignored file, inside a read-only new directory: the tree is
# right, but the rollback tries to delete it, fails on the read-only parent and exits 10.
SCENARIOS["readonly-parent-of-a-left-dir"] = (
    [
        Step("mkdir", ("a", 0o755)),
        Step("mkdir", ("pkg", 0o750)),
        Step("rename", ("a", "pkg/out")),
        Step("rename", (".env", "pkg/out/x.log")),
        Step("chmod", ("pkg", 0o555)),
        BACK_TO_START,
    ],
    "points 10 and 12",
)


class ContractBroken(Exception):
    """The model found a broken promise (anything else failing in a scenario is a plain failure)."""


def _param(name: str) -> object:
    known = SCENARIOS[name][1]
    if known:
        xfail = pytest.mark.xfail(strict=True, raises=ContractBroken, reason=f"issue 8: {known}")
        return pytest.param(name, marks=xfail)
    return name


@pytest.mark.timeout(60)
@pytest.mark.parametrize("name", [_param(n) for n in sorted(SCENARIOS)])
def test_scenario(name: str) -> None:
    steps, _ = SCENARIOS[name]
    tally = Tally()
    with Lab(nobody() if name in AS_NOBODY else myself()) as lab:
        f = lab.replay(steps, frozenset(), tally)  # no allowances: the xfail says what is known
    assert "failed user commands" not in tally.counts, f"a step of the scenario itself failed: {tally.counts}"
    if f is not None:
        raise ContractBroken(f.report())
    assert any(k.startswith(("rollbacks that", "undos that")) for k in tally.counts), tally.counts
