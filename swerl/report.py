"""`swerl report RUN_DIR`: a run's episodes as PNG plots, for a quick look without a notebook.

Two plots from ``episodes.jsonl``: the mean reward per attempt (for a toy-trainer
or GRPO run, attempt i of a group; for plain rollouts, the i-th try of each
task), and where the time went per task: sandbox start (reset), agent steps and
grading. matplotlib's Agg backend, so it runs headless on a cluster node.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from swerl.episode import Episode, JsonlSink
from swerl.errors import ConfigError

PHASES = ("reset", "steps", "grade")
PHASE_LABELS = {"reset": "sandbox start (reset)", "steps": "agent steps", "grade": "grading"}


@dataclass
class RewardSeries:
    """Mean reward per attempt index, with how many episodes were scored at each."""

    attempts: list[int] = field(default_factory=list)
    mean: list[float] = field(default_factory=list)
    scored: list[int] = field(default_factory=list)
    infra_errors: list[int] = field(default_factory=list)


def episodes_file(run: str | Path) -> Path:
    p = Path(run)
    p = p / "episodes.jsonl" if p.is_dir() else p
    if not p.is_file():
        raise ConfigError(f"{p}: no such episodes file (run `swerl rollout` first, or pass a run directory)")
    return p


def reward_series(episodes: list[Episode]) -> RewardSeries:
    by_attempt: dict[int, list[Episode]] = defaultdict(list)
    for ep in episodes:
        by_attempt[ep.attempt].append(ep)
    out = RewardSeries()
    for a in sorted(by_attempt):
        rewards = [e.reward for e in by_attempt[a] if e.reward is not None]
        out.attempts.append(a)
        out.mean.append(sum(rewards) / len(rewards) if rewards else float("nan"))
        out.scored.append(len(rewards))
        out.infra_errors.append(sum(e.infra_error for e in by_attempt[a]))
    return out


def time_breakdown(episodes: list[Episode]) -> dict[str, dict[str, float]]:
    """task -> phase -> mean seconds per episode."""
    sums: dict[str, dict[str, float]] = defaultdict(lambda: dict.fromkeys(PHASES, 0.0))
    counts: dict[str, int] = defaultdict(int)
    for ep in episodes:
        counts[ep.task_id] += 1
        for ph in PHASES:
            sums[ep.task_id][ph] += max(0.0, float(ep.timings.get(ph, 0.0)))
    return {t: {ph: v / counts[t] for ph, v in sums[t].items()} for t in sorted(sums)}


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")  # headless; a no-op if a notebook already picked its backend
    import matplotlib.pyplot as plt

    return plt


def plot_rewards(episodes: list[Episode], path: Path, title: str = "") -> Path:
    plt = _pyplot()
    s = reward_series(episodes)
    fig, ax = plt.subplots(figsize=(6, 3.5), dpi=100)
    ax.plot(s.attempts, s.mean, marker="o")
    for x, y, n in zip(s.attempts, s.mean, s.scored, strict=True):
        ax.annotate(f"n={n}", (x, y), textcoords="offset points", xytext=(0, 7), ha="center", fontsize=8)
    ax.set(xlabel="attempt / iteration", ylabel="mean reward", ylim=(-0.05, 1.12), title=title or "reward")
    ax.set_xticks(s.attempts)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path


def plot_times(episodes: list[Episode], path: Path, title: str = "") -> Path:
    plt = _pyplot()
    rows = time_breakdown(episodes)
    tasks = list(rows)
    fig, ax = plt.subplots(figsize=(7, 0.35 * len(tasks) + 1.6), dpi=100)
    left = [0.0] * len(tasks)
    for ph in PHASES:
        widths = [rows[t][ph] for t in tasks]
        ax.barh(tasks, widths, left=left, label=PHASE_LABELS[ph])
        left = [a + b for a, b in zip(left, widths, strict=True)]
    ax.invert_yaxis()
    ax.set(xlabel="mean seconds per episode", title=title or "where the time goes")
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.3), ncol=3, fontsize=8, frameon=False)
    fig.savefig(path, bbox_inches="tight")
    plt.close(fig)
    return path


def write_report(run: str | Path, output_dir: str | Path | None = None) -> dict[str, Any]:
    """Both PNGs for a run; returns what was written and the numbers behind them."""
    src = episodes_file(run)
    episodes = list(JsonlSink.read(src))
    if not episodes:
        raise ConfigError(f"{src}: no episodes to plot")
    out = Path(output_dir) if output_dir else src.parent
    out.mkdir(parents=True, exist_ok=True)
    name = src.parent.name
    plots = [
        plot_rewards(episodes, out / "reward.png", f"{name}: mean reward per attempt"),
        plot_times(episodes, out / "time_breakdown.png", f"{name}: where the time goes"),
    ]
    s = reward_series(episodes)
    return {
        "episodes_file": str(src),
        "episodes": len(episodes),
        "plots": [str(p) for p in plots],
        "reward_per_attempt": {a: (None if m != m else m) for a, m in zip(s.attempts, s.mean, strict=True)},
        "time_breakdown": time_breakdown(episodes),
    }
