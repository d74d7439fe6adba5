"""`swerl ...`: the command line.

Exit codes: 0 success, 1 the work ran and found failures (e.g. a task that does
not validate), 2 bad usage or config, 3 infrastructure unavailable.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
import importlib
from collections.abc import Callable

from swerl.errors import ConfigError, InfraError

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_INFRA = 0, 1, 2, 3

CLUSTER_MODULES = {"slurm": "swerl.cluster.slurm", "kuberay": "swerl.cluster.kuberay"}
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
    from swerl.tasks.instance import load_instances

    instances = load_instances(args.suite)
    rows = [{"instance_id": i.instance_id, "repo": i.repo, "image": i.image} for i in instances]
    text = "\n".join(f"{r['instance_id']:40s} {r['repo']:24s} {r['image']}" for r in rows)
    _emit(args, rows, text)
    return EXIT_OK


def cmd_tasks_build_images(args: argparse.Namespace) -> int:
    from swerl.tasks.images import build_task_images
    from swerl.tasks.instance import load_instances

    names = build_task_images(load_instances(args.suite), force=args.force)
    _emit(args, {"images": names}, "\n".join(names))
    return EXIT_OK


def cmd_tasks_validate(args: argparse.Namespace) -> int:
    from swerl.tasks.instance import load_instances
    from swerl.tasks.validate import count_mismatches, validate_suite

    mismatches = count_mismatches(validate_suite(load_instances(args.suite)))
    return EXIT_FAILED if mismatches else EXIT_OK


# ----------------------------------------------------------------- rollout
def cmd_rollout(args: argparse.Namespace) -> int:
    from swerl.config import load_config
    from swerl.rollout.run import format_summary, run_config

    cfg = load_config(args.config, args.overrides)
    progress = (lambda _line: None) if args.json else print
    summary = run_config(cfg, progress=progress)
    _emit(args, summary, format_summary(summary))
    return EXIT_OK if summary["infra_errors"] == 0 else EXIT_FAILED


# ---------------------------------------------------------------- sandboxes
def cmd_reap(args: argparse.Namespace) -> int:
    from swerl.sandbox.docker import reap

    n = reap(args.run_id, orphans_only=args.orphans)
    _emit(args, {"removed": n}, f"removed {n} sandbox container(s)")
    return EXIT_OK


def cmd_demo(args: argparse.Namespace) -> int:
    """Start a sandbox on the base image and show what it can do."""
    from swerl.sandbox.base import SandboxConfig
    from swerl.sandbox.docker import DockerSandbox
    from swerl.tasks.images import build_base_image

    image = build_base_image()
    t0 = time.monotonic()
    with DockerSandbox(image, SandboxConfig(timeout=10)) as sb:
        started = time.monotonic() - t0
        print(
            f"sandbox {sb.short_id} of {image} started in {started * 1000:.0f} ms (no network, caps dropped)"
        )
        for cmd in (
            "python3 -c 'import sys; print(sys.version.split()[0])'",
            "git --version",
            "ls /sys/class/net",
        ):
            r = sb.execute(cmd)
            print(f"$ {cmd}\n{r.output.rstrip()}   [rc={r.returncode}, {r.duration * 1000:.1f} ms]")
        times = [sb.execute("true").duration for _ in range(200)]
        times.sort()
        print(f"200 commands: p50 {times[100] * 1000:.2f} ms per command")
    return EXIT_OK


# ------------------------------------------------------------------ parser
def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="swerl", description="RL on software-engineering tasks.")
    parser.add_argument("-v", "--verbose", action="store_true", help="log progress")
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
    p.add_argument("suite", help="bundled suite name, JSON/JSONL file, or dataset")
    p = add(tasks, "build-images", cmd_tasks_build_images, "build the task images of a suite (cached)")
    p.add_argument("suite")
    p.add_argument("--force", action="store_true")
    p = add(tasks, "validate", cmd_tasks_validate, "check that gold resolves and empty does not, per task")
    p.add_argument("suite")

    p = add(sub, "rollout", cmd_rollout, "run a rollout config; episodes stream to OUTPUT_DIR/episodes.jsonl")
    p.add_argument(
        "config", nargs="?", default="default", help="YAML file or a name in configs/ (default: default)"
    )
    p.add_argument("overrides", nargs="*", help="key.sub=value overrides, e.g. rollout.attempts=4")

    p = add(sub, "reap", cmd_reap, "remove leftover swerl sandboxes")
    p.add_argument("--run-id", default=None, help="only this run's sandboxes")
    p.add_argument("--orphans", action="store_true", help="only those whose creating process died")

    add(sub, "demo", cmd_demo, "start a sandbox and run a few commands")

    cluster = sub.add_parser("cluster", help="run on a Slurm or KubeRay cluster")
    clusters = cluster.add_subparsers(dest="cluster", required=True)
    for name, module in CLUSTER_MODULES.items():
        try:
            add_cli = importlib.import_module(module).add_cli
        except (ImportError, AttributeError):
            continue  # not installed (optional extra) or not written yet
        add_cli(clusters.add_parser(name, help=f"{name} cluster commands"))
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING, format="%(message)s")
    try:
        return args.func(args)
    except ConfigError as e:
        print(f"swerl: error: {e}", file=sys.stderr)
        return EXIT_USAGE
    except InfraError as e:
        print(f"swerl: infrastructure error: {e}", file=sys.stderr)
        return EXIT_INFRA
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    raise SystemExit(main())
