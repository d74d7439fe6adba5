"""Check, before Ray starts, that this machine can run a rollout's sandboxes.

Without it a dead daemon, a missing image or absent credentials cost a Ray start,
an infra_error episode and exit 1, with the cause only in episodes.jsonl. Checked
here, each is one message and exit 3 within a second. Only the local machine is
checked: on a remote Ray cluster the workers' machines are what count.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterable
from typing import Any

from swerl.errors import BackendUnavailable, ImageMissing
from swerl.tasks.instance import Instance


def check_docker(images: Iterable[str], suite: str = "SUITE") -> None:
    """The daemon answers and holds every image (no registry is used, so none may be missing)."""
    import docker.errors

    from swerl.sandbox.docker import connect, daemon_call

    client = connect(timeout=10)
    missing = []
    with daemon_call("look up the task images"):
        for image in sorted(set(images)):
            try:
                client.images.get(image)
            except docker.errors.ImageNotFound:
                missing.append(image)
    if missing:
        shown = ", ".join(missing[:5]) + (f" and {len(missing) - 5} more" if len(missing) > 5 else "")
        raise ImageMissing(
            f"{len(missing)} image(s) of the selected tasks are not in the local Docker daemon: {shown}. "
            f"Build them: `swerl tasks build-images {suite}`"
        )


def check_enroot(options: dict[str, Any]) -> None:
    from swerl.sandbox.enroot import EnrootOptions, binary_missing

    opts = EnrootOptions.from_kwargs(options)
    if opts.launcher == "enroot" and shutil.which(opts.binary) is None:
        raise binary_missing(opts.binary, "to start sandboxes")


def check_kubernetes(options: dict[str, Any]) -> None:
    from swerl.sandbox.kubernetes import KubernetesConfig, connect

    connect(KubernetesConfig.from_env(**options))  # BackendUnavailable: no credentials


def preflight(backend: str, options: dict[str, Any], tasks: list[Instance], suite: str = "SUITE") -> None:
    """Raise BackendUnavailable or ImageMissing (exit 3) if ``tasks`` (of ``suite``) cannot run here."""
    if backend == "docker":
        check_docker((t.image for t in tasks), suite)
    elif backend == "enroot":
        check_enroot(options)
    elif backend == "kubernetes":
        check_kubernetes(options)
    else:  # the config's Literal makes this unreachable from a config file
        raise BackendUnavailable(f"unknown backend {backend!r}")
