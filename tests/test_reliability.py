"""Reliability and security on real Docker and real Ray: faults, hostile commands, isolation, durability.

Every case checks that the episode ends exactly once (a real result, or infra_error
after its retries, never a silent 0), that the sandbox or the host is unharmed, and
that no container is left behind.
"""

from __future__ import annotations

import http.server
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from swerl.env import SWEEnv, actions
from swerl.episode import JsonlSink
from swerl.grading import grade
from swerl.policies.scripted import GoldPolicy, ScriptedPolicy
from swerl.rollout import RolloutRunner
from swerl.sandbox.base import RUN_LABEL, SandboxConfig
from swerl.sandbox.docker import DockerSandbox


@pytest.fixture
def env(tasks, run_id):
    e = SWEEnv(
        tasks,
        sandbox_config=SandboxConfig(run_id=run_id, pids_limit=256, memory="512m", max_file_size=50 << 20),
    )
    e.reset(options={"task": tasks[0].instance_id})
    yield e
    e.close()


def run_containers(docker_client, prefix: str) -> list:
    return [
        c
        for c in docker_client.api.containers(all=True, filters={"label": ["swerl.owner=swerl"]})
        if c["Labels"].get(RUN_LABEL, "").startswith(prefix)
    ]


def bash_out(obs: str) -> str:
    return obs.split("<output>\n", 1)[-1]


# ------------------------------------------------------------ hostile commands
def test_fork_bomb_is_contained(env):
    obs = env.step(actions.bash(":(){ :|:& };:"))[0]
    assert "<returncode>" in obs
    assert subprocess.run(["true"]).returncode == 0  # the host can still fork
    # The bomb outlives its command (its processes are the agent's, as a server started
    # with & would be). Until it dies out, either it takes the command server down at
    # its next fork (the sandbox is restarted, files kept, and says so) or the next
    # commands themselves cannot fork (the agent sees the pids limit). Never an infra
    # error, and the env answers cleanly again within a few steps.
    outs = []
    for i in range(6):
        obs, _, terminated, truncated, info = env.step(actions.bash(f"echo alive {i}"))
        assert not (terminated or truncated) and info.get("status") != "infra_error", obs
        outs.append(bash_out(obs))
        if outs[-1].startswith(f"alive {i}"):
            break
        assert "the sandbox was restarted" in outs[-1] or "Resource temporarily unavailable" in outs[-1], outs
    assert outs[-1].startswith("alive"), outs


def test_output_flood_is_killed_and_bounded(env):
    t = time.monotonic()
    obs = env.step(actions.bash("head -c 10G /dev/zero | tr '\\0' x"))[0]
    assert "bytes of output and was killed" in obs or "grew past the sandbox's limit" in obs
    assert time.monotonic() - t < 30 and len(obs) < 20_000
    assert env.sandbox.execute("du -sm /tmp | cut -f1").output.strip() in {str(i) for i in range(0, 200)}
    assert bash_out(env.step(actions.bash("echo alive"))[0]).startswith("alive")


def test_filling_the_disk_hits_the_file_size_limit(env):
    obs = env.step(actions.bash("head -c 2G /dev/zero > big.bin; ls -l big.bin | cut -d' ' -f5"))[0]
    assert "file size limit" in obs or "File size limit" in obs or str(50 << 20) in obs
    assert int(env.sandbox.execute("stat -c %s /testbed/big.bin").output) <= 50 << 20
    assert bash_out(env.step(actions.bash("rm big.bin && echo alive"))[0]).startswith("alive")


def test_memory_exhaustion_is_contained(env):
    obs = env.step(actions.bash("python3 -c 'x = bytearray(2 << 30); print(len(x))'"))[0]
    assert "2147483648" not in bash_out(obs)
    assert "<returncode>0</returncode>" not in obs
    assert bash_out(env.step(actions.bash("echo alive"))[0]).startswith("alive")


def test_a_daemon_that_detaches_cannot_pollute_later_output(env, docker_client):
    env.step(actions.bash("(while true; do echo DAEMON; sleep 0.05; done) & setsid sleep 300 &"))
    time.sleep(0.3)
    for i in range(3):
        assert "DAEMON" not in env.step(actions.bash(f"echo clean {i}"))[0]
    cid = env.sandbox.container_id
    env.close()
    assert not docker_client.api.containers(all=True, filters={"id": cid})


def test_sigterm_ignoring_process_is_killed_at_the_timeout(tasks, run_id):
    with SWEEnv(tasks, sandbox_config=SandboxConfig(run_id=run_id), command_timeout=1) as e:
        e.reset(options={"task": tasks[0].instance_id})
        obs = e.step(actions.bash("trap '' TERM INT; sleep 30"))[0]
        assert "timed out after 1 s and was killed" in obs
        assert bash_out(e.step(actions.bash("echo alive"))[0]).startswith("alive")


# ------------------------------------------------------------------- isolation
def test_host_loopback_server_is_unreachable(env):
    hits = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            hits.append(self.path)
            self.send_response(200)
            self.end_headers()

        def log_message(self, *a):
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        port = server.server_address[1]
        probe = f"python3 -c \"import urllib.request; urllib.request.urlopen('http://127.0.0.1:{port}/x', timeout=3)\""
        obs = env.step(actions.bash(probe))[0]
        assert "<returncode>0</returncode>" not in obs
        assert bash_out(env.step(actions.bash("ls /sys/class/net"))[0]).split()[:1] == ["lo"]
    finally:
        server.shutdown()
    assert hits == []


def test_editor_cannot_write_outside_the_repo(env):
    assert "outside the repository" in env.step(actions.create("../etc/evil", "x"))[0]
    assert "outside the repository" in env.step(actions.create("/tmp/evil", "x"))[0]
    env.step(actions.bash("ln -s /etc escape"))
    assert "outside the repository" in env.step(actions.create("escape/evil", "x"))[0]
    assert env.sandbox.execute("ls /etc/evil /tmp/evil").returncode != 0


@pytest.mark.parametrize(
    "patch",
    [
        "diff --git a/../evil.txt b/../evil.txt\nnew file mode 100644\n--- /dev/null\n+++ b/../evil.txt\n@@ -0,0 +1 @@\n+evil\n",
        "diff --git a/tmp/evil b/tmp/evil\nnew file mode 100644\n--- /dev/null\n+++ /tmp/evil\n@@ -0,0 +1 @@\n+evil\n",
        (
            "diff --git a/link b/link\nnew file mode 120000\n--- /dev/null\n+++ b/link\n@@ -0,0 +1 @@\n+/etc\n\\ No newline at end of file\n"
            "diff --git a/link/evil b/link/evil\nnew file mode 100644\n--- /dev/null\n+++ b/link/evil\n@@ -0,0 +1 @@\n+evil\n"
        ),
    ],
    ids=["dotdot", "absolute", "symlink"],
)
def test_grading_patch_cannot_escape_the_repo(tasks, run_id, patch):
    seen = []

    class Watched(DockerSandbox):
        def close(self):
            if self.alive:
                seen.append(
                    self.execute("ls /evil.txt /tmp/evil /etc/evil /testbed/../evil.txt 2>&1; true").output
                )
            super().close()

    result = grade(
        tasks[0], patch, sandbox_factory=lambda image: Watched(image, SandboxConfig(run_id=run_id))
    )
    assert result.status.value in ("patch_failed", "unresolved") and result.reward == 0.0
    assert seen and all(out.count("No such file") == 4 for out in seen), seen


# ----------------------------------------------------------------------- faults
class SleepyGold(GoldPolicy):
    """Gold, with a slow first command so a fault can land mid-command."""

    def script(self, task, attempt):
        return [actions.bash("sleep 2"), *super().script(task, attempt)]


def test_container_killed_mid_command_is_retried(ray_session, tasks, docker_client):
    prefix = "t-rel-kill"
    killed = []

    def killer():
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not killed:
            running = [c for c in run_containers(docker_client, prefix) if c["State"] == "running"]
            if running:
                time.sleep(0.8)  # inside `sleep 2`
                docker_client.api.kill(running[0]["Id"])
                killed.append(running[0]["Id"])
            time.sleep(0.1)

    t = threading.Thread(target=killer)
    t.start()
    with RolloutRunner(
        tasks[:2], SleepyGold(), num_actors=1, envs_per_actor=2, run_id=prefix, retry_delay=0.2
    ) as r:
        eps = r.run()
    t.join()
    assert killed
    assert sorted(e.key for e in eps) == sorted((t.instance_id, 0) for t in tasks[:2])
    assert all(e.status == "resolved" for e in eps) and r.stats["retried"] >= 1
    assert run_containers(docker_client, prefix) == []


class Junk(ScriptedPolicy):
    def script(self, task, attempt):
        return [
            "\x00\xff junk",
            "{not json",
            '{"tool": "rm"}',
            "x" * 300_000,
            "```bash\na\n```\n```bash\nb\n```",
        ]


def test_hostile_actions_never_crash_the_actor_or_the_run(ray_session, tasks):
    with RolloutRunner(
        tasks[:2], Junk(), num_actors=1, envs_per_actor=2, env_kwargs={"max_no_action": 5}
    ) as r:
        eps = r.run()
    assert [e.reason for e in eps] == ["no_action", "no_action"]
    assert all(e.reward == 0.0 and e.status == "empty_patch" for e in eps)
    assert r.stats["actors_died"] == 0


def test_api_key_in_the_actor_is_not_visible_in_the_sandbox(ray_session, tasks):
    class PrintEnv(ScriptedPolicy):
        def script(self, task, attempt):
            return [actions.bash("env; echo key=${OPENAI_API_KEY:-absent}")]

    with RolloutRunner(tasks[:1], PrintEnv(), num_actors=1) as r:
        (ep,) = r.run()
    assert "key=absent" in ep.steps[0].observation and "sk-driver-secret" not in ep.steps[0].observation


# ------------------------------------------------------------------ durability
def _rollout_cmd(out, *extra):
    return [sys.executable, "-m", "swerl.cli", "rollout", "default", f"output_dir={out}", "rollout.num_actors=1",
            "task_ids=[swerl__textkit-1, swerl__textkit-2, swerl__textkit-3, swerl__textkit-4, swerl__tinyconf-1, swerl__tinyconf-2]",
            *extra]  # fmt: skip


def _wait_for_lines(path, n, proc, timeout=240):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and proc.poll() is None:
        if path.exists() and path.read_text().count("\n") >= n:
            return
        time.sleep(0.1)
    raise AssertionError(f"{path} never had {n} lines")


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGKILL], ids=["sigint", "sigkill"])
def test_interrupted_driver_leaves_parseable_jsonl_and_resume_completes(tasks, tmp_path, docker_client, sig):
    out = tmp_path / "run"
    proc = subprocess.Popen(_rollout_cmd(out, f"name=t-rel-{sig.name.lower()}"), stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)  # fmt: skip
    _wait_for_lines(out / "episodes.jsonl", 2, proc)
    os.killpg(proc.pid, sig) if sig == signal.SIGKILL else proc.send_signal(sig)
    proc.wait(timeout=120)
    lines = (out / "episodes.jsonl").read_text().splitlines()
    complete = list(JsonlSink.read(out / "episodes.jsonl"))
    assert len(complete) >= 2 and all(json.loads(line) for line in lines[: len(complete)])
    if sig == signal.SIGINT:
        assert proc.returncode == 130
        assert run_containers(docker_client, f"t-rel-{sig.name.lower()}") == []
    else:  # a dead driver cannot clean up: the reaper removes what it left
        time.sleep(2)
        subprocess.run([sys.executable, "-m", "swerl.cli", "reap", "--orphans"], check=True, timeout=120)
        assert [c for c in run_containers(docker_client, "t-rel-sigkill") if c["State"] == "running"] == []
    again = subprocess.run(_rollout_cmd(out, f"name=t-rel-{sig.name.lower()}", "--json"), capture_output=True,
                           text=True, timeout=600)  # fmt: skip
    assert again.returncode == 0, again.stderr[-2000:]
    summary = json.loads(again.stdout)
    assert summary["episodes"] == 6 and summary["resolved"] == 6
    assert summary["new_episodes"] == 6 - len(complete)


def test_short_soak_loses_nothing(ray_session, task_images, capsys):
    from swerl.bench.soak import main as soak

    assert soak(["--envs", "8", "--seconds", "20", "--mem-tolerance", "0.5"]) == 0
    out = capsys.readouterr().out
    assert "soak: PASS" in out and " 0 " in out


def _exited(pid: int) -> bool:
    """Gone, or a zombie: a daemon whose parent never waits on it stays in /proc as state Z."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return True
    return stat.rsplit(")", 1)[1].split()[0] == "Z"


def test_dockerd_restart_during_a_run(ray_session, tasks, docker_client):
    """dockerd goes away mid-run: in-flight episodes are infra errors, retried once it is back."""
    from swerl.bootstrap import start_dockerd

    prefix = "t-rel-dockerd"
    restarted: list[int] = []

    def restart():
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if any(c["State"] == "running" for c in run_containers(docker_client, prefix)):
                break
            time.sleep(0.1)
        time.sleep(0.5)
        pid = int(Path("/var/run/docker.pid").read_text())
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + 60
        while not _exited(pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        start_dockerd()
        restarted.append(pid)

    t = threading.Thread(target=restart)
    t.start()
    try:
        with RolloutRunner(
            tasks[:4],
            SleepyGold(),
            num_actors=1,
            envs_per_actor=2,
            run_id=prefix,
            retry_delay=2.0,
            max_retries=4,
        ) as r:
            eps = r.run()
    finally:
        t.join(timeout=180)
        start_dockerd()  # whatever happened above, later tests get their daemon back
        from swerl.sandbox.docker import reap

        for c in run_containers(docker_client, prefix):
            reap(c["Labels"][RUN_LABEL], client=docker_client)
    assert restarted
    assert sorted(e.key for e in eps) == sorted((t.instance_id, 0) for t in tasks[:4])  # each exactly once
    assert all(e.status == "resolved" for e in eps), [(e.status, e.error[:200]) for e in eps]
    assert r.stats["retried"] >= 1
