"""Grade a patch the way swebench's ``run_instance`` does, in a fresh sandbox.

Same patch-apply fallbacks (imported from the harness), same eval script (from
``make_test_spec``), same log parser and report logic (``get_logs_eval`` /
``get_eval_report``). What differs is the container lifecycle: one cheap
sandbox and one command channel instead of a container per ``docker exec``, no
15 s ``docker stop`` — and infrastructure failures are retried and reported as
such, never scored. ``mode="strict"`` runs the same path with a filter before and
a stricter reading after (see ``swerl.grading.integrity``).
"""

from __future__ import annotations

import logging
import os
import shlex
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

from swerl.errors import ConfigError, ImageMissing, InfraError, SandboxError
from swerl.grading.integrity import (
    STRICT_PREFIX,
    GradingMode,
    Integrity,
    filter_patch,
    infra_paths,
    instance_test_files,
    strict_reading,
)
from swerl.grading.result import GradeResult, GradeStatus
from swerl.sandbox.base import Sandbox, SandboxConfig
from swerl.tasks.history import scrub_history
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
    apply_command: str = ""
    """The harness command that applied the patch (the reverse check's when already applied)."""
    timed_out: bool = False
    timings: dict[str, float] = field(default_factory=dict)
    integrity: Integrity | None = None
    """Strict mode's findings before the run (stripped and restored paths)."""


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


def evaluate(
    instance: Instance,
    patch: str,
    factory: SandboxFactory,
    timeout: float,
    mode: GradingMode | str = GradingMode.OFFICIAL,
) -> Evaluation:
    """Apply ``patch`` (if any) and run the eval script in a fresh sandbox.

    Strict mode first drops the git history past the base commit (the patch's code
    could fetch the fix from it), strips test infrastructure from the patch, resets
    what the applied patch still changed of it, and runs the script without user
    site-packages or a pytest cache. Raises InfraError when the sandbox fails;
    anything the patch causes is data.
    """
    spec = instance.test_spec()
    strict = GradingMode.parse(mode) is GradingMode.STRICT
    integrity = Integrity() if strict else None
    timings: dict[str, float] = {}
    t = time.monotonic()
    sb = factory(spec.image)
    try:
        sb.start()
        timings["start"] = time.monotonic() - t
        t = time.monotonic()
        if integrity is not None:
            scrub_history(sb, CONTAINER_WORKDIR)
            timings["scrub"] = time.monotonic() - t
            t = time.monotonic()
            try:
                patch, integrity.stripped = filter_patch(
                    patch, instance_test_files(instance.test_patch), lambda p: _read_text(sb, p)
                )
            except ConfigError as e:
                return Evaluation(False, apply_output=str(e), timings=timings, integrity=integrity)
            timings["filter"] = time.monotonic() - t
            t = time.monotonic()
        applied, apply_output, apply_command = (True, "", "") if not patch else _apply(sb, patch)
        timings["apply"] = time.monotonic() - t
        if not applied:
            return Evaluation(False, apply_output=apply_output, timings=timings, integrity=integrity)
        if integrity is not None:
            t = time.monotonic()
            integrity.restored = _restore_infra(sb, instance)
            timings["restore"] = time.monotonic() - t
        t = time.monotonic()
        _write(sb, EVAL_SCRIPT_PATH, spec.eval_script.encode())
        command = f"{STRICT_PREFIX if strict else ''}/bin/bash {EVAL_SCRIPT_PATH}"
        r = sb.execute(command, cwd=CONTAINER_WORKDIR, timeout=timeout)
        timings["eval"] = time.monotonic() - t
        text = r.output
        if r.timed_out:  # what run_instance appends, so the log reads the same
            text += f"\n\nTimeout error: {timeout} seconds exceeded."
        return Evaluation(
            True, text, apply_output, apply_command=apply_command, timed_out=r.timed_out,
            timings=timings, integrity=integrity,
        )  # fmt: skip
    finally:
        t = time.monotonic()
        sb.close()
        timings["close"] = time.monotonic() - t


def _read_text(sb: Sandbox, path: str) -> str | None:
    """A file of the repo as it is now (the base commit, before the patch), or None."""
    try:
        return sb.read_file(f"{CONTAINER_WORKDIR}/{path}").decode("utf-8", "replace")
    except (OSError, SandboxError):
        return None


_SPLIT = "//"  # not a path git can print: separates tracked from untracked names


def _restore_infra(sb: Sandbox, instance: Instance) -> list[str]:
    """Reset every test/infrastructure path the applied patch changed (e.g. through a
    symlink, or a fuzzy apply) to the base commit; remove the ones it created."""
    base = shlex.quote(instance.base_commit)
    r = sb.execute(
        f"git diff --name-only --no-renames -z {base} && printf '\\0{_SPLIT}\\0' "
        "&& git ls-files -z --others --exclude-standard",
        cwd=CONTAINER_WORKDIR,
    )
    if not r.ok:
        raise SandboxError(f"cannot list what the patch changed: {r.output[-500:]}")
    changed = [p for p in r.output.split("\0") if p and p != _SPLIT]
    bad = infra_paths(changed, instance_test_files(instance.test_patch))
    if bad:
        loop = (
            f'for p in "$@"; do if git cat-file -e {base}:"$p" 2>/dev/null; '
            f'then git checkout -q {base} -- "$p"; else rm -rf -- "$p"; fi; done'
        )
        r = sb.execute(
            f"bash -c {shlex.quote(loop)} restore {' '.join(map(shlex.quote, bad))}", cwd=CONTAINER_WORKDIR
        )
        if not r.ok:
            raise SandboxError(f"cannot restore test files to the base commit: {r.output[-500:]}")
    return bad


def _write(sb: Sandbox, path: str, data: bytes) -> None:
    try:
        sb.write_file(path, data)
    except OSError as e:  # the patch has not touched anything outside /testbed yet
        raise SandboxError(f"cannot write {path} in the sandbox: {e}") from e


def _apply(sb: Sandbox, patch: str) -> tuple[bool, str, str]:
    """The harness's fallback chain, then its "already applied" reverse check.

    -> (applied, every attempt's output, the command that applied it or "")."""
    _write(sb, CONTAINER_PATCH_FILE, patch.encode())
    out = ""
    for attempt, cmd in enumerate(GIT_APPLY_CMDS):
        if attempt:
            sb.execute(RESET_TREE, cwd=CONTAINER_WORKDIR)
        r = sb.execute(f"{cmd} {CONTAINER_PATCH_FILE}", cwd=CONTAINER_WORKDIR)
        out += f"$ {cmd}\n{r.output}"
        if r.ok:
            return True, out, cmd
    reverse = "git apply --check --reverse"
    r = sb.execute(f"{reverse} {CONTAINER_PATCH_FILE}", cwd=CONTAINER_WORKDIR)
    return r.ok, out, reverse if r.ok else ""


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
    mode: GradingMode | str = GradingMode.OFFICIAL,
) -> GradeResult:
    """Grade ``patch`` for ``instance`` in a fresh sandbox of its image.

    ``mode``: ``official`` is swebench's verdict; ``strict`` is for training (test
    infrastructure stripped, a skip is not a pass, see ``swerl.grading.integrity``),
    its findings in ``GradeResult.integrity``.

    A patch that does not apply is patch_failed, failing tests are unresolved (both
    0.0). An InfraError is retried ``retries`` times, then reported as infra_error
    with reward None. A test run that exceeds ``timeout`` is the patch's doing
    (as in swebench, it is not resolved); a channel that stops answering is infra.
    """
    iid = instance.instance_id
    mode = GradingMode.parse(mode)
    if instance.graded_by_harbor:  # its tests/test.sh, in a fresh sandbox with the patch applied
        from swerl.grading.harbor import grade_harbor

        factory = sandbox_factory or docker_factory(timeout)
        return grade_harbor(instance, patch, sandbox_factory=factory, mode=mode, retries=retries)
    if patch is None or not patch.strip():
        return GradeResult(iid, GradeStatus.EMPTY_PATCH, error="empty patch", mode=mode.value)
    factory = sandbox_factory or docker_factory(timeout)
    errors: list[str] = []
    t0 = time.monotonic()
    for attempt in range(1, retries + 2):
        try:
            ev = evaluate(instance, patch, factory, timeout, mode)
        except InfraError as e:
            log.warning("grading %s: attempt %d: infra error: %s", iid, attempt, e)
            errors.append(f"attempt {attempt}: {type(e).__name__}: {e}")
            if isinstance(e, ImageMissing):  # a retry cannot build the image: say so now
                break
            continue
        if not ev.applied:
            timings = {**ev.timings, "total": time.monotonic() - t0}
            return GradeResult(
                iid, GradeStatus.PATCH_FAILED, log=ev.apply_output, timings=timings,
                error="patch does not apply (every harness fallback failed)", attempts=attempt,
                mode=mode.value, integrity=ev.integrity, apply_output=ev.apply_output,
            )  # fmt: skip
        t = time.monotonic()
        status, status_map, report = judge(instance, patch, ev.log)
        timings = {**ev.timings, "judge": time.monotonic() - t, "total": time.monotonic() - t0}
        if ev.integrity is not None:
            if ev.timed_out:
                ev.integrity.refused.append(f"tests timed out after {timeout:g} s")
            reading = strict_reading(instance.test_spec(), patch, ev.log, status_map, ev.integrity)
            status = GradeStatus.RESOLVED if reading.resolved else GradeStatus.UNRESOLVED
            status_map, report = reading.tests, reading.report
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
            mode=mode.value,
            integrity=ev.integrity,
            apply_command=ev.apply_command,
            apply_output=ev.apply_output,
        )
    return GradeResult(
        iid,
        GradeStatus.INFRA_ERROR,
        timings={"total": time.monotonic() - t0},
        error="\n".join(errors),
        attempts=len(errors),
        mode=mode.value,
    )


def grade_many(
    pairs: Iterable[tuple[Instance, str | None]], max_workers: int = 2, **kwargs: Any
) -> list[GradeResult]:
    """Grade (instance, patch) pairs in threads; results in input order."""
    pairs = list(pairs)
    with ThreadPoolExecutor(max_workers=max(1, max_workers)) as pool:
        return list(pool.map(lambda p: grade(p[0], p[1], **kwargs), pairs))
