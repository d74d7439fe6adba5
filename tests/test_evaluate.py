"""`swerl eval`: predictions files (every mistake a ConfigError naming file, line and field, before
any grading), where grades run (threads unless Ray is asked for), and the logs a run leaves."""

from __future__ import annotations

import contextlib
import io
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from swebench.harness.run_evaluation import GIT_APPLY_CMDS

from swerl.errors import ConfigError
from swerl.evaluate import apply_log_lines, load_predictions, pick_executor, run_eval
from swerl.grading import GradeResult, GradeStatus
from swerl.tasks.sources import load_tasks

_chdir = contextlib.chdir

ROOT = Path(__file__).parents[1]

INSTANCES = load_tasks("swerl-mini")
IDS = [i.instance_id for i in INSTANCES]


def pred(iid: str = IDS[0], **kw) -> dict:
    return {"instance_id": iid, "model_name_or_path": "m", "model_patch": "", **kw}


def test_json_list_jsonl_and_id_map_all_load(tmp_path):
    records = [pred(IDS[0]), pred(IDS[1], model_patch=None)]
    (tmp_path / "p.json").write_text(json.dumps(records, indent=2))
    (tmp_path / "p.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    (tmp_path / "map.json").write_text(json.dumps({r["instance_id"]: r for r in records}))
    for name in ("p.json", "p.jsonl", "map.json"):
        got = load_predictions(tmp_path / name, INSTANCES)
        assert [p.instance_id for p in got] == IDS[:2]
    assert load_predictions(tmp_path / "p.json", INSTANCES)[1].where.endswith(
        "p.json:7"
    )  # the line its "{" is on


@pytest.mark.parametrize(
    ("name", "text", "message"),
    [
        ("p.jsonl", json.dumps(pred()) + "\n{oops\n", r"p\.jsonl:2: bad JSON"),
        ("p.json", "[\n" + json.dumps(pred()) + ",\n", r"p\.json:3: bad JSON"),
        (
            "p.jsonl",
            json.dumps({"instance_id": IDS[0], "model_patch": ""}),
            r":1: missing field 'model_name_or_path'",
        ),
        (
            "p.jsonl",
            "\n\n" + json.dumps(pred("nope__x-1")),
            r"p\.jsonl:3: field 'instance_id': unknown instance 'nope__x-1': not in --tasks swerl-mini"
            r" \(12: .*\); pass the suite or task file that holds it with --tasks",
        ),
        ("p.json", json.dumps(pred()) + "\n{oops\n", r"p\.json:2: bad JSON: .* \(read as JSONL"),
        (
            "p.json",
            json.dumps([pred(), pred(model_patch=3)], indent=1),
            r"p\.json:7: field 'model_patch' must be a string or null",
        ),
        (
            "p.jsonl",
            json.dumps(pred()) + "\n" + json.dumps(pred()),
            r":2: field 'instance_id': .* predicted twice \(first at .*:1\)",
        ),
        ("p.jsonl", '"just a string"\n', r":1: a prediction must be an object"),
        ("p.json", '{"a": 1}', r"must be an object"),
        ("p.jsonl", "\n", r"no predictions"),
    ],
)
def test_bad_predictions_name_file_line_and_field(tmp_path, name, text, message):
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(ConfigError, match=message) as err:
        load_predictions(path, INSTANCES, "swerl-mini")
    assert str(path) in str(err.value)


@pytest.mark.parametrize("lines", [1, 2])
def test_jsonl_in_a_file_named_json_loads(tmp_path, lines):
    """The harness's own examples name JSONL files .json: read them, one prediction per line."""
    path = tmp_path / "preds.json"
    path.write_text("".join(json.dumps(pred(iid)) + "\n" for iid in IDS[:lines]))
    got = load_predictions(path, INSTANCES)
    assert [(p.instance_id, p.where) for p in got] == [(IDS[n], f"{path}:{n + 1}") for n in range(lines)]


def test_missing_file(tmp_path):
    with pytest.raises(ConfigError, match="no such predictions file"):
        load_predictions(tmp_path / "none.jsonl", INSTANCES)


def test_executor_is_threads_unless_a_cluster_is_named(monkeypatch):
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    if "ray" in sys.modules:
        monkeypatch.setattr(sys.modules["ray"], "is_initialized", lambda: False)
    assert pick_executor() == "threads"
    assert pick_executor("auto", "127.0.0.1:6379") == "ray"
    assert pick_executor("ray") == "ray"
    monkeypatch.setenv("RAY_ADDRESS", "127.0.0.1:6379")
    assert (pick_executor(), pick_executor("threads")) == ("ray", "threads")
    with pytest.raises(ConfigError, match="unknown executor 'dask'"):
        pick_executor("dask")


def test_run_instance_log_names_the_apply_command_like_the_harness():
    def result(status: GradeStatus, cmd: str) -> GradeResult:
        return GradeResult("x", status, log="error: patch failed", apply_command=cmd, apply_output="ok\n")

    assert apply_log_lines(result(GradeStatus.RESOLVED, "git apply --verbose --3way")) == [
        "Failed to apply patch to container: git apply --verbose",
        "Patch applied with: git apply --verbose --3way",
        ">>>>> Applied Patch:\nok\n",
    ]
    lines = apply_log_lines(result(GradeStatus.UNRESOLVED, "git apply --check --reverse"))
    every = [f"Failed to apply patch to container: {c}" for c in GIT_APPLY_CMDS]
    assert lines == [*every, ">>>>> Applied Patch: verified already applied"]
    lines = apply_log_lines(result(GradeStatus.PATCH_FAILED, ""))
    assert lines == [*every, ">>>>> Patch Apply Failed:\nerror: patch failed"]
    assert apply_log_lines(result(GradeStatus.EMPTY_PATCH, "")) == []


# ------------------------------------------------------ grading, end to end
SUITE = {i.instance_id: i for i in INSTANCES}
GOLD2 = ["swerl__textkit-1", "swerl__intervals-3"]

EVAL_IN_A_FRESH_PROCESS = """
import json, sys
from swerl.cli import main
rc = main(sys.argv[1:])
print(json.dumps({"rc": rc, "ray_imported": "ray" in sys.modules}))
"""


def _eval(cwd: Path, *args: str) -> tuple[dict, dict]:
    """``swerl eval ARGS --json`` in a fresh Python: (its --json output, rc and whether Ray was imported)."""
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    r = subprocess.run(
        [sys.executable, "-c", EVAL_IN_A_FRESH_PROCESS, "eval", *args, "--output-dir", ".", "--json"],
        cwd=cwd, env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    out, _, last = r.stdout.rstrip().rpartition("\n")
    return json.loads(out), json.loads(last)


def _gold(path: Path, ids: list[str]) -> Path:
    path.write_text("".join(json.dumps(pred(i, model_patch=SUITE[i].patch)) + "\n" for i in ids))
    return path


def test_small_file_grades_in_process_without_ray_and_rerun_keeps_statuses(task_images, tmp_path):
    _gold(tmp_path / "preds.jsonl", GOLD2)
    data, proc = _eval(tmp_path, "preds.jsonl", "--run-id", "r1")
    assert proc == {"rc": 0, "ray_imported": False}  # no Ray started, not even imported
    assert data["statuses"] == dict.fromkeys(sorted(GOLD2), "resolved")
    assert data["report"]["resolved_ids"] == sorted(GOLD2) and data["skipped"] == []
    log = (tmp_path / "logs/run_evaluation/r1/m" / GOLD2[0] / "run_instance.log").read_text()
    assert "Patch applied with: git apply --verbose\n>>>>> Applied Patch:\n" in log
    assert "Failed to apply patch" not in log  # the first command applied it
    # A rerun keeps both, and --json says what they are, not just that they were kept.
    again, proc = _eval(tmp_path, "preds.jsonl", "--run-id", "r1")
    assert proc["ray_imported"] is False
    assert again["statuses"] == data["statuses"] and again["skipped"] == sorted(GOLD2)


def test_eval_reuses_the_ray_this_process_joined(task_images, ray_session, tmp_path):
    import ray

    assert ray.is_initialized()
    lines: list[str] = []
    run = run_eval(
        _gold(tmp_path / "p.jsonl", GOLD2[:1]), INSTANCES, run_id="ray1", out=tmp_path, progress=lines.append
    )
    assert run.statuses == {GOLD2[0]: "resolved"}
    assert "run id ray1: official grading of 1 prediction(s) on 2 Ray worker(s)" in lines


def test_bad_file_fails_before_any_grading_is_announced(tmp_path):
    (tmp_path / "p.jsonl").write_text(json.dumps(pred("nope__x-1")) + "\n")
    lines: list[str] = []
    with pytest.raises(ConfigError, match="--tasks"):
        run_eval(tmp_path / "p.jsonl", INSTANCES, run_id="x", out=tmp_path, progress=lines.append)
    assert lines == [] and not (tmp_path / "logs").exists()


# ------------------------------------------------------------ a busy Docker host
CHURN_LABEL = "swerl.test.churn"


class Churn:
    """Keeps ``size`` stopped containers alive, always creating one and removing the oldest,
    so any listing of the host's containers races with removals (as on a shared host)."""

    def __init__(self, client, image: str, tag: str, size: int = 24):
        self.client, self.image, self.tag, self.size = client, image, tag, size
        self.stop, self.removed = threading.Event(), 0
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        api, alive = self.client.api, []
        while not self.stop.is_set():
            alive.append(api.create_container(self.image, "true", labels={CHURN_LABEL: self.tag})["Id"])
            if len(alive) > self.size:
                api.remove_container(alive.pop(0), force=True)
                self.removed += 1

    def __enter__(self) -> Churn:
        self.thread.start()
        while self.removed < 3 and self.thread.is_alive():  # the pool is full and turning over
            time.sleep(0.05)
        return self

    def __exit__(self, *exc) -> None:
        self.stop.set()
        self.thread.join(60)
        for c in self.client.api.containers(all=True, filters={"label": f"{CHURN_LABEL}={self.tag}"}):
            self.client.api.remove_container(c["Id"], force=True)


def test_the_report_is_written_while_other_containers_come_and_go(
    base_image, docker_client, run_id, tmp_path
):
    """swebench's own listing of the host's containers fails under this churn; swerl's report never does."""
    from docker.errors import NotFound
    from swebench.harness.reporting import make_run_report

    from swerl.evaluate import make_report

    preds_file = tmp_path / "p.jsonl"
    preds_file.write_text("".join(json.dumps(pred(i)) + "\n" for i in IDS[:2]))  # empty patches: no grading
    preds = load_predictions(preds_file, INSTANCES)
    with Churn(docker_client, base_image, run_id) as churn:
        raw_failures = 0
        for _ in range(40):  # the harness's own call with the host's client: the race is real
            try:
                with contextlib.redirect_stdout(io.StringIO()), _chdir(tmp_path):
                    make_run_report({p.instance_id: p.to_dict() for p in preds}, [], "raw", docker_client)
            except NotFound:
                raw_failures += 1
                if raw_failures == 2:
                    break
        for n in range(10):
            path, report, printed = make_report(tmp_path, preds, INSTANCES, f"churn{n}", docker_client)
            assert report["empty_patch_instances"] == 2 and "Unstopped containers: 0" in printed
            assert path == tmp_path / f"m.churn{n}.json"
        assert churn.thread.is_alive() and churn.removed > 10
    assert raw_failures == 2, "the churn never raced swebench's listing: this test proves nothing"


def test_leftovers_are_counted_among_the_runs_own_containers(base_image, docker_client, tmp_path):
    from swerl.evaluate import RunScopedDocker
    from swerl.sandbox.base import RUN_LABEL

    rid = f"scoped-{os.getpid()}"
    mine = docker_client.api.create_container(base_image, "true", name=f"{rid}-left", labels={RUN_LABEL: rid})
    other = docker_client.api.create_container(base_image, "true", name=f"x{rid}-other")
    try:
        scoped = RunScopedDocker(docker_client, rid)
        assert [c.name for c in scoped.containers.list(all=True)] == [f"{rid}-left"]
        assert f"{base_image}" in {t for i in scoped.images.list(all=True) for t in i.tags}
    finally:
        for c in (mine, other):
            docker_client.api.remove_container(c["Id"], force=True)


def test_grading_both_finishes_the_strict_half_when_the_official_half_fails(task_images, tmp_path):
    """The official report cannot be written (its file name is taken by a directory): strict still runs."""
    _gold(tmp_path / "preds.jsonl", GOLD2[:1])
    (tmp_path / "m.b2.json").mkdir()
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    r = subprocess.run(
        [sys.executable, "-m", "swerl.cli", "eval", "preds.jsonl", "--run-id", "b2", "--grading", "both",
         "--output-dir", ".", "--json"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert r.returncode == 1, r.stderr
    assert "official grading failed: IsADirectoryError" in r.stderr
    data = json.loads(r.stdout)
    assert "IsADirectoryError" in data["official"]["error"]
    assert data["strict"]["statuses"] == {GOLD2[0]: "resolved"}
    assert json.loads((tmp_path / "m.b2-strict.json").read_text())["resolved_ids"] == GOLD2[:1]
