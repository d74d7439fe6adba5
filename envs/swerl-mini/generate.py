"""(Re)create the swerl-mini suite: repos as git bundles, then tasks.jsonl.

    python envs/swerl-mini/generate.py            # repos, patches, eval scripts, test lists

Commits get fixed author/committer names and dates, so commit hashes are stable
and the bundles reproducible. FAIL_TO_PASS / PASS_TO_PASS are never typed: each
task image is built and the eval script is run without and with the gold patch;
the lists are what swebench's log parser saw. ``--no-docker`` skips that step and
keeps the lists already in tasks.jsonl. ``--adversarial`` grades every adversarial patch
and control again; ``--adversarial-changed`` only those whose patch is not the recorded one
(the other records keep their verdicts byte for byte).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parents[1])]

from adversarial import ADVERSARIAL, CONTROLS, TASK, WRONG  # noqa: E402
from projects import PROJECTS  # noqa: E402
from tasks import TASKS  # noqa: E402

from swerl.tasks.eval_script import PYTEST_COMMAND, make_eval_script, test_files  # noqa: E402

CREATED_AT = "2024-03-0{day}T12:00:00Z"
RECORD_OVERRIDES = ("eval_type", "test_patch", "eval_script")
"""Fields of an adversarial record that replace its task's (tests/test_integrity.py reads the same)."""
GIT_ENV = {
    "GIT_AUTHOR_NAME": "swerl",
    "GIT_AUTHOR_EMAIL": "swerl@localhost",
    "GIT_COMMITTER_NAME": "swerl",
    "GIT_COMMITTER_EMAIL": "swerl@localhost",
    "GIT_CONFIG_GLOBAL": "/dev/null",
    "GIT_CONFIG_NOSYSTEM": "1",
}


def git(cwd: Path, *args: str, env: dict[str, str] | None = None) -> str:
    full_env = {**os.environ, **GIT_ENV, **(env or {})}
    return subprocess.run(
        ["git", *args], cwd=cwd, env=full_env, check=True, capture_output=True, text=True
    ).stdout


def make_repo(repo: str, commits: list, where: Path) -> list[str]:
    """Create the repo commit by commit; returns the commit hashes."""
    where.mkdir(parents=True)
    git(where, "init", "-q", "-b", "main")
    hashes = []
    for day, (message, files) in enumerate(commits, 1):
        for path, content in files.items():
            (where / path).parent.mkdir(parents=True, exist_ok=True)
            (where / path).write_text(content)
        git(where, "add", "-A")
        date = f"2024-01-{day:02d}T12:00:00+0000"
        git(where, "commit", "-q", "-m", message, env={"GIT_AUTHOR_DATE": date, "GIT_COMMITTER_DATE": date})
        hashes.append(git(where, "rev-parse", "HEAD").strip())
    return hashes


def edit_diff(
    worktree: Path, edits: list, files: dict[str, Any] | None = None, rename: tuple[str, str] | None = None
) -> str:
    """Write ``files`` (None deletes, {"symlink": target} links, {"crlf": True} gives the file
    CRLF line endings), rename, apply exact
    (path, old, new) edits (old None appends), return the diff, restore the tree."""
    if rename:
        git(worktree, "mv", *rename)
    for path, content in (files or {}).items():
        f = worktree / path
        if content is None:
            f.unlink()
            continue
        f.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, dict) and "crlf" in content:  # the file as it is, CRLF line endings
            f.write_bytes(f.read_bytes().replace(b"\n", b"\r\n"))
        elif isinstance(content, dict):
            os.symlink(os.path.relpath(worktree / content["symlink"], f.parent), f)
        else:
            f.write_text(content)
    for path, old, new in edits:
        f = worktree / path
        text = f.read_text()
        if old is None:
            f.write_text(text + new)
            continue
        if text.count(old) != 1:
            raise SystemExit(f"{path}: edit anchor found {text.count(old)} times: {old!r}")
        f.write_text(text.replace(old, new))
    git(worktree, "add", "-A", "--force")  # ignored files too: an attack may hide its own files
    diff = git(worktree, "-c", "core.quotePath=true", "diff", "--cached", "--no-color", "--no-ext-diff")
    git(worktree, "reset", "-q", "--hard")
    git(worktree, "clean", "-fdq")
    return diff


def escape_path(patch: str, path: str) -> str:
    """Write ``path`` in the patch's headers as git's quoted form, its first letter octal-escaped
    (git decodes it when applying; a reader of names as text sees another name)."""
    quoted = "\\" + format(ord(path[0]), "03o") + path[1:]
    out = []
    for line in patch.splitlines(keepends=True):
        if line.startswith(("diff --git ", "--- ", "+++ ")):
            for side in ("a/", "b/"):
                line = line.replace(f"{side}{path}", f'"{side}{quoted}"')
        out.append(line)
    return "".join(out)


def build_records(tmp: Path) -> tuple[list[dict], list[dict], list[dict]]:
    repos_dir = HERE / "repos"
    repos_dir.mkdir(exist_ok=True)
    hashes = {}
    for repo, commits in PROJECTS.items():
        src = tmp / repo.replace("/", "__")
        hashes[repo] = make_repo(repo, commits, src)
        bundle = repos_dir / (repo.replace("/", "__") + ".bundle")
        git(src, "bundle", "create", "-q", str(bundle), "main")
    records, wrong, specs = [], [], {}
    counters: dict[str, int] = {}
    for task in TASKS:
        repo = task["repo"]
        n = counters[repo] = counters.get(repo, 0) + 1
        iid = f"{repo.replace('/', '__')}-{n}"
        base = hashes[repo][task.get("base", -1)]
        wt = tmp / "wt" / iid
        specs[iid] = task
        git(tmp, "clone", "-q", str(tmp / repo.replace("/", "__")), str(wt))
        git(wt, "checkout", "-q", base)
        patch = edit_diff(wt, task["gold"])
        test_patch = edit_diff(wt, task["tests"])
        records.append(
            {
                "instance_id": iid,
                "repo": repo,
                "base_commit": base,
                "patch": patch,
                "test_patch": test_patch,
                "problem_statement": task["problem_statement"],
                "hints_text": "",
                "created_at": CREATED_AT.format(day=n),
                "version": "0.1",
                "environment_setup_commit": base,
                "FAIL_TO_PASS": [],
                "PASS_TO_PASS": [],
                "eval_script": make_eval_script(base, test_patch, PYTEST_COMMAND),
                "log_parser": "parse_log_pytest",
                "eval_type": "pass_and_fail",
            }
        )
        if "wrong" in task:
            wrong.append(
                {
                    "instance_id": iid,
                    "note": task["wrong"]["note"],
                    "patch": edit_diff(wt, task["wrong"]["edits"]),
                }
            )
    return records, wrong, build_adversarial(tmp, specs)


def build_adversarial(tmp: Path, specs: dict[str, dict]) -> list[dict]:
    """The patches of adversarial.py, each made against its task's base commit."""
    out = []
    for kind, entries in (("adversarial", ADVERSARIAL), ("control", CONTROLS)):
        for e in entries:
            task = e.get("task", TASK)
            starts = {None: [], "gold": specs[task]["gold"], "wrong": [*specs[task]["gold"], *WRONG]}
            edits = [*starts[e.get("start")], *e.get("edits", [])]
            patch = edit_diff(tmp / "wt" / task, edits, e.get("files"), e.get("rename"))
            if "fuzz" in e:
                old, new = e["fuzz"]
                if patch.count(old) != 1:
                    raise SystemExit(f"{e['name']}: fuzz anchor found {patch.count(old)} times")
                patch = patch.replace(old, new)
            if "escape" in e:
                patch = escape_path(patch, e["escape"])
            patch += e.get("raw", "")
            rec = {"name": e["name"], "kind": kind, "instance_id": task, "note": e["note"], "patch": patch}
            if "tests" in e:  # the task's tests, written another way: the record's own test patch
                wt = tmp / "wt" / task
                test_patch = edit_diff(wt, [*specs[task]["tests"], *e["tests"]], e.get("test_files"))
                base = git(wt, "rev-parse", "HEAD").strip()
                modified, created = test_files(test_patch)
                run = [f for f in modified + created if f.endswith(".py")]  # as swebench: no data files
                run = e.get("run", run)  # (a helper module of the test patch is not a test file)
                rec |= {
                    "test_patch": test_patch,
                    "eval_script": make_eval_script(base, test_patch, PYTEST_COMMAND, run),
                }
            out.append(rec | ({"eval_type": e["eval_type"]} if "eval_type" in e else {}))
    return out


def adversarial_instance(records: dict, rec: dict):
    """The task a record is graded on (its eval_type, test patch and eval script, when it has
    its own)."""
    from swerl.tasks.instance import Instance

    base = records[rec["instance_id"]]
    return Instance.from_dict({**base, **{k: rec[k] for k in RECORD_OVERRIDES if k in rec}})


def record_adversarial(records: list[dict], adversarial: list[dict]) -> None:
    """Grade each adversarial patch and control in both modes; record what happened."""
    from concurrent.futures import ThreadPoolExecutor

    from swerl.grading import docker_factory, grade

    by_id = {r["instance_id"]: r for r in records}
    factory = docker_factory(timeout=300)
    jobs = [(rec, mode) for rec in adversarial for mode in ("official", "strict")]

    def run(job: tuple[dict, str]):
        rec, mode = job
        return grade(adversarial_instance(by_id, rec), rec["patch"], sandbox_factory=factory, mode=mode)

    with ThreadPoolExecutor(4) as pool:
        for (rec, mode), res in zip(jobs, pool.map(run, jobs), strict=True):
            rec[mode] = res.status.value
            if res.integrity is not None:
                rec["strict_reasons"] = res.integrity.reasons()
    for rec in adversarial:
        print(f"{rec['name']}: official {rec['official']}, strict {rec['strict']}")


def record_tests(records: list[dict], wrong: list[dict]) -> None:
    """Run each eval script before/after gold in its image and fill the test lists."""
    from swebench.harness.constants import TestStatus

    from swerl.grading import docker_factory, evaluate, grade, judge
    from swerl.tasks.images import build_task_images
    from swerl.tasks.instance import Instance

    instances = [Instance.from_dict(r) for r in records]
    build_task_images(instances)
    factory = docker_factory(timeout=300)
    passed = {TestStatus.PASSED.value, TestStatus.XFAIL.value}
    for rec, inst in zip(records, instances, strict=True):
        maps = []
        for patch in ("", inst.patch):
            ev = evaluate(inst, patch, factory, timeout=300)
            if not ev.applied:
                raise SystemExit(f"{inst.instance_id}: gold patch does not apply:\n{ev.apply_output}")
            maps.append(judge(inst, patch, ev.log)[1])
        before, after = maps
        if not after or any(s not in passed for s in after.values()):
            raise SystemExit(f"{inst.instance_id}: tests fail with the gold patch: {after}")
        rec["FAIL_TO_PASS"] = inst.FAIL_TO_PASS = sorted(t for t in after if before.get(t) not in passed)
        rec["PASS_TO_PASS"] = inst.PASS_TO_PASS = sorted(t for t in after if before.get(t) in passed)
        if not rec["FAIL_TO_PASS"]:
            raise SystemExit(f"{inst.instance_id}: no test fails before the gold patch")
        print(f"{inst.instance_id}: {len(rec['FAIL_TO_PASS'])} F2P, {len(rec['PASS_TO_PASS'])} P2P")
    by_id = {i.instance_id: i for i in instances}
    for w in wrong:
        res = grade(by_id[w["instance_id"]], w["patch"], sandbox_factory=factory)
        if res.status.value != "unresolved":
            raise SystemExit(f"{w['instance_id']}: wrong patch graded {res.status}, expected unresolved")
        w["expected_status"] = "unresolved"
        w["FAIL_TO_PASS_failure"] = res.fail_to_pass["failure"]
        w["PASS_TO_PASS_failure"] = res.pass_to_pass["failure"]
        print(f"{w['instance_id']} wrong patch: fails {res.failed_tests}")


def read_jsonl(path: Path, key: str = "instance_id") -> dict[str, dict]:
    if not path.exists():
        return {}
    return {r[key]: r for r in map(json.loads, path.read_text().splitlines())}


def write_jsonl(path: Path, rows: list[dict]) -> None:
    path.write_text("".join(json.dumps(r, sort_keys=True) + "\n" for r in rows))


SAMPLE_GOLD = ("swerl__textkit-1", "swerl__tinyconf-1")
SAMPLE_WRONG = "swerl__intervals-1"


def sample_predictions(records: list[dict], wrong: list[dict]) -> list[dict]:
    """A predictions file for ``swerl eval``'s example: two gold fixes (resolved), one wrong (unresolved)."""
    gold = {r["instance_id"]: r["patch"] for r in records}
    rows = [(i, gold[i]) for i in SAMPLE_GOLD]
    rows.append((SAMPLE_WRONG, next(w["patch"] for w in wrong if w["instance_id"] == SAMPLE_WRONG)))
    return [{"instance_id": i, "model_name_or_path": "sample", "model_patch": p} for i, p in rows]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--no-docker", action="store_true", help="do not build images or run tests")
    ap.add_argument(
        "--adversarial",
        action="store_true",
        help="keep the test lists; grade only the adversarial patches and controls",
    )
    ap.add_argument(
        "--adversarial-changed",
        action="store_true",
        help="like --adversarial, but grade only the patches that differ from the recorded ones",
    )
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        records, wrong, adversarial = build_records(Path(tmp))
    if args.no_docker or args.adversarial or args.adversarial_changed:  # keep what was recorded
        old, old_wrong = read_jsonl(HERE / "tasks.jsonl"), read_jsonl(HERE / "wrong_patches.jsonl")
        old_adv = read_jsonl(HERE / "adversarial_patches.jsonl", key="name")
        changed = [a for a in adversarial if old_adv.get(a["name"], {}).get("patch") != a["patch"]]
        for a in adversarial:
            if not (args.adversarial_changed and a in changed):  # a new patch's old verdict is no verdict
                a.update({k: v for k, v in old_adv.get(a["name"], {}).items() if k not in a})
        for r in records:
            r.update({k: old.get(r["instance_id"], {}).get(k, []) for k in ("FAIL_TO_PASS", "PASS_TO_PASS")})
        for w in wrong:
            recorded = old_wrong.get(w["instance_id"], {})
            w.update({k: v for k, v in recorded.items() if k not in w})
        if args.adversarial:
            record_adversarial(records, adversarial)
        elif args.adversarial_changed:
            record_adversarial(records, changed)
    else:
        record_tests(records, wrong)
        record_adversarial(records, adversarial)
    write_jsonl(HERE / "tasks.jsonl", records)
    write_jsonl(HERE / "wrong_patches.jsonl", wrong)
    write_jsonl(HERE / "adversarial_patches.jsonl", adversarial)
    write_jsonl(HERE / "predictions.sample.jsonl", sample_predictions(records, wrong))
    print(f"wrote {len(records)} tasks, {len(wrong)} wrong patches")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
