"""The SWE-bench family's records: SWE-bench (Full, Lite, Verified), SWE-bench Pro, SWE-Gym,
SWE-smith, R2E-Gym and SWE-rebench, each from its published field names and image convention.

Every family is normalised to swebench 5.x's instance shape (``image``, ``eval_script``,
``log_parser``, ``eval_type`` beside SWE-bench's fields), which is what swerl and the official
harness grade. Fields a family has and swerl does not use stay in ``Instance.extra``. A record
that lacks what grading needs is refused, the file, record and field named: swerl does not guess
an eval script or a log parser (a wrong guess grades every attempt wrong, silently).

Image conventions (the names the families publish; swerl builds or loads images locally, the
name says which one a task needs):

- SWE-bench: ``sweb.eval.<arch>.<instance id, lowercased>:<tag>`` locally (arch ``x86_64`` or
  ``arm64``), ``swebench/sweb.eval.x86_64.<id, "__" -> "_1776_">:<tag>`` on Docker Hub
  (``swerl.tasks.images.task_image_name`` / ``hub_image_name``, spelled by swebench's ImageSpec);
- SWE-bench Pro: ``jefzda/sweap-images:<dockerhub_tag>``, repository in ``/app``;
- SWE-Gym: ``xingyaoww/sweb.eval.x86_64.<id, "__" -> "_s_">:latest`` (OpenHands' convention);
- SWE-smith: ``image_name`` (``jyangballin/swesmith.x86_64.<owner>_1776_<repo>.<commit8>``) is the
  repository *before* the injected bug and ``patch`` introduces it, so swerl keeps the patch as
  ``extra["bug_patch"]`` (no gold patch) and needs ``image``: an image of the bugged state;
- R2E-Gym: the record's ``docker_image`` (``namanjain12/<repo>_final:<commit>``);
- SWE-rebench: the record's ``docker_image`` when present, else
  ``swerebench/sweb.eval.x86_64.<id, "__" -> "_1776_">:latest``.
"""

from __future__ import annotations

import ast
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from swerl.errors import ConfigError
from swerl.tasks.instance import Instance, unique

GRADING_FIELDS = ("eval_script", "log_parser")
"""What swebench 5.x needs beyond SWE-bench's fields to grade a record (``image`` is derived)."""


def _sweb_image(namespace: str, sep: str) -> Callable[[dict[str, Any], str], str]:
    def image(record: dict[str, Any], arch: str) -> str:
        iid = str(record.get("instance_id", "")).replace("__", sep)
        return f"{namespace}/sweb.eval.{arch}.{iid}:latest".lower()

    return image


def _local_image(record: dict[str, Any], arch: str) -> str:
    from swerl.tasks.images import task_image_name

    return task_image_name(str(record["instance_id"]), arch=arch)


@dataclass(frozen=True)
class Family:
    """One dataset family: how its records are recognised, renamed and given an image."""

    name: str
    marks: tuple[str, ...]
    """Fields only this family's records carry (all present: a record is recognised as one)."""
    rename: tuple[tuple[str, str], ...] = ()
    """(published name, swerl name) pairs."""
    image: Callable[[dict[str, Any], str], str] = _local_image
    """The image when the record names none: (record, arch) -> name."""
    workdir: str = "/testbed"
    note: str = ""
    """Said when a record lacks grading fields: where this family keeps them."""

    def normalise(self, record: dict[str, Any], arch: str, where: str) -> dict[str, Any]:
        out = dict(record)
        for published, ours in self.rename:
            if published in out:
                value = out.pop(published)
                if ours not in out or out[ours] in (None, ""):
                    out[ours] = value
        extra = _FIXUPS.get(self.name)
        if extra is not None:
            out = extra(out, where)
        if not out.get("image") and out.get("instance_id"):
            out["image"] = self.image(out, arch)
        out.setdefault("workdir", self.workdir)
        out.setdefault("extra", {})
        out["extra"] = {**out["extra"], "family": self.name}
        return out


def _literal_list(value: Any, name: str, where: str) -> Any:
    """A list published as a Python literal (``"['a', 'b']"``, as SWE-bench Pro does) or as JSON."""
    if not isinstance(value, str) or not value.strip():
        return value
    try:
        return json.loads(value)
    except json.JSONDecodeError:
        pass
    try:
        out = ast.literal_eval(value)
    except (ValueError, SyntaxError):
        raise ConfigError(f"{where}: field {name!r} is neither a JSON nor a Python list") from None
    if not isinstance(out, list):
        raise ConfigError(f"{where}: field {name!r} must be a list")
    return out


def _pro(record: dict[str, Any], where: str) -> dict[str, Any]:
    for name in ("FAIL_TO_PASS", "PASS_TO_PASS"):
        record[name] = _literal_list(record.get(name), name, where)
    # SWE-bench Pro's prompt is the issue, then the requirements, then the interface
    parts = [record.get("problem_statement") or ""]
    for title, key in (("Requirements", "requirements"), ("Interface", "interface")):
        if record.get(key):
            parts.append(f"{title}:\n{record[key]}")
    record["problem_statement"] = "\n\n".join(p for p in parts if p)
    if record.get("dockerhub_tag") and not record.get("image"):
        record["image"] = f"jefzda/sweap-images:{record['dockerhub_tag']}"
    return record


def _smith(record: dict[str, Any], where: str) -> dict[str, Any]:
    # SWE-smith's `patch` introduces the bug, and its image_name holds the repository without it
    # (its harness checks out the instance's branch): neither is a gold patch nor a starting state.
    if "patch" in record:
        record.setdefault("extra", {})
        record["extra"] = {**record["extra"], "bug_patch": record.pop("patch")}
    if not record.get("image"):
        raise ConfigError(
            f"{where}: missing field 'image': a SWE-smith record's image_name ({record.get('image_name')!r}) "
            "holds the repository before its bug; give the image of the bugged state (image_name with "
            "extra.bug_patch applied) as 'image'"
        )
    return record


def _r2e(record: dict[str, Any], where: str) -> dict[str, Any]:
    commit = record.get("parsed_commit_content")
    if isinstance(commit, str) and commit.strip():
        try:
            commit = json.loads(commit)
        except json.JSONDecodeError as e:
            raise ConfigError(f"{where}: field 'parsed_commit_content' is not JSON: {e}") from None
    old = commit.get("old_commit_hash") if isinstance(commit, dict) else None
    if not record.get("base_commit"):
        if not old:
            raise ConfigError(
                f"{where}: missing field 'parsed_commit_content.old_commit_hash' (R2E-Gym's base commit)"
            )
        record["base_commit"] = old
    if not record.get("instance_id") and record.get("repo_name") and record.get("commit_hash"):
        record["instance_id"] = f"{record['repo_name']}__{str(record['commit_hash'])[:12]}"
    if record.get("repo_name") and not record.get("repo"):
        record["repo"] = record["repo_name"]
    if record.get("docker_image") and not record.get("image"):
        record["image"] = record["docker_image"]
    return record


def _rebench(record: dict[str, Any], where: str) -> dict[str, Any]:
    if record.get("docker_image") and not record.get("image"):
        record["image"] = record["docker_image"]
    return record


_FIXUPS: dict[str, Callable[[dict[str, Any], str], dict[str, Any]]] = {
    "swebench-pro": _pro,
    "swe-smith": _smith,
    "r2e-gym": _r2e,
    "swe-rebench": _rebench,
}

FAMILIES: dict[str, Family] = {
    f.name: f
    for f in (
        Family(
            "swebench-pro",
            marks=("dockerhub_tag",),
            rename=(("fail_to_pass", "FAIL_TO_PASS"), ("pass_to_pass", "PASS_TO_PASS")),
            workdir="/app",
            note="SWE-bench Pro keeps its run script and parser per instance in its harness "
            "repository (run_scripts/<instance_id>/); give them as eval_script and log_parser",
        ),
        Family(
            "swe-smith",
            marks=("image_name",),
            note="SWE-smith grades with its own harness (the repository profile's test command); "
            "give an eval_script and a log_parser",
        ),
        Family(
            "r2e-gym",
            marks=("docker_image", "expected_output_json"),
            note="R2E-Gym grades by running the image's run_tests.sh and comparing with "
            "expected_output_json; give an eval_script and a log_parser",
        ),
        Family(
            "swe-rebench",
            marks=("install_config",),
            image=_sweb_image("swerebench", "_1776_"),
            note="SWE-rebench's harness is a SWE-bench fork that derives the eval script from "
            "install_config; give the script it generates as eval_script",
        ),
        Family(
            "swe-gym",
            marks=(),  # SWE-bench's own fields: only `kind="swe-gym"` selects it
            image=_sweb_image("xingyaoww", "_s_"),
            note="SWE-Gym records carry SWE-bench's fields only; give an eval_script and a log_parser",
        ),
        Family(
            "swebench",
            marks=(),
            note="swebench 5.x datasets carry eval_script, log_parser and image; older records "
            "(swebench < 5) do not, and swebench 5 no longer derives them",
        ),
    )
}


def family_of(record: dict[str, Any]) -> Family:
    """The family whose marks the record carries (SWE-bench's own when none)."""
    for fam in FAMILIES.values():
        if fam.marks and all(k in record for k in fam.marks):
            return fam
    return FAMILIES["swebench"]


def from_record(
    record: Any, where: str, family: str | None = None, arch: str | None = None, gradable: bool = True
) -> Instance:
    """One record of any family as an Instance; ``gradable`` refuses one that cannot be graded."""
    from swerl.tasks.images import host_arch

    if not isinstance(record, dict):
        raise ConfigError(f"{where}: expected an object, got {type(record).__name__}")
    fam = FAMILIES[family] if family else family_of(record)
    out = fam.normalise(record, arch or host_arch(), where)
    inst = Instance.from_dict(out, where)
    if gradable and inst.harness == "swebench":
        for name in GRADING_FIELDS:
            if not out.get(name):
                raise ConfigError(
                    f"{where}: missing field {name!r}, which grading needs ({fam.name} record; {fam.note})"
                )
    return inst


def load_file(path: Path, family: str | None = None, gradable: bool = True) -> list[Instance]:
    """A .json (one record or a list) or .jsonl file; errors name the file, line or index, and field."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as e:
        raise ConfigError(f"{path}: cannot read: {e.strerror}") from None
    if path.suffix == ".jsonl":
        out = []
        for lineno, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as e:
                raise ConfigError(f"{path}:{lineno}: bad JSON: {e.msg} (column {e.colno})") from None
            out.append(from_record(record, f"{path}:{lineno}", family, gradable=gradable))
        return unique(out, str(path))
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise ConfigError(f"{path}:{e.lineno}: bad JSON: {e.msg} (column {e.colno})") from None
    records = data if isinstance(data, list) else [data]
    return unique(
        [from_record(r, f"{path}[{i}]", family, gradable=gradable) for i, r in enumerate(records)], str(path)
    )


def load_dataset(name: str, split: str, family: str | None = None) -> list[Instance]:
    """A ``datasets`` dataset: a ``save_to_disk`` directory or a Hub name (owner/name)."""
    try:
        import datasets
    except ImportError:
        raise ConfigError(f"loading the dataset {name!r} needs `pip install datasets`") from None
    try:
        if Path(name).is_dir():
            ds = datasets.load_from_disk(name)
            if isinstance(ds, datasets.DatasetDict):
                ds = ds[split]
        else:
            ds = datasets.load_dataset(name, split=split)
    except Exception as e:
        raise ConfigError(f"cannot load dataset {name!r} (split {split!r}): {e}") from e
    return unique([from_record(dict(r), f"{name}[{i}]", family) for i, r in enumerate(ds)], name)


@dataclass(frozen=True)
class SwebenchSource:
    name: str = "swebench"

    def recognises(self, spec: str) -> bool:
        path = Path(spec)
        if path.suffix in (".json", ".jsonl"):
            return True
        return path.is_dir() or (spec.count("/") == 1 and not path.exists())  # a dataset dir or Hub name

    def load(self, spec: str, split: str = "test", family: str | None = None) -> list[Instance]:
        path = Path(spec)
        if path.suffix in (".json", ".jsonl"):
            if not path.is_file():
                raise ConfigError(f"{path}: no such file")
            return load_file(path, family)
        return load_dataset(spec, split, family)


SOURCE = SwebenchSource()
