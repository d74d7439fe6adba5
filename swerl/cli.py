"""`swerl ...`: the command line.

Exit codes: 0 success, 1 the work ran and found failures (e.g. a task that does
not validate), 2 bad usage or config, 3 infrastructure unavailable.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import json
import logging
import os
import shlex
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from swerl import __version__
from swerl.errors import ConfigError, InfraError

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_INFRA = 0, 1, 2, 3

CLUSTER_MODULES = {
    "slurm": "swerl.cluster.slurm",
    "kuberay": "swerl.cluster.kuberay",
    "ray": "swerl.cluster.ray_jobs",
}
"""Each module defines ``add_cli(parser)``, adding its subcommands (``set_defaults(func=...)``)."""


def _emit(args: argparse.Namespace, data: object, text: str) -> None:
    print(json.dumps(data, indent=2, default=str) if getattr(args, "json", False) else text)


# ------------------------------------------------------------------ images
def cmd_images_build_base(args: argparse.Namespace) -> int:
    from swerl.tasks.images import build_base_image

    name = build_base_image(force=args.force)
    _emit(args, {"image": name}, f"base image: {name}")
    return EXIT_OK


# ------------------------------------------------------------------- tasks
def cmd_tasks_list(args: argparse.Namespace) -> int:
    from swerl.tasks.sources import load_tasks

    instances = load_tasks(args.suite, kind=args.source, accept=args.accept_deviation)
    rows = [{"instance_id": i.instance_id, "repo": i.repo, "image": i.image} for i in instances]
    text = "\n".join(f"{r['instance_id']:40s} {r['repo']:24s} {r['image']}" for r in rows)
    _emit(args, rows, text)
    return EXIT_OK


def cmd_tasks_build_images(args: argparse.Namespace) -> int:
    from swerl.tasks.images import build_images
    from swerl.tasks.sources import load_tasks
    from swerl.tasks.sources.synth import bundle_dirs

    tasks = load_tasks(args.suite, kind=args.source, accept=args.accept_deviation)
    images = build_images(tasks, force=args.force, bundles=bundle_dirs(args.suite))  # instance id -> image
    _emit(args, {"images": images}, "\n".join(f"{iid:40s} {image}" for iid, image in images.items()))
    return EXIT_OK


def cmd_tasks_validate(args: argparse.Namespace) -> int:
    from swerl.preflight import check_docker
    from swerl.tasks.sources import load_tasks
    from swerl.tasks.validate import count_mismatches, format_table, validate_suite

    instances = load_tasks(args.suite, kind=args.source, accept=args.accept_deviation)
    check_docker((i.image for i in instances), args.suite)  # exit 3, one line: not a table of MISMATCH
    rows = validate_suite(instances, out=None)
    _emit(args, [dataclasses.asdict(r) | {"ok": r.ok} for r in rows], format_table(rows))
    return EXIT_FAILED if count_mismatches(rows) else EXIT_OK


def cmd_tasks_synth(args: argparse.Namespace) -> int:
    from swerl.tasks.synth import ModelWriter, synthesize

    writer = (
        ModelWriter(args.model_url, args.model, os.environ.get("SWERL_SYNTH_API_KEY", ""))
        if args.model_url
        else None
    )
    methods = ("inject", "mine") if args.method == "both" else (args.method,)
    report = synthesize(
        args.repos, args.out, methods=methods, max_candidates=args.max_candidates,
        per_function=args.per_function, workers=args.workers, use_ray=not args.no_ray, writer=writer,
        minutes=args.minutes,
    )  # fmt: skip
    lines = []
    for r in report.repos:
        lines.append(f"{r.repo}: {r.method_counts} {('error: ' + r.error) if r.error else ''}".rstrip())
        if r.rejected:  # why candidates were not kept: the reason for a low yield
            lines.append(f"  rejected: {dict(sorted(r.rejected.items(), key=lambda kv: -kv[1]))}")
        lines += [f"  note: {note}" for note in r.notes]
    lines.append(f"{report.validated} validated tasks in {report.seconds:.0f} s -> {args.out}/tasks.jsonl")
    _emit(args, report.to_dict(), "\n".join(lines))
    return EXIT_OK if report.validated else EXIT_FAILED


def cmd_tasks_export(args: argparse.Namespace) -> int:
    from swerl.tasks.export import export_all
    from swerl.tasks.instance import select
    from swerl.tasks.sources import load_tasks

    tasks = load_tasks(args.suite, kind=args.source, accept=args.accept_deviation)
    tasks = select(tasks, args.task) if args.task else tasks
    paths = export_all(tasks, args.out, args.format)
    _emit(args, {"folders": [str(p) for p in paths]}, "\n".join(map(str, paths)))
    return EXIT_OK


# ----------------------------------------------------------------- rollout
def cmd_rollout(args: argparse.Namespace) -> int:
    from swerl.config import load_config
    from swerl.progress import RunProgress
    from swerl.rollout.run import Interrupted, format_summary, run_config

    if "=" in args.config and not Path(args.config).exists():  # `swerl rollout key=value`: the default config
        args.overrides.insert(0, args.config)
        args.config = "default"
    cfg = load_config(args.config, args.overrides)
    resume = shlex.join(["swerl", "rollout", args.config, *args.overrides])
    source = cfg.describe_source()
    try:
        summary = run_config(
            cfg,
            RunProgress(quiet=args.json),
            resume_anyway=args.resume_anyway,
            resume_hint=resume,
            source=source,
        )
    except Interrupted as e:
        print(f"swerl: {e.message}", file=sys.stderr)
        return 128 + e.signum
    _emit(args, summary, format_summary(summary))
    return EXIT_OK if summary["infra_errors"] == 0 else EXIT_FAILED


# -------------------------------------------------------------------- eval
def cmd_eval(args: argparse.Namespace) -> int:
    from swerl.evaluate import default_run_id, mode_run_id, run_eval
    from swerl.tasks.sources import load_tasks

    instances = load_tasks(args.tasks, kind=args.source, accept=args.accept_deviation)
    client = None
    if args.backend == "docker":
        from swerl.sandbox.docker import connect

        client = connect()  # fail fast (exit 3) before grading; the report lists leftovers with it
    run_id = args.run_id or default_run_id()
    progress = (lambda _line: None) if args.json else print
    output_dir = Path(args.output_dir or Path("runs", "eval", run_id))
    progress(f"output: {output_dir}/ (logs/run_evaluation/{run_id}/ and the report)")
    runs, failed = {}, {}
    modes = ("official", "strict") if args.grading == "both" else (args.grading,)
    for mode in modes:
        try:
            runs[mode] = run_eval(
                args.predictions,
                instances,
                run_id=mode_run_id(run_id, mode),
                out=output_dir,
                workers=args.workers,
                timeout=args.timeout,
                retries=args.retries,
                backend=args.backend,
                ray_address=args.ray_address,
                docker_client=client,
                progress=progress,
                grading=mode,
                executor=args.executor,
                tasks=args.tasks,
            )
        except ConfigError:
            raise  # the input is wrong for both halves alike
        except Exception as e:  # one half's failure never stops the other's grading
            if len(modes) == 1:
                raise
            failed[mode] = f"{type(e).__name__}: {e}"
            print(f"swerl: {mode} grading failed: {failed[mode]}", file=sys.stderr)
    if len(runs) == 2:
        official, strict = (runs[m].statuses for m in ("official", "strict"))
        for iid in sorted(i for i in official if official[i] != strict.get(i)):
            progress(f"{iid}: official {official[iid]}, strict {strict.get(iid)} (see both reports)")
    if args.json:
        out = {m: r.to_dict() for m, r in runs.items()} | {m: {"error": e} for m, e in failed.items()}
        print(json.dumps(out if len(modes) == 2 else out[args.grading], indent=2))
    return EXIT_FAILED if failed or any(r.infra_errors for r in runs.values()) else EXIT_OK


# ----------------------------------------------------------------- sandbox
def cmd_sandbox_shell(args: argparse.Namespace) -> int:
    """A line-by-line shell: each line is one ``sandbox.execute`` in /testbed."""
    from swerl.sandbox import SandboxConfig, make_sandbox
    from swerl.tasks.instance import select
    from swerl.tasks.sources import load_tasks

    (task,) = select(load_tasks(args.tasks, kind=args.source, accept=args.accept_deviation), [args.task])
    interactive = sys.stdin.isatty()
    cfg = SandboxConfig(timeout=args.timeout, workdir="/testbed")
    with make_sandbox(args.backend, task.image, cfg.replace(workdir=task.workdir)) as sb:
        if interactive:
            print(
                f"{task.instance_id} in {task.image}; each line is a fresh bash -c in /testbed; 'exit' ends"
            )
        while True:
            if interactive:
                print("$ ", end="", flush=True)
            line = sys.stdin.readline()
            if not line or line.strip() in ("exit", "logout"):
                break
            if not line.strip():
                continue
            r = _execute_interruptibly(sb, line.rstrip("\n"), task.workdir, args.timeout)
            if r is None:
                continue
            if args.json:
                data = {"command": line.strip(), "output": r.output, "returncode": r.returncode,
                        "duration": r.duration, "timed_out": r.timed_out}  # fmt: skip
                print(json.dumps(data), flush=True)
            else:
                sys.stdout.write(r.output if r.output.endswith("\n") or not r.output else r.output + "\n")
                if r.returncode:
                    print(f"[exit {r.returncode}]")
                sys.stdout.flush()
    return EXIT_OK


def _execute_interruptibly(sb: Any, command: str, cwd: str, timeout: float) -> Any:
    """Run one shell line; Ctrl-C kills it in the sandbox (its process group) and keeps the session.

    A second Ctrl-C while the kill is under way ends the session. Where the backend cannot reach
    the sandbox beside its channel, the command is left to end or reach --timeout instead.
    """
    import threading

    result: list[Any] = []

    def run() -> None:
        try:
            result.append(sb.execute(command, cwd=cwd))
        except BaseException as e:  # handed to the main thread, raised there
            result.append(e)

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    try:
        while worker.is_alive():
            worker.join(0.2)
    except KeyboardInterrupt:
        try:
            sb.interrupt()
        except InfraError as e:
            print(f"^C: cannot kill it ({e}); it runs on until it ends or its {timeout:g} s timeout "
                  "(the next line waits for that)", file=sys.stderr, flush=True)  # fmt: skip
            return None
        worker.join(30)
        print("^C: killed" if not worker.is_alive() else "^C: sent a kill; the next line waits for the command",
              file=sys.stderr, flush=True)  # fmt: skip
        return None
    if isinstance(result[0], BaseException):
        raise result[0]
    return result[0]


# ------------------------------------------------------------------ replay
def cmd_replay(args: argparse.Namespace) -> int:
    from swerl.env.swe_env import SWEEnv
    from swerl.episode import JsonlSink
    from swerl.rollout.replay import replay

    path = Path(args.episodes)
    if not path.is_file():
        raise ConfigError(f"{path}: no such episode file")
    episodes = [e for e in JsonlSink.read(path) if args.task_id in (None, e.task_id)]
    if args.limit:
        episodes = episodes[: args.limit]
    if not episodes:
        raise ConfigError(f"{path}: no episodes" + (f" of task {args.task_id}" if args.task_id else ""))
    tasks = args.tasks or _run_tasks(path) or "swerl-mini"
    rows = []
    env = SWEEnv(tasks)
    try:
        for ep in episodes:
            rep = replay(ep, env=env, from_step=args.from_step)
            rows.append(dataclasses.asdict(rep) | {"matches": rep.matches})
            if not args.json:
                print(_replay_line(rows[-1]), flush=True)
    finally:
        env.close()
    diverged = sum(not r["matches"] for r in rows)
    if args.json:
        print(json.dumps(rows, indent=2))
    else:
        print(f"{len(rows) - diverged}/{len(rows)} episode(s) replayed identically")
    return EXIT_FAILED if diverged else EXIT_OK


def _run_tasks(episodes: Path) -> str | None:
    """The tasks a run used, from the config.yaml `swerl rollout` wrote beside its episodes."""
    import yaml

    cfg = episodes.parent / "config.yaml"
    if not cfg.is_file():
        return None
    try:
        return (yaml.safe_load(cfg.read_text()) or {}).get("tasks")
    except yaml.YAMLError:
        return None


def _replay_line(row: dict) -> str:
    head = f"{row['task_id']} #{row['attempt']}: {row['compared']} step(s) compared, "
    head += f"reward {row['reward']} (recorded {row['recorded_reward']})"
    d = row["first_divergence"]
    if d is None:
        return head + (", identical" if row["matches"] else ", reward differs")
    return (
        f"{head}\n  first divergence at step {d['step']}: {d['action'][:120]}\n"
        f"  expected: {d['expected'][:200]!r}\n  actual:   {d['actual'][:200]!r}"
    )


# ------------------------------------------------------------------ report
def cmd_report(args: argparse.Namespace) -> int:
    from swerl.report import write_report

    out = write_report(args.run_dir, args.output_dir)
    text = "\n".join([f"{out['episodes']} episode(s) from {out['episodes_file']}", *out["plots"]])
    _emit(args, out, text)
    return EXIT_OK


# ---------------------------------------------------------------- sandboxes
def cmd_reap(args: argparse.Namespace) -> int:
    from swerl.sandbox.docker import reap, reapable

    if not (args.run_id or args.orphans or args.all):
        raise ConfigError(
            "say which sandboxes to remove: --run-id ID (one run's), --orphans (those whose creating "
            "process died) or --all (every swerl container on this daemon, other users' runs included); "
            "add --dry-run to list them first"
        )
    if args.dry_run:
        found = reapable(args.run_id, orphans_only=args.orphans)
        rows = [
            {"id": c["Id"][:12], "name": (c.get("Names") or ["?"])[0].lstrip("/"),
             "run_id": (c.get("Labels") or {}).get("swerl.run", ""), "status": c.get("Status", "")}
            for c in found
        ]  # fmt: skip
        text = "\n".join(f"{r['id']}  {r['name']:40s} {r['run_id']:32s} {r['status']}" for r in rows)
        _emit(args, {"would_remove": rows}, f"{text}\n{len(rows)} container(s) would be removed".lstrip())
        return EXIT_OK
    n = reap(args.run_id, orphans_only=args.orphans)
    _emit(args, {"removed": n}, f"removed {n} sandbox container(s)")
    return EXIT_OK


def cmd_demo(args: argparse.Namespace) -> int:
    """Start a sandbox on the base image and show what it can do."""
    from swerl.sandbox.base import SandboxConfig
    from swerl.sandbox.docker import DockerSandbox
    from swerl.tasks.images import build_base_image

    say = (lambda _line: None) if args.json else print
    image = build_base_image()
    t0 = time.monotonic()
    data: dict = {"image": image, "commands": []}
    with DockerSandbox(image, SandboxConfig(timeout=10)) as sb:
        data |= {"sandbox": sb.short_id, "start_ms": (time.monotonic() - t0) * 1000}
        say(
            f"sandbox {sb.short_id} of {image} started in {data['start_ms']:.0f} ms (no network, caps dropped)"
        )
        for cmd in (
            "python3 -c 'import sys; print(sys.version.split()[0])'",
            "git --version",
            "ls /sys/class/net",
        ):
            r = sb.execute(cmd)
            data["commands"].append(
                {"command": cmd, "output": r.output, "returncode": r.returncode, "ms": r.duration * 1000}
            )
            say(f"$ {cmd}\n{r.output.rstrip()}   [rc={r.returncode}, {r.duration * 1000:.1f} ms]")
        times = sorted(sb.execute("true").duration for _ in range(200))
        data["p50_ms_per_command"] = times[100] * 1000
        say(f"200 commands: p50 {data['p50_ms_per_command']:.2f} ms per command")
    if args.json:
        print(json.dumps(data, indent=2))
    return EXIT_OK


# ------------------------------------------------------------------ parser
TASKS_HELP = (
    "tasks: a bundled suite name, a suite directory, a SWE-bench-family JSON/JSONL file or dataset, "
    "or a Harbor task folder (or a folder of them); recognised by shape"
)


def _source_flag(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--source",
        default=None,
        metavar="KIND",
        help="force how the tasks are read: harbor, synth, swebench, or a SWE-bench family "
        "(swebench-pro, swe-gym, swe-smith, r2e-gym, swe-rebench)",
    )
    p.add_argument(
        "--accept-deviation",
        action="append",
        default=[],
        metavar="FIELD",
        help="run tasks although swerl cannot honour FIELD (a task.toml field such as environment.gpus, "
        "or a SWE-bench family's grading field); the deviation is recorded in each grade. Repeatable",
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="swerl", description="RL on software-engineering tasks.")
    parser.add_argument("-v", "--verbose", action="store_true", help="log progress")
    parser.add_argument("--version", action="version", version=f"swerl {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def add(
        parent, name: str, func: Callable[[argparse.Namespace], int], help: str
    ) -> argparse.ArgumentParser:
        p = parent.add_parser(name, help=help, description=help)
        p.add_argument("--json", action="store_true", help="machine-readable output")
        p.set_defaults(func=func)
        return p

    images = sub.add_parser("images", help="build images").add_subparsers(dest="sub", required=True)
    p = add(images, "build-base", cmd_images_build_base, "build the Debian base image (cached)")
    p.add_argument("--force", action="store_true", help="rebuild even if the image exists")

    tasks = sub.add_parser("tasks", help="task suites").add_subparsers(dest="sub", required=True)
    p = add(tasks, "list", cmd_tasks_list, "list the tasks of a suite")
    p.add_argument("suite", help=TASKS_HELP)
    _source_flag(p)
    p = add(tasks, "build-images", cmd_tasks_build_images, "build the task images of a suite (cached)")
    p.add_argument("suite", help=TASKS_HELP)
    p.add_argument("--force", action="store_true")
    _source_flag(p)
    p = add(
        tasks, "validate", cmd_tasks_validate,
        "check that gold (a Harbor task's solution/solve.sh) earns full reward and empty does not, per task",
    )  # fmt: skip
    p.add_argument("suite", help=TASKS_HELP)
    _source_flag(p)
    p = add(tasks, "export", cmd_tasks_export, "write tasks in another format (Harbor task folders)")
    p.add_argument("suite", help=TASKS_HELP)
    p.add_argument("--format", default="harbor", choices=("harbor",), help="output format (default: harbor)")
    p.add_argument("--out", required=True, help="directory to write one folder per task into")
    p.add_argument("--task", action="append", default=None, help="only this instance id (repeatable)")
    _source_flag(p)
    p = add(
        tasks,
        "synth",
        cmd_tasks_synth,
        "synthesize validated tasks from repositories (bug injection, history)",
    )
    p.add_argument(
        "repos", nargs="+", metavar="REPO", help="pypi:NAME[==VER], an sdist, a directory or a git bundle"
    )
    p.add_argument(
        "--out", required=True, help="suite directory to write (tasks.jsonl, swebench.jsonl, repos/)"
    )
    p.add_argument("--method", choices=("inject", "mine", "both"), default="both")
    p.add_argument(
        "--max-candidates", type=int, default=None, help="mutants probed per repository (default: all)"
    )
    p.add_argument("--per-function", type=int, default=3, help="mutants sampled per function")
    p.add_argument("--workers", type=int, default=2, help="sandboxes at once")
    p.add_argument("--no-ray", action="store_true", help="threads of this process instead of Ray tasks")
    p.add_argument(
        "--minutes",
        type=float,
        default=None,
        help="time budget: no batch of candidates starts past it, those in flight finish",
    )
    p.add_argument(
        "--model-url", help="OpenAI-compatible /v1 URL writing problem statements (default: template)"
    )
    p.add_argument("--model", default="default", help="model name for --model-url")

    p = add(sub, "rollout", cmd_rollout, "run a rollout config; episodes stream to OUTPUT_DIR/episodes.jsonl")
    p.add_argument(
        "config", nargs="?", default="default", help="YAML file or a name in configs/ (default: default)"
    )
    p.add_argument("overrides", nargs="*", help="key.sub=value overrides, e.g. rollout.attempts=4")
    p.add_argument(
        "--resume-anyway",
        action="store_true",
        help="resume a run in OUTPUT_DIR although its config changed (the old config is kept beside it)",
    )

    p = add(sub, "eval", cmd_eval, "grade a SWE-bench predictions file; write the harness's report")
    p.add_argument("predictions", help="JSON list or JSONL of {instance_id, model_name_or_path, model_patch}")
    p.add_argument("--tasks", default="swerl-mini", help=f"{TASKS_HELP} (default: swerl-mini)")
    _source_flag(p)
    p.add_argument(
        "--run-id", default=None, help="run id (default: timestamped); a rerun skips graded instances"
    )
    p.add_argument(
        "--output-dir",
        default=None,
        help="where logs/run_evaluation/ and the report go (default: runs/eval/RUN_ID, one per run id)",
    )
    p.add_argument("--workers", type=int, default=2, help="grades in flight (default: 2)")
    p.add_argument("--timeout", type=float, default=1800.0, help="seconds the tests may run per instance")
    p.add_argument("--retries", type=int, default=2, help="retries of an infrastructure failure")
    p.add_argument("--backend", default="docker", help="sandbox backend (default: docker)")
    p.add_argument(
        "--executor",
        choices=("auto", "threads", "ray"),
        default="auto",
        help="where grades run: threads of this process, or Ray tasks; auto (default): Ray only "
        "with --ray-address or RAY_ADDRESS set",
    )
    p.add_argument("--ray-address", default=None, help="a Ray cluster to grade on (implies Ray)")
    p.add_argument(
        "--grading",
        choices=("official", "strict", "both"),
        default="official",
        help="official: swebench's verdict (default); strict: swerl's strict mode, under RUN_ID-strict; both: both reports",
    )

    sandbox = sub.add_parser("sandbox", help="task sandboxes by hand").add_subparsers(
        dest="sub", required=True
    )
    p = add(
        sandbox, "shell", cmd_sandbox_shell, "run stdin's lines one by one in a task sandbox; 'exit' ends"
    )
    p.add_argument("task", help="instance id")
    p.add_argument("--tasks", default="swerl-mini", help=f"{TASKS_HELP} holding TASK (default: swerl-mini)")
    _source_flag(p)
    p.add_argument("--backend", default="docker")
    p.add_argument("--timeout", type=float, default=120.0, help="seconds per command")

    p = add(
        sub, "replay", cmd_replay, "re-run recorded episodes and report the first divergence of observations"
    )
    p.add_argument("episodes", help="an episodes.jsonl file")
    p.add_argument(
        "--tasks", default=None, help="task suite/file (default: the run's config.yaml, else swerl-mini)"
    )
    p.add_argument("--task-id", default=None, help="only this task's episodes")
    p.add_argument("--limit", type=int, default=0, help="at most this many episodes")
    p.add_argument("--from-step", type=int, default=1, help="compare observations from this step on")

    p = add(sub, "report", cmd_report, "plot a run's rewards and time breakdown as PNG files")
    p.add_argument("run_dir", help="a run directory holding episodes.jsonl (or the file itself)")
    p.add_argument("--output-dir", default=None, help="where the PNGs go (default: RUN_DIR)")

    p = add(sub, "reap", cmd_reap, "remove leftover swerl sandboxes: one run's (--run-id), orphans or --all")
    p.add_argument("--run-id", default=None, help="this run's sandboxes (ID and ID-..., its parts)")
    p.add_argument("--orphans", action="store_true", help="those whose creating process died")
    p.add_argument("--all", action="store_true", help="every swerl container on the daemon, others' too")
    p.add_argument("--dry-run", action="store_true", help="list what would be removed, remove nothing")

    add(sub, "demo", cmd_demo, "start a sandbox and run a few commands")

    cluster = sub.add_parser("cluster", help="run on a Slurm, KubeRay or Ray cluster")
    clusters = cluster.add_subparsers(dest="cluster", required=True)
    for name, module in CLUSTER_MODULES.items():
        try:
            add_cli = importlib.import_module(module).add_cli
        except (ImportError, AttributeError):
            continue  # not installed (optional extra) or not written yet
        add_cli(clusters.add_parser(name, help=f"{name} cluster commands"))
    return parser


def _command_parser(parser: argparse.ArgumentParser, argv: list[str]) -> argparse.ArgumentParser:
    """The (sub)parser of the command ``argv`` names, so its errors come with its own usage."""
    for token in argv:
        subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        if subs and token in subs[0].choices:
            parser = subs[0].choices[token]
    return parser


def parse_args(argv: list[str]) -> argparse.Namespace:
    """argparse, but ``key=value`` overrides may also follow flags (``submit CONFIG --wait k=v``)."""
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    overrides = [x for x in extra if "=" in x and not x.startswith("-")]
    if extra and (overrides != extra or not isinstance(getattr(args, "overrides", None), list)):
        _command_parser(parser, argv).error(f"unrecognized arguments: {' '.join(extra)}")
    if overrides:
        args.overrides.extend(overrides)
    return args


class _RayNotices(logging.Filter):
    """Drops Ray's notice that a new local Ray enabled token authentication, printed on every start.

    Only that one record of that one logger: the authentication stays on, and Ray's warning
    that authentication is *disabled* still shows.
    """

    LOGGER = "ray._private.authentication.authentication_token_setup"

    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith("Token authentication is enabled")


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING, format="%(message)s")
    logging.getLogger(_RayNotices.LOGGER).addFilter(_RayNotices())
    from swerl.rayoutput import RayDumpFilter

    stdout, sys.stdout = sys.stdout, RayDumpFilter(sys.stdout)  # type: ignore[assignment]
    ray_was_up = _ray_is_up()
    try:
        return args.func(args)
    except ConfigError as e:
        print(f"swerl: error: {e}", file=sys.stderr)
        return EXIT_USAGE
    except InfraError as e:
        print(f"swerl: infrastructure error: {e}", file=sys.stderr)
        return EXIT_INFRA
    except KeyboardInterrupt:
        print("swerl: interrupted", file=sys.stderr)
        return 128 + signal.SIGINT
    except BrokenPipeError:  # `swerl ... --json | head`: the reader left; say nothing more
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 128 + signal.SIGPIPE
    finally:
        if not ray_was_up and _ray_is_up():
            # Ray's error listener prints until Ray shuts down (at exit, if not here): a dead
            # node's message arriving late must still meet the filter, so the command that
            # joined Ray leaves it before the filter goes
            import ray

            ray.shutdown()
        sys.stdout = stdout


def _ray_is_up() -> bool:
    """Whether this process is connected to Ray, without importing it (seconds) if it is not."""
    ray = sys.modules.get("ray")
    return ray is not None and ray.is_initialized()


if __name__ == "__main__":
    raise SystemExit(main())
