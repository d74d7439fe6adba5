"""Synthesis on repositories it was not tuned on: their own pytest config, test files that do not
import in the image, suites pytest cannot start. Each cause seen on a real sdist, reproduced on a small
local repository."""

from __future__ import annotations

import contextlib
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from swerl.tasks.synth.pytest_config import find, split_addopts

CALC = (
    "def add(a, b):\n    return a + b\n\n\n"
    "def clamp(x, lo, hi):\n    if x < lo:\n        return lo\n    if x > hi:\n        return hi\n    return x\n"
)
TESTS = (
    "from tiny.calc import add, clamp\n\n\ndef test_add():\n    assert add(2, 3) == 5\n\n\n"
    "def test_clamp_high():\n    assert clamp(5, 0, 3) == 3\n\n\n"
    "def test_clamp_low():\n    assert clamp(-1, 0, 3) == 0\n\n\n"
    "def test_clamp_inside():\n    assert clamp(2, 0, 3) == 2\n"
)
BROKEN = (
    "from tests import helpers  # an sdist that left tests/__init__.py out\n\n\ndef test_x():\n    pass\n"
)


def _tree(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return root


def test_addopts_that_need_plugins_or_change_the_report_are_left_out():
    """semver's --cov (no pytest-cov in the image: pytest refuses to start), python-slugify's
    --color=yes (the summary words coloured: swebench's parser reads no line), -x (a no-patch run
    stops before its PASS_TO_PASS): left out; what decides which tests run and how they import stays."""
    kept, dropped = split_addopts(
        ["--import-mode=importlib", "--no-cov-on-fail", "--cov=semver", "--cov", "src", "--color=yes", "-x",
         "-n", "auto", "-p", "xdist", "-p", "no:randomly", "-ra", "-m", "not slow", "-Werror", "--tb=short",
         "-o", "addopts=-q", "-o", "xfail_strict=true", "--doctest-modules", "-p", "pytester"]
    )  # fmt: skip
    assert kept == ["--import-mode=importlib", "-p", "no:randomly", "-m", "not slow", "-W", "error",
                    "-o", "xfail_strict=true", "-p", "pytester"]  # fmt: skip
    assert "--cov src" in dropped and "-n auto" in dropped and "--color=yes" in dropped and "-x" in dropped
    assert "-o addopts=-q" in dropped and "-p xdist" in dropped


def test_the_config_pytest_would_read_is_the_one_read(tmp_path):
    """pytest's order: per directory pytest.ini, .pytest.ini, pyproject.toml (with its table),
    tox.ini ([pytest]), setup.cfg ([tool:pytest]); the nearest directory to the tests first."""
    _tree(tmp_path, {
        "pyproject.toml": "[tool.black]\nline-length = 99\n",  # no pytest table: not pytest's config
        "tox.ini": "[tox]\nenvlist = py3\n",
        "setup.cfg": "[tool:pytest]\naddopts = --color=yes --import-mode=importlib\npython_files = check_*.py\n",
    })  # fmt: skip
    cfg = find(tmp_path)
    assert cfg.path == "setup.cfg" and cfg.python_files == ("check_*.py",)
    assert cfg.args() == ["-o", "addopts=--import-mode=importlib"] and cfg.dropped == ["--color=yes"]
    assert cfg.is_test("pkg/check_it.py") and not cfg.is_test("pkg/test_it.py")
    (tmp_path / ".pytest.ini").write_text("[pytest]\naddopts = -p no:warnings\n")  # wins; and nothing dropped
    assert find(tmp_path).path == ".pytest.ini" and find(tmp_path).args() == []
    _tree(tmp_path, {"tests/pytest.ini": ""})  # nearer the tests, and counts even when empty
    assert find(tmp_path, "tests").path == "tests/pytest.ini" and find(tmp_path, "tests").ini == {}
    (tmp_path / "tests" / "pytest.ini").write_text("[pytest\n")
    from swerl.errors import ConfigError

    with pytest.raises(ConfigError, match=re.escape("tests/pytest.ini: pytest's config file cannot be read")):
        find(tmp_path, "tests")


def test_layouts_tests_and_imports_are_found_where_the_repository_keeps_them(tmp_path):
    """A package under lib/ imports from lib (not the root); a unittest-era suite named test.py is
    its tests; a src/ layout of plain modules imports from src."""
    from swerl.tasks.synth.repo import prepare

    lib = prepare(str(_tree(tmp_path / "a", {"lib/tiny/__init__.py": "", "lib/tiny/calc.py": CALC,
                                             "lib/tiny/sub/__init__.py": "", "test.py": TESTS})), tmp_path / "w")  # fmt: skip
    assert lib.pythonpath == ["lib"] and lib.tests == ["test.py"]
    assert set(lib.sources) == {"lib/tiny/__init__.py", "lib/tiny/calc.py", "lib/tiny/sub/__init__.py"}
    assert any("test files by name: test.py" in n for n in lib.notes), lib.notes
    mods = prepare(
        str(_tree(tmp_path / "b", {"src/calc.py": CALC, "tests/test_calc.py": TESTS})), tmp_path / "w"
    )
    assert (
        mods.pythonpath == ["src"]
        and mods.sources == ["src/calc.py"]
        and mods.tests == ["tests/test_calc.py"]
    )
    flat = prepare(str(_tree(tmp_path / "c", {"tiny/__init__.py": "", "tiny/calc.py": CALC,
                                              "tests/__init__.py": "", "tests/test_calc.py": TESTS})), tmp_path / "w")  # fmt: skip
    assert flat.pythonpath == ["."] and flat.tests == ["tests/test_calc.py"] and flat.notes == []


def test_a_repository_without_tests_or_sources_is_told_so_before_any_image(tmp_path):
    """sortedcontainers' sdist ships no tests; a tree of tests only has nothing to mutate: each an
    error naming what is missing, and nothing validated."""
    from swerl.tasks.synth import synthesize

    bare = _tree(tmp_path / "bare", {"tiny/__init__.py": "", "tiny/calc.py": CALC})
    only = _tree(tmp_path / "only", {"tests/test_calc.py": TESTS})
    report = synthesize([str(bare), str(only)], tmp_path / "out", methods=("inject",), use_ray=False,
                        workdir=tmp_path / "w")  # fmt: skip
    r_bare, r_only = report.repos
    assert r_bare.error.startswith("no test files: none matches pytest's python_files"), r_bare.error
    assert r_only.error.startswith("nothing to inject into: no source .py files"), r_only.error
    assert report.validated == 0 and "repo_image" not in r_bare.seconds


def test_the_probe_says_why_a_test_file_was_not_collected_and_what_stopped_pytest(tmp_path):
    """In the sandbox's probe: a file that does not import is named with its error; an option
    pytest refuses leaves its words, not an empty result read later as "no test passed"."""
    from swerl.tasks.synth.runs import PROBE

    _tree(tmp_path, {"tiny/__init__.py": "", "tiny/calc.py": CALC, "tests/test_calc.py": TESTS,
                     "tests/test_broken.py": BROKEN})  # fmt: skip
    job = {"root": str(tmp_path), "pythonpath": ["."], "timeout": 60, "kind": "baseline", "inproc": True,
           "tests": ["tests/test_broken.py", "tests/test_calc.py"], "runs": 1,
           "files": ["tests/test_broken.py", "tests/test_calc.py"],
           "source_roots": [str(tmp_path / "tiny")], "baseline_timeout": 60}  # fmt: skip

    def probe(job: dict) -> object:
        (tmp_path / "job.json").write_text(json.dumps(job))
        subprocess.run([sys.executable, "-B", str(PROBE), str(tmp_path / "job.json"), str(tmp_path / "out.json")],
                       check=True, cwd=tmp_path, timeout=120)  # fmt: skip
        return json.loads((tmp_path / "out.json").read_text())

    (run,) = probe(job)
    assert set(run["outcomes"]) == {f"tests/test_calc.py::{t}" for t in
                                    ("test_add", "test_clamp_high", "test_clamp_low", "test_clamp_inside")}  # fmt: skip
    assert list(run["uncollected"]) == ["tests/test_broken.py"]
    assert (
        "ImportError: cannot import name 'helpers' from 'tests'" in run["uncollected"]["tests/test_broken.py"]
    )
    out = probe(job | {"pytest_args": ["--no-such-plugin-option=1"]})
    assert isinstance(out, dict) and out["exit"] == 4, out
    assert "unrecognized arguments: --no-such-plugin-option=1" in out["fatal"]


@pytest.mark.timeout(1200)
def test_synthesis_runs_under_a_repos_own_config_and_says_what_it_cannot_use(
    tmp_path, docker_client, remove_new_images
):
    """Small repositories, each a cause seen on a real sdist: (1) a pytest config whose
    addopts needs a plugin the image lacks and colours the report (semver, python-slugify), plus a
    test file that does not import (jmespath's sdist): tasks validate, each eval script runs with
    the addopts left out, swebench's own harness grades gold resolved and no patch unresolved, and
    the report names the file it could not use; (2) no test file can be collected: an error naming
    it and why; (3) a config pytest refuses outright (minversion): pytest's own words; (4) a package
    under lib/, tests in test.py, ids with spaces (jmespath's compliance cases): tasks, ids said."""
    from swerl.bench.grade import _remove_official_containers, official_grade
    from swerl.bench.synth import NOOP
    from swerl.tasks.sources import load_tasks
    from swerl.tasks.synth import synthesize

    base = {"tiny/__init__.py": "", "tiny/calc.py": CALC}
    cfg = _tree(tmp_path / "cfg", {**base, "tests/test_calc.py": TESTS, "tests/test_broken.py": BROKEN,
                                   "setup.cfg": "[tool:pytest]\naddopts = --color=yes -x --cov=tiny --cov-report term\n"})  # fmt: skip
    dead = _tree(tmp_path / "dead", {**base, "tests/test_broken.py": BROKEN})
    old = _tree(
        tmp_path / "old", {**base, "tests/test_calc.py": TESTS, "pytest.ini": "[pytest]\nminversion = 99.0\n"}
    )
    spawn = "\n\ndef test_cli():\n    import subprocess, sys\n    subprocess.run([sys.executable, '-c', 'import sys'], check=True)\n"
    needs = "\n\ndef test_needs_a_dependency():\n    import text_unidecode_not_here  # noqa: F401\n"
    spaced = "import pytest\n\n\n@pytest.mark.parametrize('s', ['a b', 'c d'])\ndef test_spaced(s):\n    assert add(1, 1) == 2\n"
    lib = _tree(
        tmp_path / "lib",
        {"lib/tiny/__init__.py": "", "lib/tiny/calc.py": CALC, "test.py": TESTS + spaced + needs + spawn},
    )
    report = synthesize([str(cfg), str(dead), str(old), str(lib)], tmp_path / "suite", methods=("inject",), use_ray=False,
                        workers=1, batch=8, per_function=2, workdir=tmp_path / "w")  # fmt: skip
    r_cfg, r_dead, r_old, r_lib = report.repos
    insts = load_tasks(tmp_path / "suite" / "tasks.jsonl")
    run_id = f"synth-robust-{tmp_path.name[-12:]}"
    cwd = Path.cwd()
    try:
        assert not r_cfg.error and report.validated == len(insts) >= 2, report.to_dict()
        assert any("addopts left out of every run: --color=yes -x --cov=tiny --cov-report term" in n
                   for n in r_cfg.notes), r_cfg.notes  # fmt: skip
        assert any("1 of 2 test files could not be collected" in n and "tests/test_broken.py: ImportError" in n
                   for n in r_cfg.notes), r_cfg.notes  # fmt: skip
        for inst in (i for i in insts if i.repo == r_cfg.repo):
            assert "-o addopts= " in inst.eval_script and inst.FAIL_TO_PASS, inst.eval_script
            assert all(t.startswith("tests/test_calc.py::") for t in inst.FAIL_TO_PASS + inst.PASS_TO_PASS)
        # lib/ layout, a suite named test.py, parametrized ids with spaces: tasks, and the ids said, not used
        from_lib = [i for i in insts if i.repo == r_lib.repo]
        assert not r_lib.error and from_lib, r_lib
        assert all(
            "PYTHONPATH=/testbed/lib " in i.eval_script and " test.py" in i.eval_script for i in from_lib
        )
        assert all("test_spaced" not in t for i in from_lib for t in i.FAIL_TO_PASS + i.PASS_TO_PASS)
        assert any(n.startswith("2 passing tests not used: whitespace in their ids") for n in r_lib.notes), (
            r_lib.notes
        )
        assert any(n.startswith("1 passing tests not used: they start a process") for n in r_lib.notes)
        assert all("test_cli" not in t for i in from_lib for t in i.FAIL_TO_PASS + i.PASS_TO_PASS)
        assert (
            "1 tests fail in the image before any mutation (not used); most often: "
            "ModuleNotFoundError: No module named 'text_unidecode_not_here' (1)" in r_lib.notes
        ), r_lib.notes
        os.chdir(tmp_path)  # run_instance writes its logs under the cwd
        inst = insts[0]
        assert official_grade(inst, inst.patch, docker_client, run_id) == "resolved"
        assert official_grade(inst, NOOP, docker_client, run_id + "e") == "unresolved"

        assert "none of its 1 test files could be collected" in r_dead.error, r_dead.error
        assert "tests/test_broken.py: ImportError: cannot import name 'helpers' from 'tests'" in r_dead.error
        assert "pytest ran no test in the image (exit 4" in r_old.error, r_old.error
        assert "minversion" in r_old.error and "requires pytest-99.0" in r_old.error, r_old.error
    finally:
        os.chdir(cwd)
        for rid in (run_id, run_id + "e"):
            with contextlib.suppress(Exception):
                _remove_official_containers(docker_client, rid)
        remove_new_images(inst.image for inst in insts)


NESTED = """class Counter:
    def __init__(self, start=0):
        self.n = start

    @property
    def double(self):
        return self.n * 2


def make():
    total = 0

    def add(k):
        nonlocal total
        total += k
        return total

    return add
"""


def test_a_method_is_checked_alone_and_a_closure_with_its_function():
    """Mutants of a method are checked on the method (under ``if 1:``), not its whole class; a
    function using ``nonlocal`` still compiles with its enclosing one: both get mutants, each a
    single-site edit inside its function, and the module still parses."""
    import ast

    from swerl.tasks.synth.mutate import mutants_of_source

    ms = mutants_of_source("m.py", NESTED)
    by_fn = {m.function for m in ms}
    assert {"Counter.__init__", "Counter.double", "make"} <= by_fn, by_fn
    for m in ms:
        mutated = m.apply(NESTED)
        assert ast.dump(ast.parse(mutated)) != ast.dump(ast.parse(NESTED)), m
        changed = [
            i
            for i, (a, b) in enumerate(zip(NESTED.splitlines(), mutated.splitlines(), strict=False))
            if a != b
        ]
        assert not changed or m.scope[0] - 1 <= changed[0] <= m.scope[1], m
    # the closure's own edit (labelled with its enclosing function, whose body holds it)
    assert any(m.operator == "flip_operator" and "total -= k" in m.new for m in ms)


SENTINEL = """class Box:
    __marker = object()

    def pop(self, key, default=__marker):
        if default is self.__marker:
            raise KeyError(key)
        return default

    def size(self):
        return 1 + 1
"""


def test_a_swapped_class_keeps_its_sentinel_defaults(tmp_path):
    """cachetools' ``pop(self, key, default=__marker)``: the probe swaps a mutant of ``size`` into the
    live class by re-running its body, which makes a new ``__marker``; ``pop`` must keep the class's
    own, or ``test_pop_missing`` fails in the probe but passes on the mutant loaded from its file
    (9 such FAIL_TO_PASS tests passed in the official no-patch run of a cachetools candidate)."""
    from swerl.tasks.synth.mutate import mutants_of_source
    from swerl.tasks.synth.runs import PROBE

    _tree(tmp_path, {"box.py": SENTINEL, "test_box.py": (
        "import pytest\nfrom box import Box\n\n\ndef test_pop_missing():\n    with pytest.raises(KeyError):\n"
        "        Box().pop('k')\n\n\ndef test_size():\n    assert Box().size() == 2\n")})  # fmt: skip
    (m,) = [
        m
        for m in mutants_of_source("box.py", SENTINEL)
        if m.function == "Box.size" and m.operator == "flip_operator"
    ]
    tests = ["test_box.py::test_pop_missing", "test_box.py::test_size"]
    item = {"id": m.key, "path": m.path, "lo": m.lo, "hi": m.hi, "new": m.new, "tests": tests,
            "scope": list(m.scope), "top": "Box", "runs": 1}  # fmt: skip
    job = {"root": str(tmp_path), "pythonpath": ["."], "timeout": 60, "kind": "mutants", "inproc": True,
           "mutants": [item], "files": ["test_box.py"]}  # fmt: skip
    (tmp_path / "job.json").write_text(json.dumps(job))
    subprocess.run([sys.executable, "-B", str(PROBE), str(tmp_path / "job.json"), str(tmp_path / "out.json")],
                   check=True, cwd=tmp_path, timeout=120)  # fmt: skip
    ((res),) = json.loads((tmp_path / "out.json").read_text())
    (run,) = res["runs"]
    assert run["status"] == "ok" and run["outcomes"] == {tests[0]: "passed", tests[1]: "failed"}, run


def test_the_baseline_marks_a_test_that_starts_a_process(tmp_path):
    """idna's and python-slugify's CLI tests run the library in a subprocess, which loads it from its
    files: a mutant swapped into the probe's process is not there (the official run then failed tests
    the probe passed). The trace marks such a test."""
    from swerl.tasks.synth.runs import PROBE

    _tree(tmp_path, {"pkg/__init__.py": "def work():\n    return 1\n", "test_cli.py": (
        "import subprocess\nimport sys\n\nfrom pkg import work\n\n\ndef test_cli():\n"
        "    subprocess.run([sys.executable, '-c', 'import pkg'], check=True)\n    assert work() == 1\n\n\n"
        "def test_plain():\n    assert work() == 1\n")})  # fmt: skip
    job = {"root": str(tmp_path), "pythonpath": ["."], "timeout": 60, "kind": "baseline", "inproc": True,
           "tests": ["test_cli.py"], "files": ["test_cli.py"], "runs": 1,
           "source_roots": [str(tmp_path / "pkg")], "baseline_timeout": 60}  # fmt: skip
    (tmp_path / "job.json").write_text(json.dumps(job))
    subprocess.run([sys.executable, "-B", str(PROBE), str(tmp_path / "job.json"), str(tmp_path / "out.json")],
                   check=True, cwd=tmp_path, timeout=120)  # fmt: skip
    (run,) = json.loads((tmp_path / "out.json").read_text())
    assert run["calls"]["test_cli.py::test_cli"] == ["<spawn>", "pkg/__init__.py:1"], run["calls"]
    assert run["calls"]["test_cli.py::test_plain"] == ["pkg/__init__.py:1"], run["calls"]
