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
from pathlib import Path
from typing import Any

from swerl.errors import ConfigError
from swerl.resources import suites_dir

SUITES_DIR = suites_dir()
"""The bundled suites: the checkout's ``envs/``, or the installed wheel's copy (``swerl.resources``)."""
REQUIRED = ("instance_id", "repo", "base_commit")
TEST_LISTS = ("FAIL_TO_PASS", "PASS_TO_PASS")


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
    extra: dict[str, Any] = field(default_factory=dict)
    """Fields this class does not know (e.g. ``image_assets``), kept so nothing is lost."""

    def __post_init__(self) -> None:
        for name in TEST_LISTS:
            setattr(self, name, _test_list(getattr(self, name), name))
        if not self.image:
            from swerl.tasks.images import task_image_name

            self.image = task_image_name(self.instance_id)

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
            if key not in TEST_LISTS and not isinstance(value, str):
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
        return {**out, **self.extra}

    def test_spec(self) -> Any:
        """swebench's own TestSpec for this record (``make_test_spec``, not a copy of it)."""
        from swebench.harness.utils import make_test_spec

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


def load_instances(source: str | Path, split: str = "test") -> list[Instance]:
    """Load instances from a .json/.jsonl file, a bundled suite, or a `datasets` dataset.

    ``source`` is tried in that order: an existing file, a suite name under
    ``envs/`` (``"swerl-mini"``), a local dataset directory or a Hugging Face name.
    """
    path = Path(source)
    if path.is_file():
        return _load_file(path)
    suite = SUITES_DIR / str(source) / "tasks.jsonl"
    if "/" not in str(source) and suite.is_file():
        return _load_file(suite)
    if path.suffix in (".json", ".jsonl"):
        raise ConfigError(f"{path}: no such file")
    if not path.is_dir() and "/" not in str(source):  # Hub names are owner/name; don't ask the network
        raise ConfigError(
            f"{source!r} is not a file, a dataset directory, a Hugging Face name (owner/name) "
            f"or a bundled suite ({', '.join(bundled_suites()) or 'none'})"
        )
    return _load_dataset(str(source), split)


def _load_file(path: Path) -> list[Instance]:
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".jsonl":
        out = []
        for lineno, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as e:
                raise ConfigError(f"{path}:{lineno}: bad JSON: {e.msg} (column {e.colno})") from None
            out.append(Instance.from_dict(record, f"{path}:{lineno}"))
        return _unique(out, str(path))
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise ConfigError(f"{path}:{e.lineno}: bad JSON: {e.msg} (column {e.colno})") from None
    records = data if isinstance(data, list) else [data]
    return _unique([Instance.from_dict(r, f"{path}[{i}]") for i, r in enumerate(records)], str(path))


def _load_dataset(name: str, split: str) -> list[Instance]:
    try:
        import datasets
    except ImportError:
        raise ConfigError(
            f"{name!r} is not a file or a bundled suite ({', '.join(bundled_suites()) or 'none'}); "
            "loading a Hugging Face dataset needs `pip install datasets`"
        ) from None
    try:
        if Path(name).is_dir():
            ds = datasets.load_from_disk(name)
            if isinstance(ds, datasets.DatasetDict):
                ds = ds[split]
        else:
            ds = datasets.load_dataset(name, split=split)
    except Exception as e:
        raise ConfigError(f"cannot load dataset {name!r} (split {split!r}): {e}") from e
    return _unique([Instance.from_dict(dict(r), f"{name}[{i}]") for i, r in enumerate(ds)], name)


def _unique(instances: list[Instance], where: str) -> list[Instance]:
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
