"""What a grade is: a status, a reward, and the evidence behind it."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from swerl.grading.integrity import Integrity


class GradeStatus(str, enum.Enum):
    """Only the first four are rewards; an infra error is never scored."""

    RESOLVED = "resolved"
    UNRESOLVED = "unresolved"
    PATCH_FAILED = "patch_failed"
    EMPTY_PATCH = "empty_patch"
    INFRA_ERROR = "infra_error"

    def __str__(self) -> str:
        return self.value

    @property
    def reward(self) -> float | None:
        if self is GradeStatus.INFRA_ERROR:
            return None
        return 1.0 if self is GradeStatus.RESOLVED else 0.0


@dataclass
class GradeResult:
    """The outcome of grading one patch for one instance.

    ``fail_to_pass`` / ``pass_to_pass`` are swebench's report lists
    (``{"success": [...], "failure": [...]}``); ``tests`` is the parsed status map.
    """

    instance_id: str
    status: GradeStatus
    tests: dict[str, str] = field(default_factory=dict)
    fail_to_pass: dict[str, list[str]] = field(default_factory=lambda: {"success": [], "failure": []})
    pass_to_pass: dict[str, list[str]] = field(default_factory=lambda: {"success": [], "failure": []})
    log: str = ""
    timings: dict[str, float] = field(default_factory=dict)
    error: str = ""
    attempts: int = 0
    report: dict[str, Any] = field(default_factory=dict)
    """swebench's ``get_eval_report`` entry for this instance, as it gave it (strict
    mode: read from the marked test output only, ``resolved`` and the lists strict)."""
    mode: str = "official"
    """``official`` (swebench's verdict) or ``strict`` (see swerl.grading.integrity)."""
    integrity: Integrity | None = None
    """Strict mode only: what it reverted or refused."""
    apply_command: str = ""
    """The harness's ``git apply`` command that applied the patch, as run_instance logs it."""
    apply_output: str = ""
    """Each apply attempt's command and output."""
    score: float | None = None
    """A verifier's own reward (Harbor tasks), kept as written, partial credit included;
    None: the status's 1.0 / 0.0."""
    rewards: dict[str, float] = field(default_factory=dict)
    """Every named reward the verifier wrote (Harbor's reward.json)."""
    deviations: list[str] = field(default_factory=list)
    """Task settings the run did not honour, accepted by the user (``swerl.tasks.harbor_fields``)."""

    @property
    def reward(self) -> float | None:
        if self.score is not None and self.status is not GradeStatus.INFRA_ERROR:
            return self.score
        return self.status.reward

    @property
    def resolved(self) -> bool:
        return self.status is GradeStatus.RESOLVED

    @property
    def failed_tests(self) -> list[str]:
        """Expected tests that did not come out right (F2P then P2P)."""
        return [*self.fail_to_pass["failure"], *self.pass_to_pass["failure"]]

    def to_dict(self) -> dict[str, Any]:
        return {
            "instance_id": self.instance_id,
            "status": self.status.value,
            "reward": self.reward,
            "tests": self.tests,
            "FAIL_TO_PASS": self.fail_to_pass,
            "PASS_TO_PASS": self.pass_to_pass,
            "timings": self.timings,
            "error": self.error,
            "attempts": self.attempts,
            "mode": self.mode,
            "integrity": self.integrity.to_dict() if self.integrity else None,
            "apply_command": self.apply_command,
            "rewards": self.rewards,
            **({"deviations": self.deviations} if self.deviations else {}),
        }
