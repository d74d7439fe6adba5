"""The pipeline bench: swerl's RolloutRunner and the peer's Ray-task pipeline score the same agent alike."""

from __future__ import annotations

import pytest

from swerl.bench import pipeline
from swerl.tasks.sources import load_tasks

pytestmark = pytest.mark.slow


@pytest.fixture(autouse=True, scope="module")
def _own_ray():
    """The bench joins (or starts) a Ray of its own; leave none behind for the next module."""
    import ray

    yield
    if ray.is_initialized():
        ray.shutdown()


def test_both_pipelines_give_the_gold_agent_the_same_rewards():
    """Two tasks at concurrency 2: every episode of both sides resolved, rewards keyed alike."""
    tasks = load_tasks("swerl-mini")[:2]
    (row,) = pipeline.compare(tasks, levels=[2], waves=1, steps=2)
    assert row["episodes"] == 2
    assert row["swerl_rewards"] == {(t.instance_id, 0): 1.0 for t in tasks}
    assert row["peer_rewards"] == row["swerl_rewards"]
    assert row["same"] and row["swerl"] > 0 and row["peer"] > 0


def test_agent_commands_end_with_the_gold_patch_applied_by_git():
    task = load_tasks("swerl-mini")[0]
    cmds = pipeline.agent_commands(task, 3)
    assert len(cmds) == 4
    assert cmds[-1].startswith("git apply - <<'") and task.patch.rstrip("\n") in cmds[-1]
