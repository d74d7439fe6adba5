"""An LLM policy for any OpenAI-compatible chat endpoint (vLLM, SGLang, OpenAI, ...).

It runs inside the actor by default (an HTTP client next to the env). The API key
is read from an environment variable of the process that runs it, on the driver
or the actor; it is never sent into a sandbox (sandboxes get no host env).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, ClassVar

from swerl.env.actions import FORMAT_HELP
from swerl.errors import ConfigError
from swerl.policies.base import Decision
from swerl.tasks.instance import Instance

SYSTEM_PROMPT = f"""You are a software engineer fixing an issue in the repository at /testbed.
Work step by step: inspect the code, make the fix, run the tests, then submit.
{FORMAT_HELP}"""


@dataclass
class Conversation:
    messages: list[dict[str, str]] = field(default_factory=list)


class LLMPolicy:
    placement: ClassVar[str] = "actor"

    def __init__(
        self,
        model: str,
        base_url: str | None = None,
        api_key_env: str = "OPENAI_API_KEY",
        temperature: float = 0.0,
        max_tokens: int = 2048,
        system_prompt: str = SYSTEM_PROMPT,
        timeout: float = 120.0,
        logprobs: bool = False,
    ) -> None:
        self.model = model
        self.base_url = base_url
        self.api_key_env = api_key_env
        self.temperature = temperature
        self.max_tokens = max_tokens
        self.system_prompt = system_prompt
        self.timeout = timeout
        self.logprobs = logprobs
        self._client: Any = None

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_client": None}  # clients do not travel; keys stay in env vars

    def _chat(self) -> Any:
        if self._client is None:
            from openai import OpenAI

            key = os.environ.get(self.api_key_env)
            if key is None:
                raise ConfigError(
                    f"LLMPolicy: environment variable {self.api_key_env} is not set where the policy runs"
                )
            self._client = OpenAI(base_url=self.base_url, api_key=key, timeout=self.timeout, max_retries=2)
        return self._client

    def start(self, task: Instance, attempt: int) -> Conversation:
        return Conversation([{"role": "system", "content": self.system_prompt}])

    def act(self, state: Conversation, observation: str) -> Decision:
        state.messages.append({"role": "user", "content": observation})
        kwargs: dict[str, Any] = {"logprobs": True} if self.logprobs else {}
        resp = self._chat().chat.completions.create(
            model=self.model,
            messages=state.messages,
            temperature=self.temperature,
            max_tokens=self.max_tokens,
            **kwargs,
        )
        choice = resp.choices[0]
        text = choice.message.content or ""
        state.messages.append({"role": "assistant", "content": text})
        info: dict[str, Any] = {}
        if resp.usage:
            info["usage"] = {
                "prompt_tokens": resp.usage.prompt_tokens,
                "completion_tokens": resp.usage.completion_tokens,
            }
        if self.logprobs and choice.logprobs and choice.logprobs.content:
            info["logprobs"] = [t.logprob for t in choice.logprobs.content]
        return Decision(text, info)
