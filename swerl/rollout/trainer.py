"""A trainer that learns from streamed rewards: the toy policy, GRPO over groups.

curve = train_toy(load_tasks("swerl-mini"), iterations=4)
# mean reward per iteration rises as the policy learns to pick the gold patch
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from swerl.policies.toy import CandidatePolicy
from swerl.rollout.runner import RolloutRunner
from swerl.tasks.instance import Instance


def train_toy(
    tasks: list[Instance],
    iterations: int = 4,
    group_size: int = 4,
    lr: float = 2.0,
    seed: int = 0,
    on_iteration: Callable[[int, float], None] | None = None,
    **runner_kwargs: Any,
) -> list[float]:
    """Run ``iterations`` rounds of (rollout a group per task, update); return mean reward per round."""
    policy = CandidatePolicy(tasks, seed=seed)
    curve: list[float] = []
    with RolloutRunner(tasks, policy, attempts=group_size, group=True, **runner_kwargs) as runner:
        for it in range(iterations):
            policy.iteration = it
            rewards: list[float] = []
            for group in runner.stream():
                policy.update(group, lr=lr)
                rewards.extend(ep.reward for ep in group if ep.reward is not None)
            curve.append(float(np.mean(rewards)) if rewards else float("nan"))
            if on_iteration:
                on_iteration(it, curve[-1])
    return curve
