"""Task synthesis: mutants (unit), then a real sdist from PyPI and a bundled repo's history, end to end."""

from __future__ import annotations

import ast
import contextlib
import json
import random
import subprocess
import sys
from pathlib import Path

import pytest

from swerl.tasks.synth.mutate import mutants_of_source, sample

SUITES = Path(__file__).resolve().parents[1] / "envs" / "swerl-mini"

SOURCE = '''"""A module."""


def clamp(x, lo=0, hi=10):
    """Clamp."""
    if x < lo:
        return lo
    elif x > hi:
        return hi
    total = x + 1
    total -= 1
    return max(lo, min(total, hi))


class Box:
    def area(self, w, h):
        return w * h if w and h else 0
'''


def test_mutants_are_single_site_compile_and_change_the_program():
    ms = mutants_of_source("m.py", SOURCE)
    ops = {m.operator for m in ms}
    assert {"flip_comparison", "flip_operator", "off_by_one", "remove_statement", "remove_branch",
            "swap_arguments", "change_return", "change_default", "flip_boolean", "negate_condition"} <= ops  # fmt: skip
    original = ast.dump(ast.parse(SOURCE))
    for m in ms:
        mutated = m.apply(SOURCE)
        assert ast.dump(ast.parse(mutated)) != original, m
        changed = [a for a, b in zip(SOURCE.splitlines(), mutated.splitlines(), strict=False) if a != b]
        assert changed, m  # a real edit at the site, not a reformatting elsewhere
        assert m.function in ("clamp", "Box.area")
        assert m.scope in ((4, 12), (15, 17))
    assert len({m.key for m in ms}) == len(ms)  # no duplicates
    assert (
        "(" not in next(m for m in ms if m.operator == "flip_comparison").new.strip()[:4]
    )  # parens only if needed
    picked = sample(ms, 3, random.Random(0))
    assert len([m for m in picked if m.function == "clamp"]) == 3
    assert len({m.operator for m in picked if m.function == "clamp"}) == 3  # operators taken in turn


def test_a_syntax_error_gives_no_mutants():
    assert mutants_of_source("bad.py", "def f(:\n") == []


def _nap(seconds: float) -> float:
    """A call that may outlive its deadline (a stand-in for a sandbox read that never returns)."""
    import time

    if seconds < 0:
        raise ValueError("negative nap")
    time.sleep(seconds)
    return seconds


@pytest.mark.parametrize("use_ray", [False, True], ids=["threads", "ray"])
def test_a_stuck_call_costs_itself_not_the_run(use_ray, request):
    """Every synthesis wait has a deadline: a call past it is abandoned with an error naming it, the rest finish."""
    import time

    from swerl.errors import InfraError
    from swerl.tasks.synth.runs import bounded

    if use_ray:
        request.getfixturevalue("ray_session")
    abandoned = []
    calls = [(_nap, (0.1,), 60.0), (_nap, (600.0,), 3.0), (_nap, (-1.0,), 60.0), (_nap, (0.2,), 60.0)]
    t = time.monotonic()
    got = dict(bounded(calls, workers=2, use_ray=use_ray, poll=0.5, on_abandon=abandoned.append))
    assert time.monotonic() - t < 60  # not the stuck call's 600 s
    assert got[0] == 0.1 and got[3] == 0.2
    assert isinstance(got[1], InfraError) and "deadline of 3 s" in str(got[1]) and abandoned == [1]
    assert isinstance(got[2], ValueError)


@pytest.mark.slow
@pytest.mark.timeout(1800)  # ~3 min on an idle 2-core box; a busy one takes several times that
def test_synth_from_a_pypi_sdist_and_a_history_grades_like_the_harness(
    tmp_path, docker_client, monkeypatch, remove_new_images
):
    """inflection's sdist (injection) and textkit's history (mining): a suite whose gold resolves
    and whose empty patch does not, in swerl and in swebench's run_instance."""
    from swerl.bench.grade import _remove_official_containers, official_grade
    from swerl.grading import docker_factory, grade
    from swerl.tasks.sources import load_tasks
    from swerl.tasks.synth import synthesize

    out = tmp_path / "suite"
    report = synthesize(
        ["pypi:inflection==0.5.1", str(SUITES / "repos" / "swerl__textkit.bundle")],
        out, max_candidates=4, per_function=1, workers=2, workdir=tmp_path / "work",
    )  # fmt: skip
    insts = load_tasks(out / "tasks.jsonl")
    images = {i.image for i in insts}
    run_id = f"synth-t-{tmp_path.name[-12:]}"
    monkeypatch.chdir(tmp_path)  # run_instance writes its logs under the cwd
    try:
        methods = report.per_method()
        assert methods["inject"]["validated"] >= 1 and methods["mine"]["validated"] >= 1, report.to_dict()
        assert report.validated == len(insts) and {i.extra["synth"]["method"] for i in insts} == {
            "inject",
            "mine",
        }
        for inst in insts:
            meta = inst.extra["synth"]
            assert (
                inst.FAIL_TO_PASS
                and meta["f2p_count"] == len(inst.FAIL_TO_PASS)
                and meta["lines_changed"] >= 1
            )
            assert inst.FAIL_TO_PASS[0].split("::")[0] in inst.eval_script
            assert meta["statement"] == {"mode": "template"} and inst.problem_statement
        plain = [json.loads(x) for x in (out / "swebench.jsonl").read_text().splitlines()]
        assert {r["instance_id"] for r in plain} == {i.instance_id for i in insts}
        assert (out / "repos" / "pypi__inflection.bundle").is_file()
        injected = next(i for i in insts if i.extra["synth"]["method"] == "inject")
        # the task image holds the buggy tree and no history that shows the fix
        log = (
            docker_client.containers.run(injected.image, "git log --format=%H --all", remove=True)
            .decode()
            .split()
        )
        assert log == [injected.base_commit]
        mined = next(i for i in insts if i.extra["synth"]["method"] == "mine")
        assert grade(mined, mined.patch, sandbox_factory=docker_factory(300)).status.value == "resolved"
        # strict grading (a rollout's default) too: the image's file modes are a checkout's, so
        # rewriting a file is not read as a mode change and reverted
        strict = grade(injected, injected.patch, sandbox_factory=docker_factory(300), mode="strict")
        assert strict.status.value == "resolved", (strict.error, strict.integrity)
        ours = grade(injected, injected.patch, sandbox_factory=docker_factory(300)).status.value
        assert ours == official_grade(injected, injected.patch, docker_client, run_id) == "resolved"
        # empty: swerl and the harness both unresolved (the harness cannot grade an empty patch: a no-op one)
        noop = "diff --git a/SYNTH_NOTE b/SYNTH_NOTE\nnew file mode 100644\n--- /dev/null\n+++ b/SYNTH_NOTE\n@@ -0,0 +1 @@\n+x\n"
        ours = grade(injected, noop, sandbox_factory=docker_factory(300)).status.value
        assert ours == official_grade(injected, noop, docker_client, run_id + "e") == "unresolved"
        bundle_refs = subprocess.run(["git", "bundle", "list-heads", str(out / "repos" / "pypi__inflection.bundle")],
                                     capture_output=True, text=True, check=True).stdout  # fmt: skip
        assert (
            injected.base_commit in bundle_refs
        )  # `swerl tasks build-images` can rebuild it from the bundle
    finally:
        for rid in (run_id, run_id + "e"):
            with contextlib.suppress(Exception):
                _remove_official_containers(docker_client, rid)
        remove_new_images(images)


TINY = {
    "tiny/__init__.py": "",
    "tiny/calc.py": (
        "def add(a, b):\n    return a + b\n\n\n"
        "def clamp(x, lo, hi):\n    if x < lo:\n        return lo\n    if x > hi:\n        return hi\n    return x\n"
    ),
    "tests/test_calc.py": (
        "from tiny.calc import add, clamp\n\n\ndef test_add():\n    assert add(2, 3) == 5\n\n\n"
        "def test_clamp_high():\n    assert clamp(5, 0, 3) == 3\n\n\n"
        "def test_clamp_low():\n    assert clamp(-1, 0, 3) == 0\n\n\n"
        "def test_clamp_inside():\n    assert clamp(2, 0, 3) == 2\n"
    ),
}


@pytest.fixture
def tiny_repo(tmp_path):
    root = tmp_path / "tiny-src"
    for rel, text in TINY.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return root


def test_a_budget_counts_what_was_validated_within_it():
    """The rate under a budget is the count validated by its end, not what finished after."""
    from swerl.bench.synth import budget_figures
    from swerl.tasks.synth.pipeline import RepoReport, SynthReport

    rep = SynthReport("x", [RepoReport("a", validated_at=[10.0, 59.9]), RepoReport("b", validated_at=[60.1])])
    rep.validated, rep.seconds, rep.budget_seconds = 3, 75.0, 60.0
    assert rep.validated_in_budget == 2
    assert budget_figures(rep) == {
        "budget_seconds": 60.0,
        "validated_in_budget": 2,
        "validated_in_budget_per_hour": 120,
        "drain_seconds": 15.0,
    }
    rep.budget_seconds = None
    assert rep.validated_in_budget == 3 and budget_figures(rep) == {}


def test_a_budget_must_be_positive(tmp_path):
    from swerl.errors import ConfigError
    from swerl.tasks.synth import synthesize

    with pytest.raises(ConfigError, match="minutes must be positive"):
        synthesize(["nowhere"], tmp_path / "out", minutes=0, use_ray=False)


@pytest.mark.timeout(900)
def test_no_candidate_starts_past_the_budget_and_within_it_tasks_validate(
    tiny_repo, tmp_path, docker_client, remove_new_images
):
    """A budget spent before the first batch probes nothing; a budget with room validates tasks
    (gold resolves, no patch fails exactly FAIL_TO_PASS, one container per check), each stamped
    with its validation time inside the budget."""
    from swerl.grading import docker_factory, grade
    from swerl.tasks.sources import load_tasks
    from swerl.tasks.synth import synthesize

    kw = dict(methods=("inject",), use_ray=False, workers=1, batch=4, per_function=2, workdir=tmp_path / "w")
    spent = synthesize([str(tiny_repo)], tmp_path / "spent", minutes=1e-4, **kw)
    counts = spent.per_method()["inject"]
    assert counts["generated"] > 0 and counts["covered"] > 0, counts
    assert counts.get("candidates", 0) == 0 and spent.validated == spent.validated_in_budget == 0
    assert load_tasks(tmp_path / "spent" / "tasks.jsonl") == []

    report = synthesize([str(tiny_repo)], tmp_path / "suite", minutes=10, **kw)
    insts = load_tasks(tmp_path / "suite" / "tasks.jsonl")
    try:
        assert report.validated == len(insts) >= 2, report.to_dict()
        assert report.validated_in_budget == report.validated
        (rr,) = report.repos
        assert len(rr.validated_at) == report.validated and all(0 < t <= 600 for t in rr.validated_at)
        assert {"probe", "image", "gold", "empty"} <= set(rr.seconds), rr.seconds
        for inst in insts[:2]:
            assert grade(inst, inst.patch, sandbox_factory=docker_factory(300)).status.value == "resolved"
    finally:
        remove_new_images(inst.image for inst in insts)


def test_the_baseline_records_what_a_test_calls_from_its_threads(tmp_path):
    """A test that calls the code in a thread covers it: a mutant there is probed against that test
    (else its no-patch run would fail a test the probe never ran, and the official check reject it)."""
    import sys

    from swerl.tasks.synth.runs import PROBE

    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("def work(out):\n    out.append(1)\n")
    (tmp_path / "test_threads.py").write_text(
        "import threading\nfrom pkg import work\n\n\ndef test_in_a_thread():\n    out = []\n"
        "    t = threading.Thread(target=work, args=(out,))\n    t.start()\n    t.join()\n    assert out == [1]\n"
    )
    job = {"root": str(tmp_path), "pythonpath": ["."], "timeout": 60, "kind": "baseline", "inproc": True,
           "tests": ["test_threads.py"], "files": ["test_threads.py"], "runs": 1,
           "source_roots": [str(tmp_path / "pkg")], "baseline_timeout": 60}  # fmt: skip
    (tmp_path / "job.json").write_text(json.dumps(job))
    subprocess.run([sys.executable, str(PROBE), str(tmp_path / "job.json"), str(tmp_path / "out.json")],
                   check=True, cwd=tmp_path, timeout=120)  # fmt: skip
    (run,) = json.loads((tmp_path / "out.json").read_text())
    assert run["outcomes"] == {"test_threads.py::test_in_a_thread": "passed"}, run
    assert run["calls"]["test_threads.py::test_in_a_thread"] == ["pkg/__init__.py:1"], run["calls"]


NESTED = """pytest_plugins = "pytester"


def test_outer(pytester):
    pytester.makepyfile(test_inner="def test_y():\\n    pass\\n")
    pytester.runpytest("-rA").assert_outcomes(passed=1)
"""


def test_mined_tests_are_node_ids_of_the_commits_test_files(tmp_path):
    """A test that runs pytest inside itself (pytester, as pytest's own tests do) shows its inner
    run's summary under ``-rA``; those lines parse as passing tests that are not the repository's,
    and a task listing them could never be resolved by a grader reading the run's own results."""
    from swebench.harness.log_parsers import parse_log_pytest

    from swerl.tasks.synth.mine import passing

    (tmp_path / "testing").mkdir()
    (tmp_path / "testing" / "test_nested.py").write_text(NESTED)
    out = subprocess.run(
        [sys.executable, "-m", "pytest", "-rA", "-p", "no:cacheprovider", "testing/test_nested.py"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    ).stdout
    statuses = parse_log_pytest(out, None)
    assert "test_inner.py::test_y" in statuses, out[-2000:]  # the inner run's line, parsed as a test
    assert passing(statuses, ["testing/test_nested.py"]) == {"testing/test_nested.py::test_outer"}


def test_a_commits_conftest_and_test_helpers_go_to_its_test_patch(tmp_path):
    """A fix commit that also edits the root conftest.py and a helper under tests/ (parso's
    did): those are the tests' side, as SWE-bench splits them; in the fix, strict grading
    reverts them and the gold patch would never resolve there."""
    from swerl.tasks.synth.mine import commits
    from swerl.tasks.synth.repo import prepare

    src = tmp_path / "src"
    (src / "pkg").mkdir(parents=True)
    (src / "tests").mkdir()

    def commit(files: dict[str, str], message: str) -> None:
        for path, text in files.items():
            (src / path).write_text(text)
        subprocess.run(["git", "add", "-A"], cwd=src, check=True)
        subprocess.run(
            ["git", "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", message],
            cwd=src,
            check=True,
        )

    subprocess.run(["git", "init", "-q", "-b", "main", str(src)], check=True)
    commit({"pkg/__init__.py": "X = 1\n", "tests/test_x.py": "def test_x():\n    pass\n"}, "base")
    commit(
        {
            "pkg/__init__.py": "X = 2\n",
            "tests/test_x.py": "def test_x(two):\n    pass\n",
            "conftest.py": "import pytest\n\n\n@pytest.fixture\ndef two():\n    return 2\n",
            "tests/helpers.py": "Y = 2\n",
        },
        "fix",
    )
    ((_, _, tests, other, message),) = commits(prepare(str(src), tmp_path / "work"))
    assert (sorted(tests), other, message.strip()) == (
        ["conftest.py", "tests/helpers.py", "tests/test_x.py"],
        ["pkg/__init__.py"],
        "fix",
    )
