"""`python -m swerl.bench synth`: validated tasks per hour from real libraries, and yield per method.

Synthesizes from PyPI sdists (bug injection) and the bundled projects' histories
(mining), then prints candidates/hour, validated/hour, the yield of each method and
where the time went. Side by side: the probe's cost per test run (many mutants per
sandbox, collected once, a fork per run) against a fresh container per run of the
task's test files (what validating each candidate in its own container costs),
measured on a sample of the validated tasks; the ratio is printed.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import statistics
import threading
import time
from pathlib import Path

DEFAULT_REPOS = ("pypi:toolz==1.2.0", "pypi:cachetools==8.0.2", "pypi:boltons==26.2.0")
BUNDLED = ("swerl__textkit", "swerl__intervals", "swerl__tinyconf")


def _sample_load(loads: list[float], stop: threading.Event, every: float = 15.0) -> None:
    """The 1-minute load average every ``every`` s: the rate means little without the box's load beside it."""
    while not stop.wait(every):
        loads.append(os.getloadavg()[0])


def container_run_seconds(instances: list, n: int) -> list[float]:
    """Seconds of one fresh-container run of each of ``n`` tasks' eval scripts (the bug in, no patch)."""
    from swerl.grading import docker_factory, evaluate

    factory = docker_factory(300)
    out = []
    for inst in instances[:n]:
        t = time.monotonic()
        evaluate(inst, "", factory, 300)
        out.append(time.monotonic() - t)
    return out


NOOP = "diff --git a/SYNTH_NOTE b/SYNTH_NOTE\nnew file mode 100644\n--- /dev/null\n+++ b/SYNTH_NOTE\n@@ -0,0 +1 @@\n+x\n"
"""An empty attempt as swebench's harness can take it (it refuses an empty patch): a file no test reads."""


def harness_sample(instances: list, n: int, seed: int = 0) -> dict:
    """Grade ``n`` validated tasks (spread over repositories) with swebench's own ``run_instance``: gold and empty."""
    import random
    import tempfile

    from swerl.bench.grade import _remove_official_containers, official_grade
    from swerl.sandbox.docker import connect

    rng = random.Random(seed)
    by_repo: dict[str, list] = {}
    for inst in instances:
        by_repo.setdefault(inst.repo, []).append(inst)
    picked = []
    while len(picked) < n and any(by_repo.values()):
        for insts in by_repo.values():
            if insts and len(picked) < n:
                picked.append(insts.pop(rng.randrange(len(insts))))
    client = connect()
    rows = []
    cwd = os.getcwd()
    with tempfile.TemporaryDirectory(prefix="swerl-harness-") as logs:
        os.chdir(logs)  # run_instance writes its logs under the cwd
        try:
            for k, inst in enumerate(picked):
                run = f"synthbench-{os.getpid()}-{k}"
                try:
                    gold = official_grade(inst, inst.patch, client, run)
                    empty = official_grade(inst, NOOP, client, run + "e")
                finally:
                    for r in (run, run + "e"):
                        _remove_official_containers(client, r)
                rows.append({"instance_id": inst.instance_id, "gold": gold, "empty": empty})
        finally:
            os.chdir(cwd)
    agree = sum(r["gold"] == "resolved" and r["empty"] == "unresolved" for r in rows)
    return {"graded": len(rows), "agree": agree, "rows": rows}


def budget_figures(report: object) -> dict:
    """Within a time budget: tasks validated by its end, their hourly rate, and how long the in-flight ones took after."""
    budget = report.budget_seconds  # type: ignore[attr-defined]
    if budget is None:
        return {}
    return {
        "budget_seconds": budget,
        "validated_in_budget": report.validated_in_budget,  # type: ignore[attr-defined]
        "validated_in_budget_per_hour": round(report.validated_in_budget * 3600 / budget),  # type: ignore[attr-defined]
        "drain_seconds": round(max(0.0, report.seconds - budget), 1),  # type: ignore[attr-defined]
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m swerl.bench synth", description=__doc__)
    ap.add_argument("--repos", nargs="+", default=list(DEFAULT_REPOS), help="libraries for injection")
    ap.add_argument("--no-history", action="store_true", help="skip mining the bundled projects' histories")
    ap.add_argument(
        "--max-candidates", type=int, default=None, help="mutants probed per library (default: all)"
    )
    ap.add_argument("--per-function", type=int, default=3)
    ap.add_argument("--workers", type=int, default=3, help="sandboxes probing at once, and as many checking")
    ap.add_argument("--parallel-repos", type=int, default=3, help="libraries prepared side by side")
    ap.add_argument("--batch", type=int, default=25, help="mutants probed per sandbox")
    ap.add_argument(
        "--seed", type=int, default=0, help="which mutants are sampled (another seed, other tasks)"
    )
    ap.add_argument(
        "--minutes",
        type=float,
        default=None,
        help="time budget: no batch of candidates starts past it, those in flight finish; the count "
        "validated within it and its hourly rate are reported",
    )
    ap.add_argument("--compare", type=int, default=5, help="tasks timed in a fresh container per run")
    ap.add_argument(
        "--harness-sample",
        type=int,
        default=0,
        help="validated tasks also graded by swebench's run_instance (gold must resolve, empty must not)",
    )
    ap.add_argument("--out", default="runs/bench-synth", help="where the suite is written")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)

    from swerl.resources import suites_dir
    from swerl.tasks.sources import load_tasks
    from swerl.tasks.synth import synthesize

    progress = logging.StreamHandler()  # stderr: "N validated at T s" every 25 tasks
    progress.setFormatter(logging.Formatter("%(asctime)s %(message)s"))
    synth_log = logging.getLogger("swerl.tasks.synth.pipeline")
    synth_log.addHandler(progress)
    synth_log.setLevel(logging.INFO)
    specs = list(args.repos)
    if not args.no_history:
        specs += [str(suites_dir() / "swerl-mini" / "repos" / f"{b}.bundle") for b in BUNDLED]
    load0 = os.getloadavg()
    loads: list[float] = []
    stop = threading.Event()
    sampler = threading.Thread(target=_sample_load, args=(loads, stop), daemon=True)
    sampler.start()
    t = time.monotonic()
    report = synthesize(specs, args.out, max_candidates=args.max_candidates, per_function=args.per_function,
                        workers=args.workers, parallel_repos=args.parallel_repos, minutes=args.minutes,
                        batch=args.batch, seed=args.seed)  # fmt: skip
    wall = time.monotonic() - t
    stop.set()
    load1 = os.getloadavg()
    per_method = report.per_method()
    candidates = sum(m.get("candidates", 0) for m in per_method.values())
    hours = wall / 3600
    insts = [i for i in load_tasks(Path(args.out) / "tasks.jsonl") if i.extra["synth"]["method"] == "inject"]
    probe_s = sum(r.seconds.get("probe", 0.0) for r in report.repos)
    runs = per_method.get("inject", {}).get("probe_runs", 0)
    fresh = container_run_seconds(insts, args.compare) if args.compare and insts else []
    data = {
        "wall_seconds": round(wall, 1),
        "candidates": candidates,
        "validated": report.validated,
        "candidates_per_hour": round(candidates / hours),
        "validated_per_hour": round(report.validated / hours),
        **budget_figures(report),
        "per_method": {
            m: c | {"yield": round(c.get("validated", 0) / max(1, c.get("candidates", 0)), 3)}
            for m, c in per_method.items()
        },
        "stage_seconds": {r.repo: {k: round(v, 1) for k, v in r.seconds.items()} for r in report.repos},
        "rejected": {r.repo: r.rejected for r in report.repos},
        "errors": {r.repo: r.error for r in report.repos if r.error},
        "notes": {r.repo: r.notes for r in report.repos if r.notes},
        "examples": {r.repo: r.examples for r in report.repos if r.examples},
        "probe_seconds_per_run": round(probe_s / runs, 3) if runs else None,
        "fresh_container_seconds_per_run": round(statistics.median(fresh), 3) if fresh else None,
        "loadavg_start_end": [round(load0[0], 1), round(load1[0], 1)],
        "loadavg_mean": round(statistics.mean(loads), 1) if loads else None,
        "statements": {r.repo: r.statements for r in report.repos},
        "cpus": os.cpu_count(),
    }
    if args.harness_sample and report.validated:
        data["harness"] = harness_sample(load_tasks(Path(args.out) / "tasks.jsonl"), args.harness_sample)
    if data["probe_seconds_per_run"] and data["fresh_container_seconds_per_run"]:
        data["ratio_fresh_over_probe"] = round(
            data["fresh_container_seconds_per_run"] / data["probe_seconds_per_run"], 1
        )
    if args.json:
        print(json.dumps(data, indent=2))
        return 0
    print(f"synth bench: {len(specs)} repositories, {data['cpus']} CPUs, load average {load0[0]:.1f} -> {load1[0]:.1f} "
          f"(mean {data['loadavg_mean']}) "
          "(a shared box: other work runs beside this)")  # fmt: skip
    print(f"wall {wall:.0f} s; candidates {candidates} ({data['candidates_per_hour']}/h); "
          f"validated {report.validated} ({data['validated_per_hour']}/h)")  # fmt: skip
    if args.minutes is not None:
        print(f"budget {args.minutes:g} min: {data['validated_in_budget']} validated within it "
              f"({data['validated_in_budget_per_hour']}/h); in flight at its end and finished after: "
              f"{report.validated - data['validated_in_budget']} more in {data['drain_seconds']:.0f} s")  # fmt: skip
    for m, c in data["per_method"].items():
        print(f"  {m:7s} candidates {c.get('candidates', 0):5d}  probe ok {c.get('probed_ok', 0):5d}  "
              f"validated {c.get('validated', 0):5d}  yield {c['yield']:.1%}")  # fmt: skip
    for repo, secs in data["stage_seconds"].items():
        print(f"  {repo}: {secs}  rejected {data['rejected'][repo]}")
    if "ratio_fresh_over_probe" in data:
        print(f"per test run: probe {data['probe_seconds_per_run']:.3f} s, fresh container "
              f"{data['fresh_container_seconds_per_run']:.3f} s -> ratio {data['ratio_fresh_over_probe']}x")  # fmt: skip
    if "harness" in data:
        h = data["harness"]
        print(
            f"swebench run_instance on a sample: {h['agree']}/{h['graded']} gold resolved and empty unresolved"
        )
    for repo, err in data["errors"].items():
        print(f"  {repo}: ERROR {err}")
    for repo, notes in data["notes"].items():
        print("\n".join(f"  {repo}: note: {n}" for n in notes))
    return 0
