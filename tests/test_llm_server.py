"""LLMPolicy in chat mode against a real OpenAI-compatible server: ``transformers serve``, tiny local model.

One server per module (it takes ~20-30 s to start on CPU). It takes no token-id
prompt, so the policy detects chat mode on its first request; it returns text and
usage but no token ids or logprobs, so episodes are laid out message by message,
``exact=False``, and refused by the trainer adapters unless allowed. The model
samples (temperature 1, its generation config samples). Token-in/token-out
against a real vLLM is ``test_vllm.py``. Servers that are down, stuck or answer
garbage are real sockets too.
"""

from __future__ import annotations

import contextlib
import http.server
import json
import shutil
import socket
import subprocess
import threading
import time
import urllib.request
from collections.abc import Iterator

import pytest

pytest.importorskip("transformers")
pytest.importorskip("fastapi")

from swerl.env.actions import parse_action
from swerl.errors import PolicyError
from swerl.policies.llm import Conversation, LLMPolicy
from swerl.rollout import RolloutRunner


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Served:
    """A started ``transformers serve``; ``url`` waits until it answers (so Ray and Docker start meanwhile)."""

    def __init__(self, proc: subprocess.Popen, port: int, log: str) -> None:
        self.proc, self.port, self.log, self._up = proc, port, log, False

    @property
    def url(self) -> str:
        deadline = time.monotonic() + 180
        while not self._up:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{self.port}/health", timeout=2)
                self._up = True
            except OSError:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"transformers serve did not come up; see {self.log}") from None
                time.sleep(0.5)
        return f"http://127.0.0.1:{self.port}/v1"


@pytest.fixture(scope="module")
def server(tiny_model_dir, tmp_path_factory):
    """``transformers serve`` on a free port, serving the tiny model on CPU."""
    exe = shutil.which("transformers")
    if exe is None:
        pytest.skip("the transformers CLI is not installed")
    port = free_port()
    log = (tmp_path_factory.mktemp("serve") / "serve.log").open("wb")
    proc = subprocess.Popen(
        [exe, "serve", str(tiny_model_dir), "--host", "127.0.0.1", "--port", str(port), "--device", "cpu"],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        yield Served(proc, port, log.name)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()


@pytest.fixture(scope="module")
def tok(tiny_model_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_model_dir)


def policy(tiny_model_dir, base_url: str, **kw) -> LLMPolicy:
    return LLMPolicy(str(tiny_model_dir), base_url=base_url, max_tokens=8, temperature=1.0, **kw)


def test_episodes_against_a_chat_only_server_are_laid_out_by_message_and_inexact(
    server, tiny_model_dir, tok, ray_session, tasks, sandbox_config
):
    from swerl.errors import ConfigError, InexactTokens
    from swerl.integrations.trl import rollout_batch

    p = policy(tiny_model_dir, server.url, system_prompt="Fix the bug.")
    with RolloutRunner(
        tasks[:2],
        p,
        num_actors=1,
        envs_per_actor=2,
        env_kwargs={"max_steps": 2, "sandbox_config": sandbox_config},
    ) as r:
        eps = r.run()
    assert len(eps) == 2
    for ep in eps:
        assert not ep.infra_error and ep.reward == 0.0, (ep.status, ep.error)
        assert len(ep.steps) == 2
        assert {s.policy["mode"] for s in ep.steps} == {"chat"}  # detected: no token-id prompts here
        first = ep.steps[0].policy
        assert first["prompt_messages"][1]["role"] == "user"
        assert "completion_ids" not in first  # this server returns no ids
        assert "sk-driver-secret" not in ep.to_json()
        with pytest.raises(ConfigError, match="no token ids"):
            ep.to_tokens()
        t = ep.to_tokens(tok)
        assert not t.exact and t.logprobs is None and "re-tokenized" in t.inexact_reason
        assert len(t.loss_mask) == len(t.response_ids) and len(t.turns) == 2
        text = tok.decode(t.prompt_ids + t.response_ids)
        assert text.count("<|im_start|>user") == 2 and text.count("<|im_start|>assistant") == 2
        assert "Fix the bug." in text and text.count(ep.steps[0].observation[:60]) == 1
    # the model sampled real tokens (not just an end-of-turn): usage counts them, the text has them
    steps = [s for ep in eps for s in ep.steps]
    assert sum(s.policy["usage"]["completion_tokens"] for s in steps) > 2 * len(steps)
    assert sum(len(s.action) for s in steps) > 0
    with pytest.raises(InexactTokens):
        rollout_batch(eps)


def test_tool_call_format_reaches_the_chat_template(server, tiny_model_dir, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    text, tools = (
        policy(tiny_model_dir, server.url),
        policy(tiny_model_dir, server.url, action_format="tools"),
    )
    d_text = text.act(text.start(None, 0), "fix it")
    d_tools = tools.act(tools.start(None, 0), "fix it")
    # the server rendered the tool schemas into the prompt: more prompt tokens
    assert d_tools.info["usage"]["prompt_tokens"] > d_text.info["usage"]["prompt_tokens"] + 50
    assert d_tools.info["observation_role"] == "tool"


def test_a_tool_call_reply_becomes_an_action_and_its_result_a_tool_message(tiny_model_dir):
    from openai.types.chat import ChatCompletion

    p = LLMPolicy(str(tiny_model_dir), action_format="tools")
    call = {"id": "c1", "type": "function", "function": {"name": "bash", "arguments": '{"command": "ls"}'}}
    resp = ChatCompletion.model_validate(
        {
            "id": "x",
            "object": "chat.completion",
            "created": 0,
            "model": "m",
            "choices": [
                {
                    "index": 0,
                    "finish_reason": "tool_calls",
                    "message": {"role": "assistant", "content": None, "tool_calls": [call]},
                }
            ],
        }
    )
    action, assistant = p._action(resp.choices[0].message)
    assert parse_action(action).args == {"command": "ls"} and assistant["tool_calls"][0]["id"] == "c1"


def test_vllm_style_ids_are_recorded_as_prompt_deltas(tiny_model_dir):
    """vLLM's chat-mode ``return_token_ids`` answer shape, parsed by the policy."""
    from openai.types.chat import ChatCompletion

    def answer(prompt_ids, ids):
        return ChatCompletion.model_validate(
            {
                "id": "x",
                "object": "chat.completion",
                "created": 0,
                "model": "m",
                "prompt_token_ids": prompt_ids,
                "choices": [
                    {
                        "index": 0,
                        "finish_reason": "stop",
                        "token_ids": ids,
                        "message": {"role": "assistant", "content": "a"},
                        "logprobs": {
                            "content": [
                                {"token": "a", "logprob": -0.25, "bytes": None, "top_logprobs": []}
                                for _ in ids
                            ]
                        },
                    }
                ],
            }
        )

    p, state = LLMPolicy("m"), Conversation()
    r1 = answer([1, 2, 3], [7, 8])
    t1 = p._sampled(state, r1, r1.choices[0])
    r2 = answer([1, 2, 3, 7, 8, 4, 5], [9])
    t2 = p._sampled(state, r2, r2.choices[0])
    assert (t1.prompt_ids, t1.prompt_start, t1.completion_ids, t1.logprobs) == (
        [1, 2, 3],
        0,
        [7, 8],
        [-0.25] * 2,
    )
    assert (t2.prompt_ids, t2.prompt_start, t2.completion_ids) == ([4, 5], 5, [9])


class _Canned(http.server.BaseHTTPRequestHandler):
    """A test double of a model server: every POST is answered 200 with ``reply(request body)``."""

    def reply(self, request: bytes) -> bytes:
        raise NotImplementedError

    def do_POST(self):
        body = self.reply(self.rfile.read(int(self.headers.get("content-length", 0))))
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@contextlib.contextmanager
def _serving(handler: type[_Canned]) -> Iterator[str]:
    """The handler served on a free local port, for as long as the block runs: its ``/v1`` URL."""
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{srv.server_port}/v1"
    finally:
        srv.shutdown()


class _Garbage(_Canned):
    def reply(self, request: bytes) -> bytes:
        return b"<html>not a chat completion</html>"


@pytest.fixture
def garbage_server():
    with _serving(_Garbage) as url:
        yield url


@pytest.fixture
def stuck_server():
    """Accepts connections and never answers."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen(8)
    yield f"http://127.0.0.1:{s.getsockname()[1]}/v1"
    s.close()


def test_garbage_and_stuck_servers_raise_policy_errors(
    tiny_model_dir, garbage_server, stuck_server, monkeypatch
):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    # Both request paths. The tokenizer is named, never looked up by the model name: a name that is
    # no local path sends transformers to the hub, whose retries (offline) took ~90 s here.
    # (token mode asks the server for its weights' label first: a stuck server times out there)
    cases = [
        ({"mode": "chat"}, garbage_server, "failed|no choices"),
        ({"mode": "chat"}, stuck_server, "did not answer within 1.0 s"),
        ({"mode": "tokens", "tokenizer": str(tiny_model_dir)}, garbage_server, "failed|no choices"),
        ({"mode": "tokens", "tokenizer": str(tiny_model_dir)}, stuck_server, "cannot reach .* timed out"),
    ]
    for kw, url, match in cases:
        p = LLMPolicy("m", base_url=url, timeout=1.0, **kw)
        with pytest.raises(PolicyError, match=match):
            p.act(p.start(None, 0), "hi")


def _one_episode(p: LLMPolicy, task, sandbox_config) -> tuple:
    """One episode of ``task`` through a one-actor runner that retries an infra error once; and its stats."""
    with RolloutRunner(
        [task], p, num_actors=1, max_retries=1, retry_delay=0.1, env_kwargs={"sandbox_config": sandbox_config}
    ) as r:
        (ep,) = r.run()
        return ep, dict(r.stats)


def test_a_server_that_is_down_makes_retried_infra_errors(tiny_model_dir, ray_session, tasks, sandbox_config):
    p = policy(tiny_model_dir, f"http://127.0.0.1:{free_port()}/v1", timeout=2.0)
    ep, stats = _one_episode(p, tasks[0], sandbox_config)
    assert ep.status == "infra_error" and ep.reward is None and ep.reason == "policy_error"
    assert "cannot reach the model server" in ep.error and ep.retries == 1 and stats["retried"] == 1
    assert json.loads(ep.to_json())["reward"] is None


def test_a_conversation_that_fills_the_context_ends_truncated_not_retried(
    tiny_model_dir, ray_session, tasks, sandbox_config
):
    # The first prompt alone is longer than max_context: the policy stops before any request
    # (the port has no server: asking it would be a retried infra error, as in the test above).
    p = policy(tiny_model_dir, f"http://127.0.0.1:{free_port()}/v1", mode="tokens", max_context=16)
    ep, stats = _one_episode(p, tasks[0], sandbox_config)
    assert ep.reason == "max_context" and ep.status == "empty_patch" and ep.reward == 0.0  # graded: no diff
    assert not ep.infra_error and ep.retries == 0 and stats.get("retried", 0) == 0 and ep.steps == []


def _synth_task():
    """A synthesized task's record and candidate, as the synthesis pipeline makes them (no sandbox needed)."""
    from swerl.tasks.instance import Instance
    from swerl.tasks.synth.inject import Candidate

    patch = (
        "diff --git a/demo/core.py b/demo/core.py\n--- a/demo/core.py\n+++ b/demo/core.py\n"
        "@@ -1,2 +1,2 @@\n def clamp(x, hi):\n-    return max(x, hi)\n+    return min(x, hi)\n"
    )
    inst = Instance(instance_id="pypi__demo.flip.0", repo="pypi/demo", base_commit="0" * 40, patch=patch,
                    test_patch="", problem_statement="", FAIL_TO_PASS=["tests/test_core.py::test_clamp"],
                    PASS_TO_PASS=[], extra={"synth": {"method": "inject"}})  # fmt: skip
    cand = Candidate("inject", None, inst.FAIL_TO_PASS, [], ["tests/test_core.py"],
                     errors={"tests/test_core.py::test_clamp": "AssertionError: assert 12 == 10"})  # fmt: skip
    return inst, cand


def test_synth_problem_statements_come_from_a_live_model_with_the_mode_recorded(server, tiny_model_dir):
    from swerl.tasks.synth.statement import ModelWriter
    from swerl.tasks.synth.suite import write_statement

    inst, cand = _synth_task()
    w = ModelWriter(server.url, str(tiny_model_dir), max_tokens=24)
    w.check()
    for _ in range(2):  # the same writer, task after task
        write_statement(inst, cand, w)
        assert inst.extra["synth"]["statement"] == {"mode": "model", "model": str(tiny_model_dir)}
        assert inst.problem_statement.strip()  # the model produced text, and it is what the task carries


class _Quoter(_Canned):
    """Test double of a model that quotes the fix back (a real tiny model cannot be made to)."""

    def reply(self, request: bytes) -> bytes:
        prompt = json.loads(request)["messages"][0]["content"]
        added = next(ln[1:] for ln in prompt.splitlines() if ln.startswith("+") and not ln.startswith("+++"))
        return json.dumps(
            {"choices": [{"message": {"content": f"Change it to `{added.strip()}`."}}]}
        ).encode()


def test_synth_problem_statements_fall_back_to_the_template_and_say_why(garbage_server):
    from swerl.errors import ConfigError
    from swerl.tasks.synth.statement import ModelWriter, TemplateWriter
    from swerl.tasks.synth.suite import write_statement

    inst, cand = _synth_task()
    template = TemplateWriter().write(inst, cand).text
    assert "test_clamp" in template and "assert 12 == 10" in template and "min(" not in template
    with _serving(_Quoter) as quoter:
        for url, why in [(quoter, "model reply quoted the fix"),
                         (garbage_server, "model failed: problem-statement model at")]:  # fmt: skip
            write_statement(inst, cand, ModelWriter(url, "m", timeout=5))
            rec = inst.extra["synth"]["statement"]
            assert rec["mode"] == "template" and rec["fallback"].startswith(why), rec
            assert inst.problem_statement == template
    with pytest.raises(ConfigError, match="problem-statement model"):  # down: refused before any work
        ModelWriter(f"http://127.0.0.1:{free_port()}/v1", "m", timeout=2).check()


def test_a_format_object_needs_token_mode():
    """A format object (PatchMenu) reads the sampled ids, which chat mode does not have exactly."""
    from swerl.errors import ConfigError
    from swerl.policies.formats import PatchMenu

    with pytest.raises(ConfigError, match="needs mode 'auto' or 'tokens'"):
        LLMPolicy("m", base_url="http://127.0.0.1:9/v1", action_format=PatchMenu(), mode="chat")
    with pytest.raises(ConfigError, match="format object with start"):
        LLMPolicy("m", base_url="http://127.0.0.1:9/v1", action_format=object())
