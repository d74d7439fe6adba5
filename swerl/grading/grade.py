"""Grade a patch the way swebench's ``run_instance`` does, in a fresh sandbox.

Same patch-apply fallbacks (imported from the harness), same eval script (from
``make_test_spec``), same log parser and report logic (``get_logs_eval`` /
``get_eval_report``). What differs is the container lifecycle: one cheap
sandbox and one command channel instead of a container per ``docker exec``, no
15 s ``docker stop`` — and infrastructure failures are retried and reported as
such, never scored.
"""

from __future__ import annotations

import logging
import os
import tempfile
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from swebench.harness.constants import CONTAINER_PATCH_FILE, FAIL_TO_PASS, PASS_TO_PASS
from swebench.harness.grading import get_eval_report, get_logs_eval
from swebench.harness.run_evaluation import GIT_APPLY_CMDS
from swebench.image_builder.constants import CONTAINER_WORKDIR

from swerl.errors import InfraError, SandboxError
from swerl.grading.result import GradeResult, GradeStatus
from swerl.sandbox.base import Sandbox, SandboxConfig
from swerl.tasks.instance import Instance

log = logging.getLogger(__name__)

SandboxFactory = Callable[[str], Sandbox]

# run_instance restores a pristine tree between apply attempts with this command
# (inline in the harness, so it cannot be imported).
RESET_TREE = "git checkout -- . ; git clean -fd"
EVAL_SCRIPT_PATH = "/eval.sh"
DEFAULT_TIMEOUT = 1800.0
"""Seconds the eval script may run; swebench's default test timeout."""


@dataclass
class Evaluation:
    """One run of the eval script in one sandbox (no retries, no verdict yet)."""

    applied: bool
    log: str = ""
    apply_output: str = ""
    timed_out: bool = False
    timings: dict[str, float] = field(default_factory=dict)


def docker_factory(timeout: float = DEFAULT_TIMEOUT, run_id: str | None = None) -> SandboxFactory:
    """The default: a fresh DockerSandbox of the instance image, one client shared."""
    from swerl.sandbox.docker import DockerSandbox, connect

    client = None
    cfg = SandboxConfig(timeout=timeout, **({"run_id": run_id} if run_id else {}))

    def make(image: str) -> Sandbox:
        nonlocal client
        client = client or connect()
        return DockerSandbox(image, cfg, client=client)

    return make


def evaluate(instance: Instance, patch: str, factory: SandboxFactory, timeout: float) -> Evaluation:
    """Apply ``patch`` (if any) and run the eval script in a fresh sandbox.

    Raises InfraError when the sandbox fails; anything the patch causes is data.
    """
    spec = instance.test_spec()
    timings: dict[str, float] = {}
    t = time.monotonic()
    sb = factory(spec.image)
    try:
        sb.start()
        timings["start"] = time.monotonic() - t
        t = time.monotonic()
        applied, apply_output = (True, "") if not patch else _apply(sb, patch)
        timings["apply"] = time.monotonic() - t
        if not applied:
            return Evaluation(False, apply_output=apply_output, timings=timings)
        t = time.monotonic()
        _write(sb, EVAL_SCRIPT_PATH, spec.eval_script.encode())
        r = sb.execute(f"/bin/bash {EVAL_SCRIPT_PATH}", cwd=CONTAINER_WORKDIR, timeout=timeout)
        timings["eval"] = time.monotonic() - t
        text = r.output
        if r.timed_out:  # what run_instance appends, so the log reads the same
            text += f"\n\nTimeout error: {timeout} seconds exceeded."
        return Evaluation(True, text, apply_output, r.timed_out, timings)
    finally:
        t = time.monotonic()
        sb.close()
        timings["close"] = time.monotonic() - t


def _write(sb: Sandbox, path: str, data: bytes) -> None:
    try:
        sb.write_file(path, data)
    except OSError as e:  # the patch has not touched anything outside /testbed yet
        raise SandboxError(f"cannot write {path} in the sandbox: {e}") from e


def _apply(sb: Sandbox, patch: str) -> tuple[bool, str]:
    """The harness's fallback chain, then its "already applied" reverse check."""
    _write(sb, CONTAINER_PATCH_FILE, patch.encode())
    out = ""
    for attempt, cmd in enumerate(GIT_APPLY_CMDS):
        if attempt:
            sb.execute(RESET_TREE, cwd=CONTAINER_WORKDIR)
        r = sb.execute(f"{cmd} {CONTAINER_PATCH_FILE}", cwd=CONTAINER_WORKDIR)
        out += f"$ {cmd}\n{r.output}"
        if r.ok:
            return True, out
    r = sb.execute(f"git apply --check --reverse {CONTAINER_PATCH_FILE}", cwd=CONTAINER_WORKDIR)
    return r.ok, out


def judge(instance: Instance, patch: str, text: str) -> tuple[GradeStatus, dict[str, str], dict[str, Any]]:
    """swebench's verdict on a log: (status, parsed status map, report entry)."""
    spec = instance.test_spec()
    with tempfile.NamedTemporaryFile("w", suffix=".log", delete=False, encoding="utf-8") as f:
        f.write(text)
    try:
        status_map, _found = get_logs_eval(spec, f.name)
        pred = {"instance_id": instance.instance_id, "model_patch": patch, "model_name_or_path": "swerl"}
        report = get_eval_report(spec, pred, f.name, include_tests_status=True)[instance.instance_id]
    finally:
        os.unlink(f.name)
    status = GradeStatus.RESOLVED if report["resolved"] else GradeStatus.UNRESOLVED
    return status, status_map, report


def grade(
    instance: Instance,
    patch: str | None,
    *,
    sandbox_factory: SandboxFactory | None = None,
    retries: int = 2,
    timeout: float = DEFAULT_TIMEOUT,
) -> GradeResult:
    """Grade ``patch`` for ``instance`` in a fresh sandbox of its image.

    A patch that does not apply is patch_failed, failing tests are unresolved (both
    0.0). An InfraError is retried ``retries`` times, then reported as infra_error
    with reward None. A test run that exceeds ``timeout`` is the patch's doing
    (as in swebench, it is not resolved); a channel that stops answering is infra.
    """
    iid = instance.instance_id
    if patch is None or not patch.strip():
        return GradeResult(iid, GradeStatus.EMPTY_PATCH, error="empty patch")
    factory = sandbox_factory or docker_factory(timeout)
    errors: list[str] = []
    t0 = time.monotonic()
    for attempt in range(1, retries + 2):
        try:
            ev = evaluate(instance, patch, factory, timeout)
        except InfraError as e:
            log.warning("grading %s: attempt %d: infra error: %s", iid, attempt, e)
            errors.append(f"attempt {attempt}: {type(e).__name__}: {e}")
            continue
        timings = {**ev.timings, "total": time.monotonic() - t0}
        if not ev.applied:
            return GradeResult(
                iid, GradeStatus.PATCH_FAILED, log=ev.apply_output, timings=timings,
                error="patch does not apply (every harness fallback failed)", attempts=attempt,
            )  # fmt: skip
        status, status_map, report = judge(instance, patch, ev.log)
        tests_status = report.get("tests_status", {})
        error = ""
        if ev.timed_out:
            error = f"tests timed out after {timeout:g} s"
        elif not report["patch_successfully_applied"]:
            error = "no parseable test results in the log" + (
                f" ({report['infra_failure_reason']})" if report.get("infra_failure_reason") else ""
            )
        return GradeResult(
            iid,
            status,
            tests=status_map,
            fail_to_pass=tests_status.get(FAIL_TO_PASS, {"success": [], "failure": []}),
            pass_to_pass=tests_status.get(PASS_TO_PASS, {"success": [], "failure": []}),
            log=ev.log,
            timings=timings,
            error=error,
            attempts=attempt,
            report=report,
        )
    return GradeResult(
        iid,
        GradeStatus.INFRA_ERROR,
        timings={"total": time.monotonic() - t0},
        error="\n".join(errors),
        attempts=retries + 1,
    )


def grade_many(
    pairs: Iterable[tuple[Instance, str | None]], max_workers: int = 2, **kwargs: Any
) -> list[GradeResult]:
    """Grade (instance, patch) pairs in threads; results in input order."""
    pairs = list(pairs)
    with ThreadPoolExecutor(max_workers=max(1, max_workers)) as pool:
        return list(pool.map(lambda p: grade(p[0], p[1], **kwargs), pairs))
