"""SWE-bench resolution of a patch: swebench's TestSpec, log parsers and report logic."""

from swerl.grading.grade import docker_factory, evaluate, grade, grade_many, judge
from swerl.grading.integrity import GradingMode, Integrity
from swerl.grading.result import GradeResult, GradeStatus

__all__ = [
    "GradeResult",
    "GradeStatus",
    "GradingMode",
    "Integrity",
    "docker_factory",
    "evaluate",
    "grade",
    "grade_many",
    "judge",
]
