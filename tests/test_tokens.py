"""Token-level trajectories: ChatTokens deltas, Episode.to_tokens, and the JSONL round trip.

A real tokenizer (the locally built tiny model's) and a real model sampling the
completions; no server, no Docker.
"""

from __future__ import annotations

import pytest

pytest.importorskip("transformers")
torch = pytest.importorskip("torch")

from swerl.chat_tokens import ChatTokens  # noqa: E402
from swerl.episode import Episode, JsonlSink, Sampled, Step  # noqa: E402
from swerl.errors import ConfigError  # noqa: E402

SYSTEM = {"role": "system", "content": "You fix bugs."}


@pytest.fixture(scope="module")
def tok(tiny_model_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_model_dir)


@pytest.fixture(scope="module")
def model(tiny_model_dir):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(tiny_model_dir)


def sample(model, ids: list[int], n: int) -> list[int]:
    out = model.generate(torch.tensor([ids]), max_new_tokens=n, do_sample=True, top_k=0)
    return out[0, len(ids) :].tolist()


def play(tok, model, observations: list[str], role: str = "tool") -> tuple[Episode, list[list[int]]]:
    """Sample a multi-turn episode the way a model policy records it; also return each turn's prompt."""
    chat = ChatTokens(tok, [SYSTEM, {"role": "user", "content": observations[0]}])
    steps, prompts, start, delta = [], [], 0, list(chat.ids)
    for k, obs in enumerate([*observations[1:], "done"]):
        prompts.append(list(chat.ids))
        ids = sample(model, chat.ids, 6 + 3 * k)
        chat.add_completion(ids)
        info = Sampled(ids, delta, start, [-0.5] * len(ids), "length", policy_version=k // 2)
        if k == 0:
            info.prompt_messages = [SYSTEM, {"role": "user", "content": observations[0]}]
            info.observation_role = role
        steps.append(Step(k + 1, tok.decode(ids, skip_special_tokens=True), obs, policy=info.to_info()))
        start = len(chat.ids)
        delta = chat.add_messages([{"role": role, "content": obs}])
    return Episode("t", 0, steps, status="resolved", reward=1.0), prompts


def test_chat_tokens_keep_every_prompt_a_prefix_of_the_next(tok, model):
    chat = ChatTokens(tok, [SYSTEM, {"role": "user", "content": "fix it"}])
    seen, sampled = [], 0
    for obs in ["out 1", "out 2"]:
        seen.append(list(chat.ids))
        completion = sample(model, chat.ids, 5)
        chat.add_completion(completion)
        sampled += len(completion)
        delta = chat.add_messages([{"role": "user", "content": obs}])
        assert seen[-1] + completion + delta == chat.ids
        assert tok.decode(delta).endswith("<|im_start|>assistant\n")
        assert obs in tok.decode(delta)
    # a reply that ended with the end-of-turn token is not closed twice
    closed = [*tok.encode("hi", add_special_tokens=False), tok.eos_token_id]
    assert chat.closing(closed) == tok.encode("\n", add_special_tokens=False)
    assert chat.closing(tok.encode("hi", add_special_tokens=False))[0] == tok.eos_token_id
    assert sum(chat.response_mask) == sampled and chat.ids[: chat.prompt_len] == seen[0]


def test_to_tokens_lays_out_what_the_model_saw(tok, model):
    ep, prompts = play(tok, model, ["fix the bug", "file a.py", "tests fail", "tests pass"])
    t = ep.to_tokens()
    assert t.exact and t.reward == 1.0
    assert len(t.loss_mask) == len(t.response_ids) == len(t.logprobs)
    assert t.prompt_ids == prompts[0]
    for k, prompt in enumerate(prompts):
        assert t.turn_prompt(k) == prompt  # the prefix the model saw is the concatenation so far
    for (a, b), step in zip(t.turns, ep.steps, strict=True):
        assert t.response_ids[a:b] == step.policy["completion_ids"]
        assert set(t.loss_mask[a:b]) == {1} and set(t.logprobs[a:b]) == {-0.5}
    assert t.policy_versions == [0, 0, 1, 1]
    text = tok.decode(t.prompt_ids + t.response_ids)
    for obs in ["fix the bug", "file a.py", "tests fail", "tests pass"]:
        assert obs in text
    observed = [i for i, m in zip(t.response_ids, t.loss_mask, strict=True) if m == 0]
    assert "tests fail" in tok.decode(observed) and "fix the bug" not in tok.decode(observed)


def test_json_round_trip_and_fallback_retokenizes(tok, model, tmp_path):
    ep, _ = play(tok, model, ["fix the bug", "out"], role="user")
    with JsonlSink(tmp_path / "e.jsonl") as sink:
        sink.write(ep)
    (back,) = JsonlSink.read(tmp_path / "e.jsonl")
    assert back.to_tokens() == ep.to_tokens()
    # a server that returned no ids: only text was recorded
    for s in back.steps:
        for key in ("prompt_ids", "completion_ids", "logprobs"):
            s.policy.pop(key)
    with pytest.raises(ConfigError, match="no token ids"):
        back.to_tokens()
    t = back.to_tokens(tok)
    assert not t.exact and t.logprobs is None
    assert len(t.loss_mask) == len(t.response_ids)
    assert "out" in tok.decode([i for i, m in zip(t.response_ids, t.loss_mask, strict=True) if not m])


def rerendered(tok, ep: Episode) -> Episode:
    """``ep`` as a chat-mode server records it: each turn's prompt is the whole chat re-rendered from text."""
    first = ep.steps[0].policy
    messages = list(first["prompt_messages"])
    for k, step in enumerate(ep.steps):
        s = step.policy
        if k:
            messages += [
                {"role": "assistant", "content": ep.steps[k - 1].action},
                {"role": first["observation_role"], "content": ep.steps[k - 1].observation},
            ]
            s["prompt_ids"] = tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
            s["prompt_start"] = 0
    return ep


def test_a_rerendered_chat_is_laid_out_once_per_message_and_not_exact(tok, model):
    torch.manual_seed(0)
    ep, prompts = play(tok, model, ["fix the bug", "file a.py", "tests fail"], role="user")
    sampled = [list(s.policy["completion_ids"]) for s in ep.steps]
    ep = rerendered(tok, ep)
    assert ep.steps[1].policy["prompt_ids"][: len(prompts[1])] != prompts[1]  # the re-render drifted
    with pytest.raises(ConfigError, match="re-rendered"):
        ep.to_tokens()
    t = ep.to_tokens(tok)
    assert not t.exact and "re-rendered" in t.inexact_reason
    assert t.prompt_ids == prompts[0] and len(t.turns) == 3
    assert t.completion_ids == sampled  # the recorded ids, not the re-tokenized text
    assert t.prompt_ids + t.response_ids == [*prompts[-1], *sampled[-1]]  # same length as what was sampled
    text = tok.decode(t.prompt_ids + t.response_ids)
    assert text.count("<|im_start|>user") == 3 and text.count("<|im_start|>assistant") == 3
    for obs in ["fix the bug", "file a.py", "tests fail"]:
        assert text.count(obs) == 1


def test_recorded_ids_survive_bytes_that_decode_to_replacement_chars(tok):
    """Byte-level pieces of one character, cut apart, decode to U+FFFD and re-encode to other ids."""
    ids = tok.encode("é→ok", add_special_tokens=False)
    cut = [i for i in ids if "\ufffd" in tok.decode([i])]
    assert cut, "the tokenizer splits these characters into byte pieces"
    reply = [*cut[::-1], tok.eos_token_id]  # pieces out of order: not valid UTF-8
    text = tok.decode(reply, skip_special_tokens=True)
    assert "\ufffd" in text and tok.encode(text, add_special_tokens=False) != reply[:-1]
    info = Sampled(reply, [1, 2, 3], 0, [-1.0] * len(reply), "stop")
    info.prompt_messages = [SYSTEM, {"role": "user", "content": "hi"}]
    ep = Episode("t", 0, [Step(1, text, "", policy=info.to_info())])
    t = ep.to_tokens(tok)
    assert t.exact and t.response_ids == reply and t.logprobs == [-1.0] * len(reply)
    for key in ("prompt_ids", "completion_ids", "logprobs"):
        ep.steps[0].policy.pop(key)
    t = ep.to_tokens(tok)
    assert not t.exact and "re-tokenized" in t.inexact_reason and t.response_ids != reply


def test_trainer_adapters_refuse_inexact_episodes_unless_told(tok, model):
    from swerl.errors import InexactTokens
    from swerl.integrations.common import trainer_tokens

    torch.manual_seed(0)
    ep, _ = play(tok, model, ["fix", "out"])
    assert trainer_tokens(ep).exact
    ep = rerendered(tok, ep)
    with pytest.raises(InexactTokens, match=r"t#0 .*re-rendered.*allow_inexact"):
        trainer_tokens(ep, tok)
    assert not trainer_tokens(ep, tok, allow_inexact=True).exact


def test_model_policy_with_tool_calls_records_exact_turns(tok, model):
    from swerl.env.actions import parse_action
    from swerl.integrations.hf import HFGenerator
    from swerl.policies.formats import ToolCallActions
    from swerl.policies.model import ModelPolicy

    fmt = ToolCallActions()
    reply = '<tool_call>{"name": "bash", "arguments": {"command": "ls"}}</tool_call>'
    assert parse_action(fmt.action(None, reply, [])).args == {"command": "ls"}

    policy = ModelPolicy(HFGenerator(model, tok, max_new_tokens=6), "Fix it.", fmt, policy_version=3)
    states = [policy.start(None, a) for a in range(2)]
    steps: list[list[Step]] = [[], []]
    for k, obs in enumerate(["the issue", "tool output", "more output"]):
        for i, d in enumerate(policy.act_batch(states, [obs, obs])):  # one batched generate for both
            steps[i].append(Step(k + 1, d.action, "", policy=d.info))
    for i, st in enumerate(states):
        for k in range(2):
            steps[i][k].observation = ["tool output", "more output"][k]
        t = Episode("t", i, steps[i]).to_tokens()
        assert t.exact and t.policy_versions == [3, 3, 3]
        assert t.prompt_ids + t.response_ids == st.chat.ids  # the chat the model saw, token for token
        assert '"name": "bash"' in tok.decode(t.prompt_ids)  # tools rendered by the chat template
        assert "<|im_start|>tool\nmore output" in tok.decode(t.response_ids)


def test_staged_weights_never_wait_for_a_generation_and_stamp_the_turns_they_sample(tok, model):
    """``HFGenerator.load_weights`` (a trainer syncing its sampler) stages a copy and returns even
    while a generation holds the sampler; the next generation samples from the new weights and
    its turns carry their version, not the policy's."""
    import copy
    import threading

    from swerl.integrations.hf import HFGenerator
    from swerl.policies.formats import ToolCallActions
    from swerl.policies.model import ModelPolicy

    gen = HFGenerator(copy.deepcopy(model), tok, max_new_tokens=5)
    trained = copy.deepcopy(model)
    with torch.no_grad():
        for p in trained.parameters():
            p.add_(torch.randn_like(p) * 0.3)
    with gen._lock:  # what a generate in progress holds
        loader = threading.Thread(target=gen.load_weights, args=(trained,), kwargs={"version": 7})
        loader.start()
        loader.join(timeout=30)
        assert not loader.is_alive()
    policy = ModelPolicy(gen, "Fix it.", ToolCallActions(), policy_version=3)
    state = policy.start(None, 0)
    info = policy.act_batch([state], ["the issue"])[0].info
    assert info["policy_version"] == 7 and gen.version == 7
    ids = torch.tensor([state.chat.ids])
    n = len(info["completion_ids"])

    def logprobs(m):
        with torch.no_grad():
            logp = torch.log_softmax(m(ids).logits[0, :-1], -1).gather(1, ids[0, 1:, None])[:, 0]
        return logp[-n:]

    recorded = torch.tensor(info["logprobs"])
    assert (recorded - logprobs(trained)).abs().max() < 1e-4  # sampled by the staged weights
    assert (recorded - logprobs(model)).abs().max() > 1e-3  # not by the ones it held before


def test_a_larger_model_is_built_like_the_tiny_one_and_bad_sizes_are_refused(tmp_path, tok, capsys):
    from transformers import AutoModelForCausalLM

    from swerl.bench.train import main as bench_train
    from swerl.integrations.tiny_model import tiny_model

    d = tiny_model(tmp_path / "m", layers=3, hidden=192)
    m = AutoModelForCausalLM.from_pretrained(d)
    assert (m.config.num_hidden_layers, m.config.hidden_size, m.config.num_attention_heads) == (3, 192, 3)
    assert m.config.vocab_size == len(tok)  # the same tokenizer as the tiny model
    with pytest.raises(ConfigError, match=r"multiple of 64.*hidden=100"):
        tiny_model(tmp_path / "bad", hidden=100)
    with pytest.raises(ConfigError, match="layers=0"):
        tiny_model(tmp_path / "bad", layers=0)
    with pytest.raises(SystemExit):
        bench_train(["--model-layers", "2", "8", "--model-hidden", "128"])
    assert "pair up: got 2 and 1" in capsys.readouterr().err
