"""Soak: many concurrent environments for a long time, nothing lost, memory flat.

Runs rounds of the bundled suite (gold policy: every episode is graded in its own
sandbox) through one RolloutRunner until the time is up, and samples memory
(host, driver, actors) along the way. An episode is lost if it was scheduled and
never came back; flat memory means the last quarter's mean host memory in use is
within ``--mem-tolerance`` of the second quarter's.

    python -m swerl.bench soak --envs 64 --minutes 20
"""

from __future__ import annotations

import argparse
import os
import threading
import time
from collections import Counter

import ray

from swerl.bench._stats import table
from swerl.policies.scripted import GoldPolicy
from swerl.rollout.runner import RolloutRunner, ensure_ray
from swerl.sandbox.base import SandboxConfig
from swerl.sandbox.docker import connect, reap
from swerl.tasks.images import build_task_images
from swerl.tasks.sources import load_tasks


def _host_used_mb() -> float:
    info = dict(line.split(":", 1) for line in open("/proc/meminfo").read().splitlines())  # noqa: SIM115
    kb = lambda k: int(info[k].split()[0])  # noqa: E731
    return (kb("MemTotal") - kb("MemAvailable")) / 1024


def _rss_mb(pid: int) -> float:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m swerl.bench soak", description=__doc__)
    parser.add_argument("--envs", type=int, default=64)
    parser.add_argument("--minutes", type=float, default=20.0)
    parser.add_argument("--seconds", type=float, default=None, help="overrides --minutes (short runs)")
    parser.add_argument("--mem-tolerance", type=float, default=0.15)
    args = parser.parse_args(argv)
    duration = args.seconds if args.seconds is not None else args.minutes * 60

    client = connect()
    tasks = load_tasks("swerl-mini")
    build_task_images(tasks, client=client)
    ensure_ray()
    actors = max(1, args.envs // 8)
    per_actor = max(1, args.envs // actors)
    run_id = f"soak-{os.getpid()}"
    cfg = SandboxConfig(run_id=run_id, memory="1g", cpus=1.0)
    attempts = max(1, -(-(actors * per_actor) // len(tasks)))  # one round keeps every env busy
    samples: list[tuple[float, float, float, float]] = []
    stop = threading.Event()
    counts: Counter[str] = Counter()
    scheduled = received = rounds = 0
    t0 = time.monotonic()
    runner = RolloutRunner(
        tasks, GoldPolicy(), num_actors=actors, envs_per_actor=per_actor, attempts=attempts,
        env_kwargs={"sandbox_config": cfg}, actor_cpus=0.01, run_id=run_id,
    )  # fmt: skip
    try:
        with runner:
            pids = [ray.get(h.where.remote())["pid"] for h in runner._actors.values()]

            def sample() -> None:
                while not stop.wait(5.0):
                    samples.append((
                        time.monotonic() - t0, _host_used_mb(), _rss_mb(os.getpid()),
                        sum(_rss_mb(p) for p in pids),
                    ))  # fmt: skip

            threading.Thread(target=sample, daemon=True).start()
            while time.monotonic() - t0 < duration:
                rounds += 1
                scheduled += len(tasks) * attempts
                for ep in runner.stream():
                    received += 1
                    counts[ep.status] += 1
            stop.set()
    finally:
        stop.set()
        reap(run_id, client=client)
        for a in range(1, actors * 4 + 1):
            reap(f"{run_id}-a{a}", client=client)
    wall = time.monotonic() - t0
    lost = scheduled - received
    quarter = max(1, len(samples) // 4)
    early = [s[1] for s in samples[quarter : 2 * quarter]] or [s[1] for s in samples]
    late = [s[1] for s in samples[-quarter:]] or early
    growth = (sum(late) / len(late)) / (sum(early) / len(early)) - 1 if early else 0.0
    peak = max((s[1] for s in samples), default=_host_used_mb())
    peak_actors = max((s[3] for s in samples), default=0.0)
    print(
        f"{args.envs} concurrent envs ({actors} actors x {per_actor}), {wall / 60:.1f} min, {rounds} rounds"
    )
    print(
        table(
            [
                "episodes",
                "episodes/s",
                "lost",
                "infra errors",
                "statuses",
                "peak host MB",
                "peak actors RSS MB",
                "mem growth",
            ],
            [
                [
                    received,
                    received / wall,
                    lost,
                    counts["infra_error"],
                    dict(counts),
                    peak,
                    peak_actors,
                    f"{growth:+.1%}",
                ]
            ],
        )
    )
    ok = lost == 0 and counts["infra_error"] == 0 and growth <= args.mem_tolerance
    print(
        f"soak: {'PASS' if ok else 'FAIL'} (nothing lost, no infra errors, memory growth <= {args.mem_tolerance:.0%})"
    )
    return 0 if ok else 1
