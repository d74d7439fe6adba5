"""Density: how many sandboxes the whole stack holds at once, and what the active ones feel.

Real SWEEnvs hosted in a few EnvActors (many envs per actor), reset through the
actors as the runner does: the sandbox count grows to each N in a burst of
resets (start rate), then M envs step with bash commands while all N are held
(step p50/p99 from the driver, Ray round trip included), and memory, fds and
pids are taken (PSS of actors, dockerd, containerd, the shims and the
containers' processes). Every held env answers one last command of its own at
the end: an env whose sandbox went away without an infra error, or that
answered another env's command, is lost or mis-routed. Failures are named by
the limit they hit (fds, pids, memory, dockerd, Ray).

Each active env steps as an agent does: a command, then ``--think`` seconds for
the policy's next turn (jittered, so the envs do not march in step). ``--think 0``
is a closed loop, every env firing its next command the moment the last one
answers: that measures how many steps per second the box sustains, and its
latency is queueing (M envs each needing a few ms of CPU per step, on 2 cores).
Two times per step: ``exec`` inside the actor (the env's own step: the sandbox
round trip and the observation), and ``step`` from the driver (Ray included).

    python -m swerl.bench density --sandboxes 128 256 --active 16 64 --think 0 1
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import psutil
import ray
import ray.exceptions

from swerl.bench._stats import LoadWatch, table
from swerl.rollout.actor import EnvActor
from swerl.rollout.runner import ensure_ray
from swerl.sandbox.base import SandboxConfig
from swerl.sandbox.docker import connect, reap
from swerl.tasks.images import build_task_images
from swerl.tasks.sources import load_tasks

MB = 1 << 20


# ------------------------------------------------------------------ measuring
def _pss(proc: psutil.Process) -> float:
    """Proportional set size in MB (shared pages split among their users): sums honestly."""
    try:
        return proc.memory_full_info().pss / MB
    except (psutil.Error, AttributeError):
        return 0.0


def _fds(proc: psutil.Process) -> int:
    try:
        return proc.num_fds()
    except psutil.Error:
        return 0


def _named(*names: str) -> list[psutil.Process]:
    return [p for p in psutil.process_iter(["name"]) if (p.info["name"] or "") in names]


@dataclass
class Memory:
    dockerd: float
    containerd: float
    shims: float
    containers: float
    """PSS of every process inside the containers (their init, its sleep, the command servers)."""
    shim_count: int
    actors: list[float]
    fds: dict[str, int]
    threads: int
    """Scheduling entities on the host (what pid_max and threads-max bound)."""
    host_fds: int
    host_used: float

    @property
    def daemons(self) -> float:
        return self.dockerd + self.containerd + self.shims


def measure(actor_pids: list[int]) -> Memory:
    dockerd, containerd = _named("dockerd"), _named("containerd")
    shims = [p for p in psutil.process_iter(["name"]) if (p.info["name"] or "").startswith("containerd-shim")]
    inside: list[psutil.Process] = []
    for s in shims:
        try:
            inside += s.children(recursive=True)
        except psutil.Error:
            pass
    actors = [psutil.Process(pid) for pid in actor_pids if psutil.pid_exists(pid)]
    vm = psutil.virtual_memory()
    with open("/proc/loadavg") as f:
        threads = int(f.read().split()[3].split("/")[1])
    with open("/proc/sys/fs/file-nr") as f:
        host_fds = int(f.read().split()[0])
    return Memory(
        dockerd=sum(map(_pss, dockerd)),
        containerd=sum(map(_pss, containerd)),
        shims=sum(map(_pss, shims)),
        containers=sum(map(_pss, inside)),
        shim_count=len(shims),
        actors=[_pss(a) for a in actors],
        fds={
            "dockerd": sum(map(_fds, dockerd)),
            "containerd": sum(map(_fds, containerd)),
            "actors (max)": max(map(_fds, actors), default=0),
        },
        threads=threads,
        host_fds=host_fds,
        host_used=(vm.total - vm.available) / MB,
    )


# ------------------------------------------------------------------ failures
LIMITS = (
    ("fds", ("too many open files", "emfile")),
    ("pids", ("resource temporarily unavailable", "fork", "pids", "cannot allocate thread")),
    ("memory", ("cannot allocate memory", "oom", "out of memory", "enomem")),
    ("dockerd", ("docker daemon", "start slots", "timed out", "timeout", "dockerd", "500 server error")),
    ("Ray", ("ray", "actor")),
)


def limit_of(error: str) -> str:
    """Name the limit an error text points at (the first that matches), else 'other'."""
    low = error.lower()
    return next((name for name, needles in LIMITS if any(n in low for n in needles)), "other")


# ------------------------------------------------------------------ the fleet
@dataclass
class Fleet:
    """EnvActors hosting ``per_actor`` envs each; ``held`` are the slots reset so far."""

    actors: list[Any]
    per_actor: int
    task_id: str
    pids: list[int] = field(default_factory=list)
    held: list[tuple[int, int]] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    lost: int = 0
    steps: int = 0

    def slots(self) -> list[tuple[int, int]]:
        return [(a, s) for s in range(self.per_actor) for a in range(len(self.actors))]

    def grow(self, n: int, timeout: float) -> tuple[float, list[float]]:
        """Reset slots until ``n`` are held, all at once; (wall seconds, each reset's seconds)."""
        todo = [x for x in self.slots() if x not in self.held][: max(0, n - len(self.held))]
        t0 = time.monotonic()
        refs = {self.actors[a].reset.remote(s, self.task_id, 0): (a, s, t0) for a, s in todo}
        latencies: list[float] = []
        pending = list(refs)
        while pending:
            ready, pending = ray.wait(pending, num_returns=1, timeout=timeout)
            if not ready:
                self.failures += [f"reset did not return within {timeout:.0f} s (Ray)"] * len(pending)
                self.lost += len(pending)
                break
            a, s, start = refs[ready[0]]
            latencies.append(time.monotonic() - start)
            try:
                _obs, info = ray.get(ready[0])
            except ray.exceptions.RayError as e:
                self.failures.append(f"Ray: {e}")
                continue
            if info.get("done"):  # the reset failed: an infra error episode, never a score
                ep = info["episode"]
                if ep.get("status") != "infra_error" or ep.get("reward") is not None:
                    self.lost += 1  # a failed reset must come back as an infra error, unscored
                self.failures.append(ep.get("error") or "reset failed")
                continue
            self.held.append((a, s))
        return time.monotonic() - t0, latencies

    def step(self, slot: tuple[int, int], n: int, think: float = 0.0) -> list[tuple[float, float | None]]:
        """``n`` bash steps on one held env, each checked for its own answer; for each, its
        seconds from the driver and in the actor (the env's own step, no Ray; None for a
        step that ended the episode).

        ``think``: mean seconds between steps (uniform in [0.5, 1.5] x think)."""
        a, s = slot
        out = []
        rng = random.Random(f"{a}-{s}-{self.steps}")
        for i in range(n):
            if think and i:
                time.sleep(think * rng.uniform(0.5, 1.5))
            elif think:  # the first step lands anywhere in one think time
                time.sleep(think * rng.uniform(0.0, 1.0))
            token = f"d{a}-{s}-{self.steps}-{i}"
            t = time.perf_counter()
            try:
                obs, info = ray.get(
                    self.actors[a].step.remote(s, json.dumps({"tool": "bash", "command": f"echo {token}"}))
                )
            except ray.exceptions.RayError as e:
                self.failures.append(f"Ray: {e}")
                self.lost += 1
                return out
            out.append((time.perf_counter() - t, info.get("duration")))
            if info.get("done"):
                self.failures.append(info["episode"].get("error") or "episode ended")
                self.held.remove(slot)
                ep = info["episode"]
                if ep.get("status") != "infra_error" or ep.get("reward") is not None:
                    self.lost += 1
                return out
            if token not in obs:
                self.lost += 1  # another env's answer, or none: mis-routed
                self.failures.append(f"env {slot} answered {obs[:80]!r}, not {token}")
        return out

    def stepping(self, m: int, steps: int, think: float = 0.0) -> tuple[list[float], list[float], float]:
        """``m`` held envs stepping at once, the rest idle; (every step's seconds from the
        driver, the same steps' seconds in the actor, steps per second overall)."""
        active = self.held[:m]
        self.steps += 1
        t = time.perf_counter()
        with ThreadPoolExecutor(max_workers=max(1, len(active))) as ex:
            timed = [x for lat in ex.map(lambda sl: self.step(sl, steps, think), active) for x in lat]
        return (
            [d for d, _ in timed],
            [e for _, e in timed if e is not None],
            len(timed) / (time.perf_counter() - t),
        )

    def check_all(self) -> int:
        """Every held env answers its own command; returns how many did not."""
        before = self.lost
        self.steps += 1
        with ThreadPoolExecutor(max_workers=32) as ex:
            list(ex.map(lambda sl: self.step(sl, 1), list(self.held)))
        return self.lost - before


def _pct(samples: list[float], q: float) -> float:
    return float(np.percentile(np.asarray(samples) * 1000, q)) if samples else math.nan


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m swerl.bench density", description=__doc__)
    parser.add_argument("--sandboxes", type=int, nargs="+", default=[128, 256])
    parser.add_argument("--active", type=int, nargs="+", default=[16, 64])
    parser.add_argument("--actors", type=int, default=4, help="EnvActors hosting the envs")
    parser.add_argument("--steps", type=int, default=30, help="bash steps per active env per measurement")
    parser.add_argument(
        "--think", type=float, nargs="+", default=[0.0, 1.0],
        help="mean seconds between an env's steps (the policy's turn); 0: closed loop",
    )  # fmt: skip
    parser.add_argument(
        "--gate", type=int, default=SandboxConfig.start_gate, help="concurrent starts (0: none)"
    )
    parser.add_argument("--memory", default="1g", help="each sandbox's memory limit")
    parser.add_argument("--reset-timeout", type=float, default=600.0)
    args = parser.parse_args(argv)
    sizes = sorted(set(args.sandboxes))

    client = connect()
    task = load_tasks("swerl-mini")[0]
    build_task_images([task], client=client)
    ensure_ray()
    run_id = f"bench-density-{os.getpid()}"
    per_actor = -(-sizes[-1] // args.actors)
    cfg = SandboxConfig(
        run_id=run_id, memory=args.memory, cpus=1.0, start_gate=args.gate, start_timeout=args.reset_timeout
    )
    env_kwargs = {"sandbox_config": cfg, "max_steps": 0, "max_repeats": 0, "max_seconds": 0}
    baseline = measure([])
    watch = LoadWatch()
    rows: list[list[object]] = []
    first_limit = ""
    actor_ids = [f"{run_id}-a{i + 1}" for i in range(args.actors)]
    actors = [
        EnvActor.options(num_cpus=0.01, max_concurrency=per_actor + 8).remote(
            [task], per_actor, aid, env_kwargs
        )
        for aid in actor_ids
    ]
    fleet = Fleet(actors, per_actor, task.instance_id)
    teardown = 0.0
    try:
        fleet.pids = [ray.get(h.where.remote())["pid"] for h in actors]
        empty = measure(fleet.pids)
        for n in sizes:
            before = len(fleet.held)
            wall, lat = fleet.grow(n, args.reset_timeout)
            started = len(fleet.held) - before
            rate = started / wall if wall else 0.0
            if fleet.failures and not first_limit:
                first_limit = f"{limit_of(fleet.failures[0])} at {n}: {fleet.failures[0][:160]}"
            mem = measure(fleet.pids)
            held = max(1, len(fleet.held))
            sandbox_mb = (mem.daemons + mem.containers - baseline.daemons - baseline.containers) / held
            actor_mb = sum(mem.actors) / max(1, len(mem.actors))
            per_env_mb = (sum(mem.actors) - sum(empty.actors)) / held
            for m in args.active:
                for think in args.think:
                    steps, execs, rate_s = fleet.stepping(min(m, len(fleet.held)), args.steps, think)
                    rows.append([
                        len(fleet.held), m, f"{think:g}", f"{rate:.1f}",
                        f"{_pct(lat, 50) / 1000:.1f}/{_pct(lat, 99) / 1000:.1f}",
                        f"{sandbox_mb:.1f}", f"{actor_mb:.0f}", f"{per_env_mb:.2f}",
                        f"{mem.dockerd:.0f}+{mem.containerd:.0f}", f"{mem.shims / max(1, mem.shim_count):.1f}",
                        f"{_pct(execs, 50):.1f}", f"{_pct(execs, 99):.1f}", f"{_pct(steps, 50):.1f}",
                        f"{_pct(steps, 99):.1f}", f"{rate_s:.0f}",
                        f"{mem.fds['dockerd']}/{mem.fds['containerd']}/{mem.fds['actors (max)']}",
                        mem.threads, f"{os.getloadavg()[0]:.1f}",
                    ])  # fmt: skip
                    print(table(HEADER, rows[-1:]).splitlines()[-1], flush=True)
            if len(fleet.held) < n:
                break
        fleet.check_all()
    finally:
        t = time.monotonic()
        for h in actors:
            ray.kill(h)
        removed = sum(reap(aid, client=client, workers=8) for aid in actor_ids)
        teardown = time.monotonic() - t
    watch.stop()
    failures = Counter(limit_of(f) for f in fleet.failures)
    print()
    print(
        f"task {task.instance_id}; {args.actors} actors x {per_actor} envs; start gate {args.gate}; {watch.report()}"
    )
    print(table(HEADER, rows))
    print(
        "start rate: sandboxes reset per second in each burst (wall); reset s: p50/p99 of one reset in the burst; "
        "MB/sbx: PSS of dockerd, containerd, shims and the containers' processes over the baseline, per held "
        "sandbox; actor MB: PSS of one actor; MB/env: actor PSS growth per held env; think: mean seconds "
        "between an env's steps (0: closed loop); exec ms: one bash step of the active envs in the actor "
        "(the env's own step); step ms: the same from the driver (Ray round trip included); steps/s: all "
        "active envs together; fds: dockerd/containerd/busiest actor; threads: on the host"
    )
    print(f"removed {removed} sandboxes in {teardown:.1f} s ({removed / max(teardown, 1e-9):.1f}/s)")
    print(f"failures by limit: {dict(failures) or 'none'}; first limit hit: {first_limit or 'none'}")
    print(f"lost or mis-routed episodes: {fleet.lost} (must be 0)")
    reached = max((r[0] for r in rows), default=0)
    col = {name: i for i, name in enumerate(HEADER)}
    paced = [r for r in rows if float(r[col["think"]]) > 0]
    if paced:
        worst = max(float(r[col["exec p99"]]) for r in paced)
        print(
            watch.verdict(
                f"{sizes[-1]} held, p99 exec of the active envs < 50 ms with a policy's turn between steps",
                reached >= sizes[-1] and worst < 50,
            )
        )
    closed = [r for r in rows if float(r[col["think"]]) == 0]
    if closed:
        print(
            "closed loop (no think time): "
            + "; ".join(
                f"{r[col['held']]} held, {r[col['active']]} active: {r[col['steps/s']]} steps/s, "
                f"exec p99 {r[col['exec p99']]} ms"
                for r in closed
            )
            + " (latency there is queueing for the 2 cores, not the sandbox)"
        )
    return 0 if fleet.lost == 0 else 1


HEADER = [
    "held", "active", "think", "starts/s", "reset s", "MB/sbx", "actor MB", "MB/env", "dockerd+ctrd MB",
    "shim MB", "exec p50", "exec p99", "step p50", "step p99", "steps/s", "fds", "threads", "load",
]  # fmt: skip
