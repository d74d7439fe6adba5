"""An asynchronous GRPO loop on exact token records, with the weights pushed to the sampler each step.

    runner = RolloutRunner(tasks, LLMPolicy(model_dir, base_url=server.url, ...), attempts=4,
                           group=True, max_staleness=1)
    with runner:
        logs = train_grpo(runner, model, steps=30, groups_per_step=2)

This is the production shape: a separate sampler (a vLLM server that ``LLMPolicy``
drives token-in/token-out from the actors), episodes streamed in GRPO groups by
``RolloutRunner`` and pulled by a background thread (``Prefetch``), so the next
groups' episodes run while the trainer steps. Each step the trainer scores its
batch on the recorded ids (``trainer_tokens``: exact records only), takes one
clipped policy-gradient step (PPO's ratio against the *recorded* logprobs, group-
normalised advantages), and pushes the new weights to the server
(``runner.set_policy_version(v, weights=model)``, checked against the server by a
probe). Every model token carries the version that sampled it; a token sampled by
the weights the trainer holds must have a ratio of 1, and each step records the
largest deviation over those tokens (``StepLog.on_policy_dev``): the proof that the
trainer learns from what the server really sampled.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

from swerl.episode import Episode
from swerl.errors import ConfigError
from swerl.integrations.common import trainer_tokens
from swerl.rollout.prefetch import Prefetch


@dataclass
class StepLog:
    """One optimizer step: what it learned from and where its wall time went."""

    step: int
    version: int
    """The weights' version the step started from (its on-policy tokens were sampled by it)."""
    reward: float
    """Mean reward of the step's episodes."""
    reward_std: float
    """Mean within-group standard deviation of the reward."""
    loss: float
    episodes: int
    dropped: int
    """Episodes left out: still an infra error after the runner's retries (never a reward 0)."""
    on_policy_tokens: int
    on_policy_dev: float
    """Max |trainer logprob - recorded logprob| over tokens sampled by ``version``: ~0 if exact."""
    stale_tokens: int
    stale_ratio_dev: float
    """Mean |ratio - 1| over tokens sampled by older weights (what the clip is for)."""
    sampled_by: list[int]
    """The versions that sampled the step's model tokens (each turn records its own)."""
    wait_s: float
    """The trainer blocked on the stream (episodes not done yet)."""
    train_s: float
    """Forward, backward and the optimizer."""
    push_s: float
    """The new weights to the sampler: saved, reloaded by the server, probed."""
    wall_s: float

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def work_items(tasks: list[str], group_size: int, rounds: int) -> list[tuple[str, int]]:
    """(task_id, attempt): a group of ``group_size`` attempts per task, for ``rounds`` rounds."""
    return [(t, a) for r in range(rounds) for t in tasks for a in range(r * group_size, (r + 1) * group_size)]


def train_grpo(
    runner: Any,
    model: Any,
    *,
    steps: int,
    groups_per_step: int,
    optimizer: Any = None,
    lr: float = 1e-2,
    clip: float = 0.2,
    push: bool = True,
    checkpoint_dir: str | None = None,
    on_step: Callable[[StepLog], None] | None = None,
) -> list[StepLog]:
    """``steps`` GRPO steps of ``groups_per_step`` groups each from ``runner`` (``group=True``; its
    ``attempts`` is the group size), training ``model`` (a transformers causal LM, the sampler's
    architecture) in place. With ``push`` the weights go to the runner's policy first (version
    0: the server samples exactly the trainer's weights) and after every step."""
    import torch

    if not runner.group:
        raise ConfigError("train_grpo needs RolloutRunner(group=True): GRPO normalises rewards per group")
    opt = optimizer or torch.optim.AdamW(model.parameters(), lr=lr)
    version = runner.policy_version
    if push:
        runner.set_policy_version(version, weights=model)
    needed = steps * groups_per_step * runner.attempts
    # a group is the next `attempts` episodes of a task: enough rounds for every step, plus the ones
    # in flight when training stops (they are cancelled when the runner closes)
    ids = [t.instance_id for t in runner.tasks]
    rounds = math.ceil(needed / (len(ids) * runner.attempts)) + 2
    work = work_items(ids, runner.attempts, rounds)
    logs: list[StepLog] = []
    with Prefetch(runner.stream(work), ahead=groups_per_step) as stream:
        groups = iter(stream)
        for step in range(steps):
            t0, w0 = time.perf_counter(), stream.waited
            batch = [next(groups) for _ in range(groups_per_step)]
            wait = stream.waited - w0
            t1 = time.perf_counter()
            log = _grpo_update(model, opt, batch, version, clip)
            t2 = time.perf_counter()
            version += 1
            runner.set_policy_version(version, weights=model if push else None)
            t3 = time.perf_counter()
            log.update(step=step, wait_s=wait, train_s=t2 - t1, push_s=t3 - t2, wall_s=t3 - t0)
            logs.append(StepLog(**log))
            if on_step:
                on_step(logs[-1])
    return logs


def _grpo_update(model: Any, opt: Any, batch: list[list[Episode]], version: int, clip: float) -> dict:
    """One clipped policy-gradient step on ``batch`` (groups of one task's episodes): PPO's clipped
    ratio against the recorded logprobs, group-normalised advantages, averaged over model tokens."""
    import torch

    rewards, stds, dropped = [], [], 0
    terms: list[tuple[Any, float]] = []  # (trajectory, advantage)
    for group in batch:
        kept = [e for e in group if e.reward is not None and not e.infra_error]
        dropped += len(group) - len(kept)
        r = torch.tensor([float(e.reward) for e in kept])  # type: ignore[arg-type]
        rewards.extend(r.tolist())
        if len(kept) < 2:
            continue
        stds.append(float(r.std()))
        adv = (r - r.mean()) / (r.std() + 1e-4)
        terms.extend((trainer_tokens(e), float(a)) for e, a in zip(kept, adv, strict=True))
    on_dev, on_n, stale_dev, stale_n, versions = 0.0, 0, 0.0, 0, set()
    loss, tokens = torch.zeros(()), 0
    for t, a in terms:
        if t.logprobs is None:
            raise ConfigError("train_grpo needs the sampler's logprobs on every model token")
        ids = torch.tensor([t.prompt_ids + t.response_ids])
        logits = model(ids).logits[0, len(t.prompt_ids) - 1 : -1].float()
        logp = torch.log_softmax(logits, -1).gather(1, ids[0, len(t.prompt_ids) :, None])[:, 0]
        old = torch.tensor(t.logprobs)
        mask = torch.tensor(t.loss_mask, dtype=torch.float)
        ratio = torch.exp(logp - old)
        with torch.no_grad():
            for (s, e), v in zip(t.turns, t.policy_versions, strict=True):
                versions.add(v)
                if v == version:
                    on_dev = max(on_dev, float((logp[s:e] - old[s:e]).abs().max()))
                    on_n += e - s
                else:
                    stale_dev += float((ratio[s:e] - 1).abs().sum())
                    stale_n += e - s
        if a == 0.0:
            continue
        obj = torch.minimum(ratio * a, torch.clamp(ratio, 1 - clip, 1 + clip) * a)
        loss = loss - (obj * mask).sum()
        tokens += int(mask.sum())
    loss = loss / max(1, tokens)  # each model token weighs the same, however long its episode
    if loss.requires_grad:
        loss.backward()
        opt.step()
        opt.zero_grad()
    return {
        "version": version,
        "reward": sum(rewards) / len(rewards) if rewards else float("nan"),
        "reward_std": sum(stds) / len(stds) if stds else 0.0,
        "loss": float(loss.detach()),
        "episodes": len(rewards),
        "dropped": dropped,
        "on_policy_tokens": on_n,
        "on_policy_dev": on_dev,
        "stale_tokens": stale_n,
        "stale_ratio_dev": stale_dev / stale_n if stale_n else 0.0,
        "sampled_by": sorted(v for v in versions if v is not None),
    }
