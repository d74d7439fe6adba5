"""Episodes per hour: swerl's RolloutRunner against the pipeline peer trainers use.

The peer is what SkyRL's mini-swe-agent example (and trainers built like it) run: one
``@ray.remote`` task per trajectory, mini-swe-agent's ``DockerEnvironment`` (a
``docker run`` per episode, a ``docker exec`` per command) for the agent, and
swebench's ``run_instance`` to grade the patch. Both sides play the same scripted
agent: ``--steps`` bash commands that read the repo, one that applies the gold patch
with ``git apply``, then submit. Same tasks, same box, same run; per concurrency level
the wall time of ``--waves`` rounds of ``c`` episodes, episodes per hour and the ratio.
Rewards must agree: a side that scores gold patches differently is not measured.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import shlex
import tempfile
import time
from dataclasses import dataclass
from typing import Any, ClassVar

import ray

from swerl.bench._stats import LoadWatch, table
from swerl.env import actions
from swerl.policies.scripted import ScriptedPolicy
from swerl.rollout.runner import RolloutRunner, ensure_ray
from swerl.sandbox.base import OWNER_LABEL, RUN_LABEL, SandboxConfig
from swerl.sandbox.docker import connect, reap
from swerl.tasks.images import build_task_images, task_image_name
from swerl.tasks.instance import Instance
from swerl.tasks.sources import load_tasks

REPO = "/testbed"
SUBMIT = "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT && git add -A && git diff --cached"
"""mini-swe-agent's submit: the marker line, then the patch (its DockerEnvironment raises Submitted)."""


def agent_commands(task: Instance, steps: int) -> list[str]:
    """The scripted agent, as bash commands: look around ``steps`` times, apply the gold patch."""
    from swebench.utils import generate_heredoc_delimiter, get_modified_files

    files = get_modified_files(task.patch) or ["."]
    looks = [
        "ls -la",
        f"cat {shlex.quote(files[0])} | head -80",
        "grep -rn 'def ' --include=*.py . | head -40",
        "git status --short && git log --oneline -3",
        "python3 -c 'import sys; print(sys.version)'",
    ]
    delim = generate_heredoc_delimiter(task.patch)
    apply = f"git apply - <<'{delim}'\n{task.patch.rstrip(chr(10))}\n{delim}"
    return [looks[i % len(looks)] for i in range(steps)] + [apply]


class ScriptedAgent(ScriptedPolicy):
    """swerl's side of the agent: the same commands as bash tool calls, then submit."""

    placement: ClassVar[str] = "actor"

    def __init__(self, steps: int) -> None:
        self.steps = steps

    def script(self, task: Instance, attempt: int) -> list[str]:
        return [*map(actions.bash, agent_commands(task, self.steps)), actions.submit()]


@dataclass
class PeerResult:
    task_id: str
    attempt: int
    reward: float | None
    seconds: float
    error: str = ""


def peer_episode(task: Instance, attempt: int, steps: int, run_id: str, logs: str) -> PeerResult:
    """One trajectory the peer's way (runs in a Ray task): DockerEnvironment, then run_instance."""
    import docker
    from minisweagent.environments.docker import DockerEnvironment
    from minisweagent.exceptions import Submitted

    from swerl.bench.grade import official_grade

    logging.getLogger("minisweagent").setLevel(logging.WARNING)
    t = time.perf_counter()
    labels = ["--label", f"{OWNER_LABEL}=swerl", "--label", f"{RUN_LABEL}={run_id}"]
    env = DockerEnvironment(
        image=task.image or task_image_name(task.instance_id),
        cwd=REPO,
        timeout=120,
        run_args=["--rm", "--network", "none", *labels],
    )
    patch = None
    try:
        for cmd in agent_commands(task, steps):
            env.execute({"command": cmd})
        try:
            env.execute({"command": SUBMIT})
        except Submitted as s:
            patch = s.messages[0]["content"]
    finally:
        env.cleanup()
    if patch is None:
        return PeerResult(task.instance_id, attempt, None, time.perf_counter() - t, "no submission")
    os.makedirs(logs, exist_ok=True)
    os.chdir(logs)  # run_instance writes logs/run_evaluation/... relative to the cwd
    client = docker.from_env(timeout=600)
    try:
        status = official_grade(task, patch, client, f"{run_id}-{attempt}")
    finally:
        client.close()
    reward = {"resolved": 1.0, "unresolved": 0.0}.get(status)
    return PeerResult(
        task.instance_id, attempt, reward, time.perf_counter() - t, "" if reward is not None else status
    )


def run_peer(tasks: list[Instance], attempts: int, c: int, steps: int, run_id: str, logs: str) -> tuple:
    """Every (task, attempt) as one Ray task, at most ``c`` in flight; (wall s, results)."""
    remote = ray.remote(num_cpus=0.01, max_retries=0)(peer_episode)
    jobs = [(task, a) for a in range(attempts) for task in tasks]
    pending, results = [], []
    t = time.perf_counter()
    while jobs or pending:
        while jobs and len(pending) < c:
            task, a = jobs.pop(0)
            pending.append(remote.remote(task, a, steps, run_id, logs))
        done, pending = ray.wait(pending, num_returns=1)
        results.extend(ray.get(done))
    return time.perf_counter() - t, results


def run_swerl(tasks: list[Instance], attempts: int, c: int, steps: int, run_id: str, grading: str) -> tuple:
    """The same episodes through RolloutRunner: c envs over c/8 actors; (wall s, episodes)."""
    actors = max(1, c // 8)
    runner = RolloutRunner(
        tasks,
        ScriptedAgent(steps),
        num_actors=actors,
        envs_per_actor=max(1, c // actors),
        attempts=attempts,
        env_kwargs={
            "sandbox_config": SandboxConfig(run_id=run_id),
            "grading": grading,
            "max_repeats": 0,
            "max_steps": steps + 5,
        },
        run_id=run_id,
        actor_cpus=0.01,
    )
    with runner:
        t = time.perf_counter()
        episodes = list(runner.stream())
        return time.perf_counter() - t, episodes


def _wait_gone(client: Any, run_id: str, timeout: float = 90.0) -> None:
    """Let the peer's background ``docker stop``s finish (then remove stragglers) before the next level."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not client.containers.list(all=True, filters={"label": f"{RUN_LABEL}={run_id}"}):
            break
        time.sleep(1)
    reap(run_id, client=client)
    for ct in client.containers.list(all=True, filters={"name": run_id}):
        with contextlib.suppress(Exception):
            ct.remove(force=True)


def _rewards(items: list[Any]) -> dict[tuple[str, int], float | None]:
    return {(x.task_id, x.attempt): x.reward for x in items}


def compare(
    tasks: list[Instance], levels: list[int], waves: int, steps: int, grading: str = "official"
) -> list[dict[str, Any]]:
    """Run both pipelines at each level; one dict per level (wall times, rewards, ratio)."""
    client = connect(timeout=600)
    build_task_images(tasks, client=client)
    ensure_ray()
    prefix = f"bench-pipe-{os.getpid()}"
    out = []
    with tempfile.TemporaryDirectory(prefix="swerl-bench-pipe-") as logs:
        for c in levels:
            episodes = c * waves
            attempts = max(1, -(-episodes // len(tasks)))
            row: dict[str, Any] = {"c": c, "episodes": attempts * len(tasks)}
            # alternate which side goes first, so drift on a shared box does not favour one
            order = ("swerl", "peer") if len(out) % 2 == 0 else ("peer", "swerl")
            for side in order:
                run_id = f"{prefix}-{side}-c{c}"
                try:
                    if side == "swerl":
                        wall, eps = run_swerl(tasks, attempts, c, steps, run_id, grading)
                    else:
                        wall, eps = run_peer(tasks, attempts, c, steps, run_id, logs)
                finally:
                    _wait_gone(client, run_id)
                row[side] = wall
                print(f"c={c} {side}: {len(eps)} episodes in {wall:.1f} s", flush=True)
                row[f"{side}_rewards"] = _rewards(eps)
            row["ratio"] = row["peer"] / row["swerl"] if row["swerl"] else float("inf")
            graded = None not in row["swerl_rewards"].values()
            row["same"] = graded and row["swerl_rewards"] == row["peer_rewards"]
            if not row["same"]:  # say which episodes differ, so an infra failure is not mistaken for a score
                sw, pe = row["swerl_rewards"], row["peer_rewards"]
                diff = {
                    k: (sw.get(k), pe.get(k)) for k in sorted(set(sw) | set(pe)) if sw.get(k) != pe.get(k)
                }
                print(f"c={c}: rewards differ (swerl, peer): {diff}", flush=True)
            out.append(row)
            print(
                f"c={c}: swerl {row['episodes'] / row['swerl'] * 3600:.0f} ep/h, "
                f"peer {row['episodes'] / row['peer'] * 3600:.0f} ep/h, ratio {row['ratio']:.1f}x",
                flush=True,
            )
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m swerl.bench pipeline", description=__doc__)
    parser.add_argument("--levels", type=int, nargs="+", default=[4, 16, 64], help="concurrent episodes")
    parser.add_argument("--waves", type=int, default=2, help="episodes per level = waves x level")
    parser.add_argument("--steps", type=int, default=10, help="bash steps before the gold patch")
    parser.add_argument("--tasks", default="swerl-mini", help="suite name or task file")
    parser.add_argument("--n", type=int, default=4, help="tasks to cycle through (0: all)")
    parser.add_argument("--grading", default="official", choices=("official", "strict"), help="swerl's mode")
    args = parser.parse_args(argv)
    tasks = load_tasks(args.tasks)[: args.n or None]
    watch = LoadWatch()
    print(f"{len(tasks)} tasks; {args.steps} bash steps + gold patch + submit; {watch.report()}", flush=True)
    rows = compare(tasks, args.levels, args.waves, args.steps, args.grading)
    watch.stop()
    header = [
        "concurrency",
        "episodes",
        "swerl s",
        "swerl ep/h",
        "peer s",
        "peer ep/h",
        "ratio",
        "same rewards",
    ]
    cells = [
        [r["c"], r["episodes"], r["swerl"], r["episodes"] / r["swerl"] * 3600, r["peer"],
         r["episodes"] / r["peer"] * 3600, r["ratio"], "yes" if r["same"] else "NO"]
        for r in rows
    ]  # fmt: skip
    print(table(header, cells))
    print(watch.report())
    big = [r for r in rows if r["c"] >= 16]
    same = all(r["same"] for r in rows)
    if big:
        print(watch.verdict(">= 5x episodes/hour at 16 and 64", same and all(r["ratio"] >= 5 for r in big)))
    if not same:
        print("rewards differ between the pipelines: the comparison does not hold")
    return 0 if same else 1


if __name__ == "__main__":
    raise SystemExit(main())
