"""Instances, loaders, image names and builds, the swerl-mini suite and its eval scripts."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from swebench.harness.constants import TEST_EXIT_CODE_VAR
from swebench.harness.utils import make_test_spec

from swerl.errors import ConfigError, ImageMissing
from swerl.tasks.images import build_task_images, hub_image_name, require_task_image, task_image_name
from swerl.tasks.instance import Instance, select
from swerl.tasks.sources import load_tasks

SUITE = Path(__file__).resolve().parents[1] / "envs" / "swerl-mini"
GRADABLE = {"eval_script": "#!/bin/bash\npytest -rA\n", "log_parser": "parse_log_pytest"}
"""What a record needs beyond SWE-bench's fields to be graded (loaders refuse one without)."""

# A record as SWE-bench 5.x ships it (test lists as JSON strings, its own eval script).
ASTROPY = {
    "repo": "astropy/astropy",
    "instance_id": "astropy__astropy-12907",
    "base_commit": "d16bfe05a744909de4b27f5875fe0d4ed41ce607",
    "patch": "diff --git a/astropy/modeling/separable.py b/astropy/modeling/separable.py\n"
    "--- a/astropy/modeling/separable.py\n+++ b/astropy/modeling/separable.py\n"
    "@@ -242,7 +242,7 @@ def _cstack(left, right):\n"
    "         cright = _coord_matrix(right, 'right', noutp)\n     else:\n"
    "         cright = np.zeros((noutp, right.shape[1]))\n"
    "-        cright[-right.shape[0]:, -right.shape[1]:] = 1\n"
    "+        cright[-right.shape[0]:, -right.shape[1]:] = right\n \n"
    "     return np.hstack([cleft, cright])\n",
    "test_patch": "diff --git a/astropy/modeling/tests/test_separable.py "
    "b/astropy/modeling/tests/test_separable.py\n",
    "problem_statement": "Modeling's `separability_matrix` does not compute separability "
    "correctly for nested CompoundModels\n",
    "hints_text": "",
    "created_at": "2022-03-03T15:14:54Z",
    "version": "4.3",
    "FAIL_TO_PASS": '["astropy/modeling/tests/test_separable.py::test_separable[compound_model6-result6]", '
    '"astropy/modeling/tests/test_separable.py::test_separable[compound_model9-result9]"]',
    "PASS_TO_PASS": '["astropy/modeling/tests/test_separable.py::test_coord_matrix", '
    '"astropy/modeling/tests/test_separable.py::test_cdot"]',
    "environment_setup_commit": "298ccb478e6bf092953bca67a3d29dc6c35f6752",
    "image": "swebench/sweb.eval.x86_64.astropy_1776_astropy-12907:latest",
    "eval_script": "#!/bin/bash\nset -uxo pipefail\nsource /opt/miniconda3/bin/activate\n"
    "conda activate testbed\ncd /testbed\ngit config --global --add safe.directory /testbed\n"
    "cd /testbed\ngit status\ngit show\n"
    "git -c core.fileMode=false diff d16bfe05a744909de4b27f5875fe0d4ed41ce607\n"
    "source /opt/miniconda3/bin/activate\nconda activate testbed\n"
    "python -m pip install -e .[test] --verbose\n"
    "git checkout d16bfe05a744909de4b27f5875fe0d4ed41ce607 astropy/modeling/tests/test_separable.py\n"
    "git apply -v - <<'EOF_114329324912'\n"
    "diff --git a/astropy/modeling/tests/test_separable.py b/astropy/modeling/tests/test_separable.py\n"
    "EOF_114329324912\n: '>>>>> Start Test Output'\n"
    "pytest -rA astropy/modeling/tests/test_separable.py\n: '>>>>> End Test Output'\n"
    "git checkout d16bfe05a744909de4b27f5875fe0d4ed41ce607 astropy/modeling/tests/test_separable.py\n",
    "log_parser": "parse_log_astropy",
    "eval_type": "pass_and_fail",
    "image_assets": "",
}

DJANGO = {
    **ASTROPY,
    "repo": "django/django",
    "instance_id": "django__django-11099",
    "version": "3.0",
    "FAIL_TO_PASS": ["test_ascii_validator (auth_tests.test_validators.UsernameValidatorsTests)"],
    "PASS_TO_PASS": ["test_help_text (auth_tests.test_validators.UserAttributeSimilarityValidatorTest)"],
    "image": "swebench/sweb.eval.x86_64.django_1776_django-11099:latest",
    "eval_script": ASTROPY["eval_script"].replace(
        "pytest -rA astropy/modeling/tests/test_separable.py",
        "./tests/runtests.py --verbosity 2 --settings=test_sqlite --parallel 1 auth_tests.test_validators",
    ),
    "log_parser": "parse_log_django",
}


# ------------------------------------------------------------------ records
@pytest.mark.parametrize("record", [ASTROPY, DJANGO], ids=["astropy", "django"])
def test_test_spec_is_exactly_swebench(record):
    inst = Instance.from_dict(record)
    ours, theirs = inst.test_spec(), make_test_spec(record)
    assert ours == theirs
    assert ours.eval_script == theirs.eval_script
    f2p = record["FAIL_TO_PASS"]
    expected = json.loads(f2p) if isinstance(f2p, str) else f2p
    got = inst.FAIL_TO_PASS
    assert got == expected


def test_round_trip_keeps_unknown_fields():
    inst = Instance.from_dict({**ASTROPY, "split": "test"})
    assert inst.extra == {"image_assets": "", "split": "test"}
    again = Instance.from_dict(inst.to_dict())
    assert again == inst
    assert isinstance(inst.PASS_TO_PASS, list)


def test_image_names():
    assert (
        task_image_name("Astropy__Astropy-12907", arch="x86_64")
        == "sweb.eval.x86_64.astropy__astropy-12907:latest"
    )
    assert task_image_name("a__b-1", tag="v2", arch="arm64", registry="reg.local:5000/ns/") == (
        "reg.local:5000/ns/sweb.eval.arm64.a__b-1:v2"
    )
    assert hub_image_name("astropy__astropy-12907", arch="x86_64") == ASTROPY["image"]
    assert Instance.from_dict({"instance_id": "X__y-1", "repo": "x/y", "base_commit": "abc"}).image == (
        task_image_name("x__y-1")
    )


# ------------------------------------------------------------------ loaders
def _write(tmp_path: Path, name: str, text: str) -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


def test_load_json_list_single_and_jsonl(tmp_path):
    rec = {"instance_id": "o__r-1", "repo": "o/r", "base_commit": "abc", "FAIL_TO_PASS": '["t1"]', **GRADABLE}
    rec2 = {**rec, "instance_id": "o__r-2"}
    assert [i.instance_id for i in load_tasks(_write(tmp_path, "a.json", json.dumps([rec, rec2])))] == [
        "o__r-1",
        "o__r-2",
    ]
    single = load_tasks(_write(tmp_path, "b.json", json.dumps(rec)))
    assert single[0].FAIL_TO_PASS == ["t1"]
    lines = json.dumps(rec) + "\n\n" + json.dumps(rec2) + "\n"
    assert len(load_tasks(_write(tmp_path, "c.jsonl", lines))) == 2


def test_load_errors_name_file_line_and_field(tmp_path):
    good = json.dumps({"instance_id": "o__r-1", "repo": "o/r", "base_commit": "abc", **GRADABLE})
    missing = json.dumps({"instance_id": "o__r-2", "repo": "o/r"})
    p = _write(tmp_path, "t.jsonl", f"{good}\n{missing}\n")
    with pytest.raises(ConfigError, match=r"t\.jsonl:2: missing field 'base_commit'"):
        load_tasks(p)
    p = _write(tmp_path, "u.jsonl", f"{good}\n{{not json\n")
    with pytest.raises(ConfigError, match=r"u\.jsonl:2: bad JSON"):
        load_tasks(p)
    p = _write(tmp_path, "v.json", '[\n  {"instance_id": "a",\n  oops}\n]')
    with pytest.raises(ConfigError, match=r"v\.json:3: bad JSON"):
        load_tasks(p)
    bad_list = json.dumps(
        {"instance_id": "o__r-3", "repo": "o/r", "base_commit": "abc", "PASS_TO_PASS": "[1", **GRADABLE}
    )
    p = _write(tmp_path, "w.jsonl", f"{good}\n{bad_list}\n")
    with pytest.raises(ConfigError, match=r"w\.jsonl:2: field 'PASS_TO_PASS' is not a JSON list"):
        load_tasks(p)
    p = _write(tmp_path, "x.jsonl", f"{good}\n{good}\n")
    with pytest.raises(ConfigError, match="duplicate instance_id 'o__r-1'"):
        load_tasks(p)
    with pytest.raises(ConfigError, match="no such file"):
        load_tasks(tmp_path / "nope.jsonl")
    with pytest.raises(ConfigError, match=r"bundled suite.*swerl-mini"):
        load_tasks("no-such-suite")


def test_select(suite):
    picked = select(suite, ["swerl__tinyconf-2", "swerl__textkit-1"])
    assert [i.instance_id for i in picked] == ["swerl__tinyconf-2", "swerl__textkit-1"]
    with pytest.raises(ConfigError, match=r"unknown instance id.*nope__x-9"):
        select(suite, ["swerl__textkit-1", "nope__x-9"])


def test_load_local_dataset_dir(tmp_path, suite):
    datasets = pytest.importorskip("datasets")
    rows = [
        {
            **i.to_dict(),
            "FAIL_TO_PASS": json.dumps(i.FAIL_TO_PASS),
            "PASS_TO_PASS": json.dumps(i.PASS_TO_PASS),
        }
        for i in suite[:3]
    ]
    datasets.Dataset.from_list(rows).save_to_disk(str(tmp_path / "ds"))
    loaded = load_tasks(str(tmp_path / "ds"))
    assert loaded == suite[:3]


# ------------------------------------------------------------------ the suite
def test_suite_shape(suite):
    assert len(suite) >= 12
    assert len({i.repo for i in suite}) >= 3
    for inst in suite:
        assert inst.FAIL_TO_PASS and inst.PASS_TO_PASS, inst.instance_id
        assert inst.log_parser == "parse_log_pytest"
        # swebench recognised the end marker and inserted its exit-code capture
        assert f"{TEST_EXIT_CODE_VAR}=$?" in inst.test_spec().eval_script_list
    assert any(i.patch.count("diff --git") > 1 for i in suite), "a task whose patch touches several files"
    wrong = [json.loads(line) for line in (SUITE / "wrong_patches.jsonl").read_text().splitlines()]
    assert any(w["PASS_TO_PASS_failure"] for w in wrong), "a wrong fix that breaks an old test"


def test_generator_is_reproducible(tmp_path):
    """Regenerating from the sources gives byte-identical bundles and tasks."""
    copy = tmp_path / "swerl-mini"
    shutil.copytree(SUITE, copy, ignore=shutil.ignore_patterns("__pycache__"))
    subprocess.run(
        [sys.executable, str(copy / "generate.py"), "--no-docker"], check=True, capture_output=True
    )
    for rel in [
        "tasks.jsonl",
        "wrong_patches.jsonl",
        "adversarial_patches.jsonl",
        *[f"repos/{p.name}" for p in (SUITE / "repos").iterdir()],
    ]:
        assert (copy / rel).read_bytes() == (SUITE / rel).read_bytes(), rel


# ------------------------------------------------------------------ images
def test_task_images_cached_and_shaped(suite, task_images, docker_client):
    assert set(task_images) == {i.instance_id for i in suite}
    t = time.monotonic()
    assert build_task_images(suite, client=docker_client) == task_images
    assert time.monotonic() - t < 5, "a rerun with the same recipes must not rebuild"
    inst = select(suite, ["swerl__textkit-1"])[0]
    img = docker_client.images.get(task_images[inst.instance_id])
    assert img.attrs["Config"]["Cmd"] == ["bash"]
    out = docker_client.containers.run(
        img.id,
        [
            "bash",
            "-c",
            "cd /testbed && stat -c %U . && git rev-parse HEAD && git log --all --format=%H | wc -l",
        ],
        network_mode="none",
        remove=True,
    ).decode()
    owner, head, n_commits = out.split()
    assert (owner, head) == ("root", inst.base_commit)
    assert int(n_commits) == 2, "no history beyond the base commit may be in the image"


def test_missing_image_says_how_to_build():
    inst = Instance.from_dict(
        {"instance_id": "nobody__nothing-1", "repo": "nobody/nothing", "base_commit": "abc"}
    )
    with pytest.raises(ImageMissing, match="build-images"):
        require_task_image(inst)
