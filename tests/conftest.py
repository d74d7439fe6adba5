"""Shared fixtures: real Docker, the real base image, and cleanup that survives failures."""

from __future__ import annotations

import contextlib
import os
import time

import pytest

from swerl.sandbox.base import SandboxConfig, default_run_id

os.environ.setdefault("MSWEA_SILENT_STARTUP", "1")


@pytest.fixture(scope="session")
def docker_client():
    from swerl.sandbox.docker import connect

    return connect()


@pytest.fixture
def remove_new_images(docker_client):
    """Removes images the test made, and only those: a task image's name comes from its task
    (a synthesized one's from its mutation), so a test can rebuild an image that a user's own
    suite already holds, and removing it would break that suite."""
    before = {tag for image in docker_client.images.list() for tag in image.tags}

    def remove(names) -> None:
        for name in names:
            tagged = name if ":" in name.rsplit("/", 1)[-1] else f"{name}:latest"
            if tagged not in before:
                with contextlib.suppress(Exception):
                    docker_client.images.remove(name, force=True)

    return remove


@pytest.fixture(scope="session")
def run_id(docker_client):
    """One run id for the test session; every container it labels is reaped at the end."""
    from swerl.sandbox.docker import reap

    rid = f"test-{default_run_id()}"
    yield rid
    reap(rid, client=docker_client)


@pytest.fixture(scope="session")
def base_image(docker_client) -> str:
    from swerl.tasks.images import build_base_image

    return build_base_image(client=docker_client)


@pytest.fixture
def sandbox_config(run_id) -> SandboxConfig:
    return SandboxConfig(run_id=run_id, timeout=30)


@pytest.fixture(scope="session")
def suite():
    """The bundled swerl-mini suite's instances (images not built)."""
    from swerl.tasks.sources import load_tasks

    return load_tasks("swerl-mini")


@pytest.fixture(scope="session")
def task_images(suite, base_image, docker_client) -> dict[str, str]:
    """The bundled suite's task images by instance id (cached by recipe, so usually instant)."""
    from swerl.tasks.images import build_task_images

    return build_task_images(suite, client=docker_client)


@pytest.fixture(scope="session")
def tasks(suite, task_images):
    """The bundled suite, its images built."""
    return suite


def pytest_collection_modifyitems(session, config, items):
    """The modules that use the shared Ray run last, one after another (each in its own
    order): it starts once for all of them, and no other module finds a Ray already up."""
    ray_modules = {getattr(it, "module", None) for it in items if "ray_session" in it.fixturenames}
    ray_modules.discard(None)
    items[:] = [it for it in items if getattr(it, "module", None) not in ray_modules] + [
        it for it in items if getattr(it, "module", None) in ray_modules
    ]


@pytest.fixture(scope="session")
def _ray_at_exit():
    """Ends the tests' Ray once, after the last module that used it."""
    import ray

    yield
    ray.shutdown()


@pytest.fixture(scope="module")
def ray_session(_ray_at_exit):
    """A real local Ray, shared by the modules that ask for it (a start costs 15-30 s of CI
    on two cores). Workers import the policies the tests define (tests/ on their path) and
    see a driver-side secret that must never reach a sandbox."""
    import ray

    tests_dir = os.path.dirname(__file__)
    path = os.pathsep.join(filter(None, [tests_dir, os.environ.get("PYTHONPATH")]))
    env_vars = {"PYTHONPATH": path, "OPENAI_API_KEY": "sk-driver-secret"}
    ours = ray.is_initialized() and ray.get_runtime_context().runtime_env.get("env_vars") == env_vars
    if not ours:
        if ray.is_initialized():  # a Ray an earlier module's code joined (ensure_ray): start from ours
            ray.shutdown()
        ray.init(num_cpus=8, include_dashboard=False, runtime_env={"env_vars": env_vars})
    yield
    # What this module left holding resources (an actor a failed test never closed) must not
    # reach the next module: then the next one starts a Ray of its own.
    deadline = time.monotonic() + 10
    while ray.is_initialized() and ray.available_resources().get("CPU", 0) < 8:
        if time.monotonic() > deadline:
            ray.shutdown()
            break
        time.sleep(0.2)


@pytest.fixture(scope="session")
def kubernetes_api(docker_client, run_id, tmp_path_factory):
    """KUBECONFIG pointing at a sandbox user with exactly swerl's Role: on the Kubernetes
    API test double (tests/k8s_api_double.py), or on the real cluster whose admin
    kubeconfig SWERL_K8S_REAL names (tests/k8s_real.py)."""
    from k8s_api_double import NAMESPACE, serve_double
    from k8s_real import ENV_REAL, serve_real

    if os.environ.get(ENV_REAL):
        yield from serve_real(os.environ[ENV_REAL], tmp_path_factory.mktemp("k8s"), NAMESPACE)
    else:
        yield from serve_double(docker_client, tmp_path_factory.mktemp("k8s"))


@pytest.fixture(scope="session")
def enroot_double(tmp_path_factory, run_id):
    """The enroot CLI via SWERL_ENROOT, in a temp root: the test double (tests/enroot_double/enroot),
    or the real Enroot when SWERL_ENROOT_REAL=/path/to/enroot is set."""
    from enroot_double import enroot_binary, use_double

    yield from use_double(tmp_path_factory.mktemp("enroot"), run_id, enroot_binary())


@pytest.fixture
def k8s_double_only():
    """Skip a test that reads the Kubernetes API double's internals on a real cluster."""
    from k8s_real import ENV_REAL

    if os.environ.get(ENV_REAL):
        pytest.skip(f"reads the Kubernetes API double's internals (${ENV_REAL} is set)")


@pytest.fixture
def double_only():
    """Skip a failure-injection test when the tests run against the real Enroot."""
    from enroot_double import ENV_REAL

    if os.environ.get(ENV_REAL):
        pytest.skip(f"injects failures through the enroot test double (${ENV_REAL} is set)")


@pytest.fixture
def hook_site(tmp_path):
    """A site directory holding what an install puts at the top of site-packages for Gymnasium
    (the hook's ``.pth`` and top-level module, as setup.py makes them); ``site.addsitedir`` it."""
    from swerl._gymnasium_hook import site_files

    site_dir = tmp_path / "site"
    site_dir.mkdir()
    for name, content in site_files().items():
        (site_dir / name).write_bytes(content)
    return site_dir


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory):
    """The locally built tiny chat model (tokenizer + 2-layer Qwen2), saved once per session."""
    pytest.importorskip("transformers")
    from swerl.integrations.tiny_model import tiny_model

    return tiny_model(tmp_path_factory.mktemp("tiny") / "model")


@pytest.fixture(scope="session")
def swebench_shaped(tasks, task_images, docker_client):
    """(task, image): a bundled task and its image reshaped like SWE-bench's (tests/swebench_shaped.py)."""
    from swebench_shaped import build

    task = tasks[0]
    return task, build(docker_client, task_images[task.instance_id])


@pytest.fixture(scope="session")
def readme_bash(task_images, tmp_path_factory):
    """Runs a README bash block as written (``readme_blocks.run_bash``), each at most once per session:
    ``(CompletedProcess, work dir)``. tests/test_readme.py checks it; tests/test_cli.py reads its run."""
    from readme_blocks import run_bash

    done: dict[int, tuple] = {}

    def run(block):
        if block.line not in done:
            done[block.line] = run_bash(block, tmp_path_factory.mktemp(f"readme{block.line}"))
        return done[block.line]

    return run
