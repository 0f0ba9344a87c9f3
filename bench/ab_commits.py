"""Two commits of snapd against each other, interleaved in one run: was a change faster, or was
the machine slower that day?

Figures of different days are not comparable on a shared virtual machine (the host's load, its
CPU steal, the kernel it boots). This script answers "did commit B make X slower than commit
A?" the way the other scripts answer "is snapd faster than the peer?": both sides in the same
run, alternated (A B, B A, A B ...), on the same tree and, where it can be, the same store.

Each commit is checked out into a worktree of its own under ``bench/data/ab/`` (kept between
runs), its bytecode compiled, and its daemon and client run from this repository's venv with
``PYTHONPATH`` set to that worktree. Both commits must read and write the same store format,
but for ``restart --own-stores``.

- ``restart``: one baseline, then ``--rounds`` restarts per side, timed from process start to
  ``status`` answering and to the first mark's reply (as ``bench_restart.py``). With
  ``--own-stores`` each side restarts its own copy of the baseline's SNAPD_HOME, after one
  untimed restart (which upgrades the copy): commits of different store formats compare.
- ``marks``: one baseline; per round and side a daemon started on that store, ``--marks`` marks
  of 10 changed files sent right after their changes through ``Client.call`` (client-side wall),
  each followed by ``--gap``: ``peer`` (the peer's snap, as in ``bench_mark.py``), ``sleep``
  (1.5 s idle) or ``none``; and the daemon's VmRSS after each side's marks of a round.
- ``baseline``: per round, the peer's first snap, then ``snapctl watch`` on a fresh SNAPD_HOME
  for each side (as ``bench_baseline.py``; peer without fsync).
- ``gc``: one baseline (old side), its SNAPD_HOME kept at rest; per round and side a copy of
  it, a daemon started on the copy and ``snapctl gc`` timed (at rest: the repack of the whole
  baseline, as ``common.gc_at_rest`` runs it).

No target is judged here; it prints min / median / max per side and the ratio of medians, and
writes ``docs/bench-results/ab-<what>-<corpus>-<size>.json`` with both commits.

    python bench/ab_commits.py --old 678f1e0 --new HEAD --what restart --rounds 8
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import time
from pathlib import Path
from typing import Any

from bench_restart import restart_once
from common import (
    DATA,
    PYTHON,
    REPO,
    SNAPCTL,
    Daemon,
    Results,
    age_tree,
    capture_pool,
    daemon_run,
    git_out,
    proc_mem,
    run_timed,
    scratch_copy,
    spread,
    start_watching,
    tree_path,
)
from peer import Changes, peer_init, peer_snap, remove, warm

WORKTREES = DATA / "ab"


def worktree(rev: str) -> tuple[str, Path]:
    """(full commit, the directory snapd is imported from) for ``rev``; HEAD of a clean tree is
    this repository itself."""
    commit = git_out("rev-parse", "--verify", f"{rev}^{{commit}}")
    if not commit:
        raise SystemExit(f"{rev}: no such commit")
    if commit == git_out("rev-parse", "HEAD") and not git_out("status", "--porcelain", "--", "snapd"):
        path = REPO
    else:
        path = WORKTREES / commit[:12]
        if not path.exists():
            WORKTREES.mkdir(parents=True, exist_ok=True)
            subprocess.run(["git", "-C", str(REPO), "worktree", "add", "-q", "--detach", str(path), commit],
                           check=True)
    subprocess.run([str(PYTHON), "-m", "compileall", "-q", str(path / "snapd")], check=True)
    return commit, path


def use(d: Daemon, base_env: dict[str, str], path: Path) -> None:
    d.env = {**base_env, "PYTHONPATH": str(path)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--old", required=True, help="commit A (any git revision)")
    ap.add_argument("--new", default="HEAD", help="commit B")
    ap.add_argument("--what", choices=["restart", "marks", "baseline", "gc"], required=True)
    ap.add_argument("--corpus", choices=["django", "npm"], default="django")
    ap.add_argument("--size", choices=["1k", "10k", "100k", "500k"], default="100k")
    ap.add_argument("--rounds", type=int, default=8, help="rounds; each runs both sides once")
    ap.add_argument("--marks", type=int, default=30, help="marks per side and round (--what marks)")
    ap.add_argument("--gap", choices=["peer", "sleep", "none"], default="peer")
    ap.add_argument("--own-stores", action="store_true",
                    help="restart: each side on its own copy of the baseline's SNAPD_HOME")
    args = ap.parse_args()
    if args.own_stores and args.what != "restart":
        raise SystemExit("--own-stores: only with --what restart")
    if args.rounds < 2:
        raise SystemExit("--rounds: at least 2, so each side goes first once")
    if args.marks < 1:
        raise SystemExit("--marks: at least 1")
    sides = {"old": worktree(args.old), "new": worktree(args.new)}
    res = Results(f"ab-{args.what}", args.corpus, args.size, {
        "what": args.what, "rounds": args.rounds, "order": "alternated per round",
        "old": sides["old"][0], "new": sides["new"][0],
        **({"marks_per_side_and_round": args.marks, "gap": args.gap} if args.what == "marks" else {}),
        **({"stores": "one copy of the baseline's SNAPD_HOME per side, each restarted once untimed"}
           if args.own_stores else {}),
    })
    res(f"  old {sides['old'][0][:12]} ({sides['old'][1]}), new {sides['new'][0][:12]} ({sides['new'][1]})")
    ws, scratch, root = scratch_copy(tree_path(args.corpus, args.size), f"ab-{args.what}")
    if args.what == "restart":
        age_tree(ws)
    warm(ws)
    out: dict[str, list[Any]] = {"old": [], "new": [], "peer": []}

    def order(r: int) -> list[str]:
        return ["old", "new"] if r % 2 == 0 else ["new", "old"]

    with daemon_run(res, scratch) as d:
        base_env = dict(d.env)
        if args.what == "gc":
            use(d, base_env, sides["old"][1])
            start_watching(d, root)
            d.stop()
            for r in range(args.rounds):
                for name in order(r):
                    home = scratch / f"home-{name}-{r}"
                    shutil.copytree(d.home, home, symlinks=True)
                    one = Daemon(home, scratch)
                    use(one, one.env, sides[name][1])
                    one.start()
                    out[name].append(run_timed([str(SNAPCTL), "gc"], one.env)[0])
                    one.stop()
                    remove(home)
                old_s, new_s = out["old"][-1], out["new"][-1]
                res(f"    round {r + 1}/{args.rounds}: old {old_s:.2f} s, new {new_s:.2f} s")
        elif args.what == "baseline":
            for r in range(args.rounds):
                gitdir = scratch / f"peer-{r}"
                peer_init(ws, gitdir)
                os.sync()
                out["peer"].append(peer_snap(ws, gitdir, "baseline")[0])
                remove(gitdir)
                for name in order(r):
                    home = scratch / f"home-{name}-{r}"
                    one = Daemon(home, scratch)
                    use(one, one.env, sides[name][1])
                    one.start()
                    os.sync()
                    t, _ = run_timed([str(SNAPCTL), "watch", root, "--json"], one.env)
                    one.stop()
                    remove(home)
                    out[name].append(t)
                res(f"    round {r + 1}/{args.rounds}: peer {out['peer'][-1]:.2f} s, "
                    f"old {out['old'][-1]:.2f} s, new {out['new'][-1]:.2f} s")
        else:
            use(d, base_env, sides["old"][1])
            start_watching(d, root)
            gitdir = scratch / "peer"
            if args.what == "marks" and args.gap == "peer":
                peer_init(ws, gitdir)
                peer_snap(ws, gitdir, "baseline")
            d.stop()
            daemons = {"old": d, "new": d}
            if args.own_stores:
                daemons["new"] = Daemon(scratch / "home-new", scratch)
                shutil.copytree(d.home, daemons["new"].home, symlinks=True)
                for name in ("old", "new"):
                    use(daemons[name], daemons[name].env if name == "new" else base_env, sides[name][1])
                    daemons[name].endpoint = daemons[name].endpoint_now()
                    restart_once(daemons[name], root)  # untimed: a new format's upgrade happens here
            changed = Changes(ws, 10, capture_pool(Path(root)))
            from snapd.ipc.client import Client

            for r in range(args.rounds):
                for name in order(r):
                    if daemons[name] is d:
                        use(d, base_env, sides[name][1])
                    if args.what == "restart":
                        x = restart_once(daemons[name], root)
                        out[name].append(x["mark_s"])
                        out.setdefault(f"{name}_status", []).append(x["status_s"])
                        continue
                    d.start()
                    with Client(d.endpoint_now(), timeout_s=600) as c:
                        c.call("mark", label="warm", workspace=os.fsencode(root))
                        for i in range(args.marks):
                            changed()
                            t0 = time.perf_counter()
                            c.call("mark", label="turn", workspace=os.fsencode(root))
                            out[name].append(time.perf_counter() - t0)
                            if args.gap == "peer":
                                peer_snap(ws, gitdir, f"{name}-{r}-{i}")
                            elif args.gap == "sleep":
                                time.sleep(1.5)
                    out.setdefault(f"{name}_rss", []).append(proc_mem(d.pid)["VmRSS"] / 1e6)
                    d.stop()
                if args.what == "restart":
                    res(f"    round {r + 1}/{args.rounds}: first mark old {out['old'][-1]:.3f} s, "
                        f"new {out['new'][-1]:.3f} s")
                else:
                    old_ms, new_ms = (statistics.median(out[n][-args.marks :]) * 1e3 for n in ("old", "new"))
                    res(f"    round {r + 1}/{args.rounds}: median old {old_ms:.1f} ms, new {new_ms:.1f} ms")
        unit = "ms" if args.what == "marks" else "s"
        label = {"restart": "process start -> first mark done", "marks": "Client.call mark, client-side wall",
                 "baseline": "snapctl watch (baseline)", "gc": "snapctl gc, the baseline at rest"}[args.what]
        for name in ("old", "new"):
            res.figure(f"{name}_s", spread(out[name]), f"{name} {sides[name][0][:10]}: {label}", unit=unit)
            if args.what == "restart":
                res.figure(f"{name}_status_s", spread(out[f"{name}_status"]),
                           f"{name} {sides[name][0][:10]}: process start -> answers status")
            if args.what == "marks":
                res.figure(f"{name}_rss_MB", spread(out[f"{name}_rss"]),
                           f"{name} {sides[name][0][:10]}: daemon VmRSS after the round's marks", unit="MB")
        if out["peer"]:
            res.figure("peer_s", spread(out["peer"]), "peer's first snap, between the rounds")
        ratio = statistics.median(out["new"]) / statistics.median(out["old"])
        res.figure("new_over_old", round(ratio, 3), "new / old (medians; > 1: new is slower)")


if __name__ == "__main__":
    main()
