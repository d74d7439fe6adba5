"""SWEEnv on real Docker with the bundled suite: contract, tools, limits, rewards."""

from __future__ import annotations

import dataclasses
import json
import math
import time

import gymnasium
import pytest
from gymnasium.utils.env_checker import check_env

import swerl  # noqa: F401 - registers swerl/SWE-v0
from swerl.env import SWEEnv, actions
from swerl.policies.patch_actions import patch_to_actions
from swerl.sandbox.base import SandboxConfig

SUITE = "swerl-mini"


@pytest.fixture
def make_env(tasks, run_id):
    made = []

    def make(**kw):
        kw.setdefault("sandbox_config", SandboxConfig(run_id=run_id, timeout=60))
        kw.setdefault("tasks", tasks)
        env = SWEEnv(**kw)
        made.append(env)
        return env

    yield make
    for env in made:
        env.close()


def test_registered_and_check_env_passes(tasks, run_id):
    env = gymnasium.make(
        "swerl/SWE-v0", tasks=tasks, sandbox_config=SandboxConfig(run_id=run_id), max_steps=5
    )
    try:
        check_env(env.unwrapped, skip_render_check=True)
    finally:
        env.close()


def test_seed_makes_task_choice_reproducible(make_env):
    env = make_env()
    first = [env.reset(seed=s)[1]["task_id"] for s in (1, 2, 3)]
    again = [env.reset(seed=s)[1]["task_id"] for s in (1, 2, 3)]
    assert first == again
    assert len({env.reset(seed=s)[1]["task_id"] for s in range(12)}) > 1


def test_gold_through_the_editor_resolves_every_task(make_env, tasks):
    env = make_env()
    for task in tasks:
        obs, info = env.reset(options={"task": task.instance_id})
        assert obs == task.problem_statement and info["task_id"] == task.instance_id
        for a in patch_to_actions(task.patch):
            obs, reward, terminated, truncated, info = env.step(a)
            assert not terminated and not truncated, obs
            assert "Error" not in obs.splitlines()[0], obs
        obs, reward, terminated, truncated, info = env.step(actions.submit())
        assert terminated and not truncated
        assert info["status"] == "resolved", (task.instance_id, info["grade"])
        assert reward == 1.0
        assert info["patch"].strip() and set(info["tests"]) >= set(task.FAIL_TO_PASS)


def test_submitting_nothing_scores_zero(make_env, tasks):
    env = make_env()
    env.reset(options={"task": tasks[0].instance_id})
    _, reward, terminated, _, info = env.step("```bash\necho COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT\n```")
    assert terminated and reward == 0.0 and info["status"] == "empty_patch"


def test_editor_tools(make_env, tasks):
    env = make_env()
    env.reset(options={"task": tasks[0].instance_id})
    obs = env.step(actions.create("notes/new.txt", "alpha\nbeta\nbeta\n"))[0]
    assert "Created" in obs
    obs = env.step(actions.view("notes/new.txt"))[0]
    assert "     1\talpha" in obs and "     3\tbeta" in obs
    obs = env.step(actions.view("notes/new.txt", (2, -1)))[0]
    assert "     1\t" not in obs and "     2\tbeta" in obs
    obs = env.step(actions.str_replace("notes/new.txt", "beta", "gamma"))[0]
    assert "occurs 2 times" in obs
    obs = env.step(actions.str_replace("notes/new.txt", "missing", "x"))[0]
    assert "not found" in obs
    env.step(actions.str_replace("notes/new.txt", "alpha\nbeta", "alpha\nBETA"))
    env.step(actions.insert("notes/new.txt", 0, "zero"))
    obs = env.step(actions.bash("cat notes/new.txt"))[0]
    assert "zero\nalpha\nBETA\nbeta\n" in obs
    weird = "tab\t quote' dq\" $(id) `x` \\n ünï €\n"
    env.step(actions.create("weird.txt", weird))
    assert env.sandbox.read_file("/testbed/weird.txt") == weird.encode()
    obs = env.step(actions.view("."))[0]
    assert "/testbed/notes" in obs


def test_editing_keeps_a_files_mode(make_env, tasks):
    """An edit changes content, not permissions: a source file shipped executable stays 755
    (left 644, strict grading would read a mode change and revert the fix with it)."""
    env = make_env()
    env.reset(options={"task": tasks[0].instance_id})
    env.step(actions.create("tool.py", "x = 1\n"))
    env.step(actions.bash("chmod 755 tool.py && ln -s tool.py link.py"))
    env.step(actions.str_replace("tool.py", "x = 1", "x = 2"))
    env.step(actions.insert("tool.py", 1, "y = 3"))
    env.step(actions.str_replace("link.py", "y = 3", "y = 4"))
    assert "Overwrote /testbed/tool.py" in env.step(actions.create("tool.py", "x = 5\n"))[0]
    assert "Created /testbed/fresh.py" in env.step(actions.create("fresh.py", "z = 1\n"))[0]
    look = "stat -c '%n %a' tool.py fresh.py && stat -L -c %a link.py && cat tool.py"
    obs = env.step(actions.bash(look))[0]
    assert "tool.py 755" in obs and "fresh.py 644" in obs and "x = 5" in obs, obs
    assert "\n755\n" in obs, obs


def test_openai_function_call_shape(make_env, tasks):
    env = make_env()
    env.reset(options={"task": tasks[0].instance_id})
    call = {"type": "function", "function": {"name": "bash", "arguments": json.dumps({"command": "echo hi"})}}
    obs = env.step(json.dumps({"tool_calls": [call]}))[0]
    assert "hi" in obs and "<returncode>0</returncode>" in obs


@pytest.mark.parametrize(
    "bad",
    [
        "",
        "just words",
        "{not json",
        '{"tool": "rm -rf"}',
        "```bash\na\n```\n```bash\nb\n```",
        "\x00\x01\xff",
        "x" * 300_000,
    ],
)
def test_malformed_actions_explain_the_format(make_env, tasks, bad):
    env = make_env()
    env.reset(options={"task": tasks[0].instance_id})
    obs, reward, terminated, truncated, _ = env.step(bad)
    assert obs.startswith("Invalid action:") and '"tool": "bash"' in obs
    assert reward == 0.0 and not terminated and not truncated


def test_limits_truncate_with_a_reason(make_env, tasks):
    env = make_env(max_steps=3, grade_on_truncate=False)
    env.reset(options={"task": tasks[0].instance_id})
    results = [env.step(actions.bash(f"echo {i}")) for i in range(3)]
    assert [r[3] for r in results] == [False, False, True]
    assert results[-1][4]["reason"] == "max_steps"
    with pytest.raises(gymnasium.error.ResetNeeded):
        env.step(actions.bash("true"))

    env = make_env(max_repeats=3)
    env.reset(options={"task": tasks[0].instance_id})
    for _ in range(2):
        assert not env.step(actions.bash("ls"))[3]
    _, reward, terminated, truncated, info = env.step(actions.bash("ls"))
    assert truncated and not terminated and info["reason"] == "repeated_action"
    assert info["status"] == "empty_patch" and reward == 0.0  # graded on its (empty) diff

    env = make_env(max_no_action=2, grade_on_truncate=False)
    env.reset(options={"task": tasks[0].instance_id})
    assert not env.step("hmm")[3]
    assert env.step("still thinking")[4]["reason"] == "no_action"

    env = make_env(max_seconds=0.5, grade_on_truncate=False)
    env.reset(options={"task": tasks[0].instance_id})
    time.sleep(0.6)
    assert env.step(actions.bash("true"))[4]["reason"] == "time_limit"


def test_timeout_and_long_output_observations(make_env, tasks):
    env = make_env(command_timeout=1, observation_chars=1000)
    env.reset(options={"task": tasks[0].instance_id})
    obs = env.step(actions.bash("sleep 30"))[0]
    assert "timed out after 1 s and was killed" in obs
    obs = env.step(actions.bash("seq 1 100000"))[0]
    assert "characters elided" in obs and len(obs) < 1200 and obs.rstrip().endswith("</output>")


def test_no_state_leaks_between_episodes(make_env, tasks):
    env = make_env(pool_size=1)
    env.reset(options={"task": tasks[0].instance_id})
    env.step(actions.bash("echo leak > /testbed/LEAK && echo leak > /tmp/LEAK"))
    first = env.sandbox.container_id
    env.reset(options={"task": tasks[0].instance_id})
    assert env.sandbox.container_id != first
    obs = env.step(actions.bash("ls /testbed/LEAK /tmp/LEAK; git status --porcelain"))[0]
    assert "No such file" in obs and "LEAK" not in obs.split("</returncode>")[1].replace(
        "/testbed/LEAK", ""
    ).replace("/tmp/LEAK", "")


def test_infra_failure_is_never_a_zero(make_env, tasks, docker_client):
    env = make_env()
    env.reset(options={"task": tasks[0].instance_id})
    docker_client.api.kill(env.sandbox.container_id)
    obs, reward, terminated, truncated, info = env.step(actions.bash("ls"))
    assert math.isnan(reward) and truncated and info["status"] == "infra_error"


def test_close_releases_every_container_even_after_an_error(tasks, docker_client):
    from swerl.sandbox.base import RUN_LABEL

    rid = "test-env-close"
    env = SWEEnv(tasks, sandbox_config=SandboxConfig(run_id=rid), pool_size=2)
    try:
        env.reset(options={"task": tasks[0].instance_id})
        with pytest.raises(Exception, match="unknown task"):
            env.reset(options={"task": "no-such-task"})
    finally:
        env.close()
    assert docker_client.api.containers(all=True, filters={"label": [f"{RUN_LABEL}={rid}"]}) == []


def test_sync_vector_env(tasks, run_id):
    cfg = SandboxConfig(run_id=run_id)
    vec = gymnasium.vector.SyncVectorEnv([lambda: SWEEnv(tasks, sandbox_config=cfg) for _ in range(2)])
    try:
        obs, infos = vec.reset(seed=7)
        assert len(obs) == 2 and all(isinstance(o, str) for o in obs)
        obs, rewards, term, trunc, infos = vec.step([actions.bash("echo vec"), actions.bash("pwd")])
        assert "vec" in obs[0] and "/testbed" in obs[1]
    finally:
        vec.close()


def test_agent_commands_run_in_the_images_activated_environment(make_env, swebench_shaped):
    """On a SWE-bench-shaped image the agent's python is the repo's env by default, as on the official images."""
    task, image = swebench_shaped
    probe = actions.bash("python3 -c 'import testbed_dep; print(testbed_dep.WHERE)'")
    env = make_env(tasks=[dataclasses.replace(task, image=image)])
    env.reset()
    assert "<returncode>0</returncode>\n<output>\ntestbed\n" in env.step(probe)[0]
    plain = make_env(tasks=[dataclasses.replace(task, image=image)], interpreter=("bash", "-c"))
    plain.reset()
    assert "ModuleNotFoundError" in plain.step(probe)[0]
