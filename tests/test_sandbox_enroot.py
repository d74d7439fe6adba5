"""Enroot-specific behaviour, against the enroot CLI test double (tests/enroot_double/enroot).

The backend code is the one that drives real enroot; only the binary is the double.
"""

from __future__ import annotations

import math
import os
import stat
import threading

import pytest

from swerl.env import actions
from swerl.env.swe_env import SWEEnv
from swerl.errors import BackendUnavailable, ImageMissing, SandboxError
from swerl.policies.scripted import GoldPolicy
from swerl.sandbox.enroot import EnrootSandbox, reap
from swerl.tasks.instance import load_instances


@pytest.fixture
def fresh_root(tmp_path, enroot_double):
    """An empty enroot root (nothing imported yet)."""
    return str(tmp_path / "root")


def names(root: str) -> list[str]:
    data = os.path.join(root, "data")
    return sorted(n for n in os.listdir(data) if not n.startswith(".")) if os.path.isdir(data) else []


def test_directories_are_private_and_world_writable_is_refused(
    tmp_path, monkeypatch, base_image, enroot_double
):
    monkeypatch.delenv("SWERL_ENROOT_ROOT")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    with EnrootSandbox(base_image) as sb:
        assert sb.execute("echo ok").output == "ok\n"
    root = tmp_path / "xdg" / "swerl" / "enroot"
    for d in (tmp_path / "xdg", tmp_path / "xdg" / "swerl", root, *root.iterdir()):
        assert stat.S_IMODE(d.stat().st_mode) == 0o700, d
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    with pytest.raises(SandboxError, match="world-writable"):
        EnrootSandbox(base_image, root=str(shared)).start()


@pytest.mark.parametrize("step", ["import", "create", "start"])
def test_a_failing_enroot_is_a_sandbox_error_with_its_stderr(step, fresh_root, base_image, sandbox_config):
    sb = EnrootSandbox(
        base_image, sandbox_config, root=fresh_root, enroot_env={"SWERL_ENROOT_DOUBLE_FAIL": step}
    )
    with pytest.raises(SandboxError, match=f"{step} told to fail"):
        sb.start()
    assert not sb.alive
    assert names(fresh_root) == []  # a failed start leaves no container behind


def test_missing_image_and_missing_binary(base_image, sandbox_config, enroot_double):
    with pytest.raises(ImageMissing):
        EnrootSandbox("sweb.eval.x86_64.no-such-task:latest", sandbox_config).start()
    with pytest.raises(BackendUnavailable, match="not found"):
        EnrootSandbox(base_image, sandbox_config, enroot="/nonexistent/enroot").start()


def test_concurrent_imports_of_one_image_make_one_file(fresh_root, base_image, sandbox_config):
    boxes = [EnrootSandbox(base_image, sandbox_config, root=fresh_root) for _ in range(3)]
    errors: list[BaseException] = []

    def start(sb):
        try:
            sb.start()
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=start, args=(sb,)) for sb in boxes]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not errors
        images = os.listdir(os.path.join(fresh_root, "images"))
        assert len([f for f in images if f.endswith(".sqsh")]) == 1, images
        assert not [f for f in images if "tmp" in f]
        assert [sb.execute("echo $((6*7))").output for sb in boxes] == ["42\n"] * 3
    finally:
        for sb in boxes:
            sb.close()
    assert names(fresh_root) == []


def test_close_removes_and_reap_removes_a_runs_leftovers(base_image, sandbox_config, enroot_double):
    cfg = sandbox_config.replace(run_id="test-enroot-reap")
    left = [EnrootSandbox(base_image, cfg).start() for _ in range(2)]
    other = EnrootSandbox(base_image, sandbox_config).start()
    try:
        assert all(sb.name.startswith("swerl-test-enroot-reap-") for sb in left)
        assert reap("test-enroot-reap") == 2
        assert other.name in names(str(enroot_double)) and left[0].name not in names(str(enroot_double))
        other.close()
        assert other.name not in names(str(enroot_double))
    finally:
        for sb in [*left, other]:
            sb.close()


def test_pyxis_launcher_srun_failure_is_a_sandbox_error(
    base_image, sandbox_config, monkeypatch, enroot_double
):
    if not any(os.access(os.path.join(p, "srun"), os.X_OK) for p in os.environ["PATH"].split(":")):
        pytest.skip("no srun")
    monkeypatch.setenv("SLURM_JOB_ID", "999999999")  # no such job: the real srun fails
    sb = EnrootSandbox(base_image, sandbox_config, launcher="pyxis", network_isolation="none")
    with pytest.raises(SandboxError, match="srun"):
        sb.start()


@pytest.fixture
def task(task_images):
    return load_instances("swerl-mini")[0]


def _gold_actions(task):
    return GoldPolicy().script(task, 0)


def test_episode_ends_infra_error_not_zero_when_the_container_dies(task, sandbox_config, enroot_double):
    env = SWEEnv([task], backend="enroot", sandbox_config=sandbox_config)
    try:
        env.reset(options={"task": task.instance_id})
        env.sandbox._c.proc.kill()  # the enroot start process dies mid-episode
        env.sandbox._c.proc.wait()
        _obs, reward, terminated, truncated, info = env.step(actions.bash("ls"))
        assert info["status"] == "infra_error" and math.isnan(reward) and truncated and not terminated
    finally:
        env.close()


def test_episode_ends_infra_error_not_zero_when_grading_cannot_start(task, sandbox_config, enroot_double):
    env = SWEEnv([task], backend="enroot", sandbox_config=sandbox_config, grade_retries=0)
    try:
        env.reset(options={"task": task.instance_id})
        env.backend_options["enroot_env"] = {"SWERL_ENROOT_DOUBLE_FAIL": "create"}  # grading sandboxes
        for action in _gold_actions(task):
            _obs, reward, terminated, truncated, info = env.step(action)
            if terminated or truncated:
                break
        assert info["status"] == "infra_error" and math.isnan(reward), info
        assert "told to fail" in info.get("error", "") + str(info.get("grade", ""))
    finally:
        env.close()
