"""Harbor task folders, read from Harbor's own task model (harbor 0.26, ``harbor/models/task``).

A task folder holds ``task.toml`` (``TaskConfig``: ``[environment]``, ``[agent]``, ``[verifier]``,
``[solution]``), ``instruction.md`` (the problem statement; leading canary comment lines are
dropped, as Harbor's ``strip_canary`` does), ``environment/Dockerfile`` (or
``[environment].docker_image``), ``tests/test.sh`` (the verifier: it writes the reward to
``/logs/verifier/reward.txt`` or ``reward.json``) and ``solution/solve.sh`` (the oracle). Harbor
copies ``tests/`` to ``/tests`` after the agent ran and ``solution/`` to ``/solution``.

Every task.toml field is honoured or refused, named (``swerl.tasks.harbor_fields.FIELDS``);
``accept`` runs a refusable one anyway and records the deviation. Compose environments are
refused too. swerl does not need the ``harbor`` package.
"""

from __future__ import annotations

import base64
import hashlib
import re
from dataclasses import dataclass
from pathlib import Path

import tomllib

from swerl.errors import ConfigError
from swerl.tasks.harbor_fields import check
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


def dockerfile_user(dockerfile: Path) -> str:
    """The last ``USER`` of a Dockerfile ('' when none): who Harbor runs the agent and verifier as
    when task.toml names no user."""
    user = ""
    for line in dockerfile.read_text(encoding="utf-8").splitlines():
        parts = line.strip().split(None, 1)
        if len(parts) == 2 and parts[0].upper() == "USER":
            user = parts[1].strip().strip('"')
        elif len(parts) == 2 and parts[0].upper() == "FROM":
            user = ""  # a new stage starts as its base image's user
    return user


def load_task(task_dir: Path, accept: tuple[str, ...] | list[str] = ()) -> Instance:
    """One Harbor task folder as an Instance (``harness="harbor"``); every task.toml field is
    honoured or refused (``swerl.tasks.harbor_fields``), unless ``accept`` names it."""
    where = str(task_dir / CONFIG)
    try:
        config = tomllib.loads((task_dir / CONFIG).read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"{where}: bad TOML: {e}") from None
    checked = check(config, where, accept)
    env = config.get("environment") or {}
    package = config.get("task") or {}
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
    spec = {
        "task_dir": str(task_dir.resolve()),
        "name": name,
        "docker_image": docker_image,
        "dockerfile": dockerfile.is_file(),
        "workdir": workdir,
        "image_user": dockerfile_user(dockerfile) if dockerfile.is_file() else "",
        **checked.settings,
        "accept": sorted(accept),
        "deviations": checked.deviations,
        "tests": read_tree(tests, str(task_dir)),
        "solution": read_tree(task_dir / "solution", str(task_dir))
        if (task_dir / "solution").is_dir()
        else {},
    }
    digest = tree_digest(env_dir, task_dir / CONFIG)
    extra = {"family": "harbor", "metadata": config.get("metadata") or {}, "task": package}
    if config.get("source"):
        extra["source"] = config["source"]
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
        extra=extra,
    )


@dataclass(frozen=True)
class HarborSource:
    name: str = "harbor"

    def recognises(self, spec: str) -> bool:
        return bool(task_dirs(spec))

    def load(
        self, spec: str, split: str = "test", family: str | None = None, accept: tuple[str, ...] = ()
    ) -> list[Instance]:
        dirs = task_dirs(spec)
        if not dirs:
            raise ConfigError(f"{spec}: not a Harbor task folder (no {CONFIG}) nor a folder of them")
        return unique([load_task(d, accept) for d in dirs], spec)


SOURCE = HarborSource()
