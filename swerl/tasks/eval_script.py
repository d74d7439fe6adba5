"""Eval scripts in the shape swebench 5.x expects, for suites swerl authors.

swebench 5.x no longer generates eval scripts (instances carry their own), but it
parses them: ``parse_eval_script`` strips the shebang and ``set -uxo pipefail``
lines, and ``record_test_exit_code`` inserts the exit-code capture before the line
holding ``END_TEST_OUTPUT``. The markers reach the log through ``set -x``, exactly
as in SWE-bench's published scripts.
"""

from __future__ import annotations

import shlex

from swebench.harness.constants import END_TEST_OUTPUT, START_TEST_OUTPUT
from swebench.utils import generate_heredoc_delimiter, get_modified_files
from unidiff import PatchSet

from swerl.errors import ConfigError

WORKDIR = "/testbed"


def test_files(test_patch: str) -> tuple[list[str], list[str]]:
    """(files the test patch modifies, files it creates), read with swebench's own helper."""
    modified = get_modified_files(test_patch)
    created = [f.target_file[2:] for f in PatchSet(test_patch) if f.source_file == "/dev/null"]
    return modified, created


def make_eval_script(
    base_commit: str, test_patch: str, test_command: str, run_files: list[str] | None = None
) -> str:
    """A SWE-bench style eval.sh: reset test files, apply the test patch, run, reset.

    ``run_files`` defaults to every file the test patch touches.
    """
    if not test_patch.strip():
        raise ConfigError("an eval script needs a non-empty test_patch")
    modified, created = test_files(test_patch)
    run_files = run_files if run_files is not None else modified + created
    delim = generate_heredoc_delimiter(test_patch)
    reset = [f"git checkout {base_commit} {' '.join(map(shlex.quote, modified))}"] if modified else []
    if created:
        reset.append(f"rm -f {' '.join(map(shlex.quote, created))}")
    lines = [
        "#!/bin/bash",
        "set -uxo pipefail",
        f"cd {WORKDIR}",
        f"git -c core.fileMode=false diff {base_commit}",
        *reset,
        f"git apply -v - <<'{delim}'",
        test_patch.rstrip("\n"),
        delim,
        f": '{START_TEST_OUTPUT}'",
        f"{test_command} {' '.join(map(shlex.quote, run_files))}".rstrip(),
        f": '{END_TEST_OUTPUT}'",
        *reset,
    ]
    return "\n".join(lines) + "\n"


PYTEST_COMMAND = "python3 -m pytest -rA -p no:cacheprovider"
