"""An LLM policy for any OpenAI-compatible chat endpoint (vLLM, SGLang, OpenAI, ``transformers serve``).

It runs inside the actor by default (an HTTP client next to the env). The API key
is read from an environment variable of the process that runs it, on the driver
or the actor; it is never sent into a sandbox (sandboxes get no host env).

Tokens: it asks for them the way vLLM exposes them (``logprobs`` and the
``return_token_ids`` extra, answered with ``prompt_token_ids`` on the response and
``token_ids`` on the choice) and records them per step under the
``swerl.episode.Sampled`` keys. A server that rejects the extra is asked again
without it (and not asked again); a server that returns no ids leaves only the
text, which ``Episode.to_tokens(tokenizer)`` re-tokenizes with ``exact=False``.

Failures of the server (down, slower than ``timeout``, an error status, an answer
that is not a chat completion) raise ``PolicyError``, an infra error: the episode
is retried, never scored 0.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import Any, ClassVar

from swerl.env.actions import FORMAT_HELP, TOOLS
from swerl.episode import Sampled
from swerl.errors import ConfigError, PolicyError
from swerl.policies.base import Decision
from swerl.tasks.instance import Instance

SYSTEM_PROMPT = f"""You are a software engineer fixing an issue in the repository at /testbed.
Work step by step: inspect the code, make the fix, run the tests, then submit.
{FORMAT_HELP}"""
TOOLS_PROMPT = """You are a software engineer fixing an issue in the repository at /testbed.
Work step by step with the tools: inspect the code, make the fix, run the tests, then call submit."""
ACTION_FORMATS = ("text", "tools")


@dataclass
class Conversation:
    messages: list[dict[str, Any]] = field(default_factory=list)
    seq: list[int] = field(default_factory=list)
    """The last prompt the server reported plus the completion it sampled."""
    tool_call_id: str | None = None


class LLMPolicy:
    placement: ClassVar[str] = "actor"

    def __init__(
        self,
        model: str,
        base_url: str | None = None,
        api_key_env: str = "OPENAI_API_KEY",
        temperature: float = 0.0,
        max_tokens: int = 2048,
        system_prompt: str | None = None,
        timeout: float = 120.0,
        logprobs: bool = True,
        token_ids: bool = True,
        action_format: str = "text",
        max_retries: int = 0,
        policy_version: int | None = None,
    ) -> None:
        if action_format not in ACTION_FORMATS:
            raise ConfigError(
                f"LLMPolicy action_format must be one of {ACTION_FORMATS}, got {action_format!r}"
            )
        self.model = model
        self.base_url = base_url
        self.api_key_env = api_key_env
        self.temperature = temperature
        self.max_tokens = max_tokens
        self.action_format = action_format
        default_prompt = TOOLS_PROMPT if action_format == "tools" else SYSTEM_PROMPT
        self.system_prompt = default_prompt if system_prompt is None else system_prompt
        self.timeout = timeout
        self.logprobs = logprobs
        self.token_ids = token_ids
        self.max_retries = max_retries
        """The client's own retries; the runner retries the whole episode on top."""
        self.policy_version = policy_version
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
            self._client = OpenAI(
                base_url=self.base_url, api_key=key, timeout=self.timeout, max_retries=self.max_retries
            )
        return self._client

    def start(self, task: Instance, attempt: int) -> Conversation:
        return Conversation([{"role": "system", "content": self.system_prompt}])

    def _request(self, messages: list[dict[str, Any]]) -> Any:
        import openai

        kwargs: dict[str, Any] = {}
        if self.logprobs:
            kwargs["logprobs"] = True
        if self.token_ids:
            kwargs["extra_body"] = {"return_token_ids": True}
        if self.action_format == "tools":
            kwargs["tools"] = TOOLS
        while True:
            try:
                return self._chat().chat.completions.create(
                    model=self.model,
                    messages=messages,
                    temperature=self.temperature,
                    max_tokens=self.max_tokens,
                    **kwargs,
                )
            except (openai.BadRequestError, openai.UnprocessableEntityError) as e:
                extras = [k for k in ("extra_body", "logprobs") if k in kwargs]
                if not extras:
                    raise PolicyError(f"the model server rejected the request: {e}") from None
                kwargs.pop(extras[0])  # a server without vLLM's extras: ask without them from now on
                self.token_ids = self.token_ids and extras[0] != "extra_body"
                self.logprobs = self.logprobs and extras[0] != "logprobs"
            except openai.APITimeoutError:
                raise PolicyError(f"the model server did not answer within {self.timeout} s") from None
            except openai.APIConnectionError as e:
                raise PolicyError(f"cannot reach the model server at {self.base_url}: {e}") from None
            except (openai.APIStatusError, openai.APIResponseValidationError, json.JSONDecodeError) as e:
                raise PolicyError(f"the model server failed: {type(e).__name__}: {e}") from None

    def act(self, state: Conversation, observation: str) -> Decision:
        first = len(state.messages) == 1
        if state.tool_call_id is not None:
            state.messages.append(
                {"role": "tool", "tool_call_id": state.tool_call_id, "content": observation}
            )
        else:
            state.messages.append({"role": "user", "content": observation})
        prompt_messages = [dict(m) for m in state.messages] if first else None
        resp = self._request(state.messages)
        choices = getattr(resp, "choices", None)
        if not choices or getattr(choices[0], "message", None) is None:
            raise PolicyError(f"the model server's answer has no choices: {str(resp)[:200]}")
        choice = choices[0]
        action, assistant = self._action(choice.message)
        state.messages.append(assistant)
        state.tool_call_id = assistant["tool_calls"][0]["id"] if assistant.get("tool_calls") else None
        turn = self._sampled(state, resp, choice)
        if first:
            turn.prompt_messages = prompt_messages
            turn.observation_role = "tool" if self.action_format == "tools" else "user"
        info = turn.to_info()
        if resp.usage:
            info["usage"] = {
                "prompt_tokens": resp.usage.prompt_tokens,
                "completion_tokens": resp.usage.completion_tokens,
            }
        return Decision(action, info)

    def _action(self, message: Any) -> tuple[str, dict[str, Any]]:
        """The action text for the env, and the assistant message to keep in the chat."""
        text = message.content or ""
        calls = getattr(message, "tool_calls", None) or []
        if not calls:
            return text, {"role": "assistant", "content": text}
        fn = calls[0].function
        call = {
            "id": calls[0].id,
            "type": "function",
            "function": {"name": fn.name, "arguments": fn.arguments},
        }
        action = json.dumps({"name": fn.name, "arguments": fn.arguments})
        return action, {"role": "assistant", "content": text, "tool_calls": [call]}

    def _sampled(self, state: Conversation, resp: Any, choice: Any) -> Sampled:
        """The ids and logprobs the server returned, the prompt as a delta against the last turn."""
        turn = Sampled(finish_reason=choice.finish_reason, policy_version=self.policy_version)
        content = getattr(choice.logprobs, "content", None) if choice.logprobs else None
        if content:
            turn.logprobs = [float(t.logprob) for t in content]
        prompt = _extra(resp, "prompt_token_ids")
        completion = _extra(choice, "token_ids")
        if prompt is None or completion is None:
            state.seq = []
            return turn
        prompt, completion = [int(i) for i in prompt], [int(i) for i in completion]
        n = len(state.seq)
        if n and prompt[:n] == state.seq:
            turn.prompt_ids, turn.prompt_start = prompt[n:], n
        else:
            turn.prompt_ids, turn.prompt_start = prompt, 0
        turn.completion_ids = completion
        state.seq = prompt + completion
        return turn


def _extra(obj: Any, name: str) -> Any:
    """A field the OpenAI types do not declare (vLLM's extras), wherever the SDK keeps it."""
    value = getattr(obj, name, None)
    if value is None:
        value = (getattr(obj, "model_extra", None) or {}).get(name)
    return value
