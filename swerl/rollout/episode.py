"""Moved to ``swerl.episode``; kept so existing imports keep working."""

from swerl.episode import Episode, JsonlSink, Step, reward_of

__all__ = ["Episode", "JsonlSink", "Step", "reward_of"]
