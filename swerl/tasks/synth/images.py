"""Offline images for synthesis: one per repository (for probing), one thin layer per task.

Both are built with COPY only (no RUN step, so no container per build: ~0.3 s each
here against ~2 s for the generic bundle recipe). A task image holds exactly what
``swerl.tasks.images.TASK_DOCKERFILE`` makes from the suite's bundle: the tree of
the task's base commit in /testbed and a git repository whose only ref is ``main``
at that commit with nothing else stored. It carries that recipe's digest as its
``swerl.recipe`` label, so ``swerl tasks build-images SUITE`` finds it current (and
rebuilds it the generic way on a machine that does not have it).
"""

from __future__ import annotations

import hashlib
import io
import subprocess
import tarfile
import tempfile
from pathlib import Path

from swerl.errors import InfraError
from swerl.tasks.images import TASK_RECIPE_LABEL, _image_exists, _recipe_of, _task_recipe, build_base_image
from swerl.tasks.synth.repo import Repo, git

UMASK = "0022"
"""File modes as a checkout under the usual umask writes them (644/755), as the generic recipe's
``git clone`` does; ``git archive``'s default (002: 664) differs from a file the agent rewrites,
which strict grading reads as a mode change and reverts."""
FILES_LABEL = "swerl.synth.files"
REPO_DOCKERFILE = 'FROM {base}\nCOPY testbed /testbed\nWORKDIR /testbed\nCMD ["bash"]\n'


def _build(
    client: object, dockerfile: str, files: list[tuple[str, bytes | None, int]], tag: str, labels: dict
) -> None:
    """Build from an in-memory context; an entry with ``None`` data is a directory (git needs empty ``refs/``)."""
    import docker.errors

    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, data, mode in [("Dockerfile", dockerfile.encode(), 0o644), *files]:
            info = tarfile.TarInfo(name)
            info.mtime, info.mode = 0, mode
            if data is None:
                info.type = tarfile.DIRTYPE
                tar.addfile(info)
            else:
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    buf.seek(0)
    try:
        client.images.build(  # type: ignore[attr-defined]
            fileobj=buf,
            custom_context=True,
            tag=tag,
            labels=labels,
            pull=False,
            network_mode="none",
            rm=True,
            forcerm=True,
        )
    except (docker.errors.BuildError, docker.errors.APIError) as e:
        raise InfraError(f"building {tag} failed: {e}") from e


def _tree_files(repo_path: Path, commit: str, only: set[str] | None = None) -> list[tuple[str, bytes, int]]:
    """Files of ``commit`` as (testbed/path, bytes, mode), from ``git archive`` (ignored files never leak in)."""
    data = subprocess.run(
        ["git", "-c", f"tar.umask={UMASK}", "archive", "--format=tar", commit],
        cwd=repo_path, capture_output=True, check=True,
    ).stdout  # fmt: skip
    out = []
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        for m in tar.getmembers():
            if m.isfile() and (only is None or m.name in only):
                out.append((f"testbed/{m.name}", tar.extractfile(m).read(), m.mode))  # type: ignore[union-attr]
    return out


def repo_image(repo: Repo, client: object, commit: str | None = None) -> str:
    """The repository's tree at ``commit`` (default: its head) on the base image, without .git."""
    base = build_base_image(client=client)
    commit = commit or repo.head
    digest = hashlib.sha256(f"{base}\0{REPO_DOCKERFILE}\0{commit}\0{UMASK}".encode()).hexdigest()[:16]
    tag = f"swerl-synth.{repo.slug.lower()}:{digest}"
    if not _image_exists(client, tag):
        _build(
            client,
            REPO_DOCKERFILE.format(base=base),
            _tree_files(repo.path, commit),
            tag,
            {"swerl.synth": repo.name, "swerl.synth.commit": commit},
        )
    return tag


def _label(client: object, image: str, key: str) -> str | None:
    import docker.errors

    try:
        return (client.images.get(image).labels or {}).get(key)  # type: ignore[attr-defined]
    except docker.errors.ImageNotFound:
        return None


def _git_dir_files(repo_path: Path, commit: str) -> list[tuple[str, bytes | None, int]]:
    """A .git holding only ``commit`` (its objects, packed) on branch main, as testbed/.git/... files."""
    with tempfile.TemporaryDirectory(prefix="swerl-synth-git-") as tmp:
        dst = Path(tmp) / "r"
        git(Path(tmp), "init", "-q", "-b", "main", str(dst))
        git(dst, "fetch", "-q", "--no-tags", str(repo_path), commit)
        git(dst, "update-ref", "refs/heads/main", commit)
        git(dst, "read-tree", commit)  # the index, so `git status` is clean
        git(dst, "reflog", "expire", "--expire=now", "--all")
        git(dst, "gc", "-q", "--prune=now")
        for junk in ("FETCH_HEAD", "ORIG_HEAD", "logs", "hooks", "description", "info"):
            p = dst / ".git" / junk
            if p.is_dir():
                subprocess.run(["rm", "-rf", str(p)], check=True)
            else:
                p.unlink(missing_ok=True)
        out: list[tuple[str, bytes | None, int]] = [("testbed/.git", None, 0o755)]
        for f in sorted((dst / ".git").rglob("*")):
            name = f"testbed/.git/{f.relative_to(dst / '.git')}"
            out.append((name, None, 0o755) if f.is_dir() else (name, f.read_bytes(), 0o644))
        return out


def task_image(inst: object, repo: Repo, repo_img: str, repo_commit: str, client: object) -> str:
    """The task's image as one COPY layer on ``repo_img`` (whose WORKDIR and CMD it keeps):
    changed files + a one-commit .git."""
    base = build_base_image(client=client)
    _, digest = _task_recipe(inst, base)
    name = inst.image  # type: ignore[attr-defined]
    if _recipe_of(client, name) == digest and _label(client, name, FILES_LABEL) == UMASK:
        return name
    commit = inst.base_commit  # type: ignore[attr-defined]
    changed = set(
        git(repo.path, "diff", "--name-only", "-z", "--no-renames", repo_commit, commit).split("\0")
    ) - {""}
    files = _tree_files(repo.path, commit, only=changed) + _git_dir_files(repo.path, commit)
    deleted = [p for p in changed if not any(f[0] == f"testbed/{p}" for f in files)]
    if deleted:  # a COPY layer cannot delete; such tasks take the generic recipe
        raise InfraError(f"{inst.instance_id}: files deleted against the repo image: {deleted[:3]}")  # type: ignore[attr-defined]
    dockerfile = f"FROM {repo_img}\nCOPY testbed /testbed\n"
    _build(
        client,
        dockerfile,
        files,
        name,
        {TASK_RECIPE_LABEL: digest, FILES_LABEL: UMASK, "swerl.instance": inst.instance_id},
    )  # type: ignore[attr-defined]
    return name
