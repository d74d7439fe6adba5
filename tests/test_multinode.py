"""A real two-node Ray cluster on this machine (``ray start --head`` + a second raylet).

Drivers run as a user runs them: ``swerl rollout CONFIG ray.address=auto`` in a
subprocess with RAY_ADDRESS (and RAY_AUTH_MODE=token, this Ray's token auth), or
through Ray Jobs. The worker node is killed mid-run by its raylet's pid, then
restarted. Every Ray process here is ended by pid; ``ray stop`` would end the
other Rays on the machine.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
import yaml

from swerl.cluster.local_ray import LocalRayCluster
from swerl.errors import InfraError
from swerl.rollout.episode import JsonlSink
from swerl.sandbox.base import OWNER_LABEL, RUN_LABEL

ROOT = Path(__file__).resolve().parent.parent
PORT, DASHBOARD_PORT = 28400, 28300
"""Head block 28400-29399, worker 29400-30399: clear of the Slurm tests' 23000-25999."""


@pytest.fixture(scope="module")
def cluster(tasks):
    """Head (2 CPUs, resource ``head``) + worker (2 CPUs, resource ``worker``), shared by the module."""
    path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    bin_path = os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])
    c = LocalRayCluster(PORT, DASHBOARD_PORT, env={"PYTHONPATH": path, "PATH": bin_path})
    try:
        c.start()
        c.add_node("worker")
        yield c
    finally:
        c.stop()


def driver_env(cluster: LocalRayCluster) -> dict[str, str]:
    """What a user's shell holds: RAY_ADDRESS, RAY_AUTH_MODE, swerl on PATH (as the nodes have)."""
    return {**cluster.node_env(), "RAY_ADDRESS": cluster.address}


def write_config(path: Path, name: str, **extra) -> Path:
    data = {
        "name": name,
        "tasks": "swerl-mini",
        "output_dir": str(path / name),
        "policy": {"name": "gold"},
        "rollout": {"num_actors": 2, "envs_per_actor": 2, "placement": "spread"},
        "ray": {"address": "auto"},
        **extra,
    }
    cfg = path / f"{name}.yaml"
    cfg.write_text(yaml.safe_dump(data))
    return cfg


def rollout(cluster, cfg: Path, *overrides: str) -> subprocess.Popen:
    argv = [sys.executable, "-m", "swerl.cli", "rollout", str(cfg), *overrides]
    return subprocess.Popen(argv, env=driver_env(cluster), stdout=subprocess.PIPE, stderr=subprocess.STDOUT)


def finish(proc: subprocess.Popen, timeout: float = 300) -> str:
    try:
        out, _ = proc.communicate(timeout=timeout)
    finally:
        proc.kill()
    text = out.decode(errors="replace")
    assert proc.returncode == 0, text[-4000:]
    return text


def leftovers(docker_client, prefix: str) -> list:
    found = docker_client.api.containers(all=True, filters={"label": [f"{OWNER_LABEL}=swerl"]})
    return [c for c in found if c["Labels"].get(RUN_LABEL, "").startswith(prefix)]


def reap_prefix(docker_client, prefix: str, settle: float = 0.0) -> None:
    """Remove the run's containers; with ``settle``, again until none appeared for that long
    (actors of a stopped job may still be starting sandboxes)."""
    quiet_since = time.monotonic()
    while True:
        found = leftovers(docker_client, prefix)
        for c in found:
            docker_client.api.remove_container(c["Id"], force=True)
        if found:
            quiet_since = time.monotonic()
        if time.monotonic() - quiet_since >= settle:
            return
        time.sleep(1)


def test_rollout_spreads_actors_over_both_nodes(cluster, tmp_path, suite, docker_client):
    cfg = write_config(tmp_path, "mn-spread")
    try:
        finish(rollout(cluster, cfg))
    finally:
        reap_prefix(docker_client, "mn-spread-")
    episodes = list(JsonlSink.read(tmp_path / "mn-spread" / "episodes.jsonl"))
    assert sorted(e.task_id for e in episodes) == sorted(t.instance_id for t in suite)
    assert {e.status for e in episodes} == {"resolved"}
    nodes = {e.where["actor"]: e.where["ray_node"] for e in episodes}
    assert sorted(nodes.values()) == ["head", "worker"]  # one actor per node
    summary = json.loads((tmp_path / "mn-spread" / "summary.json").read_text())
    assert set(summary["nodes"]) == {"head", "worker"} and sum(summary["nodes"].values()) == len(suite)
    assert summary["retried_node_died"] == 0 and summary["node_failures"] == []
    print(f"\nplacement: {summary['nodes']}")


def test_worker_node_dies_mid_run_then_rejoins(cluster, tmp_path, suite, docker_client):
    eight = suite[:8]
    cfg = write_config(tmp_path, "mn-kill", task_ids=[t.instance_id for t in eight])
    out = tmp_path / "mn-kill"
    try:
        proc = rollout(cluster, cfg)
        sink = out / "episodes.jsonl"
        deadline = time.monotonic() + 240
        while not (sink.exists() and sink.read_text().count("\n") >= 1):
            assert proc.poll() is None, proc.stdout.read().decode(errors="replace")[-4000:]
            assert time.monotonic() < deadline, "no episode finished"
            time.sleep(0.2)
        killed_at = time.time()
        cluster.kill_raylet("worker")
        log = finish(proc)
        assert not leftovers(docker_client, "mn-kill-"), "the dead node's sandboxes were not reaped"
    finally:
        reap_prefix(docker_client, "mn-kill-")

    episodes = list(JsonlSink.read(sink))
    keys = Counter(e.key for e in episodes)
    assert sorted(keys) == sorted((t.instance_id, 0) for t in eight) and set(keys.values()) == {1}
    assert {e.status for e in episodes} == {"resolved"}
    summary = json.loads((out / "summary.json").read_text())
    (failure,) = summary["node_failures"]
    assert failure["node"] == "worker" and failure["episodes_retried"] == summary["retried_node_died"] >= 1
    assert "node worker died" in log
    # Ray's driver prints the dead raylet's last log lines (~20 "[state-dump]" lines per actor):
    # only its one-line reason gets through
    assert "[state-dump]" not in log
    assert "Raylet is terminated" not in log or "state dump left out" in log
    retried = [e for e in episodes if e.retries]
    assert len(retried) >= summary["retried_node_died"] and {e.where["ray_node"] for e in retried} == {"head"}
    print(
        f"\nnode death: detected {failure['detected_at'] - killed_at:.2f} s after the kill, "
        f"{summary['retried_node_died']} episode(s) retried on the head, lost 0, duplicated 0, "
        f"placement {summary['nodes']}, the retried ones took {max(e.timings['total'] for e in retried):.1f} s at most"
    )

    # The node comes back (a new raylet, a new node id): new actors land on it again. First the
    # GCS marks the old node dead: until then Ray may still place actors on it, the window the
    # next test covers (here the run started in it would pick between three nodes, not two).
    cluster.stop_node("worker")
    deadline = time.monotonic() + 120
    while ray_list(cluster, "nodes", f"node_id={failure['node_id']}")[0]["state"] != "DEAD":
        assert time.monotonic() < deadline, "the GCS never marked the killed node dead"
        time.sleep(1)
    cluster.add_node("worker")
    again = write_config(tmp_path, "mn-rejoin", task_ids=[t.instance_id for t in suite[:2]])
    try:
        finish(rollout(cluster, again, "rollout.envs_per_actor=1"))  # one task per actor
    finally:
        reap_prefix(docker_client, "mn-rejoin-")
    rejoined = list(JsonlSink.read(tmp_path / "mn-rejoin" / "episodes.jsonl"))
    on_worker = {e.where["ray_node_id"] for e in rejoined if e.where["ray_node"] == "worker"}
    assert on_worker and failure["node_id"] not in on_worker


def ray_list(cluster: LocalRayCluster, what: str, *filters: str) -> list[dict]:
    """``ray list WHAT --detail`` from the cluster's state API, as a user's shell asks it."""
    argv = [str(Path(sys.executable).parent / "ray"), "list", what, "--address", cluster.dashboard_url]
    argv += ["--format", "json", "--detail", *(x for f in filters for x in ("--filter", f))]
    r = subprocess.run(argv, env=driver_env(cluster), capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    return [] if r.stdout.startswith("No resource") else json.loads(r.stdout)


def test_actors_being_created_on_a_dying_node_start_on_a_live_one(cluster, tmp_path, suite, docker_client):
    """The window that failed the rejoin run, made on purpose. Until the GCS marks a dead node
    dead (~15 s of missed health checks), Ray still places actors on it; those never run, and
    die with the node. The worker's raylet is frozen (the GCS counts it alive, so SPREAD places
    actors there), then killed once an actor is being created on it: the run must start that
    actor on the head, finish every episode once, and record the node's death."""
    four = suite[:4]
    (worker,) = ray_list(cluster, "nodes", "node_name=worker", "state=ALIVE")
    cfg = write_config(
        tmp_path,
        "mn-start",
        task_ids=[t.instance_id for t in four],
        rollout={"num_actors": 4, "envs_per_actor": 1, "placement": "spread"},
    )
    out = tmp_path / "mn-start"
    try:
        cluster.freeze_raylet("worker")
        proc = rollout(cluster, cfg)
        deadline = time.monotonic() + 240
        while True:
            assert proc.poll() is None, proc.stdout.read().decode(errors="replace")[-4000:]
            assert time.monotonic() < deadline, "the run's actors were never placed"
            # (a pending actor has no node in the state API: one up on the head while another
            # is still pending means SPREAD has placed them, the pending ones on the frozen node)
            states = Counter(a["state"] for a in ray_list(cluster, "actors", "class_name=EnvActorImpl"))
            if states["ALIVE"] and states["PENDING_CREATION"]:
                break
            time.sleep(0.5)
        killed_at = time.monotonic()
        cluster.kill_raylet("worker")  # the node dies while actors are being created on it
        log = finish(proc)
        took = time.monotonic() - killed_at
    finally:
        reap_prefix(docker_client, "mn-start-")
        with contextlib.suppress(InfraError):  # not frozen forever if the test failed before the kill
            cluster.kill_raylet("worker")
        cluster.stop_node("worker")
        cluster.add_node("worker")  # the next tests get their two nodes back

    episodes = list(JsonlSink.read(out / "episodes.jsonl"))
    keys = Counter(e.key for e in episodes)
    assert sorted(keys) == sorted((t.instance_id, 0) for t in four) and set(keys.values()) == {1}
    assert {e.status for e in episodes} == {"resolved"}
    assert {e.where["ray_node"] for e in episodes} == {"head"}
    summary = json.loads((out / "summary.json").read_text())
    (failure,) = summary["node_failures"]
    assert failure["node_id"] == worker["node_id"] and failure["node"] == "worker"
    assert failure["actors_replaced"] == summary["actors_replaced_node_died"] >= 1
    assert failure["episodes_retried"] == summary["retried_node_died"] == 0  # none had been given one
    assert "actor(s) being created on it started on other nodes" in log
    print(
        f"\ndeath during start: {summary['actors_replaced_node_died']} actor(s) replaced on the head, "
        f"run done {took:.1f} s after the kill, placement {summary['nodes']}"
    )


# ----------------------------------------------------------------- Ray Jobs
def run(argv: list[str], env: dict[str, str], cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run(argv, env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout)


def test_ray_job_submit_runs_swerl_rollout(cluster, tmp_path, suite, docker_client):
    """`ray job submit --working-dir . -- swerl rollout CONFIG`, exactly as Ray's docs have it."""
    one = [suite[0].instance_id]
    write_config(tmp_path, "mn-job", task_ids=one, ray={"address": None}, rollout={"num_actors": 1})
    ray_cli = [str(Path(sys.executable).parent / "ray"), "job", "submit", "--address", cluster.dashboard_url]
    try:
        r = run(
            [*ray_cli, "--working-dir", ".", "--", "swerl", "rollout", "mn-job.yaml"],
            driver_env(cluster),
            tmp_path,
        )
        failed = run([*ray_cli, "--", "swerl", "rollout", "no-such.yaml"], driver_env(cluster), tmp_path)
    finally:
        reap_prefix(docker_client, "mn-job-")
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert "succeeded" in r.stdout + r.stderr and "resolved reward=1.0" in r.stdout  # the job's log, streamed
    summary = json.loads((tmp_path / "mn-job" / "summary.json").read_text())
    assert summary["per_task"] == dict.fromkeys(one, 1.0)
    assert failed.returncode != 0 and "no-such.yaml does not exist" in failed.stdout + failed.stderr


def test_swerl_cluster_ray_submit_logs_stop(cluster, tmp_path, suite, docker_client):
    one = [suite[1].instance_id]
    write_config(tmp_path, "mn-submit", ray={"address": None}, rollout={"num_actors": 1})
    swerl = [sys.executable, "-m", "swerl.cli", "cluster", "ray"]
    env = {**driver_env(cluster), "RAY_ADDRESS": cluster.dashboard_url}
    try:
        r = run([*swerl, "submit", "mn-submit.yaml", f"task_ids={json.dumps(one)}", "--wait"], env, tmp_path)
        assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
        job = r.stdout.split()[0]
        assert "resolved reward=1.0" in r.stdout and f"job {job} SUCCEEDED" in r.stderr
        summary = json.loads((tmp_path / "mn-submit" / "summary.json").read_text())
        assert summary["per_task"] == dict.fromkeys(one, 1.0)
        logs = run([*swerl, "logs", job], env, tmp_path)
        assert logs.returncode == 0 and "swerl__" in logs.stdout and "mean reward 1.000" in logs.stdout

        long = run([*swerl, "submit", "mn-submit.yaml", "output_dir=mn-stopped"], env, tmp_path)
        assert long.returncode == 0, long.stderr[-3000:]
        job = long.stdout.split()[0]
        stop = run([*swerl, "stop", job], env, tmp_path)
        assert stop.returncode == 0 and stop.stdout.split() == [job, "STOPPED"], stop.stdout + stop.stderr
        missing = run([*swerl, "logs", "no-such-job"], env, tmp_path)
        assert missing.returncode == 3 and "Ray job API" in missing.stderr
    finally:
        reap_prefix(docker_client, "mn-submit-", settle=5)
