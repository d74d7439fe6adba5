"""Reset latency: SWEEnv.reset from a warm pool against a cold start, side by side.

Cold: every reset starts a container. Warm: a pool of started sandboxes per
image (refilled in the background while an episode runs) hands one out. The
warm case waits until the pool has refilled between resets, as it would during
an episode; the back-to-back case does not wait, so it shows the pool draining.
The git history scrub (on by default) is timed too: cold resets with it off, and
on an image that still holds the fix (SWE-bench's shape), where it has work to do.
"""

from __future__ import annotations

import argparse
import os
import time

from swerl.bench._stats import percentiles_ms, table
from swerl.env import SWEEnv
from swerl.sandbox.base import SandboxConfig
from swerl.sandbox.docker import connect, reap
from swerl.tasks.images import build_history_image, build_task_images
from swerl.tasks.instance import Instance, load_instances


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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m swerl.bench reset", description=__doc__)
    parser.add_argument("--n", type=int, default=20)
    parser.add_argument("--pool-size", type=int, default=2)
    args = parser.parse_args(argv)

    client = connect()
    task = load_instances("swerl-mini")[0]
    build_task_images([task], client=client)
    history = Instance.from_dict({**task.to_dict(), "image": build_history_image(task, client=client)[0]})
    cfg = SandboxConfig(run_id=f"bench-reset-{os.getpid()}")
    results = {}
    try:
        with SWEEnv([task], sandbox_config=cfg) as env:
            _resets(env, task.instance_id, 2, False)
            results["cold start (no pool)"] = _resets(env, task.instance_id, args.n, False)
        with SWEEnv([task], sandbox_config=cfg, scrub_history=False) as env:
            results["cold start, no history scrub"] = _resets(env, task.instance_id, args.n, False)
        with SWEEnv([history], sandbox_config=cfg) as env:
            results["cold start, image with history"] = _resets(env, task.instance_id, args.n, False)
        with SWEEnv([task], sandbox_config=cfg, pool_size=args.pool_size) as env:
            _resets(env, task.instance_id, 2, True)
            results[f"warm pool of {args.pool_size} (refilled)"] = _resets(
                env, task.instance_id, args.n, True
            )
            results[f"warm pool of {args.pool_size} (back to back)"] = _resets(
                env, task.instance_id, args.n, False
            )
    finally:
        reap(cfg.run_id, client=client)
    rows = [[k, len(v), *percentiles_ms(v)] for k, v in results.items()]
    print(f"task {task.instance_id}")
    print(table(["reset", "n", "p50 ms", "p95 ms"], rows))
    p50 = {k: percentiles_ms(v)[0] for k, v in results.items()}
    cold, warm = p50["cold start (no pool)"], p50[f"warm pool of {args.pool_size} (refilled)"]
    print(
        f"history scrub at a cold reset: +{cold - p50['cold start, no history scrub']:.0f} ms p50 on a clean image, "
        f"+{p50['cold start, image with history'] - p50['cold start, no history scrub']:.0f} ms on one that holds "
        "the fix; with a pool it runs when the sandbox is made, off reset's path"
    )
    print(
        f"ratio (cold p50 / warm p50): {cold / warm:.1f}x; goal warm p50 <= 50 ms: {'met' if warm <= 50 else 'NOT met'}"
    )
    return 0
