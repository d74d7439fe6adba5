"""Grading against real Docker: statuses, rewards, infra errors, swebench parity."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import pytest
from swebench.harness.constants import END_TEST_OUTPUT, START_TEST_OUTPUT
from swebench.harness.grading import get_eval_report
from swebench.harness.log_parsers import PARSER_REGISTRY

from swerl.grading import GradeStatus, docker_factory, grade, grade_many, judge
from swerl.sandbox.base import OWNER_LABEL, RUN_LABEL, SandboxConfig
from swerl.sandbox.docker import DockerSandbox
from swerl.tasks.instance import Instance, select
from swerl.tasks.validate import count_mismatches, validate_suite

SUITE = Path(__file__).resolve().parents[1] / "envs" / "swerl-mini"
WRONG = [json.loads(line) for line in (SUITE / "wrong_patches.jsonl").read_text().splitlines()]


@pytest.fixture(scope="module")
def factory(run_id, task_images, docker_client):
    """Sandboxes labelled with this session's run id; the module checks none outlive it."""
    yield docker_factory(timeout=60, run_id=run_id)
    left = docker_client.api.containers(
        all=True, filters={"label": [f"{OWNER_LABEL}=swerl", f"{RUN_LABEL}={run_id}"]}
    )
    assert not left, f"containers left behind: {[c['Id'][:12] for c in left]}"


def _inst(suite, iid: str) -> Instance:
    return select(suite, [iid])[0]


@pytest.fixture(scope="module")
def wrong_grades(suite, factory) -> dict:
    """Each wrong patch graded once for the module (three tests read the same grades)."""
    pairs = [(_inst(suite, w["instance_id"]), w["patch"]) for w in WRONG]
    results = grade_many(pairs, max_workers=2, sandbox_factory=factory)
    return {w["instance_id"]: res for w, res in zip(WRONG, results, strict=True)}


def test_every_gold_resolves_and_bare_repo_does_not(suite, factory):
    rows = validate_suite(suite, sandbox_factory=factory, max_workers=2, out=None)
    assert count_mismatches(rows) == 0, [r for r in rows if not r.ok]


def test_gold_result_fields(suite, factory):
    inst = _inst(suite, "swerl__intervals-4")  # the multi-file task
    res = grade(inst, inst.patch, sandbox_factory=factory)
    assert (res.status, res.reward, res.attempts, res.error) == (GradeStatus.RESOLVED, 1.0, 1, "")
    assert sorted(res.fail_to_pass["success"]) == sorted(inst.FAIL_TO_PASS)
    assert sorted(res.pass_to_pass["success"]) == sorted(inst.PASS_TO_PASS)
    assert res.fail_to_pass["failure"] == res.pass_to_pass["failure"] == []
    assert all(res.tests[t] == "PASSED" for t in inst.FAIL_TO_PASS)
    assert START_TEST_OUTPUT in res.log and END_TEST_OUTPUT in res.log
    assert {"start", "apply", "eval", "close", "total"} <= set(res.timings)


def test_empty_patch_needs_no_sandbox(suite):
    def no_sandbox(image: str):
        raise AssertionError("an empty patch must not start a sandbox")

    for patch in ("", "  \n", None):
        res = grade(suite[0], patch, sandbox_factory=no_sandbox)
        assert (res.status, res.reward, res.attempts) == (GradeStatus.EMPTY_PATCH, 0.0, 0)


def test_patch_that_does_not_apply_is_patch_failed(suite, factory):
    inst = suite[0]
    bogus = inst.patch.replace("-    text = re.sub", "-    text = re.subx")  # context no longer matches
    assert bogus != inst.patch
    res = grade(inst, bogus, sandbox_factory=factory)
    assert (res.status, res.reward) == (GradeStatus.PATCH_FAILED, 0.0)
    assert "patch" in res.error and res.tests == {}


@pytest.mark.parametrize("wrong", WRONG, ids=[w["instance_id"] for w in WRONG])
def test_wrong_fix_is_unresolved_and_names_tests(wrong_grades, wrong):
    res = wrong_grades[wrong["instance_id"]]
    assert (res.status, res.reward) == (GradeStatus.UNRESOLVED, 0.0)
    assert res.fail_to_pass["failure"] == wrong["FAIL_TO_PASS_failure"]
    assert res.pass_to_pass["failure"] == wrong["PASS_TO_PASS_failure"]
    assert res.failed_tests and all(res.tests[t] in ("FAILED", "ERROR") for t in res.failed_tests)


def test_wrong_fix_passing_new_test_is_caught_by_pass_to_pass(wrong_grades):
    res = wrong_grades["swerl__intervals-1"]
    assert res.fail_to_pass["failure"] == [] and res.fail_to_pass["success"]
    assert res.pass_to_pass["failure"] == ["tests/test_ops.py::test_merge_adjacent_integers_stay_apart"]
    assert res.status is GradeStatus.UNRESOLVED


def test_hanging_tests_are_unresolved_not_infra(suite, factory):
    """A patch whose code hangs is the patch's fault (swebench: not resolved)."""
    inst = _inst(suite, "swerl__textkit-1")
    hang = inst.patch.replace(
        '+    text = re.sub(r"[^a-z0-9]+"',
        '+    __import__("time").sleep(60)\n+    text = re.sub(r"[^a-z0-9]+"',
    )
    hang = hang.replace("@@ -7,5 +7,5 @@", "@@ -7,5 +7,6 @@")
    assert hang.count("+    ") == 2
    res = grade(inst, hang, sandbox_factory=factory, timeout=3)
    assert (res.status, res.reward) == (GradeStatus.UNRESOLVED, 0.0), res.log[-500:]
    assert "timed out" in res.error


class _KillMidEval:
    """Wraps a DockerSandbox; kills its container from outside once the eval script runs."""

    def __init__(self, sb: DockerSandbox, client: Any) -> None:
        self._sb, self._client = sb, client

    def __getattr__(self, name: str) -> Any:
        return getattr(self._sb, name)

    def execute(self, command: str, *args: Any, **kwargs: Any):
        if "/eval.sh" in command:
            cid = self._sb.container_id
            threading.Timer(0.02, lambda: self._client.api.kill(cid)).start()
        return self._sb.execute(command, *args, **kwargs)


def _killing_factory(run_id: str, client: Any, kills: int):
    calls = {"n": 0}

    def make(image: str):
        calls["n"] += 1
        sb = DockerSandbox(image, SandboxConfig(run_id=run_id, timeout=60), client=client)
        return _KillMidEval(sb, client) if calls["n"] <= kills else sb

    return make, calls


def test_sandbox_killed_mid_eval_is_infra_error(suite, factory, run_id, docker_client):
    inst = _inst(suite, "swerl__tinyconf-1")
    make, calls = _killing_factory(run_id, docker_client, kills=99)
    res = grade(inst, inst.patch, sandbox_factory=make, retries=2)
    assert (res.status, res.reward, res.attempts, calls["n"]) == (GradeStatus.INFRA_ERROR, None, 3, 3)
    assert "SandboxError" in res.error


def test_sandbox_killed_once_is_retried(suite, factory, run_id, docker_client):
    inst = _inst(suite, "swerl__tinyconf-1")
    make, calls = _killing_factory(run_id, docker_client, kills=1)
    res = grade(inst, inst.patch, sandbox_factory=make, retries=2)
    assert (res.status, res.reward, res.attempts, calls["n"]) == (GradeStatus.RESOLVED, 1.0, 2, 2)


def test_missing_image_is_infra_error(suite, factory):
    inst = Instance.from_dict({**suite[0].to_dict(), "image": "sweb.eval.x86_64.does-not-exist:latest"})
    res = grade(inst, inst.patch, sandbox_factory=factory, retries=1)
    assert (res.status, res.reward, res.attempts) == (GradeStatus.INFRA_ERROR, None, 1)  # never retried
    assert "ImageMissing" in res.error and "build" in res.error


def test_parser_and_report_match_swebench_directly(suite, factory, wrong_grades, tmp_path):
    """Same log -> same per-test map and same report as calling swebench ourselves."""
    parsers = {i.log_parser for i in suite}
    pairs = [(i, i.patch) for i in suite[:2]] + [(_inst(suite, w["instance_id"]), w["patch"]) for w in WRONG]
    golds = grade_many(pairs[:2], max_workers=2, sandbox_factory=factory)
    for (inst, patch), res in zip(
        pairs, golds + [wrong_grades[w["instance_id"]] for w in WRONG], strict=True
    ):
        spec = inst.test_spec()
        assert inst.log_parser in parsers
        sliced = res.log.split(START_TEST_OUTPUT)[1].split(END_TEST_OUTPUT)[0]
        assert res.tests == PARSER_REGISTRY[inst.log_parser](sliced, spec)
        log = tmp_path / f"{inst.instance_id}.log"
        log.write_text(res.log)
        pred = {"instance_id": inst.instance_id, "model_patch": patch, "model_name_or_path": "x"}
        theirs = get_eval_report(spec, pred, str(log), include_tests_status=True)[inst.instance_id]
        assert res.report == theirs
        assert res.resolved == theirs["resolved"]
        assert judge(inst, patch, res.log)[1] == res.tests
