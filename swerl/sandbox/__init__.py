"""Where commands run: one protocol, one module per backend."""

from swerl.sandbox.base import ExecResult, Sandbox, SandboxConfig

__all__ = ["ExecResult", "Sandbox", "SandboxConfig", "make_sandbox", "reap"]


def make_sandbox(backend: str, image: str, config: SandboxConfig | None = None, **kwargs: object) -> Sandbox:
    """A sandbox of the named backend (not started). Backends are imported lazily."""
    if backend == "docker":
        from swerl.sandbox.docker import DockerSandbox

        return DockerSandbox(image, config, **kwargs)  # type: ignore[arg-type]
    from swerl.errors import ConfigError

    raise ConfigError(f"unknown sandbox backend {backend!r}; known: docker")


def reap(backend: str, run_id: str | None = None) -> int:
    """Remove a run's sandboxes on the named backend; returns how many."""
    if backend == "docker":
        from swerl.sandbox.docker import reap as docker_reap

        return docker_reap(run_id)
    from swerl.errors import ConfigError

    raise ConfigError(f"unknown sandbox backend {backend!r}; known: docker")
