"""A task whose test suite is real-size: hundreds of tests, seconds of test time.

The bundled swerl-mini tasks run their tests in milliseconds, so a grade there is all
container lifecycle. Real upstream fixes run hundreds of tests for ~4 s. This builds
such a task locally, the way envs/swerl-mini does (a git repo as a bundle, an eval
script from ``make_eval_script``, an image from ``build_task_images``): a small
package with a bug, ``--files`` test files of ``--tests`` parametrized tests that each
do a few ms of work, and a gold fix that a new test checks. FAIL_TO_PASS and
PASS_TO_PASS follow from the construction (the bench grades gold, so a wrong list shows
as a status mismatch).
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

from swerl.tasks.eval_script import PYTEST_COMMAND, make_eval_script
from swerl.tasks.images import cache_dir

REPO = "swerl/bigsuite"
GIT_ENV = {
    "GIT_AUTHOR_NAME": "swerl", "GIT_AUTHOR_EMAIL": "swerl@localhost", "GIT_COMMITTER_NAME": "swerl",
    "GIT_COMMITTER_EMAIL": "swerl@localhost", "GIT_CONFIG_GLOBAL": "/dev/null", "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_AUTHOR_DATE": "2024-01-01T12:00:00+0000", "GIT_COMMITTER_DATE": "2024-01-01T12:00:00+0000",
}  # fmt: skip

MODULE = '''"""Number crunching with one bug: clamp() ignores the lower bound."""


def churn(n: int, rounds: int) -> int:
    acc = 0
    for i in range(rounds):
        acc = (acc * 31 + i * n) % 1_000_003
    return acc


def clamp(x: int, lo: int, hi: int) -> int:
    return min(x, hi)
'''
TEST_FILE = """import pytest

from bigsuite.core import churn


@pytest.mark.parametrize("n", range({tests}))
def test_churn_{k}(n):
    assert churn(n, {rounds}) == churn(n, {rounds})
"""
NEW_TEST = """from bigsuite.core import clamp


def test_clamp_low():
    assert clamp(-5, 0, 10) == 0


def test_clamp_high():
    assert clamp(50, 0, 10) == 10
"""


def _git(cwd: Path, *args: str, stdin: str | None = None) -> str:
    env = {**os.environ, **GIT_ENV}
    return subprocess.run(
        ["git", *args], cwd=cwd, env=env, input=stdin, check=True, capture_output=True, text=True
    ).stdout


def build(
    out: Path | None = None,
    files: int = 8,
    tests: int = 60,
    rounds: int = 30_000,
    instance_id: str = "swerl__bigsuite-1",
) -> Path:
    """Write ``out/tasks.jsonl`` and ``out/repos/swerl__bigsuite.bundle``; returns the task file."""
    out = Path(out or cache_dir() / f"realsize-{files}x{tests}x{rounds}")
    task_file = out / "tasks.jsonl"
    if task_file.is_file():
        return task_file
    src = out / "src"
    (src / "bigsuite").mkdir(parents=True, exist_ok=True)
    (src / "tests").mkdir(exist_ok=True)
    _git(src, "init", "-q", "-b", "main")
    (src / "bigsuite" / "__init__.py").write_text("")
    (src / "bigsuite" / "core.py").write_text(MODULE)
    for k in range(files):
        (src / "tests" / f"test_work_{k}.py").write_text(TEST_FILE.format(tests=tests, rounds=rounds, k=k))
    _git(src, "add", "-A")
    _git(src, "commit", "-qm", "bigsuite")
    base = _git(src, "rev-parse", "HEAD").strip()
    core = src / "bigsuite" / "core.py"
    core.write_text(MODULE.replace("return min(x, hi)", "return max(lo, min(x, hi))"))
    patch = _git(src, "diff", "--no-color")
    _git(src, "checkout", "-q", "--", ".")
    (src / "tests" / "test_clamp.py").write_text(NEW_TEST)
    _git(src, "add", "-A")
    test_patch = _git(src, "diff", "--cached", "--no-color")
    _git(src, "reset", "-q", "--hard")
    (out / "repos").mkdir(exist_ok=True)
    _git(src, "bundle", "create", "-q", str(out / "repos" / "swerl__bigsuite.bundle"), "main")
    run_files = [f"tests/test_work_{k}.py" for k in range(files)] + ["tests/test_clamp.py"]
    record = {
        "instance_id": instance_id,
        "repo": REPO,
        "base_commit": base,
        "patch": patch,
        "test_patch": test_patch,
        "problem_statement": "clamp(x, lo, hi) returns values below lo; it must return lo for them.",
        "hints_text": "",
        "created_at": "2024-03-01T12:00:00Z",
        "version": "0.1",
        "environment_setup_commit": base,
        "FAIL_TO_PASS": ["tests/test_clamp.py::test_clamp_low"],
        "PASS_TO_PASS": ["tests/test_clamp.py::test_clamp_high"]
        + [f"tests/test_work_{k}.py::test_churn_{k}[{n}]" for k in range(files) for n in range(tests)],
        "eval_script": make_eval_script(base, test_patch, PYTEST_COMMAND, run_files),
        "log_parser": "parse_log_pytest",
        "eval_type": "pass_and_fail",
    }
    task_file.write_text(json.dumps(record, sort_keys=True) + "\n")
    return task_file
