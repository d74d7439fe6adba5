"""Harbor task folders: loaded, built, run in SWEEnv, graded (partial credit kept through Episode,
the sink and the trainer adapters), validated with their oracle, and exported back.

The folders are the project's own (``envs/harbor-demo``: a shell task and a partial-credit task)
plus broken copies made here. Real Docker, real Ray; Harbor's own loader through a Python >= 3.12
venv that ``python -m swerl.bootstrap test`` installs (skipped, named, where there is none).
"""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from swerl.env import actions
from swerl.env.swe_env import SWEEnv
from swerl.episode import Episode, JsonlSink, Sampled, Step
from swerl.errors import ConfigError, ImageMissing
from swerl.grading import docker_factory, grade
from swerl.grading.harbor import grade_harbor
from swerl.sandbox.base import SandboxConfig
from swerl.tasks.export import export_all
from swerl.tasks.harbor_image import build_harbor_image
from swerl.tasks.images import build_images
from swerl.tasks.instance import select
from swerl.tasks.sources import load_tasks
from swerl.tasks.validate import validate_suite

DEMO = Path(__file__).resolve().parents[1] / "envs" / "harbor-demo"
PRIMES = "swerl/primes-partial"
HELLO = "swerl/hello-shell"
TWO_OF_THREE = actions.bash("printf '2\\n3\\n7\\n' > primes.txt")


def _copy(tmp_path: Path, name: str, new: str) -> Path:
    dest = tmp_path / new
    shutil.copytree(DEMO / name, dest)
    toml = dest / "task.toml"
    toml.write_text(toml.read_text().replace(f'name = "swerl/{name}"', f'name = "swerl/{new}"'))
    return dest


# ----------------------------------------------------------------- loading
def test_folder_fields_come_from_harbors_schema():
    hello, primes = load_tasks(DEMO)
    assert (hello.instance_id, primes.instance_id) == (HELLO, PRIMES)
    assert hello.harness == "harbor" and hello.workdir == "/app"  # the Dockerfile's WORKDIR
    assert hello.problem_statement.startswith("Create a file `greeting.txt`")  # canary line dropped
    h = hello.harbor
    assert (h["cpus"], h["memory_mb"], h["network_mode"]) == (1.0, 1024, "no-network")
    assert (h["agent_timeout"], h["verifier_timeout"]) == (300.0, 60.0)
    assert set(h["tests"]) == {"test.sh"} and set(primes.harbor["tests"]) == {"test.sh", "score.py"}
    assert primes.harbor["agent_timeout"] is None and primes.harbor["verifier_timeout"] == 60.0
    assert load_tasks("harbor-demo") == [hello, primes]  # the bundled folder by name
    assert load_tasks(DEMO / "hello-shell") == [hello]  # one task folder


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda d: (d / "task.toml").write_text("[verifier\n"), r"task\.toml: bad TOML"),
        (lambda d: (d / "task.toml").write_text('[[steps]]\nname = "a"\n'), r"task\.toml: field 'steps'"),
        (
            lambda d: (d / "task.toml").write_text('[environment]\nos = "windows"\n'),
            r"field 'environment\.os'",
        ),
        (
            lambda d: (d / "task.toml").write_text("[verifier]\ntimeout_sec = -1\n"),
            r"field 'verifier\.timeout_sec' must be a positive number",
        ),
        (
            lambda d: (d / "environment" / "Dockerfile").write_text("FROM x\n"),
            r"field 'environment\.workdir'",
        ),
        (lambda d: (d / "tests" / "test.sh").unlink(), r"missing tests/test\.sh"),
        (lambda d: (d / "instruction.md").unlink(), r"missing instruction\.md"),
    ],
)
def test_bad_folders_name_the_file_and_field(tmp_path, edit, message):
    d = _copy(tmp_path, "hello-shell", "broken")
    edit(d)
    with pytest.raises(ConfigError, match=message):
        load_tasks(d)


# ------------------------------------------------------- running and grading
@pytest.fixture(scope="module")
def demo(docker_client, base_image):
    tasks = load_tasks(DEMO)
    build_images(tasks, client=docker_client)
    return tasks


@pytest.fixture
def factory(run_id):
    return docker_factory(600.0, run_id=run_id)


def test_oracle_validates_and_empty_does_not(demo, factory):
    rows = validate_suite(demo, sandbox_factory=factory, out=None)
    assert [(r.gold, r.no_patch, r.ok) for r in rows] == [("resolved", "unresolved", True)] * 2
    assert all("solution 1.0, strict 1.0, empty 0.0" in r.detail for r in rows)


def test_cli_validate_exit_code(demo):
    r = subprocess.run(["python", "-m", "swerl", "tasks", "validate", str(DEMO), "--json"],
                       capture_output=True, text=True, env=os.environ)  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert [row["ok"] for row in json.loads(r.stdout)] == [True, True]


@pytest.mark.parametrize("grading", ["strict", "official"])
def test_partial_reward_in_both_modes(demo, run_id, grading):
    env = SWEEnv(demo, grading=grading, sandbox_config=SandboxConfig(run_id=run_id))
    try:
        obs, _ = env.reset(options={"task": PRIMES})
        assert obs.startswith("Write the first three prime numbers")
        assert len(env.task.base_commit) == 40  # pinned at reset
        env.step(TWO_OF_THREE)
        _, reward, terminated, _, info = env.step(actions.submit())
    finally:
        env.close()
    assert terminated and reward == pytest.approx(2 / 3, abs=1e-4)
    assert info["status"] == "unresolved" and info["grade"]["rewards"]["lines_right"] == 2.0
    assert "primes.txt" in info["patch"]


def test_snapshot_restores_a_harbor_episode(demo, run_id):
    env = SWEEnv(demo, sandbox_config=SandboxConfig(run_id=run_id))
    try:
        env.reset(options={"task": PRIMES})
        env.step(actions.bash("echo 2 > primes.txt"))
        snap = env.snapshot()
        env.reset(options={"task": HELLO})
        env.restore(snap.to_json())
        assert env.task.base_commit == snap.base_commit
        env.step(actions.bash("echo 3 >> primes.txt"))
        _, reward, *_ = env.step(actions.submit())
    finally:
        env.close()
    assert reward == pytest.approx(2 / 3, abs=1e-4)
    assert grade(env.task, "", sandbox_factory=docker_factory(60.0, run_id=run_id)).reward == 0.0


def test_strict_counts_only_the_workdir(demo, run_id):
    """Official mode grades the agent's sandbox as it is; strict re-applies only the workdir's diff."""
    rewards = {}
    for grading in ("official", "strict"):
        env = SWEEnv(demo, grading=grading, sandbox_config=SandboxConfig(run_id=run_id))
        try:
            env.reset(options={"task": HELLO})
            # the answer reaches /app through a link to a file outside the workdir
            env.step(actions.bash("echo 'Hello, Harbor!' > /tmp/g && ln -s /tmp/g greeting.txt"))
            rewards[grading] = env.step(actions.submit())[1]
        finally:
            env.close()
    assert rewards == {"official": 1.0, "strict": 0.0}


def test_a_verifier_that_writes_no_reward_is_an_infra_error(
    tmp_path, docker_client, base_image, factory, run_id
):
    silent = _copy(tmp_path, "hello-shell", "silent")
    (silent / "tests" / "test.sh").write_text("#!/bin/bash\necho 'crashed before writing a reward'\nexit 3\n")
    garbled = _copy(tmp_path, "primes-partial", "garbled")
    (garbled / "tests" / "test.sh").write_text("#!/bin/bash\necho 'nope' > /logs/verifier/reward.txt\n")
    tasks = load_tasks(tmp_path)
    build_images(tasks, client=docker_client)
    for task in tasks:
        result = grade_harbor(task, "", sandbox_factory=factory, retries=0)
        assert result.status.value == "infra_error" and result.reward is None, result
    assert "wrote no reward" in grade_harbor(tasks[1], "", sandbox_factory=factory, retries=0).error
    assert "not a number" in grade_harbor(tasks[0], "", sandbox_factory=factory, retries=0).error
    rows = validate_suite(tasks, sandbox_factory=factory, out=None)
    assert not any(r.ok for r in rows)
    env = SWEEnv(tasks, grading="official", sandbox_config=SandboxConfig(run_id=run_id))
    try:
        env.reset(options={"task": "swerl/silent"})
        _, reward, _, truncated, info = env.step(actions.submit())
    finally:
        env.close()
    assert math.isnan(reward) and info["status"] == "infra_error"  # never 0


def test_a_missing_from_image_says_how_to_provide_it(tmp_path, docker_client):
    d = _copy(tmp_path, "hello-shell", "exotic")
    (d / "environment" / "Dockerfile").write_text("FROM swerl-test/no-such-base:1\nWORKDIR /app\n")
    (task,) = load_tasks(d)
    with pytest.raises(
        ImageMissing, match=r"FROM swerl-test/no-such-base:1.*docker load.*SWERL_HARBOR_BASES"
    ):
        build_harbor_image(task, docker_client)


# -------------------------------------------- rewards through the whole pipeline
def test_partial_reward_survives_runner_sink_and_adapters(demo, ray_session, run_id, tmp_path):
    from swerl.integrations.common import require_reward
    from swerl.integrations.trl import rollout_batch
    from swerl.policies.scripted import ReplayPolicy
    from swerl.rollout import RolloutRunner

    script = Episode(PRIMES, 0, steps=[Step(1, TWO_OF_THREE, ""), Step(2, actions.submit(), "")])
    sink = tmp_path / "episodes.jsonl"
    env_kwargs = {"sandbox_config": SandboxConfig(run_id=run_id)}
    with RolloutRunner(select(demo, [PRIMES]), ReplayPolicy([script]), num_actors=1, sink=sink,
                       env_kwargs=env_kwargs, run_id=run_id) as runner:  # fmt: skip
        (ep,) = runner.run()
    assert ep.reward == pytest.approx(2 / 3, abs=1e-4) and ep.status == "unresolved"
    (read,) = JsonlSink.read(sink)
    assert read.reward == ep.reward
    for i, step in enumerate(read.steps):  # TRL lays out token ids: give the replayed turns some
        step.policy = Sampled(
            prompt_ids=[1, i], completion_ids=[2], logprobs=[-0.5], prompt_start=0 if i == 0 else 3
        ).to_info()
    assert rollout_batch([read])["swerl_reward"] == [ep.reward]  # TRL's reward column
    assert require_reward(read) == ep.reward  # what SkyRL's and verl's adapters hand over

    from swerl.integrations.skyrl import SwerlTextEnv

    skyrl_env = SwerlTextEnv({"tasks": str(DEMO), "run_id": run_id}, {"instance_id": PRIMES})
    try:
        skyrl_env.init([])
        skyrl_env.step(TWO_OF_THREE)
        out = skyrl_env.step(actions.submit())
    finally:
        skyrl_env.close()
    assert out["done"] and out["reward"] == pytest.approx(2 / 3, abs=1e-4)


def test_gold_policy_runs_the_oracle(demo, ray_session, run_id):
    from swerl.policies.scripted import GoldPolicy
    from swerl.rollout import RolloutRunner

    with RolloutRunner(demo, GoldPolicy(), num_actors=1, run_id=run_id,
                       env_kwargs={"sandbox_config": SandboxConfig(run_id=run_id)}) as runner:  # fmt: skip
        episodes = runner.run()
    assert sorted((e.task_id, e.reward) for e in episodes) == [(HELLO, 1.0), (PRIMES, 1.0)]


# ------------------------------------------------------------------ export
HARBOR_PYTHON = Path(
    os.environ.get("SWERL_HARBOR_PYTHON", Path.home() / ".cache/swerl/harbor-venv/bin/python")
)


def test_export_round_trip(demo, tasks, docker_client, factory, tmp_path):
    """Harbor tasks and SWE-bench tasks exported as Harbor folders load back and validate;
    the exported SWE-bench verifier agrees with swebench's grading on a wrong patch."""
    swe = select(tasks, ["swerl__textkit-1", "swerl__tinyconf-2"])
    out = tmp_path / "exported"
    folders = export_all([*demo, *swe], out)
    assert [f.name for f in folders] == [
        "swerl-hello-shell",
        "swerl-primes-partial",
        "swerl__textkit-1",
        "swerl__tinyconf-2",
    ]
    back = load_tasks(out)
    assert [t.harness for t in back] == ["harbor"] * 4
    assert back[0].harbor["tests"] == demo[0].harbor["tests"]
    build_images(back, client=docker_client)
    rows = validate_suite(back, sandbox_factory=factory, out=None)
    assert [r.ok for r in rows] == [True] * 4, [r.detail for r in rows]
    wrong = next(
        w for line in (DEMO.parent / "swerl-mini" / "wrong_patches.jsonl").read_text().splitlines()
        if (w := json.loads(line))["instance_id"] == "swerl__tinyconf-2"
    )  # fmt: skip

    ours = grade(swe[1], wrong["patch"], sandbox_factory=factory)
    theirs = grade_harbor(back[3], wrong["patch"], sandbox_factory=factory)
    assert (ours.status.value, theirs.status.value, theirs.reward) == ("unresolved", "unresolved", 0.0)
    assert theirs.rewards["fail_to_pass"] == 0.0 and theirs.rewards["pass_to_pass"] == 1.0
    if not HARBOR_PYTHON.exists():
        pytest.skip(
            f"no Harbor venv at {HARBOR_PYTHON} (python -m swerl.bootstrap test makes one where Python >= 3.12 exists)"
        )
    check = (
        "import sys; from pathlib import Path; from harbor.models.task.task import Task\n"
        "for d in sorted(Path(sys.argv[1]).iterdir()):\n"
        "    t = Task(d); assert Task.is_valid_dir(d), d; print(t.name, t.config.verifier.timeout_sec)\n"
    )
    r = subprocess.run([str(HARBOR_PYTHON), "-c", check, str(out)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split("\n")[:4] == ["swerl/hello-shell 60.0", "swerl/primes-partial 60.0",
                                        "swerl/swerl__textkit-1 1800.0", "swerl/swerl__tinyconf-2 1800.0"]  # fmt: skip
