"""The real agents, offline: one scripted turn of each changes the workspace through its own tools.

This is the floor every other agents-tier test stands on: the installed program, the sealed
namespace and the scripted model's dialect for that agent all work. The model asks for a new file,
an edit of an existing one (after a read where the agent demands it) and a delete through the
shell; Aider, which has no tools, answers with edit blocks and cannot delete.
"""

from __future__ import annotations

import pytest
from agent_fixtures import agent_fixture, box_fixture  # noqa: F401 - the fixtures agent and box
from agent_harness import EDIT_AFTER, EDIT_BEFORE, NEW_TEXT, Agent, Sandbox, run_turn, turn_script

pytestmark = [pytest.mark.agents, pytest.mark.timeout(300)]


def test_one_turn_makes_the_scripted_changes(agent: Agent, box: Sandbox) -> None:
    (box.ws / "edit.txt").write_text(EDIT_BEFORE)
    (box.ws / "gone.txt").write_text("bye\n")
    turn = run_turn(
        box, agent, "Please make the changes of TURN-ONE.", turn_script(agent, box.ws, "TURN-ONE")
    )
    assert turn.returncode == 0 and not turn.timed_out, turn.describe()
    assert (box.ws / "new.txt").read_text() == NEW_TEXT, turn.describe()
    assert (box.ws / "edit.txt").read_text() == EDIT_AFTER, turn.describe()
    assert (box.ws / "gone.txt").exists() == (agent.name == "aider"), turn.describe()
    # The turn really went through the model: the prompt reached it, and the final answer came back.
    assert any("TURN-ONE" in str(r["body"]) for r in turn.requests), turn.describe()
    assert "Finished TURN-ONE." in turn.stdout or agent.name == "aider", turn.describe()
