"""TRL's GRPOTrainer trains the tiny local model on swerl episodes: real steps, real Docker, real Ray.

The action format is ``PatchMenu``: the first token the model samples picks the
gold patch, a plausible wrong one, or none (tasks with wrong patches, so three
choices), which later turns apply and submit. What the model samples decides
the reward, so rewards within a GRPO group differ and the loss has a signal.
"""

from __future__ import annotations

import pytest

pytest.importorskip("trl")
torch = pytest.importorskip("torch")

from swerl.episode import JsonlSink  # noqa: E402
from swerl.integrations.trl import SwerlRollout, swerl_reward  # noqa: E402
from swerl.policies.formats import PatchMenu  # noqa: E402
from swerl.sandbox.base import RUN_LABEL  # noqa: E402

TASKS = ("swerl__intervals-1", "swerl__tinyconf-2")


def test_grpo_trains_on_swerl_episodes(
    ray_session, tasks, tiny_model_dir, tmp_path, docker_client, monkeypatch
):
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer

    monkeypatch.setenv("TRL_EXPERIMENTAL_SILENCE", "1")
    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    before = [p.detach().clone() for p in model.parameters()]
    sink = tmp_path / "episodes.jsonl"
    rollout = SwerlRollout(
        [t for t in tasks if t.instance_id in TASKS],
        max_new_tokens=8,
        system_prompt="Fix the issue.",
        action_format=PatchMenu(),
        sink=str(sink),
        num_actors=1,
        envs_per_actor=4,
        run_id="t-trl",
    )
    args = GRPOConfig(
        output_dir=str(tmp_path / "out"),
        use_cpu=True,
        bf16=False,
        report_to="none",
        per_device_train_batch_size=4,
        num_generations=4,
        max_steps=2,
        logging_steps=1,
        learning_rate=1e-2,
        save_strategy="no",
        seed=0,
    )
    trainer = GRPOTrainer(
        model=model,
        reward_funcs=swerl_reward,
        train_dataset=rollout.dataset(),
        rollout_func=rollout,
        processing_class=tok,
        args=args,
    )
    try:
        trainer.train()
    finally:
        rollout.close()
    assert trainer.state.global_step == 2
    assert any((a != b.detach()).any() for a, b in zip(before, model.parameters(), strict=True))
    logs = [h for h in trainer.state.log_history if "loss" in h]
    assert len(logs) == 2 and all("reward" in h and "reward_std" in h for h in logs)
    assert any(h["reward_std"] > 0 for h in logs)  # rewards within a group differ
    episodes = list(JsonlSink.read(sink))
    assert len(episodes) == 8 and {(e.task_id, e.attempt) for e in episodes} == {
        (t, a) for t in TASKS for a in range(4)
    }
    assert {e.status for e in episodes} <= {"resolved", "unresolved", "empty_patch", "patch_failed"}
    assert sorted({e.policy_version for e in episodes}) == [0, 1]
    for ep in episodes:
        t = ep.to_tokens()
        assert t.exact and len(t.logprobs) == len(t.response_ids) == len(t.loss_mask)
    assert docker_client.api.containers(all=True, filters={"label": [f"{RUN_LABEL}=t-trl-a1"]}) == []


def _menu_run(tiny_model_dir, rollout, seed: int, steps: int, out_dir) -> list[dict]:
    """A GRPO run on the menu bandit; its per-step logs (reward, reward_std, loss)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer

    args = GRPOConfig(
        output_dir=str(out_dir),
        use_cpu=True,
        bf16=False,
        report_to="none",
        save_strategy="no",
        per_device_train_batch_size=8,
        num_generations=4,
        max_steps=steps,
        logging_steps=1,
        learning_rate=1e-2,
        lr_scheduler_type="constant",
        seed=seed,
        disable_tqdm=True,
    )
    trainer = GRPOTrainer(
        model=AutoModelForCausalLM.from_pretrained(tiny_model_dir),
        reward_funcs=swerl_reward,
        train_dataset=rollout.dataset(repeat=steps * 4),
        rollout_func=rollout,
        processing_class=AutoTokenizer.from_pretrained(tiny_model_dir),
        args=args,
    )
    trainer.train()
    return [
        {k: h[k] for k in ("reward", "reward_std", "loss")}
        for h in trainer.state.log_history
        if "reward" in h
    ]


@pytest.mark.slow
def test_grpo_learns_the_menu_for_three_seeds(ray_session, tasks, tiny_model_dir, tmp_path, monkeypatch):
    """GRPO on CPU: the untrained model picks the gold fix about a third of the time; within 30
    steps the mean reward reaches 0.9 for each of 3 seeds, and a seed reproduces its run."""
    from swerl.integrations.trl import GradedMenuRollout, grade_menu

    monkeypatch.setenv("TRL_EXPERIMENTAL_SILENCE", "1")
    menu_tasks = [t for t in tasks if t.instance_id in TASKS]
    rewards = grade_menu(menu_tasks, num_actors=1, envs_per_actor=3, run_id="t-trl-menu")
    # graded for real: only the gold candidate resolves (then the wrong ones, then no patch)
    assert {tid: r[0] for tid, r in rewards.items()} == dict.fromkeys(TASKS, 1.0)
    assert all(sum(r) == 1.0 and len(r) == 3 for r in rewards.values())
    rollout = GradedMenuRollout(menu_tasks, rewards)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # a tiny model: one thread is fastest, and reproducible
    try:
        runs = {
            seed: _menu_run(tiny_model_dir, rollout, seed, 30, tmp_path / f"s{seed}") for seed in (0, 1, 2)
        }
        again = _menu_run(tiny_model_dir, rollout, 0, 10, tmp_path / "again")
    finally:
        torch.set_num_threads(threads)
    for seed, logs in runs.items():
        start = sum(h["reward"] for h in logs[:3]) / 3
        end = sum(h["reward"] for h in logs[-5:]) / 5
        print(f"seed {seed}: reward {start:.2f} (first 3 steps) -> {end:.2f} (last 5)")
        assert len(logs) == 30 and start <= 0.6 and end >= 0.9, (seed, [h["reward"] for h in logs])
    assert again == runs[0][:10]  # same seed, same run (constant learning rate: a prefix)
    assert runs[1] != runs[0]
