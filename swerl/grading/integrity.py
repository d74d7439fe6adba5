"""Strict grading: what it found, and a stricter reading of the result.

The official harness trusts more than a reward for RL should: a pass-to-pass test
that is SKIPPED counts as kept, a missing test passes under ``fail_only``, only
the test patch's own files are reset, and when nothing parses between the output
markers the whole log is parsed. Strict mode is the official code path with an
allowlist before (``swerl.grading.allowlist``), a test run the change cannot
configure (``swerl.grading.channel``) and a stricter reading after
(:func:`strict_reading`); what it reverted or refused is an :class:`Integrity` record.
"""

from __future__ import annotations

import enum
import os
import tempfile
from collections import defaultdict
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from swebench.harness.constants import (
    END_TEST_OUTPUT,
    FAIL_TO_PASS,
    PASS_TO_PASS,
    START_TEST_OUTPUT,
    EvalType,
    TestStatus,
)
from swebench.harness.grading import SUITE_RAN, get_eval_report, parse_test_exit_code
from swebench.harness.log_parsers import PARSER_REGISTRY

from swerl.errors import ConfigError
from swerl.tasks.eval_script import test_files

if TYPE_CHECKING:
    from swerl.grading.channel import Verdict

# Test runner settings for every strict run: no user site-packages (a usercustomize
# or .pth there), no pytest cache (state carried between runs). Prefixed to the
# eval script's command, so any backend gets them.
STRICT_PREFIX = 'PYTHONNOUSERSITE=1 PYTEST_ADDOPTS="${PYTEST_ADDOPTS:+$PYTEST_ADDOPTS }-p no:cacheprovider" '


VERDICT_RUNNER = "strict runner"
"""``Integrity.verdict`` of a pytest run: statuses from the runner's keyed channel."""
VERDICT_FRAMEWORK = "strict runner, pytest from the repository"
"""``Integrity.verdict`` of a pytest run of a repository that holds pytest's own packages (pytest,
pluggy, ...): statuses from the runner's keyed channel, but the change's edits of those packages
ran as the test framework itself (see the README: what strict mode holds there)."""
VERDICT_LOG = "log (the test command is not pytest)"
"""``Integrity.verdict`` of any other test command: statuses read from the log, which the
tested code can print (a trainer may weigh such a reward differently)."""


class GradingMode(str, enum.Enum):
    """``official``: swebench's verdict, unchanged. ``strict``: for training (see module doc)."""

    OFFICIAL = "official"
    STRICT = "strict"

    def __str__(self) -> str:
        return self.value

    @classmethod
    def parse(cls, value: str | GradingMode) -> GradingMode:
        try:
            return cls(value)
        except ValueError:
            raise ConfigError(
                f"grading must be one of {', '.join(m.value for m in cls)}, got {value!r}"
            ) from None


@dataclass
class Integrity:
    """What strict mode reverted from the change or refused in the run (empty: nothing)."""

    reverted: dict[str, str] = field(default_factory=dict)
    """Path (as the file system names it) -> why it went back to the base commit."""
    missing: list[str] = field(default_factory=list)
    """Expected tests with no result between the markers."""
    skipped: list[str] = field(default_factory=list)
    """Expected tests reported SKIPPED, or XFAIL where the strict runner could not vouch that
    the test file declares the expected failure (not a pass in strict mode)."""
    conflicting: list[str] = field(default_factory=list)
    """Expected tests reported with two different statuses (e.g. printed PASSED lines)."""
    refused: list[str] = field(default_factory=list)
    """Why the log as a whole was not trusted (marker count, exit code, nothing parsed)."""
    outside_markers: bool = False
    """The official reading took results from outside the markers (its whole-log fallback)."""
    verdict: str = ""
    """Where the test results came from: :data:`VERDICT_RUNNER` (the strict runner's keyed
    channel) or :data:`VERDICT_LOG` (a test command that is not pytest). Not a finding."""

    @property
    def keyed(self) -> bool:
        """Whether the statuses came from the runner's keyed channel (not from the log)."""
        return self.verdict in (VERDICT_RUNNER, VERDICT_FRAMEWORK)

    @property
    def clean(self) -> bool:
        return not (self.reverted or self.missing or self.skipped or self.conflicting
                    or self.refused or self.outside_markers)  # fmt: skip

    def reasons(self) -> list[str]:
        """One line per finding, for logs and error messages."""
        out = [f"reverted {p!r} ({why})" for p, why in self.reverted.items()]
        for name, tests in (("missing", self.missing), ("skipped", self.skipped),
                            ("conflicting results for", self.conflicting)):  # fmt: skip
            if tests:
                out.append(f"{name} {len(tests)} expected test(s): {', '.join(tests[:5])}")
        if self.outside_markers:
            out.append("the official reading parsed results from outside the test output markers")
        return out + self.refused

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def instance_test_files(test_patch: str) -> list[str]:
    modified, created = test_files(test_patch) if test_patch.strip() else ([], [])
    return modified + created


# --------------------------------------------------------------- the reading
def _status(case: str, sm: dict[str, str]) -> str | None:
    """The status of ``case``: exact id, else (a truncated parametrized id, as swebench
    allows) the one status every id it prefixes agrees on."""
    if case in sm:
        return sm[case]
    if case.count("[") > case.count("]"):
        found = {v for k, v in sm.items() if k.startswith(case)}
        return found.pop() if len(found) == 1 else None
    return None


def _conflicts(sliced: str, parser: Callable, spec: Any, expected: set[str]) -> set[str]:
    """Expected tests that single lines of the output report with different statuses.

    Only lines naming an expected test are parsed on their own, so this stays cheap.
    """
    seen: dict[str, set[str]] = defaultdict(set)
    for line in sliced.splitlines():
        if expected.isdisjoint(line.split()):
            continue
        for test, status in parser(line, spec).items():
            seen[test].add(status)
    return {t for t, s in seen.items() if len(s) > 1}


@dataclass
class StrictReading:
    resolved: bool
    tests: dict[str, str]
    fail_to_pass: dict[str, list[str]]
    pass_to_pass: dict[str, list[str]]
    report: dict[str, Any]


def strict_reading(
    spec: Any,
    patch: str,
    log: str,
    official_tests: dict[str, str],
    integrity: Integrity,
    verdict: Verdict | None = None,
) -> StrictReading:
    """Read ``log`` strictly; findings go into ``integrity``.

    Only the text between exactly one start and one end marker is parsed (no
    whole-log fallback); swebench's own checks (bad codes, exit code against the
    results) still apply to it. Every FAIL_TO_PASS and PASS_TO_PASS test must be
    present and PASSED, and reported so by every line that names it. Under
    ``fail_only`` (parsers that record only failures) presence cannot be required,
    so the test command must exit 0 or its output show that the suite ran
    (swebench's own ``SUITE_RAN`` evidence): a run that never got going is refused.

    With a ``verdict`` from the strict runner (pytest runs), each expected test's
    status is the runner's, presence is required whatever the eval type, the log may
    only disagree for the worse, and the runner's refusals are the grade's.
    """
    parser = PARSER_REGISTRY[spec.log_parser]
    starts, ends = log.count(START_TEST_OUTPUT), log.count(END_TEST_OUTPUT)
    if (starts, ends) != (1, 1) or log.index(START_TEST_OUTPUT) > log.index(END_TEST_OUTPUT):
        integrity.refused.append(
            f"the log holds {starts} start and {ends} end marker(s), not one of each in order"
        )
        sliced = ""
    else:
        sliced = log.split(START_TEST_OUTPUT)[1].split(END_TEST_OUTPUT)[0]
    exit_code = parse_test_exit_code(log)
    exit_line = f"\n>>>>> Test Exit Code: {exit_code}\n" if exit_code is not None else ""
    restricted = f"{START_TEST_OUTPUT}\n{sliced}\n{END_TEST_OUTPUT}{exit_line}"
    with tempfile.NamedTemporaryFile("w", suffix=".log", delete=False, encoding="utf-8") as f:
        f.write(restricted)
    try:
        pred = {"instance_id": spec.instance_id, "model_patch": patch, "model_name_or_path": "swerl"}
        report = get_eval_report(spec, pred, f.name, include_tests_status=True)[spec.instance_id]
    finally:
        os.unlink(f.name)
    logged = parser(sliced, spec) if sliced else {}
    integrity.outside_markers = bool(official_tests) and official_tests != logged
    tests = logged
    if verdict is not None:
        integrity.refused += verdict.refused
        tests = verdict.tests
    if not report["patch_successfully_applied"] and not integrity.refused and not (verdict and verdict.tests):
        integrity.refused.append("no trustworthy test results between the markers")
    fail_only = EvalType(spec.eval_type) is EvalType.FAIL_ONLY and verdict is None
    expected = [*spec.FAIL_TO_PASS, *spec.PASS_TO_PASS]
    conflicting = _conflicts(sliced, parser, spec, set(expected)) if sliced else set()
    lists: dict[str, dict[str, list[str]]] = {}
    for key, cases in ((FAIL_TO_PASS, spec.FAIL_TO_PASS), (PASS_TO_PASS, spec.PASS_TO_PASS)):
        ok, bad = [], []
        for case in cases:
            status = _status(case, tests)
            if status is None:
                integrity.missing.append(case)
            elif status == TestStatus.SKIPPED.value or (status == TestStatus.XFAIL.value and verdict is None):
                integrity.skipped.append(case)
            said = _status(case, logged) if verdict is not None else None
            if said not in (None, TestStatus.PASSED.value) and status == TestStatus.PASSED.value:
                conflicting.add(case)  # the runner says passed, the log says otherwise
            if case in conflicting:
                integrity.conflicting.append(case)
            # the runner says XFAIL only for an expected failure its test file declares (as the
            # harness, a pass: an expected-to-fail PASS_TO_PASS test)
            declared = status == TestStatus.XFAIL.value and verdict is not None
            good = status == TestStatus.PASSED.value or declared or (fail_only and status is None)
            (ok if good and case not in conflicting else bad).append(case)
        lists[key] = {"success": ok, "failure": bad}
    if fail_only and exit_code != 0 and not SUITE_RAN.search(sliced):
        integrity.refused.append(
            f"fail-only grading: the test command exited {exit_code} and its output shows no run of the suite"
        )
    resolved = (
        bool(report["patch_successfully_applied"])
        and not integrity.refused
        and not lists[FAIL_TO_PASS]["failure"]
        and not lists[PASS_TO_PASS]["failure"]
    )
    report = {**report, "resolved": resolved, "tests_status": {**report.get("tests_status", {}), **lists}}
    return StrictReading(resolved, tests, lists[FAIL_TO_PASS], lists[PASS_TO_PASS], report)
