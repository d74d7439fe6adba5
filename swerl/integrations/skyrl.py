"""SkyRL adapters: a ``skyrl_gym`` text env, and a ``GeneratorInterface`` that runs swerl's rollouts.

Two ways in, from the least to the most swerl:

- ``SwerlTextEnv`` (registered in ``skyrl_gym`` as ``swerl_swe``): SkyRL's own
  generator drives it turn by turn, keeps the tokens itself, and each ``step``
  goes to a swerl env in an ``EnvActor``. The reward arrives with the last step.
  Its options (``SwerlEnvConfig``) come through SkyRL's own config, under
  ``environment.skyrl_gym.swerl_swe`` (``skyrl_config_class`` adds that field).
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
import dataclasses
import uuid
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import ray
from skyrl_gym.envs.base_text_env import BaseTextEnv, BaseTextEnvStepOutput
from skyrl_gym.envs.registration import register, registry

from swerl.env.actions import FORMAT_HELP
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
from swerl.rollout.checks import has_valid_action, warn_if_no_valid_action
from swerl.rollout.runner import RolloutRunner, ensure_ray
from swerl.sandbox import reap
from swerl.sandbox.base import default_run_id
from swerl.tasks.instance import Instance
from swerl.tasks.sources import load_tasks

# SkyRL's trainer package, where it imports: skyrl 0.3.0 does not on Python < 3.12 (pydantic
# rejects a typing.TypedDict in skyrl.tinker.types), and then the generator is a plain class
# with the same ``async generate``.
try:
    from skyrl.train.generators.base import GeneratorInterface
except Exception:
    GeneratorInterface = object  # type: ignore[assignment,misc]

ENV_ID = "swerl_swe"
"""A Python identifier: SkyRL finds an env's options as ``getattr(skyrl_gym_cfg, env_class)``."""


def dataset_rows(tasks: str | list[Instance] = "swerl-mini") -> list[dict[str, Any]]:
    """Rows of a SkyRL prompt dataset, one per task. The prompt is swerl's, so a row only names its
    task (and, given a suite name or task file, where ``SwerlTextEnv`` finds it)."""
    insts = load_tasks(tasks) if isinstance(tasks, str) else tasks
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
        raise ConfigError("a swerl_swe row must name its task: give the dataset an instance_id column")
    return str(task_id)


def _pick(tasks: list[Instance], task_id: str) -> Instance:
    for t in tasks:
        if t.instance_id == task_id:
            return t
    raise ConfigError(f"task {task_id!r} is not in the configured swerl tasks")


# ----------------------------------------------------------------------------- env
@dataclass
class SwerlEnvConfig:
    """``SwerlTextEnv``'s options, as SkyRL's config holds them (``environment.skyrl_gym.swerl_swe``).

    ``tasks``: a suite name or task file (a row's own ``tasks`` wins); ``backend``;
    ``env_kwargs``: SWEEnv limits and options; ``actor_cpus``; ``run_id``: the prefix of
    each env's run label (``swerl reap --run-id``); ``max_retries``: fresh sandboxes tried
    when one fails; ``system_prompt``: the system message when the row has none (default
    swerl's, which carries the action format). SkyRL's ``generator.max_turns`` arrives per
    row (``extras["max_turns"]``) and caps the episode's steps.
    """

    tasks: str = "swerl-mini"
    backend: str = "docker"
    env_kwargs: dict[str, Any] = field(default_factory=dict)
    actor_cpus: float = 0.25
    run_id: str | None = None
    max_retries: int = 2
    system_prompt: str | None = None

    @classmethod
    def of(cls, value: Any) -> SwerlEnvConfig:
        """From what SkyRL passes: this dataclass, a mapping or an OmegaConf node (``{}``: defaults)."""
        if isinstance(value, cls):
            return value
        d = plain(value or {})
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(d) - names)
        if unknown:
            raise ConfigError(f"unknown swerl_swe option(s) {unknown}; known: {sorted(names)}")
        return cls(**d)


def skyrl_config_class() -> type:
    """SkyRL's ``SkyRLTrainConfig`` with ``environment.skyrl_gym.swerl_swe`` (a ``SwerlEnvConfig``).

    SkyRL builds its config from typed dataclasses and rejects keys they lack, and its
    generator hands an env ``getattr(cfg.environment.skyrl_gym, env_class)``; so the env's
    options need a field of that name. Use the class where SkyRL's entry point builds its
    config: ``skyrl_config_class().from_cli_overrides(sys.argv[1:])``.
    """
    from skyrl.train.config.config import EnvironmentConfig, SkyRLGymConfig, SkyRLTrainConfig

    gym = dataclasses.make_dataclass(
        "SwerlSkyRLGymConfig",
        [(ENV_ID, SwerlEnvConfig, field(default_factory=SwerlEnvConfig))],
        bases=(SkyRLGymConfig,),
    )
    env = dataclasses.make_dataclass(
        "SwerlEnvironmentConfig", [("skyrl_gym", gym, field(default_factory=gym))], bases=(EnvironmentConfig,)
    )
    return dataclasses.make_dataclass(
        "SwerlSkyRLTrainConfig", [("environment", env, field(default_factory=env))], bases=(SkyRLTrainConfig,)
    )


def system_message(prompt: list[dict[str, Any]], default: str | None) -> dict[str, str]:
    """The row's system message, else ``default``, else swerl's; with the action format's help,
    since the env parses only that format."""
    from swerl.policies.llm import SYSTEM_PROMPT

    given = [m["content"] for m in prompt if m.get("role") == "system"]
    text = given[0] if given else (default or SYSTEM_PROMPT)
    return {"role": "system", "content": text if FORMAT_HELP in text else f"{text}\n{FORMAT_HELP}"}


class SwerlTextEnv(BaseTextEnv):
    """One swerl episode as a ``skyrl_gym`` text env; the sandbox lives in an ``EnvActor``.

    ``env_config``: a ``SwerlEnvConfig`` (or its fields as a mapping). ``extras`` is the
    dataset row: ``instance_id`` names the task, ``attempt`` (optional) numbers the record,
    ``max_turns`` (SkyRL's generator sets it) caps the steps: the episode then ends
    truncated and graded as it stands, like a step limit.

    The first prompt is the system message (``system_message``) and the task's first
    observation. A sandbox that fails is replaced, up to ``max_retries`` times: at ``init``
    by resetting a fresh one, mid-episode by replaying the episode's actions so far in a
    fresh one before this step's. Past that, the trajectory is marked, not raised (one
    failure must not abort SkyRL's batch): it ends with reward 0.0 and
    ``metadata["infra_error"]``, and ``get_metrics()`` reports ``infra_error: 1.0``, since
    SkyRL's env contract has no "no reward"; filter such rows, or use ``SwerlGenerator``,
    which keeps them out of the loss.
    """

    def __init__(self, env_config: Any = None, extras: Mapping[str, Any] | None = None):
        super().__init__()
        self.cfg = SwerlEnvConfig.of(env_config)
        extras = plain(extras or {})
        self.task = _pick(load_tasks(extras.get("tasks") or self.cfg.tasks), _task_id(extras))
        self.attempt = int(extras.get("attempt", 0))
        self.env_kwargs = {"backend": self.cfg.backend, **(self.cfg.env_kwargs or {})}
        self.backend = self.env_kwargs["backend"]
        max_steps = int(self.env_kwargs.get("max_steps", 50))
        if extras.get("max_turns"):
            max_steps = min(max_steps, int(extras["max_turns"])) if max_steps else int(extras["max_turns"])
        self.env_kwargs["max_steps"] = self.max_turns = max_steps
        self.episode: Episode | None = None
        self.actions: list[str] = []
        self.failures: list[str] = []
        self.run_prefix = self.cfg.run_id or default_run_id()
        self.actor_ids: list[str] = []
        self._actor: Any = None
        self._first_obs = ""

    # ------------------------------------------------------------------ sandbox
    def _fresh(self) -> str:
        """A new actor and sandbox, reset on the task; replays ``self.actions``. Returns the observation."""
        self._drop_actor()
        ensure_ray()
        actor_id = f"{self.run_prefix}-{uuid.uuid4().hex[:8]}"
        self.actor_ids.append(actor_id)
        self._actor = EnvActor.options(num_cpus=float(self.cfg.actor_cpus)).remote(
            [self.task], 1, actor_id, self.env_kwargs
        )
        obs, info = ray.get(self._actor.reset.remote(0, self.task.instance_id, self.attempt))
        if info.get("done"):
            raise InfraError(Episode.from_dict(info["episode"]).error or "reset failed")
        for action in self.actions:
            obs, info = ray.get(self._actor.step.remote(0, action))
            if info.get("done"):
                ep = Episode.from_dict(info["episode"])
                raise InfraError(f"replaying the episode ended it: {ep.status} {ep.error or ep.reason}")
        return obs

    def _attempt(self, call: Any) -> Any:
        """``call()``; on an infra error, a fresh sandbox (the actions so far replayed) and again,
        up to ``max_retries`` times. None: gave up (``self.failures`` says why)."""
        for _ in range(self.cfg.max_retries + 1):
            try:
                if self._actor is None:
                    self._first_obs = self._fresh()
                return call()
            except (InfraError, ray.exceptions.RayError) as e:
                self.failures.append(f"{type(e).__name__}: {e}")
                self._drop_actor()
        return None

    def init(self, prompt: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], dict[str, Any]]:
        """Reset a sandbox; the system message, then the task's first observation."""
        got = self._attempt(lambda: self._first_obs)
        if got is None:
            self.episode = Episode(self.task.instance_id, self.attempt, status="infra_error",
                                   error=self.failures[-1], retries=len(self.failures))  # fmt: skip
            got = f"[swerl: no sandbox could be had: {self.failures[-1]}]"
        system = system_message(prompt, self.cfg.system_prompt)
        return [system, {"role": "user", "content": got}], {"instance_id": self.task.instance_id}

    def step(self, action: str) -> BaseTextEnvStepOutput:
        self.turns += 1
        if self.episode is not None and self.episode.infra_error:
            return self._marked()

        def one() -> tuple[str, dict[str, Any]]:
            obs, info = ray.get(self._actor.step.remote(0, action))
            if info.get("done") and Episode.from_dict(info["episode"]).infra_error:
                raise InfraError(Episode.from_dict(info["episode"]).error)
            return obs, info

        got = self._attempt(one)
        if got is None:
            self.episode = Episode(self.task.instance_id, self.attempt, status="infra_error",
                                   error=self.failures[-1], retries=len(self.failures))  # fmt: skip
            return self._marked()
        obs, info = got
        self.actions.append(action)
        if not info.get("done"):
            return BaseTextEnvStepOutput(
                observations=[{"role": "user", "content": obs}], reward=0.0, done=False, metadata={}
            )
        self.episode = ep = Episode.from_dict(info["episode"])
        ep.retries = len(self.failures)
        return BaseTextEnvStepOutput(
            observations=[],
            reward=require_reward(ep),
            done=True,
            metadata={"status": ep.status, "reason": ep.reason},
        )

    def _marked(self) -> BaseTextEnvStepOutput:
        assert self.episode is not None
        return BaseTextEnvStepOutput(
            observations=[],
            reward=0.0,
            done=True,
            metadata={"status": "infra_error", "infra_error": self.episode.error},
        )

    def get_metrics(self) -> dict[str, Any]:
        ep = self.episode
        if ep is None:
            return {}
        return {
            "resolved": float(ep.status == "resolved"),
            "steps": len(self.actions),
            "infra_error": float(ep.infra_error),
            "retries": len(self.failures),
        }

    def _drop_actor(self) -> None:
        if self._actor is None:
            return
        try:
            ray.get(self._actor.close.remote(), timeout=60)
        except Exception:
            pass  # a dead actor: its sandboxes are reaped below
        ray.kill(self._actor)
        self._actor = None

    def close(self) -> None:
        """Stop the actor and remove every sandbox this env had, even if an actor died. Idempotent."""
        self._drop_actor()
        for actor_id in self.actor_ids:
            try:
                reap(self.backend, actor_id)
            except InfraError:
                pass
        self.actor_ids = []


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

    def generate(
        self,
        prompts: list[list[int]],
        max_new_tokens: list[int] | None = None,
        sessions: list[str] | None = None,
    ) -> list[Generation]:
        """One engine call per distinct cap (SkyRL's sampling params are per batch)."""
        caps = max_new_tokens or [None] * len(prompts)
        out: list[Generation | None] = [None] * len(prompts)
        for cap in dict.fromkeys(caps):
            idx = [i for i, c in enumerate(caps) if c == cap]
            params = dict(self.sampling_params or {})
            if cap is not None:
                params["max_tokens"] = cap
            gens = self._call(
                [prompts[i] for i in idx], params or None, [sessions[i] for i in idx] if sessions else None
            )
            for i, g in zip(idx, gens, strict=True):
                out[i] = g
        return out  # type: ignore[return-value]

    def _call(
        self, prompts: list[list[int]], sampling_params: dict[str, Any] | None, sessions: list[str] | None
    ) -> list[Generation]:
        batch = {
            "prompts": None,
            "prompt_token_ids": prompts,
            "sampling_params": sampling_params,
            "session_ids": sessions,
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

    ``generator_cfg`` is SkyRL's ``cfg.generator``; what it reads from it:
    ``max_turns`` (the episode's step limit), ``max_input_length`` (a turn whose prompt
    reaches it is not sampled: the episode ends there, truncated, stop reason
    ``length``), ``zero_reward_on_non_stop`` and ``apply_overlong_filtering`` (as SkyRL
    applies them to its own generator's output). Each engine call carries one session
    id per trajectory (``task_attempt``). An episode that still fails on infrastructure
    after the runner's retries is marked, not raised: its loss mask is all 0, its reward
    the mean of its task's other rewards in the batch (0.0 if none), so it moves neither
    the model nor its group's baseline; ``rollout_metrics["swerl/infra_errors"]`` counts them.
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
        generator_cfg: Any = None,
    ) -> None:
        self.client = inference_engine_client
        self.tokenizer = tokenizer
        self.tasks = load_tasks(tasks) if isinstance(tasks, str) else list(tasks)
        self.by_id = {t.instance_id: t for t in self.tasks}
        self.action_format = make_action_format(action_format)
        self.system_prompt = system_prompt
        self.model = model
        self.runner_kwargs = dict(runner_kwargs or {})
        g = generator_cfg
        self.max_turns = getattr(g, "max_turns", None)
        self.max_input_length = getattr(g, "max_input_length", None)
        self.zero_reward_on_non_stop = bool(getattr(g, "zero_reward_on_non_stop", False))
        self.apply_overlong_filtering = bool(getattr(g, "apply_overlong_filtering", False))
        if self.max_turns:
            env_kwargs = dict(self.runner_kwargs.get("env_kwargs") or {})
            steps = int(env_kwargs.get("max_steps", 50))
            env_kwargs["max_steps"] = min(steps, int(self.max_turns)) if steps else int(self.max_turns)
            self.runner_kwargs["env_kwargs"] = env_kwargs
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
            self.policy = ModelPolicy(
                engine, self.system_prompt, self.action_format, max_input_tokens=self.max_input_length
            )
            self.runner = RolloutRunner(self.tasks, self.policy, **self.runner_kwargs)
        self.policy.generator = engine
        meta = input_batch.get("batch_metadata")
        if meta is not None:
            self.runner.set_policy_version(int(meta.global_step))
        retried = self.runner.stats.get("retried", 0)
        by_key = {ep.key: ep for ep in await run_in_thread(self.runner, work)}
        episodes = [by_key[k] for k in work]
        self.last_episodes = episodes
        warn_if_no_valid_action(episodes)
        rows = [self._row(ep, episodes) for ep in episodes]
        rewards = [r["reward"] for r in rows]
        stops = [r["stop"] for r in rows]
        masks = [r["mask"] for r in rows]
        if self.zero_reward_on_non_stop:
            rewards = [0.0 if s != "stop" else r for r, s in zip(rewards, stops, strict=True)]
        if self.apply_overlong_filtering:
            masks = [[0] * len(m) if s != "stop" else m for m, s in zip(masks, stops, strict=True)]
        logprobs = [r["logprobs"] for r in rows]
        n = len(episodes)
        return {
            "prompt_token_ids": [r["prompt"] for r in rows],
            "response_ids": [r["response"] for r in rows],
            "rewards": rewards,
            "loss_masks": masks,
            "stop_reasons": stops,
            "rollout_metrics": {
                "swerl/resolved": sum(ep.status == "resolved" for ep in episodes) / n,
                "swerl/mean_steps": sum(len(ep.steps) for ep in episodes) / n,
                "swerl/retried": self.runner.stats.get("retried", 0) - retried,
                "swerl/infra_errors": sum(ep.reward is None for ep in episodes),
                "swerl/inexact": sum(not r["exact"] for r in rows),
                "swerl/no_valid_action": sum(not has_valid_action(ep) for ep in episodes) / n,
            },
            "rollout_logprobs": logprobs if all(lp is not None for lp in logprobs) else None,
            "trajectory_ids": input_batch.get("trajectory_ids"),
            "trajectory_generation_times": [ep.timings.get("total", 0.0) for ep in episodes],
            "rollout_expert_indices": None,
            "is_last_step": None,
            "env_metrics": [
                {"status": ep.status, "reason": ep.reason, "steps": len(ep.steps)} for ep in episodes
            ],
            "pixel_values": None,
            "image_grid_thw": None,
        }

    def _row(self, ep: Episode, batch: list[Episode]) -> dict[str, Any]:
        """One GeneratorOutput row: the episode's exact tokens; for an episode that failed on
        infrastructure, the same with no loss and a reward that leaves its group as it is."""
        if ep.steps:
            t = trainer_tokens(ep, self.tokenizer)  # exact, else refused
            prompt, response, mask, logprobs, exact = (
                t.prompt_ids,
                t.response_ids,
                t.loss_mask,
                t.logprobs,
                t.exact,
            )
            stop = (t.finish_reasons or ["stop"])[-1] or "stop"
        else:  # nothing was sampled (no sandbox, or a first prompt over max_input_length)
            from swerl.chat_tokens import ChatTokens
            from swerl.policies.llm import SYSTEM_PROMPT

            system = self.system_prompt if self.system_prompt is not None else SYSTEM_PROMPT
            messages = [{"role": "system", "content": system},
                        {"role": "user", "content": self.by_id[ep.task_id].problem_statement}]  # fmt: skip
            prompt, response = ChatTokens(self.tokenizer, messages).ids, [self.tokenizer.eos_token_id]
            mask, logprobs, exact, stop = [0], [0.0], True, "stop"
        if ep.reason in ("max_input_length", "response_budget"):
            stop = "length"
        reward = ep.reward
        if reward is None:
            others = [e.reward for e in batch if e.task_id == ep.task_id and e.reward is not None]
            reward, mask = (sum(others) / len(others) if others else 0.0), [0] * len(response)
        return {"prompt": list(prompt), "response": list(response), "mask": list(mask),
                "logprobs": logprobs, "reward": reward, "stop": stop, "exact": exact}  # fmt: skip

    def close(self) -> None:
        """Stop the runner's actors and remove their sandboxes. Idempotent."""
        if self.runner is not None:
            self.runner.close()
