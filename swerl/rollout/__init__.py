"""Parallel rollouts on Ray: EnvActor hosts envs, RolloutRunner streams Episodes."""

from swerl.episode import Episode, JsonlSink, Step
from swerl.rollout.actor import EnvActor
from swerl.rollout.runner import RolloutRunner, ensure_ray

__all__ = ["EnvActor", "Episode", "JsonlSink", "RolloutRunner", "Step", "ensure_ray"]
