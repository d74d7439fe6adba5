"""Check a suite: every gold patch resolves and the untouched repo does not.

A task whose gold patch fails (or whose bug is not caught by its tests) would hand
out wrong rewards, so a suite is validated before training on it.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from swerl.errors import InfraError
from swerl.grading import GradeStatus, docker_factory, evaluate, grade, judge
from swerl.grading.grade import SandboxFactory
from swerl.tasks.instance import Instance


@dataclass
class ValidationRow:
    instance_id: str
    gold: str
    """Status of the gold patch; must be resolved."""
    no_patch: str
    """Status of the repo as it is (tests run, no patch); must not be resolved."""
    seconds: float
    detail: str = ""

    @property
    def ok(self) -> bool:
        return self.gold == GradeStatus.RESOLVED.value and self.no_patch == GradeStatus.UNRESOLVED.value


def _no_patch_status(inst: Instance, factory: SandboxFactory, timeout: float) -> str:
    # grade() short-circuits an empty patch; here the tests really run on the bare repo
    try:
        ev = evaluate(inst, "", factory, timeout)
    except InfraError:
        return GradeStatus.INFRA_ERROR.value
    return judge(inst, "", ev.log)[0].value


def validate_harbor(inst: Instance, factory: SandboxFactory) -> ValidationRow:
    """Harbor's oracle: solution/solve.sh earns the full reward (graded in its own sandbox and, as
    SWEEnv grades by default, strict: its workdir change in a fresh one); nothing done does not."""
    from swerl.grading.harbor import oracle

    t = time.monotonic()
    official, strict, empty = oracle(inst, factory)
    gold = official.status.value
    if official.resolved and not strict.resolved:
        gold = f"{strict.status.value} (strict)"
    rewards = f"rewards: solution {official.reward}, strict {strict.reward}, empty {empty.reward}"
    errors = "; ".join(e.splitlines()[0] for e in (official.error, strict.error, empty.error) if e)
    if official.resolved and not strict.resolved:
        errors = "the solution's effect lives outside the workdir: grade this task with grading='official'"
    return ValidationRow(
        inst.instance_id, gold, empty.status.value, time.monotonic() - t, f"{rewards}; {errors}".rstrip("; ")
    )


def validate_one(inst: Instance, factory: SandboxFactory, timeout: float = 600.0) -> ValidationRow:
    if inst.graded_by_harbor:
        return validate_harbor(inst, factory)
    g = grade(inst, inst.patch, sandbox_factory=factory, timeout=timeout)
    detail = g.error or (f"failing: {', '.join(g.failed_tests)}" if g.failed_tests else "")
    return ValidationRow(
        inst.instance_id,
        g.status.value,
        _no_patch_status(inst, factory, timeout),
        g.timings.get("total", 0.0),
        detail,
    )


def validate_suite(
    instances: list[Instance],
    *,
    sandbox_factory: SandboxFactory | None = None,
    max_workers: int = 2,
    out: Callable[[str], None] | None = print,
) -> list[ValidationRow]:
    """Validate every instance, print a table; ``count_mismatches(rows)`` is the exit code."""
    factory = sandbox_factory or docker_factory(600.0)
    with ThreadPoolExecutor(max_workers=max(1, max_workers)) as pool:
        rows = list(pool.map(lambda i: validate_one(i, factory), instances))
    if out:
        out(format_table(rows))
    return rows


def count_mismatches(rows: list[ValidationRow]) -> int:
    return sum(not r.ok for r in rows)


def format_table(rows: list[ValidationRow]) -> str:
    header = ["instance_id", "gold", "no patch", "s", "ok", "detail"]
    cells = [header] + [
        [r.instance_id, r.gold, r.no_patch, f"{r.seconds:.2f}", "ok" if r.ok else "MISMATCH", r.detail[:160]]
        for r in rows
    ]
    widths = [max(len(c[i]) for c in cells) for i in range(len(header))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in cells]
    lines.insert(1, "-" * len(lines[0]))
    lines.append(f"{len(rows)} tasks, {count_mismatches(rows)} mismatches")
    return "\n".join(lines)
