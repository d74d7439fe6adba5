"""Builds an Episode from reset/step results, wherever the loop runs (actor or driver)."""

from __future__ import annotations

import time
from typing import Any

from swerl.episode import Episode, Step, reward_of
from swerl.policies.base import Decision


class EpisodeRecorder:
    def __init__(self, task_id: str, attempt: int, where: dict[str, Any], first_step: int = 1) -> None:
        """``first_step``: the number of the first step (a branch from a snapshot at step k starts at k+1)."""
        self.first_step = first_step
        self.episode = Episode(task_id=task_id, attempt=attempt, where=dict(where))
        self._t0 = time.monotonic()
        self._t = self._t0

    def reset_done(self) -> None:
        self.episode.timings["reset"] = time.monotonic() - self._t0
        self._t = time.monotonic()

    def step_done(self, decision: Decision, observation: str, reward: float, info: dict[str, Any]) -> None:
        now = time.monotonic()
        ep = self.episode
        ep.steps.append(
            Step(self.first_step + len(ep.steps), decision.action, observation, float(reward) if reward == reward else 0.0,
                 now - self._t, decision.info)
        )  # fmt: skip
        self._t = now

    def finish(self, reward: float | None, info: dict[str, Any]) -> Episode:
        ep = self.episode
        ep.reward = reward_of(reward)
        ep.status = info.get("status", "ungraded")
        ep.reason = info.get("reason", "")
        ep.patch = info.get("patch", "")
        ep.grade = info.get("grade", {})
        ep.integrity = info.get("integrity")
        ep.error = info.get("error", "")
        timings = info.get("timings", {})
        ep.timings["grade"] = float(timings.get("total", 0.0))
        ep.timings["steps"] = sum(s.duration for s in ep.steps) - ep.timings["grade"]
        ep.timings["total"] = time.monotonic() - self._t0
        versions = [v for s in ep.steps if (v := s.policy.get("policy_version")) is not None]
        ep.policy_version = min(versions) if versions else None
        if ep.status == "infra_error":
            ep.reward = None
        return ep

    def fail(self, error: BaseException, reason: str = "infra_error") -> Episode:
        """The sandbox could not be had, or the model server failed: an infra error, never a score."""
        return self.finish(
            None, {"status": "infra_error", "reason": reason, "error": f"{type(error).__name__}: {error}"}
        )
