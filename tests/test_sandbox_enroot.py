"""Enroot-specific behaviour: isolation, limits, environment, lifecycle, reaping, Pyxis.

Against the enroot CLI test double (tests/enroot_double/enroot), which behaves like
Enroot 4.1.2 where it matters (clears the environment, login shell, no pid namespace,
uid map 0 0 1, all capabilities, host /proc and /sys), or against the real Enroot when
SWERL_ENROOT_REAL=/path/to/enroot is set (failure injection then skips). The backend
code is the one that drives real enroot. Host-process checks use unique markers.
"""

from __future__ import annotations

import logging
import math
import os
import shutil
import stat
import subprocess
import threading
import time
import uuid

import pytest
from grading_cheat import grades_gold_and_cheat
from midcommand import fails_within

from swerl.env import actions
from swerl.env.swe_env import SWEEnv
from swerl.errors import BackendUnavailable, ConfigError, ImageMissing, SandboxError
from swerl.policies.scripted import GoldPolicy
from swerl.sandbox.base import DEFAULT_CAPS
from swerl.sandbox.docker import DockerSandbox
from swerl.sandbox.enroot import EnrootSandbox, pyxis_limit_args, reap, slurm_enforcement
from swerl.tasks.sources import load_tasks

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="swerl's isolation around enroot needs root")

# Linux capability numbers (capability.h), for CapBnd masks.
CAP_BITS = {"CHOWN": 0, "DAC_OVERRIDE": 1, "FOWNER": 3, "FSETID": 4, "KILL": 5, "SETGID": 6, "SETUID": 7}


@pytest.fixture
def fresh_root(tmp_path, enroot_double):
    """An empty enroot root (nothing imported yet)."""
    return str(tmp_path / "root")


def names(root: str) -> list[str]:
    data = os.path.join(root, "data")
    return sorted(n for n in os.listdir(data) if not n.startswith(".")) if os.path.isdir(data) else []


def marker() -> str:
    return f"swerl-marker-{uuid.uuid4().hex[:12]}"


def host_pids(mark: str) -> list[int]:
    """Host processes whose command line starts with ``mark``."""
    out = subprocess.run(["pgrep", "-f", f"^{mark}"], capture_output=True, text=True).stdout
    return [int(p) for p in out.split()]


def wait_until(cond, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


@pytest.fixture
def sandbox(base_image, sandbox_config, enroot_double):
    with EnrootSandbox(base_image, sandbox_config) as sb:
        yield sb


# ------------------------------------------------------------------ directories, failures
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


@pytest.mark.parametrize(
    ("step", "start_from"),
    [("import", "image"), ("start", "image"), ("create", "create")],
)
def test_a_failing_enroot_is_a_sandbox_error_with_its_stderr(
    step, start_from, fresh_root, base_image, sandbox_config, double_only
):
    sb = EnrootSandbox(
        base_image,
        sandbox_config,
        root=fresh_root,
        start_from=start_from,
        enroot_env={"SWERL_ENROOT_DOUBLE_FAIL": step},
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


# ------------------------------------------------------------------ lifecycle and reaping
def test_reap_ends_a_runs_sandboxes_and_close_after_reap_is_quiet(
    base_image, sandbox_config, enroot_double, caplog
):
    cfg = sandbox_config.replace(run_id=f"test-enroot-reap-{uuid.uuid4().hex[:6]}")
    # one started from the image, one created (a full copy that close or reap must delete),
    # the second as one of the run's parts (``RUN-a1``), as Docker's reaper finds them
    parts = {"image": cfg, "create": cfg.replace(run_id=f"{cfg.run_id}-a1")}
    left = [EnrootSandbox(base_image, c, start_from=s).start() for s, c in parts.items()]
    other = EnrootSandbox(base_image, sandbox_config).start()
    try:
        assert left[1].name in names(str(enroot_double))
        assert reap(cfg.run_id) == 2
        for sb in left:
            with pytest.raises(SandboxError):
                sb.execute("true")
        assert other.execute("echo alive").output == "alive\n"
        assert left[1].name not in names(str(enroot_double))
        with caplog.at_level(logging.WARNING):
            for sb in left:
                sb.close()
        assert not [r for r in caplog.records if r.levelno >= logging.WARNING], caplog.text
        other.close()
    finally:
        for sb in [*left, other]:
            sb.close()


@needs_root
def test_close_kills_everything_the_sandbox_started(sandbox):
    mark = marker()
    # detached three ways: a new session, nohup, and a double fork
    sandbox.execute(f"setsid bash -c 'exec -a {mark}-a sleep 300' >/dev/null 2>&1 &")
    sandbox.execute(f"nohup bash -c 'exec -a {mark}-b sleep 300' >/dev/null 2>&1 &")
    sandbox.execute(f"( ( exec -a {mark}-c sleep 300 ) & ) >/dev/null 2>&1")
    assert wait_until(lambda: len(host_pids(mark)) == 3), host_pids(mark)
    sandbox.close()
    assert wait_until(lambda: not host_pids(mark), 5.0), host_pids(mark)


# ------------------------------------------------------------------ isolation
@needs_root
def test_host_processes_are_invisible_and_out_of_reach(sandbox):
    mark = marker()
    host = subprocess.Popen(["bash", "-c", f"exec -a {mark} sleep 120"])
    try:
        assert wait_until(lambda: host_pids(mark) == [host.pid])
        seen = sandbox.execute(f"ps -eo args | grep -c '^{mark}' || true").output.strip()
        assert seen == "0"
        assert int(sandbox.execute("ps -e --no-headers | wc -l").output) < 20
        r = sandbox.execute(f"kill -TERM {host.pid}")
        assert r.returncode != 0 and "No such process" in r.output
        assert host.poll() is None
    finally:
        host.kill()
        host.wait()


@needs_root
def test_host_kernel_settings_sysfs_and_devices_are_out_of_reach(sandbox):
    for path in ("/proc/sys/kernel/hostname", "/proc/sys/vm/drop_caches", "/proc/sysrq-trigger"):
        r = sandbox.execute(f"echo 1 > {path}")
        assert r.returncode != 0, (path, r.output)
    assert sandbox.execute("hostname").output == "sandbox\n"
    assert sandbox.execute("touch /sys/x").returncode != 0
    assert sandbox.execute("ls /sys/class/net").output.split() == ["lo"]
    devices = set(sandbox.execute("ls /dev").output.split())
    assert devices <= {"null", "zero", "full", "random", "urandom", "tty", "fuse", "pts", "shm", "mqueue"} | {
        "fd",
        "ptmx",
        "stdin",
        "stdout",
        "stderr",
    }, devices
    for cmd in ("umount /proc/sys", "mount -o remount,rw /proc/sys", "mount -t proc proc /mnt"):
        assert sandbox.execute(cmd).returncode != 0, cmd
    assert sandbox.execute(
        "grep -c . /sys/fs/cgroup/pids/pids.max >/dev/null; touch /sys/fs/cgroup/x"
    ).returncode


@needs_root
def test_capabilities_are_cap_add_and_other_users_need_swerls_isolation(
    base_image, sandbox_config, enroot_double
):
    def bounding(sb) -> int:
        line = sb.execute("grep CapBnd /proc/self/status").output
        return int(line.split()[1], 16)

    with EnrootSandbox(base_image, sandbox_config) as sb:
        assert bounding(sb) == sum(1 << CAP_BITS[c] for c in DEFAULT_CAPS)
        assert sb.execute("mount -t tmpfs none /mnt").returncode != 0  # no CAP_SYS_ADMIN
        assert sb.execute("grep NoNewPrivs /proc/self/status").output.split()[1] == "1"
    with EnrootSandbox(base_image, sandbox_config.replace(cap_add=("CHOWN", "KILL"))) as sb:
        assert bounding(sb) == (1 << 0) | (1 << 5)
        assert sb.execute("touch /tmp/f && chown 0:0 /tmp/f").returncode == 0
        assert sb.execute("mknod /tmp/n c 1 3").returncode != 0  # no CAP_MKNOD
    with pytest.raises(ConfigError, match=r"cannot run a sandbox as user 'nobody' without swerl's isolation"):
        EnrootSandbox(base_image, sandbox_config.replace(user="nobody"), isolation="enroot").start()
    with pytest.raises(ConfigError, match="invalid capability"):
        EnrootSandbox(base_image, sandbox_config.replace(cap_add=("SYS ADMIN",))).start()


@needs_root
def test_memory_and_pids_limits_are_applied(base_image, sandbox_config, enroot_double):
    cfg = sandbox_config.replace(memory="64m", pids_limit=40, cpus=0.5)
    with EnrootSandbox(base_image, cfg) as sb:
        assert sb.limits == {"memory": "cgroup", "cpus": "cgroup", "pids": "cgroup"}
        r = sb.execute("python3 -c 'b = bytearray(256 << 20); print(\"allocated\")'")
        assert r.returncode == 137 and "allocated" not in r.output, r.output
        forks = (
            "import os, time\nn = 0\ntry:\n    for _ in range(100):\n        if os.fork() == 0:\n"
            "            time.sleep(2)\n            os._exit(0)\n        n += 1\nexcept OSError:\n    pass\nprint(n)\n"
        )
        sb.write_file("/tmp/forks.py", forks.encode())
        assert int(sb.execute("python3 /tmp/forks.py").output) < 40
        assert sb.execute("echo still-here").output == "still-here\n"


# ------------------------------------------------------------------ environment
@pytest.fixture(scope="module")
def env_image(docker_client, base_image) -> str:
    """An image with its own ENV (PATH and a value with spaces), as task images have."""
    import io

    tag = "swerl-test-env:1"
    dockerfile = (
        f"FROM {base_image}\n"
        'ENV PATH=/opt/swerl-bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin GREETING="a b"\n'
        'CMD ["bash"]\n'
    )
    docker_client.images.build(fileobj=io.BytesIO(dockerfile.encode()), tag=tag, rm=True)
    return tag


def test_environment_is_exactly_dockers(env_image, sandbox_config, enroot_double, docker_client):
    env = {"QUOTED": '"kept"', "LINES": "one\ntwo\nTHREE=3", "ODD": "$HOME `id` it's", "UNI": "é ✓"}
    cfg = sandbox_config.replace(env=env)
    show = "env -0 | sort -z"
    with DockerSandbox(env_image, cfg, client=docker_client) as docker_sb:
        expected = docker_sb.execute(show).raw
    with EnrootSandbox(env_image, cfg) as sb:
        got = sb.execute(show).raw
        assert sb.execute("echo $PATH", env={"PATH": "/x:/bin"}).output == "/x:/bin\n"
    assert got.split(b"\0") == expected.split(b"\0")
    assert b"PATH=/opt/swerl-bin:" in got and b"LINES=one\ntwo\nTHREE=3" in got


# ------------------------------------------------------------------ a container that dies
@pytest.fixture
def task(task_images):
    return load_tasks("swerl-mini")[0]


def _jail_init(proc) -> int:
    """The host pid of the sandbox's pid 1 (the child of unshare)."""
    with open(f"/proc/{proc.pid}/task/{proc.pid}/children") as f:
        return int(f.read().split()[0])


def test_a_command_fails_in_bounded_time_when_the_start_process_dies_under_it(sandbox):
    """The server may outlive ``enroot start`` and hold the pipe open: the probe still ends it."""
    sandbox._channel.probe_every = 0.5
    fails_within(30, sandbox, sandbox._c.proc.kill, r"exited -9")


@pytest.mark.parametrize("victim", ["start process", "sandbox init"])
def test_episode_ends_infra_error_not_zero_when_the_container_dies(
    victim, task, sandbox_config, enroot_double
):
    env = SWEEnv([task], backend="enroot", sandbox_config=sandbox_config)
    try:
        env.reset(options={"task": task.instance_id})
        proc = env.sandbox._c.proc
        if victim == "start process":
            proc.kill()
        else:
            if os.geteuid() != 0:
                pytest.skip("no sandbox init without swerl's isolation (root)")
            os.kill(_jail_init(proc), 9)
        proc.wait()
        _obs, reward, terminated, truncated, info = env.step(actions.bash("ls"))
        assert info["status"] == "infra_error" and math.isnan(reward) and truncated and not terminated
    finally:
        env.close()


def test_episode_ends_infra_error_not_zero_when_grading_cannot_start(
    task, sandbox_config, enroot_double, double_only
):
    env = SWEEnv([task], backend="enroot", sandbox_config=sandbox_config, grade_retries=0)
    try:
        env.reset(options={"task": task.instance_id})
        env.backend_options["enroot_env"] = {"SWERL_ENROOT_DOUBLE_FAIL": "start"}  # grading sandboxes
        for action in GoldPolicy().script(task, 0):
            _obs, reward, terminated, truncated, info = env.step(action)
            if terminated or truncated:
                break
        assert info["status"] == "infra_error" and math.isnan(reward), info
        assert "told to fail" in info.get("error", "") + str(info.get("grade", ""))
    finally:
        env.close()


# ------------------------------------------------------------------ Pyxis (real srun + Pyxis only)
def _has_pyxis() -> bool:
    if not shutil.which("srun"):
        return False
    out = subprocess.run(["srun", "--help"], capture_output=True, text=True, timeout=30).stdout
    return "--container-image" in out


NO_LIMITS = {"memory": "", "cpus": 0.0, "pids_limit": 0}
"""What a Pyxis sandbox must be given where Slurm does not enforce a step's limits."""


def test_pyxis_refuses_limits_slurm_would_not_enforce(base_image, sandbox_config, monkeypatch, enroot_double):
    monkeypatch.setenv("SLURM_JOB_ID", "999999999")
    opts = {"launcher": "pyxis", "network_isolation": "none"}
    with pytest.raises(
        ConfigError, match=r"cannot enforce .*pids_limit \(Slurm has no per-step process limit"
    ):
        EnrootSandbox(base_image, sandbox_config.replace(memory="", cpus=0.0), **opts).start()
    enforced = slurm_enforcement()
    cfg = sandbox_config.replace(memory="256m", cpus=1.5, pids_limit=0)
    if all(enforced.values()):
        args, applied = pyxis_limit_args(cfg)
        assert args == ["--mem=256M", "--cpus-per-task=2"] and applied["pids"] == "none (not asked)"
    else:  # this machine's Slurm: TaskPlugin=task/none
        with pytest.raises(ConfigError, match=r"cannot enforce memory \(srun --mem, enforced only with"):
            EnrootSandbox(base_image, cfg, **opts).start()
    args, applied = pyxis_limit_args(sandbox_config.replace(**NO_LIMITS))
    assert args == [] and set(applied.values()) == {"none (not asked)"}


def test_pyxis_srun_failure_names_srun_and_the_job(base_image, sandbox_config, monkeypatch, enroot_double):
    if not shutil.which("srun"):
        pytest.skip("no srun")
    sandbox_config = sandbox_config.replace(**NO_LIMITS)
    monkeypatch.setenv("SLURM_JOB_ID", "999999999")  # no such job: the real srun fails
    sb = EnrootSandbox(base_image, sandbox_config, launcher="pyxis", network_isolation="none")
    with pytest.raises(SandboxError, match=r"srun \(job 999999999\)"):
        sb.start()
    monkeypatch.delenv("SLURM_JOB_ID")
    with pytest.raises(SandboxError, match="SLURM_JOB_ID is not set"):
        EnrootSandbox(base_image, sandbox_config, launcher="pyxis", network_isolation="none").start()


@pytest.fixture(scope="module")
def slurm_job(tmp_path_factory):
    """A running Slurm job to start Pyxis steps in (real Slurm with the Pyxis plugin and a real
    Enroot on the node); cancelled at the end."""
    if not (_has_pyxis() and os.environ.get("SWERL_ENROOT_REAL")):
        pytest.skip("needs Slurm with Pyxis and a real Enroot (SWERL_ENROOT_REAL)")
    job = subprocess.run(
        [
            "sbatch",
            "--parsable",
            "--cpus-per-task=1",
            "--time=20",
            f"--output={tmp_path_factory.mktemp('slurm')}/slurm-%j.out",
            "--wrap",
            "sleep 1200",
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    try:
        state = lambda: subprocess.run(  # noqa: E731
            ["squeue", "-h", "-j", job, "-o", "%T"], capture_output=True, text=True
        ).stdout.strip()
        if not wait_until(lambda: state() == "RUNNING", 60):
            pytest.skip(f"job {job} did not start: {state()}")
        yield job
    finally:
        subprocess.run(["scancel", job], capture_output=True)


def _node_containers() -> list[str]:
    env = {k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "USER")}
    out = subprocess.run(
        [os.environ["SWERL_ENROOT_REAL"], "list"], env=env, capture_output=True, text=True
    ).stdout
    return [n for n in out.split() if n.startswith("pyxis_")]


def test_pyxis_partial_lines_binary_files_env_and_no_leftovers(
    slurm_job, base_image, sandbox_config, monkeypatch, enroot_double
):
    monkeypatch.setenv("SLURM_JOB_ID", slurm_job)
    before = _node_containers()
    opts = {"launcher": "pyxis", "network_isolation": "none"}
    with EnrootSandbox(base_image, sandbox_config.replace(workdir="/tmp", **NO_LIMITS), **opts) as sb:
        assert sb.limits == {
            "memory": "none (not asked)",
            "cpus": "none (not asked)",
            "pids": "none (not asked)",
        }
        assert sb.execute("printf abc", timeout=20).output == "abc"  # no newline: held without --unbuffered
        data = os.urandom(5000)
        sb.write_file("/tmp/blob", data)
        assert sb.read_file("/tmp/blob") == data
        assert sb.execute("pwd").output == "/tmp\n"
        shown = sb.execute("env").output
        assert "SLURM_" not in shown and "ENROOT_" not in shown, shown
        mark = marker()
        host = subprocess.Popen(["bash", "-c", f"exec -a {mark}-host sleep 120"])
        try:  # a pid namespace of its own: no host process in sight, detached ones die on close
            assert sb.execute(f"ps -eo args | grep -c '^{mark}' || true").output.strip() == "0"
            sb.execute(f"setsid bash -c 'exec -a {mark}-a sleep 300' >/dev/null 2>&1 &")
            sb.execute(f"nohup bash -c 'exec -a {mark}-b sleep 300' >/dev/null 2>&1 &")
            assert wait_until(lambda: len(host_pids(mark)) == 3), host_pids(mark)
        finally:
            host.kill()
            host.wait()
    assert wait_until(lambda: not host_pids(mark), 10), host_pids(mark)
    assert wait_until(lambda: _node_containers() == before, 10), _node_containers()


# ------------------------------------------------------------------ syscall filter, network
@needs_root
def test_without_libseccomp_a_sandbox_is_refused_not_started_unfiltered(
    base_image, sandbox_config, enroot_double, monkeypatch
):
    import sys

    from swerl.sandbox import seccomp

    monkeypatch.setitem(sys.modules, "pyseccomp", None)  # the binding cannot be imported
    seccomp.docker_default_bpf.cache_clear()
    seccomp.known_syscalls.cache_clear()
    try:
        sb = EnrootSandbox(base_image, sandbox_config.replace(cap_add=("CHOWN", "SETUID")))
        with pytest.raises(BackendUnavailable, match="libseccomp"):
            sb.start()
        assert not sb.alive
    finally:
        seccomp.docker_default_bpf.cache_clear()
        seccomp.known_syscalls.cache_clear()


@needs_root
def test_cap_add_sys_admin_gives_back_what_docker_gives_back(base_image, sandbox_config, enroot_double):
    with EnrootSandbox(base_image, sandbox_config) as sb:
        assert sb.syscall_filter == "docker-default"
        assert "Operation not permitted" in sb.execute("unshare --user true").output
    with EnrootSandbox(
        base_image, sandbox_config.replace(cap_add=(*sandbox_config.cap_add, "SYS_ADMIN"))
    ) as sb:
        assert sb.execute("unshare --user --mount true").returncode == 0


@needs_root
def test_network_true_is_the_host_network(base_image, sandbox_config, enroot_double):
    """network: true starts (it failed on a busy sysfs) and shares the host's network namespace:
    unlike Docker's bridge, services on the host's loopback are reachable."""
    import socket

    srv = socket.create_server(("127.0.0.1", 0))
    try:
        with EnrootSandbox(base_image, sandbox_config.replace(network=True)) as sb:
            seen = set(sb.execute("ls /sys/class/net").output.split())
            assert seen == set(os.listdir("/sys/class/net"))
            port = srv.getsockname()[1]
            r = sb.execute(
                f"python3 -c 'import socket; socket.create_connection((\"127.0.0.1\", {port}), 3)'"
            )
            assert r.returncode == 0, r.output
            assert sb.execute("touch /sys/x").returncode != 0  # sysfs still read-only
    finally:
        srv.close()


@needs_root
@pytest.mark.parametrize("user", ["nobody", "65534:65534", "1234"])
def test_user_is_dockers_user(user, base_image, sandbox_config, enroot_double, docker_client):
    """No user namespace under swerl's isolation: ``user`` is a real uid, as in Docker."""
    cfg = sandbox_config.replace(user=user)
    show = "id; echo $HOME; grep CapEff /proc/self/status; touch /tmp/mine && stat -c %u:%g /tmp/mine"
    with DockerSandbox(base_image, cfg, client=docker_client) as docker_sb:
        expected = docker_sb.execute(show).output
    with EnrootSandbox(base_image, cfg) as sb:
        assert sb.execute(show).output == expected
    with pytest.raises(ConfigError, match="invalid user"):
        EnrootSandbox(base_image, cfg.replace(user="a b")).start()


# ------------------------------------------------------------------ strict grading on enroot
@pytest.mark.parametrize("mode", ["official", "strict"])
def test_grading_in_fresh_enroot_sandboxes(mode, task, sandbox_config, enroot_double):
    """Both grading paths run in enroot sandboxes (tests/grading_cheat.py)."""
    grades_gold_and_cheat(task, lambda image: EnrootSandbox(image, sandbox_config), mode)
