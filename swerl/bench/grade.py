"""Time to grade gold patches: swerl's ``grade`` against swebench's ``run_instance``.

Same instances, same local images, same patches, one at a time. The official
path runs with the TestSpec from ``make_test_spec`` and a docker client; it only
pulls when an image is missing, so it stays offline here. Statuses must agree.
swerl's strict mode is timed beside its official mode (goal: < 10% more per grade).

``--tasks FILE`` grades any task file (its ``repos/`` beside it holds the bundles);
``--real-size`` builds and grades a task with hundreds of tests and seconds of test
time (``swerl.bench._realsize``). Beside each grade: the tests' own run time (pytest's
summary line, measured inside the sandbox) for both sides, and where swerl's time
beyond the tests went (sandbox start, patch apply, eval script, parse, close).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import statistics
import tempfile
import time
from pathlib import Path

from swerl.bench._stats import LoadWatch, table
from swerl.grading import docker_factory, grade
from swerl.sandbox.docker import connect, reap
from swerl.tasks.images import build_task_images
from swerl.tasks.instance import SUITES_DIR, Instance, select
from swerl.tasks.sources import load_tasks

PYTEST_SUMMARY = re.compile(r"^=+ .*\bin ([0-9]+(?:\.[0-9]+)?)s\b.*=+$", re.M)
"""pytest's last line ("=== 480 passed in 3.91s ==="): the tests' own time, taken inside the sandbox."""
OVERHEAD_STEPS = ("start", "apply", "eval", "judge", "close")
"""swerl's timings keys on the shared path (eval includes the tests)."""


def own_test_time(log: str) -> float | None:
    """Seconds pytest reports for its run in ``log`` (the last summary line), or None."""
    found = PYTEST_SUMMARY.findall(log)
    return float(found[-1]) if found else None


def official_log(run_id: str, inst: Instance) -> str:
    """The test output run_instance wrote under the cwd, or "" when it wrote none."""
    path = Path("logs/run_evaluation") / run_id / "gold" / inst.instance_id / "test_output.txt"
    return path.read_text(errors="replace") if path.is_file() else ""


STRICT_STEPS = ("scrub", "allowlist")
"""What strict mode adds to a grade in steps of its own (its timings keys); the history scrub
and both tree listings run inside ``apply`` (one command with the patch's apply; ``scrub`` is
its own step only when there is no patch), the runner's set-up and the verdict's HMAC chain
inside ``eval``, beside the tests."""


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


def _fmt(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f}"


def _ratio(total: float, tests: float | None) -> str:
    return "-" if not tests else f"{total / tests:.2f}"


def wrong_patches(suite: str) -> list[dict]:
    path = SUITES_DIR / suite / "wrong_patches.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.is_file() else []


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m swerl.bench grade", description=__doc__)
    parser.add_argument("--suite", "--tasks", default="swerl-mini", help="suite name or task file")
    parser.add_argument("--real-size", action="store_true", help="grade a generated task of ~500 tests")
    parser.add_argument("--ids", nargs="*", help="instance ids (default: the first --n)")
    parser.add_argument("--n", type=int, default=3, help="instances to grade (0: all)")
    parser.add_argument("--wrong", action="store_true", help="also grade the suite's wrong patches")
    args = parser.parse_args(argv)

    if args.real_size:
        from swerl.bench._realsize import build

        args.suite = str(build())
    bundles = None
    if Path(args.suite).is_file():  # a task file: its bundles beside it, then the suites'
        bundles = [Path(args.suite).resolve().parent / "repos", *sorted(SUITES_DIR.glob("*/repos"))]
    watch = LoadWatch()
    instances = load_tasks(args.suite)
    instances = select(instances, args.ids) if args.ids else instances[: args.n or None]
    pairs = [(inst, inst.patch, "gold") for inst in instances]
    if args.wrong:
        by_id = {i.instance_id: i for i in load_tasks(args.suite)}
        pairs += [(by_id[w["instance_id"]], w["patch"], "wrong") for w in wrong_patches(args.suite)]
        instances = list({p[0].instance_id: p[0] for p in pairs}.values())
    client = connect(timeout=1800)
    build_task_images(instances, client=client, bundles=bundles)
    run_id = f"bench-grade-{os.getpid()}"
    factory = docker_factory(timeout=600, run_id=run_id)
    rows, totals, own = [], {"swerl": 0.0, "strict": 0.0, "swebench": 0.0}, []
    timing_rows, tests_ours, tests_theirs, overheads = [], [], [], []
    mismatches = 0
    pair_ratios: list[float] = []  # strict / official within each pair: what load shifts, both sides share
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
                    else:
                        timings, t_tests = result.timings, own_test_time(result.log)
                ours, t_ours = status["official"], took["official"]
                pair_ratios.append(took["strict"] / took["official"])
                t = time.perf_counter()
                theirs = official_grade(inst, patch, client, f"{run_id}-{kind}")
                t_theirs = time.perf_counter() - t
                t_tests_theirs = own_test_time(official_log(f"{run_id}-{kind}", inst))
                if t_tests is not None:
                    tests_ours.append(t_tests)
                    overheads.append(t_ours - t_tests)
                if t_tests_theirs is not None:
                    tests_theirs.append(t_tests_theirs)
                timing_rows.append(
                    [f"{inst.instance_id} ({kind})", _fmt(t_tests), t_ours, _ratio(t_ours, t_tests),
                     _fmt(t_tests_theirs), t_theirs, _ratio(t_theirs, t_tests_theirs), t_theirs / t_ours,
                     *(timings.get(k, 0.0) for k in OVERHEAD_STEPS)]
                )  # fmt: skip
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

    watch.stop()
    print(
        table(["instance", "swerl", "swerl s", "strict", "strict s", "swebench", "swebench s", "same"], rows)
    )
    header = ["instance", "tests s", "swerl s", "/tests", "official tests s", "official s", "/tests",
              "official/swerl", *(f"{k} s" for k in OVERHEAD_STEPS)]  # fmt: skip
    print(table(header, timing_rows))
    if overheads:
        print(
            f"tests' own time {statistics.median(tests_ours):.2f} s in swerl's sandbox"
            + (f", {statistics.median(tests_theirs):.2f} s in run_instance's" if tests_theirs else "")
            + f"; swerl's time beyond the tests {statistics.median(overheads):.2f} s per grade (median)"
        )
    ratio = totals["swebench"] / totals["swerl"] if totals["swerl"] else float("inf")
    n = len(pairs)
    print(
        f"mean per grade: swerl {totals['swerl'] / n:.2f} s, swebench run_instance {totals['swebench'] / n:.2f} s; "
        f"ratio {ratio:.1f}x; statuses identical: {'yes' if not mismatches else f'NO ({mismatches})'}"
    )
    print(watch.report())
    print(watch.verdict(">= 2x, identical statuses", ratio >= 2 and not mismatches))
    if tests_ours and len(tests_ours) == n:
        within = all(r[2] <= 1.5 * float(r[1]) for r in timing_rows)
        print(watch.verdict("grade within 1.5x of the tests' own time", within))
        print(watch.verdict(">= 4x faster than run_instance", ratio >= 4 and not mismatches))
    extra = totals["strict"] / totals["swerl"] - 1 if totals["swerl"] else 0.0
    if pair_ratios:
        q = statistics.quantiles(pair_ratios, n=4) if len(pair_ratios) > 1 else [pair_ratios[0]] * 3
        print(
            "strict/official per pair (run back to back, order alternating): "
            + ", ".join(f"{r - 1:+.1%}" for r in pair_ratios)
            + f"; median {statistics.median(pair_ratios) - 1:+.1%}, quartiles {q[0] - 1:+.1%}..{q[2] - 1:+.1%}"
        )
    print(
        f"strict mode: {totals['strict'] / n:.2f} s per grade against official's {totals['swerl'] / n:.2f} s "
        f"({extra:+.1%}); goal (< +10%): {'met' if extra < 0.10 else 'NOT met'}; its own steps "
        f"(reverts and ignore checks of the allowlist; the scrub and listings run in the apply command) take "
        f"{statistics.median(own) * 1000:.0f} ms per grade (median)"
    )
    return 1 if mismatches else 0
