"""Grade a Harbor task: place ``tests/`` in the sandbox, run ``tests/test.sh``, read the reward.

As Harbor's verifier does (harbor 0.26, ``harbor/verifier/verifier.py``): stale reward files are
removed, ``tests/`` is copied to ``/tests``, ``test.sh`` runs with ``[verifier].env`` and its output
goes to ``/logs/verifier/test-stdout.txt``; the reward is ``/logs/verifier/reward.json`` (a flat
object of named numbers) if present, else ``reward.txt`` (one number). The reward is kept as the
verifier wrote it, partial credit included. A verifier that writes no reward, an unparsable or
non-finite one, or that outlives its timeout is an infrastructure error (reward None), never 0.

Where it runs: ``official`` grades in the agent's own sandbox after the agent finished (Harbor's
semantics: whatever the agent did anywhere in the container counts). ``strict``, and any grade
without the agent's sandbox (``swerl eval``), starts a fresh sandbox of the task image and applies
the agent's change (the diff of the task's workdir), so only what the agent changed there counts.
"""

from __future__ import annotations

import base64
import json
import logging
import math
import os
import shlex
import time
from collections.abc import Callable

from swerl.errors import ConfigError, InfraError, SandboxError
from swerl.grading.integrity import GradingMode
from swerl.grading.result import GradeResult, GradeStatus
from swerl.sandbox.base import Sandbox
from swerl.tasks.harbor_fields import accepted, refuse, resolve_env
from swerl.tasks.harbor_settings import prepare, role_user, same_user, where
from swerl.tasks.instance import Instance

log = logging.getLogger(__name__)

VERIFIER_DIR = "/logs/verifier"
REWARD_TXT = f"{VERIFIER_DIR}/reward.txt"
REWARD_JSON = f"{VERIFIER_DIR}/reward.json"
TEST_STDOUT = f"{VERIFIER_DIR}/test-stdout.txt"
TESTS_DIR = "/tests"
SOLUTION_DIR = "/solution"
PATCH_FILE = "/tmp/swerl-agent.patch"
FULL_REWARD = 1.0
"""A reward at or above this is ``resolved`` (the oracle must reach it)."""


def put_tree(sb: Sandbox, target: str, files: dict[str, str]) -> None:
    """Write {relative path: base64} under ``target`` (scripts executable)."""
    q = shlex.quote(target)
    r = sb.execute(f"mkdir -p {q} && find {q} -mindepth 1 -delete", cwd="/")
    if not r.ok:
        raise SandboxError(f"cannot empty {target} in the sandbox: {r.output[-300:]}")
    for rel, data in files.items():
        mode = 0o755 if rel.endswith(".sh") else 0o644
        path = f"{target}/{rel}"
        if "/" in rel:
            sb.execute(f"mkdir -p {shlex.quote(path.rsplit('/', 1)[0])}", cwd="/")
        sb.write_file(path, base64.b64decode(data), mode)


def solution_command(task: Instance) -> str:
    """One bash command that lays out ``solution/`` at /solution and runs solve.sh (Harbor's oracle)."""
    files = task.harbor.get("solution") or {}
    if "solve.sh" not in files:
        raise ConfigError(
            f"{task.harbor.get('task_dir', task.instance_id)}: missing solution/solve.sh (the oracle)"
        )
    lines = [f"mkdir -p {SOLUTION_DIR} && find {SOLUTION_DIR} -mindepth 1 -delete"]
    for rel, data in files.items():
        path = shlex.quote(f"{SOLUTION_DIR}/{rel}")
        lines.append(f"mkdir -p $(dirname {path}) && echo {data} | base64 -d > {path}")
    env = " ".join(f"{k}={shlex.quote(v)}" for k, v in solution_env(task).items())
    lines.append(f"chmod +x {SOLUTION_DIR}/solve.sh && {env + ' ' if env else ''}{SOLUTION_DIR}/solve.sh")
    return " && ".join(lines)


def solution_env(task: Instance) -> dict[str, str]:
    """``[solution].env``, templates resolved from this process's environment (as Harbor does)."""
    return resolve_env(
        dict(task.harbor.get("solution_env") or {}), where(task), "solution.env", dict(os.environ)
    )


def parse_rewards(name: str, text: str) -> dict[str, float]:
    """Harbor's reading: reward.json is a flat object of numbers, reward.txt one number."""
    if not text.strip():
        raise InfraError(f"the verifier wrote an empty {name}")
    if name.endswith(".json"):
        try:
            data = json.loads(text)
        except json.JSONDecodeError as e:
            raise InfraError(f"the verifier's {name} is not JSON: {e}") from None
        values = data if isinstance(data, dict) else {"reward": data}
    else:
        try:
            values = {"reward": float(text.strip())}
        except ValueError:
            raise InfraError(f"the verifier's {name} is not a number: {text.strip()[:80]!r}") from None
    out = {}
    for key, value in values.items():
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise InfraError(
                f"the verifier's {name} holds a non-numeric or non-finite reward {key}={value!r}"
            )
        out[str(key)] = float(value)
    return out


def scalar_reward(rewards: dict[str, float]) -> float:
    """The episode's reward: ``reward`` (Harbor's one-dimensional convention) or the only value."""
    if "reward" in rewards:
        return rewards["reward"]
    if len(rewards) == 1:
        return next(iter(rewards.values()))
    raise InfraError(f"reward.json has several rewards ({', '.join(rewards)}) and none named 'reward'")


def run_verifier(sb: Sandbox, task: Instance, timeout: float | None = None) -> tuple[dict[str, float], str]:
    """Run the task's verifier in ``sb`` as it is now; -> (rewards, test output). InfraError when no reward."""
    spec = task.harbor
    timeout = timeout or float(spec.get("verifier_timeout") or 600.0)
    r = sb.execute(f"rm -f {REWARD_TXT} {REWARD_JSON} && mkdir -p {VERIFIER_DIR}", cwd="/")
    if not r.ok:
        raise SandboxError(f"cannot prepare {VERIFIER_DIR}: {r.output[-300:]}")
    put_tree(sb, TESTS_DIR, spec.get("tests") or {})
    run = sb.execute(
        f"{TESTS_DIR}/test.sh > {TEST_STDOUT} 2>&1",
        cwd=task.workdir,
        timeout=timeout,
        env=resolve_env(dict(spec.get("verifier_env") or {}), where(task), "verifier.env", dict(os.environ)),
    )
    output = sb.execute(f"cat {TEST_STDOUT} 2>/dev/null | tail -c 200000", cwd="/").output
    if run.timed_out:
        raise InfraError(f"the verifier ran past its timeout of {timeout:g} s (no reward)\n{output[-2000:]}")
    for path in (REWARD_JSON, REWARD_TXT):
        r = sb.execute(f"test -f {path} && cat {path}", cwd="/")
        if r.ok:
            return parse_rewards(path.rsplit("/", 1)[-1], r.output), output
    raise InfraError(
        f"the verifier wrote no reward ({REWARD_TXT} or {REWARD_JSON}); test.sh exited {run.returncode}\n"
        f"{output[-2000:]}"
    )


def apply_change(sb: Sandbox, task: Instance, patch: str) -> tuple[bool, str]:
    """Apply the agent's diff in a fresh sandbox's workdir: ``git apply``, then ``patch`` as fallback."""
    base = sb.execute("git rev-parse HEAD", cwd=task.workdir)
    if not base.ok:
        raise SandboxError(
            f"{task.image}: {task.workdir} is not the git repository swerl built: {base.output[-300:]}"
        )
    if task.base_commit not in ("HEAD", base.output.strip()):
        raise SandboxError(
            f"{task.image} starts at {base.output.strip()[:12]}, not at the episode's base {task.base_commit[:12]}: "
            "the image changed since the episode ran"
        )
    if not patch.strip():
        return True, ""
    sb.write_file(PATCH_FILE, patch.encode())
    out = ""
    for cmd in (f"git apply --whitespace=nowarn {PATCH_FILE}", f"patch --batch --fuzz=5 -p1 -i {PATCH_FILE}"):
        r = sb.execute(cmd, cwd=task.workdir)
        out += f"$ {cmd}\n{r.output}"
        if r.ok:
            return True, out
        sb.execute("git checkout -- . && git clean -fdq", cwd=task.workdir)
    return False, out


def grade_harbor(
    task: Instance,
    patch: str | None,
    *,
    sandbox: Sandbox | None = None,
    sandbox_factory: Callable[[str], Sandbox],
    mode: GradingMode | str = GradingMode.STRICT,
    retries: int = 2,
    timeout: float | None = None,
) -> GradeResult:
    """Grade a Harbor task; ``sandbox`` (official mode) is the agent's own, graded as it is."""
    if not task.graded_by_harbor:
        raise ConfigError(f"{task.instance_id} is not a Harbor task")
    mode = GradingMode.parse(mode)
    t0 = time.monotonic()
    deviations = list(task.harbor.get("deviations") or [])
    if sandbox is not None and mode is GradingMode.OFFICIAL:
        deviations += official_user_deviation(task, getattr(sandbox, "backend", "docker"))
        try:
            rewards, output = run_verifier(sandbox, task, timeout)
        except InfraError as e:
            return _infra(task, mode, [f"attempt 1: {type(e).__name__}: {e}"], t0, deviations)
        return _result(task, mode, rewards, output, 1, t0, deviations)
    errors: list[str] = []
    for attempt in range(1, retries + 2):
        sb = sandbox_factory(task.image)
        try:
            backend_deviations = prepare(sb, task, "verifier")
            deviations = sorted({*deviations, *backend_deviations})
            sb.start()
            applied, apply_output = apply_change(sb, task, patch or "")
            if not applied:
                return GradeResult(
                    task.instance_id, GradeStatus.PATCH_FAILED, log=apply_output, attempts=attempt,
                    error="the agent's change does not apply to a fresh sandbox", mode=mode.value,
                    timings={"total": time.monotonic() - t0}, apply_output=apply_output,
                    deviations=deviations,
                )  # fmt: skip
            rewards, output = run_verifier(sb, task, timeout)
            return _result(task, mode, rewards, output, attempt, t0, deviations)
        except InfraError as e:
            log.warning("grading %s: attempt %d: %s", task.instance_id, attempt, e)
            errors.append(f"attempt {attempt}: {type(e).__name__}: {e}")
        finally:
            sb.close()
    return _infra(task, mode, errors, t0, deviations)


def official_user_deviation(task: Instance, backend: str) -> list[str]:
    """Official grading runs the verifier in the agent's sandbox, as the agent's user: refused
    when the task's verifier runs as another user, unless that deviation was accepted."""
    agent, verifier = role_user(task, "agent"), role_user(task, "verifier")
    if same_user(agent, verifier):
        return []
    why = (
        f"is {verifier!r} but official grading runs test.sh in the agent's sandbox, which runs as "
        f"{agent!r} and does not switch users (strict grading runs it as {verifier!r})"
    )
    if not accepted("verifier.user", tuple(task.harbor.get("accept") or ())):
        raise refuse(where(task), "verifier.user", why, backend)
    return [f"verifier.user: {why} (accepted)"]


def _result(
    task: Instance, mode: GradingMode, rewards: dict, output: str, attempt: int, t0: float,
    deviations: list[str] | None = None,
) -> GradeResult:  # fmt: skip
    try:
        reward = scalar_reward(rewards)
    except InfraError as e:
        return _infra(task, mode, [str(e)], t0, deviations)
    status = GradeStatus.RESOLVED if reward >= FULL_REWARD else GradeStatus.UNRESOLVED
    return GradeResult(
        task.instance_id, status, log=output, attempts=attempt, mode=mode.value,
        timings={"total": time.monotonic() - t0}, score=reward, rewards=rewards,
        deviations=list(deviations or []),
    )  # fmt: skip


def _infra(
    task: Instance, mode: GradingMode, errors: list[str], t0: float, deviations: list[str] | None = None
) -> GradeResult:
    return GradeResult(
        task.instance_id, GradeStatus.INFRA_ERROR, error="\n".join(errors), attempts=len(errors),
        mode=mode.value, timings={"total": time.monotonic() - t0}, deviations=list(deviations or []),
    )  # fmt: skip


def oracle(
    task: Instance, sandbox_factory: Callable[[str], Sandbox]
) -> tuple[GradeResult, GradeResult, GradeResult]:
    """Harbor's oracle check, in both grading modes: -> (solution graded in its own sandbox,
    the solution's workdir change graded strict in a fresh one, nothing done)."""
    spec = task.harbor
    if not spec.get("solution", {}).get("solve.sh"):
        raise ConfigError(f"{spec.get('task_dir', task.instance_id)}: missing solution/solve.sh (the oracle)")
    sb = sandbox_factory(task.image)
    in_place = same_user(role_user(task, "agent"), role_user(task, "verifier"))
    try:
        prepare(sb, task, "agent")  # solve.sh runs as the agent would (Harbor's oracle agent)
        sb.start()
        base = sb.execute("git rev-parse HEAD", cwd=task.workdir)
        if not base.ok:
            raise SandboxError(f"{task.image}: {task.workdir} is not a git repository: {base.output[-300:]}")
        pinned = task if task.base_commit != "HEAD" else _replace_base(task, base.output.strip())
        put_tree(sb, SOLUTION_DIR, spec["solution"])
        timeout = float(spec.get("agent_timeout") or spec.get("verifier_timeout") or 600.0)
        r = sb.execute(
            f"{SOLUTION_DIR}/solve.sh",
            cwd=task.workdir,
            timeout=timeout,
            env=solution_env(task),
        )
        if r.timed_out:
            raise InfraError(f"solution/solve.sh ran past {timeout:g} s")
        diff = sb.execute(
            f"git add -A && git diff --cached --binary {pinned.base_commit}", cwd=task.workdir, timeout=120
        )
        if not diff.ok:
            raise SandboxError(f"cannot read the solution's change: {diff.output[-300:]}")
        official = None
        if in_place:  # else the verifier cannot run in the solution's sandbox: strict only
            official = grade_harbor(
                pinned, diff.output, sandbox=sb, sandbox_factory=sandbox_factory, mode="official"
            )
    except InfraError as e:
        official = _infra(task, GradingMode.OFFICIAL, [f"{type(e).__name__}: {e}"], time.monotonic())
        return official, official, grade_harbor(task, "", sandbox_factory=sandbox_factory, mode="strict")
    finally:
        sb.close()
    strict = grade_harbor(pinned, diff.output, sandbox_factory=sandbox_factory, mode="strict")
    empty = grade_harbor(pinned, "", sandbox_factory=sandbox_factory, mode="strict")
    return official or strict, strict, empty


def _replace_base(task: Instance, base: str) -> Instance:
    import dataclasses

    return dataclasses.replace(task, base_commit=base)
