"""A repository to synthesize from, as a local git repo: a PyPI sdist, a tarball, a directory or a git repo.

A source distribution has no history, so it becomes one commit ("NAME VERSION, sdist");
a git repository is cloned as it is (its history is what mining reads). The layout a
test run needs (the import path, the test files, the source files to mutate) is read
from the tree: ``src/`` layouts get ``src`` on the path, tests are the files pytest's
``python_files`` names (``test_*.py`` / ``*_test.py`` unless the repository's pytest config
says otherwise), sources are the other ``.py`` files of the package directories.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tarfile
import tempfile
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

from swerl.errors import ConfigError
from swerl.tasks.synth.pytest_config import find as find_pytest_config

GIT_ENV = {
    "GIT_AUTHOR_NAME": "swerl-synth",
    "GIT_AUTHOR_EMAIL": "synth@swerl.invalid",
    "GIT_COMMITTER_NAME": "swerl-synth",
    "GIT_COMMITTER_EMAIL": "synth@swerl.invalid",
    "GIT_AUTHOR_DATE": "2024-01-01T00:00:00+0000",
    "GIT_COMMITTER_DATE": "2024-01-01T00:00:00+0000",
    "GIT_CONFIG_GLOBAL": "/dev/null",
    "GIT_CONFIG_NOSYSTEM": "1",
}
"""Fixed identities and dates: the same input gives the same commit hashes (reproducible suites)."""


def git(cwd: Path, *args: str, stdin: str | None = None, env: dict[str, str] | None = None) -> str:
    proc = subprocess.run(
        ["git", *args], cwd=cwd, input=stdin, capture_output=True, text=True,
        env={**os.environ, **GIT_ENV, **(env or {})},
    )  # fmt: skip
    if proc.returncode != 0:
        raise ConfigError(f"git {' '.join(args[:3])} in {cwd} failed: {proc.stderr.strip()[-500:]}")
    return proc.stdout


@dataclass
class Repo:
    """A local git repository and how its tests run."""

    name: str
    """``owner/name`` as SWE-bench spells ``repo`` (``pypi/toolz`` for a PyPI sdist)."""
    path: Path
    head: str
    pythonpath: list[str] = field(default_factory=lambda: ["."])
    tests: list[str] = field(default_factory=list)
    """Test files, relative to the root."""
    sources: list[str] = field(default_factory=list)
    """Non-test Python files of the package(s): what bug injection mutates."""
    version: str = ""
    pytest_args: list[str] = field(default_factory=list)
    """Options every test run adds after the repository's own pytest config (see
    :mod:`swerl.tasks.synth.pytest_config`): in the probe and in each task's eval script."""
    notes: list[str] = field(default_factory=list)
    """What a report should say about how this repository's tests are run (options left out, ...)."""

    @property
    def slug(self) -> str:
        return self.name.replace("/", "__")


def prepare(spec: str, workdir: Path) -> Repo:
    """Turn ``spec`` into a :class:`Repo` under ``workdir``.

    ``spec``: ``pypi:NAME[==VERSION]`` (``pip download --no-binary :all: --no-deps``), a
    ``.tar.gz``/``.zip`` sdist, a directory (a git repo is cloned with its history; a plain
    tree becomes one commit) or a git bundle.
    """
    workdir.mkdir(parents=True, exist_ok=True)
    if spec.startswith("pypi:"):
        return _from_archive(_pip_download(spec[5:], workdir), workdir)
    path = Path(spec)
    if path.is_file() and path.suffix == ".bundle":
        dst = workdir / path.stem
        shutil.rmtree(dst, ignore_errors=True)
        heads = git(workdir, "bundle", "list-heads", str(path.resolve())).split()
        branch = (
            "main"
            if "refs/heads/main" in heads
            else next((h[11:] for h in heads if h.startswith("refs/heads/")), "")
        )
        git(workdir, "clone", "-q", *(["-b", branch] if branch else []), str(path.resolve()), str(dst))
        return _describe(dst, path.stem.replace("__", "/", 1))
    if path.is_file():
        return _from_archive(path, workdir)
    if path.is_dir():
        if (path / ".git").exists() or ((path / "HEAD").is_file() and (path / "objects").is_dir()):  # or bare
            dst = workdir / path.name
            shutil.rmtree(dst, ignore_errors=True)
            git(workdir, "clone", "-q", str(path.resolve()), str(dst))
            return _describe(dst, f"local/{path.resolve().name}")
        dst = workdir / path.name
        shutil.rmtree(dst, ignore_errors=True)
        shutil.copytree(path, dst)
        return _commit_tree(dst, f"local/{path.resolve().name}", f"{path.name}: imported")
    raise ConfigError(f"{spec!r} is not pypi:NAME, an sdist archive, a directory or a git bundle")


def _pip_download(req: str, workdir: Path) -> Path:
    dest = workdir / "sdists"
    dest.mkdir(exist_ok=True)
    before = set(dest.iterdir())
    cmd = [
        "python3",
        "-m",
        "pip",
        "download",
        "-q",
        "--no-binary",
        ":all:",
        "--no-deps",
        "-d",
        str(dest),
        req,
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    name = re.split(r"[=<>!~ ]", req, maxsplit=1)[0].lower().replace("_", "-")
    new = [p for p in dest.iterdir() if p not in before] or [
        p for p in dest.iterdir() if p.name.lower().replace("_", "-").startswith(name + "-")
    ]
    if proc.returncode != 0 or not new:
        raise ConfigError(f"pip download of sdist {req!r} failed: {proc.stderr.strip()[-800:]}")
    return sorted(new)[-1]


def _from_archive(archive: Path, workdir: Path) -> Repo:
    m = re.match(r"(.+?)-(\d[^-]*?)(\.tar\.gz|\.tgz|\.zip|\.tar\.bz2)$", archive.name)
    if not m:
        raise ConfigError(f"{archive}: not an sdist named NAME-VERSION.tar.gz or .zip")
    name, version = m.group(1).lower().replace("_", "-"), m.group(2)
    dst = workdir / f"{name}-{version}"
    shutil.rmtree(dst, ignore_errors=True)
    with tempfile.TemporaryDirectory(dir=workdir) as tmp:
        if archive.suffix == ".zip":
            with zipfile.ZipFile(archive) as z:
                z.extractall(tmp)
        else:
            with tarfile.open(archive) as t:
                t.extractall(tmp, filter="data")
        (top,) = list(Path(tmp).iterdir()) or [None]
        if top is None or not top.is_dir():
            raise ConfigError(f"{archive}: expected one top-level directory")
        shutil.move(str(top), dst)
    for junk in dst.glob("*.egg-info"):
        shutil.rmtree(junk)
    repo = _commit_tree(dst, f"pypi/{name}", f"{name} {version} (sdist)")
    repo.version = version
    return repo


def _commit_tree(path: Path, name: str, message: str) -> Repo:
    (path / ".gitignore").unlink(missing_ok=True)  # every file of the tree is part of the task
    git(path, "init", "-q", "-b", "main")
    git(path, "add", "-A", "-f")
    git(path, "commit", "-q", "-m", message)
    return _describe(path, name)


def _describe(path: Path, name: str) -> Repo:
    files = git(path, "ls-files", "-z").split("\0")
    py = [f for f in files if f.endswith(".py")]
    dirs = [f.rsplit("/", 1)[0] if "/" in f else "" for f in py if _is_test(f)]
    cfg = find_pytest_config(path, os.path.commonpath(dirs) if dirs and all(dirs) else "")
    tests = [f for f in py if cfg.is_test(f)]
    notes = [f"{cfg.path}: addopts left out of every run: {' '.join(cfg.dropped)}"] if cfg.dropped else []
    if not tests:  # unittest-era layouts: pytest collects a file it is given whatever its name
        tests = [f for f in py if f.rsplit("/", 1)[-1] in ("test.py", "tests.py")]
        if tests:
            notes.append(
                f"no file matches {' '.join(cfg.python_files)}; test files by name: {' '.join(tests[:5])}"
            )
    packages = {f.split("/")[0] for f in py if "/" in f and f.endswith("__init__.py")}
    src = any(f.startswith("src/") for f in py)
    sources = [
        f for f in py
        if f not in tests and not cfg.is_test(f) and not _is_test(f) and not _is_test_support(f)
        and f not in ("setup.py", "conftest.py")
        and (f.split("/")[0] in packages or (src and f.startswith("src/")) or "/" not in f)
    ]  # fmt: skip
    head = git(path, "rev-parse", "HEAD").strip()
    return Repo(
        name=name, path=path, head=head, pythonpath=_import_roots(sources, src), tests=tests, sources=sources,
        pytest_args=cfg.args(), notes=notes,
    )  # fmt: skip


def _import_roots(sources: list[str], src: bool) -> list[str]:
    """The directories a test run puts on ``sys.path`` so the sources import as their packages: the
    parent of each top-level package (``src`` for a src layout, ``lib`` for ``lib/pkg/__init__.py``);
    ``.`` when that is the root (a run from the root has it anyway)."""
    inits = {f.rsplit("/", 1)[0] for f in sources if f.endswith("/__init__.py")}
    parents = {d.rsplit("/", 1)[0] if "/" in d else "." for d in inits}
    roots = {p for p in parents if p not in inits and p != "."}
    if src and not roots:  # modules straight under src/
        roots.add("src")
    return sorted(roots) or ["."]


def _is_test(path: str) -> bool:
    base = path.rsplit("/", 1)[-1]
    return base.endswith(".py") and (base.startswith("test_") or base.endswith("_test.py"))


def _is_test_support(path: str) -> bool:
    parts = path.split("/")
    return any(
        p in ("tests", "test", "testing", "docs", "doc", "examples", "benchmarks") for p in parts[:-1]
    ) or parts[-1] in ("conftest.py", "noxfile.py", "fabfile.py")
