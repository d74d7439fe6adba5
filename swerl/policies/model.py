"""ModelPolicy: a model that samples token ids itself, run in the driver over batches.

This is the trainer's own model (TRL's, or any ``Generator``): every env waiting
for an action is answered by one batched ``generate`` call. The chat is kept as
exact token ids (``ChatTokens``), and each step records what was sampled under
the ``swerl.episode.Sampled`` keys, so ``Episode.to_tokens()`` is exact.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol

from swerl.chat_tokens import ChatTokens
from swerl.episode import Sampled
from swerl.policies.base import Decision, stop
from swerl.policies.formats import TextActions
from swerl.tasks.instance import Instance


@dataclass
class Generation:
    ids: list[int]
    """The sampled completion, including the end-of-turn token when the model stopped."""
    logprobs: list[float] | None
    finish_reason: str
    """"stop" (the model ended its turn) or "length" (cut at max_new_tokens)."""
    policy_version: int | None = None
    """The version of the weights that sampled it, when the generator knows (else the policy's)."""


class Generator(Protocol):
    """Samples one completion per prompt. A policy with a token budget passes ``max_new_tokens``
    (one cap per prompt); a generator must then sample no more than that for each. A
    generator whose ``generate`` takes ``sessions`` gets one id per prompt (``task_attempt``,
    the same on every turn of a trajectory)."""

    tokenizer: Any

    def generate(
        self, prompts: list[list[int]], max_new_tokens: list[int] | None = None
    ) -> list[Generation]: ...


@dataclass
class ModelChat:
    task: Instance
    attempt: int
    format_state: Any
    chat: ChatTokens | None = None
    first_prompt: int = 0
    """Tokens of the first prompt: what follows is the response a trainer's budget counts."""


class ModelPolicy:
    placement: ClassVar[str] = "driver"

    def __init__(
        self,
        generator: Generator,
        system_prompt: str | None = None,
        action_format: Any = None,
        policy_version: int = 0,
        max_response_tokens: int | None = None,
        max_input_tokens: int | None = None,
    ) -> None:
        """``max_response_tokens``: the trainer's response budget (everything after the first
        prompt, observations included); ``max_input_tokens``: the longest prompt a turn may
        have. An episode that reaches either is stopped before the turn (``STOP``), so no token
        a trainer would cut was ever part of it; each completion is capped to the room left."""
        from swerl.policies.llm import SYSTEM_PROMPT

        self.generator = generator
        self.system_prompt = SYSTEM_PROMPT if system_prompt is None else system_prompt
        self.format = action_format or TextActions()
        self.policy_version = policy_version
        """Stamped on every step it samples; the trainer bumps it after each update."""
        self.max_response_tokens = max_response_tokens
        self.max_input_tokens = max_input_tokens

    def start(self, task: Instance, attempt: int) -> ModelChat:
        return ModelChat(task, attempt, self.format.start(task))

    def act(self, state: ModelChat, observation: str) -> Decision:
        return self.act_batch([state], [observation])[0]

    def _room(self, st: ModelChat) -> int | str:
        """Tokens the next completion may have, or why the episode must stop before it."""
        assert st.chat is not None
        n = len(st.chat.ids)
        if self.max_input_tokens is not None and n >= self.max_input_tokens:
            return "max_input_length"
        if self.max_response_tokens is None:
            return -1  # no budget
        room = self.max_response_tokens - (n - st.first_prompt)
        return room if room > 0 else "response_budget"

    def act_batch(self, states: list[ModelChat], observations: list[str]) -> list[Decision]:
        tok = self.generator.tokenizer
        turns: list[Sampled] = []
        for st, obs in zip(states, observations, strict=True):
            if st.chat is None:
                messages = [
                    {"role": "system", "content": self.system_prompt},
                    {"role": "user", "content": obs},
                ]
                st.chat = ChatTokens(tok, messages, tools=self.format.tools)
                st.first_prompt = len(st.chat.ids)
                turn = Sampled(prompt_ids=list(st.chat.ids), prompt_messages=messages)
                turn.observation_role = self.format.observation_role
            else:
                start = len(st.chat.ids)
                delta = st.chat.add_messages([{"role": self.format.observation_role, "content": obs}])
                turn = Sampled(prompt_ids=delta, prompt_start=start)
            turns.append(turn)
        rooms = [self._room(st) for st in states]
        go = [i for i, r in enumerate(rooms) if not isinstance(r, str)]
        prompts = [states[i].chat.ids for i in go]  # type: ignore[union-attr]
        kw: dict[str, Any] = {}
        if self.max_response_tokens is not None:
            kw["max_new_tokens"] = [int(rooms[i]) for i in go]
        if "sessions" in inspect.signature(self.generator.generate).parameters:
            # one id per trajectory, for servers that route a session's turns to one replica
            kw["sessions"] = [f"{states[i].task.instance_id}_{states[i].attempt}" for i in go]
        gens = self.generator.generate(prompts, **kw) if go else []
        by_index = dict(zip(go, gens, strict=True))
        out = []
        for i, (st, turn) in enumerate(zip(states, turns, strict=True)):
            if i not in by_index:
                out.append(stop(str(rooms[i])))
                continue
            gen = by_index[i]
            st.chat.add_completion(gen.ids)  # type: ignore[union-attr]
            turn.completion_ids, turn.logprobs, turn.finish_reason = gen.ids, gen.logprobs, gen.finish_reason
            turn.policy_version = self.policy_version if gen.policy_version is None else gen.policy_version
            reply = tok.decode(gen.ids, skip_special_tokens=True)
            out.append(Decision(self.format.action(st.format_state, reply, gen.ids), turn.to_info()))
        return out
