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
import os
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
        self.sessions: list[tuple[str | None, list[int]]] = []

    async def generate(self, input_batch, model=None):
        prompts = [list(p) for p in input_batch["prompt_token_ids"]]
        self.prompts.extend(prompts)
        self.sessions.extend(zip(input_batch["session_ids"] or [None] * len(prompts), prompts, strict=True))
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
class GeneratorCfg:
    """The fields of SkyRL's GeneratorConfig that SwerlGenerator reads (same names, SkyRL's defaults
    but max_turns; test_skyrl_config_path checks the names against SkyRL's own class)."""

    max_turns: int = 8
    max_input_length: int | None = None
    zero_reward_on_non_stop: bool = False
    apply_overlong_filtering: bool = False


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

    import swerl.integrations.skyrl  # noqa: F401  (registers swerl_swe)
    from swerl.env.actions import FORMAT_HELP

    task = tasks[0]
    cfg = {"run_id": "t-skyrl-env", "env_kwargs": {"max_steps": 10}}
    env = skyrl_gym.make("swerl_swe", env_config=cfg, extras={"instance_id": task.instance_id})
    try:
        prompt, meta = env.init([SYSTEM, {"role": "user", "content": task.instance_id}])
        # the row's system message, with the action format the env parses
        assert prompt[0] == {"role": "system", "content": f"{SYSTEM['content']}\n{FORMAT_HELP}"}
        assert prompt[1]["role"] == "user"
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


def test_text_env_honours_max_turns_and_gives_swerls_prompt(ray_session, tasks, docker_client):
    """SkyRL's generator puts its ``max_turns`` in every row's extras; a row with no system
    message gets swerl's system prompt, which carries the action format."""
    import skyrl_gym

    import swerl.integrations.skyrl  # noqa: F401
    from swerl.policies.llm import SYSTEM_PROMPT

    task = tasks[0]
    extras = {"instance_id": task.instance_id, "max_turns": 2}
    env = skyrl_gym.make("swerl_swe", env_config={"run_id": "t-skyrl-turns"}, extras=extras)
    try:
        prompt, _ = env.init([{"role": "user", "content": task.instance_id}])
        assert prompt[0] == {"role": "system", "content": SYSTEM_PROMPT}
        assert not env.step(actions.bash("ls"))["done"]
        out = env.step(actions.bash("ls"))
        assert out["done"] and out["metadata"]["reason"] == "max_steps"
        assert out["reward"] == 0.0 and out["metadata"]["status"] == "empty_patch"  # graded as it stands
        assert env.get_metrics()["steps"] == 2
    finally:
        env.close()
    assert swerl_containers_with_prefix(docker_client, "t-skyrl-turns") == []


def test_text_env_replaces_a_dead_sandbox_mid_episode(ray_session, tasks, docker_client):
    """The sandbox is removed mid-episode: the next step replays the actions so far in a
    fresh one and the episode goes on to its real grade."""
    import skyrl_gym

    import swerl.integrations.skyrl  # noqa: F401

    task = next(t for t in tasks if len(patch_to_actions(t.patch)) >= 1)
    env = skyrl_gym.make(
        "swerl_swe", env_config={"run_id": "t-skyrl-dead"}, extras={"instance_id": task.instance_id}
    )
    try:
        env.init([{"role": "user", "content": task.instance_id}])
        first, *rest = patch_to_actions(task.patch)
        assert not env.step(first)["done"]
        for c in swerl_containers_with_prefix(docker_client, "t-skyrl-dead"):
            docker_client.api.remove_container(c["Id"], force=True)
        for action in rest:
            assert not env.step(action)["done"]
        out = env.step(actions.submit())
        assert out["done"] and out["reward"] == 1.0 and out["metadata"]["status"] == "resolved"
        assert env.get_metrics()["retries"] == 1
    finally:
        env.close()
    assert swerl_containers_with_prefix(docker_client, "t-skyrl-dead") == []


def test_unknown_task_is_a_clear_error(ray_session):
    import skyrl_gym

    import swerl.integrations.skyrl  # noqa: F401
    from swerl.errors import ConfigError

    with pytest.raises(ConfigError, match="not in the configured swerl tasks"):
        skyrl_gym.make("swerl_swe", env_config={}, extras={"instance_id": "nope"})
    with pytest.raises(ConfigError, match="instance_id"):
        skyrl_gym.make("swerl_swe", env_config={}, extras={})


def test_generator_runs_batches_through_the_runner(ray_session, tasks, tiny_model_dir, tok, docker_client):
    from swerl.integrations.skyrl import SwerlGenerator, dataset_rows

    engine = TinyEngine(tiny_model_dir, tok)
    runner_kwargs = {
        "num_actors": 2,
        "envs_per_actor": 2,
        "run_id": "t-skyrl-gen",
        "env_kwargs": {"max_steps": 8},
    }
    gen = SwerlGenerator(
        engine,
        tok,
        tasks[:2],
        action_format="menu",
        runner_kwargs=runner_kwargs,
        generator_cfg=GeneratorCfg(),
    )
    rows = dataset_rows(tasks[:2])
    a, b = (r["instance_id"] for r in rows)
    by_id = {r["instance_id"]: r for r in rows}
    by_task = {t.instance_id: t for t in tasks}

    def batch_of(order, step=None):
        return {
            "prompts": [by_id[t]["prompt"] for t, _ in order],
            "env_classes": ["swerl_swe"] * len(order),
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
            # one session id per trajectory, on each of its turns
            sid = f"{e.task_id}_{e.attempt}"
            assert all((sid, t.turn_prompt(k)) in engine.sessions for k in range(len(t.turns)))
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


def test_generator_stops_at_max_input_length_and_filters_as_skyrl(
    ray_session, tasks, tiny_model_dir, tok, docker_client, caplog
):
    """A turn whose prompt would reach ``max_input_length`` is not sampled: the episode ends
    there (stop reason ``length``); SkyRL's overlong filtering and zero-reward options apply."""
    from swerl.chat_tokens import ChatTokens
    from swerl.integrations.skyrl import SwerlGenerator

    task = tasks[0]
    first = len(ChatTokens(tok, [{"role": "system", "content": "Fix it."},
                                 {"role": "user", "content": task.problem_statement}]).ids)  # fmt: skip
    cfg = GeneratorCfg(
        max_input_length=first + 8, apply_overlong_filtering=True, zero_reward_on_non_stop=True
    )
    engine = TinyEngine(tiny_model_dir, tok)
    gen = SwerlGenerator(engine, tok, [task], system_prompt="Fix it.", generator_cfg=cfg,
                         runner_kwargs={"num_actors": 1, "envs_per_actor": 2, "run_id": "t-skyrl-len"})  # fmt: skip
    try:
        batch = {"prompts": [[], []], "env_extras": [{"instance_id": task.instance_id}] * 2}
        out = asyncio.run(gen.generate(batch))
    finally:
        gen.close()
    check_like_skyrl_lenient = {k: out[k] for k in ("stop_reasons", "rewards")}
    assert check_like_skyrl_lenient == {"stop_reasons": ["length", "length"], "rewards": [0.0, 0.0]}
    assert [e.reason for e in gen.last_episodes] == ["max_input_length"] * 2
    assert [len(e.steps) for e in gen.last_episodes] == [1, 1]  # the observation did not fit
    assert all(len(p) < first + 8 for p in engine.prompts)
    assert out["loss_masks"] == [[0] * len(r) for r in out["response_ids"]]  # overlong filtering
    # the tiny model's own text is never an action: the batch says so, in a metric and a warning
    assert out["rollout_metrics"]["swerl/no_valid_action"] == 1.0
    assert "none of the 2 episode(s) of this batch had a valid action" in caplog.text
    assert swerl_containers_with_prefix(docker_client, "t-skyrl-len") == []


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


def test_infra_errors_are_marked_per_trajectory_never_a_batch_abort(
    ray_session, tasks, missing_image_task, tok, tiny_model_dir, docker_client
):
    """A task whose image is missing fails every sandbox: the env marks its trajectory (reward
    0.0, ``infra_error`` in metadata and metrics) after its retries; the generator keeps it out
    of the loss with its group's reward, beside a healthy row of the same batch."""
    import skyrl_gym

    from swerl.integrations.skyrl import SwerlGenerator

    path, task_id = missing_image_task
    cfg = {"tasks": path, "run_id": "t-skyrl-bad", "max_retries": 1}
    env = skyrl_gym.make("swerl_swe", env_config=cfg, extras={"instance_id": task_id})
    try:
        prompt, _ = env.init([{"role": "user", "content": "go"}])
        assert "no sandbox could be had" in prompt[1]["content"]
        out = env.step(actions.submit())
        assert out["done"] and out["reward"] == 0.0 and "ImageMissing" in out["metadata"]["infra_error"]
        assert env.get_metrics()["infra_error"] == 1.0 and env.get_metrics()["retries"] == 2
    finally:
        env.close()

    good = next(t for t in tasks if t.instance_id != task_id)
    runner_kwargs = {"num_actors": 1, "envs_per_actor": 2, "max_retries": 1, "retry_delay": 0.1,
                     "run_id": "t-skyrl-bad"}  # fmt: skip
    from swerl.tasks.sources import load_tasks

    gen = SwerlGenerator(TinyEngine(tiny_model_dir, tok), tok, [*load_tasks(path), good],
                         action_format="menu", runner_kwargs=runner_kwargs)  # fmt: skip
    try:
        extras = [{"instance_id": task_id}, {"instance_id": good.instance_id}]
        out = asyncio.run(gen.generate({"prompts": [[], []], "env_extras": extras}))
    finally:
        gen.close()
    check_like_skyrl(out, 2)
    bad, ok = gen.last_episodes
    assert bad.status == "infra_error" and bad.reward is None and ok.reward is not None
    assert out["loss_masks"][0] == [0] * len(out["response_ids"][0]) and sum(out["loss_masks"][1]) > 0
    assert out["rewards"] == [0.0, ok.reward]  # no other row of its task: 0.0, trained on by nothing
    assert out["rollout_metrics"]["swerl/infra_errors"] == 1
    assert swerl_containers_with_prefix(docker_client, "t-skyrl-bad") == []


SKYRL_PYTHON = os.environ.get("SWERL_SKYRL_PYTHON") or os.path.expanduser(
    "~/.cache/swerl/skyrl-venv/bin/python"
)

CONFIG_PATH_SCRIPT = r"""
import dataclasses, json, sys
import skyrl_gym
from skyrl.train.config.config import GeneratorConfig
from swerl.integrations.skyrl import ENV_ID, SwerlGenerator, skyrl_config_class

from omegaconf import OmegaConf

# The whole SkyRLTrainConfig cannot be built on Python 3.11 (its __post_init__ imports
# skyrl.backends, which pydantic refuses before 3.12), so each section of it is built as
# from_cli_overrides builds it: SkyRL's from_dict_config on that section of the overrides.
fields = {f.name: f.type for f in dataclasses.fields(skyrl_config_class())}
Env, Gen = fields["environment"], fields["generator"]
try:
    Env.from_dict_config(OmegaConf.from_cli(["skyrl_gym.swerl_swe.no_such_option=1"]))
    rejected = False
except Exception as e:
    rejected = type(e).__name__
overrides = OmegaConf.from_cli(sys.argv[2:])
class cfg:
    environment = Env.from_dict_config(overrides.environment)
    generator = Gen.from_dict_config(overrides.generator)
# what SkyRL's SkyRLGymGenerator.agent_loop does for each trajectory:
env_extras = {"instance_id": sys.argv[1]}
env_extras["max_turns"] = cfg.generator.max_turns
env_config = getattr(cfg.environment.skyrl_gym, ENV_ID, dict())
env = skyrl_gym.make(ENV_ID, env_config=env_config, extras=env_extras)
gen = SwerlGenerator(None, None, [env.task], generator_cfg=cfg.generator)
print(json.dumps({
    "rejected": rejected,
    "cfg": dataclasses.asdict(env.cfg),
    "max_steps": env.env_kwargs["max_steps"],
    "system": env.cfg.system_prompt,
    "generator": [gen.max_turns, gen.max_input_length, gen.zero_reward_on_non_stop,
                  gen.apply_overlong_filtering, gen.runner_kwargs["env_kwargs"]["max_steps"]],
    "fields": sorted(f.name for f in dataclasses.fields(GeneratorConfig)),
}))
"""


@pytest.mark.skipif(
    not os.path.exists(SKYRL_PYTHON),
    reason="needs skyrl 0.3.0 in its own venv (python3 -m swerl.bootstrap test makes it)",
)
def test_skyrl_config_path(tasks):
    """SkyRL's own config (skyrl 0.3.0, in a venv of its own: it pins another transformers)
    carries the env's options to the env as SkyRL's generator makes it, and rejects unknown ones."""
    import json
    import subprocess

    overrides = [
        "environment.skyrl_gym.swerl_swe.run_id=t-skyrl-cfg",
        "environment.skyrl_gym.swerl_swe.env_kwargs.max_steps=5",
        "environment.skyrl_gym.swerl_swe.system_prompt=Be brief.",
        "environment.skyrl_gym.swerl_swe.max_retries=4",
        "generator.max_turns=3",
        "generator.max_input_length=1000",
        "generator.apply_overlong_filtering=true",
    ]
    r = subprocess.run([SKYRL_PYTHON, "-c", CONFIG_PATH_SCRIPT, tasks[0].instance_id, *overrides],
                       capture_output=True, text=True, timeout=300)  # fmt: skip
    assert r.returncode == 0, r.stderr[-3000:]
    got = json.loads(r.stdout.strip().splitlines()[-1])
    assert got["rejected"] in ("ValueError", "KeyError", "TypeError"), got["rejected"]
    assert got["cfg"] == {"tasks": "swerl-mini", "backend": "docker", "env_kwargs": {"max_steps": 5},
                          "actor_cpus": 0.25, "run_id": "t-skyrl-cfg", "max_retries": 4,
                          "system_prompt": "Be brief."}  # fmt: skip
    assert got["max_steps"] == 3  # generator.max_turns reached the env through its extras
    assert got["generator"] == [3, 1000, False, True, 3]
    assert {"max_turns", "max_input_length", "zero_reward_on_non_stop", "apply_overlong_filtering"} <= set(
        got["fields"]
    )
