"""Where commands run: one protocol, one module per backend."""

from swerl.sandbox.base import ExecResult, Sandbox, SandboxConfig

__all__ = ["ExecResult", "Sandbox", "SandboxConfig", "make_sandbox"]


def make_sandbox(backend: str, image: str, config: SandboxConfig | None = None, **kwargs: object) -> Sandbox:
    """A sandbox of the named backend (not started). Backends are imported lazily."""
    if backend == "docker":
        from swerl.sandbox.docker import DockerSandbox

        return DockerSandbox(image, config, **kwargs)  # type: ignore[arg-type]
    from swerl.errors import ConfigError

    raise ConfigError(f"unknown sandbox backend {backend!r}; known: docker")
