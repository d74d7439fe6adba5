"""Docker-specific behaviour: security settings, labels, reaper, clear errors."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from swerl.errors import BackendUnavailable, ImageMissing, SandboxError
from swerl.sandbox.base import OWNER_LABEL, RUN_LABEL, SandboxConfig
from swerl.sandbox.docker import DockerSandbox, connect, reap
from swerl.sandbox.shell import SERVER_DIED


def test_security_defaults(base_image, sandbox_config, docker_client):
    with DockerSandbox(base_image, sandbox_config) as sb:
        attrs = docker_client.api.inspect_container(sb.container_id)
        host = attrs["HostConfig"]
        assert host["NetworkMode"] == "none"
        assert host["Privileged"] is False
        assert host["CapDrop"] == ["ALL"]
        assert "NET_RAW" not in (host["CapAdd"] or []) and "SYS_ADMIN" not in (host["CapAdd"] or [])
        assert host["PidsLimit"] == sandbox_config.pids_limit
        assert host["Memory"] == 4 * 1024**3
        assert host["NanoCpus"] == int(sandbox_config.cpus * 1e9)
        assert "no-new-privileges" in host["SecurityOpt"]
        assert not any("docker.sock" in m.get("Source", "") for m in attrs["Mounts"])
        assert attrs["Config"]["Labels"][OWNER_LABEL] == "swerl"
        assert attrs["Config"]["Labels"][RUN_LABEL] == sandbox_config.run_id
        # inside: no docker socket, capabilities reduced
        assert sb.execute("test -e /var/run/docker.sock").returncode == 1
        assert sb.execute("grep CapEff /proc/self/status").output.split()[1] != "000001ffffffffff"


def test_pids_limit_contains_a_fork_bomb(base_image, sandbox_config):
    with DockerSandbox(base_image, sandbox_config.replace(pids_limit=64)) as sb:
        r = sb.execute("for i in $(seq 200); do sleep 30 & done; wait", timeout=5)
        assert r.timed_out or r.returncode != 0
        assert sb.execute("echo alive").output == "alive\n"


def test_close_removes_the_container(base_image, sandbox_config, docker_client):
    sb = DockerSandbox(base_image, sandbox_config).start()
    cid = sb.container_id
    sb.close()
    sb.close()
    assert not docker_client.api.containers(all=True, filters={"id": cid})


def test_reaper_removes_a_runs_leftovers(base_image, docker_client):
    cfg = SandboxConfig(run_id="test-reaper-run")
    left = [DockerSandbox(base_image, cfg).start() for _ in range(2)]
    try:
        assert reap("test-reaper-run", client=docker_client) == 2
        filters = {"label": [f"{RUN_LABEL}=test-reaper-run"]}
        assert docker_client.api.containers(all=True, filters=filters) == []
        with pytest.raises(SandboxError):
            left[0].execute("true")
    finally:
        for sb in left:
            sb.close()


def test_missing_image_is_a_clear_infra_error(sandbox_config):
    with pytest.raises(ImageMissing, match=r"swerl images build-base|build-images"):
        DockerSandbox("swerl-no-such-image:nope", sandbox_config).start()


def test_unreachable_dockerd_is_a_clear_error(monkeypatch, tmp_path):
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no-docker.sock")
    with pytest.raises(BackendUnavailable, match=r"cannot reach the Docker daemon.*Is dockerd running"):
        connect()


def test_container_killed_from_outside_is_an_infra_error(base_image, sandbox_config, docker_client):
    with DockerSandbox(base_image, sandbox_config) as sb:
        docker_client.api.kill(sb.container_id)
        with pytest.raises(SandboxError):
            sb.execute("sleep 5")
        assert not sb.alive


def test_no_exec_per_sandbox_the_server_is_the_inits_child(base_image, sandbox_config, docker_client):
    with DockerSandbox(base_image, sandbox_config) as sb:
        attrs = docker_client.api.inspect_container(sb.container_id)
        assert not attrs.get("ExecIDs")  # the channel is the container's own stdin and stdout
        assert attrs["HostConfig"]["LogConfig"]["Type"] == "none"  # replies are not logged to disk
        server = sb._channel.server_pid
        assert sb.execute(f"cat /proc/{server}/status | grep PPid").output.split() == ["PPid:", "1"]


def test_a_sandbox_whose_client_died_stops_on_its_own(base_image, sandbox_config, docker_client):
    """The process holding the sandbox is killed without closing it: the server reads end
    of file and the container stops (the reaper only has a stopped container to remove)."""
    code = (
        "import sys, time\n"
        "from swerl.sandbox.base import SandboxConfig\n"
        "from swerl.sandbox.docker import DockerSandbox\n"
        f"sb = DockerSandbox({base_image!r}, SandboxConfig(run_id={sandbox_config.run_id!r})).start()\n"
        "print(sb.container_id, flush=True)\n"
        "time.sleep(600)\n"
    )
    holder = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        cid = holder.stdout.readline().strip()
        assert docker_client.api.inspect_container(cid)["State"]["Running"]
    finally:
        holder.kill()
        holder.wait()
    deadline = time.monotonic() + 20
    while docker_client.api.inspect_container(cid)["State"]["Running"] and time.monotonic() < deadline:
        time.sleep(0.1)
    state = docker_client.api.inspect_container(cid)["State"]
    assert not state["Running"] and state["ExitCode"] == SERVER_DIED
    docker_client.api.remove_container(cid, force=True)


def test_sandboxes_share_one_client_and_are_reaped_concurrently(base_image, docker_client):
    """Many sandboxes in one process share a connection pool; reap removes a run's sandboxes
    several at a time and leaves none behind."""
    from concurrent.futures import ThreadPoolExecutor

    cfg = SandboxConfig(run_id="test-reaper-many", start_gate=2)
    with ThreadPoolExecutor(4) as ex:
        boxes = list(ex.map(lambda _: DockerSandbox(base_image, cfg).start(), range(4)))
    try:
        assert len({id(sb._client) for sb in boxes}) == 1
        assert [sb.execute(f"echo {i}").output for i, sb in enumerate(boxes)] == [f"{i}\n" for i in range(4)]
        assert reap("test-reaper-many", client=docker_client, workers=4) == 4
        filters = {"label": [f"{RUN_LABEL}=test-reaper-many"]}
        assert docker_client.api.containers(all=True, filters=filters) == []
    finally:
        for sb in boxes:
            sb.close()
