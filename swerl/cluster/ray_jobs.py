"""Submit a rollout to an existing Ray cluster as a Ray job: ``swerl cluster ray ...``.

The job is what ``ray job submit --working-dir DIR -- swerl rollout CONFIG [k=v ...]``
makes, through Ray's own ``JobSubmissionClient`` (the dashboard's job API): the
working dir is shipped as the job's runtime_env, the config is named relative to it,
and the driver connects to the cluster through the RAY_ADDRESS Ray gives it. The
same entrypoint runs in the RayJob that ``swerl cluster kuberay render`` writes.

- ``submit CONFIG [k=v ...]``  submit, print the job id; ``--wait`` streams the logs
  and exits 0 only when the job succeeded;
- ``logs JOB [--follow]`` and ``stop JOB``.

The address is ``--address``, else RAY_API_SERVER_ADDRESS / RAY_ADDRESS (a dashboard
URL ``http://HEAD:8265`` or the GCS address ``HEAD:6379``), as for ``ray job``. With
token auth (this Ray's default), set RAY_AUTH_MODE=token beside the token.
A relative ``output_dir`` is made absolute here, where the command runs: on a
remote cluster give one on storage the head node writes.
"""

from __future__ import annotations

import argparse
import asyncio
import shlex
import sys
import time
from pathlib import Path
from typing import Any

from swerl.config import CONFIGS_DIR, load_config, resolve_path
from swerl.errors import ConfigError, InfraError

EXIT_OK, EXIT_FAILED = 0, 1


def entrypoint(config: str, overrides: list[str] | None = None) -> str:
    """The one rollout command every cluster runs (Ray Jobs, KubeRay's RayJob, Slurm's body)."""
    return shlex.join(["swerl", "rollout", config, *(overrides or [])])


def job_config_path(config: str, working_dir: Path) -> str:
    """How the job names the config: relative to the shipped working dir, or a bundled name."""
    path = resolve_path(config).resolve()
    if path.is_relative_to(working_dir):
        return str(path.relative_to(working_dir))
    if path.is_relative_to(CONFIGS_DIR):
        return str(path.relative_to(CONFIGS_DIR))  # every swerl install has configs/
    raise ConfigError(
        f"config {config} is outside the working dir {working_dir} that the job ships; "
        "put it inside, or pass --working-dir a directory that holds it"
    )


def client(address: str | None) -> Any:
    from ray.job_submission import JobSubmissionClient

    try:
        return JobSubmissionClient(address)
    except (ConnectionError, RuntimeError, ValueError) as e:
        raise InfraError(f"cannot reach the Ray job API at {address or '$RAY_ADDRESS'}: {e}") from e


def submit(
    config: str,
    overrides: list[str],
    *,
    address: str | None = None,
    working_dir: str = ".",
    env: dict[str, str] | None = None,
    job_id: str | None = None,
) -> tuple[str, Path]:
    """Submit the rollout; returns (job id, the run's output dir)."""
    cfg = load_config(config, overrides)  # a bad config fails here, not in the job
    wd = Path(working_dir).resolve()
    if not wd.is_dir():
        raise ConfigError(f"working dir {working_dir} is not a directory")
    from swerl.rollout.run import previous_place

    out = cfg.out.resolve()
    before = previous_place(out)
    if before and before["kind"] == "local" and (out / "episodes.jsonl").exists():
        raise ConfigError(  # the job would count this machine's episodes as done on the cluster
            f"{out} holds a run made on a local Ray; a cluster job would resume it and mix the two. "
            "Give the job another name or output_dir"
        )
    command = entrypoint(job_config_path(config, wd), [*overrides, f"output_dir={out}"])
    runtime_env: dict[str, Any] = {"working_dir": str(wd)}
    if env:
        runtime_env["env_vars"] = dict(env)
    job = client(address).submit_job(entrypoint=command, runtime_env=runtime_env, submission_id=job_id)
    return job, out


def follow(address: str | None, job_id: str, out: Any = sys.stdout) -> str:
    """Stream the job's logs until it ends; returns its final status (SUCCEEDED, FAILED, STOPPED)."""
    c = client(address)

    async def tail() -> None:
        async for lines in c.tail_job_logs(job_id):
            out.write(lines)
            out.flush()

    asyncio.run(tail())
    status = c.get_job_status(job_id)
    while not status.is_terminal():  # the log stream can end a moment before the status
        time.sleep(0.5)
        status = c.get_job_status(job_id)
    return str(status.value)


def parse_env(items: list[str]) -> dict[str, str]:
    env = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ConfigError(f"--env {item!r} must look like NAME=VALUE")
        env[key] = value
    return env


# --------------------------------------------------------------------- CLI
def _api_errors(func: Any) -> Any:
    """The job API answers an unknown job or a refused request with RuntimeError: say which."""

    def run(args: argparse.Namespace) -> int:
        try:
            return func(args)
        except RuntimeError as e:
            raise InfraError(f"Ray job API: {e}") from e

    return run


def cmd_submit(args: argparse.Namespace) -> int:
    job_id, out = submit(
        args.config,
        args.overrides,
        address=args.address,
        working_dir=args.working_dir,
        env=parse_env(args.env),
        job_id=args.job_id,
    )
    print(job_id, flush=True)
    print(f"swerl: output in {out} (on the head node)", file=sys.stderr)
    if not args.wait:
        return EXIT_OK
    status = follow(args.address, job_id)
    print(f"swerl: job {job_id} {status}", file=sys.stderr)
    return EXIT_OK if status == "SUCCEEDED" else EXIT_FAILED


def cmd_logs(args: argparse.Namespace) -> int:
    if args.follow:
        status = follow(args.address, args.job)
        return EXIT_OK if status == "SUCCEEDED" else EXIT_FAILED
    print(client(args.address).get_job_logs(args.job), end="")
    return EXIT_OK


def cmd_stop(args: argparse.Namespace) -> int:
    c = client(args.address)
    c.stop_job(args.job)
    deadline = time.monotonic() + args.timeout
    status = c.get_job_status(args.job)
    while not status.is_terminal() and time.monotonic() < deadline:
        time.sleep(0.5)
        status = c.get_job_status(args.job)
    print(f"{args.job} {status.value}")
    return EXIT_OK if status.is_terminal() else EXIT_FAILED


def cmd_up(args: argparse.Namespace) -> int:
    from swerl.cluster.local_ray import up

    cluster = up(args.port, args.dashboard_port, args.workers, args.num_cpus)
    print(f"export RAY_ADDRESS={cluster.address} RAY_AUTH_MODE=token")
    print(
        f"swerl: Ray cluster of {len(cluster.nodes)} node(s) up; job API at {cluster.dashboard_url}; "
        f"stop it with `swerl cluster ray down --port {args.port}`",
        file=sys.stderr,
    )
    return EXIT_OK


def cmd_down(args: argparse.Namespace) -> int:
    from swerl.cluster.local_ray import down

    n = down(args.port)
    print(f"swerl: ended {n} process(es) of the cluster on port {args.port}", file=sys.stderr)
    return EXIT_OK


def add_cli(parser: argparse.ArgumentParser) -> None:
    """``swerl cluster ray submit|logs|stop|up|down`` (registered by ``swerl.cli``)."""
    sub = parser.add_subparsers(dest="ray_command", required=True, metavar="COMMAND")
    p = sub.add_parser("submit", help="submit `swerl rollout CONFIG` as a Ray job; print its id")
    p.add_argument("config", help="YAML file (inside --working-dir) or a name in configs/")
    p.add_argument("overrides", nargs="*", help="key.sub=value overrides, e.g. rollout.num_actors=8")
    p.add_argument("--working-dir", default=".", help="shipped to the cluster as the job's cwd (default: .)")
    p.add_argument("--env", action="append", default=[], metavar="NAME=VALUE", help="job environment")
    p.add_argument("--job-id", default=None, help="submission id (default: Ray makes one)")
    p.add_argument("--wait", action="store_true", help="stream the logs; exit 0 only if the job succeeded")
    p.set_defaults(func=_api_errors(cmd_submit))
    p = sub.add_parser("logs", help="print a job's logs")
    p.add_argument("job")
    p.add_argument("--follow", action="store_true", help="stream until the job ends")
    p.set_defaults(func=_api_errors(cmd_logs))
    p = sub.add_parser("stop", help="stop a job and wait until it has stopped")
    p.add_argument("job")
    p.add_argument("--timeout", type=float, default=60.0)
    p.set_defaults(func=_api_errors(cmd_stop))
    for p in sub.choices.values():
        p.add_argument("--address", default=None, help="dashboard URL or GCS address (default: $RAY_ADDRESS)")
    p = sub.add_parser("up", help="start a Ray cluster on this machine (a head and --workers nodes)")
    p.add_argument("--port", type=int, default=26379, help="the head's GCS port (default: 26379)")
    p.add_argument("--dashboard-port", type=int, default=26265, help="job API / dashboard (default: 26265)")
    p.add_argument("--workers", type=int, default=1, help="worker nodes beside the head (default: 1)")
    p.add_argument("--num-cpus", type=int, default=2, help="Ray CPUs per node (default: 2)")
    p.set_defaults(func=cmd_up)
    p = sub.add_parser("down", help="stop the cluster `up` started on --port, and nothing else")
    p.add_argument("--port", type=int, default=26379)
    p.set_defaults(func=cmd_down)
