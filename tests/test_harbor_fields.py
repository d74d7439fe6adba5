"""Every field of Harbor's task model is honoured or refused, never dropped (swerl.tasks.harbor_fields).

The table is checked against Harbor 0.26's own model (through the Python 3.12 venv bootstrap
makes); refusals name the task file, the field and the backend; an accepted deviation is recorded
in the grade. What swerl honours is checked on real Docker with task folders written here: the
agent's commands as ``[agent].user``, the verifier as ``[verifier].user``, no network, cpus,
memory, ``[environment].env``, and storage_mb where the daemon's storage driver can limit it.
"""

from __future__ import annotations

import json
import os
import subprocess
import textwrap
from pathlib import Path

import pytest

from swerl.env import actions
from swerl.env.swe_env import SWEEnv
from swerl.errors import ConfigError
from swerl.sandbox.base import SandboxConfig
from swerl.tasks.harbor_fields import FIELDS
from swerl.tasks.harbor_settings import sandbox_config
from swerl.tasks.images import build_images
from swerl.tasks.sources import load_tasks
from swerl.tasks.validate import validate_suite

HARBOR_PYTHON = Path(
    os.environ.get("SWERL_HARBOR_PYTHON", Path.home() / ".cache/swerl/harbor-venv/bin/python")
)
DOCKERFILE = """FROM debian:bookworm
RUN useradd -m -u 1234 agent && mkdir -p /app && chown agent /app
WORKDIR /app
"""
# The verifier checks who it runs as and what its sandbox was given; each check is a named reward.
TEST_SH = r"""#!/bin/bash
ok() { if eval "$1"; then echo 1; else echo 0; fi; }
cat > /logs/verifier/reward.json <<EOF
{"reward": $(ok '[ "$(cat /app/out.txt 2>/dev/null)" = done ]'),
 "as_root": $(ok '[ "$(id -un)" = root ]'),
 "task_env": $(ok '[ "$GREETING" = hello ]'),
 "verifier_env": $(ok '[ "$MODE" = strict-check ]'),
 "no_network": $(ok '[ "$(ls /sys/class/net)" = lo ]')}
EOF
"""


def write_task(root: Path, name: str, toml: str, dockerfile: str = DOCKERFILE) -> Path:
    d = root / name
    for sub in ("environment", "tests", "solution"):
        (d / sub).mkdir(parents=True)
    (d / "task.toml").write_text(textwrap.dedent(toml) + f'\n[task]\nname = "swerl/{name}"\n')
    (d / "instruction.md").write_text("Write `done` to /app/out.txt.\n")
    (d / "environment" / "Dockerfile").write_text(dockerfile)
    (d / "tests" / "test.sh").write_text(TEST_SH)
    (d / "solution" / "solve.sh").write_text("#!/bin/bash\necho done > /app/out.txt\n")
    return d


USERS = """
[agent]
user = "agent"

[verifier]
user = "root"
env = { MODE = "strict-check" }

[environment]
cpus = 1
memory_mb = 512
network_mode = "no-network"
env = { GREETING = "${SWERL_TEST_NO_SUCH_VAR:-hello}" }
"""


# ------------------------------------------------------------- the table itself
def test_the_table_covers_harbors_own_model():
    """Every field of Harbor 0.26's TaskConfig (and its tables) has a row: a new one fails here."""
    if not HARBOR_PYTHON.exists():
        pytest.skip(f"no Harbor venv at {HARBOR_PYTHON} (python -m swerl.bootstrap test makes one)")
    script = textwrap.dedent("""
        import json
        from harbor.models.task.config import TaskConfig
        out = []
        for name, f in TaskConfig.model_fields.items():
            sub = getattr(f.annotation, "model_fields", None)
            if name in ("task", "environment", "agent", "verifier", "solution"):
                model = {"task": "PackageInfo", "environment": "EnvironmentConfig", "agent": "AgentConfig",
                         "verifier": "VerifierConfig", "solution": "SolutionConfig"}[name]
                import harbor.models.task.config as c
                out += [f"{name}.{k}" for k in getattr(c, model).model_fields]
            else:
                out.append(name)
        print(json.dumps(out))
    """)
    r = subprocess.run([str(HARBOR_PYTHON), "-c", script], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    harbors = set(json.loads(r.stdout))
    assert harbors - set(FIELDS) == set(), "Harbor fields swerl has no row for"
    assert set(FIELDS) - harbors == set(), "rows for fields Harbor does not define"


@pytest.mark.parametrize(
    ("toml", "field"),
    [
        ("[environment]\ngpus = 1\n", "environment.gpus"),
        ('[environment]\nnetwork_mode = "allowlist"\n', "environment.network_mode"),
        ('[verifier]\nallowed_hosts = ["pypi.org"]\n', "verifier.allowed_hosts"),
        (
            '[environment]\nnetwork_mode = "no-network"\n[agent]\nnetwork_mode = "public"\n',
            "agent.network_mode",
        ),
        ('[environment]\nhealthcheck = { command = "true" }\n', "environment.healthcheck"),
        ('[[environment.mcp_servers]]\nname = "m"\nurl = "http://x"\n', "environment.mcp_servers"),
        ('artifacts = ["/app/log.txt"]\n', "artifacts"),
        ("[environment]\ncpu = 2\n", "environment.cpu"),  # a misspelt key Harbor would drop
        ("[verfier]\ntimeout_sec = 5\n", "verfier"),
    ],
)
def test_what_swerl_cannot_honour_is_refused_then_accepted_and_recorded(tmp_path, toml, field):
    d = write_task(tmp_path, "t", toml)
    with pytest.raises(ConfigError, match=rf"{d}/task\.toml: field '{field}'.*accept"):
        load_tasks(d)
    (task,) = load_tasks(d, accept=[field])
    assert any(dev.startswith(f"{field}:") for dev in task.harbor["deviations"]), task.harbor["deviations"]


def test_what_cannot_run_at_all_is_refused_even_when_accepted(tmp_path):
    d = write_task(tmp_path, "t", '[[steps]]\nname = "a"\n')
    with pytest.raises(ConfigError, match=r"field 'steps'"):
        load_tasks(d, accept=["*"])


def test_backend_dependent_fields_name_the_backend(tmp_path):
    (task,) = load_tasks(write_task(tmp_path, "t", USERS + "storage_mb = 100\n"))
    base = SandboxConfig()
    with pytest.raises(ConfigError, match=r"field 'environment\.storage_mb'.* on the enroot backend"):
        sandbox_config(task, base, "enroot")
    with pytest.raises(ConfigError, match=r"field 'agent\.user' is 'agent'.* on the kubernetes backend"):
        sandbox_config(task, base, "kubernetes")
    (public,) = load_tasks(write_task(tmp_path, "p", ""))  # network_mode unset: Harbor's public
    with pytest.raises(ConfigError, match=r"field 'environment\.network_mode' is 'public'.* on the docker"):
        sandbox_config(public, base, "docker")
    config, deviations = sandbox_config(public, base.replace(network=True), "docker")
    assert config.network and deviations == []
    (public,) = load_tasks(tmp_path / "p", accept=["environment.network_mode"])
    config, deviations = sandbox_config(public, base, "docker")
    assert not config.network and deviations[0].startswith("environment.network_mode: is 'public'")
    (task,) = load_tasks(
        write_task(tmp_path, "e", '[environment]\nenv = { K = "${SWERL_TEST_UNSET_VAR}" }\n')
    )
    with pytest.raises(ConfigError, match=r"field 'environment\.env\.K' needs SWERL_TEST_UNSET_VAR"):
        sandbox_config(task, base.replace(network=True), "docker")


# ------------------------------------------------------------------ real Docker
@pytest.fixture(scope="module")
def users_task(tmp_path_factory, docker_client, base_image):
    tasks = load_tasks(write_task(tmp_path_factory.mktemp("harbor-fields"), "users", USERS))
    build_images(tasks, client=docker_client)
    return tasks


def test_agent_and_verifier_run_as_their_users_with_the_tasks_limits(users_task, run_id, docker_client):
    env = SWEEnv(users_task, sandbox_config=SandboxConfig(run_id=run_id, network=True))
    try:
        env.reset()
        host = docker_client.api.inspect_container(env.sandbox.container_id)["HostConfig"]
        obs, *_ = env.step(actions.bash('id -un; echo "g=$GREETING"; ls /sys/class/net'))
        owner, *_ = env.step(actions.bash("echo done > out.txt && stat -c %U out.txt"))
        _, reward, terminated, _, info = env.step(actions.submit())
    finally:
        env.close()
    lines = obs.split("<output>\n", 1)[1].split()
    assert lines[:3] == ["agent", "g=hello", "lo"], obs  # the task's no-network beats the config's network
    assert (host["Memory"], host["NanoCpus"], host["NetworkMode"]) == (512 << 20, 10**9, "none")
    assert "\nagent\n" in owner, owner
    assert terminated and reward == 1.0, info
    # the verifier ran as root (strict: a fresh sandbox), with both envs, and no network
    assert info["grade"]["rewards"] == {
        "reward": 1,
        "as_root": 1,
        "task_env": 1,
        "verifier_env": 1,
        "no_network": 1,
    }
    assert "deviations" not in info["grade"]


def test_official_grading_refuses_a_verifier_user_it_cannot_switch_to(users_task, run_id, tmp_path):
    env = SWEEnv(users_task, grading="official", sandbox_config=SandboxConfig(run_id=run_id))
    try:
        with pytest.raises(ConfigError, match=r"field 'verifier\.user' is 'root'.*runs as 'agent'.*docker"):
            env.reset()
    finally:
        env.close()
    (accepting,) = load_tasks(users_task[0].harbor["task_dir"], accept=["verifier.user"])
    env = SWEEnv([accepting], grading="official", sandbox_config=SandboxConfig(run_id=run_id))
    try:
        env.reset()
        env.step(actions.bash("echo done > out.txt"))
        _, reward, _, _, info = env.step(actions.submit())
    finally:
        env.close()
    assert reward == 1.0 and info["grade"]["rewards"]["as_root"] == 0  # ran as the agent: recorded
    assert info["grade"]["deviations"][0].startswith("verifier.user: is 'root'")


def test_the_oracle_runs_as_the_agent(users_task, run_id):
    from swerl.grading import docker_factory

    (row,) = validate_suite(users_task, sandbox_factory=docker_factory(600.0, run_id=run_id), out=None)
    assert row.ok, row


def test_a_public_task_gets_the_network_the_sandbox_config_allows(
    tmp_path, docker_client, base_image, run_id
):
    (task,) = load_tasks(
        write_task(tmp_path, "public", "[environment]\nallow_internet = true\n")
    )  # the old form
    assert task.harbor["network_mode"] == "public"
    build_images([task], client=docker_client)
    env = SWEEnv([task], sandbox_config=SandboxConfig(run_id=run_id, network=True))
    try:
        env.reset()
        obs, *_ = env.step(actions.bash("ls /sys/class/net"))
    finally:
        env.close()
    assert "eth0" in obs, obs


def test_storage_mb_is_honoured_or_refused_by_what_the_daemon_can_do(
    tmp_path, docker_client, base_image, run_id
):
    from swerl.sandbox.docker import storage_limit_refusal

    (task,) = load_tasks(write_task(tmp_path, "disk", USERS + "storage_mb = 64\n"))
    build_images([task], client=docker_client)
    why = storage_limit_refusal(task.image)
    env = SWEEnv([task], sandbox_config=SandboxConfig(run_id=run_id))
    try:
        if why:  # overlay2 on ext4 here: the daemon says it cannot, and so does swerl
            with pytest.raises(
                ConfigError, match=r"field 'environment\.storage_mb'.*storage driver.* docker"
            ):
                env.reset()
            return
        env.reset()
        obs, *_ = env.step(actions.bash("head -c 100M /dev/zero > big; echo rc=$?"))
        assert "rc=0" not in obs, obs  # 100 MB do not fit in 64
    finally:
        env.close()


def test_the_readme_shows_this_table():
    from swerl.tasks.harbor_fields import table_markdown

    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    assert table_markdown() in readme
