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
