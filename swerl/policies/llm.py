"""An LLM policy for any OpenAI-compatible endpoint (vLLM, SGLang, OpenAI, ``transformers serve``).

It runs inside the actor by default (an HTTP client next to the env). The API key
is read from an environment variable of the process that runs it, on the driver
or the actor; it is never sent into a sandbox (sandboxes get no host env).

Two modes, chosen once per policy object on its first request and recorded on
every step (``Sampled.mode``):

- ``tokens`` (token-in/token-out, the default wherever it works): the chat is kept
  as ids (``ChatTokens`` with the model's tokenizer), each turn asks
  ``/v1/completions`` to continue exactly those ids (``prompt`` = the id list,
  ``return_token_ids``, ``logprobs=0``), and the sampled ids and their logprobs
  are recorded as returned. What is recorded is by construction what the model
  saw and produced (vLLM and SGLang serve this). The reply text is parsed into
  an action by swerl (tool calls included: the chat template renders the tools).
- ``chat``: messages to ``/v1/chat/completions``; the server re-renders earlier
  replies from text each turn, so the record is usually not exact. Ids and
  logprobs are kept when the server returns them (vLLM's ``return_token_ids``);
  ``Episode.to_tokens(tokenizer)`` then lays the messages out with ``exact=False``
  and the trainer adapters refuse it unless allowed.

``action_format`` is ``"text"``, ``"tools"``, or a format object of
``swerl.policies.formats`` (e.g. ``PatchMenu()``) that turns the sampled ids into the
action; a format object needs token mode. ``seed`` gives every token-mode request a
seed derived from it, the episode and the turn (vLLM's per-request ``seed``).

``mode="auto"`` uses tokens when the model's tokenizer loads here (``tokenizer``,
else ``model`` as a path or name) and the server answers a token prompt with ids;
otherwise chat, with a warning saying why.

Failures of the server (down, slower than ``timeout``, an error status, an answer
that is not a chat completion) raise ``PolicyError``, an infra error: the episode
is retried, never scored 0. A conversation that fills the model's context is not a
failure: the policy stops the episode (``STOP``, reason ``max_context``), which the env
ends as truncated (graded by its truncation rule, ``grade_on_truncate``); a retry would
only fill the context again.
"""

from __future__ import annotations

import json
import logging
import os
import re
import threading
import zlib
from dataclasses import dataclass, field
from typing import Any, ClassVar

from swerl.chat_tokens import ChatTokens
from swerl.env.actions import FORMAT_HELP, TOOLS
from swerl.episode import Sampled
from swerl.errors import ConfigError, InfraError, PolicyError
from swerl.policies.base import Decision, stop
from swerl.tasks.instance import Instance

SYSTEM_PROMPT = f"""You are a software engineer fixing an issue in the repository at /testbed.
Work step by step: inspect the code, make the fix, run the tests, then submit.
{FORMAT_HELP}"""
TOOLS_PROMPT = """You are a software engineer fixing an issue in the repository at /testbed.
Work step by step with the tools: inspect the code, make the fix, run the tests, then call submit."""
ACTION_FORMATS = ("text", "tools")
MODES = ("auto", "tokens", "chat")
MAX_CONTEXT = "max_context"
"""The ``STOP`` reason of an episode whose conversation fills the model's context."""
_TOOL_CALL = re.compile(r"<tool_call>(.*?)</tool_call>", re.DOTALL)
log = logging.getLogger(__name__)
_LOADING = threading.Lock()
"""One tokenizer load at a time per process: envs of one actor start together, and importing
transformers from two threads at once fails (a partly initialised module)."""


@dataclass
class Conversation:
    messages: list[dict[str, Any]] = field(default_factory=list)
    seq: list[int] = field(default_factory=list)
    """The last prompt the server reported plus the completion it sampled."""
    tool_call_id: str | None = None
    chat: ChatTokens | None = None
    """Token mode: the conversation as ids, the next prompt while the model is to speak."""
    format_state: Any = None
    """The action format object's per-episode state (``PatchMenu``'s choice), if there is one."""
    key: str = ""
    """``task#attempt``: with the policy's ``seed``, what each turn's sampling seed derives from."""
    turns: int = 0


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
        action_format: Any = "text",
        max_retries: int = 0,
        policy_version: int | None = None,
        mode: str = "auto",
        tokenizer: Any = None,
        top_p: float = 1.0,
        top_k: int | None = None,
        max_context: int | None = None,
        seed: int | None = None,
    ) -> None:
        self.format = None if isinstance(action_format, str) else action_format
        """A format object (``swerl.policies.formats``, e.g. ``PatchMenu()``) that turns the sampled
        ids and text into the action; token mode only, since it reads the ids."""
        if self.format is not None and not (hasattr(self.format, "start") and hasattr(self.format, "action")):
            raise ConfigError(
                f"LLMPolicy action_format must be one of {ACTION_FORMATS} or a format object with "
                f"start() and action() (swerl.policies.formats), got {action_format!r}"
            )
        if self.format is not None and mode == "chat":
            raise ConfigError(
                "LLMPolicy: a format object reads the sampled ids, so it needs mode 'auto' or 'tokens'"
            )
        if self.format is None and action_format not in ACTION_FORMATS:
            raise ConfigError(
                f"LLMPolicy action_format must be one of {ACTION_FORMATS}, got {action_format!r}"
            )
        if mode not in MODES:
            raise ConfigError(f"LLMPolicy mode must be one of {MODES}, got {mode!r}")
        self.mode = mode
        """auto, tokens or chat; after the first request, the mode that runs (tokens or chat)."""
        self.tokenizer = tokenizer
        """The model's tokenizer, or a path/name to load it from (default: ``model``)."""
        self.top_p = top_p
        self.top_k = top_k
        self.max_context = max_context
        """The server's context length (vLLM ``--max-model-len``): in token mode a turn asks for at
        most the tokens that still fit, so a long episode gets shorter replies, not server errors."""
        self.seed = seed
        """Token mode: each request carries a seed derived from this, the episode and the turn, so
        the same weights sample the same tokens again (vLLM's per-request ``seed``)."""
        self._labels: bool | None = None
        """Whether the server labels its weights (vLLM in dev mode); None until asked."""
        self.model = model
        self.base_url = base_url
        self.api_key_env = api_key_env
        self.temperature = temperature
        self.max_tokens = max_tokens
        self.action_format = action_format
        default_prompt = TOOLS_PROMPT if self._tools() else SYSTEM_PROMPT
        self.system_prompt = default_prompt if system_prompt is None else system_prompt
        self.timeout = timeout
        self.logprobs = logprobs
        self.token_ids = token_ids
        self.max_retries = max_retries
        """The client's own retries; the runner retries the whole episode on top."""
        self.policy_version = policy_version
        self._client: Any = None

    def __getstate__(self) -> dict[str, Any]:
        state = {**self.__dict__, "_client": None}  # clients do not travel; keys stay in env vars
        if not isinstance(self.tokenizer, (str, type(None))):
            state["tokenizer"] = getattr(self.tokenizer, "name_or_path", None)  # reloaded where it runs
        return state

    def _chat(self) -> Any:
        if self._client is None:
            from openai import OpenAI

            # A local server (vLLM, SGLang) usually has no key: send a placeholder, as their docs do;
            # a server that wants one answers 401, which the rollout's preflight reports.
            key = os.environ.get(self.api_key_env) or "EMPTY"
            self._client = OpenAI(
                base_url=self.base_url, api_key=key, timeout=self.timeout, max_retries=self.max_retries
            )
        return self._client

    def start(self, task: Instance, attempt: int) -> Conversation:
        key = f"{task.instance_id}#{attempt}" if task is not None else f"#{attempt}"
        state = Conversation([{"role": "system", "content": self.system_prompt}], key=key)
        if self.format is not None:
            state.format_state = self.format.start(task)
        return state

    def _tools(self) -> list[dict[str, Any]] | None:
        """The tool definitions the chat template renders (or the server gets), if any."""
        if self.format is not None:
            return self.format.tools
        return TOOLS if self.action_format == "tools" else None

    def _role(self) -> str:
        """The role observations come back in."""
        if self.format is not None:
            return self.format.observation_role
        return "tool" if self.action_format == "tools" else "user"

    # ------------------------------------------------------------------ mode
    def _load_tokenizer(self) -> Any:
        """The model's tokenizer (loaded once), or the reason it cannot be had here."""
        with _LOADING:
            if self.tokenizer is not None and not isinstance(self.tokenizer, str):
                return self.tokenizer
            source = self.tokenizer or self.model
            try:
                from transformers import AutoTokenizer

                self.tokenizer = AutoTokenizer.from_pretrained(source)
            except Exception as e:  # not installed, not a path, no hub access: chat mode says why
                return f"the tokenizer {source!r} cannot be loaded here ({type(e).__name__}: {str(e)[:120]})"
        if getattr(self.tokenizer, "chat_template", None) is None:
            return f"the tokenizer {source!r} has no chat template"
        return self.tokenizer

    def _use_tokens(self, state: Conversation, observation: str) -> bool:
        """Whether to try tokens (the server decides on the first request); builds the token chat."""
        if self.mode == "chat":
            return False
        tok = self._load_tokenizer()
        if isinstance(tok, str):
            if self.mode == "tokens" or self.format is not None:
                raise ConfigError(f"LLMPolicy mode='tokens' (or a format object): {tok}")
            log.warning("LLMPolicy runs in chat mode (inexact token records): %s", tok)
            self.mode = "chat"
            return False
        messages = [*state.messages, {"role": "user", "content": observation}]
        state.chat = ChatTokens(tok, messages, tools=self._tools())
        return True

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
                if context_full(e):
                    return stop(MAX_CONTEXT)
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
        if state.chat is not None:
            return self._act_tokens(state, observation, first=False)  # type: ignore[return-value]
        if len(state.messages) == 1 and self._use_tokens(state, observation):
            decision = self._act_tokens(state, observation, first=True)
            if decision is not None:
                return decision
        return self._act_chat(state, observation)

    def _act_chat(self, state: Conversation, observation: str) -> Decision:
        first = len(state.messages) == 1
        if state.tool_call_id is not None:
            state.messages.append(
                {"role": "tool", "tool_call_id": state.tool_call_id, "content": observation}
            )
        else:
            state.messages.append({"role": "user", "content": observation})
        prompt_messages = [dict(m) for m in state.messages] if first else None
        resp = self._request(state.messages)
        if isinstance(resp, Decision):  # the conversation no longer fits the model's context
            return resp
        choices = getattr(resp, "choices", None)
        if not choices or getattr(choices[0], "message", None) is None:
            raise PolicyError(f"the model server's answer has no choices: {str(resp)[:200]}")
        choice = choices[0]
        action, assistant = self._action(choice.message)
        state.messages.append(assistant)
        state.tool_call_id = assistant["tool_calls"][0]["id"] if assistant.get("tool_calls") else None
        turn = self._sampled(state, resp, choice)
        turn.mode = "chat"
        if first:
            turn.prompt_messages = prompt_messages
            turn.observation_role = "tool" if self.action_format == "tools" else "user"
            turn.tools = TOOLS if self.action_format == "tools" else None
        info = turn.to_info()
        if resp.usage:
            info["usage"] = {
                "prompt_tokens": resp.usage.prompt_tokens,
                "completion_tokens": resp.usage.completion_tokens,
            }
        return Decision(action, info)

    # ------------------------------------------------------------ token mode
    def _act_tokens(self, state: Conversation, observation: str, first: bool) -> Decision | None:
        """One turn token-in/token-out; None if the server cannot (known on a first turn: then chat)."""
        chat = state.chat
        assert chat is not None
        role = self._role()
        if first:  # the chat was built with the first observation
            start, delta = 0, list(chat.ids)
        else:
            start = len(chat.ids)
            delta = chat.add_messages([{"role": role, "content": observation}])
        if self.max_context is not None and len(chat.ids) >= self.max_context:
            return stop(MAX_CONTEXT)  # no room for one more token: truncated, not an infra error
        for _ in range(3):
            before = self._weights_label()
            resp = self._complete(chat.ids, self._seed(state))
            if isinstance(resp, Decision):
                return resp
            if resp is None:  # the server takes no token prompt / returns no ids: chat mode from now on
                state.chat = None
                return None
            label = self._weights_label()
            if label == before:
                break  # else new weights were loaded meanwhile: sample this turn again, all with them
        else:
            raise PolicyError("the server's weights changed during each of 3 tries of one turn")
        choice = resp.choices[0]
        ids = [int(i) for i in _extra(choice, "token_ids")]
        seen = _extra(choice, "prompt_token_ids")
        if seen is not None and [int(i) for i in seen] != chat.ids:
            raise PolicyError("the model server sampled from other prompt ids than it was sent")
        turn = Sampled(ids, delta, start, finish_reason=choice.finish_reason, mode="tokens")
        turn.policy_version = int(label) if label is not None and label.isdigit() else self.policy_version
        lp = getattr(choice.logprobs, "token_logprobs", None) if choice.logprobs else None
        if lp is not None and len(lp) == len(ids):
            turn.logprobs = [float(x) for x in lp]
        if start == 0:
            turn.prompt_messages = [*state.messages, {"role": "user", "content": observation}]
            turn.observation_role = role
            turn.tools = chat.tools
        chat.add_completion(ids)
        state.turns += 1
        text = chat.tokenizer.decode(ids, skip_special_tokens=True)
        info = turn.to_info()
        info["usage"] = {"prompt_tokens": len(chat.ids) - len(ids), "completion_tokens": len(ids)}
        if self.format is not None:
            return Decision(self.format.action(state.format_state, text, ids), info)
        return Decision(self._token_action(text), info)

    def _weights_label(self) -> str | None:
        """The server's label of the weights it samples with (``push_weights`` sets it), if it has one."""
        if self._labels is False or not self.base_url:
            return None
        from swerl.integrations.vllm import server_root, weight_version

        try:
            label = weight_version(server_root(self.base_url), timeout=self.timeout)
        except LookupError:
            self._labels = False
            return None
        except InfraError as e:
            raise PolicyError(f"cannot reach the model server at {self.base_url}: {e}") from None
        self._labels = True
        return label

    def push_weights(self, weights: Any, version: int, checkpoint_dir: str | None = None) -> float | None:
        """Load new weights into the vLLM server this policy samples from, labelled ``version``
        (``swerl.integrations.vllm.push_weights``); ``RolloutRunner.set_policy_version`` calls it."""
        from swerl.integrations.vllm import push_weights

        if not self.base_url:
            raise ConfigError("LLMPolicy.push_weights needs the server's base_url")
        return push_weights(self.base_url, weights, version, checkpoint_dir)

    def _token_action(self, text: str) -> str:
        if self.action_format != "tools":
            return text
        calls = _TOOL_CALL.findall(text)
        return calls[0].strip() if len(calls) == 1 else text  # else the env says what is wrong

    def _seed(self, state: Conversation) -> int | None:
        if self.seed is None:
            return None
        return zlib.crc32(f"{self.seed}:{state.key}:{state.turns}".encode()) & 0x7FFFFFFF

    def _complete(self, prompt: list[int], seed: int | None = None) -> Any:
        """``/v1/completions`` on token ids; None when the server cannot do it (decided on the first call)."""
        import openai

        max_tokens = self.max_tokens
        if self.max_context is not None:
            max_tokens = min(max_tokens, self.max_context - len(prompt))
        extra: dict[str, Any] = {"return_token_ids": True}
        if self.top_k is not None:
            extra["top_k"] = self.top_k
        if seed is not None:
            extra["seed"] = seed
        try:
            resp = self._chat().completions.create(
                model=self.model,
                prompt=prompt,
                max_tokens=max_tokens,
                temperature=self.temperature,
                top_p=self.top_p,
                logprobs=0 if self.logprobs else None,
                extra_body=extra,
            )
        except openai.APIStatusError as e:
            if context_full(e):
                return stop(MAX_CONTEXT)
            if e.status_code not in (400, 404, 405, 422, 501):  # no such route, or the ids refused
                raise PolicyError(f"the model server failed: {type(e).__name__}: {e}") from None
            return self._no_tokens(f"the server refused a token-id prompt: {str(e)[:200]}")
        except openai.APITimeoutError:
            raise PolicyError(f"the model server did not answer within {self.timeout} s") from None
        except openai.APIConnectionError as e:
            raise PolicyError(f"cannot reach the model server at {self.base_url}: {e}") from None
        except (openai.APIResponseValidationError, json.JSONDecodeError) as e:
            raise PolicyError(f"the model server failed: {type(e).__name__}: {e}") from None
        choices = getattr(resp, "choices", None)
        if not choices:
            raise PolicyError(f"the model server's answer has no choices: {str(resp)[:200]}")
        if _extra(choices[0], "token_ids") is None:
            return self._no_tokens("the server returned no sampled token ids (return_token_ids)")
        if self.mode != "tokens":
            log.info("LLMPolicy runs token-in/token-out (/v1/completions on ids) at %s", self.base_url)
            self.mode = "tokens"
        return resp

    def _no_tokens(self, why: str) -> None:
        if self.mode == "tokens" or self.format is not None:
            raise PolicyError(f"LLMPolicy mode='tokens': {why}")
        log.warning("LLMPolicy runs in chat mode (inexact token records): %s", why)
        self.mode = "chat"
        return None

    # ------------------------------------------------------------- chat mode
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


def context_full(error: Any) -> bool:
    """Whether a server's 400 says the prompt leaves no room in the model's context (vLLM, SGLang,
    OpenAI word it so): the episode is over, a retry would fail the same way."""
    if getattr(error, "status_code", None) != 400:
        return False
    body = getattr(error, "body", None)
    code = body.get("code") if isinstance(body, dict) else None
    text = str(error).lower()
    words = ("context length", "context window", "maximum model length")
    return code == "context_length_exceeded" or any(w in text for w in words)


def _extra(obj: Any, name: str) -> Any:
    """A field the OpenAI types do not declare (vLLM's extras), wherever the SDK keeps it."""
    value = getattr(obj, name, None)
    if value is None:
        value = (getattr(obj, "model_extra", None) or {}).get(name)
    return value
