"""verl adapter: an ``AgentLoopBase`` registered as ``swerl_swe``, one swerl episode per sample.

verl's ``AgentLoopWorker`` calls ``run`` once per trajectory. The episode runs
through ``RolloutRunner`` (its sandbox in an ``EnvActor``, an infra error retried
on a fresh one) with a ``ModelPolicy`` whose every turn is
``server_manager.generate(prompt_ids=...)`` on verl's own rollout servers. The
chat is kept as exact token ids (each observation appended as a chat-template
delta, ``swerl.chat_tokens``), and the Episode's token record becomes the
``AgentLoopOutput``: ``response_mask`` 1 on sampled tokens, ``response_logprobs``
from the server, ``reward_score`` from swerl's grading.

Point verl at it with ``actor_rollout_ref.rollout.agent.agent_loop_config_path``
set to ``AGENT_LOOP_CONFIG`` (the YAML beside this file, whose keys are this
class's options) and give each dataset row ``agent_name: swerl_swe`` and
``extra_info.instance_id`` (``dataset_rows`` builds them).
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any, ClassVar
from uuid import uuid4

from verl.experimental.agent_loop.agent_loop import (
    AgentLoopBase,
    AgentLoopMetrics,
    AgentLoopOutput,
    _agent_loop_registry,
    register,
)

from swerl.errors import ConfigError, PolicyError
from swerl.integrations.common import (
    make_action_format,
    on_loop,
    plain,
    require_reward,
    run_in_thread,
    trainer_tokens,
)
from swerl.policies.model import Generation, ModelPolicy
from swerl.rollout.checks import NoActionStreak, has_valid_action
from swerl.rollout.runner import RolloutRunner
from swerl.tasks.instance import Instance
from swerl.tasks.sources import load_tasks

AGENT_NAME = "swerl_swe"
AGENT_LOOP_CONFIG = Path(__file__).with_name("verl_agent_loop.yaml")
"""The agent-loop config file to pass to verl (``agent_loop_config_path``)."""


def dataset_rows(
    tasks: str | list[Instance] = "swerl-mini", data_source: str = "swerl"
) -> list[dict[str, Any]]:
    """Rows of a verl RL dataset (write them to parquet), one per task; the prompt is swerl's own."""
    insts = load_tasks(tasks) if isinstance(tasks, str) else tasks
    return [
        {
            "data_source": data_source,
            "prompt": [{"role": "user", "content": t.instance_id}],
            "agent_name": AGENT_NAME,
            "extra_info": {"instance_id": t.instance_id},
        }
        for t in insts
    ]


class ServerGenerator:
    """``ModelPolicy``'s Generator over verl's server manager, one request per prompt.

    Called from the runner's thread; each call goes to ``generate`` on the agent
    loop's event loop. All turns of a trajectory share ``request_id``, so verl's
    sticky routing keeps them on one server (prefix cache).
    """

    def __init__(
        self,
        server_manager: Any,
        tokenizer: Any,
        loop: asyncio.AbstractEventLoop,
        sampling_params: dict[str, Any],
        prompt_length: int,
    ) -> None:
        self.server_manager = server_manager
        self.prompt_length = prompt_length
        self.tokenizer = tokenizer
        self.loop = loop
        self.sampling_params = sampling_params
        self.request_id = uuid4().hex
        self.calls = 0
        self.seconds = 0.0
        """Time spent waiting on the server, for verl's ``generate_sequences`` metric."""

    def generate(self, prompts: list[list[int]], max_new_tokens: list[int] | None = None) -> list[Generation]:
        caps = max_new_tokens or [None] * len(prompts)
        return [self._one(p, cap) for p, cap in zip(prompts, caps, strict=True)]

    def _one(self, prompt_ids: list[int], cap: int | None) -> Generation:
        self.calls += 1
        if self.calls == 1 and len(prompt_ids) > self.prompt_length:
            # verl's own loops cut a long first prompt before sampling; here the trajectory is
            # trained on exactly as sampled, so a first prompt that does not fit is an error
            raise ConfigError(
                f"the prompt has {len(prompt_ids)} tokens, more than "
                f"rollout.prompt_length={self.prompt_length}; raise data.max_prompt_length"
            )
        params = dict(self.sampling_params)
        if cap is not None:  # the room left in verl's response budget
            params["max_tokens"] = min(cap, params.get("max_tokens", cap))
        t0 = time.monotonic()
        out = on_loop(
            self.loop,
            self.server_manager.generate(
                request_id=self.request_id, prompt_ids=prompt_ids, sampling_params=params
            ),
        )
        self.seconds += time.monotonic() - t0
        if out.stop_reason == "aborted":
            raise PolicyError("the rollout server aborted the request")
        ids = list(out.token_ids)
        if cap is not None and len(ids) > cap:
            raise PolicyError(f"the rollout server sampled {len(ids)} tokens where max_tokens was {cap}")
        stopped = bool(ids) and ids[-1] == self.tokenizer.eos_token_id
        logprobs = list(out.log_probs) if out.log_probs is not None else None
        return Generation(ids, logprobs, "stop" if stopped else "length")


class SwerlAgentLoop(AgentLoopBase):
    """One swerl episode per sample (options come from the agent-loop YAML, see ``AGENT_LOOP_CONFIG``).

    ``tasks``: suite name or task file; ``action_format``: text, tool_call or menu;
    ``env_kwargs``: SWEEnv limits and options (``max_steps``, ...); ``backend``,
    ``max_retries`` and ``actor_cpus`` go to ``RolloutRunner``; ``run_id`` prefixes each
    episode's run label (for ``swerl reap --run-id``).

    The episode stops at verl's response budget (``rollout.response_length``: every token
    after the first prompt, observations included): each completion is capped to the room
    left, and a turn with no room left is not sampled; the env ends the episode there as
    truncated (reason ``response_budget``), and its reward follows the env's truncation rule,
    the diff so far graded (``env_kwargs.grade_on_truncate``, default true; false scores 0).
    So every token verl trains on is one the episode really had, and the reward is that of
    what those tokens did: nothing is cut after the fact.

    verl never shows a loop its batch (it builds one loop per sample), so the warning that
    a batch had no valid action is given per worker process after ``warn_after_no_action``
    episodes in a row without one (0: never); each episode's ``swerl_valid_action`` says it too.
    """

    streak: ClassVar[NoActionStreak] = NoActionStreak()
    """Per worker process: the loops of one worker share it (one loop object per sample)."""

    def __init__(
        self,
        *args: Any,
        tasks: str = "swerl-mini",
        backend: str = "docker",
        action_format: str = "text",
        system_prompt: str | None = None,
        env_kwargs: dict[str, Any] | None = None,
        max_retries: int = 2,
        actor_cpus: float = 0.25,
        run_id: str | None = None,
        warn_after_no_action: int = 8,
        **kwargs: Any,
    ) -> None:
        kwargs.pop("name", None)  # the YAML entry's own name, passed along by hydra
        super().__init__(*args, **kwargs)
        self.tasks = {t.instance_id: t for t in load_tasks(tasks)}
        self.action_format = make_action_format(action_format)
        self.system_prompt = system_prompt
        self.runner_kwargs = {
            "backend": backend,
            "env_kwargs": plain(env_kwargs or {}),
            "max_retries": max_retries,
            "actor_cpus": actor_cpus,
            "num_actors": 1,
        }
        self.run_id = run_id
        self.streak.after = warn_after_no_action

    async def run(self, sampling_params: dict[str, Any], **kwargs: Any) -> AgentLoopOutput:
        task_id = (kwargs.get("extra_info") or {}).get("instance_id")
        if task_id not in self.tasks:
            raise ConfigError(
                f"a swerl_swe row needs extra_info.instance_id of a configured task, got {task_id!r}"
            )
        loop, limit = asyncio.get_running_loop(), self.rollout_config.prompt_length
        gen = ServerGenerator(self.server_manager, self.tokenizer, loop, sampling_params, limit)
        n = self.rollout_config.response_length
        policy = ModelPolicy(gen, self.system_prompt, self.action_format, max_response_tokens=n)
        run_id = f"{self.run_id}-{uuid4().hex[:8]}" if self.run_id else None
        runner = RolloutRunner([self.tasks[task_id]], policy, run_id=run_id, **self.runner_kwargs)
        (ep,) = await run_in_thread(runner, close=True)
        reward = require_reward(ep)
        self.streak.add(ep)
        t = trainer_tokens(ep)  # sampled through verl's own server: exact, else refused
        if len(t.response_ids) > n:  # the policy stops at the budget; anything else is a bug
            raise PolicyError(f"episode response of {len(t.response_ids)} tokens over response_length={n}")
        grade_time = ep.timings.get("grade", 0.0)
        return AgentLoopOutput(
            prompt_ids=t.prompt_ids,
            response_ids=t.response_ids,
            response_mask=t.loss_mask,
            response_logprobs=t.logprobs,
            reward_score=reward,
            num_turns=2 * len(ep.steps),
            metrics=AgentLoopMetrics(
                generate_sequences=gen.seconds,
                tool_calls=max(0.0, ep.timings.get("total", 0.0) - gen.seconds - grade_time),
                compute_score=grade_time,
            ),
            extra_fields={
                "swerl_status": ep.status,
                "swerl_reason": ep.reason,
                "swerl_steps": len(ep.steps),
                "swerl_exact": t.exact,
                "swerl_valid_action": has_valid_action(ep),
                "swerl_actor": ep.where.get("actor", ""),
            },
        )


# verl's ``register`` overwrites the name's entry. verl's worker fills its registry from the
# agent-loop YAML first and imports this module only when it instantiates the first loop, so
# registering unconditionally here would replace the YAML's options for every later episode.
if AGENT_NAME not in _agent_loop_registry:
    register(AGENT_NAME)(SwerlAgentLoop)
