"""Fixtures of the agents tier: each agent, and a sealed sandbox of its own per test (agent_harness).

Not a conftest.py: the test modules of the core tier import ``conftest`` by that name, and a second
conftest.py here would shadow the one in tests/. The agents tier's modules import these fixtures.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from agent_harness import AGENTS, REGISTRY, Agent, Sandbox, new_sandbox, setup_problem
from e2e_helpers import unavailable


def ready(name: str) -> Agent:
    """Agent ``name``, its program installed and a sealed namespace possible here; otherwise the
    test fails with the reason under CI (skips elsewhere)."""
    chosen = REGISTRY[name]
    problem = setup_problem(chosen)
    if problem:
        unavailable(problem)
    return chosen


@pytest.fixture(name="agent", params=AGENTS)
def agent_fixture(request: pytest.FixtureRequest) -> Agent:
    """Each of the five agents, its program installed and a sealed namespace possible here."""
    return ready(request.param)


@pytest.fixture(name="box")
def box_fixture(tmp_path: Path, agent: Agent) -> Sandbox:
    """The agent's private HOME and config dirs, and an empty workspace."""
    return new_sandbox(tmp_path / "agent", agent)
