"""bench grade's real-size task and its reading of the tests' own time."""

from __future__ import annotations

import contextlib
import os

import pytest

from swerl.bench import _realsize
from swerl.bench.grade import _remove_official_containers, official_grade, official_log, own_test_time
from swerl.grading import docker_factory, grade
from swerl.tasks.images import build_task_images
from swerl.tasks.instance import SUITES_DIR
from swerl.tasks.sources import load_tasks

pytestmark = pytest.mark.slow


def test_tests_time_reads_the_last_pytest_summary_line():
    log = "===== 3 passed in 0.50s =====\n...\n========= 2 failed, 480 passed, 1 skipped in 3.91s =========\n"
    assert own_test_time(log) == 3.91
    assert own_test_time("+ : '>>>>> Start Test Output'\nno summary here\n") is None


def test_real_size_task_grades_resolved_like_run_instance(tmp_path, docker_client, run_id, monkeypatch):
    """A generated suite (3 files x 20 tests + 2 new): gold resolves in swerl and in run_instance,
    every test parsed, and both logs carry pytest's own time."""
    iid = f"swerl__bigsuite-t{os.getpid()}"
    task_file = _realsize.build(tmp_path / "suite", files=3, tests=20, rounds=200, instance_id=iid)
    (inst,) = load_tasks(task_file)
    bundles = [task_file.parent / "repos", *sorted(SUITES_DIR.glob("*/repos"))]
    image = build_task_images([inst], client=docker_client, bundles=bundles)[iid]
    monkeypatch.chdir(tmp_path)  # run_instance writes its logs under the cwd
    try:
        res = grade(
            inst, inst.patch, sandbox_factory=docker_factory(timeout=300, run_id=run_id), mode="official"
        )
        assert res.status.value == "resolved", res.error
        assert len(res.tests) == 62 and set(res.tests.values()) == {"PASSED"}
        assert own_test_time(res.log) is not None
        assert {"start", "apply", "eval", "judge", "close"} <= set(res.timings)
        unfixed = grade(inst, "diff --git a/README b/README\nnew file mode 100644\n--- /dev/null\n+++ b/README\n"
                        "@@ -0,0 +1 @@\n+x\n", sandbox_factory=docker_factory(timeout=300, run_id=run_id))  # fmt: skip
        assert unfixed.status.value == "unresolved"
        assert unfixed.fail_to_pass["failure"] == ["tests/test_clamp.py::test_clamp_low"]
        assert official_grade(inst, inst.patch, docker_client, f"{run_id}-rs") == "resolved"
        assert own_test_time(official_log(f"{run_id}-rs", inst)) is not None
    finally:
        with contextlib.suppress(Exception):
            _remove_official_containers(docker_client, f"{run_id}-rs")
        with contextlib.suppress(Exception):
            docker_client.images.remove(image, force=True)
