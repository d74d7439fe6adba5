"""`swerl eval`: grade a SWE-bench predictions file in swerl sandboxes, report as the harness does.

Grading calls ``swerl.grading.grade`` per instance, in threads of this process by
default (a small file needs no cluster, and Ray's start costs seconds), or as Ray
tasks when asked or when a cluster is named (``ray_address``, ``RAY_ADDRESS``, or a
Ray this process already joined).
Each finished instance writes the harness's per-instance logs
(``logs/run_evaluation/<run_id>/<model>/<instance_id>/report.json`` and friends)
and the run report is then made by swebench's own ``make_run_report`` from those
logs, so its keys, counts and file name (``<model>.<run_id>.json``) are the
official ones rather than a copy. A rerun with the same run id skips instances
that already have a report.json, as the harness does. ``grading="strict"`` grades
with swerl's strict mode (see swerl.grading.integrity) under its own run id
(``<run_id>-strict``), so the two kinds of report never mix.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import sys
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from docker.errors import DockerException
from swebench.harness.constants import (
    APPLY_PATCH_FAIL,
    APPLY_PATCH_PASS,
    LOG_INSTANCE,
    LOG_REPORT,
    LOG_TEST_OUTPUT,
    RUN_EVALUATION_LOG_DIR,
)
from swebench.harness.run_evaluation import GIT_APPLY_CMDS

from swerl.errors import ConfigError
from swerl.grading import GradeResult, GradeStatus, GradingMode, grade
from swerl.sandbox.base import RUN_LABEL
from swerl.tasks.instance import Instance

PREDICTION_KEYS = ("instance_id", "model_name_or_path", "model_patch")
EXECUTORS = ("auto", "threads", "ray")
"""Where grades run: ``auto`` is Ray only when a cluster is named or already joined, else threads."""


@dataclass
class Prediction:
    instance_id: str
    model_name_or_path: str
    model_patch: str | None
    where: str = ""
    """file:line, for messages."""

    @property
    def log_model(self) -> str:
        """The model's directory name under the run, as the harness spells it."""
        return self.model_name_or_path.replace("/", "__")

    def to_dict(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in PREDICTION_KEYS}


@dataclass
class EvalRun:
    """What one `swerl eval` did: the official report plus swerl's finer statuses."""

    report_file: Path
    report: dict[str, Any]
    statuses: dict[str, str] = field(default_factory=dict)
    skipped: list[str] = field(default_factory=list)
    """Instances that already had a report.json under this run id (not regraded)."""
    wall_seconds: float = 0.0

    @property
    def infra_errors(self) -> int:
        return sum(s == GradeStatus.INFRA_ERROR.value for s in self.statuses.values())

    def to_dict(self) -> dict[str, Any]:
        return {
            "report_file": str(self.report_file),
            "report": self.report,
            "statuses": self.statuses,
            "skipped": self.skipped,
            "wall_seconds": self.wall_seconds,
        }


# ----------------------------------------------------------------- predictions
def _json_records(text: str, path: Path) -> list[tuple[int, Any]]:
    """(line, record) for a JSON list (or an {id: prediction} map, as the harness accepts)."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        if e.msg == "Extra data" and text.lstrip().startswith("{"):
            return _jsonl_records(text, path, " (read as JSONL: one prediction per line)")
        raise ConfigError(f"{path}:{e.lineno}: bad JSON: {e.msg} (column {e.colno})") from None
    if isinstance(data, dict):
        if "instance_id" in data:  # one prediction (a one-line JSONL), not an {id: prediction} map
            return [(text.count("\n", 0, len(text) - len(text.lstrip())) + 1, data)]
        return [(1, v) for v in data.values()]
    if not isinstance(data, list):
        raise ConfigError(f"{path}:1: expected a list of predictions, got {type(data).__name__}")
    # Walk the array once more to learn on which line each element starts.
    decoder, out, pos = json.JSONDecoder(), [], text.index("[") + 1
    for _ in data:
        while text[pos] in " \t\r\n,":
            pos += 1
        record, end = decoder.raw_decode(text, pos)
        out.append((text.count("\n", 0, pos) + 1, record))
        pos = end
    return out


def _jsonl_records(text: str, path: Path, how: str = "") -> list[tuple[int, Any]]:
    out = []
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            out.append((lineno, json.loads(line)))
        except json.JSONDecodeError as e:
            raise ConfigError(f"{path}:{lineno}: bad JSON: {e.msg} (column {e.colno}){how}") from None
    return out


def load_predictions(path: str | Path, instances: list[Instance], tasks: str = "") -> list[Prediction]:
    """Parse and check a predictions file against ``instances``; every error names file:line and field.

    Everything is checked before anything is graded, so a bad file costs nothing.
    ``tasks`` names where ``instances`` came from (``swerl eval --tasks``), for the messages.
    """
    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"{p}: no such predictions file")
    try:
        text = p.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise ConfigError(f"{p}: not UTF-8 text: {e}") from None
    as_json = p.suffix == ".json" or (p.suffix != ".jsonl" and text.lstrip().startswith("["))
    records = _json_records(text, p) if as_json else _jsonl_records(text, p)
    known = {i.instance_id for i in instances}
    seen: dict[str, str] = {}
    out = []
    for lineno, rec in records:
        where = f"{p}:{lineno}"
        if not isinstance(rec, dict):
            raise ConfigError(f"{where}: a prediction must be an object, got {type(rec).__name__}")
        for key in PREDICTION_KEYS:
            if key not in rec:
                raise ConfigError(
                    f"{where}: missing field {key!r} (a prediction needs {', '.join(PREDICTION_KEYS)})"
                )
        iid, model, patch = rec["instance_id"], rec["model_name_or_path"], rec["model_patch"]
        if not isinstance(iid, str) or not iid:
            raise ConfigError(f"{where}: field 'instance_id' must be a non-empty string")
        if not isinstance(model, str) or not model:
            raise ConfigError(f"{where}: field 'model_name_or_path' must be a non-empty string")
        if patch is not None and not isinstance(patch, str):
            raise ConfigError(
                f"{where}: field 'model_patch' must be a string or null, got {type(patch).__name__}"
            )
        if iid not in known:
            source = f"--tasks {tasks}" if tasks else "the tasks"
            raise ConfigError(
                f"{where}: field 'instance_id': unknown instance {iid!r}: not in {source} ({len(known)}: "
                f"{', '.join(sorted(known)[:5])}{', ...' if len(known) > 5 else ''}); "
                "pass the suite or task file that holds it with --tasks"
            )
        if iid in seen:
            raise ConfigError(
                f"{where}: field 'instance_id': {iid!r} is predicted twice (first at {seen[iid]})"
            )
        seen[iid] = where
        out.append(Prediction(iid, model, patch, where))
    if not out:
        raise ConfigError(f"{p}: no predictions in the file")
    return out


# --------------------------------------------------------------------- grading
def mode_run_id(run_id: str, grading: str) -> str:
    """The run id a grading mode's logs and report go under: strict ones apart."""
    return run_id if GradingMode.parse(grading) is GradingMode.OFFICIAL else f"{run_id}-strict"


def pick_executor(executor: str = "auto", ray_address: str | None = None) -> str:
    """``threads`` or ``ray``: ``auto`` takes Ray only for a named cluster (``ray_address``,
    ``RAY_ADDRESS``) or a Ray this process already joined; otherwise grading needs no Ray."""
    if executor not in EXECUTORS:
        raise ConfigError(f"unknown executor {executor!r} (one of {', '.join(EXECUTORS)})")
    if executor != "auto":
        return executor
    ray = sys.modules.get("ray")  # never imported just to ask
    joined = ray is not None and ray.is_initialized()
    return "ray" if ray_address or os.environ.get("RAY_ADDRESS") or joined else "threads"


def _grade_one(
    instance: Instance,
    patch: str | None,
    timeout: float,
    retries: int,
    run_id: str,
    backend: str,
    grading: str = "official",
):
    """One fresh sandbox per grade, labelled with the run id for reaping (a thread or a Ray worker)."""
    from swerl.grading import docker_factory
    from swerl.sandbox import SandboxConfig, make_sandbox

    if backend == "docker":
        factory = docker_factory(timeout, run_id)
    else:
        cfg = SandboxConfig(timeout=timeout, run_id=run_id)

        def factory(image: str):
            return make_sandbox(backend, image, cfg)

    return grade(instance, patch, sandbox_factory=factory, retries=retries, timeout=timeout, mode=grading)


def grade_on_ray(
    pairs: list[tuple[Instance, str | None]],
    *,
    workers: int = 2,
    timeout: float = 1800.0,
    retries: int = 2,
    run_id: str = "eval",
    backend: str = "docker",
    ray_address: str | None = None,
    cpus_per_task: float = 0.25,
    grading: str = "official",
) -> Iterator[tuple[int, GradeResult]]:
    """(index into ``pairs``, result) in completion order, at most ``workers`` in flight."""
    if not pairs:
        return  # nothing to grade: do not start Ray
    import ray

    from swerl.rollout.runner import ensure_ray

    ensure_ray(ray_address)
    remote = ray.remote(_grade_one).options(num_cpus=cpus_per_task, max_retries=1)
    todo = list(enumerate(pairs))[::-1]
    inflight: dict[Any, int] = {}
    while todo or inflight:
        while todo and len(inflight) < max(1, workers):
            i, (inst, patch) = todo.pop()
            inflight[remote.remote(inst, patch, timeout, retries, run_id, backend, grading)] = i
        done, _ = ray.wait(list(inflight), num_returns=1)
        for ref in done:
            i = inflight.pop(ref)
            try:
                result = ray.get(ref)
            except Exception as e:  # the worker died: infra, never a score
                result = GradeResult(
                    pairs[i][0].instance_id, GradeStatus.INFRA_ERROR, error=f"grading task lost: {e}"
                )
            yield i, result


def grade_in_threads(
    pairs: list[tuple[Instance, str | None]],
    *,
    workers: int = 2,
    timeout: float = 1800.0,
    retries: int = 2,
    run_id: str = "eval",
    backend: str = "docker",
    grading: str = "official",
) -> Iterator[tuple[int, GradeResult]]:
    """As ``grade_on_ray``, in ``workers`` threads of this process: no Ray to start."""
    if not pairs:
        return
    with ThreadPoolExecutor(max_workers=max(1, workers), thread_name_prefix="swerl-eval") as pool:
        futures = {
            pool.submit(_grade_one, inst, patch, timeout, retries, run_id, backend, grading): i
            for i, (inst, patch) in enumerate(pairs)
        }
        try:
            for fut in as_completed(futures):
                i = futures[fut]
                try:
                    result = fut.result()
                except Exception as e:  # a bug or a lost daemon: infra, never a score
                    result = GradeResult(
                        pairs[i][0].instance_id, GradeStatus.INFRA_ERROR, error=f"grading failed: {e!r}"
                    )
                yield i, result
        finally:
            pool.shutdown(cancel_futures=True)


# ---------------------------------------------------------------- harness logs
def instance_log_dir(out: Path, run_id: str, pred: Prediction) -> Path:
    return out / RUN_EVALUATION_LOG_DIR / run_id / pred.log_model / pred.instance_id


def write_instance_logs(out: Path, run_id: str, pred: Prediction, result: GradeResult) -> None:
    """The files run_instance leaves behind; report.json only where the harness writes one.

    The harness writes no report.json when the patch does not apply, the tests time
    out or the container fails: those instances are its ``error_ids``.
    """
    d = instance_log_dir(out, run_id, pred)
    d.mkdir(parents=True, exist_ok=True)
    (d / "patch.diff").write_text(pred.model_patch or "")
    lines = [f"swerl grade of {pred.instance_id}: {result.status.value} (attempts {result.attempts})"]
    lines += apply_log_lines(result)
    if result.error:
        lines.append(result.error)
    if result.integrity is not None:
        lines += [f"strict grading: {r}" for r in result.integrity.reasons()] or ["strict grading: clean"]
    lines.append(f"timings: {json.dumps(result.timings)}")
    (d / LOG_INSTANCE).write_text("\n".join(lines) + "\n")
    if result.log and result.status is not GradeStatus.PATCH_FAILED:
        (d / LOG_TEST_OUTPUT).write_text(result.log)
    timed_out = result.error.startswith("tests timed out")
    if result.status in (GradeStatus.RESOLVED, GradeStatus.UNRESOLVED) and result.report and not timed_out:
        tmp = d / f".{LOG_REPORT}.tmp"
        tmp.write_text(json.dumps({pred.instance_id: result.report}, indent=4))
        tmp.replace(d / LOG_REPORT)  # atomic: a crash never leaves a half report that counts as an error


def apply_log_lines(result: GradeResult) -> list[str]:
    """What run_instance logs of the patch apply: each failed command, then the one that applied."""
    cmd = result.apply_command
    if result.status is not GradeStatus.PATCH_FAILED and not cmd:
        return []  # nothing was applied: an empty patch, or the sandbox failed first
    tried = GIT_APPLY_CMDS[: GIT_APPLY_CMDS.index(cmd)] if cmd in GIT_APPLY_CMDS else GIT_APPLY_CMDS
    lines = [f"Failed to apply patch to container: {c}" for c in tried]
    if result.status is GradeStatus.PATCH_FAILED:
        return [*lines, f"{APPLY_PATCH_FAIL}:\n{result.log}"]
    if cmd not in GIT_APPLY_CMDS:  # the harness's reverse check found it applied
        return [*lines, f"{APPLY_PATCH_PASS}: verified already applied"]
    return [*lines, f"Patch applied with: {cmd}", f"{APPLY_PATCH_PASS}:\n{result.apply_output}"]


@contextlib.contextmanager
def _cwd(path: Path) -> Iterator[None]:
    old = Path.cwd()
    os.chdir(path)
    try:
        yield
    finally:
        os.chdir(old)


@dataclass
class _Listed:
    """A container or image as the daemon's listing gives it (no inspect, so it cannot vanish)."""

    name: str = ""
    tags: list[str] = field(default_factory=list)


class _RunContainers:
    def __init__(self, client: Any, run_id: str):
        self._client, self._run_id = client, run_id

    def list(self, all: bool = False, **_: Any) -> list[_Listed]:
        found = self._client.api.containers(all=all, filters={"label": [f"{RUN_LABEL}={self._run_id}"]})
        return [_Listed(name=(c.get("Names") or ["/"])[0].lstrip("/")) for c in found]


class _ListedImages:
    def __init__(self, client: Any):
        self._client = client

    def list(self, all: bool = False, **_: Any) -> list[_Listed]:
        return [_Listed(tags=list(i.get("RepoTags") or [])) for i in self._client.api.images(all=all)]


class RunScopedDocker:
    """The two listings ``make_run_report`` asks a Docker client for, made safe on a busy host.

    docker-py's ``containers.list()`` lists every container on the host and then
    inspects each one; one removed in between (anybody's) raises ``NotFound`` after
    all grading is done. Here containers are only this run's (by the ``swerl.run``
    label the sandboxes carry) and both listings come from one daemon call each,
    with no per-item inspect, so nothing listed can disappear before it is read.
    """

    def __init__(self, client: Any, run_id: str):
        self.containers = _RunContainers(client, run_id)
        self.images = _ListedImages(client)


def make_report(
    out: Path, predictions: list[Prediction], instances: list[Instance], run_id: str, client: Any = None
) -> tuple[Path, dict[str, Any], str]:
    """swebench's make_run_report over the logs in ``out`` -> (report file, report, what it printed).

    With a Docker client, leftovers are counted among this run's own containers
    only (:class:`RunScopedDocker`); if the daemon cannot be asked at all, the
    report is still written, without the leftover counts, and says so.
    """
    from swebench.harness.reporting import make_run_report

    preds = {p.instance_id: p.to_dict() for p in predictions}
    dataset = [i.to_dict() for i in instances]
    printed = io.StringIO()
    scoped = RunScopedDocker(client, run_id) if client is not None else None
    # The harness reads its logs relative to the working directory.
    with _cwd(out), contextlib.redirect_stdout(printed):
        try:
            path = make_run_report(preds, dataset, run_id, scoped)
        except DockerException as e:
            print(f"Leftover containers and images not counted: the Docker daemon failed: {e}")
            path = make_run_report(preds, dataset, run_id, None)
    path = out / path
    return path, json.loads(path.read_text()), printed.getvalue()


# ------------------------------------------------------------------------ run
def kept_status(out: Path, run_id: str, pred: Prediction) -> str:
    """The status of an instance a rerun keeps, read back from its report.json."""
    report = json.loads((instance_log_dir(out, run_id, pred) / LOG_REPORT).read_text())
    entry = report.get(pred.instance_id, {})
    return (GradeStatus.RESOLVED if entry.get("resolved") else GradeStatus.UNRESOLVED).value


def run_eval(
    predictions_path: str | Path,
    instances: list[Instance],
    *,
    run_id: str,
    out: str | Path = ".",
    workers: int = 2,
    timeout: float = 1800.0,
    retries: int = 2,
    backend: str = "docker",
    ray_address: str | None = None,
    docker_client: Any = None,
    progress: Callable[[str], None] = print,
    grading: str = "official",
    executor: str = "auto",
    tasks: str = "",
) -> EvalRun:
    """Validate, grade what is not graded yet under ``run_id``, write logs and the official report.

    ``grading``: ``official`` or ``strict`` (pass ``mode_run_id(run_id, grading)`` to keep them apart).
    ``executor``: ``threads``, ``ray`` or ``auto`` (see ``pick_executor``). ``tasks`` names where
    ``instances`` came from, for messages.
    """
    t0 = time.monotonic()
    out = Path(out).resolve()
    preds = load_predictions(predictions_path, instances, tasks)
    where = pick_executor(executor, ray_address)
    by_id = {i.instance_id: i for i in instances}
    done = [p for p in preds if (instance_log_dir(out, run_id, p) / LOG_REPORT).exists()]
    done_ids = {p.instance_id for p in done}
    if done:
        progress(f"{len(done)} instance(s) already graded under run id {run_id}, kept")
    todo = [p for p in preds if p.instance_id not in done_ids and p.model_patch not in ("", None)]
    statuses = {p.instance_id: GradeStatus.EMPTY_PATCH.value for p in preds if p.model_patch in ("", None)}
    statuses |= {p.instance_id: kept_status(out, run_id, p) for p in done}
    pairs = [(by_id[p.instance_id], p.model_patch) for p in todo]
    options = dict(workers=workers, timeout=timeout, retries=retries, run_id=run_id, backend=backend)
    if where == "ray":
        results = grade_on_ray(pairs, ray_address=ray_address, grading=grading, **options)
        pool = f"{workers} Ray worker(s)" + (f" at {ray_address}" if ray_address else "")
    else:
        results = grade_in_threads(pairs, grading=grading, **options)
        pool = f"{min(workers, len(pairs)) or 1} thread(s)"
    if pairs:
        progress(f"run id {run_id}: {grading} grading of {len(pairs)} prediction(s) on {pool}")
    else:
        progress(f"run id {run_id}: nothing left to grade")
    for n, (i, result) in enumerate(results, 1):
        pred = todo[i]
        write_instance_logs(out, run_id, pred, result)
        statuses[pred.instance_id] = result.status.value
        detail = f" ({result.error.splitlines()[0]})" if result.error else ""
        progress(
            f"[{n:>3}/{len(todo)}] {pred.instance_id}: {result.status.value}{detail} "
            f"({result.timings.get('total', 0.0):.1f} s)"
        )
    path, report, printed = make_report(out, preds, instances, run_id, docker_client)
    for line in printed.splitlines():
        progress(f"Report written to {path}" if line.startswith("Report written to") else line)
    return EvalRun(path, report, dict(sorted(statuses.items())), sorted(done_ids), time.monotonic() - t0)


def default_run_id() -> str:
    return time.strftime("swerl-eval-%Y%m%d-%H%M%S")
