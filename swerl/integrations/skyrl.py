"""SkyRL adapters: a ``skyrl_gym`` text env, and a ``GeneratorInterface`` that runs swerl's rollouts.

Two ways in, from the least to the most swerl:

- ``SwerlTextEnv`` (registered in ``skyrl_gym`` as ``swerl-swe``): SkyRL's own
  generator drives it turn by turn, keeps the tokens itself, and each ``step``
  goes to a swerl env in an ``EnvActor``. The reward arrives with the last step.
- ``SwerlGenerator``: SkyRL's generator is replaced. The whole batch runs
  through ``RolloutRunner`` (parallel sandboxes, infra errors retried on another
  actor), a ``ModelPolicy`` sampling through SkyRL's inference engine client, and
  each Episode's exact token record (``Episode.to_tokens``) becomes one row of the
  ``GeneratorOutput``, in the input's order.

The prompt the model sees is swerl's (its system prompt, then the task's first
observation); the dataset row only names the task, by ``instance_id``.
"""

from __future__ import annotations

import asyncio
import uuid
from collections import Counter
from collections.abc import Mapping
from typing import Any

import ray
from skyrl_gym.envs.base_text_env import BaseTextEnv, BaseTextEnvStepOutput
from skyrl_gym.envs.registration import register, registry

from swerl.episode import Episode
from swerl.errors import ConfigError, InfraError, PolicyError
from swerl.integrations.common import (
    make_action_format,
    on_loop,
    plain,
    require_reward,
    run_in_thread,
    trainer_tokens,
)
from swerl.policies.model import Generation, ModelPolicy
from swerl.rollout.actor import EnvActor
from swerl.rollout.runner import RolloutRunner, ensure_ray
from swerl.sandbox import reap
from swerl.sandbox.base import default_run_id
from swerl.tasks.instance import Instance, load_instances

# SkyRL's trainer package, where it imports: skyrl 0.3.0 does not on Python < 3.12 (pydantic
# rejects a typing.TypedDict in skyrl.tinker.types), and then the generator is a plain class
# with the same ``async generate``.
try:
    from skyrl.train.generators.base import GeneratorInterface
except Exception:
    GeneratorInterface = object  # type: ignore[assignment,misc]

ENV_ID = "swerl-swe"


def dataset_rows(tasks: str | list[Instance] = "swerl-mini") -> list[dict[str, Any]]:
    """Rows of a SkyRL prompt dataset, one per task. The prompt is swerl's, so a row only names its
    task (and, given a suite name or task file, where ``SwerlTextEnv`` finds it)."""
    insts = load_instances(tasks) if isinstance(tasks, str) else tasks
    where = {"tasks": tasks} if isinstance(tasks, str) else {}
    return [
        {
            "prompt": [{"role": "user", "content": t.instance_id}],
            "env_class": ENV_ID,
            "instance_id": t.instance_id,
            **where,
        }
        for t in insts
    ]


def _task_id(extras: Mapping[str, Any] | None, fallback: Any = None) -> str:
    extras = extras or {}
    task_id = extras.get("instance_id") or (extras.get("extra_info") or {}).get("instance_id") or fallback
    if not task_id:
        raise ConfigError("a swerl-swe row must name its task: give the dataset an instance_id column")
    return str(task_id)


def _pick(tasks: list[Instance], task_id: str) -> Instance:
    for t in tasks:
        if t.instance_id == task_id:
            return t
    raise ConfigError(f"task {task_id!r} is not in the configured swerl tasks")


# ----------------------------------------------------------------------------- env
class SwerlTextEnv(BaseTextEnv):
    """One swerl episode as a ``skyrl_gym`` text env; the sandbox lives in an ``EnvActor``.

    ``env_config`` (what SkyRL's config holds for ``swerl-swe``, if anything):
    ``tasks`` (a suite name or file, default ``swerl-mini``; a row's own ``tasks``
    wins), ``backend``, ``env_kwargs`` (SWEEnv limits and options), ``actor_cpus``,
    ``run_id`` (a prefix of its sandboxes' run label, for ``swerl reap --run-id``). ``extras`` is the dataset row:
    ``instance_id`` names the task, ``attempt`` (optional) numbers the record.
    An episode that ends in an infra error raises ``InfraError``: SkyRL's env
    contract has no "no reward", and a 0 would train on a broken sandbox.
    """

    def __init__(self, env_config: Mapping[str, Any] | None = None, extras: Mapping[str, Any] | None = None):
        super().__init__()
        cfg = plain(env_config or {})
        extras = plain(extras or {})
        self.task = _pick(
            load_instances(extras.get("tasks") or cfg.get("tasks", "swerl-mini")), _task_id(extras)
        )
        self.attempt = int(extras.get("attempt", 0))
        env_kwargs = {"backend": cfg.get("backend", "docker"), **(cfg.get("env_kwargs") or {})}
        self.backend = env_kwargs["backend"]
        self.max_turns = int(env_kwargs.get("max_steps", 50))
        self.episode: Episode | None = None
        ensure_ray()
        self.actor_id = f"{cfg.get('run_id') or default_run_id()}-{uuid.uuid4().hex[:8]}"
        self._actor = EnvActor.options(num_cpus=float(cfg.get("actor_cpus", 0.25))).remote(
            [self.task], 1, self.actor_id, env_kwargs
        )

    def init(self, prompt: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], dict[str, Any]]:
        """Reset the sandbox; the prompt's system messages, then the task's first observation."""
        obs, info = ray.get(self._actor.reset.remote(0, self.task.instance_id, self.attempt))
        if info.get("done"):
            self._finish(info)  # raises: the sandbox could not be had
        system = [m for m in prompt if m.get("role") == "system"]
        return [*system, {"role": "user", "content": obs}], {"instance_id": self.task.instance_id}

    def step(self, action: str) -> BaseTextEnvStepOutput:
        self.turns += 1
        obs, info = ray.get(self._actor.step.remote(0, action))
        if not info.get("done"):
            return BaseTextEnvStepOutput(
                observations=[{"role": "user", "content": obs}], reward=0.0, done=False, metadata={}
            )
        ep = self._finish(info)
        return BaseTextEnvStepOutput(
            observations=[],
            reward=require_reward(ep),
            done=True,
            metadata={"status": ep.status, "reason": ep.reason},
        )

    def _finish(self, info: dict[str, Any]) -> Episode:
        self.episode = Episode.from_dict(info["episode"])
        require_reward(self.episode)
        return self.episode

    def get_metrics(self) -> dict[str, Any]:
        ep = self.episode
        return {"resolved": float(ep.status == "resolved"), "steps": len(ep.steps)} if ep else {}

    def close(self) -> None:
        """Stop the actor and remove its sandboxes, even if the actor died. Idempotent."""
        if self._actor is None:
            return
        try:
            ray.get(self._actor.close.remote(), timeout=60)
        except Exception:
            pass  # a dead actor: its sandboxes are reaped below
        ray.kill(self._actor)
        self._actor = None
        try:
            reap(self.backend, self.actor_id)
        except InfraError:
            pass


if ENV_ID not in registry:
    register(id=ENV_ID, entry_point=f"{__name__}:SwerlTextEnv")


# ----------------------------------------------------------------------- generator
class EngineGenerator:
    """``ModelPolicy``'s Generator over SkyRL's inference engine client (token ids in, token ids out).

    Called from the runner's thread; each batch is one ``client.generate`` on the
    trainer's event loop, so every env waiting for an action is sampled together.
    """

    def __init__(
        self,
        client: Any,
        tokenizer: Any,
        loop: asyncio.AbstractEventLoop,
        sampling_params: dict[str, Any] | None = None,
        model: str | None = None,
    ) -> None:
        self.client = client
        self.tokenizer = tokenizer
        self.loop = loop
        self.sampling_params = sampling_params
        self.model = model

    def generate(self, prompts: list[list[int]]) -> list[Generation]:
        batch = {
            "prompts": None,
            "prompt_token_ids": prompts,
            "sampling_params": self.sampling_params,
            "session_ids": None,
            "mm_features": None,
            "cache_salt": None,
        }
        out = on_loop(self.loop, self.client.generate(batch, model=self.model))
        ids, logprobs = out.get("response_ids"), out.get("response_logprobs")
        if not isinstance(ids, list) or len(ids) != len(prompts):
            raise PolicyError(f"the inference engine answered {len(prompts)} prompts with {ids!r:.200}")
        stops = out.get("stop_reasons") or ["stop"] * len(ids)
        if "abort" in stops:
            raise PolicyError("the inference engine aborted a request")
        return [
            Generation(
                list(r), list(logprobs[i]) if logprobs else None, "length" if stops[i] == "length" else "stop"
            )
            for i, r in enumerate(ids)
        ]


class SwerlGenerator(GeneratorInterface):
    """SkyRL's ``GeneratorInterface``: each batch runs through one ``RolloutRunner``, one Episode per row.

    A row names its task (``env_extras[i]["instance_id"]``, else its trajectory id's
    ``instance_id``); SkyRL repeats each prompt ``n_samples_per_prompt`` times, and
    each repetition is a new attempt (numbered per task across batches, so a sink
    keeps them apart). The runner and its actors are started on the first batch and
    kept until ``close()``. ``runner_kwargs`` go to ``RolloutRunner``
    (``num_actors``, ``envs_per_actor``, ``env_kwargs``, ``backend``, ``sink``, ...);
    a batch's ``global_step`` becomes the policy version its steps record.
    Concurrent ``generate`` calls (SkyRL's fully async trainer) take turns on the
    one runner.
    """

    def __init__(
        self,
        inference_engine_client: Any,
        tokenizer: Any,
        tasks: str | list[Instance] = "swerl-mini",
        *,
        action_format: Any = "text",
        system_prompt: str | None = None,
        model: str | None = None,
        runner_kwargs: dict[str, Any] | None = None,
    ) -> None:
        self.client = inference_engine_client
        self.tokenizer = tokenizer
        self.tasks = load_instances(tasks) if isinstance(tasks, str) else list(tasks)
        self.by_id = {t.instance_id: t for t in self.tasks}
        self.action_format = make_action_format(action_format)
        self.system_prompt = system_prompt
        self.model = model
        self.runner_kwargs = dict(runner_kwargs or {})
        self.runner: RolloutRunner | None = None
        self.policy: ModelPolicy | None = None
        self._attempts: Counter[str] = Counter()
        self._turn = asyncio.Lock()
        self.last_episodes: list[Episode] = []
        """The Episodes of the last batch, in input order (for logging and tests)."""

    def _work(self, input_batch: Mapping[str, Any]) -> list[tuple[str, int]]:
        """(task id, attempt) of each input row."""
        extras = input_batch.get("env_extras") or [None] * len(input_batch["prompts"])
        traj_ids = input_batch.get("trajectory_ids") or [None] * len(extras)
        work = []
        for ex, tid in zip(extras, traj_ids, strict=True):
            task_id = _task_id(ex, getattr(tid, "instance_id", None))
            if task_id not in self.by_id:
                raise ConfigError(f"task {task_id!r} is not in the configured swerl tasks")
            work.append((task_id, self._attempts[task_id]))
            self._attempts[task_id] += 1
        return work

    async def generate(self, input_batch: Mapping[str, Any]) -> dict[str, Any]:
        async with self._turn:
            return await self._generate(input_batch)

    async def _generate(self, input_batch: Mapping[str, Any]) -> dict[str, Any]:
        work = self._work(input_batch)
        engine = EngineGenerator(
            self.client,
            self.tokenizer,
            asyncio.get_running_loop(),
            input_batch.get("sampling_params"),
            self.model,
        )
        if self.runner is None or self.policy is None:
            self.policy = ModelPolicy(engine, self.system_prompt, self.action_format)
            self.runner = RolloutRunner(self.tasks, self.policy, **self.runner_kwargs)
        self.policy.generator = engine
        meta = input_batch.get("batch_metadata")
        if meta is not None:
            self.runner.set_policy_version(int(meta.global_step))
        retried = self.runner.stats.get("retried", 0)
        by_key = {ep.key: ep for ep in await run_in_thread(self.runner, work)}
        episodes = [by_key[k] for k in work]
        self.last_episodes = episodes
        rewards = [require_reward(ep) for ep in episodes]
        trajs = [trainer_tokens(ep, self.tokenizer) for ep in episodes]  # exact, else refused
        logprobs = [t.logprobs for t in trajs]
        return {
            "prompt_token_ids": [t.prompt_ids for t in trajs],
            "response_ids": [t.response_ids for t in trajs],
            "rewards": rewards,
            "loss_masks": [t.loss_mask for t in trajs],
            "stop_reasons": [(t.finish_reasons or ["stop"])[-1] or "stop" for t in trajs],
            "rollout_metrics": {
                "swerl/resolved": sum(ep.status == "resolved" for ep in episodes) / len(episodes),
                "swerl/mean_steps": sum(len(ep.steps) for ep in episodes) / len(episodes),
                "swerl/retried": self.runner.stats.get("retried", 0) - retried,
                "swerl/inexact": sum(not t.exact for t in trajs),
            },
            "rollout_logprobs": logprobs if all(lp is not None for lp in logprobs) else None,
            "trajectory_ids": input_batch.get("trajectory_ids"),
            "trajectory_generation_times": [ep.timings.get("total", 0.0) for ep in episodes],
            "rollout_expert_indices": None,
            "is_last_step": None,
            "env_metrics": [{"status": ep.status, "steps": len(ep.steps)} for ep in episodes],
            "pixel_values": None,
            "image_grid_thw": None,
        }

    def close(self) -> None:
        """Stop the runner's actors and remove their sandboxes. Idempotent."""
        if self.runner is not None:
            self.runner.close()
