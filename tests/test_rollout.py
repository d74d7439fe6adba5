"""Ray rollouts on real Ray and real Docker over the bundled suite."""

from __future__ import annotations

import dataclasses
import os
import signal
import threading
import time

import pytest
import ray

from swerl.episode import JsonlSink
from swerl.policies.base import Decision
from swerl.policies.scripted import GoldPolicy, NoOpPolicy, ReplayPolicy
from swerl.rollout import RolloutRunner
from swerl.rollout.trainer import train_toy
from swerl.sandbox.base import RUN_LABEL, SandboxConfig


def containers_of(docker_client, run_id: str) -> list:
    return docker_client.api.containers(all=True, filters={"label": [f"{RUN_LABEL}={run_id}"]})


def swerl_containers_with_prefix(docker_client, prefix: str) -> list:
    return [
        c
        for c in docker_client.api.containers(all=True, filters={"label": ["swerl.owner=swerl"]})
        if c["Labels"].get(RUN_LABEL, "").startswith(prefix)
    ]


@pytest.mark.parametrize("placement", ["actor", "driver"])
def test_gold_resolves_every_task_and_noop_none(ray_session, tasks, placement, docker_client):
    with RolloutRunner(
        tasks, GoldPolicy(placement), num_actors=2, envs_per_actor=2, run_id=f"t-gold-{placement}"
    ) as r:
        gold = r.run()
    assert sorted(e.task_id for e in gold) == sorted(t.instance_id for t in tasks)
    assert {e.status for e in gold} == {"resolved"} and all(e.reward == 1.0 for e in gold)
    assert all(e.where["actor"].startswith(f"t-gold-{placement}") and e.steps for e in gold)
    with RolloutRunner(tasks[:4], NoOpPolicy(placement), num_actors=1, envs_per_actor=2) as r:
        noop = r.run()
    assert [e.reward for e in noop] == [0.0] * 4 and {e.status for e in noop} == {"empty_patch"}
    assert swerl_containers_with_prefix(docker_client, f"t-gold-{placement}") == []


class SlowOnFirstTask(GoldPolicy):
    """Gold, but the first task's first action sleeps, so it must finish last."""

    def __init__(self, slow_task: str) -> None:
        super().__init__("actor")
        self.slow_task = slow_task

    def start(self, task, attempt):
        if task.instance_id == self.slow_task:
            time.sleep(6)
        return super().start(task, attempt)


def test_episodes_arrive_in_completion_order(ray_session, tasks):
    slow = tasks[0].instance_id
    with RolloutRunner(tasks[:4], SlowOnFirstTask(slow), num_actors=2, envs_per_actor=2) as r:
        order = [e.task_id for e in r.stream()]
    assert order[-1] == slow and order[0] != slow


def test_groups_are_complete(ray_session, tasks):
    with RolloutRunner(tasks[:3], GoldPolicy(), num_actors=2, envs_per_actor=2, attempts=3, group=True) as r:
        groups = list(r.stream())
    assert len(groups) == 3
    for g in groups:
        assert [e.attempt for e in g] == [0, 1, 2] and len({e.task_id for e in g}) == 1


@pytest.mark.parametrize("pool", [0, 1])
def test_killing_an_actor_mid_run_loses_nothing(ray_session, tasks, docker_client, pool):
    run_id = f"t-kill-{pool}"  # with a pool, the dead actor's reserved next items are run elsewhere
    runner = RolloutRunner(
        tasks[:6], GoldPolicy(), num_actors=2, envs_per_actor=2, run_id=run_id, env_kwargs={"pool_size": pool}
    )
    with runner:
        victim_pid = ray.get(next(iter(runner._actors.values())).where.remote())["pid"]
        killer = threading.Timer(1.0, lambda: os.kill(victim_pid, signal.SIGKILL))
        killer.start()
        episodes = runner.run()
        killer.join()
    keys = sorted(e.key for e in episodes)
    assert keys == sorted((t.instance_id, 0) for t in tasks[:6])  # each exactly once
    assert all(e.status == "resolved" for e in episodes)
    assert runner.stats["actors_died"] == 1
    assert swerl_containers_with_prefix(docker_client, run_id) == []


@pytest.mark.parametrize("placement", ["actor", "driver"])
def test_warm_pool_starts_each_slots_next_episode_during_the_current_one(ray_session, tasks, placement):
    """With a warm pool the runner reserves each slot's next item and its env starts that
    sandbox meanwhile: every reset after a slot's first takes a started sandbox."""
    work = tasks[4:10]  # six images, two slots: each slot runs three in a row
    with RolloutRunner(
        work, GoldPolicy(placement), num_actors=1, envs_per_actor=2, env_kwargs={"pool_size": 1}
    ) as r:
        episodes = r.run()
        stats = ray.get(next(iter(r._actors.values())).pool_stats.remote())["agent"]
    assert sorted(e.task_id for e in episodes) == sorted(t.instance_id for t in work)
    assert {e.status for e in episodes} == {"resolved"}
    # the envs warm work[:4] when they start, so a slot's first episode hits too; refilling the
    # current image instead (no reservation) would miss work[4:]. Only an item one slot took
    # from another's reservation (nothing else left to run) may start cold.
    assert stats["hits"] + stats["misses"] == len(work)
    assert stats["misses"] <= r.stats["reservations_taken"], (stats, dict(r.stats))


def test_resume_skips_completed_episodes(ray_session, tasks, tmp_path):
    sink = tmp_path / "episodes.jsonl"
    runner = RolloutRunner(tasks[:6], GoldPolicy(), num_actors=1, envs_per_actor=2, sink=sink)
    with runner:
        stream = runner.stream()
        first = [next(stream), next(stream)]
        stream.close()  # interrupted: the runner cleans up
    assert len(list(JsonlSink.read(sink))) == 2
    with RolloutRunner(tasks[:6], GoldPolicy(), num_actors=1, envs_per_actor=2, sink=sink) as again:
        rest = again.run()
    assert {e.key for e in rest}.isdisjoint({e.key for e in first})
    assert sorted(e.key for e in JsonlSink.read(sink)) == sorted((t.instance_id, 0) for t in tasks[:6])


def test_sink_survives_a_partial_last_line(tmp_path, tasks):
    from swerl.episode import Episode

    path = tmp_path / "e.jsonl"
    with JsonlSink(path) as s:
        s.write(Episode("a", 0, status="resolved", reward=1.0))
    with path.open("a") as f:
        f.write('{"task_id": "b", "attem')  # a driver killed mid-write
    assert [e.task_id for e in JsonlSink.read(path)] == ["a"]
    with JsonlSink(path) as s:
        s.write(Episode("c", 0, status="resolved", reward=1.0))
    assert [e.task_id for e in JsonlSink.read(path)] == ["a", "c"]


class KillsItsSandboxes(GoldPolicy):
    """Kills its run's containers before each episode's first action, from the driver: a sandbox
    lost mid-episode (an OOM kill, a restarted daemon), the infra error a retry is for."""

    placement = "driver"

    def __init__(self, docker_client, run_id: str) -> None:
        self.docker_client, self.run_id = docker_client, run_id

    def act(self, state, observation):
        if state.i == 0:
            for c in swerl_containers_with_prefix(self.docker_client, self.run_id):
                if c["State"] == "running":
                    self.docker_client.api.kill(c["Id"])
        return super().act(state, observation)


def test_infra_errors_are_retried_then_reported_never_zero(ray_session, tasks, docker_client):
    policy = KillsItsSandboxes(docker_client, "t-killed")
    with RolloutRunner(
        tasks[:1], policy, num_actors=2, max_retries=2, retry_delay=0.1, run_id="t-killed"
    ) as r:
        (ep,) = r.run()
    assert ep.status == "infra_error" and ep.reward is None and ep.retries == 2
    assert ep.error and "ImageMissing" not in ep.error
    assert r.stats["retried"] == 2


def test_a_missing_image_is_reported_at_once_not_retried(ray_session, tasks):
    broken = [dataclasses.replace(t, image="swerl-missing:nope") for t in tasks[:1]]
    with RolloutRunner(broken, GoldPolicy(), num_actors=2, max_retries=2) as r:
        (ep,) = r.run()
    assert ep.status == "infra_error" and ep.reward is None and ep.retries == 0
    assert "ImageMissing" in ep.error and "swerl tasks build-images" in ep.error
    assert r.stats["retried"] == 0


def test_an_actor_that_cannot_start_fails_the_start_at_once(ray_session, tasks):
    """Only an actor that died with its node is started again (tests/test_multinode.py): one
    whose own ``__init__`` fails (here its env's settings) fails the start at once, with the
    cause, and nothing replaces it."""
    r = RolloutRunner(tasks[:1], GoldPolicy(), num_actors=2, env_kwargs={"max_stepz": 5}, run_id="t-badstart")
    t0 = time.monotonic()
    try:
        with pytest.raises(ray.exceptions.RayActorError, match="unknown SWEEnv limit") as e:
            r.start()
    finally:
        r.close()
    assert e.value.actor_init_failed and time.monotonic() - t0 < 60
    assert r.stats["actors_died"] == 0 and r.stats["actors_replaced_node_died"] == 0 and not r.node_failures


def test_replay_reissues_recorded_actions(ray_session, tasks):
    with RolloutRunner(tasks[:2], GoldPolicy(), num_actors=1, envs_per_actor=2) as r:
        recorded = r.run()
    with RolloutRunner(tasks[:2], ReplayPolicy(recorded), num_actors=1, envs_per_actor=2) as r:
        replayed = r.run()
    by_key = {e.key: e for e in recorded}
    for e in replayed:
        assert [s.action for s in e.steps] == [s.action for s in by_key[e.key].steps]
        assert [s.observation for s in e.steps][:-1] == [s.observation for s in by_key[e.key].steps][:-1]
        assert e.status == "resolved"


def test_toy_trainer_reward_goes_up(ray_session, tasks):
    learnable = [
        t for t in tasks if t.instance_id in {"swerl__intervals-1", "swerl__tinyconf-2", "swerl__tinyconf-3"}
    ]
    curve = train_toy(learnable + tasks[:1], iterations=3, group_size=4, num_actors=2, envs_per_actor=2)
    assert curve[-1] > curve[0] + 0.2, curve


def test_actor_policy_info_is_recorded(ray_session, tasks):
    class Tagging(GoldPolicy):
        def act(self, state, observation):
            d = super().act(state, observation)
            return Decision(d.action, {"tokens": [1, 2, 3], "logprob": -0.5})

    with RolloutRunner(tasks[:1], Tagging(), num_actors=1) as r:
        (ep,) = r.run()
    assert ep.steps[0].policy == {"tokens": [1, 2, 3], "logprob": -0.5}


def test_sandboxes_carry_the_actor_run_id(ray_session, tasks, docker_client):
    cfg = SandboxConfig(timeout=30)
    with RolloutRunner(
        tasks[:1], NoOpPolicy(), num_actors=1, env_kwargs={"sandbox_config": cfg}, run_id="t-label"
    ) as r:
        (ep,) = r.run()
    assert ep.where["actor"] == "t-label-a1"
    assert containers_of(docker_client, "t-label-a1") == []


def test_step_many_steps_each_env_in_one_call_and_isolates_a_failure(ray_session, tasks, docker_client):
    from swerl.env import actions
    from swerl.rollout.actor import EnvActor

    actor = EnvActor.options(num_cpus=0.1, max_concurrency=6).remote(tasks[:1], 2, "t-stepmany", {})
    try:
        for slot in (0, 1):
            ray.get(actor.reset.remote(slot, tasks[0].instance_id, slot))
        (obs0, info0), (obs1, info1) = ray.get(
            actor.step_many.remote(
                [(0, actions.bash("echo env-zero"), None), (1, actions.bash("echo env-one"), {"k": 1})]
            )
        )
        assert "env-zero" in obs0 and "env-one" in obs1 and not info0["done"] and not info1["done"]
        # slot 7 does not exist: its reply carries the trace, the other env still steps
        (bad_obs, bad), (obs, ok) = ray.get(
            actor.step_many.remote(
                [(7, actions.bash("echo never"), None), (1, actions.bash("echo still"), None)]
            )
        )
        assert bad["done"] and "IndexError" in bad["exception"] and bad_obs == ""
        assert "still" in obs and "exception" not in ok
    finally:
        ray.get(actor.close.remote())
        ray.kill(actor)
    assert containers_of(docker_client, "t-stepmany") == []
