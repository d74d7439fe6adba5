"""One check of both grading modes on any backend: the gold patch resolves; the adversarial
suite's ``conftest-forces-pass`` (a conftest.py that reports every test passed) fools the
official harness, and strict mode reverts it."""

from __future__ import annotations

import json
from collections.abc import Callable

from swerl.tasks.instance import SUITES_DIR

CHEAT_NAME = "conftest-forces-pass"


def cheat_record() -> dict:
    """The suite's recorded attack (its patch, task and both verdicts), not a second copy of it."""
    lines = (SUITES_DIR / "swerl-mini" / "adversarial_patches.jsonl").read_text().splitlines()
    (record,) = [r for r in map(json.loads, lines) if r["name"] == CHEAT_NAME]
    return record


def grades_gold_and_cheat(task, factory: Callable, mode: str) -> None:
    """Grade the gold patch and the cheat with ``factory``'s sandboxes in ``mode``."""
    from swerl.grading import grade

    cheat_rec = cheat_record()
    assert task.instance_id == cheat_rec["instance_id"], "the cheat is recorded on another task"
    gold = grade(task, task.patch, sandbox_factory=factory, mode=mode, retries=0)
    assert gold.status.value == "resolved" and gold.reward == 1.0, gold
    cheat = grade(task, cheat_rec["patch"], sandbox_factory=factory, mode=mode, retries=0)
    if mode == "official":
        assert cheat.status.value == "resolved", cheat
        return
    assert not gold.integrity.reasons(), gold.integrity
    assert cheat.status.value == "unresolved" and cheat.reward == 0.0, cheat
    assert "conftest.py" in cheat.integrity.reverted, cheat.integrity
