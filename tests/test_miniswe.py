"""swerl's MiniSweEnvironment holds to mini-swe-agent's environment contract.

The contract is the one mini-swe-agent's own DockerEnvironment tests and agent tests
pin (config defaults, env forwarding, cwd override, failure codes, timeout result,
cleanup), and a DefaultAgent run from mini's unchanged swebench.yaml, graded.
"""

from __future__ import annotations

import os

import docker.errors
import pytest
import yaml
from minisweagent import package_dir
from minisweagent.agents.default import DefaultAgent
from minisweagent.environments import get_environment
from minisweagent.environments.docker import DockerEnvironmentConfig
from minisweagent.exceptions import Submitted
from minisweagent.models.test_models import DeterministicModel, make_output

from swerl.errors import ConfigError
from swerl.grading import GradeStatus, grade
from swerl.grading.grade import docker_factory
from swerl.sandbox.base import RUN_LABEL, SandboxConfig
from swerl.sandbox.docker import DockerSandbox
from swerl.sandbox.miniswe import MiniSweEnvironment, MiniSweEnvironmentConfig, run_args_to_config

CLASS = "swerl.sandbox.miniswe.MiniSweEnvironment"


def test_config_has_minis_keys_and_defaults():
    ours = MiniSweEnvironmentConfig(image="img").model_dump()
    minis = DockerEnvironmentConfig(image="img").model_dump()
    assert {k: ours[k] for k in minis} == minis
    assert (ours["cwd"], ours["timeout"], ours["interpreter"]) == ("/", 30, ["bash", "-lc"])


@pytest.mark.parametrize(
    ("bad", "names"),
    [
        ({"env": {"BAD-NAME": "x"}}, "BAD-NAME"),
        ({"forward_env": ["1X"]}, "1X"),
        ({"run_args": ["--privileged"]}, "--privileged"),
        ({"run_args": ["--network", "host"]}, "host"),
        ({"run_args": ["--memory", "1g", "--memory-swap", "2g"]}, "swap"),
        ({"executable": "podman"}, "podman"),
        ({"container_timeout": "soon"}, "soon"),
        ({"interpreter": []}, "interpreter"),
        ({"image": ""}, "image"),
    ],
)
def test_bad_config_is_rejected_at_construction(bad, names):
    with pytest.raises(ConfigError, match=names):
        MiniSweEnvironment(**{"image": "never-started", **bad})


def test_run_args_map_to_sandbox_settings(monkeypatch):
    monkeypatch.setenv("HOST_ONLY", "from-host")
    args = ["--rm", "--network=bridge", "--memory", "1g", "--memory-swap", "1g", "--cpus", "1.5"]
    args += ["--pids-limit", "64", "-e", "A=1", "-e", "HOST_ONLY", "--cap-drop", "KILL", "--name", "box"]
    cfg, options = run_args_to_config(args, SandboxConfig())
    assert (cfg.network, cfg.memory, cfg.cpus, cfg.pids_limit) == (True, "1g", 1.5, 64)
    assert cfg.env == {"A": "1", "HOST_ONLY": "from-host"}
    assert "KILL" not in cfg.cap_add and "CHOWN" in cfg.cap_add
    assert options == {"name": "box"}


def test_keyword_config_alone_gives_minis_contract(base_image, run_id, docker_client, monkeypatch):
    monkeypatch.setenv("HOST_VAR", "from_host")
    monkeypatch.setenv("CONFLICT", "from_host")
    monkeypatch.delenv("UNSET_VAR", raising=False)
    env = get_environment(
        {
            "environment_class": CLASS,
            "image": base_image,
            "cwd": "/tmp",
            "env": {"SET_VAR": "from_config", "CONFLICT": "from_config"},
            "forward_env": ["HOST_VAR", "CONFLICT", "UNSET_VAR"],
            "sandbox_config": {"run_id": run_id, "output_cap": 1000, "max_output": 1 << 20},
            "a_key_of_another_environment": 1,  # ignored, as mini's configs ignore it
        }
    )
    try:
        container = docker_client.containers.get(env.container_id)
        assert container.labels[RUN_LABEL] == run_id
        assert env.sandbox.config.lifetime == 7200  # container_timeout "2h"
        run = env.execute
        out = run({"command": 'echo "$SET_VAR $HOST_VAR $CONFLICT [$UNSET_VAR]"; pwd'})
        assert out == {
            "output": "from_config from_host from_config []\n/tmp\n",
            "returncode": 0,
            "exception_info": "",
        }
        assert run({"command": "pwd"}, cwd="/")["output"] == "/\n"
        assert run({"command": "exit 42"})["returncode"] == 42
        assert run({"command": "nonexistent_cmd_1"})["returncode"] == 127
        assert run({"command": "echo oops >&2; false"}) == {
            "output": "oops\n",
            "returncode": 1,
            "exception_info": "",
        }

        out = run({"command": "echo started; sleep 300 & echo $! > /tmp/child; wait"}, timeout=1)
        assert out["returncode"] == -1 and out["output"] == "started\n"
        assert "timed out" in out["exception_info"]
        assert out["extra"]["exception_type"] == "TimeoutExpired"
        assert run({"command": "kill -0 $(cat /tmp/child)"})["returncode"] != 0  # the whole group was killed

        out = run({"command": "echo a\0b"})
        assert out["returncode"] == -1 and out["extra"]["exception_type"] == "ValueError"
        assert run({"command": "echo x"}, cwd="/t\0mp")["returncode"] == -1
        out = run({"command": "head -c 5000 /dev/zero | tr '\\0' x"})
        assert (
            out["returncode"] == 0 and "truncated" in out["output"] and "1000 bytes" in out["exception_info"]
        )
        out = run({"command": "yes"})
        assert out["returncode"] == -1 and out["extra"]["exception_type"] == "OutputLimitExceeded"
        assert run({"command": "echo alive"})["output"] == "alive\n"
        server = env.sandbox._channel.server_pid  # not an ancestor count: a command may be its child
        out = run({"command": f"kill -9 {server}"})  # the command server itself
        assert out["returncode"] == -1 and out["extra"]["exception_type"] == "SandboxRestarted"
        assert "restarted" in out["exception_info"] and run({"command": "cat /tmp/child"})["returncode"] == 0

        with pytest.raises(Submitted) as done:
            run({"command": "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT; echo the-answer"})
        assert done.value.messages[0]["extra"] == {"exit_status": "Submitted", "submission": "the-answer\n"}

        assert env.serialize()["info"]["config"]["environment_type"] == CLASS
        assert env.serialize()["info"]["config"]["environment"]["image"] == base_image
        tvars = env.get_template_vars(extra_var=1)
        assert (tvars["cwd"], tvars["timeout"], tvars["extra_var"]) == ("/tmp", 30, 1)
        assert "system" in tvars and "release" in tvars  # platform.uname(), as mini's
    finally:
        env.cleanup()
    with pytest.raises(docker.errors.NotFound):
        docker_client.containers.get(container.id)
    env.cleanup()  # idempotent
    assert env.execute({"command": "true"})["extra"]["exception_type"] == "SandboxClosed"


def test_login_shell_activates_a_swebench_shaped_environment(swebench_shaped, sandbox_config):
    _task, image = swebench_shaped
    probe = {"command": "python3 -c 'import testbed_dep; print(testbed_dep.WHERE)'; command -v python3"}
    with DockerSandbox(image, sandbox_config) as sb:
        login = MiniSweEnvironment(sb)  # mini's default interpreter: bash -lc
        plain = MiniSweEnvironment(sandbox=sb, interpreter=["bash", "-c"])
        out = login.execute(probe)
        assert out["output"] == "testbed\n/opt/miniconda3/envs/testbed/bin/python3\n"
        assert "ModuleNotFoundError" in plain.execute(probe)["output"]
        login.cleanup()  # the sandbox is the caller's: still usable
        assert sb.alive and plain.execute({"command": "echo ok"})["output"] == "ok\n"


def test_default_agent_from_minis_swebench_yaml_resolves(swebench_shaped, run_id):
    """mini's swebench.yaml unchanged; the runner's part (class, image) added, as mini's swebench runner does."""
    task, image = swebench_shaped
    config = yaml.safe_load((package_dir / "config" / "benchmarks" / "swebench.yaml").read_text())
    env = get_environment(
        {
            **config["environment"],
            "environment_class": CLASS,
            "image": image,
            "sandbox_config": {"run_id": run_id},
        }
    )
    steps = [
        "python -c 'import testbed_dep; print(testbed_dep.WHERE)'",  # BASH_ENV activates testbed
        f"git apply <<'SWERL_EOF'\n{task.patch}\nSWERL_EOF",
        "git diff -- $(git diff --name-only) > patch.txt && git status --short",
        "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT && cat patch.txt",
    ]
    model = DeterministicModel(
        outputs=[make_output(f"step {i}", [{"command": c}], cost=0.0) for i, c in enumerate(steps)],
        observation_template=config["model"]["observation_template"],
    )
    try:
        agent = DefaultAgent(model, env, **config["agent"])
        result = agent.run(task.problem_statement)
    finally:
        env.cleanup()
    assert result["exit_status"] == "Submitted"
    observations = [str(m["content"]) for m in agent.messages if m.get("role") == "user"]
    assert "<returncode>0</returncode>\n<output>\ntestbed" in observations[1]
    graded = grade(task, result["submission"], sandbox_factory=docker_factory(run_id=run_id))
    assert graded.status == GradeStatus.RESOLVED, graded.log[-2000:]


def test_owns_a_sandbox_on_another_backend(base_image, run_id, enroot_double):
    env = MiniSweEnvironment(image=base_image, backend="enroot", sandbox_config={"run_id": run_id})
    try:
        assert env.sandbox.backend == "enroot" and env.container_id == env.sandbox.name
        assert env.execute({"command": "echo $((6 * 7)) in $PWD"})["output"] == "42 in /\n"
    finally:
        env.cleanup()
    assert env.container_id not in os.listdir(enroot_double / "data")


def test_a_given_sandbox_says_which_keys_it_ignores_and_a_bad_cwd_is_exit_1(
    base_image, sandbox_config, caplog
):
    with DockerSandbox(base_image, sandbox_config) as sb:
        with caplog.at_level("WARNING", logger="swerl.miniswe"):
            env = MiniSweEnvironment(sandbox=sb, container_timeout="10m", run_args=["--rm"],
                                     sandbox_config={"output_cap": 10})  # fmt: skip
        (warning,) = [r.getMessage() for r in caplog.records if "ignoring" in r.getMessage()]
        assert "container_timeout, run_args, sandbox_config" in warning and "already made" in warning
        assert sb.config.lifetime != 600  # the sandbox is as it was made
        out = env.execute({"command": "echo x"}, cwd="/no/such/dir")  # mini's docker exec -w gives 126
        assert out["returncode"] == 1 and "/no/such/dir" in out["output"], out
        with caplog.at_level("WARNING", logger="swerl.miniswe"):
            caplog.clear()
            MiniSweEnvironment(sandbox=sb, cwd="/tmp")
        assert not [r for r in caplog.records if "ignoring" in r.getMessage()]
