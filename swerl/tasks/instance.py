"""SWE-bench instance records and their loaders.

An ``Instance`` carries SWE-bench's fields plus what swebench 5.x needs to build a
TestSpec (``image``, ``eval_script``, ``log_parser``, ``eval_type``), so the same
record grades with swerl and with the official harness. Loader errors name the
file, line and field, because a task file is user input.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from swerl.errors import ConfigError
from swerl.resources import suites_dir

SUITES_DIR = suites_dir()
"""The bundled suites: the checkout's ``envs/``, or the installed wheel's copy (``swerl.resources``)."""
REQUIRED = ("instance_id", "repo", "base_commit")
TEST_LISTS = ("FAIL_TO_PASS", "PASS_TO_PASS")
HARNESSES = ("swebench", "harbor")


@dataclass
class Instance:
    """One task: a repo at a commit, an issue, a gold patch and the tests that judge it."""

    instance_id: str
    repo: str
    base_commit: str
    patch: str = ""
    test_patch: str = ""
    problem_statement: str = ""
    FAIL_TO_PASS: list[str] = field(default_factory=list)
    PASS_TO_PASS: list[str] = field(default_factory=list)
    version: str = ""
    environment_setup_commit: str = ""
    hints_text: str = ""
    created_at: str = ""
    image: str = ""
    eval_script: str = ""
    log_parser: str = "parse_log_pytest"
    eval_type: str = "pass_and_fail"
    workdir: str = "/testbed"
    """Where the repository (the agent's workspace) is in the image."""
    harness: str = "swebench"
    """How a patch is graded: ``swebench`` (eval_script + log parser) or ``harbor`` (tests/test.sh
    writes a reward; see swerl.grading.harbor)."""
    harbor: dict[str, Any] = field(default_factory=dict)
    """Harbor tasks only: the task folder and its task.toml settings (swerl.tasks.sources.harbor)."""
    extra: dict[str, Any] = field(default_factory=dict)
    """Fields this class does not know (e.g. ``image_assets``), kept so nothing is lost."""

    def __post_init__(self) -> None:
        for name in TEST_LISTS:
            setattr(self, name, _test_list(getattr(self, name), name))
        if self.harness not in HARNESSES:
            raise ConfigError(f"field 'harness' must be one of {', '.join(HARNESSES)}, got {self.harness!r}")
        if not isinstance(self.harbor, dict):
            raise ConfigError("field 'harbor' must be an object")
        if not self.image:
            from swerl.tasks.images import task_image_name

            self.image = task_image_name(self.instance_id)

    @property
    def graded_by_harbor(self) -> bool:
        return self.harness == "harbor"

    @classmethod
    def from_dict(cls, record: dict[str, Any], where: str = "<dict>") -> Instance:
        """Build from a SWE-bench-style dict; ``where`` prefixes error messages."""
        if not isinstance(record, dict):
            raise ConfigError(f"{where}: expected an object, got {type(record).__name__}")
        for name in REQUIRED:
            if not record.get(name):
                raise ConfigError(f"{where}: missing field {name!r}")
        known = {f.name for f in dataclasses.fields(cls)} - {"extra"}
        kwargs: dict[str, Any] = {}
        extra = dict(record.get("extra") or {})
        for key, value in record.items():
            if key == "extra":
                continue
            if key in known:
                kwargs[key] = "" if value is None and key not in TEST_LISTS else value
            else:
                extra[key] = value
        for key, value in kwargs.items():
            if key not in (*TEST_LISTS, "harbor") and not isinstance(value, str):
                raise ConfigError(f"{where}: field {key!r} must be a string, got {type(value).__name__}")
        try:
            return cls(**kwargs, extra=extra)
        except ConfigError as e:
            raise ConfigError(f"{where}: {e}") from None

    def to_dict(self) -> dict[str, Any]:
        """The SWE-bench record (test lists as lists), extra fields merged back."""
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "extra"}
        out["FAIL_TO_PASS"] = list(self.FAIL_TO_PASS)
        out["PASS_TO_PASS"] = list(self.PASS_TO_PASS)
        if self.harness == "swebench":  # SWE-bench's own shape: nothing swerl-only when it is the default
            for name, default in (("workdir", "/testbed"), ("harness", "swebench"), ("harbor", {})):
                if out[name] == default:
                    del out[name]
        return {**out, **self.extra}

    def test_spec(self) -> Any:
        """swebench's own TestSpec for this record (``make_test_spec``, not a copy of it)."""
        from swebench.harness.utils import make_test_spec

        if self.graded_by_harbor:
            raise ConfigError(
                f"instance {self.instance_id}: a Harbor task is graded by its tests/test.sh, not a TestSpec"
            )
        if not self.image or not self.eval_script:
            raise ConfigError(f"instance {self.instance_id}: needs 'image' and 'eval_script' to be graded")
        return make_test_spec(self.to_dict())


def _test_list(value: Any, name: str) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):
        try:
            value = json.loads(value) if value.strip() else []
        except json.JSONDecodeError as e:
            raise ConfigError(f"field {name!r} is not a JSON list: {e}") from None
    if not isinstance(value, (list, tuple)) or not all(isinstance(t, str) for t in value):
        raise ConfigError(f"field {name!r} must be a list of test names")
    return list(value)


def __getattr__(name: str) -> Any:
    if name == "load_instances":  # its old home: loading belongs to swerl.tasks.sources, above this module
        raise AttributeError(
            "swerl.tasks.instance.load_instances is now swerl.tasks.sources.load_tasks (same first argument)"
        )
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def unique(instances: list[Instance], where: str) -> list[Instance]:
    """``instances`` unchanged, or ConfigError naming the first duplicate id."""
    seen: set[str] = set()
    for inst in instances:
        if inst.instance_id in seen:
            raise ConfigError(f"{where}: duplicate instance_id {inst.instance_id!r}")
        seen.add(inst.instance_id)
    return instances


def bundled_suites() -> list[str]:
    """Suite names shipped under ``envs/``."""
    if not SUITES_DIR.is_dir():
        return []
    return sorted(p.parent.name for p in SUITES_DIR.glob("*/tasks.jsonl"))


def select(instances: Sequence[Instance], ids: Iterable[str] | None) -> list[Instance]:
    """The instances named by ``ids`` in that order (all when ``ids`` is None)."""
    if ids is None:
        return list(instances)
    by_id = {i.instance_id: i for i in instances}
    ids = list(ids)
    unknown = [i for i in ids if i not in by_id]
    if unknown:
        raise ConfigError(f"unknown instance id(s): {', '.join(unknown)} (known: {len(by_id)} instances)")
    return [by_id[i] for i in ids]
