"""Policies by name, as configs name them."""

from __future__ import annotations

from typing import Any

from swerl.errors import ConfigError
from swerl.policies.base import Policy
from swerl.tasks.instance import Instance


def make_policy(name: str, tasks: list[Instance], placement: str | None = None, **options: Any) -> Policy:
    try:
        if name == "gold":
            from swerl.policies.scripted import GoldPolicy

            return GoldPolicy(placement or "actor", **options)
        if name == "noop":
            from swerl.policies.scripted import NoOpPolicy

            return NoOpPolicy(placement or "actor", **options)
        if name == "replay":
            from swerl.episode import JsonlSink
            from swerl.policies.scripted import ReplayPolicy

            if "episodes" not in options:
                raise ConfigError("policy replay needs options.episodes: a JSONL file of episodes")
            return ReplayPolicy(list(JsonlSink.read(options.pop("episodes"))), **options)
        if name == "llm":
            from swerl.policies.llm import LLMPolicy

            return LLMPolicy(**options)
        if name == "toy":
            from swerl.policies.toy import CandidatePolicy

            return CandidatePolicy(tasks, **options)
    except TypeError as e:
        raise ConfigError(f"policy {name}: bad options: {e}") from None
    raise ConfigError(f"unknown policy {name!r}; known: gold, noop, replay, llm, toy")
