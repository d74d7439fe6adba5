"""The warm sandbox pool on real Docker: a reset and a grade take pre-started containers,
nothing is left running after close, and the pool's containers carry the run's labels."""

from __future__ import annotations

import time

import pytest

from swerl.env import SWEEnv, actions
from swerl.errors import ConfigError
from swerl.policies.patch_actions import patch_to_actions
from swerl.sandbox import reap
from swerl.sandbox.base import RUN_LABEL, SandboxConfig
from swerl.sandbox.docker import DockerSandbox
from swerl.sandbox.pool import SandboxPool


def _containers(client, run_id: str) -> list:
    return client.containers.list(all=True, filters={"label": f"{RUN_LABEL}={run_id}"})


def _wait_idle(pool: SandboxPool, image: str, n: int = 1, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while pool.idle(image) < n and time.monotonic() < deadline:
        time.sleep(0.05)
    assert pool.idle(image) >= n, pool.last_error


def test_reset_and_grading_take_prestarted_containers(tasks, run_id, docker_client):
    task = tasks[0]
    env = SWEEnv([task], sandbox_config=SandboxConfig(run_id=run_id), pool_size=1, grade_pool_size=1)
    try:
        _wait_idle(env.pool, task.image)
        warm = env.pool._idle_of(task.image)[0]
        env.reset(options={"task": task.instance_id})
        assert env.sandbox is warm and env.pool.stats.hits == 1 and env.pool.stats.misses == 0
        _wait_idle(env.grade_pool, task.image)
        grader = env.grade_pool._idle_of(task.image)[0]
        assert isinstance(grader, DockerSandbox) and grader.container_id
        for action in [*patch_to_actions(task.patch), actions.submit()]:
            _obs, reward, done, trunc, info = env.step(action)
        assert reward == 1.0 and env.grade_pool.stats.hits == 1, info
        assert grader.alive is False  # it graded and was closed, never handed out again
        labels = {c.labels.get(RUN_LABEL) for c in _containers(docker_client, run_id)}
        assert labels == {run_id}
    finally:
        env.close()
    assert _containers(docker_client, run_id) == []


def test_reset_warms_the_next_task_instead_of_its_own(tasks, run_id, docker_client):
    """``next_task`` at reset: the one start the episode pays for is the next episode's sandbox."""
    a, b = tasks[5], tasks[6]  # not among the first four, which the env warms when it starts
    env = SWEEnv(tasks, sandbox_config=SandboxConfig(run_id=run_id), pool_size=1)
    try:
        env.reset(options={"task": a.instance_id, "next_task": b.instance_id})
        assert env.pool.stats.misses == 1  # a was cold
        _wait_idle(env.pool, b.image)
        assert env.pool.idle(a.image) == 0 and not env.pool._pending.get(a.image)  # a not refilled
        warm = env.pool._idle_of(b.image)[0]
        env.reset(options={"task": b.instance_id})
        assert env.sandbox is warm and env.pool.stats.hits == 1
        with pytest.raises(ConfigError, match="nope"):
            env.reset(options={"task": a.instance_id, "next_task": "nope"})
    finally:
        env.close()
    assert _containers(docker_client, run_id) == []


def test_pool_evicts_least_recently_wanted_and_close_leaves_nothing(tasks, run_id, docker_client):
    cfg = SandboxConfig(run_id=run_id)
    a, b = tasks[0].image, tasks[1].image
    pool = SandboxPool(lambda image: DockerSandbox(image, cfg), size=1, max_idle=1)
    pool.prewarm(a)
    _wait_idle(pool, a)
    pool.prewarm(b)  # full: a's idle sandbox is closed for b
    _wait_idle(pool, b)
    assert pool.idle(a) == 0 and pool.stats.evicted == 1
    pool.prewarm(a)  # a start under way when the pool closes is closed too
    pool.close()
    assert _containers(docker_client, run_id) == []


def test_a_full_pool_still_warms_the_image_wanted_last_while_the_others_start(tasks, run_id, docker_client):
    """At the cap with only starts under way (nothing idle to evict), the image wanted last is
    started anyway and the cap is restored when the others arrive, at their expense."""
    cfg = SandboxConfig(run_id=run_id)
    a, b = tasks[0].image, tasks[1].image
    pool = SandboxPool(lambda image: DockerSandbox(image, cfg), size=1, max_idle=1)
    try:
        pool.prewarm(a)
        pool.prewarm(b)  # a is still starting
        _wait_idle(pool, b)
        deadline = time.monotonic() + 120
        while (pool._pending.get(a) or pool.idle(a)) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert pool.idle(a) == 0 and pool.idle() == 1 and pool.stats.evicted == 1
    finally:
        pool.close()
    assert _containers(docker_client, run_id) == []


def test_failed_start_leaks_nothing_and_reap_finds_pool_containers(tasks, run_id, docker_client):
    cfg = SandboxConfig(run_id=run_id)
    pool = SandboxPool(lambda image: DockerSandbox(image, cfg), size=1)
    pool.prewarm("swerl-no-such-image:never")
    deadline = time.monotonic() + 60
    while pool.stats.failed == 0 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert pool.stats.failed == 1 and pool.last_error is not None
    pool.prewarm(tasks[0].image)
    _wait_idle(pool, tasks[0].image)
    assert len(_containers(docker_client, run_id)) == 1
    assert reap("docker", run_id) == 1  # a crashed trainer's warm containers are reaped by run id
    assert _containers(docker_client, run_id) == []
    pool.close()
