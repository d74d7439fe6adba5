"""What the async trainer adapters (SkyRL, verl) share: the runner off the event loop, and rewards.

Both trainers call an ``async`` hook and sample through an ``async`` engine, while
``RolloutRunner`` is synchronous and calls its policy's ``Generator`` from its
own thread. So the runner runs in a worker thread (``run_in_thread``) and the
Generator hands each sampling call back to the trainer's event loop
(``on_loop``), where the engine lives.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from swerl.episode import Episode
from swerl.errors import ConfigError, InexactTokens, InfraError
from swerl.rollout.runner import RolloutRunner
from swerl.trajectory import TokenTrajectory

T = TypeVar("T")


def make_action_format(name_or_format: Any) -> Any:
    """An action format object, or one named as a config names it: text, tool_call, menu."""
    if not isinstance(name_or_format, str):
        return name_or_format
    from swerl.policies import formats

    known = {"text": formats.TextActions, "tool_call": formats.ToolCallActions, "menu": formats.PatchMenu}
    if name_or_format not in known:
        raise ConfigError(f"unknown action_format {name_or_format!r}; known: {', '.join(known)}")
    return known[name_or_format]()


def plain(value: Any) -> dict[str, Any]:
    """A trainer's config node (OmegaConf, which both trainers use, or any mapping) as plain
    dicts and lists: SWEEnv options travel to Ray actors."""
    from omegaconf import OmegaConf

    return OmegaConf.to_container(value, resolve=True) if OmegaConf.is_config(value) else dict(value)


def on_loop(loop: asyncio.AbstractEventLoop, coro: Coroutine[Any, Any, T]) -> T:
    """Run ``coro`` on ``loop`` (the trainer's) from another thread and wait for its result."""
    return asyncio.run_coroutine_threadsafe(coro, loop).result()


async def run_in_thread(
    runner: RolloutRunner, work: list[tuple[str, int]] | None = None, close: bool = False
) -> list[Episode]:
    """``runner.run(work)`` in a thread of its own, so the event loop keeps serving the engine meanwhile.

    Not on the loop's default executor: that pool is small (``min(32, cpus + 4)`` threads),
    every waiting episode would hold one of its threads, and the engine's own calls often
    need the same pool, so enough concurrent episodes deadlock it. One thread per call is
    an executor sized to the concurrency by construction.
    """

    def run() -> list[Episode]:
        try:
            return runner.run(work)
        finally:
            if close:
                runner.close()

    pool = ThreadPoolExecutor(1, thread_name_prefix="swerl-episodes")
    try:
        return await asyncio.get_running_loop().run_in_executor(pool, run)
    finally:
        pool.shutdown(wait=False)


def require_reward(episode: Episode) -> float:
    """The episode's reward; an infra error that outlived the runner's retries is raised, never scored 0."""
    if episode.reward is None:
        raise InfraError(
            f"episode {episode.task_id}#{episode.attempt} has no reward ({episode.status}, "
            f"after {episode.retries} retries): {episode.error or episode.reason}"
        )
    return episode.reward


def trainer_tokens(episode: Episode, tokenizer: Any = None, allow_inexact: bool = False) -> TokenTrajectory:
    """``episode.to_tokens(tokenizer)``, refused unless exact: every adapter hands a trainer these.

    An inexact layout (re-tokenized text, or a chat the server re-rendered) is not what
    the model saw, so a policy-gradient step on it is silently wrong; a caller that
    accepts that (e.g. no importance-sampling correction) says so with ``allow_inexact``.
    """
    traj = episode.to_tokens(tokenizer)
    if not traj.exact and not allow_inexact:
        raise InexactTokens(
            f"episode {episode.task_id}#{episode.attempt} is not an exact token record "
            f"({traj.inexact_reason}); sample in token mode (a server that takes token ids, e.g. vLLM) "
            "or pass allow_inexact=True to train on the re-tokenized layout"
        )
    return traj
