"""Asynchronous, off-policy rollouts: policy versions, episode age and max_staleness (real Ray, real Docker)."""

from __future__ import annotations

from typing import ClassVar

import pytest

from swerl.env import actions
from swerl.errors import ConfigError
from swerl.policies.base import Decision
from swerl.policies.scripted import ScriptedPolicy
from swerl.rollout import RolloutRunner


class VersionedNoOp(ScriptedPolicy):
    """Runs ``ls`` then submits nothing (no grading), stamping its version on each step, as a model policy does."""

    placement: ClassVar[str] = "actor"

    def __init__(self) -> None:
        self.policy_version = 0

    def script(self, task, attempt):
        return [actions.bash("ls"), actions.submit()]

    def act(self, state, observation):
        d = super().act(state, observation)
        return Decision(d.action, {"policy_version": self.policy_version})


def consume(runner: RolloutRunner) -> list:
    """A trainer that updates the policy after every episode it takes."""
    out = []
    for ep in runner.stream():
        out.append(ep)
        runner.set_policy_version(runner.policy_version + 1)
    return out


def test_stale_episodes_are_rerun_or_dropped_and_ages_recorded(ray_session, tasks, sandbox_config):
    """One runner (its actors reused): re-run, then drop, then one episode at a time."""
    with RolloutRunner(
        tasks[:4],
        VersionedNoOp(),
        num_actors=2,
        max_staleness=0,
        env_kwargs={"sandbox_config": sandbox_config},
    ) as r:
        rerun = consume(r)
        reruns = r.stats["stale_rerun"]
        r.stale = "drop"
        dropped = consume(r)
        r.max_staleness, r.max_in_flight = None, 1
        v0 = r.policy_version
        serial = consume(r)
        stats = dict(r.stats)
    assert reruns >= 1 and stats["stale_dropped"] >= 1  # two episodes ran side by side each time
    # re-run: every task handed out once, none starved; drop: the stale ones are gone
    assert sorted(e.task_id for e in rerun) == sorted(t.instance_id for t in tasks[:4])
    assert len(dropped) + stats["stale_dropped"] == 4
    for ep in rerun + dropped:
        assert ep.policy_version == min(s.policy["policy_version"] for s in ep.steps)
        assert ep.timings["age"] > 0 and (ep.age == 0 or stats.get("stale_kept", 0) > 0)
    # one at a time: each starts after the previous was taken and the version bumped
    assert [e.policy_version - v0 for e in serial] == [0, 1, 2, 3] and {e.age for e in serial} == {0}


def test_bad_staleness_options_are_named(tasks):
    with pytest.raises(ConfigError, match="stale must be"):
        RolloutRunner(tasks[:1], VersionedNoOp(), max_staleness=1, stale="keep")
    with pytest.raises(ConfigError, match="groups incomplete"):
        RolloutRunner(tasks[:1], VersionedNoOp(), max_staleness=1, stale="drop", group=True)
