"""Bug injection for one repository: baseline, mutants, two probe rounds, candidates.

Cheap by construction: a mutant only runs the tests whose baseline run called the
mutated definition (a mutant no test reaches cannot fail one, so it costs nothing),
many mutants share one sandbox, and only the survivors of round 1 run their whole
test files (twice, which must agree) to fix FAIL_TO_PASS and PASS_TO_PASS.
"""

from __future__ import annotations

import logging
import random
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from swerl.errors import ConfigError
from swerl.tasks.synth.mutate import Mutant, mutants_of_source, sample
from swerl.tasks.synth.repo import Repo
from swerl.tasks.synth.runs import run_jobs

log = logging.getLogger(__name__)
ROOT = "/testbed"


@dataclass
class Candidate:
    """A validated-in-probe bug: what a task record is made from."""

    method: str
    repo: Repo
    f2p: list[str]
    p2p: list[str]
    eval_files: list[str]
    errors: dict[str, str] = field(default_factory=dict)
    mutant: Mutant | None = None
    seconds: float = 0.0
    """Time of one run of the eval files with the bug in."""
    base_commit: str = ""
    patch: str = ""
    test_patch: str = ""
    message: str = ""


@dataclass
class Baseline:
    stable: set[str]
    """Tests that passed in every baseline run (flaky, skipped, failing ones are never used)."""
    calls: dict[str, list[tuple[int, str]]]
    """path -> [(first line of a code object, test that called it)]."""
    seconds: float
    flaky: int = 0


@dataclass
class InjectStats:
    generated: int = 0
    covered: int = 0
    probed: int = 0
    failing: int = 0
    agreed: int = 0
    rejected: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    probe_seconds: float = 0.0
    runs: int = 0
    """Test runs done by the probe (one mutant's tests once)."""
    batch_failures: int = 0
    """Probe sandboxes lost or past their deadline (a batch's mutants are then rerun one per sandbox)."""


def job_base(repo: Repo, timeout: float) -> dict:
    return {"root": ROOT, "pythonpath": repo.pythonpath, "timeout": timeout}


def baseline(repo: Repo, image: str, runs: int = 3, timeout: float = 900.0, use_ray: bool = True) -> Baseline:
    """The whole suite ``runs`` times in one sandbox; the first run records which code each test calls."""
    if not repo.tests:
        raise ConfigError(f"{repo.name}: no test files (test_*.py / *_test.py) found")
    roots = sorted({str(Path(ROOT) / (s.rsplit("/", 1)[0] if "/" in s else "")) for s in repo.sources}) or [
        ROOT
    ]
    job = {**job_base(repo, timeout), "kind": "baseline", "tests": repo.tests, "files": repo.tests, "runs": runs,
           "source_roots": roots, "baseline_timeout": timeout, "inproc": True}  # fmt: skip
    ((_, result),) = list(run_jobs([(image, job, timeout * runs + 120)], 1, use_ray))
    if isinstance(result, Exception):
        raise result
    outcomes = [r["outcomes"] for r in result]
    passed = [{t for t, o in oc.items() if o == "passed"} for oc in outcomes]
    stable = set.intersection(*passed) if passed else set()
    flaky = len(set.union(*passed) - stable) if passed else 0
    stable = {t for t in stable if not any(c.isspace() for c in t)}  # log parsers split on whitespace
    calls: dict[str, list[tuple[int, str]]] = defaultdict(list)
    for test, keys in result[0].get("calls", {}).items():
        if test in stable:
            for key in keys:
                path, line = key.rsplit(":", 1)
                calls[path].append((int(line), test))
    return Baseline(stable, dict(calls), max(r["seconds"] for r in result), flaky)


def covering(m: Mutant, base: Baseline) -> list[str]:
    """The stable tests whose baseline run called code inside the mutant's top-level definition."""
    lo, hi = m.scope
    return sorted({t for line, t in base.calls.get(m.path, ()) if lo <= line <= hi})


def candidates(
    repo: Repo,
    image: str,
    base: Baseline,
    *,
    per_function: int = 3,
    max_candidates: int | None = None,
    max_fail_fraction: float = 0.5,
    max_test_seconds: float = 30.0,
    workers: int = 2,
    chunk: int = 25,
    seed: int = 0,
    use_ray: bool = True,
    stats: InjectStats | None = None,
) -> list[Candidate]:
    """Mutate, probe (round 1: covering tests once; round 2: the failing tests' files twice), keep the agreeing."""
    stats = stats or InjectStats()
    rng = random.Random(seed)
    pool: list[Mutant] = []
    for path in repo.sources:
        text = (repo.path / path).read_text(encoding="utf-8", errors="replace")
        pool.extend(mutants_of_source(path, text))
    stats.generated += len(pool)
    picked = sample(pool, per_function, rng)
    tests_of = {m.key: covering(m, base) for m in picked}
    picked = [m for m in picked if tests_of[m.key]]
    stats.covered += len(picked)
    rng.shuffle(picked)
    if max_candidates is not None:
        picked = picked[:max_candidates]
    stats.probed += len(picked)
    by_key = {m.key: m for m in picked}
    timeout = max(10.0, min(max_test_seconds, 20 * base.seconds))

    def probe(items: list[dict], runs: int) -> dict[str, list[dict]]:
        """id -> runs; in-process first, the file-based path for mutants that cannot be swapped in.

        A batch whose sandbox failed (lost container, deadline) is run again one mutant
        per sandbox, so a lost container or a mutant that breaks the probe costs that
        one candidate, not its batch.
        """
        out: dict[str, list[dict]] = {}

        def job(part: list[dict], inproc: bool) -> tuple[str, dict, float]:
            body = {**job_base(repo, timeout), "kind": "mutants", "mutants": [dict(it, runs=runs) for it in part],
                    "inproc": inproc, "files": repo.tests}  # fmt: skip
            return image, body, (timeout + 5) * runs * len(part) + 300

        for inproc in (True, False):
            todo = [it for it in items if it["id"] not in out]
            for size in (chunk, 1):
                failed: list[dict] = []

                parts = [todo[i : i + size] for i in range(0, len(todo), size)]
                for n, res in run_jobs([job(p, inproc) for p in parts], workers, use_ray):
                    if isinstance(res, Exception):
                        log.warning("probe batch of %d failed: %s", len(parts[n]), res)
                        stats.batch_failures += 1
                        failed += parts[n] if size > 1 else []
                        continue
                    for r in res:
                        stats.runs += len(r["runs"])
                        if not (inproc and r["runs"][0]["status"] == "noswap"):
                            out[r["id"]] = r["runs"]
                        else:
                            stats.rejected["swapped_by_file"] += 1
                todo = failed
                if not todo:
                    break
        for it in items:
            if it["id"] not in out:
                stats.rejected["infra"] += 1
        return out

    items = [{"id": m.key, "path": m.path, "lo": m.lo, "hi": m.hi, "new": m.new, "tests": tests_of[m.key],
              "scope": list(m.scope), "top": m.function.split(".")[0]} for m in picked]  # fmt: skip
    t = time.monotonic()
    round1: dict[str, set[str]] = {}
    errors: dict[str, dict[str, str]] = {}
    limit = max_fail_fraction * len(base.stable)
    for key, runs in probe(items, 1).items():
        run = runs[0]
        if run["status"] != "ok":
            stats.rejected[run["status"]] += 1
            continue
        failed = {t for t in tests_of[key] if run["outcomes"].get(t) != "passed"}
        if not failed:
            stats.rejected["no_test_fails"] += 1
        elif len(failed) > limit:
            stats.rejected["most_tests_fail"] += 1
        else:
            round1[key] = failed
            errors[key] = run.get("errors", {})
    stats.failing += len(round1)
    out: list[Candidate] = []
    # round 2: the same tests twice more; all three runs must fail exactly the same tests
    for key, runs in probe([it for it in items if it["id"] in round1], 2).items():
        if any(run["status"] != "ok" for run in runs):
            stats.rejected["round2_" + next(x["status"] for x in runs if x["status"] != "ok")] += 1
            continue
        fails = [frozenset(t for t in tests_of[key] if run["outcomes"].get(t) != "passed") for run in runs]
        if len(set(fails)) != 1 or fails[0] != round1[key]:
            stats.rejected["runs_disagree"] += 1
            continue
        secs = max(run["seconds"] for run in runs)
        if secs > max_test_seconds:
            stats.rejected["too_slow"] += 1
            continue
        files = sorted({t.split("::", 1)[0] for t in fails[0]})
        # tests of those files that never call the mutated definition cannot change: they pass as at baseline
        p2p = sorted(t for t in base.stable if t.split("::", 1)[0] in files and t not in fails[0])
        out.append(Candidate("inject", repo, sorted(fails[0]), p2p, files, errors[key], by_key[key], secs))
    stats.agreed += len(out)
    stats.probe_seconds += time.monotonic() - t
    return out
