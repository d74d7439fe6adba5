"""Build a Harbor task's image locally: its ``environment/Dockerfile``, then swerl's layer.

No registry is reachable, so every ``FROM`` image must already be in the local Docker. The common
Debian bookworm bases (``debian:bookworm``, ``debian:12``, ``python:3.11*`` on bookworm, slim or
not) are mapped to swerl's base image, which is that distribution with Python 3.11, git and
pytest; other bases are never substituted (a different distribution or Python would change what
the task tests). Provide one with ``docker load -i IMAGE.tar`` or ``docker tag LOCAL NAME``, or
map it: ``base_map={"ubuntu:24.04": "my-ubuntu:24.04"}`` (``SWERL_HARBOR_BASES="a=b,c=d"``).
The build runs with no network, so ``RUN`` steps that download fail and say so.

swerl's layer makes the task's workdir a git repository whose one new commit is the starting
state (so an agent's change is ``git diff`` against it, and strict grading can re-apply it in a
fresh sandbox) and creates ``/logs/verifier``. It needs git in the image: the bookworm bases
have it; for another base, install git in the Dockerfile.
"""

from __future__ import annotations

import hashlib
import io
import logging
import os
import re
import shlex
import tarfile
from pathlib import Path

from swerl.errors import ConfigError, ImageMissing, InfraError
from swerl.tasks.instance import Instance

log = logging.getLogger(__name__)

BOOKWORM_BASES = (
    "debian:bookworm", "debian:bookworm-slim", "debian:12", "debian:12-slim",
    "python:3.11", "python:3.11-slim", "python:3.11-bookworm", "python:3.11-slim-bookworm",
)  # fmt: skip
"""FROM images swerl's base stands in for: the same distribution and Python."""
RECIPE_LABEL = "swerl.recipe"
_FROM = re.compile(r"^(\s*FROM\s+)((?:--\S+\s+)*)(\S+)(.*)$", re.IGNORECASE)
BASELINE = r"""set -eu
wd="$1"
mkdir -p /logs/verifier /logs/agent "$wd"
if ! command -v git >/dev/null 2>&1; then
  echo "swerl: the image has no git; install it in environment/Dockerfile" >&2; exit 97
fi
cd "$wd"
export GIT_AUTHOR_NAME=swerl GIT_AUTHOR_EMAIL=swerl@localhost GIT_COMMITTER_NAME=swerl \
  GIT_COMMITTER_EMAIL=swerl@localhost GIT_AUTHOR_DATE=2000-01-01T00:00:00Z GIT_COMMITTER_DATE=2000-01-01T00:00:00Z
if [ "$(git rev-parse --show-toplevel 2>/dev/null)" != "$(pwd -P)" ]; then git init -q; fi
git -c safe.directory='*' add -A -f .
git -c safe.directory='*' -c commit.gpgsign=false commit -q --allow-empty --no-verify -m "swerl: the task's starting state"
# The agent may run as another user than the verifier: both use git here, and either may be
# the one whose sandbox writes the verifier's and the solution's files.
git config --system --add safe.directory '*'
mkdir -p /tests /solution
chmod 1777 /tests /solution /logs/verifier /logs/agent
if [ -n "${2:-}" ]; then chown -R "$2" .git; fi
"""
LAYER = """FROM {env_image}
USER root
COPY swerl-baseline.sh /tmp/swerl-baseline.sh
RUN bash /tmp/swerl-baseline.sh {workdir} {agent_user} && rm /tmp/swerl-baseline.sh
WORKDIR {workdir}
"""


def base_map(extra: dict[str, str] | None = None) -> dict[str, str]:
    """FROM image -> local image: the bookworm bases to swerl's base, then the environment's, then ``extra``."""
    from swerl.tasks.images import base_image

    out = {name: base_image() for name in BOOKWORM_BASES}
    for pair in filter(None, os.environ.get("SWERL_HARBOR_BASES", "").split(",")):
        if "=" not in pair:
            raise ConfigError(f"SWERL_HARBOR_BASES: {pair!r} is not FROM=IMAGE")
        key, value = pair.split("=", 1)
        out[key.strip()] = value.strip()
    return {**out, **(extra or {})}


def rewrite_from(dockerfile: str, mapping: dict[str, str]) -> tuple[str, list[str]]:
    """The Dockerfile with mapped FROM images replaced; -> (text, the external images it needs)."""
    stages: set[str] = set()
    needed: list[str] = []
    lines = []
    for line in dockerfile.splitlines():
        m = _FROM.match(line)
        if m:
            prefix, flags, image, rest = m.groups()
            if image not in stages:
                image = mapping.get(image, image)
                needed.append(image)
            alias = rest.split()
            if len(alias) == 2 and alias[0].upper() == "AS":
                stages.add(alias[1])
            line = f"{prefix}{flags}{image}{rest}"
        lines.append(line)
    return "\n".join(lines) + "\n", needed


def _tar(files: dict[str, bytes], root: Path | None = None) -> io.BytesIO:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        if root is not None:
            for p in sorted(root.rglob("*")):
                if p.name != "Dockerfile" or p.parent != root:
                    tar.add(p, arcname=p.relative_to(root).as_posix(), recursive=False)
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size, info.mtime, info.mode = len(data), 0, 0o644
            tar.addfile(info, io.BytesIO(data))
    buf.seek(0)
    return buf


def _build(
    client: object, context: io.BytesIO, tag: str, labels: dict[str, str], timeout: float, what: str
) -> None:
    import docker.errors

    try:
        client.images.build(  # type: ignore[attr-defined]
            fileobj=context, custom_context=True, tag=tag, labels=labels, pull=False,
            network_mode="none", rm=True, forcerm=True, timeout=int(timeout),
        )  # fmt: skip
    except (docker.errors.BuildError, docker.errors.APIError) as e:
        detail = "".join(str(x.get("stream", x.get("error", ""))) for x in getattr(e, "build_log", []) or [])
        raise InfraError(
            f"building {what} failed (no network: RUN steps cannot download): {e}\n{detail[-3000:]}"
        ) from e


def check_image_user(task: Instance, built: str) -> None:
    """Harbor runs the agent and the verifier as the image's USER unless task.toml names them:
    refuse an image whose USER comes from a FROM image swerl did not read (it read the Dockerfile)."""
    spec = task.harbor
    if spec.get("image_user") or built in ("", "root", "0", "0:0"):
        return
    if spec.get("agent_user") and spec.get("verifier_user"):
        return
    raise ConfigError(
        f"{spec['task_dir']}/task.toml: the image runs as {built!r} (a USER of its FROM image), which "
        "swerl reads only from environment/Dockerfile: add `USER` there, or set [agent].user and "
        "[verifier].user (field 'agent.user')"
    )


def build_harbor_image(
    task: Instance, client: object | None = None, force: bool = False, bases: dict[str, str] | None = None
) -> str:
    """Build (or reuse) the image of one Harbor task; returns its name (``task.image``)."""
    import docker.errors

    from swerl.sandbox.docker import connect
    from swerl.tasks.images import build_base_image

    client = client or connect()
    spec = task.harbor
    name = task.image
    mapping = base_map(bases)
    layer_hash = hashlib.sha256((LAYER + BASELINE).encode()).hexdigest()[:12]
    agent_user = spec.get("agent_user") or spec.get("image_user") or ""
    digest = f"{name.rsplit(':', 1)[-1]}|{layer_hash}|{agent_user}|{sorted(mapping.items())!r}"
    if not force:
        try:
            if (client.images.get(name).labels or {}).get(RECIPE_LABEL) == digest:  # type: ignore[attr-defined]
                return name
        except docker.errors.ImageNotFound:
            pass
    task_dir = Path(spec["task_dir"])
    env_dir = task_dir / "environment"
    if spec.get("dockerfile"):
        text, needed = rewrite_from((env_dir / "Dockerfile").read_text(encoding="utf-8"), mapping)
    else:
        text, needed = rewrite_from(f"FROM {spec['docker_image']}\n", mapping)
    for image in needed:
        if image == mapping.get("debian:bookworm"):
            build_base_image(client=client)
            continue
        try:
            client.images.get(image)  # type: ignore[attr-defined]
        except docker.errors.ImageNotFound:
            raise ImageMissing(
                f"{task_dir}/environment/Dockerfile needs FROM {image}, which is not in the local Docker "
                "(no registry is reachable): `docker load -i IMAGE.tar`, `docker tag LOCAL_IMAGE "
                f"{image}`, or map it to a local image with SWERL_HARBOR_BASES='{image}=LOCAL_IMAGE'"
            ) from None
    env_tag = name.replace(":", "-env:", 1)
    timeout = float(spec.get("build_timeout") or 600.0)
    context = _tar({"Dockerfile": text.encode()}, env_dir if env_dir.is_dir() else None)
    log.info("building %s from %s", env_tag, env_dir)
    _build(client, context, env_tag, {"swerl.instance": task.instance_id}, timeout, f"{task_dir}/environment")
    check_image_user(task, client.images.get(env_tag).attrs["Config"].get("User") or "")  # type: ignore[attr-defined]
    layer = LAYER.format(env_image=env_tag, workdir=task.workdir, agent_user=shlex.quote(agent_user))
    files = {"Dockerfile": layer.encode(), "swerl-baseline.sh": BASELINE.encode()}
    labels = {RECIPE_LABEL: digest, "swerl.instance": task.instance_id}
    _build(client, _tar(files), name, labels, timeout, f"swerl's layer on {env_tag}")
    return name
