"""mini-swe-agent's own DefaultAgent runs on a swerl sandbox."""

from __future__ import annotations

import yaml
from minisweagent import package_dir
from minisweagent.agents.default import DefaultAgent
from minisweagent.models.test_models import DeterministicModel, make_output

from swerl.sandbox.docker import DockerSandbox
from swerl.sandbox.miniswe import MiniSweEnvironment


def test_default_agent_runs_to_submission(base_image, sandbox_config):
    agent_config = yaml.safe_load((package_dir / "config" / "default.yaml").read_text())["agent"]
    outputs = [
        make_output("make a file", [{"command": "echo 'print(42)' > /tmp/answer.py && cat /tmp/answer.py"}]),
        make_output("run it", [{"command": "python3 /tmp/answer.py"}]),
        make_output("done", [{"command": "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT && echo the-answer"}]),
    ]
    with DockerSandbox(base_image, sandbox_config) as sb:
        env = MiniSweEnvironment(sb, cwd="/tmp")
        agent = DefaultAgent(DeterministicModel(outputs=outputs), env, **agent_config)
        result = agent.run("write a program that prints 42")
    assert result["exit_status"] == "Submitted"
    assert result["submission"].strip() == "the-answer"
    observations = [m["content"] for m in agent.messages if m.get("role") == "user"]
    assert any("42" in str(o) for o in observations)


def test_timeout_is_reported_like_mini_swe_agent(base_image, sandbox_config):
    with DockerSandbox(base_image, sandbox_config) as sb:
        out = MiniSweEnvironment(sb, cwd="/").execute({"command": "sleep 10"}, timeout=1)
    assert out["returncode"] == 137 and "timed out" in out["exception_info"]
