"""Pure rollback-planning tests: an in-memory node map stands in for the store.

The central check is :func:`simulate`: it runs a plan's ops, in order, against a model of the
current tree, asserting that each op is valid where it runs (parent is a directory, the path
holds exactly ``expect``, removed directories are empty) — and the result must be the target.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from plan_difference import difference

from snapd.errors import NotFound, UsageError
from snapd.rollback import ops
from snapd.rollback.ops import MKDIR_MODE, Op, Plan
from snapd.rollback.plan import from_nothing, plan
from snapd.rollback.restore import write_tree
from snapd.store import nodes, trees
from snapd.store.ignored import IgnoredNames
from snapd.store.objects import xxh3_hex
from snapd.store.trees import Dir, Entry

pytestmark = pytest.mark.timeout(120)


class Mem:
    def __init__(self) -> None:
        self.nodes: dict[str, bytes] = {}

    def save(self, node: trees.Node, base: str | None = None, changed: object = None) -> str:
        data = nodes.encode_node(node)
        key = f"{xxh3_hex(data)}-{len(data)}"
        self.nodes[key] = data
        return key

    def load(self, key: str) -> trees.Node:
        return nodes.decode_node(self.nodes[key])

    def tree(self, changes: dict[bytes, trees.Change]) -> str:
        return trees.apply_changes(self.load, self.save, None, changes)


def f(content: str, mode: int = 0o644) -> Entry:
    data = content.encode()
    return Entry("file", mode, len(data), f"{xxh3_hex(data)}-{len(data)}")


def ln(target: str) -> Entry:
    data = target.encode()
    return Entry("symlink", 0o777, len(data), f"{xxh3_hex(data)}-{len(data)}")


Model = dict[bytes, Entry]


def flat(m: Mem, root: str | None) -> Model:
    return dict(trees.walk(m.load, root)) if root is not None else {}


def _same(a: Entry | None, b: Entry | None) -> bool:
    if a is None or b is None:
        return a is b
    return a.kind == b.kind if a.kind == "dir" or b.kind == "dir" else a == b


def simulate(state: Model, ops: tuple[Op, ...]) -> Model:
    """Run ``ops`` on a model, asserting that each is valid at its turn; return the result."""
    state = dict(state)
    for op in ops:
        parent = op.path.rpartition(b"/")[0]
        assert parent == b"" or (parent in state and state[parent].kind == "dir"), f"no parent: {op}"
        now = state.get(op.path)
        assert op.forced is not None or _same(now, op.expect), f"found {now}: {op}"
        if op.kind in ("remove", "rmdir"):
            if op.forced is None:
                assert now is not None and (now.kind == "dir") == (op.kind == "rmdir"), op
                assert not any(p.startswith(op.path + b"/") for p in state), f"not empty: {op}"
            state = {p: e for p, e in state.items() if p != op.path and not p.startswith(op.path + b"/")}
        elif op.kind == "mkdir":
            assert now is None and op.entry is not None, op
            state[op.path] = Entry("dir", MKDIR_MODE, 0, "")
        elif op.kind == "chmod":
            assert now is not None and op.entry is not None and now.kind == op.entry.kind, op
            state[op.path] = Entry(now.kind, op.entry.mode, now.size, now.key)
        else:
            assert op.entry is not None and (now is None or now.kind != "dir"), op
            state[op.path] = op.entry
    return state


def normalized(model: Model) -> dict[bytes, tuple[str, int, str]]:
    return {p: (e.kind, e.mode, "" if e.kind == "dir" else e.key) for p, e in model.items()}


def check(m: Mem, current: str | None, target: str, p: Plan) -> None:
    assert normalized(simulate(flat(m, current), p.ops)) == normalized(flat(m, target))


def kinds(p: Plan) -> list[tuple[str, bytes]]:
    return [(op.kind, op.path) for op in p.ops]


def test_every_kind_of_change() -> None:
    m = Mem()
    target = m.tree(
        {
            b"keep": f("k"),
            b"mod": f("old"),
            b"chmod": f("c", 0o755),
            b"gone": f("g"),
            b"gonedir/a/x": f("x"),
            b"empty": Dir(0o750),
            b"link": ln("mod"),
            b"relink": ln("a"),
        }
    )
    current = m.tree(
        {
            b"keep": f("k"),
            b"mod": f("new"),
            b"chmod": f("c", 0o644),
            b"new": f("n"),
            b"newdir/deep/y": f("y"),
            b"link": ln("mod"),
            b"relink": ln("b"),
        }
    )
    p = plan(m.load, current, target)
    check(m, current, target, p)
    assert p.counts == {"restore": 2, "recreate": 5, "delete": 4, "mode": 1, "type": 0}
    ops = {(op.kind, op.path): op for op in p.ops}
    assert ops[("write", b"mod")].expect == f("new") and ops[("write", b"mod")].entry == f("old")
    assert ops[("write", b"gone")].expect is None
    assert ops[("symlink", b"relink")].entry == ln("a")
    assert ops[("chmod", b"chmod")].entry == f("c", 0o755)
    assert ops[("remove", b"newdir/deep/y")].expect == f("y")
    assert ("mkdir", b"empty") in ops and ops[("chmod", b"empty")].entry.mode == 0o750  # type: ignore[union-attr]
    assert ("write", b"keep") not in ops and ("symlink", b"link") not in ops


def test_order_removes_rmdirs_mkdirs_writes_then_dir_modes() -> None:
    m = Mem()
    target = m.tree({b"a/b/c/f": f("f"), b"a": Dir(0o500), b"a/b": Dir(0o555), b"x": f("x")})
    current = m.tree({b"z/y/w": f("w"), b"z/q": f("q"), b"x": f("old")})
    p = plan(m.load, current, target)
    check(m, current, target, p)
    assert kinds(p) == [
        ("remove", b"z/q"),
        ("remove", b"z/y/w"),
        ("rmdir", b"z/y"),
        ("rmdir", b"z"),
        ("mkdir", b"a"),
        ("mkdir", b"a/b"),
        ("mkdir", b"a/b/c"),
        ("write", b"a/b/c/f"),
        ("write", b"x"),
        ("chmod", b"a/b/c"),
        ("chmod", b"a/b"),
        ("chmod", b"a"),
    ]


def test_read_only_directory_is_opened_first_and_closed_last() -> None:
    m = Mem()
    current = m.tree({b"ro/f": f("new"), b"ro": Dir(0o555)})
    target = m.tree({b"ro/f": f("old"), b"ro": Dir(0o755)})
    assert kinds(plan(m.load, current, target)) == [("chmod", b"ro"), ("write", b"ro/f")]
    back = plan(m.load, target, current)
    assert kinds(back) == [("write", b"ro/f"), ("chmod", b"ro")]


@pytest.mark.parametrize(
    "old,new",
    [
        (f("file"), Dir(0o755)),
        (Dir(0o755), f("file")),
        (f("file"), ln("t")),
        (ln("t"), f("file")),
        (ln("t"), Dir(0o700)),
        (Dir(0o700), ln("t")),
    ],
    ids=["file-dir", "dir-file", "file-link", "link-file", "link-dir", "dir-link"],
)
def test_type_changes(old: trees.Change, new: trees.Change) -> None:
    m = Mem()

    def build(change: trees.Change) -> str:
        extra: dict[bytes, trees.Change] = {b"p/inner": f("i")} if isinstance(change, Dir) else {}
        return m.tree({b"p": change, **extra, b"other": f("o")})

    current, target = build(old), build(new)
    p = plan(m.load, current, target)
    check(m, current, target, p)
    assert p.counts["type"] == 1
    first = next(op for op in p.ops if op.path == b"p")
    assert first.kind in ("remove", "rmdir") and first.expect is not None


def test_empty_directories_are_recreated_and_removed() -> None:
    m = Mem()
    target = m.tree({b"e1": Dir(0o700), b"e2/e3": Dir(0o755)})
    current = m.tree({b"n1": Dir(0o755)})
    p = plan(m.load, current, target)
    check(m, current, target, p)
    assert ("mkdir", b"e2/e3") in kinds(p) and ("rmdir", b"n1") in kinds(p)
    assert ("chmod", b"e1") not in kinds(p)  # created with its mode already


def test_from_an_empty_workspace_and_to_an_empty_mark() -> None:
    m = Mem()
    full = m.tree({b"a/b": f("b"), b"c": ln("a")})
    empty = m.tree({})
    check(m, None, full, plan(m.load, None, full))
    p = plan(m.load, full, empty)
    check(m, full, empty, p)
    assert p.counts["delete"] == 3


def test_only_limits_the_plan_and_creates_needed_parents() -> None:
    m = Mem()
    target = m.tree({b"a/b/f": f("f"), b"a/g": f("g"), b"x": f("x"), b"d/k": f("k")})
    current = m.tree({b"x": f("changed"), b"d": f("d was a file"), b"y": f("new")})
    p = plan(m.load, current, target, only=[b"a/b/f"])
    assert kinds(p) == [
        ("mkdir", b"a"),
        ("mkdir", b"a/b"),
        ("write", b"a/b/f"),
        ("chmod", b"a/b"),
        ("chmod", b"a"),
    ]
    p2 = plan(m.load, current, target, only=[b"d/k", b"y", b"d"])
    assert set(kinds(p2)) == {
        ("remove", b"d"),
        ("mkdir", b"d"),
        ("write", b"d/k"),
        ("chmod", b"d"),
        ("remove", b"y"),
    }
    simulate(flat(m, current), p2.ops)
    assert (
        plan(m.load, current, target, only=[b"a"]).ops
        == plan(m.load, current, target, only=[b"a", b"a/g"]).ops
    )
    with pytest.raises(NotFound, match="nowhere"):
        plan(m.load, current, target, only=[b"nowhere"])
    with pytest.raises(UsageError):
        plan(m.load, current, target, only=[b"../etc"])


def test_only_a_path_that_is_unchanged_gives_an_empty_plan() -> None:
    m = Mem()
    t = m.tree({b"a": f("a"), b"b": f("b")})
    c = m.tree({b"a": f("a"), b"b": f("B")})
    assert plan(m.load, c, t, only=[b"a"]).ops == ()


def test_uncapturable_paths_are_kept_unless_forced() -> None:
    m = Mem()
    target = m.tree({b"fifo": f("was a file"), b"big": f("small at M"), b"sub/x": f("x"), b"fine": f("1")})
    current = m.tree({b"newdir/ok": f("ok"), b"fine": f("2"), b"sub": Dir(0o755)})
    unc = {
        b"fifo": "special file",
        b"big": "over size cap",
        b"newdir/huge": "over size cap",
        b"sub": "unreadable",
    }
    p = plan(m.load, current, target, uncapturable=unc)
    assert dict(p.kept) == {
        b"fifo": "special file",
        b"big": "over size cap",
        b"newdir": "holds newdir/huge, not captured: over size cap",
        b"sub/x": "inside sub, not captured: unreadable",
    }
    assert set(kinds(p)) == {("write", b"fine"), ("remove", b"newdir/ok")}  # siblings still go
    forced = plan(m.load, current, target, uncapturable=unc, force=True)
    assert forced.kept == ()
    by = {(op.kind, op.path): op for op in forced.ops}
    assert by[("remove", b"newdir/huge")].forced == "over size cap"
    assert by[("write", b"fifo")].forced == "special file" and by[("write", b"sub/x")].forced == "unreadable"
    assert kinds(forced).index(("remove", b"newdir/huge")) < kinds(forced).index(("rmdir", b"newdir"))
    assert forced.token != p.token


def test_uncapturable_directory_in_the_way_keeps_everything_below() -> None:
    m = Mem()
    target = m.tree({b"d/a/b": f("b"), b"d/c": f("c")})
    current = m.tree({})
    p = plan(m.load, current, target, uncapturable={b"d": "special file"})
    assert p.ops == ()
    assert [k for k, _ in p.kept] == [b"d", b"d/a", b"d/a/b", b"d/c"]
    assert dict(p.kept)[b"d/c"] == "its directory d is kept"


def test_token_is_stable_and_sensitive() -> None:
    m = Mem()
    target = m.tree({b"a": f("a"), b"b/c": f("c")})
    current = m.tree({b"a": f("A"), b"n": f("n")})
    p1, p2 = plan(m.load, current, target), plan(m.load, current, target)
    assert p1.token == p2.token and difference(p1, p2) == []
    current2 = m.tree({b"a": f("A2"), b"n": f("n")})
    p3 = plan(m.load, current2, target)
    assert p3.token != p1.token
    assert difference(p1, p3) == ["~ a: restore a (its state changed)"]
    current3 = m.tree({b"a": f("A"), b"n": f("n"), b"n2": f("n2")})
    p4 = plan(m.load, current3, target)
    assert difference(p1, p4) == ["+ delete n2"] and difference(p4, p1) == ["- no longer: delete n2"]
    p5 = plan(m.load, current, target, uncapturable={b"n": "special file"})
    assert difference(p1, p5) == ["- no longer: delete n", "+ keep n: special file"]
    target2 = m.tree({b"a": f("a", 0o600), b"b/c": f("c")})
    assert "set mode" not in " ".join(difference(p1, plan(m.load, current, target2)))
    assert plan(m.load, current, target2).token != p1.token


def test_to_json_and_op_round_trip() -> None:
    m = Mem()
    odd = b"caf\xe9"
    target = m.tree({odd: f("x"), b"l": ln("t")})
    p = plan(m.load, None, target)
    doc = p.to_json()
    assert doc["token"] == p.token and doc["counts"]["recreate"] == 2
    assert {"b64": "Y2Fm6Q=="} in [o["path"] for o in doc["ops"]]
    assert tuple(Op.from_json(o) for o in doc["ops"]) == p.ops


# -- property: for any pair of trees, the plan turns one into the other ----------------------

# a- sorts after a/x by component, before it as bytes
names = st.sampled_from([b"a", b"a-", b"b", b"c", b"\xff"])
rel_paths = st.lists(names, min_size=1, max_size=3).map(b"/".join)
specs = st.one_of(
    st.tuples(st.just("file"), st.sampled_from(["x", "y", ""]), st.sampled_from([0o644, 0o755, 0o600])),
    st.tuples(st.just("link"), st.sampled_from(["a", "../b"]), st.just(0)),
    st.tuples(st.just("dir"), st.just(""), st.sampled_from([0o755, 0o700, 0o500])),
)
tree_specs = st.dictionaries(rel_paths, specs, max_size=12)


def trees_of(spec: dict[bytes, tuple[str, str, int]]) -> dict[bytes, trees.Change]:
    changes: dict[bytes, trees.Change] = {}
    for path, (kind, content, mode) in spec.items():
        changes[path] = f(content, mode) if kind == "file" else ln(content) if kind == "link" else Dir(mode)
    return changes


def _build(m: Mem, spec: dict[bytes, tuple[str, str, int]]) -> str:
    return m.tree(trees_of(spec))


@settings(max_examples=300, deadline=None)
@given(tree_specs, tree_specs, st.lists(rel_paths, max_size=2))
def test_plan_turns_current_into_target(
    cur: dict[bytes, tuple[str, str, int]], tgt: dict[bytes, tuple[str, str, int]], only: list[bytes]
) -> None:
    m = Mem()
    current, target = _build(m, cur), _build(m, tgt)
    p = plan(m.load, current, target)
    check(m, current, target, p)
    assert plan(m.load, current, target).token == p.token
    assert (p.ops == ()) == (normalized(flat(m, current)) == normalized(flat(m, target)))
    try:
        partial = plan(m.load, current, target, only=only)
    except NotFound:
        return
    result = normalized(simulate(flat(m, current), partial.ops))
    want = normalized(flat(m, target))
    for top in only:
        inside = lambda p, top=top: p == top or p.startswith(top + b"/")  # noqa: E731
        assert {p: v for p, v in result.items() if inside(p)} == {p: v for p, v in want.items() if inside(p)}


@settings(max_examples=300, deadline=None)
@given(
    tree_specs,
    st.lists(rel_paths, max_size=2),
    st.sampled_from([None, 0o700, 0o500, 0o755]),
    st.sampled_from([None, 0o755, 0o500]),
)
def test_a_plan_from_nothing_is_the_plan_from_an_empty_tree(
    tgt: dict[bytes, tuple[str, str, int]], odd: list[bytes], now: int | None, then: int | None
) -> None:
    """A restore plans from no current tree, and plan() takes shortcuts there (no differences
    pass, no directory but the root to open, no token made): its plan is the one the general
    path makes from an empty tree; so is :func:`from_nothing`'s, made in one walk without
    sorting (what a restore uses). ``odd``: paths M holds as not captured."""
    m = Mem()
    changes: dict[bytes, trees.Change] = {
        p: trees.uncaptured("unreadable", 0o600, 3, None)
        for p in odd
        if not any(p.startswith(q + b"/") for q in tgt)
    }
    changes.update({p: v for p, v in trees_of(tgt).items() if not any(p.startswith(q + b"/") for q in odd)})
    target, empty = m.tree(changes), m.tree({})
    general = plan(m.load, empty, target, root_modes=(now, then))
    one_walk = from_nothing(m.load, target, (now, then))
    for fast in (plan(m.load, None, target, root_modes=(now, then)), one_walk):
        assert fast.ops == general.ops and fast.kept == general.kept and fast.left == general.left
        assert dict(fast.counts) == dict(general.counts) and fast.token == general.token


def test_the_token_is_made_only_when_asked_for(monkeypatch: pytest.MonkeyPatch) -> None:
    """A restore's plan of 160,000 ops never shows nor checks its token: no second spent on it."""
    m = Mem()
    target = m.tree({b"d/a": f("x"), b"b": ln("d")})
    made: list[int] = []
    token_of = ops.token_of
    monkeypatch.setattr(ops, "token_of", lambda *args: made.append(1) or token_of(*args))
    p = plan(m.load, None, target)
    assert made == []
    assert p.token == token_of(p.ops, p.kept, p.left) and p.token == p.token and made == [1]


# -- the branches of plan() the end-to-end tests reach and mutmut does not --------------------
# Written to kill the mutants mutmut found surviving in plan() (docs/reliability.md).


def ops_of(p: Plan) -> list[tuple[str, bytes, str | None]]:
    return [(op.kind, op.path, op.forced) for op in p.ops]


def test_an_uncapturable_path_that_did_not_exist_at_the_mark_says_why_and_force_removes_it() -> None:
    """Regression: the reason was lost (``not captured (None)``) and the forced removal carried
    no reason, so apply compared it with "absent" and reported a conflict instead of removing it."""
    m = Mem()
    target = m.tree({b"a": f("a")})
    current = m.tree({b"a": f("a")})
    unc = {b"huge": "over the size cap", b"d/unreadable": "permission denied"}
    p = plan(m.load, current, target, uncapturable=unc)
    assert p.ops == () and p.left == ()
    assert dict(p.kept) == {
        b"huge": "not captured (over the size cap): did not exist at the mark",
        b"d/unreadable": "not captured (permission denied): did not exist at the mark",
    }
    forced = plan(m.load, current, target, uncapturable=unc, force=True)
    assert ops_of(forced) == [
        ("remove", b"d/unreadable", "permission denied"),
        ("remove", b"huge", "over the size cap"),
    ]
    assert forced.kept == () and forced.counts["delete"] == 2


def test_what_the_marks_rules_ignore_is_left_unless_the_mark_knows_it_was_absent() -> None:
    m = Mem()
    target = m.tree({b"a": f("a")})
    current = m.tree(
        {b"a": f("a"), b".env": f("secret"), b"build/x.o": f("o"), b"new": f("n"), b"link": ln("x")}
    )

    def ignores(path: bytes, is_dir: bool) -> str | None:  # ".env", "x.log", "build/" (directories only)
        return (
            "gitignore" if path in (b".env", b"x.log") or (is_dir and path in (b"build", b"link")) else None
        )

    p = plan(m.load, current, target, target_ignores=ignores)
    assert ops_of(p) == [("remove", b"new", None)]
    assert dict(p.left) == {
        b".env": "ignored at the mark (gitignore)",
        b"build": "ignored at the mark (gitignore)",
    }
    # a symlink named like an ignored directory: one may have been there at M, unrecorded
    assert dict(p.kept) == {
        b"link": "the mark's rules ignore a directory of this name (gitignore): one may have been there, "
        "so this is left as it is"
    }
    # what a pre-rollback mark knows it did not hold (its rollback created it) goes whatever the rules
    current = m.tree(
        {
            b"a": f("a"),
            b".env": f("s"),
            b"build/x.o": f("o"),
            b"new": f("n"),
            b"link": ln("x"),
            b"x.log": f("l"),
        }
    )
    made = plan(m.load, current, target, target_ignores=ignores, absent=[b".env", b"build", b"link"])
    assert ops_of(made) == [
        ("remove", b".env", None),
        ("remove", b"build/x.o", None),
        ("remove", b"link", None),
        ("remove", b"new", None),
        ("rmdir", b"build", None),
    ]
    assert made.kept == () and made.left == ((b"x.log", "ignored at the mark (gitignore)"),)
    assert made.counts["delete"] == 5


def test_the_marks_ignored_names_tell_what_was_there() -> None:
    """With M's ignored names (store format 8) every path its rules ignore is decided exactly:
    there at M (named, or below a name), left; not there, deleted like any path absent at M,
    whatever kind its rules ignore (a symlink where a ``build/`` directory is ignored), and an
    uncapturable one blocks as one that did not exist."""
    m = Mem()
    target = m.tree({b"a": f("a")})
    current = m.tree(
        {
            b"a": f("a"),
            b".env": f("s"),
            b"gen": f("g"),
            b"out/x": f("x"),
            b"keep/y": f("y"),
            b"link": ln("x"),
            b"build": ln("y"),
        }
    )
    ignored = {b".env", b"gen", b"out", b"keep"}

    def ignores(path: bytes, is_dir: bool) -> str | None:  # those names (any kind), "link/", "build/"
        top = path.split(b"/")[0]
        return "gitignore" if top in ignored or (is_dir and top in (b"link", b"build")) else None

    names = IgnoredNames.of([b".env", b"keep", b"build"])  # there at M
    p = plan(m.load, current, target, target_ignores=ignores, names=names, uncapturable={b"fifo": "a FIFO"})
    assert ops_of(p) == [
        ("remove", b"gen", None),
        ("remove", b"link", None),
        ("remove", b"out/x", None),
        ("rmdir", b"out", None),
    ]
    assert {p for p, _ in p.left} == {b".env", b"keep", b"build"}
    assert dict(p.left)[b".env"] == "ignored at the mark (gitignore), and there then"
    assert dict(p.kept) == {b"fifo": "not captured (a FIFO): did not exist at the mark"}
    ignored.add(b"fifo")  # an uncapturable path M ignored: kept when it was not there, left when it was
    fifo = {b"fifo": "a FIFO"}
    absent = plan(m.load, current, target, target_ignores=ignores, names=names, uncapturable=fifo)
    assert dict(absent.kept) == {b"fifo": "not captured (a FIFO): did not exist at the mark"}
    there_then = IgnoredNames.of([b"fifo"])
    there = plan(m.load, current, target, target_ignores=ignores, names=there_then, uncapturable=fifo)
    assert there.kept == () and dict(there.left)[b"fifo"] == "ignored at the mark (gitignore)"


def test_a_directory_holding_what_the_marks_rules_ignore_stays() -> None:
    """It is ``left`` when M has nothing there, ``kept`` when M has a file in its place."""
    m = Mem()
    target = m.tree({b"a": f("a"), b"out": f("M had a file here")})
    current = m.tree({b"a": f("a"), b"cache/x": f("x"), b"out/y": f("y"), b"gone/z": f("z")})
    below = {
        b"cache": [(b"cache/.env", "ignored at the mark (gitignore)")],
        b"out": [(b"out/debug.log", "ignored at the mark (exclude)")],
    }
    p = plan(m.load, current, target, ignored_below=lambda d: below.get(d, []))
    assert ops_of(p) == [
        ("remove", b"cache/x", None),
        ("remove", b"gone/z", None),
        ("remove", b"out/y", None),
        ("rmdir", b"gone", None),
    ]
    assert dict(p.kept) == {b"out": "holds out/debug.log, ignored at the mark"}
    assert dict(p.left) == {
        b"cache": "holds cache/.env, ignored at the mark",
        b"cache/.env": "ignored at the mark (gitignore)",
        b"out/debug.log": "ignored at the mark (exclude)",
    }
    assert p.counts == {"restore": 0, "recreate": 0, "delete": 4, "mode": 0, "type": 0}


def test_a_directory_that_cannot_be_listed_now_is_kept_with_or_without_force() -> None:
    m = Mem()
    target = m.tree({b"locked/a": f("a"), b"locked/b": f("b"), b"other": f("o")})
    current = m.tree({b"locked": Dir(0o000, listed=False), b"locked/a": f("A"), b"other": f("O")})
    for force in (False, True):
        p = plan(m.load, current, target, uncapturable={b"locked": "permission denied"}, force=force)
        assert ops_of(p) == [("write", b"other", None)]
        assert p.kept == ((b"locked", "cannot be listed now (permission denied): what it holds is unknown"),)
        assert p.left == ()
    # M has a file there: not a directory whose contents M knows, so the usual rule keeps it
    target = m.tree({b"locked": f("a file at M"), b"other": f("o")})
    p = plan(m.load, current, target, uncapturable={b"locked": "permission denied"})
    assert dict(p.kept) == {
        b"locked": "permission denied",
        b"locked/a": "inside locked, not captured: permission denied",
    }


def test_what_lies_in_a_directory_unlisted_at_the_mark_is_left() -> None:
    m = Mem()
    target = m.tree({b"locked": Dir(0o000, listed=False), b"locked/a": f("a")})
    # listed now: what is new inside may have been there at M
    current = m.tree({b"locked/a": f("a"), b"locked/n": f("n"), b"locked/nd/x": f("x")})
    p = plan(m.load, current, target)
    assert [(op.kind, op.path) for op in p.ops] == [("chmod", b"locked")]
    assert dict(p.left) == {
        b"locked/n": "inside locked, which could not be listed at the mark",
        b"locked/nd": "inside locked, which could not be listed at the mark",
    }
    # unlisted then and now: left by name
    current = m.tree({b"locked": Dir(0o000, listed=False), b"locked/a": f("a"), b"locked/n": f("n")})
    both = plan(m.load, current, target, uncapturable={b"locked": "permission denied"})
    assert both.ops == () and both.kept == ()
    assert dict(both.left) == {
        b"locked": "could not be listed at the mark, nor now: what it holds is left as it is",
        b"locked/n": "inside locked, which could not be listed at the mark",
    }
    # an uncapturable path inside it that M's listing could not show: left too, even forced
    hidden = plan(m.load, current, target, uncapturable={b"locked/huge": "over the size cap"}, force=True)
    assert ("locked/huge", "inside locked, which could not be listed at the mark") in [
        (p.decode(), why) for p, why in hidden.left
    ]
    assert all(op.path != b"locked/huge" for op in hidden.ops)


def test_a_restore_names_each_directory_unlisted_at_the_mark(tmp_path: Path) -> None:
    """``write_tree`` (a restore's writer) lists every directory that could not be listed at the
    mark, at any depth, as not restored, and writes what was captured in it by name."""
    m = Mem()
    contents = {e.key: c.encode() for c in ("a", "b", "c") for e in (f(c),)}
    tree = m.tree({
        b"locked": Dir(0o700, listed=False), b"locked/a": f("a"),
        b"deep/er/shut": Dir(0o700, listed=False), b"deep/er/b": f("b"), b"open/c": f("c"),
    })
    done = write_tree(tmp_path / "dest", tree, 0o755, m.load, contents.__getitem__,
                      lambda data: xxh3_hex(data), [])
    why = "could not be listed at the mark: only what was captured in it by name is restored"
    assert sorted(done.not_restored) == [(b"deep/er/shut", why), (b"locked", why)], done.not_restored
    assert (tmp_path / "dest/locked/a").read_bytes() == b"a"
    assert (tmp_path / "dest/deep/er/b").read_bytes() == b"b"
    assert (tmp_path / "dest/open/c").read_bytes() == b"c"


def test_a_path_not_captured_at_the_mark_is_never_replaced_even_forced() -> None:
    m = Mem()
    target = m.tree(
        {
            b"fifo": trees.uncaptured("a FIFO", 0o644, 0, (1, 2)),
            b"d": trees.uncaptured("over the size cap", 0o644, 10, (3, 4)),
            b"same": trees.uncaptured("a socket", 0o755, 0, (5, 6)),
        }
    )
    current = m.tree(
        {
            b"fifo": f("now a file"),
            b"d/inner": f("i"),
            b"same": trees.uncaptured("a socket", 0o755, 0, (5, 6)),
        }
    )
    for force in (False, True):
        p = plan(m.load, current, target, force=force)
        assert p.ops == () and p.left == ()
        assert dict(p.kept) == {
            b"d": "not captured at the mark (over the size cap): cannot be restored",
            b"fifo": "not captured at the mark (a FIFO): cannot be restored",
        }


def test_an_uncapturable_path_absent_at_the_mark_and_ignored_by_its_rules_is_left() -> None:
    m = Mem()
    target = m.tree({b"a": f("a")})
    current = m.tree({b"a": f("a"), b"dir/keep": f("k")})
    unc = {b"huge.log": "over the size cap", b"dir": "permission denied"}

    def ignores(path: bytes, is_dir: bool) -> str | None:  # "*.log" for files, "dir/" for directories
        return "exclude" if (path == b"huge.log" and not is_dir) or (path == b"dir" and is_dir) else None

    p = plan(m.load, current, target, uncapturable=unc, target_ignores=ignores, force=True)
    assert p.ops == () and p.kept == ()
    assert dict(p.left) == {
        b"dir": "ignored at the mark (exclude)",
        b"huge.log": "ignored at the mark (exclude)",
    }


@pytest.mark.parametrize(
    "now,then,want",
    [
        (0o755, 0o700, [("chmod", 0o700, 0o755, "last")]),
        (0o755, 0o555, [("chmod", 0o555, 0o755, "last")]),
        (0o555, 0o755, [("chmod", 0o755, 0o555, "first")]),  # opened first: its own chmod
        (0o500, 0o500, [("chmod", 0o700, 0o500, "first"), ("chmod", 0o500, 0o700, "last")]),
        (0o700, 0o700, []),
        (None, 0o700, []),
        (0o755, None, []),
    ],
)
def test_the_roots_mode(now: int | None, then: int | None, want: list[tuple[str, int, int, str]]) -> None:
    """The root's mode is set to M's (None: unknown, nothing done); a root the owner cannot
    write is opened first and given its mode back last."""
    m = Mem()
    target = m.tree({b"a": f("a")})
    current = m.tree({b"a": f("b")})
    p = plan(m.load, current, target, root_modes=(now, then))
    got = []
    for i, op in enumerate(p.ops):
        if op.path == b"":
            assert op.entry is not None and op.expect is not None
            assert op.entry == Entry("dir", op.entry.mode, 0, "") and op.expect == Entry(
                "dir", op.expect.mode, 0, ""
            )
            got.append((op.kind, op.entry.mode, op.expect.mode, "first" if i == 0 else "last"))
    assert got == want
    assert [op.path for op in p.ops if op.path] == [b"a"]
    assert p.ops[-1].path == b"" or p.ops[-1].path == b"a"
    if want and want[-1][-1] == "last":
        assert p.ops[-1].path == b""
    only = plan(m.load, current, target, only=[b"a"], root_modes=(now, then))  # limited: not the root's mode
    modes = [(op.entry.mode, op.expect.mode) for op in only.ops if op.path == b"" and op.entry and op.expect]
    assert modes == ([] if now is None or now & 0o300 == 0o300 else [(now | 0o300, now), (now, now | 0o300)])


def test_a_created_directory_and_symlink_get_their_own_ops() -> None:
    """A directory is made 0700 and given its mode by a chmod that expects exactly that; a
    symlink is recreated as a symlink, never written as a file."""
    m = Mem()
    target = m.tree({b"d": Dir(0o750), b"d/l": ln("../x"), b"open": Dir(MKDIR_MODE)})
    p = plan(m.load, m.tree({}), target)
    d = trees.lookup(m.load, target, b"d")
    assert d is not None
    assert p.ops == (
        Op("mkdir", b"d", d, None),
        Op("mkdir", b"open", trees.lookup(m.load, target, b"open"), None),
        Op("symlink", b"d/l", ln("../x"), None),
        Op("chmod", b"d", d, Entry("dir", MKDIR_MODE, 0, d.key)),
    )


def test_only_a_path_judges_it_as_the_whole_diff_does() -> None:
    """Limited to one path: a mode change is a chmod (not a rewrite), and a directory whose
    contents changed but not its mode gets no chmod."""
    m = Mem()
    target = m.tree({b"a": f("a", 0o600), b"d/x": f("x"), b"d": Dir(0o750)})
    current = m.tree({b"a": f("a", 0o644), b"d/x": f("y"), b"d": Dir(0o750)})
    assert ops_of(plan(m.load, current, target, only=[b"a"])) == [("chmod", b"a", None)]
    assert ops_of(plan(m.load, current, target, only=[b"d"])) == [("write", b"d/x", None)]
    assert plan(m.load, current, target, only=[b"a"]).counts["mode"] == 1


def test_each_phase_runs_before_the_next_whatever_the_names() -> None:
    """Names sort against the phases (a write named before a mkdir, a removal after both), so
    only the phase puts the opening chmod first, then removals, rmdirs, mkdirs, contents, modes."""
    m = Mem()
    target = m.tree({b"a": f("a"), b"b/x": f("x"), b"ro": Dir(0o555), b"ro/f": f("new")})
    current = m.tree(
        {b"a": f("A"), b"a0": f("gone"), b"ro": Dir(0o555), b"ro/f": f("old"), b"z": f("z"), b"zz/y": f("y")}
    )
    assert kinds(plan(m.load, current, target)) == [
        ("chmod", b"ro"),  # opened for the write inside it
        ("remove", b"a0"),
        ("remove", b"z"),
        ("remove", b"zz/y"),
        ("rmdir", b"zz"),
        ("mkdir", b"b"),
        ("write", b"a"),
        ("write", b"b/x"),
        ("write", b"ro/f"),
        ("chmod", b"b"),
        ("chmod", b"ro"),  # given its mode back
    ]


def test_a_symlinks_mode_is_never_set() -> None:
    """Linux has no lchmod: a chmod would change the mode of what the link points to."""
    m = Mem()
    link = ln("target")
    current = m.tree({b"l": Entry("symlink", 0o755, link.size, link.key), b"target": f("t")})
    target = m.tree({b"l": link, b"target": f("t")})
    assert plan(m.load, current, target).ops == ()
    later = m.tree({b"l": link, b"target": f("t"), b"z": f("z")})  # what comes after it is planned
    assert kinds(plan(m.load, current, later)) == [("write", b"z")]


def test_only_from_an_empty_workspace() -> None:
    m = Mem()
    target = m.tree({b"a/b": f("b"), b"c": f("c")})
    assert kinds(plan(m.load, None, target, only=[b"a/b"])) == [
        ("mkdir", b"a"),
        ("write", b"a/b"),
        ("chmod", b"a"),
    ]


def test_a_path_that_cannot_be_captured_still_gets_its_mode() -> None:
    """A chmod neither overwrites nor deletes: it is not held back by what could not be captured."""
    m = Mem()
    current = m.tree({b"big": f("x", 0o644), b"d/huge": f("h", 0o644)})
    target = m.tree({b"big": f("x", 0o600), b"d/huge": f("h", 0o600)})
    unc = {b"big": "over the size cap", b"d": "permission denied"}
    p = plan(m.load, current, target, uncapturable=unc)
    assert ops_of(p) == [("chmod", b"big", None), ("chmod", b"d/huge", None)] and p.kept == ()


def test_a_path_the_current_tree_holds_as_not_captured() -> None:
    """The current tree's own uncaptured entries count as uncapturable, with their reason; a
    directory holding several names the first in tree order."""
    m = Mem()
    target = m.tree({b"a": f("a")})
    sock = trees.uncaptured("a socket", 0o755, 0, (5, 6))
    current = m.tree({b"a": f("a"), b"sock": sock, b"d/a/b": f("x"), b"d/a.b": f("y")})
    unc = {b"d/a.b": "over the size cap", b"d/a/b": "permission denied"}
    p = plan(m.load, current, target, uncapturable=unc)
    assert p.ops == ()
    assert dict(p.kept) == {
        b"d": "holds d/a/b, not captured: permission denied",
        b"d/a": "holds d/a/b, not captured: permission denied",
        b"sock": "a socket",
    }
    forced = plan(m.load, current, target, uncapturable=unc, force=True)
    assert ("remove", b"sock", "a socket") in ops_of(forced) and forced.kept == ()


def test_a_file_over_a_path_that_cannot_be_captured_is_not_removed() -> None:
    """The current tree says file, the disk now has a directory there holding what could not be
    captured: removing the file would remove that too."""
    m = Mem()
    current = m.tree({b"x": f("x"), b"y": f("y")})
    p = plan(m.load, current, m.tree({}), uncapturable={b"x/big": "over the size cap"})
    assert ops_of(p) == [("remove", b"y", None)]
    assert dict(p.kept) == {b"x": "holds x/big, not captured: over the size cap"}


def test_a_kept_directory_holds_back_only_what_lies_inside_it() -> None:
    m = Mem()
    target = m.tree({b"d/a/b": f("b"), b"e": f("e"), b"z": f("z")})
    p = plan(m.load, m.tree({}), target, uncapturable={b"d": "special file"})
    assert kinds(p) == [("write", b"e"), ("write", b"z")]
    assert dict(p.kept)[b"d/a/b"] == "its directory d is kept"


def test_paths_outside_the_workspace_or_nowhere_are_named() -> None:
    m = Mem()
    t = m.tree({b"a": f("a")})
    with pytest.raises(UsageError, match="^'../etc' is not a path inside the workspace$"):
        plan(m.load, t, t, only=[b"../etc"])
    with pytest.raises(NotFound, match="^a/b exists neither"):  # the first in tree order
        plan(m.load, t, t, only=[b"a.b", b"a/b"])


def test_forced_ops_replace_without_comparing_and_clear_the_way_once() -> None:
    m = Mem()
    current = m.tree({b"big": f("small"), b"d/x": f("x")})
    target = m.tree({b"big": f("at M")})
    unc = {b"big": "over the size cap", b"d/big": "over the size cap", b"d/e/huge": "unreadable"}
    d = trees.lookup(m.load, current, b"d")
    p = plan(m.load, current, target, uncapturable=unc, force=True)
    assert p.ops == (
        Op("remove", b"d/big", None, None, "over the size cap"),  # cleared once, before its directory
        Op("remove", b"d/e/huge", None, None, "unreadable"),
        Op("remove", b"d/x", None, f("x")),
        Op("rmdir", b"d", None, d),
        Op("write", b"big", f("at M"), f("small"), "over the size cap"),  # what it replaces, for the reader
    )
    assert p.kept == () and p.counts == {"restore": 1, "recreate": 0, "delete": 4, "mode": 0, "type": 0}


def test_a_directory_unlisted_then_and_now_is_named_only_inside_the_plans_scope() -> None:
    m = Mem()
    target = m.tree({b"locked": Dir(0o000, listed=False), b"locked/a": f("a"), b"other": f("o")})
    current = m.tree({b"locked": Dir(0o000, listed=False), b"locked/a": f("a"), b"other": f("O")})
    unc = {b"locked": "permission denied", b"huge": "over the size cap"}
    outside = plan(m.load, current, target, uncapturable=unc, only=[b"other"])
    assert kinds(outside) == [("write", b"other")] and outside.kept == () and outside.left == ()
    inside = plan(m.load, current, target, uncapturable=unc, only=[b"locked"])
    assert inside.ops == () and inside.kept == ()
    assert inside.left == (
        (b"locked", "could not be listed at the mark, nor now: what it holds is left as it is"),
    )


def test_every_uncapturable_path_is_judged_whatever_comes_before_it() -> None:
    """Paths handled already (a difference kept, a path M holds) are passed over, not the end of
    the list; one not in the current tree may be either kind, so a directory-only rule counts."""
    m = Mem()
    target = m.tree({b"a": f("a"), b"t": f("t")})
    current = m.tree({b"a": f("A")})
    unc = {b"a": "special file", b"t": "a FIFO", b"cache": "unreadable", b"zz": "over the size cap"}

    def ignores(path: bytes, is_dir: bool) -> str | None:  # "cache/"
        return "gitignore" if path == b"cache" and is_dir else None

    p = plan(m.load, current, target, uncapturable=unc, target_ignores=ignores)
    assert p.ops == ()
    assert dict(p.kept) == {
        b"a": "special file",
        b"t": "a FIFO",
        b"zz": "not captured (over the size cap): did not exist at the mark",
    }
    assert p.left == ((b"cache", "ignored at the mark (gitignore)"),)


def test_directories_get_search_permission_for_what_is_done_below_them() -> None:
    """Every directory on the way needs the owner's search bit, the one worked in write too;
    opened ones get their mode back at the end, the root last of all (after it loses its
    search bit nothing inside can be reached). Regression: the root's chmod tied with the
    top-level directories' and went first."""
    m = Mem()
    cur = m.tree({b"ro": Dir(0o600), b"ro/sub/f": f("old"), b"ok": Dir(0o700), b"ok/sub/g": f("old")})
    tgt = m.tree({b"ro": Dir(0o600), b"ro/sub/f": f("new"), b"ok": Dir(0o700), b"ok/sub/g": f("new")})

    def modes(p: Plan) -> list[tuple[str, bytes, int, int]]:
        return [(o.kind, o.path, o.entry.mode, o.expect.mode) for o in p.ops if o.entry and o.expect]

    assert modes(plan(m.load, cur, tgt, root_modes=(0o700, 0o700))) == [
        ("chmod", b"ro", 0o700, 0o600),
        ("write", b"ok/sub/g", 0o644, 0o644),
        ("write", b"ro/sub/f", 0o644, 0o644),
        ("chmod", b"ro", 0o600, 0o700),
    ]
    assert modes(plan(m.load, cur, tgt, root_modes=(0o600, 0o600))) == [
        ("chmod", b"", 0o700, 0o600),
        ("chmod", b"ro", 0o700, 0o600),
        ("write", b"ok/sub/g", 0o644, 0o644),
        ("write", b"ro/sub/f", 0o644, 0o644),
        ("chmod", b"ro", 0o600, 0o700),
        ("chmod", b"", 0o600, 0o700),
    ]
    # a directory both written in and passed through keeps needing write
    cur = m.tree({b"a": Dir(0o500), b"a/a": f("old"), b"a/b/g": f("old")})
    tgt = m.tree({b"a": Dir(0o500), b"a/a": f("new"), b"a/b/g": f("new")})
    assert kinds(plan(m.load, cur, tgt)) == [
        ("chmod", b"a"),
        ("write", b"a/a"),
        ("write", b"a/b/g"),
        ("chmod", b"a"),
    ]


def test_which_directories_holding_ignored_paths_stay() -> None:
    """A forced removal (something uncaptured is in the way, and --force) is not held back; the
    holder named is the first in tree order; a holder deeper than a directory M keeps still
    stays; a symlink at M in a holder's place is a difference kept, like a file."""
    m = Mem()
    cur = m.tree({b"d/x": f("x"), b"k": f("k")})
    forced = plan(
        m.load,
        cur,
        m.tree({b"k": f("k")}),
        uncapturable={b"d": "permission denied"},
        force=True,
        ignored_below=lambda d: [(d + b"/.env", "ignored at the mark (gitignore)")],
    )
    assert kinds(forced) == [("remove", b"d/x"), ("rmdir", b"d")] and forced.left == ()
    cur = m.tree({b"d/keep": f("k"), b"d/x/y": f("y"), b"e/x/y": f("y"), b"e/x.y": f("z"), b"out/l": f("l")})
    tgt = m.tree({b"d/keep": f("k"), b"out": ln("t")})

    def ignores(path: bytes, is_dir: bool) -> str | None:
        return "gitignore" if path.endswith(b"y") or path == b"out/l" else None

    p = plan(m.load, cur, tgt, target_ignores=ignores)
    assert p.ops == ()
    assert p.kept == ((b"out", "holds out/l, ignored at the mark"),)
    assert dict(p.left) == {
        b"d/x": "holds d/x/y, ignored at the mark",
        b"d/x/y": "ignored at the mark (gitignore)",
        b"e": "holds e/x/y, ignored at the mark",
        b"e/x": "holds e/x/y, ignored at the mark",
        b"e/x/y": "ignored at the mark (gitignore)",
        b"e/x.y": "ignored at the mark (gitignore)",
        b"out/l": "ignored at the mark (gitignore)",
    }


def test_force_never_touches_what_the_marks_rules_ignore_even_in_a_directory_it_removes() -> None:
    """docs/rollback.md: a path M's rules ignore is never touched, with or without --force.
    Regression: clearing the way for a directory's removal force-removed an uncapturable path
    inside it that M's rules ignore, and the directory with it."""
    m = Mem()
    cur = m.tree({b"d/x": f("x"), b"k": f("k")})
    tgt = m.tree({b"k": f("k")})
    unc = {b"d/big.log": "over the size cap", b"d/fifo": "a FIFO"}

    def ignores(path: bytes, is_dir: bool) -> str | None:  # "*.log"
        return "gitignore" if path.endswith(b".log") else None

    p = plan(m.load, cur, tgt, uncapturable=unc, force=True, target_ignores=ignores)
    assert ops_of(p) == [("remove", b"d/fifo", "a FIFO"), ("remove", b"d/x", None)]
    assert p.kept == ()
    assert dict(p.left) == {
        b"d": "holds d/big.log, ignored at the mark",
        b"d/big.log": "ignored at the mark (gitignore)",
    }
    # nothing ignored in it: the way is cleared and the directory goes
    p = plan(m.load, cur, tgt, uncapturable={b"d/fifo": "a FIFO"}, force=True, target_ignores=ignores)
    assert ops_of(p) == [("remove", b"d/fifo", "a FIFO"), ("remove", b"d/x", None), ("rmdir", b"d", None)]


def test_a_path_the_current_tree_holds_is_judged_once_even_when_its_directory_goes() -> None:
    """Regression: clearing the way for a directory's removal also removed the uncaptured paths
    the current tree holds, which get their own judgement: the removal was listed (and
    counted) twice, or the path was both removed and kept."""
    m = Mem()
    sock = trees.uncaptured("a socket", 0o755, 0, (5, 6))
    cur = m.tree({b"d/sock": sock, b"d/x": f("x")})
    p = plan(m.load, cur, m.tree({}), force=True)
    assert ops_of(p) == [("remove", b"d/sock", "a socket"), ("remove", b"d/x", None), ("rmdir", b"d", None)]
    assert p.counts["delete"] == 3 and p.kept == ()

    def ignores(path: bytes, is_dir: bool) -> str | None:  # "sock/": a directory of this name
        return "gitignore" if path == b"d/sock" and is_dir else None

    p = plan(m.load, cur, m.tree({}), force=True, target_ignores=ignores)
    assert all(op.path != b"d/sock" for op in p.ops)
    assert [path for path, _ in p.kept] == [b"d/sock"]


def test_a_directory_opened_stays_open_until_its_own_chmod_when_that_keeps_it_closed() -> None:
    m = Mem()
    cur = m.tree({b"ro": Dir(0o500), b"ro/f": f("old")})
    tgt = m.tree({b"ro": Dir(0o555), b"ro/f": f("new")})  # M's mode has no write bit either
    p = plan(m.load, cur, tgt)
    assert [(op.kind, op.path, op.entry.mode if op.entry else None) for op in p.ops] == [
        ("chmod", b"ro", 0o700),
        ("write", b"ro/f", 0o644),
        ("chmod", b"ro", 0o555),
    ]


def test_kept_and_left_come_in_tree_order_and_only_what_is_in_scope() -> None:
    m = Mem()
    gone = trees.uncaptured("a FIFO", 0o644, 0, (1, 2))
    tgt = m.tree({b"x/y": gone, b"x.y": gone})
    p = plan(m.load, m.tree({b"x/y": f("now"), b"x.y": f("now")}), tgt)
    assert [path for path, _ in p.kept] == [b"x/y", b"x.y"]  # tree order, not byte order
    # uncapturable paths: one M holds unchanged, one outside the scope, then one to report
    cur = m.tree({b"a": f("a"), b"b/x": f("x")})
    unc = {b"a": "over the size cap", b"out": "a FIFO", b"b/huge": "over the size cap"}
    assert dict(plan(m.load, cur, cur, uncapturable=unc).kept) == {
        b"b/huge": "not captured (over the size cap): did not exist at the mark",
        b"out": "not captured (a FIFO): did not exist at the mark",
    }
    assert plan(m.load, cur, cur, uncapturable=unc, only=[b"b"]).kept == (
        (b"b/huge", "not captured (over the size cap): did not exist at the mark"),
    )


def test_a_directory_unlisted_then_and_now_is_not_one_that_cannot_be_listed_now() -> None:
    """Its contents were unknown at M too: a path captured by name inside it is judged on its
    own (here kept: the directory cannot be read), not the whole directory kept as unknown."""
    m = Mem()
    tgt = m.tree({b"locked": Dir(0o000, listed=False), b"locked/a": f("a")})
    cur = m.tree({b"locked": Dir(0o000, listed=False), b"locked/a": f("A")})
    p = plan(m.load, cur, tgt, uncapturable={b"locked": "permission denied"})
    assert p.kept == ((b"locked/a", "inside locked, not captured: permission denied"),)
    assert p.left == (
        (b"locked", "could not be listed at the mark, nor now: what it holds is left as it is"),
    )
    # a FIFO where M had a directory it could not list: replaced when forced, nothing left
    cur = m.tree({b"locked": trees.uncaptured("a FIFO", 0o644, 0, (1, 2))})
    forced = plan(m.load, cur, tgt, force=True)
    assert kinds(forced) == [
        ("remove", b"locked"),
        ("mkdir", b"locked"),
        ("write", b"locked/a"),
        ("chmod", b"locked"),
    ]
    assert forced.left == () and forced.kept == ()


def test_a_path_cleared_for_two_removed_directories_is_removed_once_and_left_in_tree_order() -> None:
    m = Mem()
    cur = m.tree({b"d/x": f("x"), b"d/e/y": f("y")})
    p = plan(m.load, cur, m.tree({}), uncapturable={b"d/e/huge": "over the size cap"}, force=True)
    assert [op.path for op in p.ops].count(b"d/e/huge") == 1

    def ignores(path: bytes, is_dir: bool) -> str | None:  # every file
        return None if is_dir else "gitignore"

    p = plan(m.load, m.tree({b"x/y": f("y"), b"x.y": f("z")}), m.tree({}), target_ignores=ignores)
    assert [path for path, _ in p.left] == [b"x", b"x/y", b"x.y"]  # tree order, not byte order
