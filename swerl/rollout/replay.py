"""Replay: re-run a recorded Episode's actions and report the first divergence."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from swerl.env.snapshot import EnvSnapshot
from swerl.env.swe_env import SWEEnv
from swerl.episode import Episode
from swerl.tasks.instance import Instance


@dataclass
class Divergence:
    step: int
    action: str
    expected: str
    actual: str


@dataclass
class ReplayReport:
    task_id: str
    attempt: int
    compared: int = 0
    first_divergence: Divergence | None = None
    reward: float | None = None
    recorded_reward: float | None = None
    status: str = ""
    notes: list[str] = field(default_factory=list)

    @property
    def matches(self) -> bool:
        return self.first_divergence is None and self.reward == self.recorded_reward


def replay(
    episode: Episode,
    env: SWEEnv | None = None,
    tasks: list[Instance] | str = "swerl-mini",
    from_step: int = 1,
    snapshot: EnvSnapshot | None = None,
    **env_kwargs: Any,
) -> ReplayReport:
    """Re-issue ``episode``'s actions; compare observations from ``from_step`` on.

    With ``snapshot`` (taken after step ``from_step - 1``) the env restores it
    instead of re-running the earlier steps.
    """
    own = env is None
    env = env or SWEEnv(tasks, **env_kwargs)
    report = ReplayReport(episode.task_id, episode.attempt, recorded_reward=episode.reward)
    try:
        if snapshot is not None:
            env.restore(snapshot)
            start = snapshot.step + 1
        else:
            env.reset(options={"task": episode.task_id})
            start = 1
        for step in episode.steps:
            if step.index < start:
                continue
            obs, reward, terminated, truncated, info = env.step(step.action)
            if step.index >= from_step:
                report.compared += 1
                if obs != step.observation and report.first_divergence is None:
                    report.first_divergence = Divergence(step.index, step.action, step.observation, obs)
            if terminated or truncated:
                report.reward = None if reward != reward else float(reward)
                report.status = info.get("status", "")
                break
        else:
            report.notes.append("the recorded actions ran out before the episode ended")
    finally:
        if own:
            env.close()
    return report
