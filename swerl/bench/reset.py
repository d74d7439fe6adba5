"""Reset latency: SWEEnv.reset from a warm pool against a cold start, side by side; and whole
gold episodes (reset, the gold patch, submit, grading in a fresh sandbox).

Cold: every reset starts a container. Warm: a pool of started sandboxes per
image (refilled in the background while an episode runs) hands one out. The
warm case waits until the pool has refilled between resets, as it would during
an episode; the back-to-back case does not wait, so it shows the pool draining.
The git history scrub (on by default) is timed too: cold resets with it off, and
on an image that still holds the fix (SWE-bench's shape), where it has work to do.
With ``--backend enroot`` every row is measured on Docker and on Enroot.
"""

from __future__ import annotations

import argparse
import os
import time

from swerl.bench._backends import add_backend_arg, compared, reap_all
from swerl.bench._stats import percentiles_ms, table
from swerl.env import SWEEnv
from swerl.policies.scripted import GoldPolicy
from swerl.sandbox.base import SandboxConfig
from swerl.sandbox.docker import connect
from swerl.tasks.images import build_history_image, build_task_images
from swerl.tasks.instance import Instance
from swerl.tasks.sources import load_tasks


def _resets(env: SWEEnv, task_id: str, n: int, wait_for_pool: bool) -> list[float]:
    samples = []
    for _ in range(n):
        if wait_for_pool and env.pool is not None:
            deadline = time.monotonic() + 30
            while env.pool.idle(env.tasks[0].image) < env.pool.size and time.monotonic() < deadline:
                time.sleep(0.02)
        t = time.perf_counter()
        env.reset(options={"task": task_id})
        samples.append(time.perf_counter() - t)
    return samples


def _gold_episodes(env: SWEEnv, task, n: int) -> list[float]:
    samples = []
    for i in range(n):
        t = time.perf_counter()
        env.reset(options={"task": task.instance_id})
        for action in GoldPolicy().script(task, i):
            _obs, reward, terminated, truncated, info = env.step(action)
            if terminated or truncated:
                break
        if reward != 1.0:
            raise RuntimeError(f"gold episode of {task.instance_id} did not resolve: {info}")
        samples.append(time.perf_counter() - t)
    return samples


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m swerl.bench reset", description=__doc__)
    parser.add_argument("--n", type=int, default=20)
    parser.add_argument("--pool-size", type=int, default=2)
    parser.add_argument("--gold", type=int, default=3, help="gold episodes timed per backend")
    add_backend_arg(parser)
    args = parser.parse_args(argv)

    client = connect()
    task = load_tasks("swerl-mini")[0]
    build_task_images([task], client=client)
    history = Instance.from_dict({**task.to_dict(), "image": build_history_image(task, client=client)[0]})
    cfg = SandboxConfig(run_id=f"bench-reset-{os.getpid()}")
    backends = compared(args.backend)
    results: dict[str, list[float]] = {}
    try:
        for b in backends:
            with SWEEnv([task], backend=b, sandbox_config=cfg) as env:
                _resets(env, task.instance_id, 2, False)
                results[f"{b}: cold start (no pool)"] = _resets(env, task.instance_id, args.n, False)
                if args.gold:
                    results[f"{b}: gold episode"] = _gold_episodes(env, task, args.gold)
            with SWEEnv([task], backend=b, sandbox_config=cfg, pool_size=args.pool_size) as env:
                _resets(env, task.instance_id, 2, True)
                results[f"{b}: warm pool of {args.pool_size} (refilled)"] = _resets(
                    env, task.instance_id, args.n, True
                )
                results[f"{b}: warm pool of {args.pool_size} (back to back)"] = _resets(
                    env, task.instance_id, args.n, False
                )
        with SWEEnv([task], sandbox_config=cfg, scrub_history=False) as env:
            results["docker: cold start, no history scrub"] = _resets(env, task.instance_id, args.n, False)
        with SWEEnv([history], sandbox_config=cfg) as env:
            results["docker: cold start, image with history"] = _resets(env, task.instance_id, args.n, False)
    finally:
        reap_all(backends, cfg.run_id)
    rows = [[k, len(v), *percentiles_ms(v)] for k, v in results.items()]
    print(f"task {task.instance_id}; load average {os.getloadavg()[0]:.2f}")
    print(table(["reset", "n", "p50 ms", "p95 ms"], rows))
    for b in backends:
        cold = percentiles_ms(results[f"{b}: cold start (no pool)"])[0]
        warm = percentiles_ms(results[f"{b}: warm pool of {args.pool_size} (refilled)"])[0]
        print(
            f"{b}: ratio (cold p50 / warm p50): {cold / warm:.1f}x; goal warm p50 <= 50 ms: "
            f"{'met' if warm <= 50 else 'NOT met'}"
        )
    if args.gold and len(backends) > 1:
        docker, other = (percentiles_ms(results[f"{b}: gold episode"])[0] for b in backends)
        print(
            f"gold episode p50: {backends[1]} {other / 1000:.2f} s, docker {docker / 1000:.2f} s: "
            f"{other / docker:.2f}x; goal <= 2x: {'met' if other <= 2 * docker else 'NOT met'}"
        )
    p50 = {k: percentiles_ms(v)[0] for k, v in results.items()}
    plain = p50["docker: cold start, no history scrub"]
    print(
        f"history scrub at a cold reset: +{p50['docker: cold start (no pool)'] - plain:.0f} ms p50 on a clean "
        f"image, +{p50['docker: cold start, image with history'] - plain:.0f} ms on one that holds "
        "the fix; with a pool it runs when the sandbox is made, off reset's path"
    )
    return 0
