"""Images without a registry: the Debian base image, task image names and builds.

The base image is a debootstrapped Debian root filesystem imported with
``docker import``; task images are layers on it. Everything is keyed by a hash of
its recipe, so a rerun with the same recipe does no work.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import platform
import shutil
import subprocess
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path

from swerl.errors import ConfigError, InfraError

log = logging.getLogger(__name__)

GITCONFIG = """[safe]
\tdirectory = *
[user]
\tname = swerl
\temail = swerl@localhost
[init]
\tdefaultBranch = main
"""


def cache_dir() -> Path:
    """Where swerl keeps what it builds (debs, root filesystems). Per user, 0700."""
    root = Path(os.environ.get("SWERL_CACHE", Path.home() / ".cache" / "swerl"))
    root.mkdir(parents=True, exist_ok=True, mode=0o700)
    return root


def host_arch() -> str:
    """The image arch for this host, in SWE-bench's spelling."""
    machine = platform.machine().lower()
    if machine in ("x86_64", "amd64"):
        return "x86_64"
    if machine in ("aarch64", "arm64"):
        return "arm64"
    raise ConfigError(f"unsupported host architecture {machine!r}: swerl images exist for x86_64 and arm64")


@dataclass(frozen=True)
class BaseImageRecipe:
    """What goes into the base image. Its hash is the image tag."""

    suite: str = "bookworm"
    variant: str = "minbase"
    packages: tuple[str, ...] = ("python3", "git", "python3-pytest", "patch", "procps")
    mirror: str | None = field(default_factory=lambda: os.environ.get("SWERL_DEBIAN_MIRROR"))
    repository: str = "swerl-base"

    @property
    def digest(self) -> str:
        spec = asdict(self) | {"gitconfig": GITCONFIG}
        spec.pop("mirror")  # where the packages come from does not change the image
        return hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()[:12]

    @property
    def image(self) -> str:
        return f"{self.repository}:{self.suite}-{self.digest}"


def base_image(recipe: BaseImageRecipe | None = None) -> str:
    """The base image's name (``swerl-base:bookworm-<recipe hash>``), without building or asking Docker.

    The tag changes with the recipe, so code names the image through this, never by hand;
    ``build_base_image`` (or ``swerl images build-base``) makes it.
    """
    return (recipe or BaseImageRecipe()).image


def build_base_image(
    recipe: BaseImageRecipe | None = None, client: object | None = None, force: bool = False
) -> str:
    """Build (or find) the base image and return its name.

    debootstrap -> root filesystem -> tar -> ``docker import`` with ``CMD ["bash"]``.
    The tarball is cached, so a wiped daemon re-imports without downloading.
    """
    from swerl.sandbox.docker import connect

    recipe = recipe or BaseImageRecipe()
    client = client or connect()
    name = recipe.image
    if not force and _image_exists(client, name):
        log.info("base image %s exists", name)
        return name
    tarball = cache_dir() / f"base-{recipe.suite}-{recipe.digest}.tar"
    if force or not tarball.exists():
        _debootstrap_tarball(recipe, tarball)
    repo, tag = name.rsplit(":", 1)
    log.info("importing %s as %s", tarball, name)
    client.api.import_image(src=str(tarball), repository=repo, tag=tag, changes=['CMD ["bash"]'])
    if not _image_exists(client, name):
        raise InfraError(f"docker import of {tarball} did not produce {name}")
    return name


def _image_exists(client: object, name: str) -> bool:
    import docker.errors

    try:
        client.images.get(name)  # type: ignore[attr-defined]
        return True
    except docker.errors.ImageNotFound:
        return False


def _debootstrap_tarball(recipe: BaseImageRecipe, tarball: Path) -> None:
    if shutil.which("debootstrap") is None:
        raise InfraError("debootstrap is not installed: `apt-get install -y debootstrap` (as root)")
    debs = cache_dir() / "debs"
    debs.mkdir(exist_ok=True)
    with tempfile.TemporaryDirectory(dir=cache_dir(), prefix="rootfs-") as tmp:
        rootfs = Path(tmp) / "rootfs"
        cmd = [
            "debootstrap",
            f"--variant={recipe.variant}",
            f"--include={','.join(recipe.packages)}",
            f"--cache-dir={debs}",
            recipe.suite,
            str(rootfs),
        ]
        if recipe.mirror:
            cmd.append(recipe.mirror)
        log.info("running %s", " ".join(cmd))
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            raise InfraError(
                f"debootstrap failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
            )
        (rootfs / "etc" / "gitconfig").write_text(GITCONFIG)
        (rootfs / "testbed").mkdir(exist_ok=True)
        for junk in ("var/cache/apt/archives", "var/lib/apt/lists"):
            shutil.rmtree(rootfs / junk, ignore_errors=True)
        partial = tarball.with_suffix(".partial")
        subprocess.run(["tar", "-C", str(rootfs), "-cf", str(partial), "."], check=True)
        partial.rename(tarball)


# ------------------------------------------------------------------ task images
TASK_RECIPE_LABEL = "swerl.recipe"


def task_image_name(
    instance_id: str, tag: str = "latest", arch: str | None = None, registry: str = ""
) -> str:
    """The local image of one task: ``sweb.eval.<arch>.<instance_id lowercased>:<tag>``.

    Spelled by swebench's own ImageSpec so swerl and the official harness agree.
    """
    from swebench.image_builder.image_spec import ImageSpec

    name = ImageSpec(instance_id, dockerfile="-", namespace=None, tag=tag, arch=_spec_arch(arch)).name
    return f"{registry.rstrip('/')}/{name}" if registry else name


def hub_image_name(
    instance_id: str, tag: str = "latest", arch: str | None = None, namespace: str = "swebench"
) -> str:
    """The Docker Hub form: ``swebench/sweb.eval.x86_64.<id, "__" -> "_1776_">:<tag>``."""
    from swebench.image_builder.image_spec import ImageSpec

    return ImageSpec(instance_id, dockerfile="-", namespace=namespace, tag=tag, arch=_spec_arch(arch)).name


def _spec_arch(arch: str | None) -> str:
    arch = arch or host_arch()
    return "amd64" if arch in ("x86_64", "amd64") else arch


def repo_bundle(repo: str, search: list[Path] | None = None) -> Path:
    """The git bundle of ``repo`` (``owner/name``) shipped with a suite: ``envs/*/repos/owner__name.bundle``."""
    from swerl.tasks.instance import SUITES_DIR

    fname = repo.replace("/", "__") + ".bundle"
    dirs = search if search is not None else sorted(SUITES_DIR.glob("*/repos"))
    for d in dirs:
        if (Path(d) / fname).is_file():
            return Path(d) / fname
    raise ConfigError(
        f"no git bundle {fname} for repo {repo!r} in {', '.join(map(str, dirs)) or 'envs/*/repos'}"
    )


TASK_DOCKERFILE = """\
FROM {base}
COPY repo.bundle /tmp/repo.bundle
RUN git clone -q /tmp/repo.bundle /testbed && rm /tmp/repo.bundle
RUN cd /testbed && git checkout -q -B main {commit} && git remote remove origin \\
 && git for-each-ref --format='%(refname)' | grep -v '^refs/heads/main$' | xargs -r -n1 git update-ref -d \\
 && git reflog expire --expire=now --all && git gc -q --prune=now
WORKDIR /testbed
CMD ["bash"]
"""


def _task_recipe(instance: object, base: str) -> tuple[str, str]:
    """The task's Dockerfile and its digest. The bundle is not hashed: the image holds only what
    the commit names (its tree and history, content-addressed), whatever else a bundle carries,
    so a suite's bundle can grow (more tasks) without making its built images stale."""
    dockerfile = TASK_DOCKERFILE.format(base=base, commit=instance.base_commit)  # type: ignore[attr-defined]
    return dockerfile, hashlib.sha256(dockerfile.encode()).hexdigest()[:16]


def build_task_images(
    instances: list, client: object | None = None, force: bool = False, bundles: list[Path] | None = None
) -> dict[str, str]:
    """Build each task's image as a layer on the base image; returns instance_id -> image.

    The repo (from the suite's git bundle) is cloned to /testbed at the base commit
    with no later history left in it, so the fix cannot be found with ``git log``.
    An image whose ``swerl.recipe`` label matches is reused, so reruns are instant.
    Builds are offline: no pull, no network.
    """
    import io
    import tarfile

    import docker.errors

    from swerl.sandbox.docker import connect

    client = client or connect()
    base = build_base_image(client=client)
    built: dict[str, str] = {}
    for inst in instances:
        bundle = repo_bundle(inst.repo, bundles)
        dockerfile, digest = _task_recipe(inst, base)
        name = inst.image or task_image_name(inst.instance_id)
        if not force and _recipe_of(client, name) == digest:
            built[inst.instance_id] = name
            continue
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w") as tar:
            for arcname, data in (("Dockerfile", dockerfile.encode()), ("repo.bundle", bundle.read_bytes())):
                info = tarfile.TarInfo(arcname)
                info.size, info.mtime = len(data), 0
                tar.addfile(info, io.BytesIO(data))
        buf.seek(0)
        log.info("building %s", name)
        try:
            client.images.build(  # type: ignore[attr-defined]
                fileobj=buf,
                custom_context=True,
                tag=name,
                labels={TASK_RECIPE_LABEL: digest, "swerl.instance": inst.instance_id},
                pull=False,
                network_mode="none",
                rm=True,
                forcerm=True,
            )
        except (docker.errors.BuildError, docker.errors.APIError) as e:
            detail = "".join(
                str(x.get("stream", x.get("error", ""))) for x in getattr(e, "build_log", []) or []
            )
            raise InfraError(f"building {name} for {inst.instance_id} failed: {e}\n{detail[-3000:]}") from e
        built[inst.instance_id] = name
    return built


def build_images(
    instances: list, client: object | None = None, force: bool = False, bundles: list[Path] | None = None
) -> dict[str, str]:
    """Every task's image, whatever its source: Harbor tasks from their folders
    (``swerl.tasks.harbor_image``), the others from the suite's git bundles; instance_id -> image."""
    from swerl.tasks.harbor_image import build_harbor_image

    harbor = [i for i in instances if i.graded_by_harbor]
    built = build_task_images([i for i in instances if not i.graded_by_harbor], client, force, bundles)
    for inst in harbor:
        built[inst.instance_id] = build_harbor_image(inst, client, force)
    return built


def _recipe_of(client: object, name: str) -> str | None:
    import docker.errors

    try:
        labels = client.images.get(name).labels or {}  # type: ignore[attr-defined]
    except docker.errors.ImageNotFound:
        return None
    return labels.get(TASK_RECIPE_LABEL)


def require_task_image(instance: object, client: object | None = None) -> str:
    """The instance's image name, or ImageMissing saying how to build it."""
    from swerl.errors import ImageMissing
    from swerl.sandbox.docker import connect

    client = client or connect()
    name = instance.image or task_image_name(instance.instance_id)  # type: ignore[attr-defined]
    if not _image_exists(client, name):
        raise ImageMissing(
            f"task image {name!r} for {instance.instance_id} is not built: "  # type: ignore[attr-defined]
            "run `swerl tasks build-images SUITE` (or swerl.tasks.images.build_task_images)"
        )
    return name


HISTORY_DOCKERFILE = """\
FROM {base}
COPY repo /testbed
WORKDIR /testbed
CMD ["bash"]
"""


def build_history_image(
    instance: object, client: object | None = None, bundles: list[Path] | None = None
) -> tuple[str, str]:
    """A task image that still holds the answer, shaped like SWE-bench's; returns (image, fix commit).

    SWE-bench images clone the whole repo and ``git reset --hard`` to the base commit,
    so the fix stays reachable. Here: the gold and test patches committed on main
    past the base commit, a tag on that commit, a stash, a remote-tracking branch,
    then ``git reset --hard`` back to the base (ORIG_HEAD and the reflog keep the
    fix). What :mod:`swerl.tasks.history` must scrub; reused when built already.
    """
    import io
    import tarfile

    from swerl.sandbox.docker import connect

    client = client or connect()
    base = build_base_image(client=client)
    env = {**os.environ, "GIT_CONFIG_GLOBAL": "/dev/null", "GIT_CONFIG_NOSYSTEM": "1",
           "GIT_AUTHOR_NAME": "swerl", "GIT_AUTHOR_EMAIL": "swerl@localhost", "GIT_AUTHOR_DATE": "2024-06-01T12:00:00Z",
           "GIT_COMMITTER_NAME": "swerl", "GIT_COMMITTER_EMAIL": "swerl@localhost",
           "GIT_COMMITTER_DATE": "2024-06-01T12:00:00Z"}  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="swerl-history-") as tmp:
        repo = Path(tmp) / "repo"

        def git(*args: str, stdin: str | None = None) -> str:
            return subprocess.run(["git", *args], cwd=repo, env=env, input=stdin, check=True,
                                  capture_output=True, text=True).stdout.strip()  # fmt: skip

        bundle = repo_bundle(instance.repo, bundles)  # type: ignore[attr-defined]
        subprocess.run(["git", "clone", "-q", "-b", "main", str(bundle), str(repo)], env=env, check=True)
        git("reset", "-q", "--hard", instance.base_commit)  # type: ignore[attr-defined]
        for p in (instance.patch, instance.test_patch):  # type: ignore[attr-defined]
            git("apply", "-", stdin=p)
        git("add", "-A")
        git("commit", "-qm", "Fix the issue")
        fix = git("rev-parse", "HEAD")
        git("tag", "v9.9", fix)
        (repo / "WIP.md").write_text("work in progress\n")
        git("stash", "push", "-q", "-u")
        git("reset", "-q", "--hard", instance.base_commit)  # type: ignore[attr-defined]
        name = f"swerl-history:{instance.instance_id.lower()}-{fix[:12]}"  # type: ignore[attr-defined]
        if _image_exists(client, name):
            return name, fix
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w") as tar:
            data = HISTORY_DOCKERFILE.format(base=base).encode()
            info = tarfile.TarInfo("Dockerfile")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
            tar.add(repo, arcname="repo")
        buf.seek(0)
        client.images.build(fileobj=buf, custom_context=True, tag=name, pull=False, network_mode="none", rm=True,  # type: ignore[attr-defined]
                            labels={"swerl.instance": instance.instance_id})  # type: ignore[attr-defined]  # fmt: skip
    return name, fix
