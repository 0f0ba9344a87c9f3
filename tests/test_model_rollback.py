"""The model-based randomized rollback test (issue 8), as root and as uid 65534.

Its own CI tier (marker ``model``): a fixed number of rounds and steps, so its time is known; the
seed is printed at the start and with every failure. See :mod:`rollback_model` for the model and
``docs/reliability.md`` for its size and time.
"""

from __future__ import annotations

import os
import shutil
import sys
import time
from collections.abc import Iterator

import pytest
from e2e_helpers import User, myself, need, nobody, world_dir
from rollback_model import GitOracle, Settings, Tally, daemon_for, git_env, run_round

pytestmark = pytest.mark.model


@pytest.fixture(params=["root", "uid65534"])
def user(request: pytest.FixtureRequest) -> Iterator[User]:
    if request.param == "root":
        if os.getuid() != 0:
            need("the root variant of the model test needs root")
        yield myself()
    else:
        yield nobody()


@pytest.mark.timeout(900)
def test_rollback_is_exact_or_loud_against_the_model(user: User) -> None:
    cfg = Settings.from_env(dict(os.environ))
    print(f"rollback model as uid {user.uid}: {cfg.describe()}", file=sys.stderr)
    top = world_dir(user, "snapd-model-")
    d = daemon_for(user, top)
    oracle = GitOracle(top / "oracle", git_env(d.env))
    tally = Tally()
    failures = []
    t0 = time.monotonic()
    try:
        for r in range(cfg.rounds):
            f = run_round(d, top, oracle, tally, cfg, r)
            if f is not None:
                failures.append(f)
                print(f"\nFAILURE in round {r}:\n{f.report()}", file=sys.stderr)
    finally:
        code = d.stop()
        shutil.rmtree(top, ignore_errors=True)
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
