"""Every field of Harbor's task model (harbor 0.26, ``harbor/models/task/config.py``) and what swerl does with it.

Nothing in a ``task.toml`` is dropped: a field swerl honours is used; a field it cannot honour
is refused, naming the task, the field and (for backend-dependent ones) the backend, unless the
user accepts that deviation explicitly (``accept=["environment.gpus", ...]`` or ``["*"]``), and
then the deviation is recorded in the task (``task.harbor["deviations"]``) and in every grade
(``GradeResult.deviations``, so in the episode's ``grade``). Keys Harbor's model does not define
are refused the same way (Harbor itself would drop a misspelt key).

``FIELDS`` is the table the README shows; :func:`check` applies it at load time, and
:func:`swerl.tasks.harbor_settings.sandbox_config` applies the backend-dependent rows when a
sandbox is made.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from swerl.errors import ConfigError

HONOURED = "honoured"
BACKEND = "honoured where the backend can, else refused"
REFUSED = "refused (accept to run without it)"
FATAL = "refused"
KEPT = "kept (no effect on running or grading)"
PHASE = "honoured when it equals the environment's, else refused (accept to run without it)"

# Rows that several fields share (the agent's and the verifier's phases mirror the environment's).
_TASK_TABLE = (KEPT, "`task.extra['task']`")
_NO_HOST_FILTER = (REFUSED, "no per-host network filter")
_ONE_NETWORK = (PHASE, "a swerl sandbox has one network for both phases")

FIELDS: dict[str, tuple[str, str]] = {
    "schema_version": (KEPT, "read; swerl follows schema 1.x (`version` is its old name)"),
    "source": (KEPT, "`task.extra['source']`"),
    "task.name": (HONOURED, "the task's instance_id (else the folder's name)"),
    **dict.fromkeys(("task.version", "task.description", "task.authors", "task.keywords"), _TASK_TABLE),
    "metadata": (KEPT, "`task.extra['metadata']`"),
    "steps": (FATAL, "multi-step tasks are not run by swerl"),
    "multi_step_reward_strategy": (KEPT, "no effect on a single-step task (as in Harbor)"),
    "artifacts": (REFUSED, "swerl collects no files from the sandbox after a run"),
    "environment.build_timeout_sec": (HONOURED, "the image build's timeout"),
    "environment.docker_image": (HONOURED, "the image (must be local) when there is no Dockerfile"),
    "environment.os": (HONOURED, "linux; windows is refused"),
    "environment.cpus": (HONOURED, "the sandbox's CPU limit"),
    "environment.memory_mb": (HONOURED, "the sandbox's memory limit (`memory` = '2G': its old form)"),
    "environment.storage_mb": (
        BACKEND,
        "Docker's --storage-opt size (needs overlay2 on xfs with pquota, btrfs, zfs or "
        "devicemapper: detected), refused on other drivers and backends",
    ),
    "environment.gpus": (REFUSED, "swerl's sandboxes get no GPU (0 is accepted)"),
    "environment.gpu_types": (REFUSED, "as gpus"),
    "environment.tpu": (REFUSED, "swerl's sandboxes get no TPU"),
    "environment.mcp_servers": (REFUSED, "swerl's agents are not given MCP servers"),
    "environment.env": (
        HONOURED,
        "set in the agent's and the verifier's sandbox; ${VAR} and ${VAR:-default} from the host",
    ),
    "environment.skills_dir": (REFUSED, "swerl's agents have no skills directory"),
    "environment.healthcheck": (REFUSED, "swerl runs no readiness check before the agent"),
    "environment.workdir": (HONOURED, "the agent's working directory (else the Dockerfile's WORKDIR)"),
    "environment.network_mode": (
        BACKEND,
        "no-network: the sandbox has none; public (Harbor's default): needs the sandbox's "
        "network on, else refused; allowlist: refused (no per-host filter)",
    ),
    "environment.allowed_hosts": _NO_HOST_FILTER,
    "environment.allow_internet": (HONOURED, "its old form: false is no-network, true public"),
    "agent.timeout_sec": (HONOURED, "the episode's time limit"),
    "agent.user": (
        BACKEND,
        "the agent's sandbox runs as this user (default: the Dockerfile's USER, else root); "
        "Kubernetes needs a numeric uid",
    ),
    "agent.network_mode": _ONE_NETWORK,
    "agent.allowed_hosts": _NO_HOST_FILTER,
    "verifier.timeout_sec": (HONOURED, "test.sh's timeout (past it: infra_error)"),
    "verifier.env": (HONOURED, "test.sh's environment; ${VAR} from the host"),
    "verifier.user": (
        BACKEND,
        "strict: the fresh grading sandbox runs as this user; official (the agent's sandbox): "
        "must equal agent.user, since a sandbox does not switch users",
    ),
    "verifier.environment_mode": (HONOURED, "shared; separate is refused"),
    "verifier.environment": (FATAL, "a separate verifier environment is not run by swerl"),
    "verifier.collect": (REFUSED, "compose collect hooks (swerl runs no compose services)"),
    "verifier.network_mode": _ONE_NETWORK,
    "verifier.allowed_hosts": _NO_HOST_FILTER,
    "solution.env": (HONOURED, "solve.sh's environment; ${VAR} from the host"),
}
"""`section.key` -> (what swerl does, how). A table `metadata` is kept whole."""

NETWORK_MODES = ("public", "no-network", "allowlist")
TABLES = ("task", "environment", "agent", "verifier", "solution")
_TEMPLATE = re.compile(r"\$\{([^}:]+)(?::-(.*))?\}")
_SIZE = re.compile(r"^\s*([0-9.]+)\s*([GMK])\s*$", re.IGNORECASE)


@dataclass
class Checked:
    """What :func:`check` makes of a task.toml's fields."""

    settings: dict[str, Any]
    """The values swerl uses (flattened; see ``sources.harbor.load_task``)."""
    deviations: list[str]
    """Accepted deviations, one sentence each."""


def accepted(field: str, accept: tuple[str, ...] | list[str]) -> bool:
    return "*" in accept or field in accept or field.split(".")[0] in accept


def refuse(where: str, field: str, why: str, backend: str = "") -> ConfigError:
    on = f" on the {backend} backend" if backend else ""
    return ConfigError(
        f"{where}: field '{field}' {why}{on}; swerl refuses rather than ignore it "
        f"(accept=['{field}'] or --accept-deviation {field} runs it anyway, recording the deviation)"
    )


def env_table(table: dict[str, Any], where: str, field: str) -> dict[str, str]:
    """A ``{name: value}`` table of strings, templates checked (resolved when a sandbox is made)."""
    if not isinstance(table, dict):
        raise ConfigError(f"{where}: field '{field}' must be a table of strings")
    out = {}
    for key, value in table.items():
        if not isinstance(value, (str, int, float)) or isinstance(value, bool):
            raise ConfigError(f"{where}: field '{field}.{key}' must be a string, got {value!r}")
        out[str(key)] = str(value)
    return out


def resolve_env(env: dict[str, str], where: str, field: str, host: dict[str, str]) -> dict[str, str]:
    """Harbor's ``resolve_env_vars``: a value that is ``${VAR}`` or ``${VAR:-default}`` comes from ``host``."""
    out = {}
    for key, value in env.items():
        m = _TEMPLATE.fullmatch(value)
        if not m:
            out[key] = value
        elif m.group(1) in host:
            out[key] = host[m.group(1)]
        elif m.group(2) is not None:
            out[key] = m.group(2)
        else:
            raise ConfigError(
                f"{where}: field '{field}.{key}' needs {m.group(1)} in the environment of the process "
                "making the sandbox, and it is not set"
            )
    return out


def size_mb(value: Any, where: str, field: str) -> int:
    """Harbor's old ``memory``/``storage`` strings ('2G', '512M', '1024K') in MB."""
    m = _SIZE.match(str(value))
    if not m:
        raise ConfigError(f"{where}: field '{field}' must be like '2G' or '512M', got {value!r}")
    n, unit = float(m.group(1)), m.group(2).upper()
    return int(n * 1024 if unit == "G" else n if unit == "M" else n / 1024)


def _positive(table: dict[str, Any], key: str, where: str, section: str) -> float | None:
    value = table.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
        raise ConfigError(f"{where}: field '{section}.{key}' must be a positive number, got {value!r}")
    return float(value)


def _user(table: dict[str, Any], where: str, field: str) -> str:
    value = table.get("user")
    if value is None:
        return ""
    if isinstance(value, bool) or not isinstance(value, (str, int)) or str(value).strip() == "":
        raise ConfigError(f"{where}: field '{field}' must be a user name or uid, got {value!r}")
    return str(value)


def _network(table: dict[str, Any], where: str, field: str) -> str:
    value = table.get("network_mode")
    if value is not None and value not in NETWORK_MODES:
        raise ConfigError(
            f"{where}: field '{field}' must be one of {', '.join(NETWORK_MODES)}, got {value!r}"
        )
    return value or ""


def check(config: dict[str, Any], where: str, accept: tuple[str, ...] | list[str] = ()) -> Checked:
    """Apply ``FIELDS`` to a parsed task.toml: the settings swerl uses, or ConfigError naming the field."""
    deviations: list[str] = []

    def unsupported(field: str, why: str) -> None:
        if FIELDS.get(field, (REFUSED,))[0] == FATAL:
            raise ConfigError(f"{where}: field '{field}': {why}")
        if not accepted(field, accept):
            raise refuse(where, field, why)
        deviations.append(f"{field}: {why} (accepted)")

    legacy = {"version": "schema_version"}
    for key, value in config.items():
        if key in TABLES:
            if not isinstance(value, dict):
                raise ConfigError(f"{where}: [{key}] must be a table")
            for sub, item in value.items():
                name = f"{key}.{sub}"
                if name in FIELDS or (key == "environment" and sub in ("memory", "storage")):
                    continue
                if isinstance(item, dict) and any(f.startswith(f"{name}.") for f in FIELDS):
                    continue
                unsupported(name, "is not a field of Harbor's task model")
        elif key not in FIELDS and key not in legacy:
            unsupported(key, "is not a field of Harbor's task model")
    tables = {k: config.get(k) or {} for k in TABLES}
    env, agent, verifier, solution = (tables[k] for k in ("environment", "agent", "verifier", "solution"))
    if config.get("steps"):
        unsupported("steps", "multi-step Harbor tasks are not run by swerl")
    if config.get("artifacts"):
        unsupported("artifacts", FIELDS["artifacts"][1])
    if str(env.get("os", "linux")).lower() != "linux":
        raise ConfigError(f"{where}: field 'environment.os' is {env['os']!r}; swerl runs Linux tasks only")
    if verifier.get("environment") or verifier.get("environment_mode") == "separate":
        unsupported("verifier.environment", FIELDS["verifier.environment"][1])  # FATAL: never accepted
    if verifier.get("environment_mode") not in (None, "shared", "separate"):
        raise ConfigError(f"{where}: field 'verifier.environment_mode' must be shared or separate")
    for field, why in (
        ("gpus", "asks for GPUs; swerl's sandboxes get none"),
        ("gpu_types", "asks for GPU types; swerl's sandboxes get no GPU"),
        ("tpu", "asks for a TPU; swerl's sandboxes get none"),
        ("mcp_servers", "gives the agent MCP servers; swerl's agents get none"),
        ("skills_dir", "gives the agent a skills directory; swerl's agents have none"),
        ("healthcheck", "asks for a readiness check before the agent; swerl runs none"),
    ):
        if env.get(field):  # gpus = 0, mcp_servers = [] ask for nothing
            unsupported(f"environment.{field}", why)
    if verifier.get("collect"):
        unsupported("verifier.collect", "runs compose collect hooks; swerl runs no compose services")

    memory = _positive(env, "memory_mb", where, "environment")
    if memory is None and env.get("memory") is not None:
        memory = size_mb(env["memory"], where, "environment.memory")
    storage = _positive(env, "storage_mb", where, "environment")
    if storage is None and env.get("storage") is not None:
        storage = size_mb(env["storage"], where, "environment.storage")
    cpus = _positive(env, "cpus", where, "environment")

    network = _network(env, where, "environment.network_mode")
    if not network:
        allow = env.get("allow_internet")
        if allow is not None and not isinstance(allow, bool):
            raise ConfigError(f"{where}: field 'environment.allow_internet' must be true or false")
        network = "no-network" if allow is False else "public"
    for section, table in (("environment", env), ("agent", agent), ("verifier", verifier)):
        if table.get("allowed_hosts"):
            unsupported(
                f"{section}.allowed_hosts", "lists allowed hosts; swerl has no per-host network filter"
            )
    if network == "allowlist":
        unsupported(
            "environment.network_mode", "is 'allowlist'; swerl has no per-host filter (runs with no network)"
        )
        network = "no-network"
    for section, table in (("agent", agent), ("verifier", verifier)):
        phase = _network(table, where, f"{section}.network_mode")
        if phase and phase != network:
            unsupported(
                f"{section}.network_mode",
                f"is {phase!r} but the environment's is {network!r}; a swerl sandbox has one network "
                f"(runs with {network!r})",
            )
    settings = {
        "cpus": cpus,
        "memory_mb": int(memory) if memory else None,
        "storage_mb": int(storage) if storage else None,
        "network_mode": network,
        "build_timeout": _positive(env, "build_timeout_sec", where, "environment") or 600.0,
        "agent_timeout": _positive(agent, "timeout_sec", where, "agent"),
        "verifier_timeout": _positive(verifier, "timeout_sec", where, "verifier") or 600.0,
        "agent_user": _user(agent, where, "agent.user"),
        "verifier_user": _user(verifier, where, "verifier.user"),
        "env": env_table(env.get("env") or {}, where, "environment.env"),
        "verifier_env": env_table(verifier.get("env") or {}, where, "verifier.env"),
        "solution_env": env_table(solution.get("env") or {}, where, "solution.env"),
    }
    return Checked(settings, deviations)


def table_markdown() -> str:
    """``FIELDS`` as the README's table."""
    rows = ["| task.toml field | swerl | how |", "| --- | --- | --- |"]
    rows += [f"| `{k}` | {what} | {how} |" for k, (what, how) in FIELDS.items()]
    return "\n".join(rows)
