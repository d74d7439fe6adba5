"""Write any swerl task as a Harbor task folder that Harbor's own loader accepts.

A Harbor task is copied as it is. Any other task (a SWE-bench-family record, a synthesized one)
becomes: ``instruction.md`` (the problem statement), ``environment/Dockerfile`` (``FROM`` the task
image, so the repository, its dependencies and the base commit come with it), ``solution/solve.sh``
(applies the gold patch), and ``tests/test.sh``: the task's own eval script, then ``grade.py``,
which reads the test log the way swebench's ``parse_log_pytest`` does (the lines ``-rA`` prints,
between swebench's start and end markers) and writes ``reward.json``: 1.0 when every FAIL_TO_PASS
and PASS_TO_PASS test passed, else 0.0. Only pytest-style logs can be read without swebench inside
the image; a task with another log parser is refused, named.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

from swebench.harness.constants import END_TEST_OUTPUT, START_TEST_OUTPUT

from swerl.errors import ConfigError
from swerl.tasks.instance import Instance

PYTEST_PARSERS = ("parse_log_pytest",)
_NAME = re.compile(r"[^A-Za-z0-9._-]+")

GRADE_PY = '''"""swerl's export: SWE-bench's resolution from a pytest -rA log, as a Harbor reward."""
import json
import sys

STATUSES = ("PASSED", "FAILED", "SKIPPED", "ERROR", "XFAIL")
config = json.load(open(sys.argv[1]))
text = open(sys.argv[2], errors="replace").read()
start, end = text.find(config["start"]), text.rfind(config["end"])
if start < 0 or end < start:
    sys.exit("the test log has no complete test output (markers missing): no reward")
status = {}
for line in text[start:end].splitlines():
    if not line.startswith(STATUSES):
        continue
    if line.startswith("FAILED"):
        line = line.replace(" - ", " ")
    words = line.split()
    if len(words) > 1:
        status[words[1]] = words[0]
ok = {"PASSED", "XFAIL"}
f2p = [t for t in config["FAIL_TO_PASS"] if status.get(t) in ok]
p2p = [t for t in config["PASS_TO_PASS"] if status.get(t) in ok]
resolved = len(f2p) == len(config["FAIL_TO_PASS"]) and len(p2p) == len(config["PASS_TO_PASS"])
print(json.dumps({"reward": 1.0 if resolved else 0.0,
                  "fail_to_pass": len(f2p) / max(1, len(config["FAIL_TO_PASS"])),
                  "pass_to_pass": len(p2p) / max(1, len(config["PASS_TO_PASS"]))}))
'''

TEST_SH = """#!/bin/bash
# Exported by swerl: the task's SWE-bench eval script, then its verdict as a Harbor reward.
mkdir -p /logs/verifier
bash /tests/eval.sh > /logs/verifier/eval.log 2>&1
python3 /tests/grade.py /tests/config.json /logs/verifier/eval.log > /logs/verifier/reward.json.tmp \\
  && mv /logs/verifier/reward.json.tmp /logs/verifier/reward.json
cat /logs/verifier/reward.json 2>/dev/null
"""

SOLVE_SH = """#!/bin/bash
# Exported by swerl: apply the task's gold patch.
set -e
cd {workdir}
git apply --whitespace=nowarn - <<'{delim}'
{patch}
{delim}
"""


def harbor_name(instance_id: str) -> str:
    """``swerl/<id>`` in Harbor's org/name character set."""
    return "swerl/" + (_NAME.sub("-", instance_id).strip(".-") or "task")


def _toml_str(value: str) -> str:
    return json.dumps(value)  # a JSON string is a valid TOML basic string


def export_harbor(task: Instance, out: str | Path) -> Path:
    """Write ``task`` as a Harbor task folder ``out/<id>``; returns the folder."""
    dest = Path(out) / _NAME.sub("-", task.instance_id).strip(".-")
    if dest.exists():
        raise ConfigError(f"{dest} exists; export into an empty place")
    if task.graded_by_harbor:
        src = Path(task.harbor["task_dir"])
        if not src.is_dir():
            raise ConfigError(f"{task.instance_id}: its task folder {src} is not on this machine")
        shutil.copytree(src, dest, symlinks=True)
        return dest
    if task.log_parser not in PYTEST_PARSERS:
        raise ConfigError(
            f"{task.instance_id}: field 'log_parser' is {task.log_parser!r}; export can grade "
            f"{', '.join(PYTEST_PARSERS)} logs inside the image, not this one"
        )
    if not task.eval_script:
        raise ConfigError(f"{task.instance_id}: missing field 'eval_script', which the exported test.sh runs")
    for sub in ("environment", "tests", "solution"):
        (dest / sub).mkdir(parents=True)
    family = str(task.extra.get("family", "swebench"))
    (dest / "task.toml").write_text(
        f'schema_version = "1.4"\n\n[task]\nname = {_toml_str(harbor_name(task.instance_id))}\n'
        f"description = {_toml_str(f'{task.repo} at {task.base_commit[:12]}, exported by swerl')}\n\n"
        f"[metadata]\nsource = {_toml_str(family)}\ninstance_id = {_toml_str(task.instance_id)}\n"
        f"repo = {_toml_str(task.repo)}\nbase_commit = {_toml_str(task.base_commit)}\n\n"
        "[verifier]\ntimeout_sec = 1800.0\n\n"
        f'[environment]\nworkdir = {_toml_str(task.workdir)}\nnetwork_mode = "no-network"\n',
        encoding="utf-8",
    )
    (dest / "instruction.md").write_text(task.problem_statement, encoding="utf-8")
    (dest / "environment" / "Dockerfile").write_text(f"FROM {task.image}\nWORKDIR {task.workdir}\n")
    (dest / "tests" / "eval.sh").write_text(task.eval_script, encoding="utf-8")
    (dest / "tests" / "grade.py").write_text(GRADE_PY, encoding="utf-8")
    config = {"FAIL_TO_PASS": task.FAIL_TO_PASS, "PASS_TO_PASS": task.PASS_TO_PASS,
              "start": START_TEST_OUTPUT, "end": END_TEST_OUTPUT, "log_parser": task.log_parser}  # fmt: skip
    (dest / "tests" / "config.json").write_text(json.dumps(config, indent=1) + "\n")
    test_sh = dest / "tests" / "test.sh"
    test_sh.write_text(TEST_SH)
    solve = dest / "solution" / "solve.sh"
    delim = "SWERL_GOLD_PATCH"
    while delim in task.patch:
        delim += "_"
    solve.write_text(SOLVE_SH.format(workdir=task.workdir, delim=delim, patch=task.patch.rstrip("\n")))
    for script in (test_sh, solve):
        script.chmod(0o755)
    return dest


def export_all(tasks: list[Instance], out: str | Path, fmt: str = "harbor") -> list[Path]:
    if fmt != "harbor":
        raise ConfigError(f"unknown export format {fmt!r}: harbor")
    Path(out).mkdir(parents=True, exist_ok=True)
    return [export_harbor(t, out) for t in tasks]
