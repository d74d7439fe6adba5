"""A GRPO learning curve through the production path, and where each step's wall time goes.

A real vLLM server (``swerl.integrations.vllm.VLLMServer``, the venv bootstrap makes)
serves the tiny local model; ``LLMPolicy`` samples every action token-in/token-out from
it in ``RolloutRunner``'s actors (real Docker envs, every episode graded); the trainer
(``swerl.integrations.grpo.train_grpo``) takes GRPO steps on the recorded ids and
logprobs while the next groups run (``Prefetch``), and pushes its weights to the
server after every step. The action format is ``PatchMenu`` (the first sampled token
picks the gold fix, a wrong one or none), so the untrained model earns about a third.

Per seed: the mean reward per step, start (first 3 steps) and end (last 5), the
largest |trainer - server| logprob over on-policy tokens, and the step's wall time
split into waiting on the episodes, the update, and the push. ``--out`` writes the
per-step logs as JSON (notebook 05 plots them).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time

from swerl.bench._stats import table

TASKS = ("swerl__intervals-1", "swerl__tinyconf-2")


def run_seed(
    model_dir: str, url: str, tasks: list, seed: int, steps: int, lr: float, envs: int
) -> list[dict]:
    import torch
    from transformers import AutoModelForCausalLM

    from swerl.integrations.grpo import train_grpo
    from swerl.policies.formats import PatchMenu
    from swerl.policies.llm import LLMPolicy
    from swerl.rollout.runner import RolloutRunner

    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_pretrained(model_dir)
    policy = LLMPolicy(
        model_dir, base_url=url, max_tokens=1, temperature=1.0, mode="tokens",
        system_prompt="Fix the issue.", action_format=PatchMenu(), seed=seed,
    )  # fmt: skip
    runner = RolloutRunner(
        tasks, policy, num_actors=1, envs_per_actor=envs, attempts=4, group=True, max_staleness=1,
        run_id=f"bench-learn-{seed}-{os.getpid()}",
    )  # fmt: skip

    def show(h) -> None:
        print(
            f"seed {seed} step {h.step:2d}: reward {h.reward:.2f} ±{h.reward_std:.2f}  "
            f"sampled by v{h.sampled_by}  on-policy |dlogprob| {h.on_policy_dev:.1e} "
            f"({h.on_policy_tokens} tok)  wait {h.wait_s:.1f}s train {h.train_s:.2f}s push {h.push_s:.2f}s",
            flush=True,
        )

    with runner:
        logs = train_grpo(runner, model, steps=steps, groups_per_step=envs // 4, lr=lr, on_step=show)
    return [h.to_dict() for h in logs]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m swerl.bench learn", description=__doc__)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--lr", type=float, default=3e-2)
    parser.add_argument("--envs", type=int, default=8, help="episodes per step (groups of 4), all in flight")
    parser.add_argument("--out", help="write {seed: [per-step log, ...]} as JSON")
    args = parser.parse_args(argv)
    if args.envs % 4:
        parser.error("--envs must be a multiple of 4 (GRPO groups of 4)")
    import ray
    import torch

    from swerl.integrations.tiny_model import tiny_model
    from swerl.integrations.vllm import VLLMServer
    from swerl.rollout.runner import ensure_ray
    from swerl.tasks.images import build_task_images
    from swerl.tasks.sources import load_tasks

    torch.set_num_threads(1)  # a tiny model: one thread is fastest
    tasks = [t for t in load_tasks("swerl-mini") if t.instance_id in TASKS]
    build_task_images(tasks)
    model_dir = str(tiny_model())
    runs: dict[int, list[dict]] = {}
    load0 = os.getloadavg()[0]
    with VLLMServer(model_dir, extra_args=["--enforce-eager"]) as server:
        ensure_ray()
        for seed in args.seeds:
            t = time.perf_counter()
            runs[seed] = run_seed(model_dir, server.url, tasks, seed, args.steps, args.lr, args.envs)
            print(f"seed {seed}: {args.steps} steps in {time.perf_counter() - t:.0f} s", flush=True)
    ray.shutdown()
    if args.out:
        with open(args.out, "w") as f:
            json.dump({str(k): v for k, v in runs.items()}, f, indent=1)
    rows = []
    for seed, logs in runs.items():
        r = [h["reward"] for h in logs]
        first = next((h["step"] for h in logs if h["reward"] >= 0.9), None)
        rows.append([
            seed, statistics.mean(r[:3]), statistics.mean(r[-5:]), first,
            f"{max(h['on_policy_dev'] for h in logs):.1e}", sum(h["on_policy_tokens"] for h in logs),
            statistics.median(h["wall_s"] for h in logs[1:]), statistics.median(h["wait_s"] for h in logs[1:]),
            statistics.median(h["train_s"] for h in logs[1:]), statistics.median(h["push_s"] for h in logs[1:]),
        ])  # fmt: skip
    print(f"{args.envs} episodes per step, lr {args.lr}; {os.cpu_count()} CPUs, load {load0:.1f} -> "
          f"{os.getloadavg()[0]:.1f}; median seconds per step (the first, actors starting, left out)")  # fmt: skip
    header = ["seed", "reward first 3", "reward last 5", "first step >= 0.9", "on-policy max |dlogp|",
              "on-policy tokens", "wall s", "wait s", "train s", "push s"]  # fmt: skip
    print(table(header, rows))
    return 0
