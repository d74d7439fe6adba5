"""Every code block in README.md runs as written.

Each ```python block is executed on its own, in a fresh interpreter, in an empty directory
outside the checkout, against real Docker and Ray. A block that needs what these machines
cannot have (a GPU, a model server, a cluster API) is preceded by ``<!-- no-test: why -->``;
those are counted, so they stay few. ``swerl`` command lines in ```bash blocks that only
read (help, --version, tasks list) run too.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

import swerl

ROOT = Path(swerl.__file__).resolve().parents[1]
README = ROOT / "README.md"
NO_TEST = re.compile(r"<!--\s*no-test:\s*(?P<why>.+?)\s*-->\s*$")
MAX_SKIPPED = 3
"""Blocks allowed to be marked no-test; raising it needs a reason in the README beside each."""
READ_ONLY = re.compile(r"^swerl(\s+\S+)*\s+(--help|-h|--version)$|^swerl tasks list \S+( --json)?$")


@dataclass
class Block:
    lang: str
    line: int
    code: str
    skip: str | None


def blocks(text: str) -> list[Block]:
    """The fenced code blocks of a Markdown text, with the no-test reason written right above each."""
    out, lines, i = [], text.splitlines(), 0
    while i < len(lines):
        m = re.match(r"^```(\w*)\s*$", lines[i])
        if not m or not m.group(1):
            i += 1
            continue
        start = i
        j = i + 1
        while j < len(lines) and lines[j].strip() != "```":
            j += 1
        prev = next((lines[k] for k in range(start - 1, -1, -1) if lines[k].strip()), "")
        skip = NO_TEST.match(prev.strip())
        out.append(Block(m.group(1), start + 1, "\n".join(lines[start + 1 : j]) + "\n", skip and skip["why"]))
        i = j + 1
    return out


BLOCKS = blocks(README.read_text())
PYTHON = [b for b in BLOCKS if b.lang == "python"]
COMMANDS = [
    line.split("#", 1)[0].strip()
    for b in BLOCKS
    if b.lang == "bash"
    for line in b.code.splitlines()
    if READ_ONLY.match(line.split("#", 1)[0].strip())
]


def _env() -> dict[str, str]:
    """This checkout's swerl for the subprocess, wherever it runs."""
    path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    return {**os.environ, "PYTHONPATH": path, "MPLBACKEND": "Agg", "MSWEA_SILENT_STARTUP": "1"}


def test_readme_has_runnable_blocks_and_few_exemptions():
    assert len(PYTHON) >= 5
    skipped = [b for b in PYTHON if b.skip]
    assert len(skipped) <= MAX_SKIPPED, [(b.line, b.skip) for b in skipped]
    assert all(len(b.skip) > 10 for b in skipped), "say why a block cannot run here"


def test_readme_never_installs_the_unrelated_swerl_from_the_index():
    """The index's ``swerl`` is another project: every install line names the checkout (or a git URL)."""
    for line in README.read_text().splitlines():
        for m in re.finditer(r"pip install ([^`\n]+)", line):
            for arg in shlex.split(m.group(1).split("#")[0]):
                assert not re.match(r"^swerl(\[|$)", arg), f"README installs {arg!r} from the index: {line}"


@pytest.mark.parametrize("block", PYTHON, ids=[f"line{b.line}" for b in PYTHON])
def test_python_block_runs(block, task_images, tmp_path, hook_site):
    if block.skip:
        pytest.skip(f"README line {block.line}: {block.skip}")
    script = tmp_path / "block.py"
    script.write_text(block.code)
    # as installed: `site` processes the hook's .pth, as from site-packages at interpreter start
    # (test_packaging checks that a wheel and an editable install put it there)
    run = f"import runpy, site; site.addsitedir({str(hook_site)!r}); runpy.run_path({str(script)!r}, run_name='__main__')"
    r = subprocess.run([sys.executable, "-c", run], cwd=tmp_path, env=_env(), capture_output=True,
                       text=True, timeout=600)  # fmt: skip
    assert r.returncode == 0, f"README line {block.line} failed:\n{r.stdout[-3000:]}\n{r.stderr[-4000:]}"


@pytest.mark.parametrize("command", COMMANDS)
def test_read_only_swerl_command_runs(command, tmp_path):
    argv = [sys.executable, "-m", "swerl.cli", *shlex.split(command)[1:]]
    r = subprocess.run(argv, cwd=tmp_path, env=_env(), capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and r.stdout.strip(), f"{command}: exit {r.returncode}\n{r.stderr[-3000:]}"


# --------------------------------------------- blocks in order, as written
def _imports(code: str) -> set[str]:
    """Top-level module names a piece of code imports at module level (what fails at once if missing)."""
    import ast

    names: set[str] = set()
    for node in ast.parse(code).body:
        if isinstance(node, ast.Import):
            names |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module)
    return names


def _third_party(module: str, seen: set[str]) -> set[str]:
    """The non-swerl top-level packages ``module`` needs at import, following swerl's own modules."""
    top = module.split(".")[0]
    if top != "swerl":
        return {top}
    if module in seen:
        return set()
    seen.add(module)
    out: set[str] = set()
    for prefix in (module.rsplit(".", i)[0] for i in range(module.count(".") + 1)):  # parents run first
        base = ROOT / prefix.replace(".", "/")
        source = base / "__init__.py" if base.is_dir() else base.with_suffix(".py")
        if source.is_file() and prefix not in seen | {module}:
            seen.add(prefix)
            out |= {m for name in _imports(source.read_text()) for m in _third_party(name, seen)}
    source = (ROOT / module.replace(".", "/")).with_suffix(".py")
    if source.is_file():
        out |= {m for name in _imports(source.read_text()) for m in _third_party(name, seen)}
    return out


def _closure(dists: set[str]) -> set[str]:
    """The installed distributions ``dists`` bring with them (their requirements, recursively)."""
    from importlib import metadata

    from packaging.requirements import Requirement

    out, todo = set(), [canon(d) for d in dists]
    while todo:
        d = todo.pop()
        if d in out:
            continue
        out.add(d)
        try:
            reqs = metadata.requires(d) or []
        except metadata.PackageNotFoundError:
            continue
        for r in map(Requirement, reqs):
            if r.marker is None or r.marker.evaluate({"extra": ""}):
                todo.append(canon(r.name))
    return out


def canon(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _installed_by(line: str) -> set[str]:
    """The distributions a README ``pip install`` line names: pins, and for ``.[x]`` this checkout's
    dependencies and extras (read from its pyproject.toml, not from whichever swerl is installed)."""
    import tomllib
    from packaging.requirements import Requirement

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    out: set[str] = set()
    for arg in shlex.split(line.split("#", 1)[0])[2:]:
        if arg.startswith("-") or arg.startswith("http"):
            continue
        m = re.match(r"^\.(\[(?P<extras>[\w,]+)\])?$", arg)
        if m:
            reqs = list(project["dependencies"])
            for extra in set((m["extras"] or "").split(",")) - {""}:
                reqs += project["optional-dependencies"].get(extra, [])
            out |= {canon(Requirement(r).name) for r in reqs}
            continue
        out.add(canon(Requirement(arg).name))
    return out


def test_every_python_block_needs_only_what_the_readme_installed_before_it():
    """Read top to bottom, each block's imports come from an install line above it (verl's did not)."""
    import sys as _sys
    from importlib import metadata

    provides = metadata.packages_distributions()
    text = README.read_text().splitlines()
    installed: set[str] = {"swerl", *_installed_by("pip install .")}  # swerl itself is a given
    missing = []
    for block in PYTHON:
        for line in text[: block.line]:
            if re.match(r"^\s*pip install ", line):
                installed |= _installed_by(line.strip())
        have = _closure(installed)
        for top in sorted({m for name in _imports(block.code) for m in _third_party(name, set())}):
            if top in _sys.stdlib_module_names or top == "__future__":
                continue
            dists = {canon(d) for d in provides.get(top, [])}
            if not dists:
                continue  # not installed on this machine: the block's own test says so
            if not dists & have:
                missing.append(f"README line {block.line}: imports {top} ({', '.join(sorted(dists))}), "
                               "installed by no pip line above it")  # fmt: skip
    assert not missing, "\n".join(missing)
