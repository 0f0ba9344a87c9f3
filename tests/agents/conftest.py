"""Fixtures of the agents tier: one sealed sandbox per test and agent (agent_harness)."""

from __future__ import annotations

from pathlib import Path

import pytest
from agent_harness import AGENTS, REGISTRY, Agent, Sandbox, new_sandbox, setup_problem
from e2e_helpers import unavailable


@pytest.fixture(params=AGENTS)
def agent(request: pytest.FixtureRequest) -> Agent:
    """Each of the five agents, its program installed and a sealed namespace possible here."""
    chosen = REGISTRY[request.param]
    problem = setup_problem(chosen)
    if problem:
        unavailable(problem)
    return chosen


@pytest.fixture
def box(tmp_path: Path, agent: Agent) -> Sandbox:
    """The agent's private HOME and config, and a workspace holding edit.txt and gone.txt."""
    sandbox = new_sandbox(tmp_path / "agent", agent)
    return sandbox
