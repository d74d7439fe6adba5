"""Run a rollout config end to end: the body of `swerl rollout CONFIG`.

Writes ``episodes.jsonl`` (durable, resumable) and ``summary.json`` to the run's
output directory. Also the entry point that Slurm and KubeRay jobs run.
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

import yaml

from swerl.config import RolloutConfig
from swerl.episode import Episode, JsonlSink
from swerl.policies.registry import make_policy
from swerl.rollout.runner import RolloutRunner
from swerl.sandbox.base import SandboxConfig
from swerl.tasks.instance import load_instances, select


def build_runner(cfg: RolloutConfig) -> RolloutRunner:
    tasks = select(load_instances(cfg.tasks), cfg.task_ids) if cfg.task_ids else load_instances(cfg.tasks)
    policy = make_policy(cfg.policy.name, tasks, cfg.policy.placement, **cfg.policy.options)
    env_kwargs: dict[str, Any] = {
        "sandbox_config": SandboxConfig(**cfg.backend.sandbox.model_dump()),
        "backend_options": cfg.backend.options,
        **cfg.env.model_dump(),  # the env's limits and its pool/grading keywords
    }
    r = cfg.rollout
    return RolloutRunner(
        tasks,
        policy,
        num_actors=r.num_actors,
        envs_per_actor=r.envs_per_actor,
        attempts=r.attempts,
        max_in_flight=r.max_in_flight,
        max_retries=r.max_retries,
        actor_cpus=r.actor_cpus,
        group=r.group,
        placement=r.placement,
        env_kwargs=env_kwargs,
        backend=cfg.backend.name,
        sink=cfg.out / "episodes.jsonl",
        ray_address=cfg.ray.address,
        run_id=f"{cfg.name}-{int(time.time())}",
    )


def summarize(episodes: list[Episode], wall: float) -> dict[str, Any]:
    statuses = Counter(e.status for e in episodes)
    scored = [e.reward for e in episodes if e.reward is not None]
    per_task: dict[str, list[float]] = {}
    for e in episodes:
        if e.reward is not None:
            per_task.setdefault(e.task_id, []).append(e.reward)
    return {
        "episodes": len(episodes),
        "statuses": dict(statuses),
        "mean_reward": sum(scored) / len(scored) if scored else None,
        "resolved": statuses.get("resolved", 0),
        "infra_errors": statuses.get("infra_error", 0),
        "wall_seconds": wall,
        "episodes_per_second": len(episodes) / wall if wall else None,
        "per_task": {k: sum(v) / len(v) for k, v in sorted(per_task.items())},
    }


def cluster_summary(runner: RolloutRunner, new: list[Episode]) -> dict[str, Any]:
    """Where this run's episodes ran, and what node deaths cost it."""
    return {
        "nodes": dict(Counter(e.where.get("ray_node", "") for e in new)),
        "retried": runner.stats["retried"],
        "retried_node_died": runner.stats["retried_node_died"],
        "node_failures": [dataclasses.asdict(f) for f in runner.node_failures],
    }


def run_config(cfg: RolloutConfig, progress: Callable[[str], None] = print) -> dict[str, Any]:
    out = cfg.out
    out.mkdir(parents=True, exist_ok=True)
    (out / "config.yaml").write_text(yaml.safe_dump(cfg.model_dump(mode="json"), sort_keys=False))
    runner = build_runner(cfg)
    total = len(runner.tasks) * runner.attempts
    t0 = time.monotonic()
    new: list[Episode] = []
    with runner:
        for item in runner.stream():
            for ep in item if isinstance(item, list) else [item]:
                new.append(ep)
                scored = [e.reward for e in new if e.reward is not None]
                mean = sum(scored) / len(scored) if scored else float("nan")
                errors = sum(e.infra_error for e in new)
                reward = "None" if ep.reward is None else f"{ep.reward:.1f}"
                progress(
                    f"[{len(new):>3}/{total}] {ep.task_id} #{ep.attempt}: {ep.status} reward={reward} "
                    f"({ep.timings.get('total', 0):.1f} s) | mean reward {mean:.2f}, infra errors {errors}"
                )
    everything = list(JsonlSink.read(out / "episodes.jsonl"))
    summary = summarize(everything, time.monotonic() - t0) | {
        "new_episodes": len(new),
        "output_dir": str(out),
        **cluster_summary(runner, new),
    }
    (out / "summary.json").write_text(json.dumps(summary, indent=2))
    return summary


def format_summary(summary: dict[str, Any]) -> str:
    lines = [f"{'task':32s} mean reward", f"{'-' * 32} -----------"]
    lines += [f"{k:32s} {v:.2f}" for k, v in summary["per_task"].items()]
    mean = summary["mean_reward"]
    lines += [
        "",
        f"episodes {summary['episodes']} ({summary['new_episodes']} new)   statuses {summary['statuses']}",
        f"mean reward {'n/a' if mean is None else f'{mean:.3f}'}   resolved {summary['resolved']}   "
        f"infra errors {summary['infra_errors']}   wall {summary['wall_seconds']:.1f} s",
        f"written to {summary['output_dir']}/episodes.jsonl and summary.json",
    ]
    for f in summary.get("node_failures", []):
        lines.insert(-1, f"node {f['node']} died: {f['episodes_retried']} episode(s) retried on other nodes")
    return "\n".join(lines)
