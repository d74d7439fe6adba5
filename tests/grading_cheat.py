"""One check of both grading modes on any backend: the gold patch resolves; a conftest.py
that reports every test passed fools the official harness, and strict mode reverts it."""

from __future__ import annotations

from collections.abc import Callable

CHEAT_CONFTEST = [
    "import pytest",
    "",
    "",
    "@pytest.hookimpl(hookwrapper=True)",
    "def pytest_runtest_makereport(item, call):",
    "    outcome = yield",
    '    outcome.get_result().outcome = "passed"',
]
CHEAT = "\n".join(
    [
        "diff --git a/conftest.py b/conftest.py",
        "new file mode 100644",
        "--- /dev/null",
        "+++ b/conftest.py",
        f"@@ -0,0 +1,{len(CHEAT_CONFTEST)} @@",
        *(f"+{line}" for line in CHEAT_CONFTEST),
        "",
    ]
)


def grades_gold_and_cheat(task, factory: Callable, mode: str) -> None:
    """Grade the gold patch and the cheat with ``factory``'s sandboxes in ``mode``."""
    from swerl.grading import grade

    gold = grade(task, task.patch, sandbox_factory=factory, mode=mode, retries=0)
    assert gold.status.value == "resolved" and gold.reward == 1.0, gold
    cheat = grade(task, CHEAT, sandbox_factory=factory, mode=mode, retries=0)
    if mode == "official":
        assert cheat.status.value == "resolved", cheat
        return
    assert not gold.integrity.reasons(), gold.integrity
    assert cheat.status.value == "unresolved" and cheat.reward == 0.0, cheat
    assert "conftest.py" in cheat.integrity.reverted, cheat.integrity
