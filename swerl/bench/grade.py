"""Time to grade gold patches: swerl's ``grade`` against swebench's ``run_instance``.

Same instances, same local images, same patches, one at a time. The official
path runs with the TestSpec from ``make_test_spec`` and a docker client; it only
pulls when an image is missing, so it stays offline here. Statuses must agree.
swerl's strict mode is timed beside its official mode (goal: < 10% more per grade).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import tempfile
import time

from swerl.bench._stats import table
from swerl.grading import docker_factory, grade
from swerl.sandbox.docker import connect, reap
from swerl.tasks.images import build_task_images
from swerl.tasks.instance import SUITES_DIR, Instance, load_instances, select

STRICT_STEPS = ("scrub", "filter", "restore")
"""What strict mode adds to a grade (its timings keys); the rest is the shared path."""


def official_grade(inst: Instance, patch: str, client: object, run_id: str) -> str:
    """Status from ``swebench.harness.run_evaluation.run_instance`` (logs in the cwd)."""
    from swebench.harness.run_evaluation import run_instance

    pred = {"instance_id": inst.instance_id, "model_patch": patch, "model_name_or_path": "gold"}
    out = run_instance(inst.test_spec(), pred, client, run_id, timeout=600)
    if out is None:  # run_instance logs the error and returns nothing
        return "error"
    return "resolved" if out[1][inst.instance_id]["resolved"] else "unresolved"


def _remove_official_containers(client: object, run_id: str) -> None:
    """run_instance names its containers ``sweb.eval.<id>.<run_id>``; remove any it left."""
    for c in client.containers.list(all=True, filters={"name": run_id}):  # type: ignore[attr-defined]
        c.remove(force=True)


def wrong_patches(suite: str) -> list[dict]:
    path = SUITES_DIR / suite / "wrong_patches.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.is_file() else []


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m swerl.bench grade", description=__doc__)
    parser.add_argument("--suite", default="swerl-mini", help="suite name or task file")
    parser.add_argument("--ids", nargs="*", help="instance ids (default: the first --n)")
    parser.add_argument("--n", type=int, default=3, help="instances to grade (0: all)")
    parser.add_argument("--wrong", action="store_true", help="also grade the suite's wrong patches")
    args = parser.parse_args(argv)

    instances = load_instances(args.suite)
    instances = select(instances, args.ids) if args.ids else instances[: args.n or None]
    pairs = [(inst, inst.patch, "gold") for inst in instances]
    if args.wrong:
        by_id = {i.instance_id: i for i in load_instances(args.suite)}
        pairs += [(by_id[w["instance_id"]], w["patch"], "wrong") for w in wrong_patches(args.suite)]
        instances = list({p[0].instance_id: p[0] for p in pairs}.values())
    client = connect(timeout=1800)
    build_task_images(instances, client=client)
    run_id = f"bench-grade-{os.getpid()}"
    factory = docker_factory(timeout=600, run_id=run_id)
    rows, totals, own = [], {"swerl": 0.0, "strict": 0.0, "swebench": 0.0}, []
    mismatches = 0
    cwd = os.getcwd()
    try:
        with tempfile.TemporaryDirectory(prefix="swerl-bench-") as tmp:
            os.chdir(tmp)  # run_instance writes logs/run_evaluation/... relative to the cwd
            for i, (inst, patch, kind) in enumerate(pairs):
                # official and strict alternate which goes first, so drift on a noisy machine cancels
                modes = ("official", "strict") if i % 2 == 0 else ("strict", "official")
                status, took = {}, {}
                for mode in modes:
                    t = time.perf_counter()
                    result = grade(inst, patch, sandbox_factory=factory, mode=mode)
                    took[mode] = time.perf_counter() - t
                    status[mode] = result.status.value
                    if mode == "strict":
                        own.append(sum(result.timings.get(k, 0.0) for k in STRICT_STEPS))
                ours, t_ours = status["official"], took["official"]
                t = time.perf_counter()
                theirs = official_grade(inst, patch, client, f"{run_id}-{kind}")
                t_theirs = time.perf_counter() - t
                totals["swerl"] += t_ours
                totals["strict"] += took["strict"]
                totals["swebench"] += t_theirs
                same = ours == theirs
                mismatches += not same
                rows.append(
                    [f"{inst.instance_id} ({kind})", ours, t_ours, status["strict"], took["strict"], theirs, t_theirs,
                     "yes" if same else "NO"]
                )  # fmt: skip
                print(
                    f"{inst.instance_id} ({kind}): swerl {ours} {t_ours:.2f}s, swebench {theirs} {t_theirs:.2f}s",
                    flush=True,
                )
    finally:
        os.chdir(cwd)
        reap(run_id, client=client)
        with contextlib.suppress(Exception):
            _remove_official_containers(client, run_id)

    print(
        table(["instance", "swerl", "swerl s", "strict", "strict s", "swebench", "swebench s", "same"], rows)
    )
    ratio = totals["swebench"] / totals["swerl"] if totals["swerl"] else float("inf")
    n = len(pairs)
    print(
        f"mean per grade: swerl {totals['swerl'] / n:.2f} s, swebench run_instance {totals['swebench'] / n:.2f} s; "
        f"ratio {ratio:.1f}x; statuses identical: {'yes' if not mismatches else f'NO ({mismatches})'}"
    )
    print(f"goal (>= 2x, identical statuses): {'met' if ratio >= 2 and not mismatches else 'NOT met'}")
    extra = totals["strict"] / totals["swerl"] - 1 if totals["swerl"] else 0.0
    print(
        f"strict mode: {totals['strict'] / n:.2f} s per grade against official's {totals['swerl'] / n:.2f} s "
        f"({extra:+.1%}); goal (< +10%): {'met' if extra < 0.10 else 'NOT met'}; its own steps "
        f"(history scrub, patch filter, restore) take {statistics.median(own) * 1000:.0f} ms per grade (median)"
    )
    return 1 if mismatches else 0
