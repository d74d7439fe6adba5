"""Task sources: shape recognition, the forcing flag, and the SWE-bench family's published records.

No hub is reachable here, so each family's record is written field for field in the shape its
dataset card publishes (values shortened); the loaders must map its fields and image convention,
and refuse what cannot be graded with the field named.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from swerl.errors import ConfigError
from swerl.tasks.sources import detect, kinds, load_tasks
from swerl.tasks.sources.swebench import from_record

SWEB_EVAL = {
    "eval_script": "#!/bin/bash\nset -uxo pipefail\ncd /testbed\n: '>>>>> Start Test Output'\n"
    "pytest -rA tests/test_x.py\n: '>>>>> End Test Output'\n",
    "log_parser": "parse_log_pytest",
}

# princeton-nlp/SWE-bench_Verified (and Lite, Full): the fields of its dataset card, lists as JSON strings
VERIFIED = {
    "repo": "astropy/astropy",
    "instance_id": "astropy__astropy-12907",
    "base_commit": "d16bfe05a744909de4b27f5875fe0d4ed41ce607",
    "patch": "diff --git a/astropy/modeling/separable.py b/astropy/modeling/separable.py\n",
    "test_patch": "diff --git a/astropy/modeling/tests/test_separable.py b/astropy/modeling/tests/test_separable.py\n",
    "problem_statement": "Modeling's `separability_matrix` does not compute separability correctly\n",
    "hints_text": "",
    "created_at": "2022-03-03T15:14:54Z",
    "version": "4.3",
    "FAIL_TO_PASS": '["astropy/modeling/tests/test_separable.py::test_separable[compound_model6-result6]"]',
    "PASS_TO_PASS": '["astropy/modeling/tests/test_separable.py::test_coord_matrix"]',
    "environment_setup_commit": "298ccb478e6bf092953bca67a3d29dc6c35f6752",
}
# swebench 5.x's datasets add what its harness needs
VERIFIED_5 = {
    **VERIFIED,
    **SWEB_EVAL,
    "image": "swebench/sweb.eval.x86_64.astropy_1776_astropy-12907:latest",
    "eval_type": "pass_and_fail",
    "image_assets": "",
}
# ScaleAI/SWE-bench_Pro
PRO = {
    "repo": "ansible/ansible",
    "instance_id": "instance_ansible__ansible-eea46a0d1b99a6dadedbb6a3502d599235fa7ec3-v390e508d27db7a51eece36bb6d9698b63a5b638a",
    "base_commit": "07e7b69c04116f598ed2376616cbb46343d9a0e9",
    "patch": "diff --git a/lib/ansible/modules/x.py b/lib/ansible/modules/x.py\n",
    "test_patch": "diff --git a/test/units/test_x.py b/test/units/test_x.py\n",
    "problem_statement": "The eric_eccli module is missing.",
    "requirements": "- A module named eric_eccli must exist.",
    "interface": "Type: File\nName: eccli.py",
    "repo_language": "python",
    "fail_to_pass": "['test/units/modules/network/eric_eccli/test_eccli_command.py::TestEccliCommandModule::test_eccli_command_simple']",
    "pass_to_pass": "[]",
    "issue_specificity": '["core_feat"]',
    "issue_categories": '["back_end_knowledge"]',
    "before_repo_set_cmd": "git reset --hard 07e7b69c04116f598ed2376616cbb46343d9a0e9\ngit clean -fd",
    "selected_test_files_to_run": '["test/units/modules/network/eric_eccli/test_eccli_command.py"]',
    "dockerhub_tag": "ansible.ansible-ansible__ansible-eea46a0d1b99a6dadedbb6a3502d599235fa7ec3-v390e508d27db7a51eece36bb6d9698b63a5b638a",
}
# SWE-Gym/SWE-Gym: SWE-bench's fields
GYM = {**VERIFIED, "repo": "getmoto/moto", "instance_id": "getmoto__moto-5752", "version": "4.0"}
# SWE-bench/SWE-smith: a mutated mirror of the repository, one image per repository
SMITH = {
    "instance_id": "oauthlib__oauthlib.1fd52536.lm_rewrite__q9ve64pd",
    "repo": "swesmith/oauthlib__oauthlib.1fd52536",
    "patch": "diff --git a/oauthlib/common.py b/oauthlib/common.py\n",
    "FAIL_TO_PASS": ["tests/test_common.py::CommonTest::test_urldecode"],
    "PASS_TO_PASS": ["tests/test_common.py::CommonTest::test_add_params"],
    "created_at": "2025-03-19T18:26:58.396064",
    "image_name": "jyangballin/swesmith.x86_64.oauthlib_1776_oauthlib.1fd52536",
    "base_commit": "0d5d4e8f6c1bd0a8d6e3b2b0e0c8d3b1b8e6f9a1",
    "problem_statement": "urldecode no longer rejects invalid hex characters",
}
# R2E-Gym/R2E-Gym-Lite: no instance id, no test lists; the base commit inside the parsed commit
R2E = {
    "repo_name": "aiohttp",
    "docker_image": "namanjain12/aiohttp_final:d6a5f8b6a0dc2b9b3c9c3c3c4e7c5a1e9d8f7a6b",
    "commit_hash": "d6a5f8b6a0dc2b9b3c9c3c3c4e7c5a1e9d8f7a6b",
    "parsed_commit_content": json.dumps(
        {
            "old_commit_hash": "9b2f1e4c3d7a6b5e8f0a1c2d3e4f5a6b7c8d9e0f",
            "new_commit_hash": "d6a5f8b6a0dc2b9b3c9c3c3c4e7c5a1e9d8f7a6b",
            "commit_message": "Fix multipart boundary parsing",
            "file_diffs": [],
        }
    ),
    "execution_result_content": "{}",
    "modified_files": ["aiohttp/multipart.py"],
    "modified_entity_summaries": [],
    "relevant_files": ["aiohttp/multipart.py"],
    "num_non_test_files": 1,
    "num_non_test_func_methods": 1,
    "num_non_test_lines": 4,
    "prompt": "...",
    "problem_statement": "Multipart boundaries with a trailing space are rejected.",
    "expected_output_json": json.dumps({"tests/test_multipart.py::test_boundary": "PASSED"}),
}
# nebius/SWE-rebench
REBENCH = {
    "instance_id": "oemof__tespy-653",
    "base_commit": "dd5277a75e98c2c62ece5da20f12794222060a4f",
    "created_at": "2025-01-02T10:00:00Z",
    "environment_setup_commit": "dd5277a75e98c2c62ece5da20f12794222060a4f",
    "hints_text": "",
    "patch": "diff --git a/src/tespy/x.py b/src/tespy/x.py\n",
    "problem_statement": "Wrong enthalpy for saturated states",
    "repo": "oemof/tespy",
    "test_patch": "diff --git a/tests/test_x.py b/tests/test_x.py\n",
    "meta": {"failed_lite_validators": [], "has_test_patch": True, "is_lite": True},
    "version": "0.7",
    "install_config": {"python": "3.11", "install": "pip install -e .", "test_cmd": "pytest -rA"},
    "requirements": "numpy==1.26.4\n",
    "environment": "name: testbed\n",
    "FAIL_TO_PASS": ["tests/test_x.py::test_saturated"],
    "PASS_TO_PASS": ["tests/test_x.py::test_other"],
    "license_name": "MIT",
}


def _jsonl(tmp_path: Path, name: str, *records: dict) -> Path:
    p = tmp_path / name
    p.write_text("".join(json.dumps(r) + "\n" for r in records))
    return p


def test_swebench_verified_pre_5_is_refused_naming_eval_script(tmp_path):
    p = _jsonl(tmp_path, "verified.jsonl", VERIFIED)
    with pytest.raises(ConfigError, match=r"verified\.jsonl:1: missing field 'eval_script'.*swebench"):
        load_tasks(p)


def test_swebench_5_record_loads_as_published(tmp_path):
    (inst,) = load_tasks(_jsonl(tmp_path, "v5.jsonl", VERIFIED_5))
    assert inst.image == VERIFIED_5["image"]
    assert json.loads(VERIFIED["FAIL_TO_PASS"]) == inst.FAIL_TO_PASS
    assert inst.workdir == "/testbed" and inst.extra["family"] == "swebench"
    assert inst.test_spec().instance_id == inst.instance_id  # swebench's own TestSpec accepts it


@pytest.mark.parametrize("arch", ["x86_64", "arm64"])
def test_swebench_image_names_per_arch(arch):
    record = {k: v for k, v in VERIFIED_5.items() if k != "image"}
    inst = from_record(record, "r", arch=arch)
    assert inst.image == f"sweb.eval.{arch}.astropy__astropy-12907:latest"
    other = "arm64" if arch == "x86_64" else "x86_64"
    with pytest.raises(
        ConfigError, match=rf"r: field 'image' 'sweb\.eval\.{other}\..*' is built for {other}"
    ):
        from_record({**record, "image": f"sweb.eval.{other}.astropy__astropy-12907:latest"}, "r", arch=arch)


def test_swebench_pro_fields_and_image(tmp_path):
    p = _jsonl(tmp_path, "pro.jsonl", PRO)
    with pytest.raises(
        ConfigError, match=r"pro\.jsonl:1: missing field 'eval_script'.*swebench-pro.*run_scripts"
    ):
        load_tasks(p)
    given = {**PRO, **SWEB_EVAL, "fail_to_pass": '["a::b"]'}
    with pytest.raises(ConfigError, match=r"pro2\.jsonl:1: field 'before_repo_set_cmd' is not honoured"):
        load_tasks(_jsonl(tmp_path, "pro2.jsonl", given))  # the eval script does not run it
    given["eval_script"] = f"{PRO['before_repo_set_cmd']}\n{SWEB_EVAL['eval_script']}"
    with pytest.raises(ConfigError, match=r"field 'selected_test_files_to_run' is not honoured"):
        load_tasks(_jsonl(tmp_path, "pro2.jsonl", given))  # nor the selected test file
    (dev,) = load_tasks(_jsonl(tmp_path, "pro2.jsonl", given), accept=["selected_test_files_to_run"])
    assert dev.extra["deviations"][0].startswith("selected_test_files_to_run: SWE-bench Pro runs")
    given["eval_script"] += "pytest -rA test/units/modules/network/eric_eccli/test_eccli_command.py\n"
    (inst,) = load_tasks(_jsonl(tmp_path, "pro2.jsonl", given))
    assert "deviations" not in inst.extra
    assert inst.image == f"jefzda/sweap-images:{PRO['dockerhub_tag']}"
    assert inst.workdir == "/app"
    assert inst.FAIL_TO_PASS == ["a::b"] and inst.PASS_TO_PASS == []
    assert "Requirements:\n- A module named eric_eccli" in inst.problem_statement
    assert "Interface:\nType: File" in inst.problem_statement
    assert inst.extra["before_repo_set_cmd"].startswith("git reset --hard")
    assert inst.extra["family"] == "swebench-pro"


def test_swe_gym_needs_the_flag_and_gets_its_images(tmp_path):
    p = _jsonl(tmp_path, "gym.jsonl", {**GYM, **SWEB_EVAL})
    assert load_tasks(p)[0].extra["family"] == "swebench"  # SWE-bench's fields: not told apart by shape
    (inst,) = load_tasks(p, kind="swe-gym")
    assert inst.image == "xingyaoww/sweb.eval.x86_64.getmoto_s_moto-5752:latest"
    assert inst.extra["family"] == "swe-gym"
    with pytest.raises(ConfigError, match=r"missing field 'eval_script'.*swe-gym"):
        load_tasks(_jsonl(tmp_path, "gym2.jsonl", GYM), kind="swe-gym")


def test_swe_smith_bug_patch_is_not_a_gold_patch(tmp_path):
    with pytest.raises(ConfigError, match=r"smith\.jsonl:1: missing field 'image'.*before its bug"):
        load_tasks(_jsonl(tmp_path, "smith.jsonl", {**SMITH, **SWEB_EVAL}))
    bugged = {**SMITH, **SWEB_EVAL, "image": "local/oauthlib-q9ve64pd:bugged"}
    (inst,) = load_tasks(_jsonl(tmp_path, "smith2.jsonl", bugged))
    assert inst.image == "local/oauthlib-q9ve64pd:bugged" and inst.patch == ""
    assert inst.extra["bug_patch"] == SMITH["patch"] and inst.extra["image_name"] == SMITH["image_name"]
    assert SMITH["FAIL_TO_PASS"] == inst.FAIL_TO_PASS
    assert inst.extra["family"] == "swe-smith"


def test_r2e_gym_base_commit_id_and_image(tmp_path):
    with pytest.raises(ConfigError, match=r"r2e\.jsonl:1: missing field 'eval_script'.*r2e-gym"):
        load_tasks(_jsonl(tmp_path, "r2e.jsonl", R2E))
    with pytest.raises(ConfigError, match=r"r2e2\.jsonl:1: field 'expected_output_json' is not honoured"):
        load_tasks(_jsonl(tmp_path, "r2e2.jsonl", {**R2E, **SWEB_EVAL}))
    (inst,) = load_tasks(
        _jsonl(tmp_path, "r2e2.jsonl", {**R2E, **SWEB_EVAL}), accept=["expected_output_json"]
    )
    assert inst.extra["deviations"][0].startswith("expected_output_json: R2E-Gym grades")
    assert inst.instance_id == "aiohttp__d6a5f8b6a0dc"
    assert inst.base_commit == "9b2f1e4c3d7a6b5e8f0a1c2d3e4f5a6b7c8d9e0f"
    assert inst.image == R2E["docker_image"] and inst.repo == "aiohttp"
    broken = {
        **R2E,
        **SWEB_EVAL,
        "parsed_commit_content": json.dumps({"new_commit_hash": "x"}),
        "expected_output_json": "",
    }
    with pytest.raises(
        ConfigError, match=r"r2e3\.jsonl:1: missing field 'parsed_commit_content\.old_commit_hash'"
    ):
        load_tasks(_jsonl(tmp_path, "r2e3.jsonl", broken))


def test_swe_rebench_image_from_record_or_convention(tmp_path):
    with pytest.raises(ConfigError, match=r"missing field 'eval_script'.*swe-rebench"):
        load_tasks(_jsonl(tmp_path, "rb.jsonl", REBENCH))
    (inst,) = load_tasks(_jsonl(tmp_path, "rb2.jsonl", {**REBENCH, **SWEB_EVAL}))
    assert inst.image == "swerebench/sweb.eval.x86_64.oemof_1776_tespy-653:latest"
    assert inst.extra["install_config"]["test_cmd"] == "pytest -rA"
    named = {**REBENCH, **SWEB_EVAL, "docker_image": "swerebench/sweb.eval.x86_64.oemof_1776_tespy-653:v2"}
    assert load_tasks(_jsonl(tmp_path, "rb3.jsonl", named))[0].image.endswith(":v2")
    other = {
        **REBENCH,
        **SWEB_EVAL,
        "install_config": {**REBENCH["install_config"], "test_cmd": "tox -e py311"},
    }
    with pytest.raises(ConfigError, match=r"rb4\.jsonl:1: field 'install_config' is not honoured.*test_cmd"):
        load_tasks(_jsonl(tmp_path, "rb4.jsonl", other))


def test_bad_input_names_file_record_and_field(tmp_path):
    p = _jsonl(tmp_path, "t.jsonl", {**VERIFIED_5}, {**VERIFIED_5, "instance_id": "x__y-1", "repo": ""})
    with pytest.raises(ConfigError, match=r"t\.jsonl:2: missing field 'repo'"):
        load_tasks(p)
    p = tmp_path / "l.json"
    p.write_text(json.dumps([VERIFIED_5, {**VERIFIED_5, "instance_id": "x__y-1", "FAIL_TO_PASS": 3}]))
    with pytest.raises(ConfigError, match=r"l\.json\[1\]: field 'FAIL_TO_PASS' must be a list"):
        load_tasks(p)
    with pytest.raises(ConfigError, match="unknown task source 'nope'"):
        load_tasks(p, kind="nope")


def test_detect_by_shape_and_force(tmp_path):
    suite = tmp_path / "suite"
    suite.mkdir()
    _jsonl(suite, "tasks.jsonl", VERIFIED_5)
    harbor = tmp_path / "h" / "hello"
    (harbor / "tests").mkdir(parents=True)
    (harbor / "environment").mkdir()
    (harbor / "task.toml").write_text("[verifier]\ntimeout_sec = 30\n")
    (harbor / "instruction.md").write_text("say hello\n")
    (harbor / "tests" / "test.sh").write_text("#!/bin/bash\necho 1 > /logs/verifier/reward.txt\n")
    (harbor / "environment" / "Dockerfile").write_text("FROM debian:bookworm\nWORKDIR /app\n")
    assert detect(suite) == "synth" and detect("swerl-mini") == "synth"
    assert detect(harbor) == "harbor" and detect(harbor.parent) == "harbor"
    assert detect(tmp_path / "x.jsonl") == "swebench" and detect("owner/dataset") == "swebench"
    assert load_tasks(suite / "tasks.jsonl") == load_tasks(suite)  # the same records either way
    with pytest.raises(ConfigError, match="not a Harbor task folder"):
        load_tasks(suite, kind="harbor")
    assert {"harbor", "synth", "swebench", "swe-gym", "swebench-pro", "r2e-gym"} <= set(kinds())
    with pytest.raises(ConfigError, match="is not a Harbor task folder, a suite directory"):
        detect(tmp_path / "nothing-here")


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "swerl", *args], capture_output=True, text=True, env=os.environ
    )


def test_cli_source_flag_and_errors(tmp_path):
    p = _jsonl(tmp_path, "gym.jsonl", {**GYM, **SWEB_EVAL})
    r = _cli("tasks", "list", str(p), "--source", "swe-gym", "--json")
    assert r.returncode == 0, r.stderr
    assert [row["image"] for row in json.loads(r.stdout)] == [
        "xingyaoww/sweb.eval.x86_64.getmoto_s_moto-5752:latest"
    ]
    r = _cli("tasks", "list", str(_jsonl(tmp_path, "pro.jsonl", PRO)))
    assert r.returncode == 2 and "pro.jsonl:1: missing field 'eval_script'" in r.stderr
    r2e = _jsonl(tmp_path, "r2e.jsonl", {**R2E, **SWEB_EVAL})
    r = _cli("tasks", "list", str(r2e), "--json")
    assert r.returncode == 2 and "field 'expected_output_json' is not honoured" in r.stderr
    r = _cli("tasks", "list", str(r2e), "--accept-deviation", "expected_output_json", "--json")
    assert r.returncode == 0, r.stderr
    r = _cli(
        "tasks", "export", "swerl-mini", "--task", "swerl__textkit-1", "--out", str(tmp_path / "h"), "--json"
    )
    assert r.returncode == 0, r.stderr
    (folder,) = json.loads(r.stdout)["folders"]
    assert (Path(folder) / "task.toml").is_file() and (Path(folder) / "tests" / "test.sh").is_file()
