"""Check, before Ray starts, that this machine can run a rollout's sandboxes.

Without it a dead daemon, a missing image or absent credentials cost a Ray start,
an infra_error episode and exit 1, with the cause only in episodes.jsonl. Checked
here, each is one message and exit 3 within a second. Only the local machine is
checked: on a remote Ray cluster the workers' machines are what count.
"""

from __future__ import annotations

import os
import shutil
import urllib.error
import urllib.request
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


def check_policy(name: str, options: dict[str, Any], timeout: float = 10.0) -> None:
    """An ``llm`` policy's server answers ``GET BASE_URL/models`` (with the key, if one is set).

    Without it a server that is down or wants a key costs a Ray start and every episode's
    retries before the run ends in infra errors; here it is one line and exit 3.
    """
    if name != "llm":
        return
    base = (
        options.get("base_url") or os.environ.get("OPENAI_BASE_URL") or "https://api.openai.com/v1"
    ).rstrip("/")
    key_env = options.get("api_key_env", "OPENAI_API_KEY")
    request = urllib.request.Request(f"{base}/models")
    if os.environ.get(key_env):
        request.add_header("Authorization", f"Bearer {os.environ[key_env]}")
    where = f"the policy's model server at {base}"
    try:
        with urllib.request.urlopen(request, timeout=timeout):
            return
    except urllib.error.HTTPError as e:
        if e.code in (401, 403):
            raise BackendUnavailable(
                f"{where} refused the request ({e.code} {e.reason}): "
                f"set {key_env} to its key{'' if os.environ.get(key_env) else ' (it is not set)'}"
            ) from None
        if e.code == 404:
            raise BackendUnavailable(
                f"{where} has no {base}/models (404): policy.options.base_url is the API root, e.g. "
                "http://HOST:8000/v1"
            ) from None
        raise BackendUnavailable(f"{where} failed: {e.code} {e.reason}") from None
    except (urllib.error.URLError, OSError) as e:
        reason = getattr(e, "reason", e)
        raise BackendUnavailable(
            f"{where} does not answer ({reason}): start it, or set policy.options.base_url"
        ) from None
