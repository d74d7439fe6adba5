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


def _in_script(value: Any, script: str) -> bool:
    return isinstance(value, str) and value.strip() in script


def _test_files(value: Any, where: str) -> list[str]:
    files = _literal_list(value, "selected_test_files_to_run", where)
    if not isinstance(files, list) or not all(isinstance(f, str) for f in files):
        raise ConfigError(f"{where}: field 'selected_test_files_to_run' must be a list of paths")
    return files


def _test_cmd(config: Any) -> list[str]:
    cmd = config.get("test_cmd") if isinstance(config, dict) else None
    return [cmd] if isinstance(cmd, str) else [c for c in cmd or [] if isinstance(c, str)]


GRADING_EXTRAS: dict[str, tuple[tuple[str, str, Callable[[Any, dict[str, Any], str], bool]], ...]] = {
    "swebench-pro": (
        ("before_repo_set_cmd", "SWE-bench Pro runs it before the tests; eval_script must contain it",
         lambda v, r, w: not str(v or "").strip() or _in_script(v, r.get("eval_script", ""))),
        ("selected_test_files_to_run", "SWE-bench Pro runs these test files; eval_script must name each",
         lambda v, r, w: all(f in r.get("eval_script", "") for f in _test_files(v, w))),
    ),
    "swe-rebench": (
        ("install_config", "its test_cmd is how SWE-rebench runs the tests; eval_script must contain it",
         lambda v, r, w: all(c.strip() in r.get("eval_script", "") for c in _test_cmd(v))),
    ),
    "r2e-gym": (
        ("expected_output_json", "R2E-Gym grades by comparing each test's outcome with it, swerl by "
         "FAIL_TO_PASS/PASS_TO_PASS from eval_script's log", lambda v, r, w: not v),
    ),
}  # fmt: skip
"""Per family: record fields that decide grading, each with why and a check that swerl's record
uses it; a record failing a check is refused, naming the field, unless the field is accepted."""


def check_grading_extras(
    fam: Family, record: dict[str, Any], where: str, accept: tuple[str, ...] = ()
) -> list[str]:
    """The accepted deviations of ``record``; ConfigError naming the first field swerl would not honour."""
    deviations = []
    for field, why, honoured in GRADING_EXTRAS.get(fam.name, ()):
        if field not in record or honoured(record[field], record, where):
            continue
        if field not in accept and "*" not in accept:
            raise ConfigError(
                f"{where}: field {field!r} is not honoured: {why} ({fam.name} record); fix the record, "
                f"or accept={[field]!r} (--accept-deviation {field}) to grade without it, recorded"
            )
        deviations.append(f"{field}: {why} (accepted)")
    return deviations


def check_arch(image: str, where: str, arch: str) -> None:
    """A SWE-bench image built for another architecture than this host's is refused (it would run
    emulated, or not at all, and its tests may behave differently)."""
    for other in ("x86_64", "arm64"):
        if other != arch and f"sweb.eval.{other}." in image:
            raise ConfigError(f"{where}: field 'image' {image!r} is built for {other}; this host is {arch}")


def family_of(record: dict[str, Any]) -> Family:
    """The family whose marks the record carries (SWE-bench's own when none)."""
    for fam in FAMILIES.values():
        if fam.marks and all(k in record for k in fam.marks):
            return fam
    return FAMILIES["swebench"]


def from_record(
    record: Any,
    where: str,
    family: str | None = None,
    arch: str | None = None,
    gradable: bool = True,
    accept: tuple[str, ...] = (),
) -> Instance:
    """One record of any family as an Instance; ``gradable`` refuses one that cannot be graded,
    or whose family's grading fields swerl would not honour (unless ``accept`` names them)."""
    from swerl.tasks.images import host_arch

    if not isinstance(record, dict):
        raise ConfigError(f"{where}: expected an object, got {type(record).__name__}")
    fam = FAMILIES[family] if family else family_of(record)
    arch = arch or host_arch()
    out = fam.normalise(record, arch, where)
    inst = Instance.from_dict(out, where)
    if gradable and inst.harness == "swebench":
        for name in GRADING_FIELDS:
            if not out.get(name):
                raise ConfigError(
                    f"{where}: missing field {name!r}, which grading needs ({fam.name} record; {fam.note})"
                )
        check_arch(inst.image, where, arch)
        deviations = check_grading_extras(fam, out, where, accept)
        if deviations:
            inst.extra["deviations"] = deviations
    return inst


def load_file(
    path: Path, family: str | None = None, gradable: bool = True, accept: tuple[str, ...] = ()
) -> list[Instance]:
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
            out.append(from_record(record, f"{path}:{lineno}", family, gradable=gradable, accept=accept))
        return unique(out, str(path))
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise ConfigError(f"{path}:{e.lineno}: bad JSON: {e.msg} (column {e.colno})") from None
    records = data if isinstance(data, list) else [data]
    return unique(
        [
            from_record(r, f"{path}[{i}]", family, gradable=gradable, accept=accept)
            for i, r in enumerate(records)
        ],
        str(path),
    )


def load_dataset(
    name: str, split: str, family: str | None = None, accept: tuple[str, ...] = ()
) -> list[Instance]:
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
    return unique(
        [from_record(dict(r), f"{name}[{i}]", family, accept=accept) for i, r in enumerate(ds)], name
    )


@dataclass(frozen=True)
class SwebenchSource:
    name: str = "swebench"

    def recognises(self, spec: str) -> bool:
        path = Path(spec)
        if path.suffix in (".json", ".jsonl"):
            return True
        return path.is_dir() or (spec.count("/") == 1 and not path.exists())  # a dataset dir or Hub name

    def load(
        self, spec: str, split: str = "test", family: str | None = None, accept: tuple[str, ...] = ()
    ) -> list[Instance]:
        path = Path(spec)
        if path.suffix in (".json", ".jsonl"):
            if not path.is_file():
                raise ConfigError(f"{path}: no such file")
            return load_file(path, family, accept=accept)
        return load_dataset(spec, split, family, accept=accept)


SOURCE = SwebenchSource()
