"""``synthesize``: repositories in, a validated suite out (``tasks.jsonl``, ``swebench.jsonl``, bundles, images).

Per repository: prepare it, mine its history and/or inject bugs (probed many per
sandbox), turn the survivors into SWE-bench records, build their images offline,
and check every one on the official path (swerl's grading, swebench's TestSpec and
log parser, a fresh sandbox of the task image): the gold patch must resolve, the
untouched repo must not, and its failing tests must be exactly FAIL_TO_PASS (the
third run that has to agree). Only tasks that pass are written.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from swebench.harness.constants import START_TEST_OUTPUT

from swerl.tasks.instance import Instance
from swerl.tasks.synth.inject import Candidate, InjectStats, baseline, candidates
from swerl.tasks.synth.repo import Repo, prepare
from swerl.tasks.synth.statement import TemplateWriter, Writer
from swerl.tasks.synth.suite import to_instance, write_bundle, write_statement, write_suite

log = logging.getLogger(__name__)
PASSED = ("PASSED", "XFAIL")


@dataclass
class RepoReport:
    repo: str
    method_counts: dict[str, dict[str, int]] = field(default_factory=dict)
    """method -> {"candidates": probed, "probed_ok": survived the probe, "validated": passed the official check}."""
    rejected: dict[str, int] = field(default_factory=dict)
    seconds: dict[str, float] = field(default_factory=dict)
    statements: dict[str, int] = field(default_factory=dict)
    """How the problem statements were written: mode -> tasks."""
    error: str = ""


@dataclass
class SynthReport:
    out: str
    repos: list[RepoReport] = field(default_factory=list)
    validated: int = 0
    seconds: float = 0.0

    def per_method(self) -> dict[str, dict[str, int]]:
        total: dict[str, Counter] = {}
        for r in self.repos:
            for method, counts in r.method_counts.items():
                total.setdefault(method, Counter()).update(counts)
        return {m: dict(c) for m, c in total.items()}

    def to_dict(self) -> dict[str, Any]:
        return asdict(self) | {"per_method": self.per_method()}


def check_one(inst: Instance, timeout: float = 300.0, run_id: str | None = None) -> tuple[bool, str]:
    """Official path: gold resolves; no patch is unresolved and fails exactly FAIL_TO_PASS."""
    from swerl.grading import docker_factory, evaluate, grade, judge

    factory = docker_factory(timeout, run_id)
    g = grade(inst, inst.patch, sandbox_factory=factory, timeout=timeout)
    if g.status.value != "resolved":
        return False, f"gold {g.status.value}: {g.error or ','.join(g.failed_tests)[:200]}"
    ev = evaluate(inst, "", factory, timeout)
    if "fatal:" in ev.log.split(START_TEST_OUTPUT)[0]:  # e.g. the image's /testbed is not at base_commit
        return False, f"image repository broken: {ev.log.split(START_TEST_OUTPUT)[0][-200:]}"
    status, smap, _ = judge(inst, "", ev.log)
    if status.value != "unresolved":
        return False, f"no patch {status.value}"
    failing = {t for t in [*inst.FAIL_TO_PASS, *inst.PASS_TO_PASS] if smap.get(t) not in PASSED}
    if failing != set(inst.FAIL_TO_PASS):
        return False, "no-patch run disagrees with the probe runs"
    return True, ""


def _check_chunk(rows: list[dict], timeout: float, run_id: str | None = None) -> list[tuple[str, bool, str]]:
    out = []
    for row in rows:
        inst = Instance.from_dict(row)
        try:
            ok, why = check_one(inst, timeout, run_id)
        except Exception as e:
            ok, why = False, f"infra: {e}"[:200]
        out.append((inst.instance_id, ok, why))
    return out


def check_all(
    instances: list[Instance], workers: int, use_ray: bool, timeout: float = 300.0, chunk: int = 10
) -> dict[str, tuple[bool, str]]:
    """``check_one`` over every instance, ``workers`` chunks at a time (Ray tasks, or threads).

    Each chunk has a deadline (two grades per task, each bounded by ``timeout``); a
    chunk that outlives it or whose worker died is checked again one task per call,
    so a lost container costs the task it held, never the run.
    """
    from swerl.sandbox.base import default_run_id
    from swerl.tasks.synth.runs import GRACE, bounded, reap_run

    rows = [i.to_dict() for i in instances]
    results: dict[str, tuple[bool, str]] = {}
    todo = rows
    for size in (chunk, 1):
        parts = [todo[i : i + size] for i in range(0, len(todo), size)]
        run = default_run_id()
        calls = [
            (_check_chunk, (p, timeout, f"{run}-c{n}"), 2 * timeout * len(p) + GRACE)
            for n, p in enumerate(parts)
        ]
        failed: list[dict] = []
        for n, res in bounded(calls, workers, use_ray, on_abandon=lambda n, run=run: reap_run(f"{run}-c{n}")):
            if isinstance(res, Exception):
                log.warning("official check of %d task(s) failed: %s", len(parts[n]), res)
                if size == 1:
                    results[parts[n][0]["instance_id"]] = (False, f"infra: {res}"[:200])
                failed += parts[n]
                continue
            for iid, ok, why in res:
                results[iid] = (ok, why)
        todo = failed
        if not todo:
            break
    return results


def build_images(
    repo: Repo, items: list[tuple[Instance, Candidate]], bundle: Path, repo_img: str | None, workers: int
) -> None:
    """Injected tasks: thin COPY layers on the repo image; mined ones: the generic bundle recipe."""
    from swerl.sandbox.docker import connect
    from swerl.tasks.images import build_task_images
    from swerl.tasks.synth.images import task_image

    client = connect()
    injected = [inst for inst, c in items if c.mutant is not None]
    mined = [inst for inst, c in items if c.mutant is None]
    if injected and repo_img:
        with ThreadPoolExecutor(max(1, workers)) as pool:
            list(pool.map(lambda i: task_image(i, repo, bundle, repo_img, repo.head, client), injected))
    if mined:
        build_task_images(mined, client=client, bundles=[bundle.parent])


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
) -> SynthReport:
    """Synthesize a suite from ``repos`` (see :func:`swerl.tasks.synth.repo.prepare` for the specs) into ``out``."""
    import tempfile

    out = Path(out)
    writer = writer or TemplateWriter()
    if hasattr(writer, "check"):  # a model writer: an unreachable server is one clear error, before any work
        writer.check()
    started = time.monotonic()
    report = SynthReport(str(out))
    report.repos = [RepoReport(spec) for spec in repos]
    tmp = tempfile.TemporaryDirectory(prefix="swerl-synth-") if workdir is None else None
    work = Path(workdir or tmp.name)  # type: ignore[union-attr]
    opts = dict(methods=methods, max_candidates=max_candidates, per_function=per_function, workers=workers,
                use_ray=use_ray, writer=writer, seed=seed, max_test_seconds=max_test_seconds, check=check)  # fmt: skip
    kept: dict[int, list[Instance]] = {}

    def one(n: int) -> None:
        rr = report.repos[n]
        try:
            kept[n] = _synthesize_one(repos[n], rr, out, work / f"r{n}", **opts)  # type: ignore[arg-type]
        except Exception as e:  # one repository's failure is reported, the others go on
            log.warning("synthesis from %s failed: %s", repos[n], e)
            rr.error = rr.error or f"{type(e).__name__}: {e}"[:500]

    if use_ray:  # once, before the threads (ray.init is not safe to race)
        from swerl.cluster.ray_init import ensure_ray

        ensure_ray()
    try:
        # repositories side by side: one's probe overlaps another's image builds and official checks
        with ThreadPoolExecutor(
            max(1, min(parallel_repos, len(repos))), thread_name_prefix="swerl-synth"
        ) as pool:
            list(pool.map(one, range(len(repos))))
        tasks = [inst for n in sorted(kept) for inst in kept[n]]
        report.validated = len(tasks)
        report.seconds = time.monotonic() - started
        write_suite(out, tasks, report.to_dict())
    finally:
        if tmp is not None:
            tmp.cleanup()
    return report


def _synthesize_one(
    spec: str,
    rr: RepoReport,
    out: Path,
    work: Path,
    *,
    methods: tuple[str, ...],
    max_candidates: int | None,
    per_function: int,
    workers: int,
    use_ray: bool,
    writer: Writer,
    seed: int,
    max_test_seconds: float,
    check: bool,
) -> list[Instance]:
    """One repository: prepare, mine and/or inject, records, images, official check; the tasks that pass."""
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
        return []
    rr.repo = repo.name
    found: list[Candidate] = []
    repo_img = None
    if "mine" in methods and int(repo_git_count(repo)) > 1:
        examined, cands = mine(repo, history_image(repo, client), test_command(repo), limit=max_candidates)
        rr.method_counts["mine"] = {"candidates": examined, "probed_ok": len(cands)}
        found += cands
    rr.seconds["mine"] = time.monotonic() - t0
    if "inject" in methods and repo.sources:
        t1 = time.monotonic()
        repo_img = repo_image(repo, client)
        try:
            base = baseline(repo, repo_img, use_ray=use_ray)
        except Exception as e:
            rr.error = f"baseline: {e}"[:500]
            base = None
        rr.seconds["baseline"] = time.monotonic() - t1
        if base is not None and not base.stable:  # said, not silent: nothing to inject against
            rr.error = (
                f"baseline: no test passed in all runs ({base.flaky} flaky; {base.seconds:.0f} s per run)"
            )
        if base is not None and base.stable:
            st = InjectStats()
            cands = candidates(repo, repo_img, base, per_function=per_function, max_candidates=max_candidates,
                               workers=workers, seed=seed, use_ray=use_ray, stats=st,
                               max_test_seconds=max_test_seconds)  # fmt: skip
            rr.method_counts["inject"] = {"generated": st.generated, "candidates": st.probed, "probed_ok": len(cands),
                                          "probe_runs": st.runs, "batch_failures": st.batch_failures}  # fmt: skip
            rr.rejected = dict(st.rejected)
            found += cands
        rr.seconds["inject_probe"] = time.monotonic() - t1
    if not found:
        return []
    t2 = time.monotonic()
    items, seen = [], set()
    for c in found:
        inst = to_instance(c, None)
        if inst.patch in seen:  # the same fix twice is one task
            rr.rejected["duplicate"] = rr.rejected.get("duplicate", 0) + 1
            continue
        seen.add(inst.patch)
        items.append((inst, c))
    rr.seconds["records"] = time.monotonic() - t2
    t2 = time.monotonic()
    bundle = write_bundle(repo, out)
    build_images(repo, items, bundle, repo_img, workers)
    rr.seconds["images"] = time.monotonic() - t2
    t3 = time.monotonic()
    verdicts = check_all([i for i, _ in items], workers, use_ray) if check else {}
    rr.seconds["official_check"] = time.monotonic() - t3
    kept = []
    for inst, c in items:
        ok, why = verdicts.get(inst.instance_id, (not check, ""))
        counts = rr.method_counts.setdefault(c.method, {})
        if ok:
            kept.append((inst, c))
            counts["validated"] = counts.get("validated", 0) + 1
        else:
            key = "official_" + why.split(":")[0].replace(" ", "_")
            rr.rejected[key] = rr.rejected.get(key, 0) + 1
    t4 = time.monotonic()
    with ThreadPoolExecutor(max(1, workers)) as pool:  # a model writer is a network call per task
        list(pool.map(lambda ic: write_statement(ic[0], ic[1], writer), kept))
    rr.seconds["statements"] = time.monotonic() - t4
    modes = Counter(inst.extra["synth"]["statement"]["mode"] for inst, _ in kept)
    rr.statements = dict(modes)
    return [inst for inst, _ in kept]


def repo_git_count(repo: Repo) -> str:
    from swerl.tasks.synth.repo import git

    return git(repo.path, "rev-list", "--count", repo.head).strip()
