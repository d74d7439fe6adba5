"""Reward integrity: strict grading's filter and reading, the adversarial suite, no answer in the sandbox."""

from __future__ import annotations

import inspect
import json
import re
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from swerl.errors import ConfigError
from swerl.grading import GradeStatus, Integrity, docker_factory, grade, judge
from swerl.grading.allowlist import Change, Entry, classify, infra_reason, parse_listing
from swerl.grading.channel import Verdict, read_verdict
from swerl.grading.integrity import VERDICT_LOG, VERDICT_RUNNER, strict_reading
from swerl.tasks.instance import Instance, select

ROOT = Path(__file__).resolve().parents[1]
SUITE = ROOT / "envs" / "swerl-mini"
ADVERSARIAL = [json.loads(line) for line in (SUITE / "adversarial_patches.jsonl").read_text().splitlines()]
ATTACKS = [r for r in ADVERSARIAL if r["kind"] == "adversarial"]
CONTROLS = [r for r in ADVERSARIAL if r["kind"] == "control"]
OFFICIAL_CHECKED = [
    r for r in ADVERSARIAL if r["kind"] == "control" or not r["name"].endswith(("-inte", "-tiny"))
]


# --------------------------------------------------------------- the allowlist
@pytest.mark.parametrize(
    ("path", "tests", "infra"),
    [
        ("conftest.py", [], True),
        ("src/pkg/conftest.py", [], True),
        ("tests/__init__.py", [], True),
        ("pkg/tests/helpers.py", [], True),
        ("testing/util.py", ["testing/test_foo.py"], True),  # pytest's own layout: its tests live there
        ("testing/util.py", [], False),
        ("django/test/testcases.py", ["tests/foo/tests.py"], False),  # library code, not tests
        ("numpy/testing/utils.py", [], False),
        ("pkg/test_utils.py", [], False),  # never collected: the eval script names its test files
        ("pytest.ini", [], True),
        ("tox.ini", [], True),
        ("setup.cfg", [], True),
        ("pyproject.toml", [], True),
        ("sitecustomize.py", [], True),
        ("lib/usercustomize.py", [], True),
        ("evil.pth", [], True),
        ("pkg/__pycache__/mod.cpython-311.pyc", [], True),
        ("pkg/_fast.cpython-311-x86_64-linux-gnu.so", [], True),
        ("pkg.egg-info/entry_points.txt", [], True),
        ("x-1.0.dist-info/METADATA", [], True),
        (".gitignore", [], True),
        ("pkg/.gitattributes", [], True),
        (".git/hooks/post-checkout", [], True),
        ("textkit/slug.py", ["tests/test_slug.py"], False),
        ("textkit/conftest_utils.py", [], False),
        ("textkit/pytest_compat.py", [], False),
        ("README.md", [], False),
    ],
)
def test_which_paths_are_not_source(path, tests, infra):
    assert bool(infra_reason(path, tests)) is infra, infra_reason(path, tests)


F, X, L = Entry("f", 0o644, "1"), Entry("f", 0o755, "1"), Entry("l", 0o777, "1")


def _changed(entry: Entry) -> Entry:
    return Entry(entry.kind, entry.mode, entry.stamp + "+")


def test_the_allowlist_keeps_source_and_reverts_or_refuses_the_rest():
    before = {
        "pkg/a.py": F,
        "pkg/run.sh": X,
        "link": L,
        "README.md": F,
        ".git/HEAD": F,
        ".git/index": F,
        "build/x.so": F,
        "src/_pytest/__init__.py": F,  # a src layout whose own package has a runner module's name
    }
    tracked = {"pkg/a.py", "pkg/run.sh", "link", "README.md", "src/_pytest/__init__.py"}
    after = {
        "pkg/a.py": _changed(F),  # a source edit
        "pkg/run.sh": Entry("f", 0o644, "1"),  # mode change
        "link": _changed(L),  # retargeted symlink
        "pkg/new.py": F,  # new module
        "pkg/tool.py": X,  # new executable
        "pytest.ini": L,  # new symlink (and a config name)
        "shlex.py": F,  # shadows the standard library
        "pkg_extra/__init__.py": F,  # a new top-level package: checked for shadowing in the sandbox
        ".git/HEAD": _changed(F),  # inside .git
        ".git/index": _changed(F),  # the harness's own --3way may write it
        ".git/objects/ab/cdef": F,  # inert (new, or a pack re-timed by --3way)
        "build/x.so": _changed(F),  # an untracked file of the image
        "src/_pytest/__init__.py": F,
        "src/_pytest/fix.py": F,  # a new module in the base's own package: shadows nothing new
        "src/json.py": F,  # shadows the standard library wherever src/ is put on sys.path
    }  # README.md deleted: a tracked regular file, fine
    ch = classify(before, after, tracked, [])
    assert sorted(ch.accepted) == [
        "README.md",
        "pkg/a.py",
        "pkg/new.py",
        "pkg_extra/__init__.py",
        "src/_pytest/fix.py",
    ]
    assert set(ch.revert) == {"pkg/run.sh", "link", "pkg/tool.py", "pytest.ini", "shlex.py", "src/json.py"}
    assert "shadows the installed module 'json'" in ch.revert["src/json.py"]
    assert "mode changed from 755 to 644" in ch.revert["pkg/run.sh"]
    assert "symbolic link" in ch.revert["link"] and "executable" in ch.revert["pkg/tool.py"]
    assert "shadows the installed module 'shlex'" in ch.revert["shlex.py"]
    assert set(ch.refuse) == {".git/HEAD", "build/x.so"}
    # pkg/ has no __init__.py: a directory that may be put on sys.path, so pkg/new.py is checked too
    assert ch.created_roots == {"new", "pkg_extra"}
    assert ch.untracked_new == ["pkg/new.py", "pkg_extra/__init__.py", "src/_pytest/fix.py"]
    assert classify(before, dict(before), tracked, []) == Change()  # nothing changed: nothing to say


def test_listing_names_are_byte_exact():
    raw = b'f 644 3 1.5 7\0caf\xc3\xa9 "x".py\0l 777 9 1.5 8\0bad\xff\0'
    got = parse_listing(raw)
    assert set(got) == {'café "x".py', "bad\udcff"} and got["bad\udcff"].kind == "l"


def test_a_verdict_needs_the_key_and_its_closing_record():
    import hashlib
    import hmac

    key = "k" * 64

    def lines(*records, k=key):
        mac, out = "", []
        for n, r in enumerate(records):
            payload = json.dumps({**r, "seq": n}, sort_keys=True)
            mac = hmac.new(k.encode(), (mac + payload).encode(), hashlib.sha256).hexdigest()
            out.append(json.dumps({"r": {**r, "seq": n}, "mac": mac}, sort_keys=True))
        return ("\n".join(out) + "\n").encode()

    start, test = {"start": True}, {"test": "t.py::a", "status": "PASSED"}
    end = {"end": True, "exit": 0, "tests": 1, "tampered": []}
    good = read_verdict(lines(start, test, end), key)
    assert (good.tests, good.refused) == ({"t.py::a": "PASSED"}, [])
    assert "closing record" in read_verdict(lines(start, test), key).refused[0]
    assert "grader's key" in read_verdict(lines(start, test, end, k="x" * 64), key).refused[0]
    forged = lines(start, test, end).replace(b"PASSED", b"FAILED")
    assert "grader's key" in read_verdict(forged, key).refused[0]
    assert "never started" in read_verdict(None, key).refused[0]
    tampered = read_verdict(lines(start, test, {**end, "tampered": ["hook x registered by y"]}), key)
    assert tampered.refused == ["strict runner: hook x registered by y"]


# ----------------------------------------------------------------- the reading
def _log(body: str, exit_code: int = 0, before: str = "", after: str = "") -> str:
    return (
        f"+ cd /testbed\n{before}+ : '>>>>> Start Test Output'\n+ python3 -m pytest -rA tests/test_slug.py\n"
        f"{body}+ SWEBENCH_TEST_EXIT_CODE={exit_code}\n+ : '>>>>> End Test Output'\n"
        f"+ echo '>>>>> Test Exit Code: {exit_code}'\n>>>>> Test Exit Code: {exit_code}\n{after}"
    )


def _lines(inst: Instance, status: dict[str, str] | None = None) -> str:
    status = status or {}
    return "".join(f"{status.get(t, 'PASSED')} {t}\n" for t in [*inst.FAIL_TO_PASS, *inst.PASS_TO_PASS])


def _both(inst: Instance, log: str) -> tuple[bool, bool, Integrity]:
    official, tests, _ = judge(inst, "x", log)
    integrity = Integrity()
    reading = strict_reading(inst.test_spec(), "x", log, tests, integrity)
    return official is GradeStatus.RESOLVED, reading.resolved, integrity


@pytest.fixture(scope="module")
def tk1(suite) -> Instance:
    return select(suite, ["swerl__textkit-1"])[0]


def test_reading_a_clean_pass_agrees(tk1):
    assert _both(tk1, _log(_lines(tk1))) == (True, True, Integrity())


def test_a_skipped_pass_to_pass_test_is_kept_officially_but_not_strictly(tk1):
    p2p = tk1.PASS_TO_PASS[0]
    official, strict, integrity = _both(tk1, _log(_lines(tk1, {p2p: "SKIPPED"})))
    assert (official, strict, integrity.skipped) == (True, False, [p2p])


def test_an_xfail_fail_to_pass_test_is_not_a_strict_pass(tk1):
    f2p = tk1.FAIL_TO_PASS[0]
    official, strict, integrity = _both(tk1, _log(_lines(tk1, {f2p: "XFAIL"})))
    assert (official, strict, integrity.skipped) == (True, False, [f2p])


def test_an_expected_failure_the_runner_vouches_for_is_kept(tk1):
    """The strict runner says XFAIL only for an expected failure the test file declares
    (tests/test_strict_runner.py): a PASS_TO_PASS test so reported is kept, as the harness keeps
    it; the same word read from the log alone (no runner) stays a skip."""
    p2p = tk1.PASS_TO_PASS[0]
    log = _log(_lines(tk1, {p2p: "XFAIL"}))
    official, tests, _ = judge(tk1, "x", log)
    integrity = Integrity()
    verdict = Verdict(tests={t: "PASSED" for t in [*tk1.FAIL_TO_PASS, *tk1.PASS_TO_PASS]} | {p2p: "XFAIL"})
    reading = strict_reading(tk1.test_spec(), "x", log, tests, integrity, verdict)
    assert (official is GradeStatus.RESOLVED, reading.resolved, integrity) == (True, True, Integrity())
    assert _both(tk1, log)[1:] == (False, Integrity(skipped=[p2p]))


def test_results_outside_the_markers_are_not_read(tk1):
    """Nothing parses between the markers: the official reading falls back to the whole log."""
    official, strict, integrity = _both(tk1, _log("collected 0 items\n", after=_lines(tk1)))
    assert (official, strict) == (True, False)
    assert integrity.outside_markers and set(integrity.missing) == {*tk1.FAIL_TO_PASS, *tk1.PASS_TO_PASS}


def test_a_second_marker_is_refused(tk1):
    log = _log(_lines(tk1), before="+ echo '>>>>> End Test Output'\n>>>>> End Test Output\n")
    _, strict, integrity = _both(tk1, log)
    assert not strict and "1 start and 3 end marker" in " ".join(integrity.refused)


def test_conflicting_lines_for_a_test_are_not_a_pass(tk1):
    f2p = tk1.FAIL_TO_PASS[0]
    official, strict, integrity = _both(tk1, _log(f"FAILED {f2p} - assert 1 == 2\n" + _lines(tk1)))
    assert (official, strict, integrity.conflicting) == (True, False, [f2p])


def test_fail_only_needs_a_clean_exit_instead_of_presence(tk1):
    inst = Instance.from_dict({**tk1.to_dict(), "eval_type": "fail_only"})
    collection_error = "ERROR tests/test_slug.py - SyntaxError: expected ':'\n"
    official, strict, integrity = _both(inst, _log(collection_error, exit_code=2))
    assert (official, strict) == (True, False)
    assert "exited 2" in " ".join(integrity.refused)
    assert _both(inst, _log(_lines(inst)))[:2] == (True, True)


# -------------------------------------------------- the adversarial suite (Docker)
@pytest.fixture(scope="module")
def suite_grades(suite, task_images, run_id):
    """Every adversarial patch and control graded in strict mode, and in official mode every
    control and all but the per-project copies of an attack kind (their official verdicts
    are recorded by the generator, which grades everything in both modes); six at a time."""
    by_id = {i.instance_id: i for i in suite}
    factory = docker_factory(timeout=120, run_id=run_id)
    jobs = [(r, "strict") for r in ADVERSARIAL]
    jobs += [(r, "official") for r in OFFICIAL_CHECKED]

    def run(job):
        rec, mode = job
        base = by_id[rec["instance_id"]]
        # a record's own eval_type, or test patch and eval script (the task's tests written another way)
        own = {k: rec[k] for k in ("eval_type", "test_patch", "eval_script") if k in rec}
        inst = Instance.from_dict({**base.to_dict(), **own})
        return grade(inst, rec["patch"], sandbox_factory=factory, mode=mode)

    with ThreadPoolExecutor(6) as pool:
        results = list(pool.map(run, jobs))
    return {(rec["name"], mode): res for (rec, mode), res in zip(jobs, results, strict=True)}


@pytest.mark.parametrize("rec", ATTACKS, ids=[r["name"] for r in ATTACKS])
def test_every_attack_scores_zero_in_strict_mode_with_a_reason(suite_grades, rec):
    res = suite_grades[rec["name"], "strict"]
    assert (res.reward, res.mode) == (0.0, "strict"), res.log[-2000:]
    assert res.integrity is not None and res.integrity.reasons(), "strict mode must say what it refused"
    assert res.to_dict()["integrity"] == res.integrity.to_dict()


@pytest.mark.parametrize("rec", OFFICIAL_CHECKED, ids=[r["name"] for r in OFFICIAL_CHECKED])
def test_official_verdicts_are_the_recorded_ones(suite_grades, rec):
    """The README's table of which attacks fool the official reading stays true."""
    res = suite_grades[rec["name"], "official"]
    assert (res.status.value, res.mode, res.integrity) == (rec["official"], "official", None)


@pytest.mark.parametrize("rec", CONTROLS, ids=[r["name"] for r in CONTROLS])
def test_legitimate_controls_score_one_in_both_modes(suite_grades, rec):
    strict = suite_grades[rec["name"], "strict"]
    assert suite_grades[rec["name"], "official"].reward == 1.0
    assert strict.reward == 1.0, (strict.integrity and strict.integrity.reasons(), strict.log[-2000:])
    if rec["name"] != "gold-plus-own-test":  # its own test file is reverted, harmlessly
        assert strict.integrity.clean, strict.integrity.reasons()


def _kind(name: str) -> str:
    """An attack's kind: its name less the project suffix of a per-project variant."""
    return re.sub(r"-(text|inte|tiny)$", "", name)


def test_readme_table_is_the_recorded_one():
    readme = (ROOT / "README.md").read_text()
    rows = {
        k: (int(n), int(f))
        for k, n, f, _ in re.findall(
            r"^\| `([a-z0-9-]+)` \| [^|]+ \| (\d+) \| (\d+) of (\d+) \|", readme, re.M
        )
    }
    want: dict[str, tuple[int, int]] = {}
    for r in ATTACKS:
        n, fooled = want.get(_kind(r["name"]), (0, 0))
        want[_kind(r["name"])] = (n + 1, fooled + (r["official"] == "resolved"))
    assert rows == want
    assert all(r["strict"] == "unresolved" for r in ATTACKS) and all(
        r["strict"] == "resolved" for r in CONTROLS
    )


def test_every_kind_has_a_variant_on_every_project():
    projects: dict[str, set[str]] = {}
    for r in ATTACKS:
        projects.setdefault(_kind(r["name"]), set()).add(r["instance_id"].split("-")[0])
    per_project = [k for k, p in projects.items() if len(p) > 1]
    assert len(per_project) >= 14 and all(len(projects[k]) == 3 for k in per_project)


def test_strict_mode_resolves_every_gold_patch(suite, factory_strict):
    with ThreadPoolExecutor(4) as pool:
        results = list(
            pool.map(lambda i: grade(i, i.patch, sandbox_factory=factory_strict, mode="strict"), suite)
        )
    assert [r.status for r in results] == [GradeStatus.RESOLVED] * len(suite), [r.error for r in results]
    assert all(r.integrity is not None and r.integrity.clean for r in results)


@pytest.fixture(scope="module")
def factory_strict(task_images, run_id):
    return docker_factory(timeout=120, run_id=run_id)


def test_unknown_mode_is_a_clear_error(suite):
    from swerl.config import load_config

    with pytest.raises(ConfigError, match="grading must be one of official, strict"):
        grade(suite[0], suite[0].patch, mode="lenient")
    with pytest.raises(ConfigError, match=r"env\.grading"):
        load_config(None, ["env.grading=lenient"])
    assert load_config(None, []).env.grading == "strict"
    assert load_config(None, ["env.scrub_history=false"]).env.scrub_history is False


# ------------------------------------------------------- no answer in the sandbox
@pytest.fixture(scope="module")
def history_task(suite, base_image, docker_client):
    """textkit-1 in an image that holds the fix commit, a tag past it, a stash and the reflog."""
    from swerl.tasks.images import build_history_image

    inst = select(suite, ["swerl__textkit-1"])[0]
    image, fix = build_history_image(inst, client=docker_client)
    return Instance.from_dict({**inst.to_dict(), "image": image}), fix


def _probe(sb, fix: str) -> dict[str, str]:
    cmds = {
        "log": "git log --all --format=%H",
        "refs": "git for-each-ref; git stash list; git reflog",
        "fix": f"git cat-file -t {fix} 2>/dev/null || echo missing",
        "pickaxe": "git log --all --format=%H -S'[^a-z0-9]+'",
        "unreachable": "git fsck --unreachable --no-reflogs 2>&1",
        "special": "ls .git/ORIG_HEAD .git/FETCH_HEAD .git/logs 2>/dev/null || true",
        "status": "git rev-parse HEAD && git status --porcelain",
    }
    return {k: sb.execute(c, cwd="/testbed").output.strip() for k, c in cmds.items()}


@pytest.mark.parametrize("pool_size", [0, 1])
def test_an_agent_sandbox_holds_nothing_past_the_base_commit(history_task, sandbox_config, pool_size):
    from swerl.env import SWEEnv

    inst, fix = history_task
    with SWEEnv([inst], sandbox_config=sandbox_config, pool_size=pool_size) as env:
        env.reset(options={"task": inst.instance_id})
        seen = _probe(env.sandbox, fix)
    log = seen["log"].split()
    assert len(log) == 2 and log[0] == inst.base_commit, "the base commit and its one parent, nothing else"
    assert seen["refs"].splitlines() == [f"{inst.base_commit} commit\trefs/heads/main"]
    assert seen["fix"] == "missing" and seen["pickaxe"] == "" and seen["unreachable"] == ""
    assert seen["special"] == "" and seen["status"] == inst.base_commit


def test_enroot_sandboxes_are_scrubbed_too(history_task, sandbox_config, enroot_double):
    """The scrub is a script through the sandbox protocol, so every backend gets it."""
    from swerl.env import SWEEnv

    inst, fix = history_task
    with SWEEnv([inst], backend="enroot", sandbox_config=sandbox_config) as env:
        env.reset(options={"task": inst.instance_id})
        seen = _probe(env.sandbox, fix)
    assert seen["fix"] == "missing" and seen["pickaxe"] == "" and seen["status"] == inst.base_commit


def test_opting_out_keeps_the_history(history_task, sandbox_config):
    from swerl.env import SWEEnv

    inst, fix = history_task
    with SWEEnv([inst], sandbox_config=sandbox_config, scrub_history=False) as env:
        env.reset(options={"task": inst.instance_id})
        assert _probe(env.sandbox, fix)["fix"] == "commit"


READS_HISTORY = "\n".join(
    [
        "diff --git a/textkit/__init__.py b/textkit/__init__.py",
        "--- a/textkit/__init__.py",
        "+++ b/textkit/__init__.py",
        "@@ -1,4 +1,11 @@",
        ' """Small text utilities."""',
        "+import pathlib",
        "+import subprocess",
        "+",
        "+_repo = pathlib.Path(__file__).resolve().parents[1]",
        '+_log = ["git", "log", "--all", "--format=%H", "-S", "[^a-z0-9]+"]',
        "+for _fix in subprocess.run(_log, cwd=_repo, capture_output=True, text=True).stdout.split()[:1]:",
        '+    subprocess.run(["git", "checkout", _fix, "--", "textkit/slug.py"], cwd=_repo)',
        " ",
        " from textkit.slug import slugify",
        " from textkit.wrap import truncate, wrap",
        "",
    ]
)


def test_a_patch_that_fetches_the_fix_from_history_fools_only_official(history_task, factory_strict):
    """The patch's code runs during grading: strict mode scrubs the grading sandbox too."""
    inst, _ = history_task
    official = grade(inst, READS_HISTORY, sandbox_factory=factory_strict)
    strict = grade(inst, READS_HISTORY, sandbox_factory=factory_strict, mode="strict")
    assert (official.status, strict.status) == (GradeStatus.RESOLVED, GradeStatus.UNRESOLVED)
    assert grade(inst, inst.patch, sandbox_factory=factory_strict, mode="strict").resolved


def test_strict_env_records_integrity_in_the_episode(tasks, sandbox_config):
    from swerl.env import SWEEnv
    from swerl.rollout.recorder import EpisodeRecorder

    conftest = next(r for r in ATTACKS if r["name"] == "conftest-forces-pass")["patch"]
    inst = select(tasks, ["swerl__textkit-1"])[0]
    rewards = {}
    for grading in ("strict", "official"):
        with SWEEnv([inst], sandbox_config=sandbox_config, grading=grading) as env:
            assert env.grading.value == grading
            env.reset(options={"task": inst.instance_id})
            env.sandbox.write_file("/tmp/p.diff", conftest.encode())
            assert env.sandbox.execute("git apply /tmp/p.diff", cwd="/testbed").ok
            _, rewards[grading], *_, info = env.step(json.dumps({"tool": "submit"}))
        rec = EpisodeRecorder(inst.instance_id, 0, {})
        episode = rec.finish(rewards[grading], info)
        if grading == "strict":
            assert episode.integrity["reverted"] == {"conftest.py": "pytest conftest"}
            assert episode.grade["mode"] == "strict"
        else:
            assert episode.integrity is None
    assert rewards == {"strict": 0.0, "official": 1.0}
    assert inspect.signature(SWEEnv).parameters["grading"].default == "strict"


def test_eval_grading_both_writes_both_reports(tasks, tmp_path):
    from test_cli import run_cli

    attack = next(r for r in ATTACKS if r["name"] == "conftest-forces-pass")
    gold = select(tasks, ["swerl__textkit-2"])[0].patch
    preds = [
        {"instance_id": attack["instance_id"], "model_name_or_path": "m", "model_patch": attack["patch"]},
        {"instance_id": "swerl__textkit-2", "model_name_or_path": "m", "model_patch": gold},
    ]
    (tmp_path / "preds.json").write_text(json.dumps(preds))
    args = ["preds.json", "--run-id", "b1", "--grading", "both", "--output-dir", ".", "--json"]
    r = run_cli("eval", *args, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    data = json.loads(r.stdout)
    official, strict = (json.loads((tmp_path / f"m.{rid}.json").read_text()) for rid in ("b1", "b1-strict"))
    assert (official, strict) == (data["official"]["report"], data["strict"]["report"])
    assert official["resolved_ids"] == ["swerl__textkit-1", "swerl__textkit-2"]
    assert strict["resolved_ids"] == ["swerl__textkit-2"] and strict["unresolved_ids"] == ["swerl__textkit-1"]
    log = tmp_path / "logs/run_evaluation/b1-strict/m/swerl__textkit-1/run_instance.log"
    assert "strict grading: reverted 'conftest.py' (pytest conftest)" in log.read_text()


@pytest.mark.parametrize("command", ["PYTHONPATH=. pytest", "PYTHONPATH=. py.test", "python3 -m pytest"])
def test_the_strict_runner_takes_each_way_an_eval_script_starts_pytest(tk1, factory_strict, command):
    """A bare ``pytest`` (its interpreter read from the script) with PYTHONPATH, or ``python -m``."""
    inst = Instance.from_dict(
        {**tk1.to_dict(), "eval_script": tk1.eval_script.replace("python3 -m pytest", command)}
    )
    res = grade(inst, tk1.patch, sandbox_factory=factory_strict, mode="strict")
    assert res.resolved and res.integrity.clean and res.integrity.verdict == VERDICT_RUNNER, res.log[-1500:]
    assert res.integrity.keyed and res.to_dict()["integrity"]["verdict"] == VERDICT_RUNNER
    assert "/run.py" in res.log  # the eval script's own command went through the runner


def test_a_test_command_that_is_not_pytest_is_read_from_the_log_and_says_so(tk1, factory_strict):
    """What a trainer sees: the same clean pass, but ``integrity.verdict`` names the log."""
    command = "python3 -c 'import sys, pytest; sys.exit(pytest.main(sys.argv[1:]))'"
    inst = Instance.from_dict(
        {**tk1.to_dict(), "eval_script": tk1.eval_script.replace("python3 -m pytest", command)}
    )
    res = grade(inst, tk1.patch, sandbox_factory=factory_strict, mode="strict")
    assert res.resolved and res.integrity.clean, res.log[-1500:]
    assert (res.integrity.verdict, res.integrity.keyed) == (VERDICT_LOG, False)
    assert res.to_dict()["integrity"]["verdict"] == VERDICT_LOG and "/run.py" not in res.log


def test_a_runner_directory_that_cannot_be_set_up_is_an_infra_error(tk1, task_images, run_id, monkeypatch):
    """The set-up runs in the eval command; when it fails, the script never runs and nothing is scored."""
    from swerl.grading import channel

    path = f"/tmp/.swerl-strict-test-{run_id}"
    monkeypatch.setattr(channel.RunDir, "new", classmethod(lambda cls: cls(path)))
    make = docker_factory(timeout=120, run_id=run_id)

    def factory(image):
        sb = make(image)
        start = sb.start

        def blocked():  # a directory (not empty) where the runner's file goes: unpacking it fails
            start()
            assert sb.execute(f"mkdir -p {path}/run.py/x", cwd="/").ok
            return sb

        sb.start = blocked
        return sb

    res = grade(tk1, tk1.patch, sandbox_factory=factory, mode="strict", retries=0)
    assert res.status is GradeStatus.INFRA_ERROR and res.reward is None
    assert "could not be prepared" in res.error and "+ cd /testbed" not in res.error, res.error


@pytest.mark.parametrize("shown", ["whole", "cut"])
def test_the_listing_before_the_apply_comes_from_its_output_or_its_file(
    tk1, factory_strict, monkeypatch, shown
):
    """A short listing of the tree before the apply comes back in the apply command's own output
    (no read); a longer one (here: anything over 16 bytes) is read back whole from its file.
    The same clean pass either way, and the runner's directory keeps no archive (with its key)."""
    import importlib

    if shown == "cut":
        monkeypatch.setattr(importlib.import_module("swerl.grading.grade"), "SHOWN_BYTES", 16)
    reads, kept = [], []

    def factory(image):
        sb = factory_strict(image)
        read, close = sb.read_file, sb.close

        def counted(path):
            reads.append(path)
            return read(path)

        def closing():
            kept.append(sb.execute("cat /tmp/.swerl-strict-*.tar | wc -c", cwd="/").output.strip())
            close()

        sb.read_file, sb.close = counted, closing
        return sb

    res = grade(tk1, tk1.patch, sandbox_factory=factory, mode="strict", retries=0)
    assert res.resolved and res.integrity.clean and res.integrity.verdict == VERDICT_RUNNER, res.log[-1500:]
    before = [p for p in reads if "/.swerl-before-" in p]
    assert len(before) == (0 if shown == "whole" else 1), reads
    assert kept == ["0"]
