"""An Episode laid out as token ids for a trainer: one prompt, one multi-turn response.

``response_ids`` is every turn after the first prompt, in order: the model's
completion (``loss_mask`` 1), then the observation that followed it as the
model was shown it (``loss_mask`` 0), and so on; it ends with the last
completion. Built from the ids the sampler recorded (``swerl.episode.Sampled``),
never from re-tokenized text; only when an episode has no ids does it
re-tokenize its text with the given tokenizer, and then ``exact`` is False, so a
trainer can refuse importance-sampling corrections on it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from swerl.episode import Sampled
from swerl.errors import ConfigError

if TYPE_CHECKING:
    from swerl.episode import Episode


@dataclass
class TokenTrajectory:
    prompt_ids: list[int]
    response_ids: list[int]
    loss_mask: list[int]
    """1 on tokens the model sampled, 0 on observation and template tokens."""
    logprobs: list[float] | None
    """Sampling logprob per response token (0.0 on observation tokens); None if the sampler gave none."""
    exact: bool
    """The ids are the sampler's own; False when re-tokenized or when a turn's prompt did not extend the last."""
    turns: list[tuple[int, int]] = field(default_factory=list)
    """[start, end) of each model completion in ``response_ids``."""
    finish_reasons: list[str | None] = field(default_factory=list)
    policy_versions: list[int | None] = field(default_factory=list)
    reward: float | None = None

    def turn_prompt(self, k: int) -> list[int]:
        """The prompt of turn ``k`` as laid out here: the first prompt and the response before it."""
        start = self.turns[k][0]
        return self.prompt_ids + self.response_ids[:start]

    @property
    def completion_ids(self) -> list[list[int]]:
        return [self.response_ids[a:b] for a, b in self.turns]


def _common_prefix(a: list[int], b: list[int]) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


class _Builder:
    def __init__(self, prompt_ids: list[int], exact: bool) -> None:
        self.t = TokenTrajectory(list(prompt_ids), [], [], [], exact)

    @property
    def seq_len(self) -> int:
        return len(self.t.prompt_ids) + len(self.t.response_ids)

    def observe(self, ids: list[int]) -> None:
        self.t.response_ids.extend(ids)
        self.t.loss_mask.extend([0] * len(ids))
        if self.t.logprobs is not None:
            self.t.logprobs.extend([0.0] * len(ids))

    def complete(self, s: Sampled, ids: list[int]) -> None:
        start = len(self.t.response_ids)
        self.t.response_ids.extend(ids)
        self.t.loss_mask.extend([1] * len(ids))
        if s.logprobs is None or len(s.logprobs) != len(ids):
            self.t.logprobs = None
        elif self.t.logprobs is not None:
            self.t.logprobs.extend(float(x) for x in s.logprobs)
        self.t.turns.append((start, len(self.t.response_ids)))
        self.t.finish_reasons.append(s.finish_reason)
        self.t.policy_versions.append(s.policy_version)


def episode_tokens(episode: Episode, tokenizer: Any = None) -> TokenTrajectory:
    """``episode`` as a TokenTrajectory (see the module docstring)."""
    turns = [(step, Sampled.of(step.policy)) for step in episode.steps]
    if not turns:
        raise ConfigError(f"episode {episode.task_id}#{episode.attempt} has no steps to lay out as tokens")
    if all(s.completion_ids is not None and s.prompt_ids is not None for _, s in turns):
        traj = _from_ids([s for _, s in turns])
    elif tokenizer is not None:
        traj = _retokenized(episode, turns, tokenizer)
    else:
        raise ConfigError(
            f"episode {episode.task_id}#{episode.attempt} recorded no token ids "
            "(the server returned none); pass a tokenizer to re-tokenize its text (exact=False)"
        )
    traj.reward = episode.reward
    return traj


def _from_ids(turns: list[Sampled]) -> TokenTrajectory:
    b = _Builder(turns[0].prompt_ids or [], exact=turns[0].prompt_start == 0)
    seq = list(b.t.prompt_ids)
    for k, s in enumerate(turns):
        if k:
            delta = list(s.prompt_ids or [])
            if s.prompt_start != len(seq):  # not a delta on everything so far: compare
                prompt = seq[: s.prompt_start] + delta
                keep = _common_prefix(prompt, seq)
                if keep < len(seq):
                    b.t.exact = False  # the model saw something else than the concatenation so far
                delta = prompt[keep:]
            b.observe(delta)
            seq.extend(delta)
        b.complete(s, list(s.completion_ids or []))
        seq.extend(s.completion_ids or [])
    return b.t


def _retokenized(episode: Episode, turns: list[tuple[Any, Sampled]], tokenizer: Any) -> TokenTrajectory:
    """Re-tokenize the episode's text with the chat template (exact=False)."""
    from swerl.chat_tokens import ChatTokens

    first = turns[0][1]
    if not first.prompt_messages:
        raise ConfigError(
            f"episode {episode.task_id}#{episode.attempt} recorded neither token ids nor its first "
            "prompt messages; it cannot be laid out as tokens"
        )
    chat = ChatTokens(tokenizer, first.prompt_messages)
    b = _Builder(chat.ids, exact=False)
    for k, (step, s) in enumerate(turns):
        if k:
            role = s.observation_role or "user"
            b.observe(chat.add_messages([{"role": role, "content": episode.steps[k - 1].observation}]))
        ids, logprobs = s.completion_ids, s.logprobs
        if ids is None:
            logprobs = None
            ids = chat.encode(step.action)
            if s.finish_reason in (None, "stop"):
                ids += chat.closing(ids)[:1]  # the end-of-reply token the model sampled
        chat.add_completion(ids)
        b.complete(
            Sampled(logprobs=logprobs, finish_reason=s.finish_reason, policy_version=s.policy_version), ids
        )
    return b.t
