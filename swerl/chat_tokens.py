"""A multi-turn chat kept as the exact token ids the model sees and produces.

Re-rendering a whole chat with its template every turn re-tokenizes the model's
own replies, and those tokens can differ from the ones it sampled (verl's and
SkyRL's docs both warn that this drift breaks PPO/GRPO). ``ChatTokens`` never
re-renders a reply: the model's completion ids are appended verbatim, and each
new message (a tool result, a user turn) is appended as a chat-template *delta*,
so the prompt of every turn is exactly the concatenation so far::

    chat = ChatTokens(tokenizer, [{"role": "system", ...}, {"role": "user", ...}])
    ids = model.generate(chat.ids)                      # prompt = chat.ids
    chat.add_completion(ids)                            # verbatim, mask 1
    delta = chat.add_messages([{"role": "user", "content": observation}])   # mask 0
    # chat.ids == old chat.ids + completion + delta; delta ends with the generation prompt

The delta of new messages is the template's text for them, rendered after a
fixed base conversation that ends with an assistant reply (so the real replies
are never rendered), plus the template tokens that close the previous reply when
the model did not produce them itself (e.g. ``<|im_end|>`` after a reply cut by
``max_tokens``, or the newline a template puts after it).
"""

from __future__ import annotations

from typing import Any

from swerl.errors import ConfigError

_MARK = "\u2063swerl-reply\u2063"
_BASE = [{"role": "user", "content": "."}, {"role": "assistant", "content": _MARK}]


class ChatTokens:
    """Token ids of a chat so far (``ids``) and which of them the model produced (``mask``)."""

    def __init__(
        self,
        tokenizer: Any,
        messages: list[dict[str, Any]],
        *,
        tools: list[dict[str, Any]] | None = None,
        **template_kwargs: Any,
    ) -> None:
        if getattr(tokenizer, "chat_template", None) is None:
            raise ConfigError("ChatTokens needs a tokenizer with a chat template")
        if not messages:
            raise ConfigError("ChatTokens needs the first messages of the chat")
        self.tokenizer = tokenizer
        self.tools = tools
        self.template_kwargs = template_kwargs
        self.ids: list[int] = self.encode(self.render(messages, add_generation_prompt=True))
        """Everything so far; while the model is to speak, this is its prompt."""
        self.mask: list[int] = [0] * len(self.ids)
        """1 on tokens the model sampled, 0 on prompt, observation and template tokens."""
        self.prompt_len = len(self.ids)
        """Length of the first prompt; ``ids[prompt_len:]`` is the multi-turn response."""
        base = self.render(_BASE, add_generation_prompt=False)
        if _MARK not in base:
            raise ConfigError("the chat template does not render an assistant message's content verbatim")
        self._base = base
        self._reply_end = self.encode(base[base.rindex(_MARK) + len(_MARK) :])
        self._replied = False

    # ------------------------------------------------------------------ helpers
    def render(self, messages: list[dict[str, Any]], add_generation_prompt: bool) -> str:
        return self.tokenizer.apply_chat_template(
            messages,
            tools=self.tools,
            add_generation_prompt=add_generation_prompt,
            tokenize=False,
            **self.template_kwargs,
        )

    def encode(self, text: str) -> list[int]:
        return list(self.tokenizer.encode(text, add_special_tokens=False))

    @property
    def response_ids(self) -> list[int]:
        return self.ids[self.prompt_len :]

    @property
    def response_mask(self) -> list[int]:
        return self.mask[self.prompt_len :]

    # -------------------------------------------------------------------- turns
    def add_completion(self, completion_ids: list[int]) -> None:
        """Append the model's sampled ids verbatim (mask 1)."""
        self.ids.extend(completion_ids)
        self.mask.extend([1] * len(completion_ids))
        self._last_completion = list(completion_ids)
        self._replied = True

    def closing(self, completion_ids: list[int]) -> list[int]:
        """Template tokens that end a reply and that ``completion_ids`` does not already end with."""
        end = self._reply_end
        for k in range(min(len(end), len(completion_ids)), 0, -1):
            if completion_ids[-k:] == end[:k]:
                return end[k:]
        return list(end)

    def message_delta(self, messages: list[dict[str, Any]]) -> list[int]:
        """The template tokens of ``messages`` after an assistant reply, up to the next generation prompt."""
        full = self.render([*_BASE, *messages], add_generation_prompt=True)
        if not full.startswith(self._base):
            raise ConfigError(
                "the chat template renders earlier messages differently once a message is added; "
                "its turns cannot be kept as token deltas"
            )
        return self.encode(full[len(self._base) :])

    def add_messages(self, messages: list[dict[str, Any]]) -> list[int]:
        """Append new messages after the model's reply (mask 0); return the ids added.

        The ids added are the closing of the previous reply, the messages, and the
        generation prompt: afterwards ``ids`` is the model's next prompt.
        """
        if not self._replied:
            raise ConfigError("add_messages: add the model's completion first")
        delta = [*self.closing(self._last_completion), *self.message_delta(messages)]
        self.ids.extend(delta)
        self.mask.extend([0] * len(delta))
        self._replied = False
        return delta
