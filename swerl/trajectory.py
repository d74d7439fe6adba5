"""An Episode laid out as token ids for a trainer: one prompt, one multi-turn response.

``response_ids`` is every turn after the first prompt, in order: the model's
completion (``loss_mask`` 1), then the observation that followed it as the
model was shown it (``loss_mask`` 0), and so on; it ends with the last
completion. Built from the ids the sampler recorded (``swerl.episode.Sampled``),
never from re-tokenized text. Only when an episode has no exact record (the
server returned no ids, or re-rendered the chat so that a turn's prompt does not
extend the tokens before it) is it laid out message by message with the given
tokenizer, each message once and in order; then ``exact`` is False with the
reason, and swerl's trainer adapters refuse it unless told otherwise
(``swerl.integrations.common.trainer_tokens``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from swerl.episode import Sampled
from swerl.errors import ConfigError, InexactTokens

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
    inexact_reason: str = ""
    """Why ``exact`` is False (empty when exact)."""

    def turn_prompt(self, k: int) -> list[int]:
        """The prompt of turn ``k`` as laid out here: the first prompt and the response before it."""
        start = self.turns[k][0]
        return self.prompt_ids + self.response_ids[:start]

    @property
    def completion_ids(self) -> list[list[int]]:
        return [self.response_ids[a:b] for a, b in self.turns]


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
    sampled = [s for _, s in turns]
    have_ids = all(s.completion_ids is not None and s.prompt_ids is not None for s in sampled)
    why = "" if have_ids else "the server returned no token ids, so its text was re-tokenized"
    if have_ids:
        traj = _from_ids(sampled)
        if traj is not None:
            traj.reward = episode.reward
            return traj
        why = "the server re-rendered the chat: a turn's prompt did not extend the tokens before it"
    if tokenizer is None:
        raise InexactTokens(
            f"episode {episode.task_id}#{episode.attempt} has no exact token record ({why}); "
            "pass a tokenizer to lay out its messages re-tokenized (exact=False)"
        )
    traj = _by_messages(episode, turns, tokenizer)
    traj.inexact_reason = why
    traj.reward = episode.reward
    return traj


def _from_ids(turns: list[Sampled]) -> TokenTrajectory | None:
    """The exact layout from recorded ids, or None when a turn's prompt does not extend the ones before."""
    if turns[0].prompt_start != 0:
        return None
    b = _Builder(turns[0].prompt_ids or [], exact=True)
    seq = list(b.t.prompt_ids)
    for k, s in enumerate(turns):
        if k:
            prompt = seq[: s.prompt_start] + list(s.prompt_ids or [])
            if prompt[: len(seq)] != seq:
                return None  # the model saw something else than the concatenation so far
            delta = prompt[len(seq) :]
            b.observe(delta)
            seq.extend(delta)
        b.complete(s, list(s.completion_ids or []))
        seq.extend(s.completion_ids or [])
    return b.t


def _by_messages(episode: Episode, turns: list[tuple[Any, Sampled]], tokenizer: Any) -> TokenTrajectory:
    """Each message once, in order (exact=False): the first prompt, then per turn its completion (the
    recorded ids where the server returned them, else the re-tokenized text) and the observation that
    followed it as a chat-template delta. Turn ``k``'s prompt is then the layout before it, which is
    not what a server that re-rendered the chat showed the model."""
    from swerl.chat_tokens import ChatTokens

    first = turns[0][1]
    if not first.prompt_messages:
        raise ConfigError(
            f"episode {episode.task_id}#{episode.attempt} recorded neither exact token ids nor its first "
            "prompt messages; it cannot be laid out as tokens"
        )
    chat = ChatTokens(tokenizer, first.prompt_messages, tools=first.tools)
    recorded_prompt = first.prompt_ids if first.prompt_ids and first.prompt_start == 0 else None
    b = _Builder(recorded_prompt or chat.ids, exact=False)
    for k, (step, s) in enumerate(turns):
        if k:
            role = s.observation_role or first.observation_role or "user"
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
