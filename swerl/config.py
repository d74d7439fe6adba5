"""Typed rollout configs from YAML, with ``key.sub=value`` overrides.

The same file runs on a laptop and on a cluster: only ``backend`` (and
``ray.address``) change. Validation is pydantic's; an unknown key, a wrong type
or a missing file is a ConfigError that names the key and the file.
"""

from __future__ import annotations

import dataclasses
import difflib
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
        "grade_pool_size",
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
    tasks_accept: list[str] = Field(default_factory=list)
    """Task fields to run although swerl cannot honour them (``environment.gpus``, ...; ``*``: all),
    each deviation recorded in the grades (swerl.tasks.harbor_fields). Empty: refuse them."""
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
    """Load ``path`` (or the defaults), apply overrides, validate.

    Each problem is blamed on where it came from: ``FILE:LINE`` for a key of the file,
    ``override KEY=VALUE`` for one given on the command line; an unknown key says which
    known key it is closest to.
    """
    where = "<defaults>"
    data: dict[str, Any] = {}
    source = None
    lines: dict[tuple[str, ...], int] = {}
    if path is not None:
        p = resolve_path(path)
        where, source = str(p), p.resolve()
        text = p.read_text()
        try:
            data = yaml.safe_load(text) or {}
        except yaml.YAMLError as e:
            mark = getattr(e, "problem_mark", None)
            at = f"{where}:{mark.line + 1}" if mark is not None else where
            problem = getattr(e, "problem", None) or str(e)
            raise ConfigError(f"{at}: not valid YAML: {problem}") from None
        if not isinstance(data, dict):
            raise ConfigError(f"{where}: the top level must be a mapping, got {type(data).__name__}")
        lines = key_lines(text)
    given: dict[str, str] = {}
    for item, (key, value) in zip(overrides or [], parse_overrides(overrides or []), strict=True):
        _set(data, key, value)
        given[key] = item
    try:
        cfg = RolloutConfig.model_validate(data)
    except ValidationError as e:
        problems = [_problem(err, where, lines, given) for err in e.errors()]
        raise ConfigError("; ".join(problems)) from None
    cfg._source = source
    return cfg


def key_lines(text: str) -> dict[tuple[str, ...], int]:
    """The line (1-based) of each key of a YAML mapping tree, by its path of keys."""
    out: dict[tuple[str, ...], int] = {}

    def walk(node: Any, path: tuple[str, ...]) -> None:
        if isinstance(node, yaml.MappingNode):
            for k, v in node.value:
                if isinstance(k, yaml.ScalarNode):
                    out[(*path, str(k.value))] = k.start_mark.line + 1
                    walk(v, (*path, str(k.value)))

    try:
        walk(yaml.compose(text), ())
    except yaml.YAMLError:
        pass
    return out


def _problem(err: Any, where: str, lines: dict[tuple[str, ...], int], given: dict[str, str]) -> str:
    """One validation error as ``ORIGIN: key: what is wrong``, ORIGIN the override or FILE:LINE."""
    loc = tuple(str(x) for x in err["loc"])
    key = ".".join(loc)
    msg = "unknown key" + _did_you_mean(loc) if err["type"] == "extra_forbidden" else err["msg"]
    for k, item in given.items():  # the override that set this key, a section above it or one below it
        if key == k or key.startswith(f"{k}.") or k.startswith(f"{key}."):
            return f"override {item}: {key}: {msg}"
    line = next((lines[loc[:n]] for n in range(len(loc), 0, -1) if loc[:n] in lines), None)
    return f"{where}{f':{line}' if line else ''}: {key}: {msg}"


def _did_you_mean(loc: tuple[str, ...]) -> str:
    """`` (did you mean rollout.num_actors?)`` for a mistyped key, from the section's known keys."""
    model: Any = RolloutConfig
    for part in loc[:-1]:
        field = model.model_fields.get(part) if isinstance(model, type) else None
        model = field.annotation if field is not None else None
        if not (isinstance(model, type) and issubclass(model, BaseModel)):
            return ""
    close = difflib.get_close_matches(loc[-1], list(model.model_fields), n=1, cutoff=0.6)
    known = ", ".join(model.model_fields)
    if close:
        return f" (did you mean {'.'.join((*loc[:-1], close[0]))}?)"
    return f" (known keys{' of ' + '.'.join(loc[:-1]) if loc[:-1] else ''}: {known})"
