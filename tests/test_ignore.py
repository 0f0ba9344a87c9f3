"""Ignore rules: pure decisions first, then loading from disk, then git as the oracle."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest
from e2e_helpers import unavailable
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from snapd.capture.git import HeadCache, find_repo, git_head, git_toplevel, git_tracked_files
from snapd.capture.ignore import IgnoreRules, RuleInputs

pytestmark = pytest.mark.timeout(120)

HAVE_GIT = shutil.which("git") is not None


@pytest.fixture
def _git() -> None:
    if not HAVE_GIT:
        unavailable("git is not installed: these tests compare with git check-ignore")


needs_git = pytest.mark.usefixtures("_git")


def rules(gitignores: Mapping[bytes, bytes] | None = None, **kwargs: object) -> IgnoreRules:
    files = dict(gitignores or {})
    return IgnoreRules(gitignore=files.get, **kwargs)  # type: ignore[arg-type]


# --- pure ------------------------------------------------------------------------------------


def test_nested_gitignore_and_negation() -> None:
    r = rules({b"": b"*.log\n", b"sub": b"!keep.log\n"})
    assert r.is_ignored(b"x.log")
    assert r.reason(b"x.log") == "gitignore"
    assert r.is_ignored(b"sub/x.log")
    assert not r.is_ignored(b"sub/keep.log")
    assert not r.is_ignored(b"sub/deeper/keep.log")  # no slash: any depth below sub/
    assert r.is_ignored(b"keep.log")  # sub's rules do not apply above it
    assert not r.is_ignored(b"sub/x.txt")


def test_a_directory_is_judged_against_the_patterns_once() -> None:
    """Placing the watches judges every directory; the walk that follows asks again for each
    one (10^4-10^5 at a baseline) and gets the cached verdict, the same as a fresh one."""
    r = rules({b"": b"build/\n*.log\n", b"src": b"!keep/\n"})
    fresh = rules({b"": b"build/\n*.log\n", b"src": b"!keep/\n"})
    dirs = [b"src", b"src/keep", b"build", b"src/build", b"a", b"a/b.log"]
    for d in dirs:
        r.dir_may_contain_captured(d)
    judged: list[bytes] = []
    inner = r._pattern_reason
    r._pattern_reason = lambda rel, is_dir: judged.append(rel) or inner(rel, is_dir)  # type: ignore[method-assign]
    assert [r.reason(d, True) for d in dirs] == [fresh.reason(d, True) for d in dirs]
    assert [r.reason(d, True) for d in dirs] == [None, None, "gitignore", "gitignore", None, "gitignore"]
    assert judged == [], "judged again"
    assert r.reason(b"src/x.log") == "gitignore" and judged == [b"src/x.log"]  # files: as before


def test_last_match_wins_within_a_file() -> None:
    r = rules({b"": b"*.o\n!important.o\nimportant.o\n!a/*.o\n"})
    assert r.is_ignored(b"important.o")
    assert not r.is_ignored(b"a/b.o")
    assert r.is_ignored(b"a/c/b.o")


def test_directory_only_and_anchored_patterns() -> None:
    r = rules({b"": b"build/\n/out\n"})
    assert r.is_ignored(b"build", is_dir=True)
    assert not r.is_ignored(b"build", is_dir=False)  # a file named build
    assert r.is_ignored(b"src/build", is_dir=True)
    assert r.is_ignored(b"build/x.c")  # inside an ignored directory
    assert r.is_ignored(b"out", is_dir=True) and r.is_ignored(b"out")
    assert not r.is_ignored(b"src/out")


def test_excluded_parent_cannot_be_reincluded_but_star_star_can() -> None:
    r = rules({b"": b"build/\n!build/keep.txt\nfoo/**\n!foo/keep\n"})
    assert r.is_ignored(b"build/keep.txt")
    assert not r.is_ignored(b"foo", is_dir=True)
    assert r.is_ignored(b"foo/x")
    assert not r.is_ignored(b"foo/keep")


def test_a_directory_known_to_lack_a_gitignore_is_not_searched() -> None:
    """A listing that shows no ``.gitignore`` spares the loader; its parent's rules apply."""
    asked: list[bytes] = []
    files = {b"": b"*.log\n", b"a/b": b"!keep.log\n"}
    r = IgnoreRules(gitignore=lambda d: asked.append(d) or files.get(d))
    r.lacks_rule_file(b"a")
    assert asked == [b""]  # its parent's rules, loaded once
    assert r.is_ignored(b"a/x.log") and not r.is_ignored(b"a/x.txt")
    assert not r.is_ignored(b"a/b/keep.log") and r.is_ignored(b"a/b/y.log")
    assert asked == [b"", b"a/b"]  # a/b was not known to lack one: read


def test_gitignore_inside_an_ignored_directory_is_never_read() -> None:
    asked: list[bytes] = []

    def loader(rel_dir: bytes) -> bytes | None:
        asked.append(rel_dir)
        return {b"": b"gen/\n", b"gen": b"!*\n"}.get(rel_dir)

    r = IgnoreRules(gitignore=loader)
    assert r.is_ignored(b"gen/a.c")
    assert b"gen" not in asked
    r.is_ignored(b"src/a/b.c")
    r.is_ignored(b"src/a/c.c")
    assert asked.count(b"src/a") == 1  # cached per directory


def test_tracked_file_inside_ignored_dir_is_captured_and_reachable() -> None:
    r = rules({b"": b"build/\ndist/\n*.bin\n"}, tracked=frozenset({b"build/sub/keep.txt", b"x.bin"}))
    assert not r.is_ignored(b"build/sub/keep.txt")
    assert not r.is_ignored(b"x.bin")
    assert r.is_ignored(b"build/sub/other.txt")
    # a directory holding tracked files is captured (its mode too), whatever pattern names it
    assert r.reason(b"build", is_dir=True) is None
    assert r.reason(b"build/sub", is_dir=True) is None
    assert r.reason(b"build/other", is_dir=True) == "gitignore"
    assert r.reason(b"dist", is_dir=True) == "gitignore"
    assert r.dir_may_contain_captured(b"build")
    assert r.dir_may_contain_captured(b"build/sub")
    assert not r.dir_may_contain_captured(b"build/other")
    assert not r.dir_may_contain_captured(b"dist")
    assert r.dir_may_contain_captured(b"src")


def test_snapdignore_reincludes_and_excludes() -> None:
    r = rules(
        {b"": b".env\nvendor/\n"},
        snapdignore=b"!.env\nsecrets/\n!vendor/\n",
        extra_patterns=["*.tmp"],
    )
    assert not r.is_ignored(b".env")
    assert r.reason(b"secrets", is_dir=True) == "snapdignore"
    assert r.reason(b"secrets/k") == "snapdignore"
    assert not r.is_ignored(b"vendor", is_dir=True)
    assert not r.is_ignored(b"vendor/lib.c")
    assert r.reason(b"a/b.tmp") == "config"


def test_info_exclude_has_lowest_precedence() -> None:
    r = rules({b"": b"!local.cfg\n"}, info_exclude=b"local.cfg\nscratch/\n")
    assert not r.is_ignored(b"local.cfg")
    assert r.reason(b"scratch/x") == "exclude"


@pytest.mark.parametrize(
    "name",
    [
        b".main.c.swp",
        b".main.c.swo",
        b".main.c.swx",
        b"main.c~",
        b"#main.c#",
        b".#main.c",
        b"4913",
        b"main.c___jb_tmp___",
        b"main.c___jb_old___",
        b".goutputstream-AB12CD",
    ],
)
def test_editor_files(name: bytes) -> None:
    r = rules()
    assert r.reason(name) == "editor"
    assert r.reason(b"deep/dir/" + name) == "editor"


def test_editor_patterns_leave_ordinary_names_alone() -> None:
    r = rules()
    for name in (b"main.swp.c", b"4913.txt", b"a#b", b"swp", b"notes.md"):
        assert not r.is_ignored(name), name


def test_vcs_and_snapd_names() -> None:
    r = rules(tracked=frozenset({b".snapd-1-2~"}))
    for path in (b".git", b".git/config", b"sub/.git", b"a/.hg/store", b".jj/repo", b"x/.svn"):
        assert r.reason(path) == "vcs", path
    assert r.reason(b".git", is_dir=True) == "vcs"
    assert not r.dir_may_contain_captured(b".git")
    assert not r.dir_may_contain_captured(b"vendor/.git/objects")
    assert r.reason(b".snapd-1-2~") == "snapd"  # even if git tracked one
    assert r.reason(b"a/.snapd-tmp-x~") == "snapd"
    assert not r.is_ignored(b".gitignore")
    assert not r.is_ignored(b".github", is_dir=True)


def test_is_rule_file() -> None:
    r = rules()
    assert r.is_rule_file(b".gitignore") and r.is_rule_file(b"a/b/.gitignore")
    assert r.is_rule_file(b".snapdignore") and r.is_rule_file(b".git/info/exclude")
    assert not r.is_rule_file(b"a/.snapdignore") and not r.is_rule_file(b"x.gitignore")


def test_non_utf8_names_and_patterns() -> None:
    r = rules({b"": b"caf\xe9*\n", b"d\xff": b"!caf\xe9-keep\n"})
    assert r.is_ignored(b"caf\xe9.txt")
    assert r.is_ignored(b"d\xff/caf\xe9-x")
    assert not r.is_ignored(b"d\xff/caf\xe9-keep")
    assert not r.is_ignored(b"cafe.txt")


def test_gitignore_details_bom_crlf_comments_escapes() -> None:
    r = rules({b"": b"\xef\xbb\xbf*.a\r\n# c\r\n\\#lit\n\\!bang\ntrail \n"})
    assert r.is_ignored(b"x.a")
    assert r.is_ignored(b"#lit") and r.is_ignored(b"!bang") and r.is_ignored(b"trail")
    assert not r.is_ignored(b"# c")


# --- from disk and git -------------------------------------------------------------------


@pytest.fixture
def git_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    home = tmp_path / "githome"  # conftest already isolates HOME; make git's explicit
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(home / ".config"))
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    monkeypatch.setenv("GIT_AUTHOR_NAME", "t")
    monkeypatch.setenv("GIT_AUTHOR_EMAIL", "t@example.invalid")
    monkeypatch.setenv("GIT_COMMITTER_NAME", "t")
    monkeypatch.setenv("GIT_COMMITTER_EMAIL", "t@example.invalid")
    yield


def git(cwd: Path, *args: str) -> bytes:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True).stdout


def write(path: Path, data: bytes = b"x") -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)


def test_load_reads_rule_files_lazily_from_disk(tmp_path: Path) -> None:
    root = tmp_path / "ws"
    write(root / ".gitignore", b"*.o\n")
    write(root / "a" / "b" / ".gitignore", b"!keep.o\nlocal/\n")
    write(root / ".snapdignore", b"big/\n")
    r = IgnoreRules.load(root, extra_patterns=["*.cache"])
    assert r.is_ignored(b"a/x.o") and not r.is_ignored(b"a/b/keep.o")
    assert r.is_ignored(b"a/b/local", is_dir=True)
    assert r.reason(b"big/x") == "snapdignore"
    assert r.reason(b"q.cache") == "config"


def test_symlinked_gitignore_is_not_followed(tmp_path: Path) -> None:
    root = tmp_path / "ws"
    write(tmp_path / "elsewhere", b"*\n")
    root.mkdir()
    os.symlink(tmp_path / "elsewhere", root / ".gitignore")
    assert not IgnoreRules.load(root).is_ignored(b"file")


@needs_git
def test_repo_subdirectory_workspace(tmp_path: Path, git_env: None) -> None:
    top = tmp_path / "repo"
    top.mkdir()
    git(top, "init", "-q")
    write(top / ".gitignore", b"*.log\nbuild/\n")
    write(top / ".git" / "info" / "exclude", b"scratch\n")
    write(top / "pkg" / ".gitignore", b"!keep.log\n")
    write(top / "pkg" / "ws" / "a.log")
    write(top / "pkg" / "ws" / "keep.log")
    write(top / "pkg" / "ws" / "build" / "t.txt")
    write(top / "pkg" / "ws" / "src.c")
    write(top / "other.c")
    git(top, "add", "-f", "pkg/ws/build/t.txt", "pkg/ws/src.c", "other.c")
    git(top, "commit", "-q", "-m", "c")
    ws = top / "pkg" / "ws"
    tracked = git_tracked_files(ws)
    assert tracked == frozenset({b"build/t.txt", b"src.c"})
    r = IgnoreRules.load(ws, tracked=tracked)
    assert r.is_ignored(b"a.log")
    assert not r.is_ignored(b"keep.log")
    assert not r.is_ignored(b"build", is_dir=True) and r.dir_may_contain_captured(b"build")
    assert r.is_ignored(b"build/other.txt")
    assert not r.is_ignored(b"build/t.txt")
    assert r.reason(b"scratch") == "exclude"
    assert git_toplevel(ws) == top
    head = git_head(ws)
    assert head is not None and len(head) == 40
    assert git_head(ws) == git(top, "rev-parse", "HEAD").decode().strip()


@needs_git
def test_git_helpers_outside_a_repo_and_unborn(tmp_path: Path, git_env: None) -> None:
    plain = tmp_path / "plain"
    plain.mkdir()
    assert git_tracked_files(plain) is None
    assert git_head(plain) is None
    assert git_toplevel(plain) is None
    assert git_tracked_files(tmp_path / "missing") is None
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    git(fresh, "init", "-q")
    assert git_tracked_files(fresh) == frozenset()
    assert git_head(fresh) is None


@needs_git
def test_head_cache_follows_every_way_head_moves_and_runs_git_only_then(
    tmp_path: Path, git_env: None
) -> None:
    """A mark records HEAD without a git process while nothing that decides it changed; every
    way HEAD moves is seen: a commit, a ref rewritten within the same instant with a
    same-size value, refs packed, a branch switch, a detached HEAD, a linked worktree."""
    top = tmp_path / "repo"
    top.mkdir()
    git(top, "init", "-q", "-b", "main")

    def cache_for(where: Path) -> HeadCache:
        repo = find_repo(os.fsencode(where))
        assert repo is not None
        return HeadCache(where, repo)

    def truth(where: Path) -> str | None:
        done = subprocess.run(["git", "-C", str(where), "rev-parse", "--verify", "--quiet", "HEAD"],
                              capture_output=True, check=False)
        return done.stdout.decode().strip() or None

    head = cache_for(top)
    checked = 0

    def agrees(cache: HeadCache, where: Path) -> None:
        nonlocal checked
        checked += 1
        want = truth(where)
        assert cache.get() == want, f"step {checked}"
        runs = cache.runs
        for _ in range(3):  # unchanged since: no git process
            assert cache.get() == want, f"step {checked}"
        assert cache.runs == runs, f"step {checked}: git ran again with nothing changed"

    agrees(head, top)  # unborn branch
    for n in range(3):
        write(top / "f", b"%d" % n)
        git(top, "add", "f")
        git(top, "commit", "-q", "-m", f"c{n}")
        agrees(head, top)
    commits = [truth(top)]
    git(top, "pack-refs", "--all")  # the loose ref goes into packed-refs
    agrees(head, top)
    write(top / "f", b"after pack")
    git(top, "commit", "-q", "-am", "after pack")  # a loose ref again, shadowing the packed one
    agrees(head, top)
    commits.append(truth(top))
    for c in (commits[0], commits[1], commits[0]):  # same-size values, back to back
        git(top, "update-ref", "refs/heads/main", c or "")
        agrees(head, top)
    git(top, "pack-refs", "--all")
    agrees(head, top)
    write(top / "f", b"packed again")
    git(top, "commit", "-q", "-am", "packed again")
    git(top, "pack-refs", "--all")  # between two looks: only packed-refs tells
    agrees(head, top)
    git(top, "reset", "-q", "--hard")  # the work tree as main's commit now is
    git(top, "checkout", "-q", "--detach", "HEAD~1")
    agrees(head, top)
    git(top, "checkout", "-q", "-b", "other")
    agrees(head, top)
    git(top, "checkout", "-q", "main")
    agrees(head, top)
    wt = tmp_path / "wt"
    git(top, "worktree", "add", "-q", str(wt), "-b", "side")
    side = cache_for(wt)
    agrees(side, wt)
    write(wt / "f", b"in the worktree")
    git(wt, "commit", "-q", "-am", "side")
    agrees(side, wt)
    agrees(head, top)  # the main work tree's HEAD did not move
    git(top, "update-ref", "refs/heads/side", "main")  # the worktree's branch moved from elsewhere
    agrees(side, wt)


@needs_git
def test_git_helpers_write_nothing(tmp_path: Path, git_env: None) -> None:
    top = tmp_path / "repo"
    top.mkdir()
    git(top, "init", "-q")
    write(top / "f")
    git(top, "add", "f")
    git(top, "commit", "-q", "-m", "c")
    os.utime(top / "f", ns=(1, 1))  # stale stat info: a status would refresh the index
    before = {p: p.stat().st_mtime_ns for p in (top / ".git").rglob("*")}
    assert git_tracked_files(top) == frozenset({b"f"})
    git_head(top)
    git_toplevel(top)
    after = {p: p.stat().st_mtime_ns for p in (top / ".git").rglob("*")}
    assert before == after


@needs_git
def test_worktree_dotgit_file_finds_common_exclude(tmp_path: Path, git_env: None) -> None:
    top = tmp_path / "repo"
    top.mkdir()
    git(top, "init", "-q")
    write(top / "f")
    git(top, "add", "f")
    git(top, "commit", "-q", "-m", "c")
    write(top / ".git" / "info" / "exclude", b"*.secret\n")
    wt = tmp_path / "wt"
    git(top, "worktree", "add", "-q", str(wt))
    assert (wt / ".git").is_file()
    r = IgnoreRules.load(wt)
    assert r.reason(b"a.secret") == "exclude"
    assert r.reason(b".git") == "vcs"


# --- property: agree with git's own directory walk ------------------------------------------

NAMES = ["a", "b", "c.o", "d.log"]
DIRS = ["x", "y", "z.o"]
PATTERNS = [
    "*.o",
    "!*.o",
    "d.log",
    "!d.log",
    "x/",
    "!x/",
    "/y",
    "y/",
    "x/*",
    "!x/a",
    "**/z.o",
    "z.o/",
    "a",
    "!a",
    "/a",
    "*",
    "!b",
    "x/**",
    "!x/**/b",
    "y/**/a",
    "*/",
    "[ab]",
    "?",
    "!y/",
    "!*/",
    "x/y/",
    "z.o/**/d.log",
    "!z.o",
    "*.log",
    "b/",
    "**/a",
]

file_paths = st.lists(
    st.tuples(st.lists(st.sampled_from(DIRS), max_size=3), st.sampled_from(NAMES)),
    min_size=1,
    max_size=14,
)
pattern_files = st.dictionaries(
    st.lists(st.sampled_from(DIRS), max_size=2).map(tuple),
    st.lists(st.sampled_from(PATTERNS), max_size=5),
    max_size=4,
)


@needs_git
@settings(
    max_examples=200,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(files=file_paths, ignores=pattern_files, exclude=st.lists(st.sampled_from(PATTERNS), max_size=2))
def test_matches_git_on_random_trees(
    git_env: None,
    files: list[tuple[list[str], str]],
    ignores: dict[tuple[str, ...], list[str]],
    exclude: list[str],
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        git(root, "init", "-q")
        made: set[str] = set()
        for dirs, name in files:
            path = "/".join([*dirs, name])
            # a path cannot be both a file and a directory
            if any(m.startswith(path + "/") or path.startswith(m + "/") for m in made):
                continue
            write(root / path)
            made.add(path)
        for dirs, pats in ignores.items():
            d = "/".join(dirs)
            if any(m == d or d.startswith(m + "/") for m in made):
                continue
            write(root / d / ".gitignore", ("\n".join(pats) + "\n").encode())
            made.add(f"{d}/.gitignore" if d else ".gitignore")
        write(root / ".git" / "info" / "exclude", ("\n".join(exclude) + "\n").encode())
        out = git(root, "ls-files", "-z", "--others", "--ignored", "--exclude-standard")
        git_ignored = {p for p in out.decode().split("\0") if p}
        r = IgnoreRules.load(root, tracked=git_tracked_files(root))
        ours = {p for p in made if r.is_ignored(p.encode())}
        # Rule files are where snapd departs from git on purpose (a self-ignoring .gitignore is
        # captured: see test_rule_files_in_effect_are_captured); every other path is git's call.
        rule_files = {p for p in made if p.rsplit("/", 1)[-1] == ".gitignore"}
        assert ours - rule_files == git_ignored - rule_files
        assert ours & rule_files <= git_ignored


def test_rule_files_in_effect_are_captured() -> None:
    """A .gitignore that its own patterns (or info/exclude, or a parent's) match is still
    captured: a mark's rules are rebuilt from the rule files in its tree. One inside an
    excluded directory is not in effect, and not captured."""
    files = {b"": b"b/\n.gitignore\n", b"c": b"*\n"}
    r = rules(files, snapdignore=b".snapdignore\n", info_exclude=b".gitignore\n")
    assert r.reason(b".gitignore") is None
    assert r.reason(b"c/.gitignore") is None
    assert r.reason(b".snapdignore") is None
    assert r.reason(b"c/x") == "gitignore"
    assert r.reason(b"b/.gitignore") == "gitignore"  # b/ is excluded: git never reads it
    assert r.reason(b"d/.snapdignore") is not None  # only the root's is a rule file


def test_rule_inputs_round_trip_and_rebuild_the_same_rules() -> None:
    """A mark records its rules' outside inputs; rebuilt with the same rule files they decide
    exactly as the rules they were recorded from."""
    files = {b"": b"*.log\n!keep.log\nbuild/\n", b"sub": b"x\n"}
    rules = IgnoreRules(
        gitignore=files.get,
        extra_patterns=("*.tmp",),
        info_exclude=b"local.cfg\n",
        tracked=frozenset({b"build/kept.o", b"odd\xff.log"}),
        prefix=b"proj",
        outer_gitignores=((b"", b"*.bak\n"),),
    )
    data = rules.inputs.encode()
    assert RuleInputs.decode(data) == rules.inputs
    assert RuleInputs.decode(data).encode() == data
    again = IgnoreRules.from_inputs(RuleInputs.decode(data), files.get, b"")
    for rel, is_dir in [
        (b"a.log", False), (b"keep.log", False), (b"build", True), (b"build/kept.o", False),
        (b"odd\xff.log", False), (b"x.tmp", False), (b"local.cfg", False), (b"sub/x", False),
        (b"y.bak", False), (b"src/main.py", False),
    ]:
        assert again.reason(rel, is_dir) == rules.reason(rel, is_dir), rel
    assert rules.same_outside(again.inputs)
    with pytest.raises(ValueError):
        RuleInputs.decode(b"not a record")


def test_an_inexpressible_line_is_dropped_and_the_rest_still_apply() -> None:
    """A reversed range ("[z-a]") is no regex; it once made every capture of the workspace fail
    with an internal error (found by the randomized model). The line is dropped, the rest kept:
    git takes it as "z", so snapd captures a file named z that git ignores (the safe side)."""
    r = rules({b"": b"[z-a]\n*.log\n!keep.log\n"})
    assert [n for n in ("a.log", "keep.log", "m", "z") if r.is_ignored(n.encode())] == ["a.log"]


# Each shape of compiled pattern matched its own way (a path itself, directories only, strictly
# below, every path, every directory, every nested path), with a negation where the shape's
# reach would otherwise hide a mistake. Verdicts taken from `git check-ignore` (git 2.39) on
# these files and directories; fast, so mutmut runs it (the random comparison is too slow).
# Written to kill the mutants mutmut found surviving in the pattern kinds (docs/reliability.md).
SHAPES: list[tuple[bytes, list[tuple[bytes, bool, bool]]]] = [
    # (.gitignore, [(path, is_dir, ignored)])
    (
        b"*\n!keep\n",
        [(b"x", False, True), (b"keep", False, False), (b"d", True, True), (b"d/keep", False, True)],
    ),
    (
        b"*/\n!keep/\n",
        [(b"x", False, False), (b"d", True, True), (b"keep", True, False), (b"keep/x", False, False),
         (b"keep/sub", True, True), (b"keep/sub/f", False, True)],
    ),
    (
        b"**/*/**\n",
        [(b"x", False, False), (b"d", True, False), (b"d/x", False, True), (b"d/e", True, True)],
    ),
    (
        b"*/**\n!d/keep\n",
        [(b"x", False, False), (b"d", True, False), (b"d/x", False, True), (b"d/keep", False, False),
         (b"d/e", True, True)],
    ),
    (
        b"a/**\n!a/keep\n",
        [(b"a", True, False), (b"a/x", False, True), (b"a/keep", False, False), (b"b/a", True, False),
         (b"b/a/x", False, False)],
    ),
    (
        b"a/\n",
        [(b"a", True, True), (b"s/a", True, True), (b"s/a/x", False, True), (b"b", True, False),
         (b"b/a", False, False)],
    ),
    (b"a\n!s/a\n", [(b"a", False, True), (b"s/a", False, False), (b"t/a", True, True), (b"s", True, False)]),
    (  # "a/*" matches only a's children, not what lies deeper: a/b/c stays captured
        b"a/*\n!a/b/\n",
        [(b"a", True, False), (b"a/x", False, True), (b"a/b", True, False), (b"a/b/c", False, False)],
    ),
    (  # trailing spaces are not part of a pattern
        b"a/**/ \n",
        [(b"a", True, False), (b"a/x", False, False), (b"a/d", True, True), (b"a/d/f", False, True)],
    ),
    (b"my file.txt\n", [(b"my file.txt", False, True), (b"my", False, False), (b"file.txt", False, False)]),
    (
        b"a/**/\n",
        [(b"a", True, False), (b"a/x", False, False), (b"a/d", True, True), (b"a/d/e", True, True),
         (b"a/d/f", False, True)],
    ),
]


@pytest.mark.parametrize("gitignore,cases", SHAPES, ids=[s[0].decode().replace("\n", " ") for s in SHAPES])
def test_each_pattern_shape_matches_as_git_does(
    gitignore: bytes, cases: list[tuple[bytes, bool, bool]]
) -> None:
    r = rules({b"": gitignore})
    got = [(path, is_dir, r.is_ignored(path, is_dir)) for path, is_dir, _ in cases]
    assert got == cases


@needs_git
def test_outside_rule_files_are_the_exclude_and_each_gitignore_above_the_root(
    tmp_path: Path, git_env: None
) -> None:
    """A watcher of the tree never sees these change, so the daemon stats them (present or not)."""
    from snapd.capture.ignore import outside_rule_files

    top = tmp_path / "repo"
    (top / "pkg" / "sub" / "ws").mkdir(parents=True)
    git(top, "init", "-q")
    t = os.fsencode(top)
    assert outside_rule_files(top / "pkg" / "sub" / "ws") == [
        t + b"/.git/info/exclude",
        t + b"/.gitignore",
        t + b"/pkg/.gitignore",
        t + b"/pkg/sub/.gitignore",
    ]
    assert outside_rule_files(top) == [t + b"/.git/info/exclude"]
    plain = tmp_path / "plain"
    plain.mkdir()
    assert outside_rule_files(plain) == []


def test_anchored_patterns_are_relative_to_their_own_gitignore() -> None:
    """A nested .gitignore's "/x" means its own directory's x; with the workspace a subdirectory
    of a work tree (``prefix``), the root's and the outer files' anchors still land right."""
    r = rules({b"sub": b"/x\n"})
    assert r.is_ignored(b"sub/x") and not r.is_ignored(b"x") and not r.is_ignored(b"sub/y/x")
    r = rules(
        {b"": b"/top\n", b"sub": b"/x\n"},
        prefix=b"/pkg/ws/",
        outer_gitignores=((b"", b"/pkg/ws/from-top\n"), (b"pkg", b"/ws/from-pkg\n")),
    )
    for rel in (b"top", b"sub/x", b"from-top", b"from-pkg"):
        assert r.reason(rel) == "gitignore", rel
    assert not r.is_ignored(b"sub/top") and not r.is_ignored(b"x")


def test_extra_patterns_configs_own_reasons_and_negations() -> None:
    r = rules(extra_patterns=["cache/", "*.tmp", "!keep.tmp"])
    assert r.reason(b"cache", True) == "config" and r.reason(b"cache", False) is None
    assert r.reason(b"x.tmp") == "config" and r.reason(b"keep.tmp") is None
    assert not rules({b"": b"build/\n"}).is_ignored(b"build")  # a file, unless said otherwise


def test_submodules_and_snapds_own_names_deep_down() -> None:
    r = rules({b"": b"vendor/\n"}, tracked=frozenset({b"vendor/lib"}))  # a submodule: a tracked directory
    assert r.dir_may_contain_captured(b"vendor/lib") and r.dir_may_contain_captured(b"vendor")
    assert not r.dir_may_contain_captured(b"a/b/.snapd-0123~")
    assert r.reason(b".claude/settings.local.json") == "snapd"


def test_a_tracked_agent_settings_file_is_the_users_and_captured() -> None:
    """README: what git tracks is always captured. Untracked, the files `integrate --project`
    writes are snapd's (a rollback must not undo the hooks); tracked, they are the user's."""
    r = rules(tracked=frozenset({b".gemini/settings.json", b".codex/hooks.json"}))
    assert r.reason(b".gemini/settings.json") is None and r.reason(b".codex/hooks.json") is None
    assert r.reason(b".claude/settings.local.json") == "snapd"
    assert r.reason(b".opencode/plugin/snapd.js") == "snapd"


def test_rule_inputs_keep_tracked_names_with_newlines_and_rebuild_the_snapdignore() -> None:
    inputs = RuleInputs(tracked=frozenset({b"odd\nname", b"a"}))
    assert RuleInputs.decode(inputs.encode()) == inputs
    again = IgnoreRules.from_inputs(inputs, {}.get, b"big/\n")
    assert again.reason(b"big/x") == "snapdignore"
    with pytest.raises(ValueError, match="^not a rule-inputs record$"):
        RuleInputs.decode(b"snapd-rules-0\n{}")


def test_load_outside_a_repository_anchors_at_the_root(tmp_path: Path) -> None:
    root = tmp_path / "ws"
    write(root / ".gitignore", b"/top.o\n")
    r = IgnoreRules.load(root)
    assert r.is_ignored(b"top.o") and not r.is_ignored(b"a/top.o")


# --- precious files (issue 36) ------------------------------------------------------------


def test_a_precious_file_git_ignores_is_captured_and_nothing_else_changes() -> None:
    r = rules(
        {b"": b".env\n.env.*\n*.o\nbuild/\nnode_modules/\n", b"app": b"*.sqlite3\n"},
        snapdignore=b"private.env.local\n",
        precious=[".env", ".env.*", "!.env.example", "*.sqlite3"],
    )
    assert r.reason(b".env") is None and r.is_precious(b".env")
    assert r.reason(b"app/.env.local") is None and r.is_precious(b"app/.env.local")
    assert r.reason(b"app/db.sqlite3") is None and r.is_precious(b"app/db.sqlite3")
    assert r.reason(b".env.example") == "gitignore" and not r.is_precious(b".env.example")  # negated
    assert r.reason(b"private.env.local") == "snapdignore"  # snapd's own "not this" wins
    assert r.reason(b"main.o") == "gitignore" and not r.is_precious(b"main.o")
    assert r.reason(b"build/.env") == "gitignore"  # inside an ignored directory: never walked
    assert not r.dir_may_contain_captured(b"build") and not r.dir_may_contain_captured(b"node_modules")
    assert r.reason(b".env", is_dir=True) == "gitignore"  # directories are never precious
    assert not r.is_precious(b"app.py") and not r.is_precious(b".gitignore")
    off = rules({b"": b".env\n"})
    assert off.reason(b".env") == "gitignore" and not off.is_precious(b".env")


def test_the_precious_patterns_are_a_rule_input_and_older_records_have_none() -> None:
    with_list = RuleInputs(extra=("x",), precious=(".env", "*.sqlite3"))
    assert RuleInputs.decode(with_list.encode()) == with_list
    without = RuleInputs(extra=("x",))
    assert b"precious" not in without.encode()  # the bytes of every record before the setting
    assert RuleInputs.decode(without.encode()).precious == ()
    r = IgnoreRules.from_inputs(with_list, lambda d: b".env\n" if not d else None, b"")
    assert r.is_precious(b".env") and not r.same_outside(without)


def test_the_quick_precious_test_never_rules_out_a_path_the_patterns_name() -> None:
    """``may_match_file`` (status judges every captured file with it) is only a first test: False
    only where ``decide`` finds no positive match, for the default list and for lists it cannot
    shorten (an anchored or nested pattern: then always True)."""
    from snapd.capture.patterns import compile_patterns, decide, may_match_file
    from snapd.config import PRECIOUS

    paths = [
        ".env", "a/.env", ".env.local", "a/b/.env.prod", ".envrc", "x.local", "local_settings.py",
        "p/secrets.toml", "t.tfstate", "t.tfstate.backup", "v.tfvars", "db.sqlite", "d/db.sqlite3",
        "db.sqlite3-wal", "a.env", "env", "x.py", "dir.local/f", ".env/x", "sqlite3", "top.env",
    ]
    for patterns in (PRECIOUS, ("/top.env", "a/.env"), ("*.env", "!a.env"), ()):
        rules = compile_patterns(patterns)
        quick = may_match_file(rules)
        for p in paths:
            if decide(rules, p, False):
                assert quick(p.encode()), (patterns, p)
    quick = may_match_file(compile_patterns(PRECIOUS))
    assert not quick(b"x.py") and not quick(b"dir.local/f") and not quick(b"a.env")
