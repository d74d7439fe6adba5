"""Where a training step's wall time goes, and how long the trainer waits on the environment.

The tiny local model (``swerl.integrations.tiny_model``) trains on the bundled
suite with the ``PatchMenu`` action format (its sampled first token picks the
gold, a wrong or no patch, so episodes edit, submit and are graded for real).
Two loops run side by side on the same envs (``--envs`` in flight):

- ``trl-sync``: TRL's GRPOTrainer with swerl's ``rollout_func``; each step waits
  for its whole batch of episodes (``--envs`` of them), then runs the optimizer.
- ``async``: RolloutRunner streams GRPO groups (a task's 4 attempts) with a bounded
  staleness (``--staleness``, default 1: an episode is trained on at most one policy
  version after the one that sampled it, else re-run; every step records the version
  that sampled its tokens), pulled by a background thread
  (``swerl.rollout.prefetch.Prefetch``, up to ``--staleness`` batches queued). The trainer
  takes each group's gradient as it arrives (a plain policy-gradient step with
  group-normalised advantages on the exact token layout) and steps the optimizer once per
  batch of ``--envs`` episodes, while the next episodes run, sampled by a copy of the model
  the trainer syncs after each step (``HFGenerator.load_weights``).

Per batch of ``--envs`` episodes, the wall time is split into generation (the
model sampling actions, in the driver), environment and grading (the trainer
blocked on the actors; the grading part is that wait times the episodes' share
of time spent grading), and optimizer (everything the trainer computes). In the
async loop generation runs beside the trainer, so its trainer-side generation is 0
and the environment column is the time the trainer blocked waiting for a group. The
first step (actors starting) is left out. ``--grade-pool 1`` gives every env a warm grading
sandbox, started at reset while the episode runs (``SWEEnv(grade_pool_size=...)``), and
``--pool N`` warm agent sandboxes (``pool_size``); each loop's line under the table says what an
episode's reset, grading start and grading cost on average. Last, the async envs run alone for two batches
with the trainer idle: that rate against the trainer's own time per batch is the least the
trainer must wait, however well the two overlap.
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import tempfile
import time
from collections import Counter
from typing import Any

from swerl.bench._stats import table
from swerl.episode import Episode, JsonlSink


def _grading_share(episodes: list[Episode]) -> float:
    grade = sum(e.timings.get("grade", 0.0) for e in episodes)
    total = sum(e.timings.get("total", 0.0) for e in episodes)
    return grade / total if total else 0.0


def _row(name: str, n_eps: int, envs: int, wall: float, gen: float, wait: float, share: float) -> list:
    per = envs / n_eps  # scale to one batch of `envs` episodes
    opt = wall - gen - wait
    return [
        name,
        n_eps,
        wall * per,
        gen * per,
        wait * (1 - share) * per,
        wait * share * per,
        opt * per,
        100 * wait / wall,
    ]


def _episode_costs(name: str, episodes: list[Episode]) -> str:
    """Mean seconds per episode: reset, the grading sandbox's start, grading, the whole episode."""
    n = max(1, len(episodes))
    mean = lambda f: sum(f(e) for e in episodes) / n  # noqa: E731
    start = mean(lambda e: float((e.grade or {}).get("timings", {}).get("start", 0.0)))
    statuses = Counter(e.status for e in episodes)
    return (f"{name}: per episode (mean of {len(episodes)}): reset {mean(lambda e: e.timings.get('reset', 0.0)):.2f} s, "
            f"grading sandbox start {start:.2f} s, grading {mean(lambda e: e.timings.get('grade', 0.0)):.2f} s, "
            f"whole episode {mean(lambda e: e.timings.get('total', 0.0)):.2f} s; {dict(statuses)}")  # fmt: skip


def run_trl(
    tasks, model_dir: str, envs: int, steps: int, tokens: int, sink: str, env_kwargs: dict | None = None
) -> list:
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from swerl.integrations.trl import SwerlRollout, swerl_reward
    from swerl.policies.formats import PatchMenu

    class Clock(TrainerCallback):
        def __init__(self) -> None:
            self.walls: list[float] = []

        def on_step_begin(self, *a: Any, **k: Any) -> None:
            self._t = time.perf_counter()

        def on_step_end(self, *a: Any, **k: Any) -> None:
            self.walls.append(time.perf_counter() - self._t)

    tok = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir)
    rollout = SwerlRollout(
        tasks,
        max_new_tokens=tokens,
        system_prompt="Fix the issue.",
        action_format=PatchMenu(),
        sink=sink,
        num_actors=max(1, envs // 8),
        envs_per_actor=min(8, envs),
        run_id=f"bench-train-trl-{os.getpid()}",
        env_kwargs=env_kwargs,
    )
    clock = Clock()
    args = GRPOConfig(
        output_dir=tempfile.mkdtemp(),
        use_cpu=True,
        bf16=False,
        report_to="none",
        save_strategy="no",
        per_device_train_batch_size=envs,
        num_generations=4,
        max_steps=steps,
        logging_steps=1,
        learning_rate=1e-2,
        seed=0,
        disable_tqdm=True,
    )
    trainer = GRPOTrainer(
        model=model,
        reward_funcs=swerl_reward,
        train_dataset=rollout.dataset(repeat=steps),
        rollout_func=rollout,
        processing_class=tok,
        args=args,
        callbacks=[clock],
    )
    try:
        trainer.train()
    finally:
        rollout.close()
    episodes = list(JsonlSink.read(sink))
    later = [e for e in episodes if (e.policy_version or 0) >= 1]
    wall = sum(clock.walls[1:])
    gen = sum(rollout.timings["generation"][1:])
    wait = sum(rollout.timings["rollout"][1:]) - gen
    print(_episode_costs("trl-sync", later))
    return _row("trl-sync", len(later), envs, wall, gen, wait, _grading_share(later))


def run_async(
    tasks,
    model_dir: str,
    envs: int,
    groups: int,
    tokens: int,
    staleness: int = 1,
    env_kwargs: dict | None = None,
) -> list:
    import copy

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from swerl.integrations.hf import HFGenerator
    from swerl.policies.formats import PatchMenu
    from swerl.policies.model import ModelPolicy
    from swerl.rollout.prefetch import Prefetch
    from swerl.rollout.runner import RolloutRunner

    tok = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    gen_seconds: list[float] = []

    class Timed(HFGenerator):
        def generate(self, prompts, max_new_tokens=None):
            t = time.perf_counter()
            try:
                return super().generate(prompts, max_new_tokens)
            finally:
                gen_seconds.append(time.perf_counter() - t)

    # the sampler is a copy the trainer syncs after each update, so it samples while the optimizer steps
    sampler = Timed(copy.deepcopy(model), tok, max_new_tokens=tokens)
    policy = ModelPolicy(sampler, "Fix the issue.", PatchMenu())
    per_step = envs // 4  # GRPO groups of 4 per optimizer step: one batch of `envs` episodes, as TRL's step
    alone = 2 * per_step  # then the env alone (trainer idle): what the envs can produce at all
    rounds = math.ceil((groups + per_step * (staleness + 1) + alone) / len(tasks))
    work = [(t.instance_id, 4 * r + a) for r in range(rounds) for t in tasks for a in range(4)]
    runner = RolloutRunner(
        tasks,
        policy,
        num_actors=max(1, envs // 8),
        envs_per_actor=min(8, envs),
        attempts=4,  # a group is a task's 4 attempts of one round
        group=True,
        max_staleness=staleness,
        run_id=f"bench-train-async-{os.getpid()}",
        env_kwargs=env_kwargs,
    )
    taken: list[Episode] = []
    opt_s = 0.0
    busy: list[int] = []  # episodes in flight whenever the trainer starts or ends a computation
    # up to `staleness` batches wait finished while the trainer steps: every one is consumed within the bound
    with runner, Prefetch(runner.stream(work), ahead=per_step * staleness) as stream:
        it = iter(stream)
        t0, g0, w0 = time.perf_counter(), 0, 0.0
        n_in_batch = 0
        for n, group in enumerate(it):
            t, before = time.perf_counter(), runner.in_flight
            # stream: each group's gradient as it arrives, the optimizer step once a batch is in
            _grpo_step(model, opt, [e for e in group if e.reward is not None], step=False)
            n_in_batch += 1
            if n_in_batch == per_step or n + 1 == groups:
                opt.step()
                opt.zero_grad()
                sampler.load_weights(model, version=runner.policy_version + 1)  # staged, never waits
                runner.set_policy_version(runner.policy_version + 1)
                n_in_batch = 0
            if n >= per_step:  # the first batch (actors starting) is left out
                opt_s += time.perf_counter() - t
                busy += [before, runner.in_flight]
                taken.extend(group)
            elif n == per_step - 1:  # the clocks start after the first step, as in trl-sync
                t0, g0, w0 = time.perf_counter(), len(gen_seconds), stream.waited
            if n + 1 >= groups:
                break
        wall = time.perf_counter() - t0
        wait = stream.waited - w0
        stale = runner.stats["stale_rerun"]
        # the envs alone, the trainer idle (what was queued meanwhile is skipped)
        stream.drain()
        t1, produced = time.perf_counter(), 0
        for group in it:
            produced += len(group)
            if produced >= 4 * alone:
                break
        env_alone = (time.perf_counter() - t1) * envs / max(1, produced)
    gen = sum(gen_seconds[g0:])
    # generation runs beside the trainer here: the trainer's time is its waits and its updates
    row = _row("async", len(taken), envs, wall, 0.0, wait, _grading_share(taken))
    trainer = opt_s * envs / max(1, len(taken))
    floor = 100 * max(0.0, 1 - trainer / env_alone)
    print(_episode_costs("async", taken))
    print(f"async: {stale} stale episodes re-run (max_staleness {staleness}); the sampler generated "
          f"{gen:.1f} s beside the trainer; {sum(busy) / max(1, len(busy)):.1f} of {envs} episodes "
          f"in flight (mean) while the trainer computed")  # fmt: skip
    print(f"async: the envs alone (trainer idle) produce a batch of {envs} in {env_alone:.1f} s, the trainer "
          f"consumes one in {trainer:.1f} s: even with perfect overlap it waits at least "
          f"{floor:.0f}% of the time")  # fmt: skip
    return row, floor


def _grpo_step(model: Any, opt: Any, group: list[Episode], step: bool = True) -> None:
    """One policy-gradient step on a group: advantage = (reward - mean) / std, loss on model tokens."""
    import torch

    rewards = torch.tensor([float(e.reward) for e in group])
    if len(group) < 2 or rewards.std() == 0:
        return
    adv = (rewards - rewards.mean()) / (rewards.std() + 1e-4)
    loss = torch.zeros(())
    for ep, a in zip(group, adv, strict=True):
        t = ep.to_tokens()
        ids = torch.tensor([t.prompt_ids + t.response_ids])
        logp = torch.log_softmax(model(ids).logits[0, :-1], -1).gather(1, ids[0, 1:, None])[:, 0]
        mask = torch.tensor(t.loss_mask, dtype=torch.float)
        resp = logp[len(t.prompt_ids) - 1 :]
        loss = loss - a * (resp * mask).sum() / mask.sum().clamp(min=1)
    (loss / len(group)).backward()
    if step:
        opt.step()
        opt.zero_grad()


def _models(parser: argparse.ArgumentParser, layers: list[int], hidden: list[int]) -> list[tuple[str, str]]:
    """(label, directory) per model size: random-init models built like the tiny one, no hub."""
    from swerl.errors import ConfigError
    from swerl.integrations.tiny_model import tiny_model

    if len(layers) != len(hidden):
        parser.error(f"--model-layers and --model-hidden pair up: got {len(layers)} and {len(hidden)} values")
    out = []
    for n, h in zip(layers, hidden, strict=True):
        try:
            out.append((f"{n}x{h}", str(tiny_model(layers=n, hidden=h))))
        except ConfigError as e:
            parser.error(str(e))
    return out


def _params(model_dir: str) -> float:
    from transformers import AutoModelForCausalLM

    return sum(p.numel() for p in AutoModelForCausalLM.from_pretrained(model_dir).parameters()) / 1e6


HEADER = ["loop", "episodes", "wall s", "generation", "environment", "grading", "optimizer", "waits on env %"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m swerl.bench train", description=__doc__)
    parser.add_argument("--envs", type=int, default=16, help="episodes in flight (= one TRL batch)")
    parser.add_argument("--steps", type=int, default=3, help="TRL steps (the first is left out)")
    parser.add_argument("--max-new-tokens", type=int, default=8)
    parser.add_argument(
        "--staleness",
        type=int,
        default=1,
        help="async: max policy versions an episode may lag (batches ahead)",
    )
    parser.add_argument("--pool", type=int, default=0, help="warm agent sandboxes per env and image")
    parser.add_argument(
        "--grade-pool", type=int, default=0, help="warm grading sandboxes per env (started at reset)"
    )
    parser.add_argument(
        "--model-layers", type=int, nargs="+", default=[2], help="the policy's layers, one per model size"
    )
    parser.add_argument(
        "--model-hidden",
        type=int,
        nargs="+",
        default=[128],
        help="its hidden size (a multiple of 64), paired with --model-layers",
    )
    parser.add_argument(
        "--runs", type=int, default=1, help="runs of each model size, the sizes alternating run by run"
    )
    args = parser.parse_args(argv)
    if args.envs % 4:
        parser.error("--envs must be a multiple of 4 (GRPO groups of 4)")
    if args.runs < 1:
        parser.error("--runs must be at least 1")
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    from swerl.rollout.runner import ensure_ray
    from swerl.tasks.images import build_task_images
    from swerl.tasks.sources import load_tasks

    models = _models(parser, args.model_layers, args.model_hidden)
    tasks = load_tasks("swerl-mini")
    build_task_images(tasks)
    ensure_ray()
    env_kwargs = {"pool_size": args.pool, "grade_pool_size": args.grade_pool}
    groups = args.steps * args.envs // 4  # one optimizer step per batch of --envs episodes, as TRL
    print(f"warm pools per env: {args.pool} agent, {args.grade_pool} grading sandboxes; {args.envs} envs in "
          f"flight; seconds per batch of {args.envs} episodes; {os.cpu_count()} CPUs")  # fmt: skip
    waits: dict[tuple[str, str], list[float]] = {}
    floors: dict[str, list[float]] = {}
    updates: dict[tuple[str, str], list[float]] = {}
    for run in range(args.runs):
        for label, model_dir in models:  # alternate: drift in the box's load hits every size alike
            load0 = os.getloadavg()[0]
            print(
                f"== run {run + 1}/{args.runs}, model {label} ({_params(model_dir):.1f}M parameters)",
                flush=True,
            )
            with tempfile.TemporaryDirectory() as d:
                sync = run_trl(tasks, model_dir, args.envs, args.steps, args.max_new_tokens, f"{d}/trl.jsonl", env_kwargs)  # fmt: skip
            async_, floor = run_async(
                tasks, model_dir, args.envs, groups, args.max_new_tokens, args.staleness, env_kwargs
            )
            print(f"load {load0:.1f} -> {os.getloadavg()[0]:.1f}")
            print(table(HEADER, [sync, async_]), flush=True)
            for row in (sync, async_):
                waits.setdefault((label, row[0]), []).append(row[7])
                updates.setdefault((label, row[0]), []).append(row[6])
            floors.setdefault(label, []).append(floor)
    rows = []
    for (label, loop), w in waits.items():
        floor = f"{statistics.median(floors[label]):.0f}" if loop == "async" else ""
        rows.append([label, loop, " / ".join(f"{x:.0f}" for x in w), statistics.median(w),
                     statistics.median(updates[label, loop]), floor])  # fmt: skip
    print(f"trainer waits on the environment, % of wall time, per run and median of {args.runs}:")
    print(table(["model", "loop", "per run", "median %", "optimizer s/batch", "async floor %"], rows))
    return 0
