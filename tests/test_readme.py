"""Every code block in README.md runs as written.

Each ```python block is executed on its own, in a fresh interpreter, in an empty directory
outside the checkout, against real Docker and Ray. A block that needs what these machines
cannot have (a GPU, a model server, a cluster API) is preceded by ``<!-- no-test: why -->``;
those are counted, so they stay few. Each ```bash block runs as written too, with ``bash -euo
pipefail`` in a scratch directory that has the checkout's ``envs/`` (its relative paths), or is
marked no-test the same way (a cluster, a GPU, a registry, an install into this environment), and
then every ``swerl`` command line in it is still parsed by the real command line and its config
overrides validated, so a stale flag or key fails here.
"""

from __future__ import annotations

import itertools
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from readme_blocks import BLOCKS, README, ROOT
from readme_blocks import env as _env

MAX_SKIPPED = 3
"""Blocks allowed to be marked no-test; raising it needs a reason in the README beside each."""
MAX_SKIPPED_BASH = 14
"""The same for bash blocks, most of which drive a cluster, a GPU or an install."""
READ_ONLY = re.compile(r"^swerl(\s+\S+)*\s+(--help|-h|--version)$|^swerl tasks list \S+( --json)?$")


PYTHON = [b for b in BLOCKS if b.lang == "python"]
BASH = [b for b in BLOCKS if b.lang == "bash"]
COMMANDS = [  # in blocks that do not run whole
    line.split("#", 1)[0].strip()
    for b in BASH
    if b.skip
    for line in b.code.splitlines()
    if READ_ONLY.match(line.split("#", 1)[0].strip())
]


def swerl_lines(code: str) -> list[list[str]]:
    """The ``swerl`` command lines of a bash block as argv: at a line's start, after a pipe, ``--``
    or ``&&``, or alone in ``eval "$(...)"``; continuations joined, comments dropped."""
    out = []
    for line in code.replace("\\\n", " ").splitlines():
        words = shlex.split(line, comments=True)
        if len(words) == 2 and words[0] == "eval" and words[1].startswith("$("):
            words = shlex.split(words[1][2:].removesuffix(")"))
        for i, word in enumerate(words):
            if word == "swerl" and (i == 0 or words[i - 1] in SEPARATORS | {"--"}):
                out.append(list(itertools.takewhile(lambda w: w not in SEPARATORS, words[i + 1 :])))
                break
    return out


SEPARATORS = {"|", "&&", "||", ";"}


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


def test_every_bash_block_runs_or_says_why_not():
    skipped = [b for b in BASH if b.skip]
    assert len(BASH) >= 10 and len(skipped) <= MAX_SKIPPED_BASH, [(b.line, b.skip) for b in skipped]
    for b in skipped:
        assert len(b.skip) > 10, f"README line {b.line}: say why the block cannot run here"
        for test in re.findall(r"tests/test_\w+\.py", b.skip):  # a test named as doing it exists
            assert (ROOT / test).is_file(), f"README line {b.line} names {test}, which does not exist"
    # a block without a language would be neither run nor marked
    fences = [i for i, line in enumerate(README.read_text().splitlines(), 1) if line.startswith("```")]
    unlabelled = [i for i in fences[::2] if i not in {b.line for b in BLOCKS}]
    assert not unlabelled, f"README lines {unlabelled}: a code block without a language (```bash, ```text)"


@pytest.mark.parametrize("block", BASH, ids=[f"line{b.line}" for b in BASH])
def test_bash_block_runs(block, readme_bash, tmp_path):
    """As written, in a scratch directory with the checkout's ``envs/``, ``swerl`` being this checkout's
    (a block another test needs the output of runs once per session: ``readme_bash``)."""
    if block.skip:
        pytest.skip(f"README line {block.line}: {block.skip}")
    r, _ = readme_bash(block)
    assert r.returncode == 0, f"README line {block.line} failed:\n{r.stdout[-3000:]}\n{r.stderr[-4000:]}"
    assert r.stdout.strip(), f"README line {block.line} printed nothing"


SWERL_LINES = [(b.line, argv) for b in BASH for argv in swerl_lines(b.code)]


@pytest.mark.parametrize(("line", "argv"), SWERL_LINES, ids=[" ".join(a)[:60] for _, a in SWERL_LINES])
def test_every_swerl_line_parses_and_its_config_validates(line, argv, monkeypatch):
    """Flags and config keys in every block, run or not, are the command line's own."""
    from swerl.cli import parse_args
    from swerl.config import load_config

    monkeypatch.chdir(ROOT)  # a config named by path (configs/default.yaml) is the checkout's
    try:
        args = parse_args(argv)
    except SystemExit as e:
        pytest.fail(
            f"README line {line}: `swerl {shlex.join(argv)}` is refused by the parser (exit {e.code})"
        )
    config, overrides = getattr(args, "config", None), list(getattr(args, "overrides", None) or [])
    if isinstance(config, str) and "=" in config and not Path(config).exists():  # `swerl rollout k=v`
        config, overrides = "default", [config, *overrides]
    if isinstance(config, str):
        load_config(config, overrides)


def test_readme_installs_verl_as_the_bootstrap_does():
    """The verl block is what CI installs (it cannot install it again here)."""
    from swerl.bootstrap import VERL_IMPORTS, VERL_NO_DEPS

    (block,) = [b for b in BASH if "verl==" in b.code and "pip install" in b.code]
    lines = [shlex.split(line, comments=True) for line in block.code.splitlines()]
    assert [x[2:] for x in lines if x[:2] == ["pip", "install"]] == [
        VERL_IMPORTS,
        ["--no-deps", *VERL_NO_DEPS],
    ]


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
