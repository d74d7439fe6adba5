"""Candidates -> SWE-bench records in swerl's suite layout (``tasks.jsonl`` + ``repos/*.bundle``).

An injected bug becomes a parentless commit holding the buggy tree (so the task
image's history cannot show the fix), kept under ``refs/heads/synth/<id>`` in the
repository's bundle; the gold patch is ``git diff`` from it back to the clean commit.
A mined task keeps its real history up to the parent of the fixing commit.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import tempfile
from pathlib import Path

from swebench.harness.constants import END_TEST_OUTPUT, START_TEST_OUTPUT

from swerl.tasks.eval_script import PYTEST_COMMAND, make_eval_script
from swerl.tasks.instance import Instance
from swerl.tasks.synth.inject import Candidate
from swerl.tasks.synth.repo import GIT_ENV, Repo, git
from swerl.tasks.synth.statement import Writer

WORKDIR = "/testbed"


def test_command(repo: Repo) -> str:
    paths = [p for p in repo.pythonpath if p != "."]
    env = "PYTHONPATH=" + ":".join(f"{WORKDIR}/{p}" for p in paths) + " " if paths else ""
    extra = (
        " " + shlex.join(repo.pytest_args) if repo.pytest_args else ""
    )  # after the repo's config: they win
    return env + PYTEST_COMMAND + extra


def injected_eval_script(base_commit: str, files: list[str], command: str) -> str:
    """The eval script of a task with no test patch: show the diff, run the test files between the markers."""
    lines = [
        "#!/bin/bash",
        "set -uxo pipefail",
        f"cd {WORKDIR}",
        f"git -c core.fileMode=false diff {base_commit}",
        f": '{START_TEST_OUTPUT}'",
        f"{command} {' '.join(map(shlex.quote, files))}",
        f": '{END_TEST_OUTPUT}'",
    ]
    return "\n".join(lines) + "\n"


def _orphan_commit(repo: Repo, path: str, text: str, message: str) -> str:
    """A parentless commit of the repo's head tree with ``path`` replaced by ``text``."""
    env = {**os.environ, **GIT_ENV}
    blob = subprocess.run(["git", "hash-object", "-w", "--stdin"], cwd=repo.path, input=text.encode(), env=env,
                          capture_output=True, check=True).stdout.decode().strip()  # fmt: skip
    mode = git(repo.path, "ls-tree", repo.head, "--", path).split()[0]
    with tempfile.NamedTemporaryFile(prefix="swerl-index-") as idx:
        e = {"GIT_INDEX_FILE": idx.name}
        git(repo.path, "read-tree", repo.head, env=e)
        git(repo.path, "update-index", "--cacheinfo", f"{mode},{blob},{path}", env=e)
        tree = git(repo.path, "write-tree", env=e).strip()
    return git(repo.path, "commit-tree", tree, "-m", message).strip()


def instance_id(repo: Repo, c: Candidate) -> str:
    if c.mutant is not None:
        return f"{repo.slug}.{c.mutant.operator}.{c.mutant.key[:10]}".lower()
    return f"{repo.slug}.mined.{c.base_commit[:10]}".lower()


def to_instance(c: Candidate, writer: Writer | None) -> Instance:
    """The SWE-bench record of a candidate (commits it needs are created in the repo).

    ``writer=None`` leaves the problem statement to :func:`write_statement` (written
    only for the tasks that pass validation: a model call per rejected one is waste).
    """
    repo = c.repo
    iid = instance_id(repo, c)
    if c.mutant is not None:
        m = c.mutant
        clean = (repo.path / m.path).read_text(encoding="utf-8")
        base = _orphan_commit(repo, m.path, m.apply(clean), f"{repo.name}: synthesized task {iid}")
        git(repo.path, "update-ref", f"refs/heads/synth/{iid}", base)
        patch = git(repo.path, "diff", "--no-color", "--no-ext-diff", base, repo.head)
        test_patch = ""
        eval_script = injected_eval_script(base, c.eval_files, test_command(repo))
        meta = {"method": "inject", "operator": m.operator, "function": m.function, "file": m.path}
    else:
        base, patch, test_patch = c.base_commit, c.patch, c.test_patch
        eval_script = make_eval_script(base, test_patch, test_command(repo), c.eval_files)
        meta = {"method": "mine", "commit_message": c.message.strip()[:500]}
    changed = [ln for ln in patch.splitlines() if ln[:1] in "+-" and not ln.startswith(("+++", "---"))]
    meta |= {
        "lines_changed": len(changed),
        "files_changed": patch.count("\ndiff --git ") + patch.startswith("diff --git "),
        "f2p_count": len(c.f2p),
        "p2p_count": len(c.p2p),
        "test_seconds": round(c.seconds, 3),
    }
    inst = Instance(
        instance_id=iid,
        repo=repo.name,
        base_commit=base,
        patch=patch,
        test_patch=test_patch,
        problem_statement="",
        FAIL_TO_PASS=list(c.f2p),
        PASS_TO_PASS=list(c.p2p),
        version=repo.version or "0",
        environment_setup_commit=base,
        created_at="2024-01-01T00:00:00Z",
        eval_script=eval_script,
        extra={"synth": meta},
    )
    if writer is not None:
        write_statement(inst, c, writer)
    return inst


def write_statement(inst: Instance, c: Candidate, writer: Writer) -> None:
    """Set the problem statement and record how it was written (``synth.statement``: mode, model, fallback)."""
    st = writer.write(inst, c)
    inst.problem_statement = st.text
    inst.extra["synth"]["statement"] = st.record()


def write_bundle(repo: Repo, out: Path) -> Path:
    """``out/repos/<owner>__<name>.bundle`` with main and every synthesized task's commit."""
    (out / "repos").mkdir(parents=True, exist_ok=True)
    bundle = out / "repos" / f"{repo.slug}.bundle"
    refs = [r for r in git(repo.path, "for-each-ref", "--format=%(refname)", "refs/heads/").split() if r]
    git(repo.path, "bundle", "create", "-q", str(bundle.resolve()), *refs)
    return bundle


def write_suite(out: Path, instances: list[Instance], report: dict) -> None:
    """tasks.jsonl (swerl's suite, SWE-bench records), swebench.jsonl (only SWE-bench's own fields), report.json."""
    out.mkdir(parents=True, exist_ok=True)
    rows = [i.to_dict() for i in instances]
    (out / "tasks.jsonl").write_text("".join(json.dumps(r, sort_keys=True) + "\n" for r in rows))
    plain = [{k: v for k, v in r.items() if k != "synth"} for r in rows]
    (out / "swebench.jsonl").write_text("".join(json.dumps(r, sort_keys=True) + "\n" for r in plain))
    (out / "report.json").write_text(json.dumps(report, indent=2, sort_keys=True) + "\n")
