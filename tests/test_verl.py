"""The verl agent loop as verl runs it, on real Ray and real Docker.

verl's rollout servers (vLLM, SGLang) cannot generate on CPU, so a test double for
its ``LLMServerClient`` (``verl_server_double``) answers ``generate(prompt_ids=...)``
from the tiny local model, with logprobs. Everything else is verl's: its default PPO
trainer config, its ``AgentLoopManager`` building ``AgentLoopWorker`` Ray actors that
load the agent-loop YAML and instantiate the loop with hydra, and the padding into the
batch a trainer consumes.
"""

from __future__ import annotations

import asyncio
import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("transformers")
pytest.importorskip("verl")

from test_rollout import swerl_containers_with_prefix
from verl_server_double import TinyServer, TinyServerClient

EPISODE_STATUSES = {"resolved", "unresolved", "empty_patch", "patch_failed"}


def verl_config(tiny_model_dir, loops_yaml, prompt_length=2048, response_length=4096):
    """verl's own default PPO trainer config, pointed at the tiny model and swerl's agent loop."""
    import verl
    from omegaconf import OmegaConf

    cfg = OmegaConf.load(
        os.path.join(os.path.dirname(verl.__file__), "trainer/config/_generated_ppo_trainer.yaml")
    )
    cfg.actor_rollout_ref.rollout.name = "vllm"
    cfg.actor_rollout_ref.model.path = str(tiny_model_dir)
    cfg.data.max_prompt_length = prompt_length
    cfg.data.max_response_length = response_length
    cfg.actor_rollout_ref.rollout.agent.agent_loop_config_path = str(loops_yaml)
    cfg.actor_rollout_ref.rollout.agent.num_workers = 1
    return cfg


def loops_yaml(tmp_path, **options):
    """The shipped agent-loop YAML with some options changed, saved under tmp_path."""
    from omegaconf import OmegaConf

    path = Path(__file__).resolve().parents[1] / "swerl" / "integrations" / "verl_agent_loop.yaml"
    loops = OmegaConf.load(path)
    assert [entry.name for entry in loops] == ["swerl_swe"]
    for key, value in options.items():
        OmegaConf.update(loops[0], key, value)
    OmegaConf.save(loops, tmp_path / "loops.yaml")
    return tmp_path / "loops.yaml"


def batch_of(rows):
    from verl.protocol import DataProto

    return DataProto.from_dict(
        non_tensors={
            "raw_prompt": np.array([r["prompt"] for r in rows], dtype=object),
            "agent_name": np.array([r["agent_name"] for r in rows], dtype=object),
            "extra_info": np.array([r["extra_info"] for r in rows], dtype=object),
            "index": np.arange(len(rows)),
        }
    )


def rows_of(tasks):
    """What ``dataset_rows`` writes, built without importing swerl.integrations.verl here."""
    return [
        {
            "data_source": "swerl",
            "prompt": [{"role": "user", "content": t.instance_id}],
            "agent_name": "swerl_swe",
            "extra_info": {"instance_id": t.instance_id},
        }
        for t in tasks
    ]


def runs_of_ones(mask: list[int]) -> list[int]:
    return [i for i, m in enumerate(mask) if m and (i == 0 or not mask[i - 1])]


def check_rows(out, rows, tasks, tok, seen, prompt_length):
    """Token layout, reward and logprobs of each output row, as a verl trainer reads them."""
    by_id = {t.instance_id: t for t in tasks}
    statuses = out.non_tensor_batch["swerl_status"]
    for i, row in enumerate(rows):
        attn = out.batch["attention_mask"][i].tolist()
        prompt = [t for t, a in zip(out.batch["prompts"][i].tolist(), attn[:prompt_length], strict=True) if a]
        n_resp = sum(attn[prompt_length:])
        resp = out.batch["responses"][i].tolist()[:n_resp]
        mask = out.batch["response_mask"][i].tolist()[:n_resp]
        assert by_id[row["extra_info"]["instance_id"]].problem_statement.strip()[:60] in tok.decode(prompt)
        # the reward is swerl's grade, on the last response token
        scores = out.batch["rm_scores"][i]
        reward = float(scores.sum())
        assert reward == (1.0 if statuses[i] == "resolved" else 0.0) and float(scores[n_resp - 1]) == reward
        # each sampled run's prefix is exactly a prompt the server was sent
        starts = runs_of_ones(mask)
        assert starts and all(prompt + resp[:s] in seen for s in starts)
        lps = out.batch["rollout_log_probs"][i].tolist()[:n_resp]
        assert all((lp < 0) if m else (lp == 0.0) for lp, m in zip(lps, mask, strict=True))


def test_yaml_options_reach_every_episode_of_verls_worker(
    ray_session, tasks, tiny_model_dir, tmp_path, docker_client
):
    """verl's manager builds its worker in a fresh Ray process that has not imported swerl's
    module; two training steps of two episodes each all run with the YAML's options."""
    import ray
    from transformers import AutoTokenizer
    from verl.experimental.agent_loop.agent_loop import AgentLoopManager

    path = loops_yaml(tmp_path, action_format="menu", run_id="t-verl", **{"env_kwargs.max_steps": 8})
    server = ray.remote(TinyServer).remote(str(tiny_model_dir))
    manager = AgentLoopManager.create(verl_config(tiny_model_dir, path), TinyServerClient(server))
    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    outs = []
    for step_tasks in (tasks[:2], tasks[1:3]):  # two training steps, one worker
        rows = rows_of(step_tasks)
        out = manager.generate_sequences(batch_of(rows))
        outs.append(out)
        assert out.batch["prompts"].shape == (2, 2048) and out.batch["responses"].shape == (2, 4096)
        seen = ray.get(server.seen.remote())
        check_rows(out, rows, tasks, tok, [p for ps in seen["prompts"].values() for p in ps], 2048)

    seen = ray.get(server.seen.remote())
    (note,) = seen["notes"]  # one worker, built once, in a process of its own
    assert note["pid"] != os.getpid() and note["imported_before_worker"] is False
    assert len(seen["prompts"]) == 4  # one request id per trajectory
    nt = {k: np.concatenate([o.non_tensor_batch[k] for o in outs]) for k in ("swerl_actor", "swerl_reason")}
    nt |= {k: np.concatenate([o.non_tensor_batch[k] for o in outs]) for k in ("swerl_status", "swerl_exact")}
    # every episode ran with the YAML's options: its run id, and the menu format (the tiny
    # model's own text never submits; a menu episode submits its candidate within 8 steps)
    assert all(a.startswith("t-verl-") for a in nt["swerl_actor"]), nt["swerl_actor"]
    assert list(nt["swerl_reason"]) == ["submitted"] * 4
    assert set(nt["swerl_status"]) <= EPISODE_STATUSES and all(nt["swerl_exact"])
    assert swerl_containers_with_prefix(docker_client, "t-verl-") == []


def test_episode_stops_at_verls_response_budget_on_its_own_threads(
    ray_session, tasks, tiny_model_dir, tmp_path, docker_client, caplog
):
    """A 4-token response budget: the first completion is capped to it, the next turn is not
    sampled, and the episode is truncated there and graded as it stands. The loop's default
    executor has one thread, which the server client also needs: episodes must not hold it."""
    import ray
    from transformers import AutoTokenizer
    from verl.experimental.agent_loop.agent_loop import AgentLoopWorker

    # text format: the tiny model never submits, nor gives a valid action
    path = loops_yaml(tmp_path, run_id="t-verl-budget", warn_after_no_action=2)
    server = ray.remote(TinyServer).remote(str(tiny_model_dir))
    client = TinyServerClient(server, executor=True)
    worker = AgentLoopWorker(verl_config(tiny_model_dir, path, response_length=4), client)
    rows = rows_of(tasks[:2])

    async def run():
        asyncio.get_running_loop().set_default_executor(ThreadPoolExecutor(1))
        return await asyncio.wait_for(worker.generate_sequences(batch_of(rows)), timeout=300)

    out = asyncio.run(run())
    seen = ray.get(server.seen.remote())
    assert seen["caps"] == [4, 4]  # one sampled turn each, capped to the budget
    assert list(out.non_tensor_batch["swerl_reason"]) == ["response_budget"] * 2
    assert list(out.non_tensor_batch["swerl_steps"]) == [1, 1]
    assert list(out.non_tensor_batch["swerl_status"]) == ["empty_patch"] * 2  # graded, nothing changed
    assert list(out.non_tensor_batch["swerl_valid_action"]) == [False, False]
    assert "episodes in a row had no valid action" in caplog.text  # verl's batch is never seen whole
    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    check_rows(out, rows, tasks, tok, [p for ps in seen["prompts"].values() for p in ps], 2048)
    for i in range(2):
        n_resp = int(out.batch["attention_mask"][i, 2048:].sum())
        assert 1 <= n_resp <= 4 and out.batch["response_mask"][i, :n_resp].tolist() == [1] * n_resp
    assert swerl_containers_with_prefix(docker_client, "t-verl-budget") == []


def test_row_without_a_task_is_a_clear_error(tiny_model_dir, tmp_path):
    from verl.experimental.agent_loop.agent_loop import AgentLoopWorker
    from verl.protocol import DataProto

    from swerl.errors import ConfigError

    worker = AgentLoopWorker(verl_config(tiny_model_dir, loops_yaml(tmp_path)), TinyServerClient(None))
    batch = DataProto.from_dict(
        non_tensors={
            "raw_prompt": np.array([[{"role": "user", "content": "x"}]], dtype=object),
            "agent_name": np.array(["swerl_swe"], dtype=object),
            "extra_info": np.array([{"instance_id": "nope"}], dtype=object),
        }
    )
    with pytest.raises(ConfigError, match=r"extra_info\.instance_id"):
        asyncio.run(worker.generate_sequences(batch))


def test_a_prompt_longer_than_verls_prompt_length_is_an_error(
    ray_session, tasks, tiny_model_dir, tmp_path, docker_client
):
    import ray
    from verl.experimental.agent_loop.agent_loop import AgentLoopWorker

    from swerl.errors import ConfigError

    cfg = verl_config(tiny_model_dir, loops_yaml(tmp_path, run_id="t-verl-long"), prompt_length=32)
    server = ray.remote(TinyServer).remote(str(tiny_model_dir))
    with pytest.raises(ConfigError, match=r"more than rollout\.prompt_length=32"):
        asyncio.run(
            AgentLoopWorker(cfg, TinyServerClient(server)).generate_sequences(batch_of(rows_of(tasks[:1])))
        )
    assert ray.get(server.seen.remote())["prompts"] == {}  # refused before sampling
    assert swerl_containers_with_prefix(docker_client, "t-verl-long") == []


def test_dataset_rows():
    from swerl.integrations.verl import AGENT_LOOP_CONFIG, dataset_rows
    from swerl.tasks.sources import load_tasks

    assert dataset_rows("swerl-mini") == rows_of(load_tasks("swerl-mini"))
    assert AGENT_LOOP_CONFIG.is_file()
