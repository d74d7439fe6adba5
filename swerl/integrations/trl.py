"""TRL: a ``rollout_func`` for ``GRPOTrainer`` (trl >= 1.0) that runs one swerl episode per prompt.

    rollout = SwerlRollout(tasks, sink="episodes.jsonl")
    trainer = GRPOTrainer(model, reward_funcs=swerl_reward, train_dataset=rollout.dataset(),
                          rollout_func=rollout, processing_class=tokenizer, args=GRPOConfig(...))
    trainer.train(); rollout.close()

The dataset's ``prompt`` column names a task (its instance id); TRL repeats each
prompt ``num_generations`` times, so each call gets one prompt per episode. The
trainer's own model generates every action (a driver-placed ``ModelPolicy``
answering every waiting env in one batched ``generate``), the envs run in
``RolloutRunner``'s actors, and the call returns, per episode, the exact
multi-turn token layout (``Episode.to_tokens``): ``prompt_ids``,
``completion_ids`` (the whole multi-turn response), ``logprobs`` (0.0 on
observation tokens), ``env_mask`` (1 on model tokens; TRL masks the loss with
it), and ``swerl_reward``/``swerl_status``/``task_id`` for the reward functions.
An episode that still fails on infrastructure after the runner's retries stops
training with an ``InfraError``: it is never turned into a reward of 0.
"""

from __future__ import annotations

import time
from collections import Counter, defaultdict
from typing import Any

from swerl.episode import Episode
from swerl.errors import ConfigError, InfraError
from swerl.integrations.common import trainer_tokens
from swerl.integrations.hf import HFGenerator
from swerl.policies.model import ModelPolicy
from swerl.rollout.checks import tail, warn_if_no_valid_action
from swerl.rollout.runner import RolloutRunner
from swerl.tasks.instance import Instance
from swerl.tasks.sources import load_tasks


def swerl_reward(completions: list[Any], swerl_reward: list[float], **kwargs: Any) -> list[float]:
    """The reward function to pass to GRPOTrainer: the swerl reward of each episode."""
    return list(swerl_reward)


class SwerlRollout:
    def __init__(
        self,
        tasks: str | list[Instance],
        *,
        max_new_tokens: int = 64,
        system_prompt: str | None = None,
        action_format: Any = None,
        sink: str | None = None,
        num_actors: int = 2,
        envs_per_actor: int = 2,
        env_kwargs: dict[str, Any] | None = None,
        **runner_kwargs: Any,
    ) -> None:
        self.tasks = load_tasks(tasks) if isinstance(tasks, str) else list(tasks)
        self.by_id = {t.instance_id: t for t in self.tasks}
        self.max_new_tokens = max_new_tokens
        self.system_prompt = system_prompt
        self.action_format = action_format
        self.runner_kwargs = {
            "sink": sink,
            "num_actors": num_actors,
            "envs_per_actor": envs_per_actor,
            "env_kwargs": env_kwargs,
            **runner_kwargs,
        }
        self.runner: RolloutRunner | None = None
        self.policy: ModelPolicy | None = None
        self._attempts: Counter[str] = Counter()
        self.timings: dict[str, list[float]] = defaultdict(list)
        """Seconds per call: "rollout" (the whole call) and "generation" (the model's share of it)."""
        self._generating: list[float] = []

    def dataset(self, repeat: int = 1) -> Any:
        """A ``datasets.Dataset`` with one ``prompt`` (the instance id) per task, ``repeat`` times over."""
        from datasets import Dataset

        return Dataset.from_list([{"prompt": t.instance_id} for _ in range(repeat) for t in self.tasks])

    def _task_of(self, prompt: Any) -> str:
        text = prompt if isinstance(prompt, str) else prompt[-1]["content"]
        if text not in self.by_id:
            raise ConfigError(
                f"prompt {text[:80]!r} names no task of this rollout (use SwerlRollout.dataset())"
            )
        return text

    def _policy(self, trainer: Any) -> ModelPolicy:
        model = trainer.accelerator.unwrap_model(trainer.model)
        args = trainer.args
        gen = _TimedGenerator(
            HFGenerator(
                model,
                trainer.processing_class,
                max_new_tokens=self.max_new_tokens,
                temperature=args.temperature,
                top_k=args.top_k or 0,
                top_p=args.top_p,
            ),
            self._generating,
        )
        if self.policy is None:
            self.policy = ModelPolicy(gen, self.system_prompt, self.action_format)
            self.runner = RolloutRunner(self.tasks, self.policy, **self.runner_kwargs).start()
        self.policy.generator = gen
        return self.policy

    def __call__(self, prompts: list[Any], trainer: Any) -> dict[str, list[Any]]:
        t0 = time.perf_counter()
        self._generating.clear()
        self._policy(trainer)
        assert self.runner is not None
        self.runner.set_policy_version(int(trainer.state.global_step))
        work = []
        for p in prompts:
            task_id = self._task_of(p)
            work.append((task_id, self._attempts[task_id]))
            self._attempts[task_id] += 1
        episodes = {ep.key: ep for ep in self.runner.run(work)}
        ordered = [episodes[k] for k in work]
        failed = [ep for ep in ordered if ep.infra_error or ep.reward is None]
        if failed:
            raise InfraError(
                f"{len(failed)} episode(s) failed on infrastructure after retries, e.g. "
                f"{failed[0].task_id}#{failed[0].attempt}: {tail(failed[0].error)}"
            )
        warn_if_no_valid_action(ordered, self.max_new_tokens)
        out = rollout_batch(ordered)
        self.timings["rollout"].append(time.perf_counter() - t0)
        self.timings["generation"].append(sum(self._generating))
        return out

    def close(self) -> None:
        if self.runner is not None:
            self.runner.close()


def rollout_batch(episodes: list[Episode], allow_inexact: bool = False) -> dict[str, list[Any]]:
    """The dict a TRL ``rollout_func`` returns, one entry per episode, from their exact token ids
    (an inexact episode is refused unless ``allow_inexact``; see ``trainer_tokens``)."""
    trajs = [trainer_tokens(ep, allow_inexact=allow_inexact) for ep in episodes]
    return {
        "prompt_ids": [t.prompt_ids for t in trajs],
        "completion_ids": [t.response_ids for t in trajs],
        "logprobs": [t.logprobs for t in trajs],
        "env_mask": [t.loss_mask for t in trajs],
        "swerl_reward": [float(ep.reward) for ep in episodes],  # type: ignore[arg-type]
        "swerl_status": [ep.status for ep in episodes],
        "task_id": [ep.task_id for ep in episodes],
    }


class _TimedGenerator:
    """A generator that adds the seconds of each ``generate`` call to a list (for the benchmark)."""

    def __init__(self, inner: HFGenerator, seconds: list[float]) -> None:
        self.inner = inner
        self.tokenizer = inner.tokenizer
        self.seconds = seconds

    def generate(self, prompts: list[list[int]]) -> list[Any]:
        t0 = time.perf_counter()
        try:
            return self.inner.generate(prompts)
        finally:
            self.seconds.append(time.perf_counter() - t0)


# ------------------------------------------------------------------ learning shown cheaply
class _CandidateScript:
    """A driver policy that applies candidate ``attempt`` of the task's menu and submits."""

    placement = "driver"

    def __init__(self, menu: Any) -> None:
        self.menu = menu

    def start(self, task: Instance, attempt: int) -> list[str]:
        from swerl.env import actions
        from swerl.policies.patch_actions import patch_to_actions

        patch = self.menu.start(task).candidates[attempt]
        return [*(patch_to_actions(patch) if patch else []), actions.submit()]

    def act(self, state: list[str], observation: str) -> str:
        return state.pop(0) if len(state) > 1 else state[0]


def grade_menu(tasks: list[Instance], menu: Any = None, **runner_kwargs: Any) -> dict[str, list[float]]:
    """Each task's ``PatchMenu`` candidates, each applied and graded once for real through
    ``RolloutRunner``: ``{task_id: [reward of candidate 0, 1, ...]}``. An infra error is raised."""
    from swerl.policies.formats import PatchMenu

    menu = menu or PatchMenu()
    work = [(t.instance_id, k) for t in tasks for k in range(len(menu.start(t).candidates))]
    with RolloutRunner(tasks, _CandidateScript(menu), **runner_kwargs) as runner:
        episodes = runner.run(work)
    out: dict[str, list[float]] = {t.instance_id: [0.0] * len(menu.start(t).candidates) for t in tasks}
    for ep in episodes:
        if ep.reward is None:
            raise InfraError(f"grading candidate {ep.attempt} of {ep.task_id} failed: {ep.error}")
        out[ep.task_id][ep.attempt] = ep.reward
    return out


class GradedMenuRollout:
    """A ``rollout_func`` where learning is cheap enough to watch: the menu as a one-turn bandit.

    The trainer's model sees the first prompt a ``ModelPolicy`` would give it (the system
    prompt, then the task's problem statement, through the chat template) and samples one
    token; ``PatchMenu``'s rule turns it into a candidate fix, and the reward is that
    candidate's real swerl grade (``grade_menu``, graded once per candidate, since the same
    patch on the same task grades the same). It is what ``SwerlRollout`` with ``PatchMenu``
    learns, without a sandbox per sample, so a run of many GRPO steps takes seconds: the
    evidence that the trainer, the token layout and the reward carry a signal a model learns.
    """

    def __init__(
        self, tasks: list[Instance], rewards: dict[str, list[float]], system_prompt: str = "Fix the issue."
    ) -> None:
        from swerl.policies.formats import PatchMenu

        self.tasks = list(tasks)
        self.by_id = {t.instance_id: t for t in self.tasks}
        self.rewards = rewards
        self.system_prompt = system_prompt
        self.menu = PatchMenu()

    def dataset(self, repeat: int = 1) -> Any:
        from datasets import Dataset

        return Dataset.from_list([{"prompt": t.instance_id} for _ in range(repeat) for t in self.tasks])

    def __call__(self, prompts: list[Any], trainer: Any) -> dict[str, list[Any]]:
        from swerl.chat_tokens import ChatTokens

        tok = trainer.processing_class
        args = trainer.args
        gen = HFGenerator(trainer.accelerator.unwrap_model(trainer.model), tok, max_new_tokens=1,
                          temperature=args.temperature, top_k=args.top_k or 0, top_p=args.top_p)  # fmt: skip
        tasks = [self.by_id[p if isinstance(p, str) else p[-1]["content"]] for p in prompts]
        system = {"role": "system", "content": self.system_prompt}
        firsts = [
            ChatTokens(tok, [system, {"role": "user", "content": t.problem_statement}]).ids for t in tasks
        ]
        gens = gen.generate([list(p) for p in firsts])
        choices = []
        for t, g in zip(tasks, gens, strict=True):
            state = self.menu.start(t)
            self.menu.action(state, "", g.ids)
            choices.append(state.choice)
        return {
            "prompt_ids": [list(p) for p in firsts],
            "completion_ids": [g.ids for g in gens],
            "logprobs": [g.logprobs for g in gens],
            "swerl_reward": [self.rewards[t.instance_id][c] for t, c in zip(tasks, choices, strict=True)],
            "task_id": [t.instance_id for t in tasks],
            "choice": choices,
        }
