"""Run a rollout config end to end: the body of `swerl rollout CONFIG`.

Writes ``episodes.jsonl`` (durable, resumable), ``config.yaml`` and ``summary.json``
to the run's output directory. Also the entry point that Slurm and KubeRay jobs run.

Everything that can be checked is checked before a file is written or Ray starts:
the config and its task ids, that a rerun resumes the same config (a changed one
would mix two runs in one file), and that this machine can run the sandboxes.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import signal
import time
from collections import Counter
from typing import Any

import yaml

from swerl.config import RolloutConfig
from swerl.episode import Episode, JsonlSink
from swerl.errors import BackendUnavailable, ConfigError, SwerlError
from swerl.policies.registry import make_policy
from swerl.progress import RunProgress
from swerl.rollout.checks import no_valid_action_warning
from swerl.rollout.runner import RolloutRunner
from swerl.sandbox.base import SandboxConfig
from swerl.tasks.instance import select
from swerl.tasks.sources import load_tasks

RESUMABLE_KEYS = (
    "name", "output_dir", "task_ids", "ray", "slurm", "rollout.attempts", "rollout.num_actors",
    "rollout.envs_per_actor", "rollout.max_in_flight", "rollout.actor_cpus", "rollout.placement",
    "rollout.max_retries", "rollout.group",
)  # fmt: skip
"""Keys a resumed run may change: where and how fast it runs, and how much of the work to do,
not what an episode is (the policy, tasks, limits, sandbox and grading are)."""


class Interrupted(KeyboardInterrupt):
    """The run was stopped by a signal (SIGINT or SIGTERM); what was done is saved."""

    def __init__(self, signum: int = signal.SIGINT, message: str = "") -> None:
        super().__init__(message)
        self.signum = signum
        self.message = message


def build_runner(cfg: RolloutConfig) -> RolloutRunner:
    tasks = load_tasks(cfg.tasks, kind=cfg.tasks_source, accept=cfg.tasks_accept)
    tasks = select(tasks, cfg.task_ids) if cfg.task_ids else tasks
    policy = make_policy(cfg.policy.name, tasks, cfg.policy.placement, **cfg.policy.options)
    env_kwargs: dict[str, Any] = {
        "sandbox_config": SandboxConfig(**cfg.backend.sandbox.model_dump()),
        "backend_options": cfg.backend.options,
        **cfg.env.model_dump(),  # the env's limits and its pool/grading keywords
    }
    r = cfg.rollout
    return RolloutRunner(
        tasks,
        policy,
        num_actors=r.num_actors,
        envs_per_actor=r.envs_per_actor,
        attempts=r.attempts,
        max_in_flight=r.max_in_flight,
        max_retries=r.max_retries,
        actor_cpus=r.actor_cpus,
        group=r.group,
        placement=r.placement,
        env_kwargs=env_kwargs,
        backend=cfg.backend.name,
        sink=cfg.out / "episodes.jsonl",
        ray_address=cfg.ray.address,
        run_id=f"{cfg.name}-{int(time.time())}",
    )


# ------------------------------------------------------------------ resume
def _flatten(tree: Any, prefix: str = "") -> dict[str, Any]:
    if not isinstance(tree, dict) or not tree:
        return {prefix: tree}
    out: dict[str, Any] = {}
    for k, v in tree.items():
        out |= _flatten(v, f"{prefix}.{k}" if prefix else str(k))
    return out


def changed_keys(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """``key: old -> new`` for each key whose change would mix two runs' episodes in one file."""
    a, b = _flatten(old), _flatten(new)
    changes = []
    for key in sorted(set(a) | set(b)):
        if any(key == k or key.startswith(f"{k}.") for k in RESUMABLE_KEYS):
            continue
        if a.get(key, "<unset>") != b.get(key, "<unset>"):
            changes.append(f"{key}: {a.get(key, '<unset>')!r} -> {b.get(key, '<unset>')!r}")
    return changes


def resume_changes(cfg: RolloutConfig) -> list[str]:
    """How ``cfg`` differs from the config of the run already in its output directory ([] if none)."""
    path = cfg.out / "config.yaml"
    if not (cfg.out / "episodes.jsonl").exists() or not path.is_file():
        return []
    try:
        old = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as e:
        raise ConfigError(f"{path}: the previous run's config is not valid YAML: {e}") from None
    return changed_keys(old, cfg.model_dump(mode="json"))


def _latest(cfg: RolloutConfig, runner: RolloutRunner) -> dict[tuple[str, int], Episode]:
    """The run's episodes in its file, the last one of each (task, attempt): a rerun redoes infra errors."""
    path = cfg.out / "episodes.jsonl"
    if not path.exists():
        return {}
    return {
        e.key: e for e in JsonlSink.read(path) if e.task_id in runner.by_id and e.attempt < runner.attempts
    }


def _local_ray(cfg: RolloutConfig) -> bool:
    return not (cfg.ray.address or os.environ.get("RAY_ADDRESS"))


def place_of(cfg: RolloutConfig) -> dict[str, Any]:
    """The kind of place a run runs on: a Ray this process starts, or a cluster it joins (and which)."""
    if _local_ray(cfg):
        return {"kind": "local", "ray_address": None}
    return {"kind": "cluster", "ray_address": cfg.ray.address or os.environ.get("RAY_ADDRESS")}


def previous_place(out: Any) -> dict[str, Any] | None:
    """Where the run already in ``out`` ran (its summary.json), None if it does not say."""
    try:
        place = json.loads((out / "summary.json").read_text()).get("place")
    except (OSError, ValueError, AttributeError):
        return None
    return place if isinstance(place, dict) and place.get("kind") else None


def _describe_place(place: dict[str, Any]) -> str:
    if place["kind"] == "local":
        return "a local Ray on this machine"
    return f"the Ray cluster at {place.get('ray_address') or '?'}"


def check_place(cfg: RolloutConfig, resume_anyway: bool = False) -> str:
    """Refuse (ConfigError) to resume a run made on another kind of place; returns what is reused.

    A laptop run resumed on a cluster would report the laptop's episodes as done and run
    nothing there, and a file would hold episodes of two places under one run.
    """
    before, now = previous_place(cfg.out), place_of(cfg)
    if before is None or not (cfg.out / "episodes.jsonl").exists():
        return ""
    if before["kind"] != now["kind"] and not resume_anyway:
        raise ConfigError(
            f"{cfg.out} holds a run made on {_describe_place(before)}; this run would be on "
            f"{_describe_place(now)}, and resuming would count the other place's episodes as done. "
            "Use another name or output_dir, or pass --resume-anyway to reuse them"
        )
    return _describe_place(before)


def joined(place: dict[str, Any]) -> str:
    """One line saying which Ray this run is on, once it is connected."""
    import ray

    nodes = [n for n in ray.nodes() if n.get("Alive")]
    gcs = ray.get_runtime_context().gcs_address
    kind = "a local Ray" if place["kind"] == "local" else "joined the Ray cluster"
    return f"Ray: {kind} at {gcs} ({len(nodes)} node(s))"


class SigtermAsInterrupt:
    """SIGTERM (``ray job stop``, ``scancel``, ``kill``) stops the run like Ctrl-C: saved, sandboxes closed.

    The handler remembers which signal came: a KeyboardInterrupt raised while Ray blocks in
    ``ray.wait`` comes back out of Ray's core worker as a bare KeyboardInterrupt, so the
    exception alone cannot say SIGTERM. ``reinstall()`` takes the signal back from whoever
    took it (``ray.init`` installs its own handler); the one from before is restored on exit.
    """

    def __init__(self) -> None:
        self.signum: int | None = None
        self._previous: Any = None
        self._installed = False

    def _handle(self, signum: int, frame: object) -> None:
        self.signum = signum
        raise Interrupted(signum)

    def reinstall(self) -> None:
        with contextlib.suppress(ValueError):  # not the main thread: leave signals alone
            signal.signal(signal.SIGTERM, self._handle)

    def interrupted(self, e: KeyboardInterrupt) -> Interrupted:
        """What stopped the run, whatever shape the exception arrived in."""
        return e if isinstance(e, Interrupted) else Interrupted(self.signum or signal.SIGINT)

    def __enter__(self) -> SigtermAsInterrupt:
        try:
            self._previous = signal.signal(signal.SIGTERM, self._handle)
            self._installed = True
        except ValueError:
            pass
        return self

    def __exit__(self, *exc: object) -> None:
        if self._installed:
            signal.signal(signal.SIGTERM, self._previous)


def start_ray(runner: RolloutRunner) -> None:
    """Start Ray and the actors; Ray failing to come up is infrastructure (exit 3), not a traceback."""
    try:
        runner.start()
    except SwerlError:
        raise
    except Exception as e:  # ray.init raises a bare Exception when its node times out starting
        raise BackendUnavailable(f"Ray did not start: {e}") from e


# --------------------------------------------------------------------- run
def run_config(
    cfg: RolloutConfig,
    progress: RunProgress | None = None,
    *,
    resume_anyway: bool = False,
    resume_hint: str = "",
    source: str = "",
) -> dict[str, Any]:
    """Validate, preflight, then run ``cfg``; returns the summary (also written to summary.json).

    A ConfigError (exit 2) or InfraError (exit 3) raised before Ray starts leaves no file behind.
    ``resume_hint``: the command that resumes this run, said when it is interrupted;
    ``source``: which config file is in use, said at the start.
    """
    progress = progress or RunProgress()
    out = cfg.out
    runner = build_runner(cfg)  # bad task ids, policy options: ConfigError before anything is written
    changes = resume_changes(cfg)
    reused_from = check_place(cfg, resume_anyway)
    place = place_of(cfg)
    if changes and not resume_anyway:
        raise ConfigError(
            f"{out} holds a run made with another config; resuming would mix the two. Changed: "
            + "; ".join(changes)
            + ". Use another name or output_dir, or pass --resume-anyway"
        )
    if _local_ray(cfg):
        from swerl.preflight import check_policy, preflight

        preflight(cfg.backend.name, cfg.backend.options, runner.tasks, cfg.tasks)
        check_policy(cfg.policy.name, cfg.policy.options)
    out.mkdir(parents=True, exist_ok=True)
    if changes:  # resuming anyway: keep the config the earlier episodes were made with
        (out / "config.yaml").rename(out / f"config.before-{int(time.time())}.yaml")
    (out / "config.yaml").write_text(yaml.safe_dump(cfg.model_dump(mode="json"), sort_keys=False))

    progress.message(f"run {runner.run_id}: {source + ', ' if source else ''}writing to {out}/")
    previous = {k: e for k, e in _latest(cfg, runner).items() if not e.infra_error}
    total = len(runner.tasks) * runner.attempts
    if previous:
        made = f", made on {reused_from}" if reused_from else ""
        progress.message(f"resuming: {len(previous)} of {total} episode(s) done{made}")
    t0 = time.monotonic()
    new: list[Episode] = []
    interrupted: Interrupted | None = None
    if len(previous) >= total:  # nothing to run: no Ray to start
        progress.message(
            f"nothing to run: every episode is in {out}/episodes.jsonl "
            "(another name or output_dir runs it again)"
        )
    else:
        interrupted = _run(runner, progress, previous, total, place, new)
    summary = summarize(list(_latest(cfg, runner).values()), time.monotonic() - t0) | {
        "run_id": runner.run_id,
        "new_episodes": len(new),
        "output_dir": str(out),
        "interrupted": interrupted is not None,
        "place": place if new else (previous_place(out) or place),  # where its episodes were made
        **cluster_summary(runner, new),
    }
    (out / "summary.json").write_text(json.dumps(summary, indent=2))
    warning = no_valid_action_warning(new)
    if warning:
        progress.message(f"warning: {warning}")
    if interrupted is not None:
        name = signal.Signals(interrupted.signum).name
        done = len(previous) + len([e for e in new if not e.infra_error])
        interrupted.message = (
            f"interrupted by {name}: {done} of {total} episode(s) saved in {out}/episodes.jsonl, "
            f"sandboxes removed. Resume with: {resume_hint or 'the same command (same config and output_dir)'}"
        )
        raise interrupted
    return summary


def _run(
    runner: RolloutRunner,
    progress: RunProgress,
    previous: dict[tuple[str, int], Episode],
    total: int,
    place: dict[str, Any],
    new: list[Episode],
) -> Interrupted | None:
    """Start Ray and the actors, stream the episodes into ``new``; what stopped it, if a signal did."""
    interrupted: Interrupted | None = None
    with SigtermAsInterrupt() as signals:
        try:
            import ray

            if not ray.is_initialized():
                progress.message("starting Ray...")
            t_ray = time.monotonic()
            try:
                start_ray(runner)
                progress.message(
                    f"{joined(place)}; {runner.num_actors} actor(s) ready in {time.monotonic() - t_ray:.1f} s"
                )
                signals.reinstall()  # ray.init took SIGTERM over
                progress.start(
                    total, len(previous), [e.reward for e in previous.values() if e.reward is not None]
                )
                for item in runner.stream():
                    for ep in item if isinstance(item, list) else [item]:
                        new.append(ep)
                        progress.episode(ep)
            finally:
                runner.close()  # also when stopped while starting: no actor or sandbox is left behind
        except KeyboardInterrupt as e:
            interrupted = signals.interrupted(e)
        finally:
            progress.stop()
    return interrupted


def summarize(episodes: list[Episode], wall: float) -> dict[str, Any]:
    statuses = Counter(e.status for e in episodes)
    scored = [e.reward for e in episodes if e.reward is not None]
    per_task: dict[str, list[float]] = {}
    for e in episodes:
        if e.reward is not None:
            per_task.setdefault(e.task_id, []).append(e.reward)
    return {
        "episodes": len(episodes),
        "statuses": dict(statuses),
        "mean_reward": sum(scored) / len(scored) if scored else None,
        "resolved": statuses.get("resolved", 0),
        "infra_errors": statuses.get("infra_error", 0),
        "wall_seconds": wall,
        "episodes_per_second": len(episodes) / wall if wall else None,
        "per_task": {k: sum(v) / len(v) for k, v in sorted(per_task.items())},
    }


def cluster_summary(runner: RolloutRunner, new: list[Episode]) -> dict[str, Any]:
    """Where this run's episodes ran, and what node deaths cost it."""
    return {
        "nodes": dict(Counter(e.where.get("ray_node", "") for e in new)),
        "retried": runner.stats["retried"],
        "retried_node_died": runner.stats["retried_node_died"],
        "actors_replaced_node_died": runner.stats["actors_replaced_node_died"],
        "node_failures": [dataclasses.asdict(f) for f in runner.node_failures],
    }


def format_summary(summary: dict[str, Any]) -> str:
    lines = [f"{'task':32s} mean reward", f"{'-' * 32} -----------"]
    lines += [f"{k:32s} {v:.2f}" for k, v in summary["per_task"].items()]
    mean = summary["mean_reward"]
    lines += [
        "",
        f"episodes {summary['episodes']} ({summary['new_episodes']} new)   statuses {summary['statuses']}",
        f"mean reward {'n/a' if mean is None else f'{mean:.3f}'}   resolved {summary['resolved']}   "
        f"infra errors {summary['infra_errors']}   wall {summary['wall_seconds']:.1f} s",
        f"run {summary.get('run_id', '?')} written to {summary['output_dir']}/episodes.jsonl and summary.json",
    ]
    for f in summary.get("node_failures", []):
        replaced = f.get("actors_replaced", 0)
        also = f", {replaced} actor(s) being created on it started on other nodes" if replaced else ""
        lines.insert(
            -1,
            f"node {f['node'] or f['node_id']} died: {f['episodes_retried']} episode(s) retried on other nodes{also}",
        )
    return "\n".join(lines)
