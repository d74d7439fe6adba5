"""History mining: commits that change source and tests, where the commit's tests fail at its parent.

For each first-parent commit touching both test files and other files, the diff is
split into the test patch (test files) and the fix (the rest). In one sandbox holding
the repository with its history, the test files run twice at the parent with the test
patch applied and twice at the commit: FAIL_TO_PASS fail in both parent runs and pass
in both commit runs, PASS_TO_PASS pass in all four. The official check later is the third run.
"""

from __future__ import annotations

import logging
import shlex

from swebench.harness.log_parsers import parse_log_pytest

from swerl.errors import InfraError
from swerl.sandbox.base import SandboxConfig
from swerl.tasks.synth.inject import Candidate
from swerl.tasks.synth.repo import Repo, _is_test, git

log = logging.getLogger(__name__)


TEST_DIRS = ("tests", "test", "testing")


def _test_infra(path: str) -> bool:
    """A file the tests' side of a commit holds besides test files: a ``conftest.py``, a file
    under a test directory (helpers, data). It goes into the test patch, as SWE-bench's split
    puts it, never into the fix: strict grading reverts test infrastructure a fix touches, so
    a gold patch holding it would not resolve there."""
    parts = path.split("/")
    return parts[-1] == "conftest.py" or any(p in TEST_DIRS for p in parts[:-1])


def commits(repo: Repo, limit: int | None = None) -> list[tuple[str, str, list[str], list[str], str]]:
    """(commit, parent, files of the test patch, other files, message) of first-parent commits
    changing tests and source; the test patch's files are the tests (run) and their
    infrastructure (:func:`_test_infra`)."""
    out = []
    for line in git(
        repo.path, "rev-list", "--first-parent", "--no-merges", "--parents", repo.head
    ).splitlines():
        parts = line.split()
        if len(parts) != 2:
            continue  # the root commit has no parent to fail at
        commit, parent = parts
        files = [f for f in git(repo.path, "diff", "--name-only", "-z", parent, commit).split("\0") if f]
        tests = [f for f in files if _is_test(f) or _test_infra(f)]
        other = [f for f in files if f not in tests]
        if any(map(_is_test, tests)) and any(f.endswith(".py") for f in other):
            out.append((commit, parent, tests, other, git(repo.path, "log", "-1", "--format=%B", commit)))
        if limit and len(out) >= limit:
            break
    return out


def history_image(repo: Repo, client: object) -> str:
    """The base image plus the repository with its whole history (for mining only, never given to an agent)."""
    import hashlib

    from swerl.tasks.images import _image_exists, build_base_image
    from swerl.tasks.synth.images import _build

    base = build_base_image(client=client)
    tag = f"swerl-synth-history.{repo.slug.lower()}:{repo.head[:16]}"
    if _image_exists(client, tag):
        return tag
    files = []
    for f in sorted(repo.path.rglob("*")):
        if f.is_file():
            files.append((f"testbed/{f.relative_to(repo.path)}", f.read_bytes(), f.stat().st_mode & 0o777))
    digest = hashlib.sha256(base.encode()).hexdigest()[:8]
    _build(client, f'FROM {base}\nCOPY testbed /testbed\nWORKDIR /testbed\nCMD ["bash"]\n', files, tag,
           {"swerl.synth": repo.name, "swerl.synth.base": digest})  # fmt: skip
    return tag


def passing(statuses: dict[str, str], tests: list[str]) -> set[str]:
    """The tests of ``statuses`` (a parsed log) that passed, among the node ids of ``tests``' files
    only: a test that runs pytest inside itself (pytester) shows its inner run's output, whose
    summary lines parse as statuses of tests that are not the repository's (``[100%]``, a
    temporary file's ``test_x.py::test_y``), and no grader can find those in the run's own results."""
    files = set(tests)
    return {t for t, v in statuses.items() if v in ("PASSED", "XFAIL") and t.split("::")[0] in files}


def _statuses(sb: object, command: str, timeout: float) -> tuple[dict[str, str], float]:
    r = sb.execute(command, cwd="/testbed", timeout=timeout)  # type: ignore[attr-defined]
    if r.timed_out:
        return {}, float("inf")
    return parse_log_pytest(r.output, None), r.duration  # type: ignore[arg-type]


def mine(
    repo: Repo, image: str, test_command: str, timeout: float = 300.0, limit: int | None = None
) -> tuple[int, list[Candidate]]:
    """(commits examined, mined candidates) of ``repo``, run in one sandbox of ``image`` (a history image)."""
    from swerl.sandbox import make_sandbox

    found = commits(repo, limit)
    if not found:
        return 0, []
    out = []
    sb = make_sandbox("docker", image, SandboxConfig(timeout=timeout, labels={"swerl.synth": "mine"}))
    try:
        sb.start()
        for commit, parent, tests, _other, message in found:
            test_patch = git(repo.path, "diff", "--no-color", "--no-ext-diff", parent, commit, "--", *tests)
            fix = git(
                repo.path,
                "diff",
                "--no-color",
                "--no-ext-diff",
                parent,
                commit,
                "--",
                ".",
                *[f":(exclude){t}" for t in tests],
            )
            sb.write_file("/tmp/swerl_test.patch", test_patch.encode())
            files = " ".join(shlex.quote(t) for t in tests if _is_test(t))  # (run: the tests only)
            before_cmd = (f"git checkout -qf {parent} && git clean -fdqx && git apply /tmp/swerl_test.patch && "
                          f"{test_command} {files}")  # fmt: skip
            after_cmd = f"git checkout -qf {commit} && git clean -fdqx && {test_command} {files}"
            runs = [_statuses(sb, c, timeout) for c in (before_cmd, before_cmd, after_cmd, after_cmd)]
            if any(s == float("inf") for _, s in runs):
                continue
            b1, b2, a1, a2 = (m for m, _ in runs)
            passed = [passing(m, tests) for m in (b1, b2, a1, a2)]
            f2p = sorted((passed[2] & passed[3]) - passed[0] - passed[1])
            p2p = sorted(set.intersection(*passed))
            if b1 != b2 or a1 != a2 or not f2p:
                continue
            # new test files exist only with the test patch: every test they hold fails at the parent
            out.append(Candidate("mine", repo, f2p, p2p, [t for t in tests if _is_test(t)], {}, None, max(s for _, s in runs[2:]),
                                 parent, fix, test_patch, message))  # fmt: skip
        r = sb.execute(f"git checkout -qf {repo.head}", cwd="/testbed")
        if r.returncode != 0:
            raise InfraError(f"cannot restore {repo.head}: {r.output[-300:]}")
    finally:
        sb.close()
    return len(found), out
