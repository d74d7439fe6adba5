"""``synthesize``: repositories in, a validated suite out (``tasks.jsonl``, ``swebench.jsonl``, bundles, images).

A stream, not a sequence of phases: per repository, prepare it (mine its history,
build its image, run its baseline), then batches of mutants are probed (many per
sandbox) and each survivor, as soon as its batch ends, becomes a SWE-bench record,
gets its image (built offline) and is checked on the official path (swerl's grading,
swebench's TestSpec and log parser, a sandbox of the task image): the gold patch must
resolve, the untouched repo must not, and its failing tests must be exactly
FAIL_TO_PASS (the probe's three runs, then this one, must agree). Only tasks that
pass are written. With a time budget no batch starts past it, the ones in flight
finish, and each task's validation time is recorded, so a rate is a count within
the budget, not an extrapolation.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from swebench.harness.constants import START_TEST_OUTPUT

from swerl.tasks.instance import Instance
from swerl.tasks.synth.inject import Candidate, InjectStats, Prober, baseline, pick, probe_batch
from swerl.tasks.synth.repo import Repo, prepare
from swerl.tasks.synth.statement import TemplateWriter, Writer
from swerl.tasks.synth.suite import to_instance, write_bundle, write_statement, write_suite

log = logging.getLogger(__name__)
PASSED = ("PASSED", "XFAIL")
RESET = "git reset -q --hard && git clean -q -ffdx && git status --porcelain --ignored --untracked-files=all"
"""Back to the image's /testbed (tracked files as committed, nothing untracked or ignored); prints nothing
when that holds."""


@dataclass
class RepoReport:
    repo: str
    method_counts: dict[str, dict[str, int]] = field(default_factory=dict)
    """method -> {"candidates": probed, "probed_ok": survived the probe, "validated": passed the official check}."""
    rejected: dict[str, int] = field(default_factory=dict)
    seconds: dict[str, float] = field(default_factory=dict)
    """Stage -> seconds: setup stages (wall), and per-task stages summed over tasks (probe, records,
    image, gold, empty: what each costs, whatever ran beside it)."""
    statements: dict[str, int] = field(default_factory=dict)
    """How the problem statements were written: mode -> tasks."""
    validated_at: list[float] = field(default_factory=list)
    """Seconds from the start of the run at which each validated task passed its check."""
    error: str = ""
    examples: dict[str, list[str]] = field(default_factory=dict)
    """Rejection reason of the official check -> a few ``instance_id: why`` (what a low yield looks like)."""
    notes: list[str] = field(default_factory=list)
    """What lowers this repository's yield without stopping it (options left out of its pytest
    config, test files that cannot be collected, a small suite), said so a low count has its reason."""


@dataclass
class SynthReport:
    out: str
    repos: list[RepoReport] = field(default_factory=list)
    validated: int = 0
    seconds: float = 0.0
    budget_seconds: float | None = None
    """No batch of candidates started past this (``minutes`` * 60); None: no budget."""

    @property
    def validated_in_budget(self) -> int:
        """Tasks validated by the end of the budget (all of them without one)."""
        limit = self.budget_seconds if self.budget_seconds is not None else float("inf")
        return sum(t <= limit for r in self.repos for t in r.validated_at)

    def per_method(self) -> dict[str, dict[str, int]]:
        total: dict[str, Counter] = {}
        for r in self.repos:
            for method, counts in r.method_counts.items():
                total.setdefault(method, Counter()).update(counts)
        return {m: dict(c) for m, c in total.items()}

    def to_dict(self) -> dict[str, Any]:
        return asdict(self) | {
            "per_method": self.per_method(),
            "validated_in_budget": self.validated_in_budget,
        }


def check_one(
    inst: Instance, timeout: float = 300.0, run_id: str | None = None, timings: dict[str, float] | None = None
) -> tuple[bool, str]:
    """Official path: gold resolves; no patch is unresolved and fails exactly FAIL_TO_PASS.

    The gold grade runs in a fresh sandbox of the task image, as a rollout grades it. The
    no-patch run follows in the same sandbox once the repository is back to the image's
    state (``git reset --hard``, ``git clean -ffdx``, and git then reports nothing changed,
    untracked or ignored); when it is not, a fresh sandbox runs it. One container per
    task instead of two. ``timings`` gets the seconds of each run ("gold", "empty").
    """
    from swerl.grading import docker_factory, evaluate, grade, judge
    from swerl.tasks.images import require_task_image

    timings = timings if timings is not None else {}
    factory = docker_factory(timeout, run_id)
    require_task_image(inst)
    t = time.monotonic()
    sb = factory(inst.image)
    try:
        sb.start()
        g = grade(inst, inst.patch, sandbox_factory=factory, timeout=timeout, sandbox=sb)
        timings["gold"] = time.monotonic() - t
        if g.status.value != "resolved":
            return False, f"gold {g.status.value}: {g.error or ','.join(g.failed_tests)[:200]}"
        t = time.monotonic()
        r = sb.execute(RESET, cwd="/testbed", timeout=120)
        if r.ok and not r.output.strip():
            ev = evaluate(inst, "", factory, timeout, sandbox=sb)
        else:
            log.info("%s: the gold run left the tree changed (%s); no-patch run in a fresh sandbox",
                     inst.instance_id, r.output.strip()[:200])  # fmt: skip
            ev = evaluate(inst, "", factory, timeout)
        timings["empty"] = time.monotonic() - t
    finally:
        sb.close()
    if "fatal:" in ev.log.split(START_TEST_OUTPUT)[0]:  # e.g. the image's /testbed is not at base_commit
        return False, f"image repository broken: {ev.log.split(START_TEST_OUTPUT)[0][-200:]}"
    status, smap, _ = judge(inst, "", ev.log)
    if status.value != "unresolved":
        return False, f"no patch {status.value}"
    failing = {t for t in [*inst.FAIL_TO_PASS, *inst.PASS_TO_PASS] if smap.get(t) not in PASSED}
    if failing != set(inst.FAIL_TO_PASS):
        more, fewer = sorted(failing - set(inst.FAIL_TO_PASS)), sorted(set(inst.FAIL_TO_PASS) - failing)
        return False, (
            f"no-patch run disagrees with the probe runs: {len(more)} more failing {more[:3]}, "
            f"{len(fewer)} of FAIL_TO_PASS not failing {[(t, smap.get(t)) for t in fewer[:3]]}"
        )
    return True, ""


def validate_task(
    row: dict, repo: Repo, repo_img: str | None, bundle: str, timeout: float, run_id: str
) -> dict[str, Any]:
    """One task (a remote call): its image, then :func:`check_one`. {"ok", "why", "seconds": stage -> s}."""
    from swerl.sandbox.docker import connect
    from swerl.tasks.images import build_task_images
    from swerl.tasks.synth.images import task_image

    inst = Instance.from_dict(row)
    secs: dict[str, float] = {}
    t = time.monotonic()
    client = connect()
    if inst.extra["synth"]["method"] == "inject" and repo_img:
        task_image(inst, repo, repo_img, repo.head, client)
    else:
        build_task_images([inst], client=client, bundles=[Path(bundle).parent])
    secs["image"] = time.monotonic() - t
    ok, why = check_one(inst, timeout, run_id, secs)
    return {"ok": ok, "why": why, "seconds": secs}


@dataclass
class _Source:
    """One repository being synthesized from: what its setup made, what is left to probe, what it kept."""

    n: int
    rr: RepoReport
    repo: Repo
    repo_img: str | None = None
    prober: Prober | None = None
    items: list[dict] = field(default_factory=list)
    """Mutants not yet probed (probe items)."""
    mined: list[Candidate] = field(default_factory=list)
    bundle: Path | None = None
    stats: InjectStats = field(default_factory=InjectStats)
    seen: set[str] = field(default_factory=set)
    kept: list[tuple[Instance, Candidate]] = field(default_factory=list)


def synthesize(
    repos: list[str],
    out: str | Path,
    *,
    methods: tuple[str, ...] = ("inject", "mine"),
    max_candidates: int | None = None,
    per_function: int = 3,
    workers: int = 2,
    use_ray: bool = True,
    writer: Writer | None = None,
    workdir: str | Path | None = None,
    seed: int = 0,
    max_test_seconds: float = 30.0,
    check: bool = True,
    parallel_repos: int = 3,
    minutes: float | None = None,
    batch: int = 25,
    check_timeout: float = 300.0,
) -> SynthReport:
    """Synthesize a suite from ``repos`` (see :func:`swerl.tasks.synth.repo.prepare` for the specs) into ``out``.

    ``workers``: sandboxes probing at once, and as many checking (all repositories together);
    ``parallel_repos``: repositories prepared at once; ``minutes``: no batch of candidates
    starts past this budget (those in flight finish); ``batch``: mutants per probe sandbox.
    """
    import tempfile

    from swerl.errors import ConfigError

    if minutes is not None and minutes <= 0:
        raise ConfigError(f"minutes must be positive (a time budget), got {minutes}")
    if batch < 1 or workers < 1:
        raise ConfigError(f"batch and workers must be at least 1, got batch={batch}, workers={workers}")
    out = Path(out)
    writer = writer or TemplateWriter()
    if hasattr(writer, "check"):  # a model writer: an unreachable server is one clear error, before any work
        writer.check()
    started = time.monotonic()
    report = SynthReport(str(out), budget_seconds=None if minutes is None else minutes * 60)
    report.repos = [RepoReport(spec) for spec in repos]
    tmp = tempfile.TemporaryDirectory(prefix="swerl-synth-") if workdir is None else None
    work = Path(workdir or tmp.name)  # type: ignore[union-attr]
    out.mkdir(parents=True, exist_ok=True)
    if use_ray:  # once, before the threads (ray.init is not safe to race)
        from swerl.cluster.ray_init import ensure_ray

        ensure_ray()
    setup = dict(methods=methods, max_candidates=max_candidates, per_function=per_function, use_ray=use_ray,
                 seed=seed, max_test_seconds=max_test_seconds)  # fmt: skip
    try:
        stream = _Stream(report, out, started, workers, use_ray, batch, check, check_timeout)
        with ThreadPoolExecutor(
            max(1, min(parallel_repos, len(repos))), thread_name_prefix="swerl-synth"
        ) as pool:
            setups = {
                pool.submit(_setup, n, repos[n], report.repos[n], out, work / f"r{n}", **setup): n
                for n in range(len(repos))
            }  # type: ignore[arg-type]
            stream.run(setups)
        kept = [ic for src in sorted(stream.sources, key=lambda s: s.n) for ic in src.kept]
        with ThreadPoolExecutor(max(1, workers)) as pool:  # a model writer is a network call per task
            list(pool.map(lambda ic: write_statement(ic[0], ic[1], writer), kept))
        for src in stream.sources:
            src.rr.statements = dict(Counter(i.extra["synth"]["statement"]["mode"] for i, _ in src.kept))
            if src.kept or src.bundle:
                write_bundle(
                    src.repo, out
                )  # every task's commit: `swerl tasks build-images` rebuilds from it
        tasks = [inst for inst, _ in kept]
        report.validated = len(tasks)
        report.seconds = time.monotonic() - started
        write_suite(out, tasks, report.to_dict())
    finally:
        if tmp is not None:
            tmp.cleanup()
    return report


def _setup(
    n: int,
    spec: str,
    rr: RepoReport,
    out: Path,
    work: Path,
    *,
    methods: tuple[str, ...],
    max_candidates: int | None,
    per_function: int,
    use_ray: bool,
    seed: int,
    max_test_seconds: float,
) -> _Source | None:
    """Prepare one repository: its mined candidates, its image, baseline and the mutants to probe."""
    from swerl.sandbox.docker import connect
    from swerl.tasks.synth.images import repo_image
    from swerl.tasks.synth.mine import history_image, mine
    from swerl.tasks.synth.suite import test_command

    client = connect()
    t0 = time.monotonic()
    try:
        repo = prepare(spec, work)
    except Exception as e:
        rr.error = str(e)[:500]
        return None
    rr.repo = repo.name
    rr.notes += repo.notes
    src = _Source(n, rr, repo)
    try:
        if "mine" in methods and int(repo_git_count(repo)) > 1:
            examined, src.mined = mine(
                repo, history_image(repo, client), test_command(repo), limit=max_candidates
            )
            rr.method_counts["mine"] = {"candidates": examined, "probed_ok": len(src.mined)}
            if src.mined:
                src.bundle = write_bundle(repo, out)  # the generic recipe builds mined tasks from it
        rr.seconds["mine"] = time.monotonic() - t0
        if "inject" in methods and not repo.sources:
            rr.error = (
                f"nothing to inject into: no source .py files outside the tests "
                f"(packages are top-level directories with __init__.py, or src/); {len(repo.tests)} test files"
            )
        if "inject" in methods and repo.sources and not repo.tests:  # before any image is built
            rr.error = (
                f"no test files: none matches pytest's python_files and none is named test.py/tests.py "
                f"({len(repo.sources)} source files; an sdist may leave its tests out)"
            )
        if "inject" in methods and repo.sources and repo.tests:
            t1 = time.monotonic()
            src.repo_img = repo_image(repo, client)
            rr.seconds["repo_image"] = time.monotonic() - t1
            t1 = time.monotonic()
            try:
                base = baseline(repo, src.repo_img, use_ray=use_ray)
            except Exception as e:
                rr.error = f"baseline: {e}"[:500]
                base = None
            rr.seconds["baseline"] = time.monotonic() - t1
            if base is not None and base.uncollected:
                repo.tests = [t for t in repo.tests if t not in base.uncollected]  # probes skip them
                rr.notes.append(
                    f"{len(base.uncollected)} of {len(base.uncollected) + len(repo.tests)} test files could not be "
                    "collected in the image (their tests are not used): "
                    + "; ".join(f"{k}: {v}" for k, v in sorted(base.uncollected.items())[:5])
                )
            if base is not None and base.broken:
                top = sorted(base.broken.items(), key=lambda kv: -kv[1])[:3]
                rr.notes.append(
                    f"{sum(base.broken.values())} tests fail in the image before any mutation (not used); "
                    "most often: " + "; ".join(f"{why} ({n})" for why, n in top)
                )
            if base is not None and base.spaced:
                rr.notes.append(
                    f"{base.spaced} passing tests not used: whitespace in their ids (parametrized with "
                    "strings), which swebench's pytest log parser cuts at the first space"
                )
            if base is not None and not base.stable:  # said, not silent: nothing to inject against
                rr.error = (
                    f"baseline: no test passed in all runs ({base.flaky} flaky; {base.seconds:.0f} s per run)"
                )
            elif base is not None:
                if len(base.stable) < 20:
                    rr.notes.append(
                        f"only {len(base.stable)} stable tests: a mutant failing more than "
                        f"{Prober.max_fail_fraction:.0%} of them is rejected (most_tests_fail)"
                    )
                src.prober = Prober(repo, src.repo_img, base, max_test_seconds=max_test_seconds)
                t1 = time.monotonic()
                src.items = pick(repo, base, per_function=per_function, max_candidates=max_candidates, seed=seed,
                                 stats=src.stats)  # fmt: skip
                rr.seconds["mutants"] = time.monotonic() - t1  # parsing and checking every mutant: host CPU
                rr.method_counts["inject"] = {"generated": src.stats.generated, "covered": src.stats.covered}
    except Exception as e:  # one repository's failure is reported, the others go on
        log.warning("synthesis from %s failed: %s", spec, e)
        rr.error = rr.error or f"{type(e).__name__}: {e}"[:500]
    return src


class _Stream:
    """The driver: probe batches (round robin over repositories) and per-task checks, both bounded
    (and probing held back while a batch of survivors waits for its checks).

    Runs in the calling thread; remote work (sandboxes, Ray tasks) happens in worker threads
    that each wait on one bounded call, so every wait keeps its deadline.
    """

    def __init__(self, report: SynthReport, out: Path, started: float, workers: int, use_ray: bool,
                 batch: int, check: bool, check_timeout: float) -> None:  # fmt: skip
        from swerl.sandbox.base import default_run_id

        self.report, self.out, self.started = report, out, started
        self.workers, self.use_ray, self.batch, self.check = workers, use_ray, batch, check
        self.check_timeout = check_timeout
        self.sources: list[_Source] = []
        self.next_source = 0
        self.checks: list[tuple[_Source, Instance, Candidate]] = []
        self.run_id = default_run_id()
        self.calls = 0

    def past_budget(self) -> bool:
        budget = self.report.budget_seconds
        return budget is not None and time.monotonic() - self.started >= budget

    def _next_batch(self) -> tuple[_Source, list[dict]] | None:
        live = [s for s in self.sources if s.items]
        if not live or self.past_budget():
            return None
        src = live[self.next_source % len(live)]
        self.next_source += 1
        items, src.items = src.items[: self.batch], src.items[self.batch :]
        return src, items

    def run(self, setups: dict[Future, int]) -> None:
        with ThreadPoolExecutor(self.workers, thread_name_prefix="swerl-probe") as probes, \
                ThreadPoolExecutor(self.workers, thread_name_prefix="swerl-check") as checks:  # fmt: skip
            pending: dict[Future, tuple[str, Any]] = {f: ("setup", n) for f, n in setups.items()}
            while True:
                n_probes = sum(kind == "probe" for kind, _ in pending.values())
                # backpressure: probing runs ahead of checking by at most a batch of waiting survivors,
                # so what is in flight when a budget ends is small and CPU goes where tasks finish
                while (
                    n_probes < self.workers and len(self.checks) < self.batch and (nxt := self._next_batch())
                ):
                    src, items = nxt
                    pending[probes.submit(self._probe, src, items)] = ("probe", src)
                    n_probes += 1
                n_checks = sum(kind == "check" for kind, _ in pending.values())
                while n_checks < self.workers and self.checks:
                    src, inst, c = self.checks.pop(0)
                    pending[checks.submit(self._check, src, inst)] = ("check", (src, inst, c))
                    n_checks += 1
                if not pending:
                    break
                done, _ = wait(list(pending), timeout=5.0, return_when=FIRST_COMPLETED)
                for f in done:
                    kind, what = pending.pop(f)
                    getattr(self, f"_{kind}_done")(what, f)

    # ---------------------------------------------------------------- setup
    def _setup_done(self, n: int, f: Future) -> None:
        src = f.result()  # _setup reports its own errors
        if src is None:
            return
        self.sources.append(src)
        if src.mined and not self.past_budget():
            self._records(src, src.mined)

    # ---------------------------------------------------------------- probe
    def _probe(self, src: _Source, items: list[dict]) -> tuple[list[Candidate], InjectStats, float]:
        t = time.monotonic()
        stats = InjectStats()
        assert src.prober is not None
        return (
            probe_batch(src.prober, items, stats, self.use_ray, self.past_budget),
            stats,
            time.monotonic() - t,
        )

    def _probe_done(self, src: _Source, f: Future) -> None:
        try:
            cands, stats, secs = f.result()
        except Exception as e:  # probe_batch reports sandbox failures per mutant; anything else is said here
            log.warning("probe batch of %s failed: %s", src.repo.name, e)
            src.rr.rejected["infra"] = src.rr.rejected.get("infra", 0) + 1
            return
        src.stats.merge(stats)
        _add(src.rr.seconds, "probe", secs)
        counts = src.rr.method_counts.setdefault("inject", {})
        counts.update(candidates=src.stats.probed, probed_ok=src.stats.agreed, probe_runs=src.stats.runs,
                      batch_failures=src.stats.batch_failures)  # fmt: skip
        src.rr.rejected.update(src.stats.rejected)
        self._records(src, cands)

    # ---------------------------------------------------------------- records
    def _records(self, src: _Source, cands: list[Candidate]) -> None:
        t = time.monotonic()
        for c in cands:
            inst = to_instance(c, None)
            if inst.patch in src.seen:  # the same fix twice is one task
                src.rr.rejected["duplicate"] = src.rr.rejected.get("duplicate", 0) + 1
                continue
            src.seen.add(inst.patch)
            if self.check:
                self.checks.append((src, inst, c))
            else:
                self._keep(src, inst, c)
        _add(src.rr.seconds, "records", time.monotonic() - t)

    # ---------------------------------------------------------------- check
    def _check(self, src: _Source, inst: Instance) -> dict[str, Any]:
        from swerl.tasks.synth.runs import GRACE, bounded, reap_run

        self.calls += 1
        run_id = f"{self.run_id}-c{self.calls}"
        args = (inst.to_dict(), src.repo, src.repo_img, str(src.bundle or ""), self.check_timeout, run_id)
        deadline = 2 * self.check_timeout + GRACE
        ((_, res),) = list(bounded([(validate_task, args, deadline)], 1, self.use_ray,
                                   on_abandon=lambda _: reap_run(run_id)))  # fmt: skip
        if isinstance(res, Exception):
            return {"ok": False, "why": f"infra: {res}"[:200], "seconds": {}}
        return res

    def _check_done(self, what: tuple[_Source, Instance, Candidate], f: Future) -> None:
        src, inst, c = what
        try:
            res = f.result()
        except Exception as e:
            res = {"ok": False, "why": f"infra: {e}"[:200], "seconds": {}}
        for stage, secs in res["seconds"].items():
            _add(src.rr.seconds, stage, secs)
        if res["ok"]:
            self._keep(src, inst, c)
        else:
            key = "official_" + res["why"].split(":")[0].replace(" ", "_")
            src.rr.rejected[key] = src.rr.rejected.get(key, 0) + 1
            seen = src.rr.examples.setdefault(key, [])
            if len(seen) < 3:
                seen.append(f"{inst.instance_id}: {res['why'][:400]}")

    def _keep(self, src: _Source, inst: Instance, c: Candidate) -> None:
        src.kept.append((inst, c))
        src.rr.validated_at.append(round(time.monotonic() - self.started, 1))
        total = sum(len(s.kept) for s in self.sources)
        if total % 25 == 0:  # progress for whoever watches an hour-long run
            log.info("synth: %d validated at %.0f s", total, time.monotonic() - self.started)
        counts = src.rr.method_counts.setdefault(c.method, {})
        counts["validated"] = counts.get("validated", 0) + 1


def _add(seconds: dict[str, float], stage: str, secs: float) -> None:
    seconds[stage] = seconds.get(stage, 0.0) + secs


def repo_git_count(repo: Repo) -> str:
    from swerl.tasks.synth.repo import git

    return git(repo.path, "rev-list", "--count", repo.head).strip()
