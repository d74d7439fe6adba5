"""The start gate: a host-wide bound on concurrent sandbox starts, and what happens when it is full."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
import uuid

import pytest

from swerl.bench.density import limit_of
from swerl.errors import SandboxError
from swerl.policies.scripted import GoldPolicy
from swerl.rollout import RolloutRunner
from swerl.sandbox.base import SandboxConfig
from swerl.sandbox.docker import DockerSandbox, reap
from swerl.sandbox.gate import start_slot


def _scope() -> str:
    return f"test-{uuid.uuid4().hex[:8]}"


def test_gate_bounds_concurrency_across_threads():
    scope, inside, peak, lock = _scope(), [0], [0], threading.Lock()

    def work() -> None:
        with start_slot(2, scope, timeout=30):
            with lock:
                inside[0] += 1
                peak[0] = max(peak[0], inside[0])
            time.sleep(0.05)
            with lock:
                inside[0] -= 1

    threads = [threading.Thread(target=work) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert peak[0] == 2


def test_a_slot_held_by_a_dead_process_is_released():
    scope = _scope()
    holder = subprocess.Popen(
        [sys.executable, "-c", f"from swerl.sandbox.gate import start_slot\nimport time\n"
         f"with start_slot(1, {scope!r}, 5):\n    print('held', flush=True)\n    time.sleep(60)"],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(SandboxError, match="start slots"), start_slot(1, scope, timeout=0.3):
            pass
    finally:
        holder.kill()
        holder.wait()
    with start_slot(1, scope, timeout=5):  # the kernel dropped the dead holder's lock
        pass


def test_a_full_gate_fails_a_start_as_an_infra_error_and_starts_once_free(base_image, run_id, docker_client):
    scope = _scope()
    cfg = SandboxConfig(run_id=run_id, start_gate=1, start_gate_scope=scope, start_timeout=0.5)
    with start_slot(1, scope, timeout=5), pytest.raises(SandboxError, match="start slots") as e:
        DockerSandbox(base_image, cfg).start()
    assert limit_of(str(e.value)) == "dockerd"
    with DockerSandbox(base_image, cfg.replace(start_timeout=60)) as sb:  # free again: it starts
        assert sb.execute("echo ok").output == "ok\n"


def test_episodes_whose_start_is_refused_come_back_as_infra_errors_not_scores(tasks, ray_session):
    scope, rid = _scope(), f"t-gate-{uuid.uuid4().hex[:6]}"
    cfg = SandboxConfig(start_gate=1, start_gate_scope=scope, start_timeout=0.5)
    runner = RolloutRunner(
        tasks[:2], GoldPolicy(), num_actors=1, envs_per_actor=2, attempts=1, max_retries=0,
        env_kwargs={"sandbox_config": cfg}, run_id=rid, actor_cpus=0.01,
    )  # fmt: skip
    try:
        with start_slot(1, scope, timeout=5), runner:
            episodes = runner.run()
        assert sorted(e.task_id for e in episodes) == sorted(t.instance_id for t in tasks[:2])  # none lost
        assert {e.status for e in episodes} == {"infra_error"}
        assert all(e.reward is None and "start slots" in (e.error or "") for e in episodes)
        with RolloutRunner(
            tasks[:2], GoldPolicy(), num_actors=1, envs_per_actor=2, max_retries=0,
            env_kwargs={"sandbox_config": cfg.replace(start_timeout=60)}, run_id=rid + "b", actor_cpus=0.01,
        ) as r:  # fmt: skip
            assert [e.reward for e in r.run()] == [1.0, 1.0]  # gate free: the same episodes resolve
    finally:
        for suffix in ("-a1", "-a2", "b-a1", "b-a2"):
            reap(rid + suffix)
