"""A Harbor task's settings applied to a sandbox, per backend and role (the agent's or the verifier's).

The backend-dependent rows of ``swerl.tasks.harbor_fields.FIELDS``: the network, the user each
role runs as, storage, cpus, memory and ``[environment].env``. What the backend cannot do is
refused, naming the task, the field and the backend, unless the task was loaded accepting that
deviation; then the deviation is returned, to be recorded in the grade.
"""

from __future__ import annotations

import os
import re

from swerl.errors import ConfigError
from swerl.sandbox.base import Sandbox, SandboxConfig
from swerl.tasks.harbor_fields import accepted, refuse, resolve_env
from swerl.tasks.instance import Instance

ROLES = ("agent", "verifier")
ROOT = ("root", "0", "0:0", "")


def where(task: Instance) -> str:
    return f"{task.harbor.get('task_dir', task.instance_id)}/task.toml"


def role_user(task: Instance, role: str) -> str:
    """Who ``role`` runs as: ``[agent|verifier].user``, else the Dockerfile's USER, else root."""
    if role not in ROLES:
        raise ValueError(f"role must be one of {ROLES}")
    spec = task.harbor
    return spec.get(f"{role}_user") or spec.get("image_user") or "root"


def same_user(a: str, b: str) -> bool:
    return a == b or (a in ROOT and b in ROOT)


def sandbox_config(
    task: Instance, config: SandboxConfig, backend: str, role: str = "agent"
) -> tuple[SandboxConfig, list[str]]:
    """``config`` with the task's settings for ``role`` on ``backend``; -> (config, deviations)."""
    spec, at = task.harbor, where(task)
    accept = tuple(spec.get("accept") or ())
    deviations: list[str] = []
    changes: dict[str, object] = {}

    def deviate(field: str, why: str) -> None:
        if not accepted(field, accept):
            raise refuse(at, field, why, backend)
        deviations.append(f"{field}: {why} on the {backend} backend (accepted)")

    if spec.get("cpus"):
        changes["cpus"] = float(spec["cpus"])
    if spec.get("memory_mb"):
        changes["memory"] = f"{int(spec['memory_mb'])}m"
    network = spec.get("network_mode") or "public"
    if network == "no-network":
        changes["network"] = False
    elif not config.network:
        deviate(
            "environment.network_mode",
            "is 'public' (Harbor's default when unset) but the sandbox has no network "
            '(sandbox.network is off): turn it on, or set network_mode = "no-network" in the task',
        )
    user = role_user(task, role)
    field = f"{role}.user"
    if config.user not in ROOT and not same_user(config.user, user):
        raise ConfigError(
            f"{at}: the task's {role} runs as {user!r} ({field}) but the sandbox config's user is "
            f"{config.user!r}; leave sandbox.user at root for Harbor tasks"
        )
    if backend == "kubernetes" and not re.fullmatch(r"\d+(:\d+)?", user) and user not in ROOT:
        deviate(field, f"is {user!r}: Kubernetes runs pods as a numeric uid (runs as root)")
        user = "root"
    changes["user"] = user
    if spec.get("storage_mb"):
        why = ""
        if backend != "docker":
            why = "asks for a disk limit, which only the docker backend can set"
        else:
            from swerl.sandbox.docker import storage_limit_refusal

            why = storage_limit_refusal(task.image)
        if why:
            deviate("environment.storage_mb", why)
        else:
            changes["storage_mb"] = int(spec["storage_mb"])
    if spec.get("env"):
        env = resolve_env(spec["env"], at, "environment.env", dict(os.environ))
        changes["env"] = {**env, **config.env}
    return config.replace(**changes), deviations


def prepare(sandbox: Sandbox, task: Instance, role: str) -> list[str]:
    """Set an unstarted sandbox's config for ``task`` and ``role``; -> the deviations."""
    backend = str(getattr(sandbox, "backend", "docker"))
    sandbox.config, deviations = sandbox_config(task, sandbox.config, backend, role)
    return deviations
