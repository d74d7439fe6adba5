"""SkyRL adapters on real Ray and real Docker over the bundled suite.

``SwerlTextEnv`` is made through ``skyrl_gym``'s own registry. ``SwerlGenerator``
samples through a stand-in for SkyRL's inference engine client (its real clients
drive vLLM, which needs a GPU) that answers from the tiny local model, token ids
in and token ids out, with logprobs. skyrl 0.3.0's ``skyrl.train`` does not import
on Python < 3.12, so the output is checked against the rules of SkyRL's own
``validate_generator_output``, restated below.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

import pytest

pytest.importorskip("skyrl_gym")
pytest.importorskip("transformers")

from test_rollout import swerl_containers_with_prefix

from swerl.env import actions
from swerl.integrations.hf import HFGenerator
from swerl.policies.patch_actions import patch_to_actions

SYSTEM = {"role": "system", "content": "You are a careful engineer."}


@pytest.fixture(scope="module")
def tok(tiny_model_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_model_dir)


class TinyEngine:
    """Stand-in for SkyRL's inference engine client: ``generate`` samples the tiny model.

    Same contract as SkyRL's ``InferenceEngineInterface.generate``: prompt token ids
    in; response ids (ending with the end-of-turn token when the model stopped),
    text, stop reasons and per-token logprobs out. It keeps every prompt it saw.
    """

    def __init__(self, tiny_model_dir, tok) -> None:
        from transformers import AutoModelForCausalLM

        self.tok = tok
        self.sampler = HFGenerator(
            AutoModelForCausalLM.from_pretrained(tiny_model_dir), tok, max_new_tokens=6
        )
        self.prompts: list[list[int]] = []

    async def generate(self, input_batch, model=None):
        prompts = [list(p) for p in input_batch["prompt_token_ids"]]
        self.prompts.extend(prompts)
        gens = await asyncio.to_thread(self.sampler.generate, prompts)
        return {
            "responses": [self.tok.decode(g.ids, skip_special_tokens=True) for g in gens],
            "response_ids": [g.ids for g in gens],
            "stop_reasons": [g.finish_reason for g in gens],
            "response_logprobs": [g.logprobs for g in gens],
            "prompt_logprobs": None,
            "rollout_expert_indices": None,
        }


@dataclass
class TrajectoryID:
    """SkyRL's TrajectoryID (same fields), which cannot be imported on this Python."""

    instance_id: str
    repetition_id: int


@dataclass
class BatchMetadata:
    """SkyRL's BatchMetadata (same fields)."""

    global_step: int
    training_phase: str


def check_like_skyrl(out: dict, n_prompts: int) -> None:
    """What SkyRL's ``validate_generator_output`` asserts before training on a batch."""
    n = len(out["response_ids"])
    assert n == n_prompts == len(out["prompt_token_ids"]) > 0
    for key in ("loss_masks", "rewards", "rollout_logprobs", "stop_reasons", "trajectory_ids"):
        if isinstance(out[key], list):
            assert len(out[key]) == n, key
    for i, (ids, mask) in enumerate(zip(out["response_ids"], out["loss_masks"], strict=True)):
        assert len(ids) == len(mask), i
        if out["rollout_logprobs"]:
            assert len(out["rollout_logprobs"][i]) == len(ids), i
    assert all(not isinstance(r, list) for r in out["rewards"])
    assert sum(map(sum, out["loss_masks"])) > 0


def test_text_env_through_skyrl_gym_registry(ray_session, tasks, docker_client):
    import skyrl_gym

    import swerl.integrations.skyrl  # noqa: F401  (registers swerl-swe)

    task = tasks[0]
    cfg = {"run_id": "t-skyrl-env", "env_kwargs": {"max_steps": 10}}
    env = skyrl_gym.make("swerl-swe", env_config=cfg, extras={"instance_id": task.instance_id})
    try:
        prompt, meta = env.init([SYSTEM, {"role": "user", "content": task.instance_id}])
        assert prompt[0] == SYSTEM and prompt[1]["role"] == "user"
        assert task.problem_statement.strip()[:60] in prompt[1]["content"]
        assert meta == {"instance_id": task.instance_id}
        for action in patch_to_actions(task.patch):
            out = env.step(action)
            assert not out["done"] and out["reward"] == 0.0 and out["observations"][0]["role"] == "user"
        out = env.step(actions.submit())
        assert out["done"] and out["reward"] == 1.0 and out["metadata"]["status"] == "resolved"
        assert out["observations"] == [] and env.get_metrics()["resolved"] == 1.0
    finally:
        env.close()
    env.close()  # idempotent
    assert swerl_containers_with_prefix(docker_client, "t-skyrl-env") == []


def test_unknown_task_is_a_clear_error(ray_session):
    import skyrl_gym

    import swerl.integrations.skyrl  # noqa: F401
    from swerl.errors import ConfigError

    with pytest.raises(ConfigError, match="not in the configured swerl tasks"):
        skyrl_gym.make("swerl-swe", env_config={}, extras={"instance_id": "nope"})
    with pytest.raises(ConfigError, match="instance_id"):
        skyrl_gym.make("swerl-swe", env_config={}, extras={})


def test_generator_runs_batches_through_the_runner(ray_session, tasks, tiny_model_dir, tok, docker_client):
    from swerl.integrations.skyrl import SwerlGenerator, dataset_rows

    engine = TinyEngine(tiny_model_dir, tok)
    runner_kwargs = {
        "num_actors": 2,
        "envs_per_actor": 2,
        "run_id": "t-skyrl-gen",
        "env_kwargs": {"max_steps": 8},
    }
    gen = SwerlGenerator(engine, tok, tasks[:2], action_format="menu", runner_kwargs=runner_kwargs)
    rows = dataset_rows(tasks[:2])
    a, b = (r["instance_id"] for r in rows)
    by_id = {r["instance_id"]: r for r in rows}
    by_task = {t.instance_id: t for t in tasks}

    def batch_of(order, step=None):
        return {
            "prompts": [by_id[t]["prompt"] for t, _ in order],
            "env_classes": ["swerl-swe"] * len(order),
            "env_extras": [{"instance_id": t} for t, _ in order],
            "sampling_params": None,
            "trajectory_ids": [TrajectoryID(t, k) for t, k in order],
            "batch_metadata": step,
        }

    try:
        order = [(a, 0), (b, 0), (b, 1), (a, 1)]  # interleaved, as SkyRL may hand it over
        batch = batch_of(order)
        out = asyncio.run(gen.generate(batch))
        check_like_skyrl(out, 4)
        eps = gen.last_episodes
        assert [(e.task_id, e.attempt) for e in eps] == order  # input order, whatever finished first
        assert out["rewards"] == [e.reward for e in eps]
        assert {e.status for e in eps} <= {"resolved", "unresolved", "empty_patch", "patch_failed"}
        assert all((e.status == "resolved") == (e.reward == 1.0) for e in eps)
        assert out["trajectory_ids"] == batch["trajectory_ids"]
        for e, prompt, resp, mask, lps in zip(
            eps,
            out["prompt_token_ids"],
            out["response_ids"],
            out["loss_masks"],
            out["rollout_logprobs"],
            strict=True,
        ):
            t = e.to_tokens()
            assert t.exact and prompt == t.prompt_ids and resp == t.response_ids and mask == t.loss_mask
            assert sum(mask) == sum(len(s.policy["completion_ids"]) for s in e.steps)
            # every turn's prompt, as laid out for training, is what the engine was asked
            assert all(t.turn_prompt(k) in engine.prompts for k in range(len(t.turns)))
            assert all((lp < 0) if m else (lp == 0.0) for lp, m in zip(lps, mask, strict=True))
            assert by_task[e.task_id].problem_statement.strip()[:60] in tok.decode(prompt)
            observed = tok.decode([i for i, m in zip(resp, mask, strict=True) if not m])
            assert all(s.observation[:20] in observed for s in e.steps[:-1])
        assert out["stop_reasons"] and set(out["stop_reasons"]) <= {"stop", "length"}
        assert 0.0 <= out["rollout_metrics"]["swerl/resolved"] <= 1.0

        # the next training step: the same runner, new attempts, the step as the policy version
        actors = set(gen.runner._actors)
        out = asyncio.run(gen.generate(batch_of([(b, 0), (a, 0)], step=BatchMetadata(1, "train"))))
        check_like_skyrl(out, 2)
        assert [(e.task_id, e.attempt) for e in gen.last_episodes] == [(b, 2), (a, 2)]
        assert {s.policy["policy_version"] for e in gen.last_episodes for s in e.steps} == {1}
        assert set(gen.runner._actors) == actors
    finally:
        gen.close()
    assert swerl_containers_with_prefix(docker_client, "t-skyrl-gen") == []


def test_generator_rejects_rows_without_a_known_task(tok, tasks):
    from swerl.errors import ConfigError
    from swerl.integrations.skyrl import SwerlGenerator

    gen = SwerlGenerator(None, tok, tasks[:2])
    with pytest.raises(ConfigError, match="not in the configured swerl tasks"):
        asyncio.run(gen.generate({"prompts": [[]], "env_extras": [{"instance_id": "nope"}]}))
    with pytest.raises(ConfigError, match="instance_id column"):
        asyncio.run(gen.generate({"prompts": [[]], "env_extras": [{}]}))


@pytest.fixture
def missing_image_task(tmp_path):
    """A task file whose one task names an image that does not exist: every reset is an infra error."""
    import json

    from swerl.tasks.instance import SUITES_DIR

    row = json.loads((SUITES_DIR / "swerl-mini" / "tasks.jsonl").read_text().splitlines()[0])
    row["image"] = "swerl-test-no-such-image:none"
    path = tmp_path / "tasks.jsonl"
    path.write_text(json.dumps(row) + "\n")
    return str(path), row["instance_id"]


def test_infra_errors_raise_and_are_never_a_reward(ray_session, missing_image_task, tok, docker_client):
    import skyrl_gym

    from swerl.errors import InfraError
    from swerl.integrations.skyrl import SwerlGenerator

    path, task_id = missing_image_task
    env = skyrl_gym.make(
        "swerl-swe", env_config={"tasks": path, "run_id": "t-skyrl-bad"}, extras={"instance_id": task_id}
    )
    try:
        with pytest.raises(InfraError, match="no reward"):
            env.init([{"role": "user", "content": "go"}])
    finally:
        env.close()
    runner_kwargs = {"num_actors": 1, "max_retries": 1, "retry_delay": 0.1, "run_id": "t-skyrl-bad"}
    gen = SwerlGenerator(None, tok, path, runner_kwargs=runner_kwargs)
    try:
        with pytest.raises(InfraError, match=r"no reward \(infra_error, after 0 retries\): ImageMissing"):
            asyncio.run(gen.generate({"prompts": [[]], "env_extras": [{"instance_id": task_id}]}))
    finally:
        gen.close()
    assert swerl_containers_with_prefix(docker_client, "t-skyrl-bad") == []
