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
from swerl.tasks.synth.suite import to_instance, write_bundle, write_suite

log = logging.getLogger(__name__)
PASSED = ("PASSED", "XFAIL")


@dataclass
class RepoReport:
    repo: str
    method_counts: dict[str, dict[str, int]] = field(default_factory=dict)
    """method -> {"candidates": probed, "probed_ok": survived the probe, "validated": passed the official check}."""
    rejected: dict[str, int] = field(default_factory=dict)
    seconds: dict[str, float] = field(default_factory=dict)
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


def check_one(inst: Instance, timeout: float = 300.0) -> tuple[bool, str]:
    """Official path: gold resolves; no patch is unresolved and fails exactly FAIL_TO_PASS."""
    from swerl.grading import docker_factory, evaluate, grade, judge

    factory = docker_factory(timeout)
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


def _check_chunk(rows: list[dict], timeout: float) -> list[tuple[str, bool, str]]:
    out = []
    for row in rows:
        inst = Instance.from_dict(row)
        try:
            ok, why = check_one(inst, timeout)
        except Exception as e:
            ok, why = False, f"infra: {e}"[:200]
        out.append((inst.instance_id, ok, why))
    return out


def check_all(
    instances: list[Instance], workers: int, use_ray: bool, timeout: float = 300.0, chunk: int = 10
) -> dict[str, tuple[bool, str]]:
    """``check_one`` over every instance, ``workers`` at a time (Ray tasks, or threads)."""
    rows = [i.to_dict() for i in instances]
    parts = [rows[i : i + chunk] for i in range(0, len(rows), chunk)]
    results: dict[str, tuple[bool, str]] = {}
    if use_ray:
        import ray

        from swerl.cluster.ray_init import ensure_ray

        ensure_ray()
        remote = ray.remote(num_cpus=0)(_check_chunk)
        pending = []
        for part in parts:
            pending.append(remote.remote(part, timeout))
            if len(pending) >= workers:
                done, pending = ray.wait(pending, num_returns=1)
                for iid, ok, why in ray.get(done[0]):
                    results[iid] = (ok, why)
        for ref in pending:
            for iid, ok, why in ray.get(ref):
                results[iid] = (ok, why)
    else:
        with ThreadPoolExecutor(max(1, workers)) as pool:
            for part in pool.map(lambda p: _check_chunk(p, timeout), parts):
                for iid, ok, why in part:
                    results[iid] = (ok, why)
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
) -> SynthReport:
    """Synthesize a suite from ``repos`` (see :func:`swerl.tasks.synth.repo.prepare` for the specs) into ``out``."""
    import tempfile

    from swerl.sandbox.docker import connect
    from swerl.tasks.synth.images import repo_image
    from swerl.tasks.synth.mine import history_image, mine
    from swerl.tasks.synth.suite import test_command

    out = Path(out)
    writer = writer or TemplateWriter()
    started = time.monotonic()
    report = SynthReport(str(out))
    kept: list[Instance] = []
    tmp = tempfile.TemporaryDirectory(prefix="swerl-synth-") if workdir is None else None
    work = Path(workdir or tmp.name)  # type: ignore[union-attr]
    client = connect()
    try:
        for spec in repos:
            t0 = time.monotonic()
            rr = RepoReport(spec)
            report.repos.append(rr)
            try:
                repo = prepare(spec, work)
            except Exception as e:
                rr.error = str(e)[:500]
                continue
            rr.repo = repo.name
            found: list[Candidate] = []
            repo_img = None
            if "mine" in methods and int(repo_git_count(repo)) > 1:
                examined, cands = mine(
                    repo, history_image(repo, client), test_command(repo), limit=max_candidates
                )
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
                if base is not None and base.stable:
                    st = InjectStats()
                    cands = candidates(repo, repo_img, base, per_function=per_function, max_candidates=max_candidates,
                                       workers=workers, seed=seed, use_ray=use_ray, stats=st,
                                       max_test_seconds=max_test_seconds)  # fmt: skip
                    rr.method_counts["inject"] = {"generated": st.generated, "candidates": st.probed, "probed_ok": len(cands),
                                                  "probe_runs": st.runs}  # fmt: skip
                    rr.rejected = dict(st.rejected)
                    found += cands
                rr.seconds["inject_probe"] = time.monotonic() - t1
            if not found:
                continue
            t2 = time.monotonic()
            items, seen = [], set()
            for c in found:
                inst = to_instance(c, writer)
                if inst.patch in seen:  # the same fix twice is one task
                    rr.rejected["duplicate"] = rr.rejected.get("duplicate", 0) + 1
                    continue
                seen.add(inst.patch)
                items.append((inst, c))
            bundle = write_bundle(repo, out)
            build_images(repo, items, bundle, repo_img, workers)
            rr.seconds["records_images"] = time.monotonic() - t2
            t3 = time.monotonic()
            verdicts = check_all([i for i, _ in items], workers, use_ray) if check else {}
            rr.seconds["official_check"] = time.monotonic() - t3
            for inst, c in items:
                ok, why = verdicts.get(inst.instance_id, (not check, ""))
                counts = rr.method_counts.setdefault(c.method, {})
                if ok:
                    kept.append(inst)
                    counts["validated"] = counts.get("validated", 0) + 1
                else:
                    key = "official_" + why.split(":")[0].replace(" ", "_")
                    rr.rejected[key] = rr.rejected.get(key, 0) + 1
        report.validated = len(kept)
        report.seconds = time.monotonic() - started
        write_suite(out, kept, report.to_dict())
    finally:
        if tmp is not None:
            tmp.cleanup()
    return report


def repo_git_count(repo: Repo) -> str:
    from swerl.tasks.synth.repo import git

    return git(repo.path, "rev-list", "--count", repo.head).strip()
