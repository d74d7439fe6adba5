"""ModelPolicy: a model that samples token ids itself, run in the driver over batches.

This is the trainer's own model (TRL's, or any ``Generator``): every env waiting
for an action is answered by one batched ``generate`` call. The chat is kept as
exact token ids (``ChatTokens``), and each step records what was sampled under
the ``swerl.episode.Sampled`` keys, so ``Episode.to_tokens()`` is exact.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, Protocol

from swerl.chat_tokens import ChatTokens
from swerl.episode import Sampled
from swerl.policies.base import Decision
from swerl.policies.formats import TextActions
from swerl.tasks.instance import Instance


@dataclass
class Generation:
    ids: list[int]
    """The sampled completion, including the end-of-turn token when the model stopped."""
    logprobs: list[float] | None
    finish_reason: str
    """"stop" (the model ended its turn) or "length" (cut at max_new_tokens)."""


class Generator(Protocol):
    tokenizer: Any

    def generate(self, prompts: list[list[int]]) -> list[Generation]: ...


@dataclass
class ModelChat:
    task: Instance
    attempt: int
    format_state: Any
    chat: ChatTokens | None = None


class ModelPolicy:
    placement: ClassVar[str] = "driver"

    def __init__(
        self,
        generator: Generator,
        system_prompt: str | None = None,
        action_format: Any = None,
        policy_version: int = 0,
    ) -> None:
        from swerl.policies.llm import SYSTEM_PROMPT

        self.generator = generator
        self.system_prompt = SYSTEM_PROMPT if system_prompt is None else system_prompt
        self.format = action_format or TextActions()
        self.policy_version = policy_version
        """Stamped on every step it samples; the trainer bumps it after each update."""

    def start(self, task: Instance, attempt: int) -> ModelChat:
        return ModelChat(task, attempt, self.format.start(task))

    def act(self, state: ModelChat, observation: str) -> Decision:
        return self.act_batch([state], [observation])[0]

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
                turn = Sampled(prompt_ids=list(st.chat.ids), prompt_messages=messages)
                turn.observation_role = self.format.observation_role
            else:
                start = len(st.chat.ids)
                delta = st.chat.add_messages([{"role": self.format.observation_role, "content": obs}])
                turn = Sampled(prompt_ids=delta, prompt_start=start)
            turns.append(turn)
        gens = self.generator.generate([st.chat.ids for st in states])  # type: ignore[union-attr]
        out = []
        for st, turn, gen in zip(states, turns, gens, strict=True):
            st.chat.add_completion(gen.ids)  # type: ignore[union-attr]
            turn.completion_ids, turn.logprobs, turn.finish_reason = gen.ids, gen.logprobs, gen.finish_reason
            turn.policy_version = self.policy_version
            reply = tok.decode(gen.ids, skip_special_tokens=True)
            out.append(Decision(self.format.action(st.format_state, reply, gen.ids), turn.to_info()))
        return out
