"""Strict grading: what the agent may not touch, and a stricter reading of the log.

The official harness trusts more than a reward for RL should: a pass-to-pass test
that is SKIPPED counts as kept, a missing test passes under ``fail_only``, only
the test patch's own files are reset (a ``conftest.py``, pytest settings or a
``tests/__init__.py`` written by the agent survive), and when nothing parses
between the output markers the whole log is parsed. Strict mode is the official
code path with a filter before (:func:`filter_patch`, :func:`infra_paths`) and a
stricter reading after (:func:`strict_reading`); what it removed or refused is an
:class:`Integrity` record.
"""

from __future__ import annotations

import enum
import fnmatch
import os
import re
import tempfile
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from pathlib import PurePosixPath
from typing import Any

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
from unidiff import PatchSet
from unidiff.errors import UnidiffParseError

from swerl.errors import ConfigError
from swerl.tasks.eval_script import test_files

# Test runner settings for every strict run: no user site-packages (a usercustomize
# or .pth there), no pytest cache (state carried between runs). Prefixed to the
# eval script's command, so any backend gets them.
STRICT_PREFIX = 'PYTHONNOUSERSITE=1 PYTEST_ADDOPTS="${PYTEST_ADDOPTS:+$PYTEST_ADDOPTS }-p no:cacheprovider" '

TEST_DIR = "tests"
"""Always a test directory; ``test``/``testing`` only where the instance keeps tests
(``django/test`` and ``numpy/testing`` are library code)."""
INFRA_NAMES = {
    "conftest.py": "pytest conftest",
    "pytest.ini": "pytest configuration",
    ".pytest.ini": "pytest configuration",
    "pytest.toml": "pytest configuration",
    ".pytest.toml": "pytest configuration",
    "tox.ini": "tox/pytest configuration",
    "sitecustomize.py": "interpreter start-up hook",
    "usercustomize.py": "interpreter start-up hook",
    "entry_points.txt": "plugin entry points",
}
INFRA_GLOBS = {
    "*.pth": "interpreter start-up hook (.pth)",
    "test_*.py": "test file",
    "*_test.py": "test file",
}
# Top-level modules that would shadow the test runner (``python -m pytest`` puts the
# repo root first on sys.path).
RUNNER_MODULES = frozenset(
    {"pytest", "_pytest", "pluggy", "py", "pytest.py", "_pytest.py", "pluggy.py", "py.py"}
)
# Files where only the pytest part is infrastructure: their hunks are filtered one by one.
SECTIONED = frozenset({"setup.cfg", "pyproject.toml", "setup.py"})
_HEADER = re.compile(r"^\s*\[[^\]]+\]\s*$")


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
    """What strict mode removed from a patch or refused in a log (empty: nothing)."""

    stripped: dict[str, str] = field(default_factory=dict)
    """Path -> why its hunks were dropped from the patch before applying it."""
    restored: list[str] = field(default_factory=list)
    """Test/infrastructure paths the applied patch still changed, reset to the base commit."""
    missing: list[str] = field(default_factory=list)
    """Expected tests with no result between the markers."""
    skipped: list[str] = field(default_factory=list)
    """Expected tests reported SKIPPED or XFAIL (not a pass in strict mode)."""
    conflicting: list[str] = field(default_factory=list)
    """Expected tests reported with two different statuses (e.g. printed PASSED lines)."""
    refused: list[str] = field(default_factory=list)
    """Why the log as a whole was not trusted (marker count, exit code, nothing parsed)."""
    outside_markers: bool = False
    """The official reading took results from outside the markers (its whole-log fallback)."""

    @property
    def clean(self) -> bool:
        return not (self.stripped or self.restored or self.missing or self.skipped or self.conflicting
                    or self.refused or self.outside_markers)  # fmt: skip

    def reasons(self) -> list[str]:
        """One line per finding, for logs and error messages."""
        out = [f"stripped {p} ({why})" for p, why in self.stripped.items()]
        out += [f"restored {p} to the base commit" for p in self.restored]
        for name, tests in (("missing", self.missing), ("skipped", self.skipped),
                            ("conflicting results for", self.conflicting)):  # fmt: skip
            if tests:
                out.append(f"{name} {len(tests)} expected test(s): {', '.join(tests[:5])}")
        if self.outside_markers:
            out.append("the official reading parsed results from outside the test output markers")
        return out + self.refused

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


# ---------------------------------------------------------------- the filter
def infra_reason(path: str, instance_tests: Iterable[str] = ()) -> str:
    """Why ``path`` is test or test infrastructure ("" if it is not), by its name alone."""
    p, tests = PurePosixPath(path), list(instance_tests)
    if path in tests:
        return "test file of the instance"
    if p.parts and p.parts[0] in RUNNER_MODULES:
        return "shadows the test runner"
    test_dirs = {PurePosixPath(t).parent for t in tests if "test" in PurePosixPath(t).parent.name}
    if TEST_DIR in p.parts[:-1] or any(d in p.parents for d in test_dirs):
        return "under a test directory"
    if any(part.endswith((".egg-info", ".dist-info")) for part in p.parts[:-1]):
        return "package metadata (plugin entry points)"
    if p.name in INFRA_NAMES:
        return INFRA_NAMES[p.name]
    return next((why for pat, why in INFRA_GLOBS.items() if fnmatch.fnmatch(p.name, pat)), "")


def _hunk_is_pytest(hunk: Any, base_lines: list[str]) -> bool:
    """A hunk that mentions pytest, or changes a line inside a pytest section ([tool:pytest], ...)."""
    start = max(hunk.source_start - 1, 0)
    section = next((ln for ln in reversed(base_lines[:start]) if _HEADER.match(ln)), "")
    for line in hunk:
        if "pytest" in line.value.lower():
            return True
        if _HEADER.match(line.value):
            section = line.value
        if (line.is_added or line.is_removed) and "pytest" in section.lower():
            return True
    return False


def filter_patch(
    patch: str, instance_tests: Iterable[str], read_base: Callable[[str], str | None]
) -> tuple[str, dict[str, str]]:
    """Drop every hunk of ``patch`` that touches tests or test infrastructure.

    Returns (the patch to apply, {path: why it was stripped}). A patch with nothing
    to strip is returned byte for byte. ``read_base(path)`` gives a file's text at
    the base commit (None if absent), needed to know which section a hunk of a
    setup.cfg / pyproject.toml falls in. Raises ConfigError for a patch that cannot
    be parsed: strict mode does not apply what it cannot read.
    """
    try:
        files = PatchSet(patch)
    except UnidiffParseError as e:
        raise ConfigError(f"strict grading cannot parse the patch: {e}") from None
    tests = list(instance_tests)
    kept, stripped = [], {}
    for pf in files:
        paths = {p[2:] if p[:2] in ("a/", "b/") else p for p in (pf.source_file, pf.target_file)} - {
            "/dev/null"
        }
        why = next(filter(None, (infra_reason(p, tests) for p in sorted(paths))), "")
        if why:
            stripped[pf.path] = why
            continue
        if PurePosixPath(pf.path).name in SECTIONED and not pf.is_added_file:
            base_lines = (read_base(pf.path) or "").splitlines()
            dropped = [h for h in pf if _hunk_is_pytest(h, base_lines)]
            if dropped:
                stripped[pf.path] = f"pytest settings ({len(dropped)} of {len(pf)} hunk(s))"
                if len(dropped) == len(pf):
                    continue
                for h in dropped:
                    pf.remove(h)
        elif PurePosixPath(pf.path).name in SECTIONED and any(_hunk_is_pytest(h, []) for h in pf):
            stripped[pf.path] = "new file with pytest settings"
            continue
        kept.append(pf)
    if not stripped:
        return patch, {}
    return "".join(str(pf) for pf in kept), stripped


def infra_paths(changed: Iterable[str], instance_tests: Iterable[str]) -> list[str]:
    """Which changed paths (as the tree sees them after applying) are test infrastructure."""
    tests = list(instance_tests)
    return sorted(p for p in changed if infra_reason(p, tests))


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
    spec: Any, patch: str, log: str, official_tests: dict[str, str], integrity: Integrity
) -> StrictReading:
    """Read ``log`` strictly; findings go into ``integrity``.

    Only the text between exactly one start and one end marker is parsed (no
    whole-log fallback); swebench's own checks (bad codes, exit code against the
    results) still apply to it. Every FAIL_TO_PASS and PASS_TO_PASS test must be
    present and PASSED, and reported so by every line that names it. Under
    ``fail_only`` (parsers that record only failures) presence cannot be required,
    so the test command must exit 0 or its output show that the suite ran
    (swebench's own ``SUITE_RAN`` evidence): a run that never got going is refused.
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
    tests = parser(sliced, spec) if sliced else {}
    integrity.outside_markers = bool(official_tests) and official_tests != tests
    if not report["patch_successfully_applied"] and not integrity.refused:
        integrity.refused.append("no trustworthy test results between the markers")
    fail_only = EvalType(spec.eval_type) is EvalType.FAIL_ONLY
    expected = [*spec.FAIL_TO_PASS, *spec.PASS_TO_PASS]
    conflicting = _conflicts(sliced, parser, spec, set(expected)) if sliced else set()
    lists: dict[str, dict[str, list[str]]] = {}
    for key, cases in ((FAIL_TO_PASS, spec.FAIL_TO_PASS), (PASS_TO_PASS, spec.PASS_TO_PASS)):
        ok, bad = [], []
        for case in cases:
            status = _status(case, tests)
            if status is None:
                integrity.missing.append(case)
            elif status in (TestStatus.SKIPPED.value, TestStatus.XFAIL.value):
                integrity.skipped.append(case)
            if case in conflicting:
                integrity.conflicting.append(case)
            good = status == TestStatus.PASSED.value or (fail_only and status is None)
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
