"""Branching: from a snapshot at step k, run several continuations in parallel."""

from __future__ import annotations

from typing import Any

from swerl.env.snapshot import EnvSnapshot
from swerl.episode import Episode
from swerl.policies.scripted import ScriptedPolicy
from swerl.rollout.runner import RolloutRunner
from swerl.tasks.instance import Instance


class ContinuationPolicy(ScriptedPolicy):
    """Attempt i plays continuation i (then submits, if it does not itself)."""

    def __init__(self, continuations: list[list[str]]) -> None:
        self.continuations = [list(c) for c in continuations]

    def script(self, task: Instance, attempt: int) -> list[str]:
        return self.continuations[attempt]


def branch(snapshot: EnvSnapshot, continuations: list[list[str]], **runner_kwargs: Any) -> list[Episode]:
    """One Episode per continuation, each restored from ``snapshot`` on whichever actor is free.

    Episode ``i`` has ``attempt == i``; its steps are those after the snapshot.
    """
    task = Instance.from_dict(snapshot.task, where="snapshot task")
    policy = ContinuationPolicy(continuations)
    runner_kwargs.setdefault("num_actors", min(len(continuations), 2))
    with RolloutRunner(
        [task], policy, attempts=len(continuations), snapshot=snapshot, **runner_kwargs
    ) as runner:
        return sorted(runner.run(), key=lambda e: e.attempt)
