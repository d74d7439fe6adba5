"""Ray on Slurm for real: sbatch jobs on the local one-node cluster start Ray and run a rollout.

The rewards a job writes must equal those of the same tasks and policy on local Docker.
"""

from __future__ import annotations

import math
import shutil
import subprocess
import time

import pytest
import yaml
from enroot_double import DOUBLE

from swerl.cli import main
from swerl.cluster.slurm import render_script
from swerl.config import load_config
from swerl.env.swe_env import SWEEnv
from swerl.policies.scripted import GoldPolicy
from swerl.sandbox.base import OWNER_LABEL, RUN_LABEL
from swerl.tasks.instance import select
from swerl.tasks.sources import load_tasks

TASK_IDS = ["swerl__textkit-1", "swerl__intervals-1", "swerl__tinyconf-1"]

pytestmark = pytest.mark.slurm


@pytest.fixture(scope="module")
def slurm():
    if not shutil.which("sbatch"):
        pytest.skip("Slurm is not installed (python3 -m swerl.bootstrap test sets it up)")
    subprocess.run(["scontrol", "ping"], check=True, capture_output=True, timeout=30)


def write_config(tmp_path, name: str, port: int, backend: dict, **extra) -> str:
    data = {
        "name": name,
        "tasks": "swerl-mini",
        "task_ids": TASK_IDS,
        "output_dir": str(tmp_path / "out"),
        "backend": backend,
        "policy": {"name": "gold"},
        "rollout": {"num_actors": 1, "envs_per_actor": 3},
        "slurm": {"nodes": 1, "cpus_per_task": 1, "time": "00:05:00", "ray_port": port, "join_timeout": 60},
    }
    data["slurm"] |= extra.pop("slurm", {})
    data |= extra
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data))
    return str(path)


def run_job(path: str, capsys, docker_client, prefix: str) -> tuple[str, dict]:
    log, episodes = run_job_episodes(path, capsys, docker_client, prefix)
    return log, {e["task_id"]: e["reward"] for e in episodes}


def run_job_episodes(
    path: str, capsys, docker_client, prefix: str, timeout: int = 120
) -> tuple[str, list[dict]]:
    """sbatch through the CLI and wait; whatever happens, cancel the job and reap its sandboxes."""
    job_id = ""
    try:
        rc = main(["cluster", "slurm", "submit", path, "--wait", "--timeout", str(timeout)])
        job_id = capsys.readouterr().out.split()[0]
        cfg = load_config(path)
        job_log = cfg.out / f"slurm-{job_id}.out"
        log = job_log.read_text(errors="replace") if job_log.exists() else "(no job log: it never started)"
        assert rc == 0, log[-3000:]
        return log, [yaml.safe_load(line) for line in (cfg.out / "episodes.jsonl").read_text().splitlines()]
    finally:
        if job_id:
            subprocess.run(["scancel", job_id], capture_output=True)
            leftover = subprocess.run(["pgrep", "-f", f"/tmp/swerl-ray-{job_id}"], capture_output=True)
            assert leftover.returncode == 1, f"the job's Ray is still running: {leftover.stdout!r}"
        for c in docker_client.api.containers(all=True, filters={"label": [f"{OWNER_LABEL}=swerl"]}):
            if c["Labels"].get(RUN_LABEL, "").startswith(prefix):
                docker_client.api.remove_container(c["Id"], force=True)


@pytest.fixture(scope="module")
def local_docker_rewards(task_images, run_id):
    """The same tasks with the gold policy on local Docker, without Slurm or Ray."""
    from swerl.sandbox.base import SandboxConfig

    tasks = select(load_tasks("swerl-mini"), TASK_IDS)
    env = SWEEnv(tasks, sandbox_config=SandboxConfig(run_id=run_id))
    rewards = {}
    try:
        for task in tasks:
            env.reset(options={"task": task.instance_id})
            for action in GoldPolicy().script(task, 0):
                _obs, reward, terminated, truncated, _info = env.step(action)
                if terminated or truncated:
                    break
            rewards[task.instance_id] = reward
    finally:
        env.close()
    assert rewards == dict.fromkeys(TASK_IDS, 1.0)
    return rewards


def test_script_starts_head_then_workers_then_the_rollout(tmp_path):
    path = write_config(tmp_path, "render", 23000, {"name": "docker"})
    cfg = load_config(path, ["slurm.nodes=3", "slurm.partition=gpu"])
    script = render_script(cfg, path, ["slurm.nodes=3"])
    assert "#SBATCH --nodes=3" in script and "#SBATCH --partition=gpu" in script
    head = script.index("start --head")
    workers = script.index('start --address="$addr"')
    rollout = script.index("-m swerl.cli rollout")
    assert head < workers < rollout
    assert "--block" in script and "--port=23001" not in script and "--node-manager-port=23001" in script
    assert "wait-nodes" in script and 'ray.address="$addr"' in script
    assert "ray stop" not in script.replace("never `ray stop`", "")


def test_sbatch_rollout_on_docker_matches_local_docker(
    slurm, tmp_path, capsys, docker_client, local_docker_rewards
):
    path = write_config(tmp_path, "slurm-docker", 23000, {"name": "docker"})
    log, rewards = run_job(path, capsys, docker_client, "slurm-docker-")
    assert "Ray head on" in log and "rollout exited 0" in log
    assert rewards == local_docker_rewards


def test_sbatch_rollout_on_enroot_matches_local_docker(
    slurm, tmp_path, capsys, docker_client, local_docker_rewards, enroot_double
):
    root = tmp_path / "enroot"
    backend = {"name": "enroot", "options": {"enroot": str(DOUBLE), "root": str(root)}}
    path = write_config(tmp_path, "slurm-enroot", 25000, backend)
    _log, rewards = run_job(path, capsys, docker_client, "slurm-enroot-")
    assert rewards == local_docker_rewards
    assert not [p for p in (root / "data").iterdir() if not p.name.startswith(".")]  # all removed


@pytest.fixture(scope="module")
def two_slurm_nodes(slurm) -> list[str]:
    out = subprocess.run(["sinfo", "-h", "-N", "-o", "%N %t"], capture_output=True, text=True).stdout
    idle = [n for n, state in (line.split() for line in out.splitlines()) if state in ("idle", "mix")]
    if len(idle) < 2:
        pytest.skip(f"needs two Slurm nodes (python3 -m swerl.bootstrap test sets them up): {out!r}")
    return idle


def test_sbatch_rollout_spans_two_slurm_nodes(
    two_slurm_nodes, tmp_path, capsys, docker_client, local_docker_rewards
):
    """Two node names on this machine (slurmd -N): the Ray head on one, a worker on the other."""
    path = write_config(
        tmp_path,
        "slurm-2nodes",
        26000,
        {"name": "docker"},
        rollout={"num_actors": 2, "envs_per_actor": 2, "placement": "spread"},
        slurm={"nodes": 2, "ports_per_node": 1000},  # both nodes are this machine: a port block each
    )
    script = render_script(load_config(path), path)
    assert "base=$((port + i * 1000))" in script
    (worker,) = [line for line in script.splitlines() if 'start --address="$addr"' in line]
    assert "--include-dashboard" not in worker  # a head-only flag: the worker's ray start refuses it
    # the job waits for both nodes to be free (other jobs may hold one): a longer timeout
    log, episodes = run_job_episodes(path, capsys, docker_client, "slurm-2nodes-", timeout=300)
    assert "2 Ray node(s) joined" in log
    assert {e["task_id"]: e["reward"] for e in episodes} == local_docker_rewards
    assert {e["where"]["ray_node"] for e in episodes} == set(two_slurm_nodes[:2])  # Slurm's node names


def test_attach_runs_inside_salloc_and_refuses_outside(slurm, tmp_path, monkeypatch, docker_client):
    path = write_config(tmp_path, "slurm-attach", 24000, {"name": "docker"})
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    assert main(["cluster", "slurm", "attach", path]) == 2
    r = subprocess.run(
        [
            *("salloc", "--nodes=1", "--cpus-per-task=1", "--time=5"),
            *(
                "python3",
                "-m",
                "swerl.cli",
                "cluster",
                "slurm",
                "attach",
                path,
                "task_ids=[swerl__textkit-1]",
            ),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    summary = yaml.safe_load((tmp_path / "out" / "summary.json").read_text())
    assert summary["per_task"] == {"swerl__textkit-1": 1.0} and not math.isnan(summary["mean_reward"])


# ------------------------------------------- requests checked against sinfo, waits that say why
def _max_cpus() -> int:
    out = subprocess.run(["sinfo", "-h", "-N", "-o", "%c"], capture_output=True, text=True, check=True).stdout
    return max(int(c.rstrip("+")) for c in out.split())


def test_impossible_cpus_fail_before_sbatch_naming_the_sinfo_limit(slurm, tmp_path, capsys):
    cpus = _max_cpus()
    path = write_config(tmp_path, "too-big", 23000, {"name": "docker"}, slurm={"cpus_per_task": cpus + 2})
    assert main(["cluster", "slurm", "submit", path, "--wait"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""  # no job id: nothing was submitted
    assert f"slurm.cpus_per_task={cpus + 2}" in captured.err
    assert f"at most {cpus} CPUs per node: lower slurm.cpus_per_task" in captured.err
    assert not (tmp_path / "out" / "slurm-job.sh").exists()
    path = write_config(tmp_path, "too-many", 23000, {"name": "docker"}, slurm={"nodes": 99})
    assert main(["cluster", "slurm", "submit", path]) == 2
    err = capsys.readouterr().err
    assert "slurm.nodes=99" in err and "can never run" in err and "node(s): lower slurm.nodes" in err


def test_shipped_slurm_config_fits_this_cluster(slurm):
    from swerl.cluster.slurm import check_request
    from swerl.config import CONFIGS_DIR

    check_request(load_config(CONFIGS_DIR / "slurm-enroot.yaml"))  # raises if it could never run


def test_wait_prints_state_and_reason_and_gives_up_on_a_job_that_can_never_start(slurm, tmp_path):
    """A held job (JobHeldUser) is shown waiting; asked for more CPUs than any node has, it pends
    with BadConstraints forever: the wait cancels it and says so."""
    from swerl.cluster.slurm import job_state, wait_job
    from swerl.errors import ConfigError

    job = subprocess.run(
        ["sbatch", "--parsable", "--hold", f"--output={tmp_path}/%j.out", "--wrap", "true"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    lines: list[str] = []

    def log(line: str) -> None:
        lines.append(line)
        if "JobHeldUser" in line:  # now make it impossible, and let it go
            subprocess.run(
                ["scontrol", "update", f"jobid={job}", f"MinCPUsNode={_max_cpus() + 2}"], check=True
            )
            subprocess.run(["scontrol", "release", job], check=True)

    try:
        with pytest.raises(ConfigError, match=rf"job {job} can never start: BadConstraints .*cancelled it"):
            wait_job(job, timeout=60, poll=0.5, log=log)
        assert lines[0] == f"job {job}: PENDING (reason: JobHeldUser)"
        assert lines[-1] == f"job {job}: PENDING (reason: BadConstraints)"
        for _ in range(20):
            if job_state(job)[0] == "CANCELLED":
                break
            time.sleep(0.5)
        assert job_state(job)[0] == "CANCELLED"
    finally:
        subprocess.run(["scancel", job], capture_output=True)
