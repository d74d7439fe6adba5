"""A small learnable numpy policy: per task, a softmax over candidate patches.

It stands in for a model being trained: it runs in the driver (the trainer's
process), samples a candidate per episode (the gold patch, the suite's
plausible wrong patches, or nothing), applies it through the editor, submits,
and learns from the streamed rewards with a group-relative (GRPO-style) update.
"""

from __future__ import annotations

import json
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import numpy as np

from swerl.env import actions
from swerl.episode import Episode
from swerl.policies.base import Decision
from swerl.policies.patch_actions import patch_to_actions
from swerl.tasks.instance import SUITES_DIR, Instance


def wrong_patches(suite: str = "swerl-mini") -> dict[str, list[str]]:
    """The suite's plausible wrong fixes per task (``wrong_patches.jsonl``), if it has any."""
    path = Path(SUITES_DIR) / suite / "wrong_patches.jsonl"
    out: dict[str, list[str]] = {}
    if path.exists():
        for line in path.read_text().splitlines():
            if line.strip():
                rec = json.loads(line)
                out.setdefault(rec["instance_id"], []).append(rec["patch"])
    return out


@dataclass
class Choice:
    actions: list[str]
    k: int
    logprob: float
    i: int = 0


class CandidatePolicy:
    placement: ClassVar[str] = "driver"

    def __init__(
        self, tasks: list[Instance], wrong: dict[str, list[str]] | None = None, seed: int = 0
    ) -> None:
        wrong = wrong_patches() if wrong is None else wrong
        self.candidates = {t.instance_id: [t.patch, *wrong.get(t.instance_id, []), ""] for t in tasks}
        self.theta = {tid: np.zeros(len(c)) for tid, c in self.candidates.items()}
        self.seed = seed
        self.iteration = 0

    def probs(self, task_id: str) -> np.ndarray:
        z = self.theta[task_id] - self.theta[task_id].max()
        p = np.exp(z)
        return p / p.sum()

    def start(self, task: Instance, attempt: int) -> Choice:
        # Seeded per (iteration, task, attempt): the same draw whatever order episodes finish in.
        rng = np.random.default_rng(
            [self.seed, self.iteration, zlib.crc32(task.instance_id.encode()), attempt]
        )
        p = self.probs(task.instance_id)
        k = int(rng.choice(len(p), p=p))
        patch = self.candidates[task.instance_id][k]
        script = [*(patch_to_actions(patch) if patch else []), actions.submit()]
        return Choice(script, k, float(np.log(p[k])))

    def act(self, state: Choice, observation: str) -> Decision:
        state.i += 1
        info = {"choice": state.k, "logprob": state.logprob} if state.i == 1 else {}
        return Decision(state.actions[min(state.i, len(state.actions)) - 1], info)

    def update(self, group: list[Episode], lr: float = 2.0) -> None:
        """GRPO-style: advantage = reward minus the group mean, over the group's std."""
        scored = [(ep, ep.reward) for ep in group if ep.reward is not None and ep.steps]
        if len(scored) < 2:
            return
        rewards = np.array([r for _, r in scored], dtype=float)
        adv = (rewards - rewards.mean()) / (rewards.std() + 1e-6)
        tid = group[0].task_id
        p = self.probs(tid)
        grad = np.zeros_like(p)
        for (ep, _), a in zip(scored, adv, strict=True):
            k = ep.steps[0].policy["choice"]
            grad += a * (np.eye(len(p))[k] - p)
        self.theta[tid] += lr * grad / len(scored)
