"""Harbor task folders, read from Harbor's own task model (harbor 0.26, ``harbor/models/task``).

A task folder holds ``task.toml`` (``TaskConfig``: ``[environment]``, ``[agent]``, ``[verifier]``,
``[solution]``), ``instruction.md`` (the problem statement; leading canary comment lines are
dropped, as Harbor's ``strip_canary`` does), ``environment/Dockerfile`` (or
``[environment].docker_image``), ``tests/test.sh`` (the verifier: it writes the reward to
``/logs/verifier/reward.txt`` or ``reward.json``) and ``solution/solve.sh`` (the oracle). Harbor
copies ``tests/`` to ``/tests`` after the agent ran and ``solution/`` to ``/solution``.

What swerl does not run is refused, named: multi-step tasks (``[[steps]]``), Windows tasks, a
separate verifier environment, compose environments. swerl does not need the ``harbor`` package.
"""

from __future__ import annotations

import base64
import hashlib
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import tomllib

from swerl.errors import ConfigError
from swerl.tasks.instance import SUITES_DIR, Instance, unique

CONFIG = "task.toml"
INSTRUCTION = "instruction.md"
BASE_AT_RESET = "HEAD"
"""A Harbor task's base commit: the starting state swerl commits into the image's workdir when it
builds the image (``swerl.tasks.harbor_images``); SWEEnv pins the commit id at reset."""
MAX_EMBEDDED = 8 << 20
"""tests/ and solution/ travel inside the task record (to Ray actors, snapshots) up to this size."""
_CANARY = re.compile(r"^(<!--.*canary.*-->|#.*canary.*)$", re.IGNORECASE)
_NAME = re.compile(r"[^a-z0-9._-]+")


def is_task_dir(path: Path) -> bool:
    return (path / CONFIG).is_file()


def task_dirs(spec: str) -> list[Path]:
    """``spec`` itself when it is a task folder, else its task-folder children (sorted)."""
    path = Path(spec)
    if not path.exists() and "/" not in spec and (SUITES_DIR / spec).is_dir():
        path = SUITES_DIR / spec  # a bundled folder of Harbor tasks (envs/harbor-demo)
    if is_task_dir(path):
        return [path]
    if path.is_dir():
        return sorted(p for p in path.iterdir() if p.is_dir() and is_task_dir(p))
    return []


def strip_canary(text: str) -> str:
    """Drop leading canary comment lines and the blank lines after them (Harbor does the same)."""
    lines = text.split("\n")
    i = 0
    while i < len(lines) and _CANARY.match(lines[i].strip()):
        i += 1
    while i < len(lines) and not lines[i].strip():
        i += 1
    return "\n".join(lines[i:])


def image_name(name: str, digest: str) -> str:
    """``swerl-harbor.<name>:<digest>``: Docker's character set, lowercased."""
    return f"swerl-harbor.{_NAME.sub('-', name.lower()).strip('-.') or 'task'}:{digest}"


def dockerfile_workdir(dockerfile: Path) -> str:
    """The last ``WORKDIR`` of a Dockerfile ('' when none)."""
    workdir = ""
    for line in dockerfile.read_text(encoding="utf-8").splitlines():
        parts = line.strip().split(None, 1)
        if len(parts) == 2 and parts[0].upper() == "WORKDIR":
            workdir = parts[1].strip().strip('"')
    return workdir


def read_tree(root: Path, where: str) -> dict[str, str]:
    """Every regular file under ``root`` as {relative path: base64}, refusing links out of it."""
    out: dict[str, str] = {}
    total = 0
    for p in sorted(root.rglob("*")):
        if p.is_symlink() and not p.resolve().is_relative_to(root.resolve()):
            raise ConfigError(f"{where}: {p.relative_to(root.parent)} links outside the task folder")
        if p.is_file():
            data = p.read_bytes()
            total += len(data)
            if total > MAX_EMBEDDED:
                raise ConfigError(f"{where}: {root.name}/ holds more than {MAX_EMBEDDED >> 20} MB")
            out[p.relative_to(root).as_posix()] = base64.b64encode(data).decode()
    return out


def tree_digest(*roots: Path) -> str:
    h = hashlib.sha256()
    for root in roots:
        if not root.exists():
            continue
        for p in sorted(root.rglob("*")) if root.is_dir() else [root]:
            if p.is_file():
                h.update(p.relative_to(root.parent).as_posix().encode() + b"\0" + p.read_bytes() + b"\0")
    return h.hexdigest()[:16]


def _table(config: dict[str, Any], key: str, where: str) -> dict[str, Any]:
    value = config.get(key) or {}
    if not isinstance(value, dict):
        raise ConfigError(f"{where}: [{key}] must be a table")
    return value


def _number(table: dict[str, Any], key: str, where: str, section: str) -> float | None:
    value = table.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
        raise ConfigError(f"{where}: [{section}].{key} must be a positive number, got {value!r}")
    return float(value)


def load_task(task_dir: Path) -> Instance:
    """One Harbor task folder as an Instance (``harness="harbor"``)."""
    where = str(task_dir / CONFIG)
    try:
        config = tomllib.loads((task_dir / CONFIG).read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"{where}: bad TOML: {e}") from None
    if config.get("steps"):
        raise ConfigError(f"{where}: field 'steps': multi-step Harbor tasks are not supported by swerl")
    env = _table(config, "environment", where)
    agent = _table(config, "agent", where)
    verifier = _table(config, "verifier", where)
    solution = _table(config, "solution", where)
    if str(env.get("os", "linux")).lower() != "linux":
        raise ConfigError(f"{where}: field 'environment.os' is {env['os']!r}; swerl runs Linux tasks only")
    if verifier.get("environment") or verifier.get("environment_mode") == "separate":
        raise ConfigError(
            f"{where}: field 'verifier.environment': a separate verifier environment is not supported"
        )
    package = _table(config, "task", where)
    name = str(package.get("name") or task_dir.name)
    instruction = task_dir / INSTRUCTION
    if not instruction.is_file():
        raise ConfigError(f"{task_dir}: missing {INSTRUCTION}")
    tests = task_dir / "tests"
    if not (tests / "test.sh").is_file():
        raise ConfigError(f"{task_dir}: missing tests/test.sh (the verifier)")
    env_dir = task_dir / "environment"
    dockerfile = env_dir / "Dockerfile"
    if (env_dir / "docker-compose.yaml").exists() or (env_dir / "docker-compose.yml").exists():
        raise ConfigError(f"{env_dir}: compose environments are not supported; give a Dockerfile")
    docker_image = env.get("docker_image") or ""
    if not dockerfile.is_file() and not docker_image:
        raise ConfigError(f"{task_dir}: needs environment/Dockerfile or [environment].docker_image")
    workdir = str(env.get("workdir") or (dockerfile_workdir(dockerfile) if dockerfile.is_file() else ""))
    if not workdir.startswith("/") or workdir == "/":
        raise ConfigError(
            f"{where}: field 'environment.workdir': swerl needs the agent's working directory "
            "(an absolute path other than /): set it, or a WORKDIR in environment/Dockerfile"
        )
    network = env.get("network_mode") or ("no-network" if env.get("allow_internet") is False else "public")
    memory = _number(env, "memory_mb", where, "environment")
    spec = {
        "task_dir": str(task_dir.resolve()),
        "name": name,
        "docker_image": docker_image,
        "dockerfile": dockerfile.is_file(),
        "workdir": workdir,
        "cpus": _number(env, "cpus", where, "environment"),
        "memory_mb": int(memory) if memory else None,
        "network_mode": network,
        "build_timeout": _number(env, "build_timeout_sec", where, "environment") or 600.0,
        "agent_timeout": _number(agent, "timeout_sec", where, "agent"),
        "verifier_timeout": _number(verifier, "timeout_sec", where, "verifier") or 600.0,
        "verifier_env": {str(k): str(v) for k, v in (verifier.get("env") or {}).items()},
        "solution_env": {str(k): str(v) for k, v in (solution.get("env") or {}).items()},
        "tests": read_tree(tests, str(task_dir)),
        "solution": read_tree(task_dir / "solution", str(task_dir))
        if (task_dir / "solution").is_dir()
        else {},
    }
    digest = tree_digest(env_dir, task_dir / CONFIG)
    return Instance(
        instance_id=name,
        repo=name,
        base_commit=BASE_AT_RESET,
        problem_statement=strip_canary(instruction.read_text(encoding="utf-8")),
        image=image_name(name, digest),
        eval_script="",
        log_parser="",
        workdir=workdir,
        harness="harbor",
        harbor=spec,
        extra={"family": "harbor", "metadata": config.get("metadata") or {}},
    )


@dataclass(frozen=True)
class HarborSource:
    name: str = "harbor"

    def recognises(self, spec: str) -> bool:
        return bool(task_dirs(spec))

    def load(self, spec: str, split: str = "test", family: str | None = None) -> list[Instance]:
        dirs = task_dirs(spec)
        if not dirs:
            raise ConfigError(f"{spec}: not a Harbor task folder (no {CONFIG}) nor a folder of them")
        return unique([load_task(d) for d in dirs], spec)


SOURCE = HarborSource()
