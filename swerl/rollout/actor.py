"""EnvActor: a Ray actor that owns its sandboxes and hosts one or more SWEEnvs.

An actor costs far more memory than a sandbox, so one actor hosts several envs
(``n_envs``); it is a threaded actor, so its envs step concurrently (sandbox I/O
releases the GIL). Every sandbox it starts carries the actor's own run id, so
the runner can reap exactly its containers if it dies.
"""

from __future__ import annotations

import os
import socket
import threading
import time
import traceback
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import ray

from swerl.env.swe_env import SWEEnv
from swerl.errors import InfraError
from swerl.policies.base import STOP, Policy, as_decision
from swerl.rollout.nodes import current_node
from swerl.rollout.recorder import EpisodeRecorder
from swerl.sandbox.base import SandboxConfig
from swerl.sandbox.pool import PoolStats
from swerl.tasks.instance import Instance


class EnvActorImpl:
    def __init__(
        self, tasks: list[Instance], n_envs: int, actor_id: str, env_kwargs: dict[str, Any] | None = None
    ) -> None:
        env_kwargs = dict(env_kwargs or {})
        base_cfg: SandboxConfig = env_kwargs.pop("sandbox_config", None) or SandboxConfig()
        self.actor_id = actor_id
        self.sandbox_config = base_cfg.replace(run_id=actor_id)
        self.envs = [SWEEnv(tasks, sandbox_config=self.sandbox_config, **env_kwargs) for _ in range(n_envs)]
        self._recorders: dict[int, EpisodeRecorder] = {}
        self._lock = threading.Lock()
        self._node = current_node()
        # Threads start only when first needed; at most one per env, so concurrent
        # step_many calls (never more items than envs) never wait on each other.
        self._pool = ThreadPoolExecutor(max(1, n_envs), thread_name_prefix="swerl-step")

    def where(self) -> dict[str, Any]:
        return {
            "actor": self.actor_id,
            "node": socket.gethostname(),
            **self._node,
            "pid": os.getpid(),
            "backend": self.envs[0].backend if self.envs else "",
        }

    def _where(self, slot: int, snapshot: Any) -> dict[str, Any]:
        extra = {"branched_from_step": snapshot.step} if snapshot is not None else {}
        return {**self.where(), "slot": slot, **extra}

    def ping(self) -> str:
        return self.actor_id

    def pool_stats(self) -> dict[str, dict[str, int]]:
        """The warm pools' counts summed over this actor's envs: ``agent`` and ``grading``."""
        out: dict[str, dict[str, int]] = {}
        for role, attr in (("agent", "pool"), ("grading", "grade_pool")):
            pools = [getattr(env, attr) for env in self.envs if getattr(env, attr) is not None]
            out[role] = {k: sum(getattr(p.stats, k) for p in pools) for k in PoolStats.__dataclass_fields__}
        return out

    # ------------------------------------------------ policy inside the actor
    def run_episode(
        self,
        slot: int,
        task_id: str,
        attempt: int,
        policy: Policy,
        snapshot: Any = None,
        next_task: str | None = None,
    ) -> dict[str, Any]:
        env = self.envs[slot]
        rec = EpisodeRecorder(task_id, attempt, self._where(slot, snapshot), _first_step(snapshot))
        try:
            obs, _info = env.reset(options=_reset_options(task_id, snapshot, next_task))
        except InfraError as e:
            return rec.fail(e).to_dict()
        rec.reset_done()
        state = policy.start(env.task, attempt)
        while True:
            try:
                decision = as_decision(policy.act(state, obs))
            except InfraError as e:  # the model server failed: retried, never scored
                return rec.fail(e, reason="policy_error").to_dict()
            if STOP in decision.info:
                obs, reward, _, _, info = env.stop(decision.info[STOP])
                return rec.finish(reward, info).to_dict()
            obs, reward, terminated, truncated, info = env.step(decision.action)
            rec.step_done(decision, obs, reward, info)
            if terminated or truncated:
                return rec.finish(reward, info).to_dict()

    # ------------------------------------------------ policy in the driver
    def reset(
        self, slot: int, task_id: str, attempt: int, snapshot: Any = None, next_task: str | None = None
    ) -> tuple[str, dict[str, Any]]:
        """Start an episode; ``next_task``: the one this slot runs next, whose sandbox the env's
        warm pool starts during this episode."""
        rec = EpisodeRecorder(task_id, attempt, self._where(slot, snapshot), _first_step(snapshot))
        with self._lock:
            self._recorders[slot] = rec
        try:
            obs, info = self.envs[slot].reset(options=_reset_options(task_id, snapshot, next_task))
        except InfraError as e:
            return "", {"done": True, "episode": rec.fail(e).to_dict()}
        rec.reset_done()
        return obs, info

    def step(
        self, slot: int, action: str, policy_info: dict[str, Any] | None = None
    ) -> tuple[str, dict[str, Any]]:
        """One step; when the episode ends, the finished Episode comes back in the info."""
        from swerl.policies.base import Decision

        env, rec = self.envs[slot], self._recorders[slot]
        decision = Decision(action, policy_info or {})
        if STOP in decision.info:
            obs, reward, _, _, info = env.stop(decision.info[STOP])
            return obs, {"done": True, "episode": rec.finish(reward, info).to_dict()}
        t = time.monotonic()
        obs, reward, terminated, truncated, info = env.step(action)
        rec.step_done(decision, obs, reward, info)
        if terminated or truncated:
            return obs, {"done": True, "episode": rec.finish(reward, info).to_dict()}
        return obs, {"done": False, "duration": time.monotonic() - t}  # the env's own time, no Ray

    def step_many(
        self, items: list[tuple[int, str, dict[str, Any] | None]]
    ) -> list[tuple[str, dict[str, Any]]]:
        """``step`` for several of this actor's envs in one round trip, stepped concurrently.

        One call per decision round instead of one per env: the per-step cost of Ray
        (a task submission, a reply, a wake-up of the driver) is paid once per actor.
        An exception in one env's step does not fail the others: its reply is
        ``("", {"done": True, "exception": text})``.
        """
        if len(items) == 1:
            return [self._step_caught(*items[0])]
        return list(self._pool.map(lambda item: self._step_caught(*item), items))

    def _step_caught(
        self, slot: int, action: str, policy_info: dict[str, Any] | None
    ) -> tuple[str, dict[str, Any]]:
        try:
            return self.step(slot, action, policy_info)
        except Exception:
            return "", {"done": True, "exception": traceback.format_exc()[-4000:]}

    def close(self) -> None:
        self._pool.shutdown(wait=False)
        for env in self.envs:
            env.close()


def _first_step(snapshot: Any) -> int:
    return snapshot.step + 1 if snapshot is not None else 1


def _reset_options(task_id: str, snapshot: Any, next_task: str | None = None) -> dict[str, Any]:
    if snapshot is not None:
        return {"snapshot": snapshot}
    return {"task": task_id} | ({"next_task": next_task} if next_task else {})


EnvActor = ray.remote(EnvActorImpl)
