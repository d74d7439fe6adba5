"""LLMPolicy token-in/token-out against a real vLLM server, started as a user starts it.

One server per module (``python -m vllm.entrypoints.openai.api_server`` from the
venv ``python3 -m swerl.bootstrap test`` installs; skipped only when that venv is
absent), serving the tiny local model on CPU in fp32 with its dev routes on. Every
recorded logprob is checked against a teacher-forced forward pass of the same
weights in transformers, turn by turn on the prefix the layout says the model saw,
and again after new weights are pushed to the running server.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from swerl.errors import InfraError  # noqa: E402
from swerl.integrations.vllm import VLLMServer, check_weights, venv_python  # noqa: E402
from swerl.policies.llm import LLMPolicy  # noqa: E402
from swerl.rollout import RolloutRunner  # noqa: E402

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        venv_python() is None, reason="no vLLM venv (python3 -m swerl.bootstrap test makes it)"
    ),
]


STEPS, LR = 12, 5e-2
"""The learning test's length and learning rate (``python -m swerl.bench learn`` runs 30 steps)."""


@pytest.fixture(scope="module")
def vllm(tiny_model_dir, tmp_path_factory):
    """The server, started now; ``.wait()`` where first needed, so Ray and Docker start meanwhile."""
    # --enforce-eager: no compile warm-up (engine ready in ~5 s instead of ~60 s here); same logprobs
    log = tmp_path_factory.mktemp("vllm") / "server.log"
    server = VLLMServer(tiny_model_dir, log=log, extra_args=["--enforce-eager"])
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def hf(tiny_model_dir):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    return AutoModelForCausalLM.from_pretrained(tiny_model_dir), AutoTokenizer.from_pretrained(tiny_model_dir)


@pytest.fixture(autouse=True)
def api_key(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")


def teacher_forced(model, prompt: list[int], completion: list[int]) -> list[float]:
    """log p(completion | prompt) per token, from one forward pass in fp32."""
    with torch.no_grad():
        logits = model(torch.tensor([prompt + completion])).logits[0].float()
    logp = torch.log_softmax(logits[len(prompt) - 1 : -1], dim=-1)
    return logp[torch.arange(len(completion)), torch.tensor(completion)].tolist()


def max_delta(model, traj) -> float:
    """Largest |recorded - recomputed| logprob over every model token of ``traj``."""
    worst = 0.0
    for k, (a, b) in enumerate(traj.turns):
        ours = teacher_forced(model, traj.turn_prompt(k), traj.response_ids[a:b])
        worst = max([worst, *(abs(x - y) for x, y in zip(ours, traj.logprobs[a:b], strict=True))])
    return worst


def perturbed(model, seed: int):
    """A copy of ``model`` with every weight moved, as an optimizer step would (but visibly)."""
    import copy

    new = copy.deepcopy(model)
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in new.parameters():
            p.add_(torch.randn(p.shape, generator=g) * 0.05)
    return new


def test_episodes_through_vllm_are_exact_and_follow_pushed_weights(
    vllm, hf, tiny_model_dir, ray_session, tasks, sandbox_config, tmp_path
):
    model, tok = hf
    policy = LLMPolicy(
        str(tiny_model_dir), base_url=vllm.url, max_tokens=12, temperature=1.0, policy_version=0
    )
    vllm.wait()
    new = perturbed(model, seed=1)
    with RolloutRunner(
        tasks[:2],
        policy,
        num_actors=1,
        envs_per_actor=2,
        # every episode is cut at 3 steps; its tokens are the subject here, not its grade (4 grades fewer)
        env_kwargs={"max_steps": 3, "grade_on_truncate": False, "sandbox_config": sandbox_config},
    ) as r:
        before = r.run()
        r.set_policy_version(1, weights=new)  # the trainer's step: weights reach the server
        after = r.run([(t.instance_id, 1) for t in tasks[:2]])
    figures = []
    for eps, weights, version in [(before, model, 0), (after, new, 1)]:
        assert len(eps) == 2
        for ep in eps:
            assert not ep.infra_error, ep.error
            assert {s.policy["mode"] for s in ep.steps} == {"tokens"}
            t = ep.to_tokens()  # no tokenizer: the record itself is exact
            assert t.exact and len(t.turns) == len(ep.steps) == 3
            assert sum(t.loss_mask) > 0 and t.logprobs is not None  # the model produced tokens
            assert t.policy_versions == [version] * 3 and ep.policy_version == version
            seq: list[int] = []
            for k, step in enumerate(ep.steps):  # every turn's prompt extends everything before it
                s = step.policy
                prompt = seq[: s["prompt_start"]] + s["prompt_ids"]
                assert prompt[: len(seq)] == seq and prompt == t.turn_prompt(k)
                if k:
                    assert ep.steps[k - 1].observation[:30] in tok.decode(prompt[len(seq) :])
                seq = prompt + s["completion_ids"]
            delta = max_delta(weights, t)
            assert delta < 1e-3, (version, delta)
            figures.append((version, sum(t.loss_mask), delta))
    # the pushed weights really sample: the old weights do not explain the new tokens
    assert max(max_delta(model, ep.to_tokens()) for ep in after) > 1e-2
    print("vllm exactness (version, model tokens, max |dlogprob|):", figures)


def test_a_push_mid_episode_labels_each_turn_with_the_weights_that_sampled_it(
    vllm, hf, tiny_model_dir, tmp_path
):
    model, tok = hf
    vllm.wait()
    p = LLMPolicy(str(tiny_model_dir), base_url=vllm.url, max_tokens=6, temperature=1.0, policy_version=5)
    state = p.start(None, 0)
    d1 = p.act(state, "fix the bug")
    new = perturbed(model, seed=2)
    assert p.push_weights(new, 6, checkpoint_dir=str(tmp_path)) < 1e-3  # checked against the server
    with pytest.raises(InfraError, match="differ from the pushed model"):
        check_weights(vllm.url, model)  # the old weights are gone
    d2 = p.act(state, "tests fail")
    assert (d1.info["mode"], d2.info["mode"]) == ("tokens", "tokens")
    assert d2.info["policy_version"] == 6 and d1.info["policy_version"] != 6
    prompt2 = d1.info["prompt_ids"] + d1.info["completion_ids"] + d2.info["prompt_ids"]
    assert d2.info["prompt_start"] == len(d1.info["prompt_ids"]) + len(d1.info["completion_ids"])
    ours = teacher_forced(new, prompt2, d2.info["completion_ids"])
    assert max(abs(x - y) for x, y in zip(ours, d2.info["logprobs"], strict=True)) < 1e-3
    assert state.chat.ids == prompt2 + d2.info["completion_ids"]


def test_tool_calls_in_token_mode(vllm, tiny_model_dir, hf):
    _, tok = hf
    vllm.wait()
    p = LLMPolicy(
        str(tiny_model_dir), base_url=vllm.url, max_tokens=6, temperature=1.0, action_format="tools"
    )
    state = p.start(None, 0)
    d1 = p.act(state, "fix it")
    d2 = p.act(state, "file.py")
    assert d1.info["mode"] == "tokens" and d1.info["observation_role"] == "tool"
    assert '"name": "bash"' in tok.decode(d1.info["prompt_ids"])  # the template rendered the tools
    assert "<|im_start|>tool\nfile.py" in tok.decode(d2.info["prompt_ids"])
    # swerl parses the sampled text: a tool call becomes the action
    reply = '<tool_call>{"name": "bash", "arguments": {"command": "ls"}}</tool_call>'
    assert p._token_action(reply) == '{"name": "bash", "arguments": {"command": "ls"}}'


def test_chat_mode_on_vllm_keeps_the_sampled_ids_and_lays_each_message_out_once(vllm, tiny_model_dir, hf):
    from swerl.episode import Episode, Step

    _, tok = hf
    vllm.wait()
    p = LLMPolicy(str(tiny_model_dir), base_url=vllm.url, max_tokens=6, temperature=1.0, mode="chat")
    state, steps = p.start(None, 0), []
    for k, obs in enumerate(["fix the bug", "file a.py", "tests fail"]):
        d = p.act(state, obs)
        if steps:
            steps[-1].observation = obs
        steps.append(Step(k + 1, d.action, "", policy=d.info))
    assert {s.policy["mode"] for s in steps} == {"chat"} and all(s.policy["completion_ids"] for s in steps)
    t = Episode("t", 0, steps).to_tokens(tok)
    assert t.completion_ids == [s.policy["completion_ids"] for s in steps]  # as sampled, not re-encoded
    assert t.prompt_ids == steps[0].policy["prompt_ids"]
    text = tok.decode(t.prompt_ids + t.response_ids)
    assert text.count("<|im_start|>user") == 3 and text.count("<|im_start|>assistant") == 3
    for obs in ["fix the bug", "file a.py", "tests fail"]:
        assert text.count(obs) == 1


def test_replies_are_cut_to_the_context_left_and_a_full_context_stops_the_episode(vllm, tiny_model_dir, hf):
    from swerl.policies.base import STOP

    vllm.wait()
    probe = LLMPolicy(str(tiny_model_dir), base_url=vllm.url, max_tokens=1)
    n = len(probe.act(probe.start(None, 0), "fix it").info["prompt_ids"])
    p = LLMPolicy(str(tiny_model_dir), base_url=vllm.url, max_tokens=12, temperature=1.0, max_context=n + 3)
    state = p.start(None, 0)
    d = p.act(state, "fix it")
    assert 1 <= len(d.info["completion_ids"]) <= 3 and len(state.chat.ids) <= n + 3
    assert p.act(state, "a long observation " * 5).info == {STOP: "max_context"}  # truncated, not an error
    # without max_context the server's own refusal (longer than --max-model-len 2048) says the same
    for mode in ("tokens", "chat"):
        q = LLMPolicy(str(tiny_model_dir), base_url=vllm.url, max_tokens=4, mode=mode)
        assert q.act(q.start(None, 0), "word " * 2100).info == {STOP: "max_context"}


@pytest.mark.timeout(1200)  # ~2 min on a quiet box; the steps wait on Docker episodes under load
def test_grpo_through_vllm_learns_with_weights_pushed_each_step(
    vllm, tiny_model_dir, ray_session, tasks, sandbox_config, tmp_path
):
    """The production path carries a learning signal: swerl's async loop (RolloutRunner streaming
    GRPO groups, Prefetch) with LLMPolicy sampling token-in/token-out from the vLLM server, the
    trainer stepping on the recorded ids and logprobs and pushing its weights to the server after
    every step. The untrained model picks the gold fix about a third of the time (PatchMenu: its
    first sampled token picks gold, a wrong patch or none; every episode edits and is graded in
    Docker); the mean reward must rise, sampled by pushed weights, and every token the trainer
    scores as on-policy must have the logprob the server recorded (importance ratio 1).
    ``python -m swerl.bench learn`` runs the full 30-step curve for several seeds."""
    from transformers import AutoModelForCausalLM

    from swerl.episode import JsonlSink
    from swerl.integrations.grpo import train_grpo
    from swerl.policies.formats import PatchMenu

    torch.manual_seed(0)
    vllm.wait()
    menu_tasks = [t for t in tasks if t.instance_id in ("swerl__intervals-1", "swerl__tinyconf-2")]
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    policy = LLMPolicy(
        str(tiny_model_dir), base_url=vllm.url, max_tokens=1, temperature=1.0, mode="tokens",
        system_prompt="Fix the issue.", action_format=PatchMenu(), seed=0,
    )  # fmt: skip
    sink = tmp_path / "episodes.jsonl"
    runner = RolloutRunner(
        menu_tasks, policy, num_actors=1, envs_per_actor=8, attempts=4, group=True, max_staleness=1,
        sink=str(sink), env_kwargs={"sandbox_config": sandbox_config},
    )  # fmt: skip
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        with runner:
            logs = train_grpo(runner, model, steps=STEPS, groups_per_step=2, lr=LR)
    finally:
        torch.set_num_threads(threads)
    rewards = [h.reward for h in logs]
    start, end = sum(rewards[:3]) / 3, sum(rewards[-3:]) / 3
    print(f"grpo through vLLM: reward {start:.2f} (first 3 steps) -> {end:.2f} (last 3)", rewards)
    assert start <= 0.6 and end >= 0.8, rewards
    assert all(h.episodes == 8 and h.dropped == 0 for h in logs)
    # the rise was sampled by pushed weights: late steps learn from tokens of versions >= 1
    assert all(min(h.sampled_by) >= 1 for h in logs[-3:]), [h.sampled_by for h in logs]
    # pushes reach the server to the end: the sampler prefetches up to two groups while a step
    # trains, so the newest version the last steps saw is STEPS - 1 or, by timing, STEPS - 2
    assert max(h.sampled_by[-1] for h in logs) >= STEPS - 2, [h.sampled_by for h in logs]
    # on-policy tokens: the trainer's logprob is the server's (ratio 1); stale ones really differ
    assert sum(h.on_policy_tokens for h in logs) >= STEPS
    assert max(h.on_policy_dev for h in logs) < 1e-3, [h.on_policy_dev for h in logs]
    assert any(h.stale_ratio_dev > 1e-2 for h in logs)
    episodes = list(JsonlSink.read(sink))
    assert all({s.policy["mode"] for s in ep.steps} == {"tokens"} for ep in episodes)
    assert all(ep.to_tokens().exact for ep in episodes)
