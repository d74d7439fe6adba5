"""Bug injection for one repository: baseline, mutants, two probe rounds, candidates.

Cheap by construction: a mutant only runs the tests whose baseline run called the
mutated definition (a mutant no test reaches cannot fail one, so it costs nothing),
many mutants share one sandbox, and only the survivors of round 1 run their whole
test files (twice, which must agree) to fix FAIL_TO_PASS and PASS_TO_PASS.
"""

from __future__ import annotations

import logging
import random
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from swerl.errors import ConfigError, InfraError
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
    uncollected: dict[str, str] = field(default_factory=dict)
    """Test files pytest could not collect (an import that fails in the image), and why."""
    spaced: int = 0
    """Passing tests left out because their ids hold whitespace (swebench's log parser cuts them there)."""
    broken: dict[str, int] = field(default_factory=dict)
    """Tests failing before any mutation, by the first line of why (a module the image lacks, ...) -> count."""


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

    def merge(self, other: InjectStats) -> None:
        """Add ``other``'s counts (one batch's) to these."""
        for f in (
            "generated",
            "covered",
            "probed",
            "failing",
            "agreed",
            "probe_seconds",
            "runs",
            "batch_failures",
        ):
            setattr(self, f, getattr(self, f) + getattr(other, f))
        for k, v in other.rejected.items():
            self.rejected[k] += v


def job_base(repo: Repo, timeout: float) -> dict:
    return {"root": ROOT, "pythonpath": repo.pythonpath, "timeout": timeout, "pytest_args": repo.pytest_args}


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
    if isinstance(result, dict):  # pytest stopped before any test: its words, not "no test passed"
        raise ConfigError(
            f"{repo.name}: pytest ran no test in the image (exit {result.get('exit')}; "
            f"options added: {' '.join(repo.pytest_args) or 'none'}): {result.get('fatal', '')}"
        )
    uncollected = {k: v for k, v in result[0].get("uncollected", {}).items()}
    if uncollected and not any(r["outcomes"] for r in result):
        raise ConfigError(
            f"{repo.name}: none of its {len(repo.tests)} test files could be collected: "
            + "; ".join(f"{k}: {v}" for k, v in sorted(uncollected.items())[:5])
        )
    outcomes = [r["outcomes"] for r in result]
    passed = [{t for t, o in oc.items() if o == "passed"} for oc in outcomes]
    stable = set.intersection(*passed) if passed else set()
    flaky = len(set.union(*passed) - stable) if passed else 0
    broken = Counter(
        (result[0].get("errors", {}).get(t) or o).splitlines()[0][:160]
        for t, o in outcomes[0].items()
        if o in ("failed", "error") and t not in uncollected
    )
    spaced = {t for t in stable if any(c.isspace() for c in t)}
    stable -= spaced  # log parsers split on whitespace: such a test cannot be named in FAIL_TO_PASS
    calls: dict[str, list[tuple[int, str]]] = defaultdict(list)
    for test, keys in result[0].get("calls", {}).items():
        if test in stable:
            for key in keys:
                path, line = key.rsplit(":", 1)
                calls[path].append((int(line), test))
    return Baseline(
        stable, dict(calls), max(r["seconds"] for r in result), flaky, uncollected, len(spaced), dict(broken)
    )


def covering(m: Mutant, base: Baseline) -> list[str]:
    """The stable tests whose baseline run called code inside the mutant's top-level definition."""
    lo, hi = m.scope
    return sorted({t for line, t in base.calls.get(m.path, ()) if lo <= line <= hi})


def pick(
    repo: Repo,
    base: Baseline,
    *,
    per_function: int = 3,
    max_candidates: int | None = None,
    seed: int = 0,
    stats: InjectStats | None = None,
) -> list[dict]:
    """The mutants to probe, as probe items: sampled per function, reached by a stable test, shuffled."""
    stats = stats if stats is not None else InjectStats()
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
    return [{"id": m.key, "path": m.path, "lo": m.lo, "hi": m.hi, "new": m.new, "tests": tests_of[m.key],
             "scope": list(m.scope), "top": m.function.split(".")[0], "mutant": m} for m in picked]  # fmt: skip


@dataclass
class Prober:
    """Probe jobs for one repository and the reading of their runs (see :mod:`swerl.tasks.synth.probe`).

    One job per batch of mutants, in one sandbox: each mutant's covering tests run once;
    one that fails some of them, and at most ``max_fail_fraction`` of the stable tests,
    runs twice more there, and all three runs must fail exactly the same tests.
    """

    repo: Repo
    image: str
    base: Baseline
    max_fail_fraction: float = 0.5
    max_test_seconds: float = 30.0

    @property
    def timeout(self) -> float:
        """Per run: a bound from the baseline's time, never past ``max_test_seconds``."""
        return max(10.0, min(self.max_test_seconds, 20 * self.base.seconds))

    @property
    def max_fail(self) -> float:
        return self.max_fail_fraction * len(self.base.stable)

    def job(self, items: list[dict], inproc: bool = True) -> tuple[str, dict, float]:
        """``(image, job, deadline)`` for :func:`run_jobs`: every item once, survivors three times in all."""
        mutants = [{k: v for k, v in it.items() if k != "mutant"} | {"runs": 1, "confirm": 2, "max_fail": self.max_fail}
                   for it in items]  # fmt: skip
        body = {**job_base(self.repo, self.timeout), "kind": "mutants", "mutants": mutants, "inproc": inproc,
                "files": self.repo.tests}  # fmt: skip
        return self.image, body, (self.timeout + 5) * 3 * len(items) + 300

    def read(self, item: dict, runs: list[dict], stats: InjectStats) -> Candidate | None:
        """A candidate from one mutant's runs, or None (the reason counted in ``stats.rejected``)."""
        stats.runs += len(runs)
        stats.probed += 1
        tests = item["tests"]
        first = runs[0]
        if first["status"] != "ok":
            stats.rejected[first["status"]] += 1
            return None
        failed = frozenset(t for t in tests if first["outcomes"].get(t) != "passed")
        if not failed:
            stats.rejected["no_test_fails"] += 1
            return None
        if len(failed) > self.max_fail:
            stats.rejected["most_tests_fail"] += 1
            return None
        stats.failing += 1
        if len(runs) != 3:
            stats.rejected["infra"] += 1
            return None
        if any(run["status"] != "ok" for run in runs[1:]):
            stats.rejected["round2_" + next(x["status"] for x in runs[1:] if x["status"] != "ok")] += 1
            return None
        fails = {frozenset(t for t in tests if run["outcomes"].get(t) != "passed") for run in runs}
        if fails != {failed}:
            stats.rejected["runs_disagree"] += 1
            return None
        secs = max(run["seconds"] for run in runs)
        if secs > self.max_test_seconds:
            stats.rejected["too_slow"] += 1
            return None
        files = sorted({t.split("::", 1)[0] for t in failed})
        # tests of those files that never call the mutated definition cannot change: they pass as at baseline
        p2p = sorted(t for t in self.base.stable if t.split("::", 1)[0] in files and t not in failed)
        stats.agreed += 1
        return Candidate(
            "inject", self.repo, sorted(failed), p2p, files, first.get("errors", {}), item["mutant"], secs
        )


def probe_batch(
    prober: Prober,
    items: list[dict],
    stats: InjectStats,
    use_ray: bool = True,
    stop: Callable[[], bool] = lambda: False,
) -> list[Candidate]:
    """Probe ``items`` in one sandbox; a batch whose sandbox failed is rerun one mutant per sandbox,
    and mutants that cannot be swapped in live run the file-based way (neither once ``stop()``: a
    spent time budget starts no sandbox; those mutants count as ``budget``). The candidates that agree."""
    runs_of: dict[str, list[dict]] = {}
    for inproc in (True, False):
        todo = [it for it in items if it["id"] not in runs_of]
        for size in (len(todo), 1):
            if todo and (size == 1 or not inproc) and stop():
                stats.probed += len(todo)
                stats.rejected["budget"] += len(todo)
                runs_of.update({it["id"]: [] for it in todo})
                break
            failed: list[dict] = []
            parts = [todo[i : i + size] for i in range(0, len(todo), max(1, size))]
            for n, res in run_jobs([prober.job(p, inproc) for p in parts], 1 if size > 1 else 2, use_ray):
                if isinstance(res, dict):  # pytest ran nothing in the sandbox (see probe.main_inproc)
                    res = InfraError(
                        f"pytest ran no test (exit {res.get('exit')}): {res.get('fatal', '')[-300:]}"
                    )
                if isinstance(res, Exception):
                    log.warning("probe batch of %d failed: %s", len(parts[n]), res)
                    stats.batch_failures += 1
                    failed += parts[n] if size > 1 else []
                    continue
                for r in res:
                    if inproc and r["runs"][0]["status"] == "noswap":
                        stats.rejected["swapped_by_file"] += 1
                    else:
                        runs_of[r["id"]] = r["runs"]
            todo = failed
            if not todo:
                break
    out = []
    for it in items:
        if runs_of.get(it["id"]) == []:  # left for the budget
            continue
        if it["id"] not in runs_of:
            stats.probed += 1
            stats.rejected["infra"] += 1
            continue
        c = prober.read(it, runs_of[it["id"]], stats)
        if c is not None:
            out.append(c)
    return out
