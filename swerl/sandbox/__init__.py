"""Where commands run: one protocol, one module per backend.

A backend is one module with a class implementing ``Sandbox`` and a ``reap``
function; it is listed here once and nothing else changes when one is added.
"""

from __future__ import annotations

import importlib
from typing import Any

from swerl.errors import ConfigError
from swerl.sandbox.base import ExecResult, Sandbox, SandboxConfig

__all__ = ["BACKENDS", "ExecResult", "Sandbox", "SandboxConfig", "make_sandbox", "reap"]

BACKENDS: dict[str, str] = {
    "docker": "swerl.sandbox.docker:DockerSandbox",
    "enroot": "swerl.sandbox.enroot:EnrootSandbox",
    "kubernetes": "swerl.sandbox.kubernetes:KubernetesSandbox",
}
"""backend name -> "module:Class"; the module also defines ``reap(run_id, ...)``."""


def _backend_module(backend: str) -> tuple[Any, str]:
    if backend not in BACKENDS:
        raise ConfigError(f"unknown sandbox backend {backend!r}; known: {', '.join(sorted(BACKENDS))}")
    module, cls = BACKENDS[backend].split(":")
    return importlib.import_module(module), cls


def make_sandbox(backend: str, image: str, config: SandboxConfig | None = None, **kwargs: Any) -> Sandbox:
    """A sandbox of the named backend (not started). Backends are imported lazily."""
    module, cls = _backend_module(backend)
    if config is not None and config.storage_mb and backend != "docker":
        raise ConfigError(f"storage_mb: the {backend} backend cannot limit a sandbox's disk; only docker can")
    return getattr(module, cls)(image, config, **kwargs)


def reap(backend: str, run_id: str | None = None) -> int:
    """Remove a run's sandboxes on the named backend; returns how many."""
    module, _ = _backend_module(backend)
    return module.reap(run_id)
