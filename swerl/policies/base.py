"""The policy contract the rollout runner drives.

A policy starts an episode (``start``) and then maps each observation to an
action (``act``), keeping per-episode state in an object it owns. ``placement``
says where it runs: ``"actor"`` (inside the Ray actor next to the env, e.g. an
HTTP LLM client) or ``"driver"`` (in the trainer's process, over batches of
observations from every actor, e.g. the trainer's own model).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol, runtime_checkable

from swerl.tasks.instance import Instance


@dataclass
class Decision:
    action: str
    info: dict[str, Any] = field(default_factory=dict)
    """Tokens, logprobs, the sampled choice: recorded on the Step."""


STOP = "stop"
"""A ``Decision.info`` key: end the episode here, without an action, for the reason given
(a trainer's token budget ran out). The env truncates it (``SWEEnv.stop``); no step is recorded."""


def stop(reason: str) -> Decision:
    """The decision that ends an episode without acting (see ``STOP``)."""
    return Decision("", {STOP: reason})


@runtime_checkable
class Policy(Protocol):
    placement: ClassVar[str]

    def start(self, task: Instance, attempt: int) -> Any: ...

    def act(self, state: Any, observation: str) -> Decision | str: ...


def as_decision(out: Decision | str) -> Decision:
    return out if isinstance(out, Decision) else Decision(str(out))


def act_batch(policy: Policy, states: list[Any], observations: list[str]) -> list[Decision]:
    """The policy's batched act if it has one, else one call per observation."""
    batched = getattr(policy, "act_batch", None)
    outs = (
        batched(states, observations)
        if batched
        else [policy.act(s, o) for s, o in zip(states, observations, strict=True)]
    )
    return [as_decision(o) for o in outs]
