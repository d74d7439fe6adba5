"""`swerl report RUN_DIR`: a run's episodes as PNG plots, for a quick look without a notebook.

Two plots from ``episodes.jsonl``: the reward distribution per task (a bar at the
mean with its standard error, and one dot per attempt: attempts are independent
samples, so they are never joined by a line), plus a learning curve over policy
versions when the run has more than one; and where the time went per task:
sandbox start (reset), agent steps and grading. matplotlib's Agg backend, so it
runs headless on a cluster node.
"""

from __future__ import annotations

import math
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


@dataclass
class Rewards:
    """The scored rewards of one group of episodes (a task, or a policy version)."""

    rewards: list[float] = field(default_factory=list)
    infra_errors: int = 0

    @property
    def mean(self) -> float:
        return sum(self.rewards) / len(self.rewards) if self.rewards else float("nan")

    @property
    def sem(self) -> float:
        """Standard error of the mean (0 for fewer than two samples)."""
        n = len(self.rewards)
        if n < 2:
            return 0.0
        var = sum((r - self.mean) ** 2 for r in self.rewards) / (n - 1)
        return math.sqrt(var / n)

    def to_dict(self) -> dict[str, Any]:
        m = self.mean
        return {
            "mean": None if m != m else m,
            "sem": self.sem,
            "n": len(self.rewards),
            "infra_errors": self.infra_errors,
        }


def _group(episodes: list[Episode], key: Any) -> dict[Any, Rewards]:
    out: dict[Any, Rewards] = defaultdict(Rewards)
    for ep in episodes:
        r = out[key(ep)]
        if ep.reward is None:
            r.infra_errors += 1
        else:
            r.rewards.append(float(ep.reward))
    return dict(sorted(out.items()))


def task_rewards(episodes: list[Episode]) -> dict[str, Rewards]:
    """task -> its attempts' rewards (infra errors counted apart, never as 0)."""
    return _group(episodes, lambda ep: ep.task_id)


def learning_curve(episodes: list[Episode]) -> dict[int, Rewards]:
    """policy version -> rewards, for episodes sampled by a versioned policy (empty otherwise)."""
    return _group([e for e in episodes if e.policy_version is not None], lambda ep: ep.policy_version)


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


def _dots(ax: Any, groups: dict[Any, Rewards], xs: list[float], width: float) -> None:
    """One dot per sample, spread evenly across the bar so equal rewards do not hide each other."""
    px, py = [], []
    for x, g in zip(xs, groups.values(), strict=True):
        n = len(g.rewards)
        px += [x + (k - (n - 1) / 2) * (width / max(n, 1)) for k in range(n)]
        py += g.rewards
    ax.scatter(px, py, s=14, color="black", alpha=0.6, zorder=3, label="one attempt")


def draw_rewards(episodes: list[Episode], ax: Any) -> None:
    """Per task: a bar at the mean reward, the standard error as an error bar, a dot per attempt."""
    groups = task_rewards(episodes)
    xs = list(range(len(groups)))
    means = [0.0 if g.mean != g.mean else g.mean for g in groups.values()]
    ax.bar(xs, means, width=0.6, color="C0", alpha=0.45, label="mean")
    ax.errorbar(xs, means, yerr=[g.sem for g in groups.values()], fmt="none", ecolor="C0", capsize=4)
    _dots(ax, groups, xs, 0.5)
    for x, g in zip(xs, groups.values(), strict=True):
        note = f"n={len(g.rewards)}" + (f", {g.infra_errors} infra" if g.infra_errors else "")
        ax.annotate(note, (x, 1.04), ha="center", fontsize=7)
    ax.set_xticks(xs, list(groups), rotation=30, ha="right", fontsize=8)
    ax.set(ylabel="reward", ylim=(-0.08, 1.15), title="reward per task (mean ± s.e.m.; dots: attempts)")
    ax.grid(alpha=0.3, axis="y")


def draw_learning_curve(episodes: list[Episode], ax: Any) -> None:
    """Mean reward ± s.e.m. per policy version (iterations, which do follow one another)."""
    curve = learning_curve(episodes)
    xs = list(curve)
    means = [g.mean for g in curve.values()]
    ax.errorbar(xs, means, yerr=[g.sem for g in curve.values()], marker="o", capsize=4, color="C1")
    _dots(ax, curve, [float(x) for x in xs], 0.4)
    ax.set(xlabel="policy version", ylabel="reward", ylim=(-0.08, 1.15), title="learning curve")
    ax.set_xticks(xs)
    ax.grid(alpha=0.3)


def reward_figure(episodes: list[Episode], title: str = "") -> Any:
    """The distribution per task, and a learning curve beside it when there are several versions."""
    plt = _pyplot()
    curve = len(learning_curve(episodes)) > 1
    ntasks = len(task_rewards(episodes))
    fig, axes = plt.subplots(
        1, 2 if curve else 1, figsize=(max(4.0, 0.6 * ntasks + 2) + (4.5 if curve else 0), 3.8), dpi=100,
        squeeze=False,
    )  # fmt: skip
    draw_rewards(episodes, axes[0][0])
    if curve:
        draw_learning_curve(episodes, axes[0][1])
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    return fig


def plot_rewards(episodes: list[Episode], path: Path, title: str = "") -> Path:
    plt = _pyplot()
    fig = reward_figure(episodes, title)
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
        plot_rewards(episodes, out / "reward.png", f"{name}: rewards"),
        plot_times(episodes, out / "time_breakdown.png", f"{name}: where the time goes"),
    ]
    s = reward_series(episodes)
    return {
        "episodes_file": str(src),
        "episodes": len(episodes),
        "plots": [str(p) for p in plots],
        "reward_per_attempt": {a: (None if m != m else m) for a, m in zip(s.attempts, s.mean, strict=True)},
        "reward_per_task": {t: g.to_dict() for t, g in task_rewards(episodes).items()},
        "reward_per_version": {v: g.to_dict() for v, g in learning_curve(episodes).items()},
        "time_breakdown": time_breakdown(episodes),
    }
