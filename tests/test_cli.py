"""The command line, run for real."""

from __future__ import annotations

import dataclasses
import json
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from swerl.cli import main
from swerl.episode import JsonlSink
from swerl.tasks.sources import load_tasks

SUITE = {i.instance_id: i for i in load_tasks("swerl-mini")}


def run_cli(
    *args: str, input: str | None = None, cwd: str | Path | None = None
) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "swerl.cli", *args],
        capture_output=True,
        text=True,
        timeout=300,
        input=input,
        cwd=cwd,
    )


def test_help_everywhere():
    for args in (
        ["--help"],
        ["images", "build-base", "--help"],
        ["reap", "--help"],
        ["tasks", "list", "--help"],
        ["tasks", "build-images", "--help"],
        ["tasks", "validate", "--help"],
        ["rollout", "--help"],
        ["eval", "--help"],
        ["sandbox", "shell", "--help"],
        ["replay", "--help"],
        ["report", "--help"],
        ["demo", "--help"],
        ["cluster", "--help"],
    ):
        r = run_cli(*args)
        assert r.returncode == 0 and "usage" in r.stdout, (args, r.stderr)
    assert run_cli("eval").returncode == 2  # argparse: missing PREDICTIONS


# ------------------------------------------------------------------- tasks
@pytest.fixture(scope="module")
def two_tasks(tmp_path_factory) -> Path:
    """A task file holding two of the bundled tasks: `tasks ...` takes files as well as suite names."""
    path = tmp_path_factory.mktemp("tasks") / "two.jsonl"
    ids = ["swerl__textkit-1", "swerl__intervals-2"]
    path.write_text("".join(json.dumps(SUITE[i].to_dict()) + "\n" for i in ids))
    return path


def test_tasks_list(two_tasks):
    r = run_cli("tasks", "list", "swerl-mini", "--json")
    assert r.returncode == 0, r.stderr
    assert sorted(row["instance_id"] for row in json.loads(r.stdout)) == sorted(SUITE)
    r = run_cli("tasks", "list", str(two_tasks))
    assert r.returncode == 0 and "swerl__intervals-2" in r.stdout and "swerl__tinyconf-1" not in r.stdout


def test_tasks_build_images_is_cached(task_images, two_tasks):
    r = run_cli("tasks", "build-images", str(two_tasks), "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["images"] == {
        i: SUITE[i].image for i in ("swerl__textkit-1", "swerl__intervals-2")
    }


def test_tasks_validate(task_images, two_tasks, tmp_path):
    r = run_cli("tasks", "validate", str(two_tasks))
    assert r.returncode == 0, r.stdout + r.stderr
    # A task whose "gold" patch is really the empty one does not validate: exit 1.
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps(SUITE["swerl__textkit-1"].to_dict() | {"patch": ""}) + "\n")
    assert run_cli("tasks", "validate", str(bad)).returncode == 1


def test_unknown_suite_is_a_usage_error():
    r = run_cli("tasks", "list", "no-such-suite")
    assert r.returncode == 2 and "no-such-suite" in r.stderr


def test_build_base_is_cached(base_image):
    r = run_cli("images", "build-base", "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["image"] == base_image


def test_demo_runs_commands_in_a_sandbox(base_image):
    r = run_cli("demo")
    assert r.returncode == 0, r.stderr
    assert "git version" in r.stdout and "per command" in r.stdout


def test_reap_reports_what_it_removed(base_image, docker_client):
    from swerl.sandbox.base import SandboxConfig
    from swerl.sandbox.docker import DockerSandbox

    # a run's own sandbox, one of an actor of the run and one of an integration's episode
    # runner (RUN-a1, RUN-<episode>-a1), and another run's whose id only starts the same
    ids = ["test-cli-reap", "test-cli-reap-a1", "test-cli-reap-0c1d2e3f-a1", "test-cli-reaper"]
    sbs = [DockerSandbox(base_image, SandboxConfig(run_id=i)).start() for i in ids]
    try:
        r = run_cli("reap", "--run-id", "test-cli-reap", "--json")
        assert r.returncode == 0 and json.loads(r.stdout) == {"removed": 3}
        r = run_cli("reap", "--run-id", "test-cli-reaper", "--dry-run", "--json")
        assert [c["run_id"] for c in json.loads(r.stdout)["would_remove"]] == ["test-cli-reaper"]
    finally:
        for sb in sbs:
            sb.close()


def test_infra_error_has_its_own_exit_code(monkeypatch, tmp_path, capsys):
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/none.sock")
    assert main(["reap", "--all"]) == 3
    assert "cannot reach the Docker daemon" in capsys.readouterr().err


# -------------------------------------------------------------------- eval
GOLD = ["swerl__textkit-1", "swerl__intervals-3", "swerl__tinyconf-1"]
EMPTY = ["swerl__textkit-2", "swerl__intervals-4"]
WRONG = "swerl__tinyconf-2"  # a plausible wrong fix from the suite: unresolved
BROKEN = "swerl__tinyconf-4"  # a patch that does not apply: the harness counts it an error
MODEL = "org/gold-and-empty"
REPORT_KEYS = {
    "total_instances", "submitted_instances", "completed_instances", "resolved_instances",
    "unresolved_instances", "infra_failure_instances", "ambiguous_failure_instances",
    "empty_patch_instances", "error_instances", "completed_ids", "incomplete_ids", "empty_patch_ids",
    "submitted_ids", "resolved_ids", "unresolved_ids", "infra_failure_ids", "ambiguous_failure_ids",
    "failure_reasons", "error_ids", "schema_version",
    "unstopped_instances", "unstopped_containers", "unremoved_images",  # with a docker client, as the harness
}  # fmt: skip


def predictions() -> list[dict]:
    wrong = next(
        json.loads(line)["patch"]
        for line in (Path(__file__).parents[1] / "envs/swerl-mini/wrong_patches.jsonl")
        .read_text()
        .splitlines()
        if json.loads(line)["instance_id"] == WRONG
    )
    broken = "diff --git a/nope.py b/nope.py\n--- a/nope.py\n+++ b/nope.py\n@@ -1 +1 @@\n-a\n+b\n"
    patches = {i: SUITE[i].patch for i in GOLD} | dict.fromkeys(EMPTY, "") | {WRONG: wrong, BROKEN: broken}
    return [{"instance_id": i, "model_name_or_path": MODEL, "model_patch": p} for i, p in patches.items()]


@pytest.fixture(scope="module")
def eval_run(task_images, tmp_path_factory):
    cwd = tmp_path_factory.mktemp("eval")
    (cwd / "preds.json").write_text(json.dumps(predictions(), indent=2))
    r = run_cli("eval", "preds.json", "--run-id", "t1", "--json", cwd=cwd)
    # nothing in the current directory but runs/: the report and the harness's logs/ go under one
    # directory per run id
    assert sorted(p.name for p in cwd.iterdir()) == ["preds.json", "runs"], r.stderr
    return cwd / "runs" / "eval" / "t1", r


def test_eval_reports_exactly_the_gold_ones_resolved(eval_run):
    out, r = eval_run
    assert r.returncode == 0, r.stderr
    data = json.loads(r.stdout)
    report_file = out / "org__gold-and-empty.t1.json"  # the harness's <model>.<run_id>.json
    assert Path(data["report_file"]) == report_file
    report = json.loads(report_file.read_text())
    assert report == data["report"] and set(report) == REPORT_KEYS
    assert report["resolved_ids"] == sorted(GOLD)
    assert report["empty_patch_ids"] == sorted(EMPTY)
    assert report["unresolved_ids"] == [WRONG] and report["error_ids"] == [BROKEN]
    assert report["incomplete_ids"] == sorted(set(SUITE) - set(GOLD) - set(EMPTY) - {WRONG, BROKEN})
    assert (report["total_instances"], report["submitted_instances"], report["completed_instances"]) == (
        12,
        7,
        4,
    )
    assert report["schema_version"] == 2 and report["unstopped_containers"] == []
    assert data["statuses"][BROKEN] == "patch_failed"  # swerl's finer status, beside the harness's buckets
    logs = out / "logs/run_evaluation/t1/org__gold-and-empty"
    assert sorted(p.name for p in (logs / GOLD[0]).iterdir()) == [
        "patch.diff", "report.json", "run_instance.log", "test_output.txt",
    ]  # fmt: skip
    assert not (logs / BROKEN / "report.json").exists()


def test_eval_logs_and_report_match_swebench_run_instance(eval_run, docker_client, tmp_path, monkeypatch):
    """Regrade one gold instance with the official run_instance beside swerl's other logs; same report."""
    from swebench.harness.run_evaluation import run_instance

    out, _ = eval_run
    ours = json.loads((out / "org__gold-and-empty.t1.json").read_text())
    shutil.copytree(out / "logs", tmp_path / "logs")
    gold_dir = Path("logs/run_evaluation/t1/org__gold-and-empty") / GOLD[0]
    shutil.rmtree(tmp_path / gold_dir)
    monkeypatch.chdir(tmp_path)  # the harness writes and reads its logs relative to the cwd
    preds = {p["instance_id"]: p for p in predictions()}
    try:
        got = run_instance(SUITE[GOLD[0]].test_spec(), preds[GOLD[0]], docker_client, "t1", timeout=600)
    finally:
        for c in docker_client.containers.list(all=True, filters={"name": "t1"}):
            if c.name.startswith("sweb.eval."):
                c.remove(force=True)
    assert got is not None and got[1][GOLD[0]]["resolved"]
    assert json.loads((tmp_path / gold_dir / "report.json").read_text()) == json.loads(
        (out / gold_dir / "report.json").read_text()
    )
    official = json.loads(official_run_report(preds, "t1", docker_client).read_text())
    assert official == ours


def official_run_report(preds: dict, run_id: str, docker_client, tries: int = 5) -> Path:
    """swebench's ``make_run_report`` as it is; it lists every container on the host and then
    inspects each, so a container anybody removes in between raises NotFound (the busy-host race
    swerl's own report step avoids): the reference is taken again, the verdicts are unchanged."""
    import docker
    from swebench.harness.reporting import make_run_report

    for attempt in range(tries):
        try:
            return make_run_report(preds, [i.to_dict() for i in SUITE.values()], run_id, docker_client)
        except docker.errors.NotFound:
            if attempt == tries - 1:
                raise
    raise AssertionError("unreachable")


def test_eval_rerun_skips_graded_and_bad_files_lose_nothing(eval_run):
    out, _ = eval_run
    report_file = out / "org__gold-and-empty.t1.json"
    before = report_file.read_text()
    # As the harness: instances with a report.json are kept, the error one (no report) is graded again.
    cwd = out.parents[2]
    r = run_cli("eval", "preds.json", "--run-id", "t1", cwd=cwd)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("output: runs/eval/t1/ (logs/run_evaluation/t1/ and the report)\n")
    assert (
        "4 instance(s) already graded" in r.stdout
        and f"[  1/1] {BROKEN}: patch_failed" in r.stdout
        and json.loads(report_file.read_text()) == json.loads(before)
    )
    for name, text, message in [
        ("bad.jsonl", json.dumps(predictions()[0]) + "\n{not json\n", "bad.jsonl:2: bad JSON"),
        ("bad.json", json.dumps([{"instance_id": GOLD[0], "model_patch": ""}]), "bad.json:1: missing field 'model_name_or_path'"),
        ("bad2.jsonl", json.dumps(predictions()[0] | {"instance_id": "nope__x-9"}), "bad2.jsonl:1: field 'instance_id': unknown instance 'nope__x-9'"),
    ]:  # fmt: skip
        (cwd / name).write_text(text)
        r = run_cli("eval", name, "--run-id", "t1", cwd=cwd)
        assert r.returncode == 2 and message in r.stderr, r.stderr
        assert r.stderr.startswith("swerl: error: ") and "Traceback" not in r.stderr
    assert report_file.read_text() == before


# ----------------------------------------------------------------- sandbox
def _shell(*args: str, input: str) -> tuple[subprocess.CompletedProcess, int]:
    """``swerl sandbox shell ARGS`` fed ``input``; -> (its result, its pid: the ``swerl.pid``
    label of the sandboxes it made, so other work on the host never counts as its leftovers)."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "swerl.cli", "sandbox", "shell", *args],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    out, err = proc.communicate(input, timeout=300)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err), proc.pid


def _containers_made_by(docker_client, pid: int) -> dict[str, str]:
    """Id -> status of the swerl containers (stopped ones too) a process of this host made."""
    found = docker_client.containers.list(
        all=True,
        filters={"label": ["swerl.owner=swerl", f"swerl.pid={pid}", f"swerl.host={socket.gethostname()}"]},
    )
    return {c.id: c.status for c in found}


def test_sandbox_shell_reads_commands_from_a_pipe(task_images, docker_client):
    script = "cat README.md | head -1\ngit rev-parse HEAD\nfalse\necho $PWD\nexit\necho never\n"
    r, first = _shell("swerl__textkit-1", input=script)
    assert r.returncode == 0, r.stderr
    assert SUITE["swerl__textkit-1"].base_commit in r.stdout
    assert "[exit 1]" in r.stdout and "/testbed" in r.stdout and "never" not in r.stdout
    r, second = _shell("swerl__textkit-1", "--json", input="echo hi\n")
    assert [json.loads(line)["output"] for line in r.stdout.splitlines()] == ["hi\n"]
    left = {**_containers_made_by(docker_client, first), **_containers_made_by(docker_client, second)}
    assert not left, f"the shell's sandboxes were not removed: {left}"
    assert run_cli("sandbox", "shell", "nope__x-1", input="exit\n").returncode == 2


# ------------------------------------------------- rollout -> report, replay
@pytest.fixture(scope="module")
def rollout_run(readme_bash) -> Path:
    """The README's "Looking at a run" block (a 4-episode gold rollout, report, replay), run once per
    session: its run directory."""
    from readme_blocks import block_with

    r, work = readme_bash(block_with("swerl report runs/try"))
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
    return work / "runs" / "try"


def test_report_writes_pngs(rollout_run, tmp_path):
    r = run_cli("report", str(rollout_run), "--output-dir", str(tmp_path), "--json")
    assert r.returncode == 0, r.stderr
    data = json.loads(r.stdout)
    assert data["episodes"] == 4 and data["reward_per_attempt"] == {"0": 1.0, "1": 1.0}
    assert set(data["time_breakdown"]["swerl__textkit-1"]) == {"reset", "steps", "grade"}
    for png in data["plots"]:
        assert Path(png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert run_cli("report", str(tmp_path / "nothing")).returncode == 2


def test_replay_matches_then_finds_the_first_divergence(rollout_run, tmp_path):
    r = run_cli("replay", str(rollout_run / "episodes.jsonl"), "--limit", "2", "--json")
    assert r.returncode == 0, r.stdout + r.stderr
    rows = json.loads(r.stdout)
    assert len(rows) == 2 and all(row["matches"] and row["compared"] >= 2 for row in rows)
    ep = next(JsonlSink.read(rollout_run / "episodes.jsonl"))
    steps = [dataclasses.replace(s) for s in ep.steps]
    steps[0].observation = "something else"
    tampered = tmp_path / "episodes.jsonl"
    tampered.write_text(dataclasses.replace(ep, steps=steps).to_json() + "\n")
    r = run_cli("replay", str(tampered), "--tasks", "swerl-mini")
    assert r.returncode == 1, r.stdout + r.stderr
    assert f"first divergence at step {steps[0].index}" in r.stdout and "something else" in r.stdout


# ----------------------------------------------------------------- configs
CONFIGS = sorted(p.stem for p in (Path(__file__).parents[1] / "configs").glob("*.yaml"))


@pytest.mark.parametrize("name", CONFIGS)
def test_bundled_configs_validate(name):
    from swerl.config import load_config

    load_config(name)


def test_laptop_and_cluster_configs_differ_only_in_the_backend():
    from swerl.config import load_config

    laptop, cluster = load_config("default").model_dump(), load_config("kuberay").model_dump()
    assert [k for k in laptop if laptop[k] != cluster[k]] == ["backend"]
    assert cluster["backend"]["name"] == "kubernetes"


def test_bad_config_file_is_exit_2_naming_key_and_file(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("rollout:\n  attempts: 0\n  num_actorz: 3\n")
    r = run_cli("rollout", str(bad))
    assert r.returncode == 2 and str(bad) in r.stderr
    assert "rollout.attempts" in r.stderr and "rollout.num_actorz" in r.stderr and "Traceback" not in r.stderr
    r = run_cli("rollout", str(tmp_path / "none.yaml"))
    assert r.returncode == 2 and "does not exist" in r.stderr
