"""The verl agent loop inside verl's own ``AgentLoopWorker``, on real Ray and real Docker.

verl's rollout servers (vLLM, SGLang) cannot generate on CPU, so a stand-in for
its ``LLMServerClient`` answers ``generate(prompt_ids=...)`` from the tiny local
model, with logprobs. Everything else is verl's: its default PPO trainer config,
the worker that loads the agent-loop YAML and instantiates the loop with hydra,
and the padding into the batch a trainer consumes.
"""

from __future__ import annotations

import asyncio
import os

import numpy as np
import pytest

pytest.importorskip("transformers")
pytest.importorskip("verl")

from test_rollout import swerl_containers_with_prefix

from swerl.integrations.hf import HFGenerator


class TinyServerManager:
    """Stand-in for verl's ``LLMServerClient``: ``generate`` samples the tiny model.

    Same contract: prompt token ids in, a ``TokenOutput`` (response ids ending with
    the end-of-turn token when the model stopped, their logprobs) out. It keeps
    every prompt it was sent, by request id.
    """

    def __init__(self, tiny_model_dir, tok) -> None:
        from transformers import AutoModelForCausalLM

        self.sampler = HFGenerator(
            AutoModelForCausalLM.from_pretrained(tiny_model_dir), tok, max_new_tokens=6
        )
        self.prompts: dict[str, list[list[int]]] = {}

    async def generate(self, request_id, *, prompt_ids, sampling_params, **kwargs):
        from verl.workers.rollout.replica import TokenOutput

        self.prompts.setdefault(request_id, []).append(list(prompt_ids))
        (g,) = await asyncio.to_thread(self.sampler.generate, [list(prompt_ids)])
        return TokenOutput(token_ids=g.ids, log_probs=g.logprobs, stop_reason="completed")


def verl_config(tiny_model_dir, loops_yaml):
    """verl's own default PPO trainer config, pointed at the tiny model and swerl's agent loop."""
    import verl
    from omegaconf import OmegaConf

    cfg = OmegaConf.load(
        os.path.join(os.path.dirname(verl.__file__), "trainer/config/_generated_ppo_trainer.yaml")
    )
    cfg.actor_rollout_ref.rollout.name = "vllm"
    cfg.actor_rollout_ref.model.path = str(tiny_model_dir)
    cfg.data.max_prompt_length = 2048
    cfg.data.max_response_length = 4096
    cfg.actor_rollout_ref.rollout.agent.agent_loop_config_path = str(loops_yaml)
    return cfg


def runs_of_ones(mask: list[int]) -> list[int]:
    return [i for i, m in enumerate(mask) if m and (i == 0 or not mask[i - 1])]


def test_agent_loop_in_verls_worker(ray_session, tasks, tiny_model_dir, tmp_path, docker_client):
    from omegaconf import OmegaConf
    from transformers import AutoTokenizer
    from verl.experimental.agent_loop.agent_loop import AgentLoopWorker
    from verl.protocol import DataProto

    from swerl.integrations.verl import AGENT_LOOP_CONFIG, AGENT_NAME, dataset_rows

    loops = OmegaConf.load(AGENT_LOOP_CONFIG)  # the shipped file, with test-sized options
    assert [entry.name for entry in loops] == [AGENT_NAME]
    loops[0].action_format, loops[0].run_id, loops[0].env_kwargs.max_steps = "menu", "t-verl", 8
    OmegaConf.save(loops, tmp_path / "loops.yaml")
    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    server = TinyServerManager(tiny_model_dir, tok)
    worker = AgentLoopWorker(verl_config(tiny_model_dir, tmp_path / "loops.yaml"), server)

    rows = dataset_rows(tasks[:2])
    batch = DataProto.from_dict(
        non_tensors={
            "raw_prompt": np.array([r["prompt"] for r in rows], dtype=object),
            "agent_name": np.array([r["agent_name"] for r in rows], dtype=object),
            "extra_info": np.array([r["extra_info"] for r in rows], dtype=object),
            "index": np.arange(len(rows)),
        }
    )
    out = asyncio.run(worker.generate_sequences(batch))

    by_id = {t.instance_id: t for t in tasks}
    assert out.batch["prompts"].shape == (2, 2048) and out.batch["responses"].shape == (2, 4096)
    statuses = out.non_tensor_batch["swerl_status"]
    assert set(statuses) <= {"resolved", "unresolved", "empty_patch", "patch_failed"}
    assert all(out.non_tensor_batch["swerl_exact"])
    assert len(server.prompts) == 2  # one request id per trajectory
    seen = [p for ps in server.prompts.values() for p in ps]
    for i, row in enumerate(rows):
        attn = out.batch["attention_mask"][i].tolist()
        prompt = [t for t, a in zip(out.batch["prompts"][i].tolist(), attn[:2048], strict=True) if a]
        n_resp = sum(attn[2048:])
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
    assert out.non_tensor_batch["__num_turns__"].min() >= 2
    assert swerl_containers_with_prefix(docker_client, "t-verl") == []


def test_row_without_a_task_is_a_clear_error(tiny_model_dir, tmp_path):
    from omegaconf import OmegaConf
    from transformers import AutoTokenizer
    from verl.experimental.agent_loop.agent_loop import AgentLoopWorker
    from verl.protocol import DataProto

    from swerl.errors import ConfigError
    from swerl.integrations.verl import AGENT_LOOP_CONFIG

    OmegaConf.save(OmegaConf.load(AGENT_LOOP_CONFIG), tmp_path / "loops.yaml")
    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    worker = AgentLoopWorker(
        verl_config(tiny_model_dir, tmp_path / "loops.yaml"), TinyServerManager(tiny_model_dir, tok)
    )
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
    from omegaconf import OmegaConf
    from transformers import AutoTokenizer
    from verl.experimental.agent_loop.agent_loop import AgentLoopWorker
    from verl.protocol import DataProto

    from swerl.errors import ConfigError
    from swerl.integrations.verl import AGENT_LOOP_CONFIG, dataset_rows

    loops = OmegaConf.load(AGENT_LOOP_CONFIG)
    loops[0].run_id = "t-verl-long"
    OmegaConf.save(loops, tmp_path / "loops.yaml")
    cfg = verl_config(tiny_model_dir, tmp_path / "loops.yaml")
    cfg.data.max_prompt_length = 32
    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    server = TinyServerManager(tiny_model_dir, tok)
    (row,) = dataset_rows(tasks[:1])
    batch = DataProto.from_dict(
        non_tensors={k: np.array([row[k]], dtype=object) for k in ("agent_name", "extra_info")}
        | {"raw_prompt": np.array([row["prompt"]], dtype=object)}
    )
    with pytest.raises(ConfigError, match=r"more than rollout\.prompt_length=32"):
        asyncio.run(AgentLoopWorker(cfg, server).generate_sequences(batch))
    assert server.prompts == {}  # refused before sampling
    assert swerl_containers_with_prefix(docker_client, "t-verl-long") == []
