"""Rollout throughput, Ray's per-step overhead, and memory per sandbox and per actor.

A scripted policy runs K cheap bash steps and submits nothing (empty patch, so
no grading sandbox): the table measures swerl's rollout machinery, not the tests
of a task. Concurrency c runs c envs at once (c/8 actors of 8 envs, at least one
actor); each env plays ``--episodes`` episodes. The Ray overhead is the step
latency through an actor minus the same env stepped in-process. With ``--backend
enroot`` the concurrency levels run on Docker and then on Enroot, in the same run.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from concurrent.futures import ThreadPoolExecutor
from typing import ClassVar

import ray

from swerl.bench._backends import add_backend_arg, compared, reap_all
from swerl.bench._stats import LoadWatch, table
from swerl.env import SWEEnv, actions
from swerl.policies.scripted import ScriptedPolicy
from swerl.rollout.actor import EnvActor
from swerl.rollout.runner import RolloutRunner, ensure_ray
from swerl.sandbox.base import RUN_LABEL, SandboxConfig
from swerl.sandbox.docker import connect
from swerl.sandbox.enroot import safe_run_id
from swerl.sandbox.enroot_jail import own_cgroups
from swerl.tasks.images import build_task_images
from swerl.tasks.sources import load_tasks


class EchoPolicy(ScriptedPolicy):
    placement: ClassVar[str] = "actor"

    def __init__(self, steps: int) -> None:
        self.steps = steps

    def script(self, task, attempt) -> list[str]:
        return [actions.bash(f"echo step {i}") for i in range(self.steps)] + [actions.submit()]


def _uss(pid: int) -> int | None:
    """Unique set size of a process: what killing it would free (Linux smaps_rollup)."""
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            text = f.read()
    except OSError:
        return None
    kb = sum(
        int(line.split()[1])
        for line in text.splitlines()
        if line.startswith(("Private_Clean", "Private_Dirty"))
    )
    return kb * 1024


def _container_memory(client, run_prefix: str) -> list[int]:
    """Memory charged to each running swerl container of this run (cgroup v1 or v2)."""
    out = []
    for c in client.api.containers(filters={"label": ["swerl.owner=swerl"]}):
        if not c["Labels"].get(RUN_LABEL, "").startswith(run_prefix):
            continue
        for path in (
            f"/sys/fs/cgroup/memory/docker/{c['Id']}/memory.usage_in_bytes",
            f"/sys/fs/cgroup/system.slice/docker-{c['Id']}.scope/memory.current",
        ):
            if os.path.exists(path):
                with open(path) as f:
                    out.append(int(f.read()))
                break
    return out


def _enroot_memory(run_prefix: str) -> list[int]:
    """Memory charged to each running swerl enroot sandbox of this run (its cgroup)."""
    parent = own_cgroups().get("memory") or own_cgroups().get("v2")
    out = []
    for d in parent.rglob(f"swerl-{run_prefix}*") if parent else []:
        for f in ("memory.usage_in_bytes", "memory.current"):
            if (d / f).exists():
                out.append(int((d / f).read_text()))
                break
    return out


def _episode_overhead(task, cfg: SandboxConfig, steps: int, n: int) -> tuple[float, float]:
    """Per-step cost of whole episodes in-process vs. inside an actor (the default placement)."""
    policy = EchoPolicy(steps)
    kwargs = {"max_repeats": 0, "pool_size": 0}
    with SWEEnv([task], sandbox_config=cfg, **kwargs) as env:
        t = 0.0
        for i in range(n + 1):
            if i == 1:  # the first episode warms up
                t = time.perf_counter()
            env.reset(options={"task": task.instance_id})
            state = policy.start(task, i)
            done = False
            while not done:
                _, _, term, trunc, _ = env.step(policy.act(state, "").action)
                done = term or trunc
        local = (time.perf_counter() - t) / (n * (steps + 1))
    actor = EnvActor.options(num_cpus=0.1).remote([task], 1, f"{cfg.run_id}-episodes", kwargs)
    try:
        ref = ray.put(policy)
        ray.get(actor.run_episode.remote(0, task.instance_id, 0, ref))  # warm-up
        t = time.perf_counter()
        for i in range(n):
            ray.get(actor.run_episode.remote(0, task.instance_id, i, ref))
        remote = (time.perf_counter() - t) / (n * (steps + 1))
    finally:
        ray.get(actor.close.remote())
        ray.kill(actor)
    return local, remote


def _ray_overhead(task, cfg: SandboxConfig, n: int, batch: int, blocks: int = 10) -> dict[str, float]:
    """Seconds per env step, policy in the driver: in-process, and through one actor.

    One env: ``step`` (one call per step). ``batch`` envs, all stepped each round:
    in-process on a thread per env (as the actor does), through the actor with one
    ``step`` call per env (unbatched), and with one ``step_many`` per round (batched).
    The variants run in ``blocks`` alternating blocks of ``n / blocks`` steps, so drift on
    a noisy box (per-step costs here moved 2x within minutes) falls on all of them alike;
    each figure is the median over blocks, and ``"<actor variant> - <local variant>"`` keys
    hold the median of the per-block differences.
    """
    step = actions.bash("echo hi")
    kwargs = {"max_steps": 0, "max_repeats": 0, "pool_size": 0}
    envs = [SWEEnv([task], sandbox_config=cfg, **kwargs) for _ in range(batch)]
    actor = EnvActor.options(num_cpus=0.1, max_concurrency=batch + 4).remote(
        [task], batch, f"{cfg.run_id}-overhead", kwargs
    )
    try:
        for env in envs:
            env.reset(options={"task": task.instance_id})
        ray.get([actor.reset.remote(i, task.instance_id, i) for i in range(batch)])
        items = [(i, step, None) for i in range(batch)]
        with ThreadPoolExecutor(batch) as pool:
            variants = {
                "local 1": (lambda: envs[0].step(step), 1),
                f"local {batch}": (lambda: list(pool.map(lambda e: e.step(step), envs)), batch),
                "actor 1 step": (lambda: ray.get(actor.step.remote(0, step)), 1),
                f"actor {batch} step": (
                    lambda: ray.get([actor.step.remote(i, step) for i in range(batch)]),
                    batch,
                ),
                f"actor {batch} step_many": (lambda: ray.get(actor.step_many.remote(items)), batch),
            }
            for round_, _k in variants.values():  # warm up every path first
                for _ in range(5):
                    round_()
            per_block: dict[str, list[float]] = {name: [] for name in variants}
            for _ in range(blocks):
                for name, (round_, k) in variants.items():
                    per_block[name].append(_per_step(round_, max(1, n // blocks) // k, k))
    finally:
        for env in envs:
            env.close()
        ray.get(actor.close.remote())
        ray.kill(actor)
    out = {name: statistics.median(xs) for name, xs in per_block.items()}
    for remote, local in (("actor 1 step", "local 1"), (f"actor {batch} step", f"local {batch}"),
                          (f"actor {batch} step_many", f"local {batch}")):  # fmt: skip
        diffs = [r - loc for r, loc in zip(per_block[remote], per_block[local], strict=True)]
        out[f"{remote} - {local}"] = statistics.median(diffs)
    return out


def _per_step(round_, rounds: int, k: int) -> float:
    """Seconds per env step of ``rounds`` rounds of ``k`` steps each."""
    t = time.perf_counter()
    for _ in range(max(1, rounds)):
        round_()
    return (time.perf_counter() - t) / (max(1, rounds) * k)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m swerl.bench rollout", description=__doc__)
    parser.add_argument("--levels", default="1,4,16,64", help="concurrent envs to measure")
    parser.add_argument("--steps", type=int, default=10, help="bash steps per episode")
    parser.add_argument("--episodes", type=int, default=2, help="episodes per env")
    parser.add_argument("--overhead-steps", type=int, default=300)
    parser.add_argument("--batch", type=int, default=4, help="envs of the actor in the batched overhead")
    parser.add_argument("--repeats", type=int, default=3, help="times the per-step overhead is measured")
    parser.add_argument(
        "--placement", default="actor", choices=["actor", "driver"], help="policy placement in the table"
    )
    add_backend_arg(parser)
    args = parser.parse_args(argv)

    client = connect()
    task = load_tasks("swerl-mini")[0]
    build_task_images([task], client=client)
    ensure_ray()
    prefix = f"bench-rollout-{os.getpid()}"
    cfg = SandboxConfig(run_id=prefix, memory="1g", cpus=1.0)
    rows = []
    watch = LoadWatch()
    overheads: list[dict[str, float]] = []
    try:
        for _ in range(args.repeats):
            overheads.append(_ray_overhead(task, cfg, args.overhead_steps, args.batch))
            ep_local, ep_remote = _episode_overhead(task, cfg, 20, 10)
            overheads[-1] |= {"episode local": ep_local, "episode actor": ep_remote}
        policy = EchoPolicy(args.steps)
        policy.placement = args.placement
        for backend, c in ((b, int(x)) for b in compared(args.backend) for x in args.levels.split(",")):
            actors = max(1, c // 8)
            per_actor = max(1, c // actors)
            runner = RolloutRunner(
                [task] * 1,
                policy,
                num_actors=actors,
                envs_per_actor=per_actor,
                attempts=actors * per_actor * args.episodes,
                env_kwargs={"backend": backend, "sandbox_config": cfg, "max_repeats": 0, "pool_size": 0},
                run_id=f"{prefix}-{backend}-c{c}",
                actor_cpus=0.01,
            )
            peak_sandboxes: list[int] = []
            with runner:
                pids = [ray.get(h.where.remote())["pid"] for h in runner._actors.values()]
                t = time.perf_counter()
                episodes = 0
                steps = 0
                for ep in runner.stream():
                    episodes += 1
                    steps += len(ep.steps)
                    if episodes == max(1, c // 2):
                        peak_sandboxes = (
                            _container_memory(client, f"{prefix}-{backend}-c{c}")
                            if backend == "docker"
                            else _enroot_memory(safe_run_id(f"{prefix}-{backend}-c{c}"))
                        )
                wall = time.perf_counter() - t
                actor_uss = [u for u in map(_uss, pids) if u is not None]
            mem_sb = sum(peak_sandboxes) / len(peak_sandboxes) / 2**20 if peak_sandboxes else float("nan")
            mem_actor = sum(actor_uss) / len(actor_uss) / 2**20 if actor_uss else float("nan")
            rows.append(
                [backend, c, actors, episodes, steps, wall, episodes / wall, steps / wall, mem_sb, mem_actor]
            )
    finally:
        levels = [int(x) for x in args.levels.split(",")]
        for b in compared(args.backend):
            reap_all([b], cfg.run_id)
            for c in levels:
                reap_all([b], f"{prefix}-{b}-c{c}")
        for c in client.api.containers(all=True, filters={"label": ["swerl.owner=swerl"]}):
            if c["Labels"].get(RUN_LABEL, "").startswith(prefix):
                reap_all(["docker"], c["Labels"][RUN_LABEL])
    print(f"task {task.instance_id}; {args.steps} bash steps + submit per episode; {os.cpu_count()} CPUs")
    print(
        table(
            [
                "backend",
                "envs",
                "actors",
                "episodes",
                "steps",
                "wall s",
                "episodes/s",
                "steps/s",
                "MB/sandbox",
                "MB/actor",
            ],
            rows,
        )
    )
    watch.stop()
    b = args.batch
    added = {
        "driver, 1 env (step)": ("actor 1 step", "local 1"),
        f"driver, {b} envs, unbatched (step per env)": (f"actor {b} step", f"local {b}"),
        f"driver, {b} envs, batched (step_many)": (f"actor {b} step_many", f"local {b}"),
        "actor-placed policy (run_episode)": ("episode actor", "episode local"),
    }

    def added_ms(o: dict[str, float], r: str, loc: str) -> float:
        return 1000 * o.get(f"{r} - {loc}", o[r] - o[loc])

    rows = [
        [
            name,
            *(f"{added_ms(o, r, loc):.2f}" for o in overheads),
            f"{min(o[loc] for o in overheads) * 1000:.2f}",
        ]
        for name, (r, loc) in added.items()
    ]
    heads = [f"run {i + 1}" for i in range(len(overheads))]
    print(
        f"ms Ray adds per env step (through an actor minus in-process; driver rows: median over "
        f"alternating blocks), {len(overheads)} runs:"
    )
    print(table(["policy placement", *heads, "in-process ms/step"], rows))
    batched = max(added_ms(o, f"actor {b} step_many", f"local {b}") for o in overheads) / 1000
    print(watch.report())
    print(
        watch.verdict(
            f"(Ray adds <= 1 ms per step, batched, worst of {len(overheads)} runs)", batched <= 0.001
        )
    )
    return 0
