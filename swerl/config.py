"""Typed rollout configs from YAML, with ``key.sub=value`` overrides.

The same file runs on a laptop and on a cluster: only ``backend`` (and
``ray.address``) change. Validation is pydantic's; an unknown key, a wrong type
or a missing file is a ConfigError that names the key and the file.
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal, get_type_hints

import yaml
from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationError, create_model

from swerl.env.swe_env import Limits, SWEEnv
from swerl.errors import ConfigError
from swerl.resources import configs_dir, find_config
from swerl.sandbox.base import SandboxConfig

CONFIGS_DIR = configs_dir()
"""The bundled configs: the checkout's ``configs/``, or the installed wheel's copy (``swerl.resources``)."""


class Section(BaseModel):
    model_config = ConfigDict(extra="forbid")


def section_of(
    name: str, source: type, exclude: tuple[str, ...] = (), **extra: tuple[Any, Any]
) -> type[Section]:
    """A config section whose keys, types and defaults are those of the dataclass ``source``.

    So a limit is declared once, where it is used, and a config cannot drift from it.
    ``extra`` adds keys as pydantic ``create_model`` takes them: ``key=(type, default)``.
    """
    hints = get_type_hints(source)
    keys: dict[str, Any] = {}
    for f in dataclasses.fields(source):
        if f.name in exclude:
            continue
        default = (
            f.default if f.default is not dataclasses.MISSING else Field(default_factory=f.default_factory)
        )
        keys[f.name] = (hints[f.name], default)
    return create_model(name, __base__=Section, __doc__=source.__doc__, **keys, **extra)


def parameters_of(func: Callable[..., Any], *names: str) -> dict[str, tuple[Any, Any]]:
    """``name=(type, default)`` for some keyword parameters of ``func``, as ``section_of`` takes them."""
    hints, params = get_type_hints(func), inspect.signature(func).parameters
    return {n: (hints[n], params[n].default) for n in names}


# The sandbox's run id is the runner's to set, and its workdir the env's (the repo).
SandboxSection = section_of("SandboxSection", SandboxConfig, exclude=("run_id", "workdir"))
EnvSection = section_of(
    "EnvSection",
    Limits,
    **parameters_of(
        SWEEnv.__init__,
        "pool_size",
        "grade_retries",
        "grade_timeout",
        "grading",
        "scrub_history",
        "interpreter",
    ),
)


class BackendSection(Section):
    name: Literal["docker", "enroot", "kubernetes"] = "docker"
    sandbox: SandboxSection = Field(default_factory=SandboxSection)
    options: dict[str, Any] = Field(default_factory=dict)
    """Backend-specific settings (enroot cache dir, kubernetes namespace, ...)."""


class PolicySection(Section):
    name: Literal["gold", "noop", "replay", "llm", "toy"] = "gold"
    placement: Literal["actor", "driver"] | None = None
    options: dict[str, Any] = Field(default_factory=dict)


class RolloutSection(Section):
    num_actors: int = Field(2, ge=1)
    envs_per_actor: int = Field(2, ge=1)
    attempts: int = Field(1, ge=1)
    max_in_flight: int | None = Field(None, ge=1)
    max_retries: int = Field(2, ge=0)
    actor_cpus: float = Field(0.25, gt=0)
    group: bool = False
    placement: Literal["pack", "spread"] = "pack"
    """Where Ray puts the actors: packed (its default), or spread over the cluster's nodes."""


class RayAddress(Section):
    address: str | None = None
    """None: start a local Ray (or use RAY_ADDRESS)."""


class SlurmSection(Section):
    """How ``swerl cluster slurm`` asks for an allocation and starts Ray on it."""

    partition: str | None = None
    account: str | None = None
    nodes: int = Field(1, ge=1)
    time: str = "01:00:00"
    cpus_per_task: int | None = Field(None, ge=1)
    """CPUs per node for Ray (``--num-cpus``); default all the node's CPUs in the allocation."""
    mem: str | None = None
    gpus_per_node: int | None = Field(None, ge=0)
    job_name: str | None = None
    ray_port: int = Field(6379, ge=1024, le=65000)
    """GCS port; Ray's other ports are the next few and a worker range above it."""
    ports_per_node: int = Field(0, ge=0)
    """Node i's Ray ports start at ``ray_port + i * ports_per_node``: 0 when every node is its
    own machine; 1000 (a whole block, PORT_BLOCK) when several Slurm node names share one machine."""
    ray_temp_dir: str = "/tmp/swerl-ray-{job_id}"
    """Short (Unix socket paths must fit in 107 bytes); ``{job_id}`` is the Slurm job id."""
    join_timeout: float = Field(300.0, gt=0)
    setup: list[str] = Field(default_factory=list)
    """Shell lines run first on each node's job script, e.g. ``module load enroot``."""
    sbatch_args: list[str] = Field(default_factory=list)


class RolloutConfig(Section):
    name: str = "rollout"
    tasks: str = "swerl-mini"
    """A bundled suite name, a suite directory, a SWE-bench-family JSON/JSONL file or dataset, or a
    Harbor task folder (or a folder of them): recognised by its shape (swerl.tasks.sources)."""
    tasks_source: str | None = None
    """Force how ``tasks`` is read: harbor, synth, swebench or a SWE-bench family (swe-gym, ...)."""
    task_ids: list[str] | None = None
    output_dir: str = "runs/{name}"
    backend: BackendSection = Field(default_factory=BackendSection)
    env: EnvSection = Field(default_factory=EnvSection)
    policy: PolicySection = Field(default_factory=PolicySection)
    rollout: RolloutSection = Field(default_factory=RolloutSection)
    ray: RayAddress = Field(default_factory=RayAddress)
    slurm: SlurmSection = Field(default_factory=SlurmSection)

    _source: Path | None = PrivateAttr(default=None)

    @property
    def out(self) -> Path:
        return Path(self.output_dir.format(name=self.name))

    @property
    def source(self) -> Path | None:
        """The file this config was read from (absolute), None for the built-in defaults."""
        return self._source

    def describe_source(self) -> str:
        """One line for the start of a run: which config file is in use, so a run is never ambiguous."""
        return f"config: {self._source or '<built-in defaults>'}"


def _set(tree: dict[str, Any], dotted: str, value: Any) -> None:
    keys = dotted.split(".")
    node = tree
    for k in keys[:-1]:
        if not isinstance(node.setdefault(k, {}), dict):
            raise ConfigError(f"override {dotted}: {k} is not a section")
        node = node[k]
    node[keys[-1]] = value


def parse_overrides(overrides: list[str]) -> list[tuple[str, Any]]:
    out = []
    for item in overrides:
        key, sep, raw = item.partition("=")
        if not sep or not key:
            raise ConfigError(f"override {item!r} must look like key.sub=value")
        out.append((key.strip(), yaml.safe_load(raw) if raw.strip() else ""))
    return out


def resolve_path(path: str | Path) -> Path:
    """A config path as given, else a name in ``./configs``, else a bundled config (``swerl.resources``)."""
    return find_config(path)


def load_config(path: str | Path | None = None, overrides: list[str] | None = None) -> RolloutConfig:
    """Load ``path`` (or the defaults), apply overrides, validate."""
    where = "<defaults>"
    data: dict[str, Any] = {}
    source = None
    if path is not None:
        p = resolve_path(path)
        where, source = str(p), p.resolve()
        try:
            data = yaml.safe_load(p.read_text()) or {}
        except yaml.YAMLError as e:
            raise ConfigError(f"{where}: not valid YAML: {e}") from None
        if not isinstance(data, dict):
            raise ConfigError(f"{where}: the top level must be a mapping, got {type(data).__name__}")
    for key, value in parse_overrides(overrides or []):
        _set(data, key, value)
    try:
        cfg = RolloutConfig.model_validate(data)
    except ValidationError as e:
        problems = "; ".join(f"{'.'.join(str(x) for x in err['loc'])}: {err['msg']}" for err in e.errors())
        raise ConfigError(f"{where}: {problems}") from None
    cfg._source = source
    return cfg
