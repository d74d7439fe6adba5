"""`swerl report`: rewards are shown as distributions (per-task bars with error bars and one dot per
attempt, independent attempts never joined by a line), and a learning curve only over versions."""

from __future__ import annotations

import json

import pytest
from matplotlib.collections import PathCollection
from matplotlib.container import BarContainer, ErrorbarContainer
from matplotlib.lines import Line2D

from swerl.episode import Episode, JsonlSink
from swerl.report import reward_figure, task_rewards, write_report

REWARDS = {"a__x-1": [1.0, 0.0, 1.0, 1.0], "b__y-2": [0.0, 0.0, 0.0, None], "c__z-3": [1.0]}


def episodes(versions: bool = False) -> list[Episode]:
    return [
        Episode(task, attempt, reward=r, status="infra_error" if r is None else "resolved",
                policy_version=attempt if versions else None)
        for task, rewards in REWARDS.items() for attempt, r in enumerate(rewards)
    ]  # fmt: skip


def _only(ax, kind):
    return [c for c in ax.containers if isinstance(c, kind)]


def test_per_task_bars_error_bars_and_a_dot_per_attempt():
    fig = reward_figure(episodes())
    (ax,) = fig.axes  # no learning curve: attempts are not iterations
    (bars,) = _only(ax, BarContainer)
    assert [b.get_height() for b in bars] == [0.75, 0.0, 1.0]
    (err,) = _only(ax, ErrorbarContainer)
    segments = err.lines[2][0].get_segments()
    spread = [s[1][1] - s[0][1] for s in segments]  # 2 x s.e.m. per task
    assert spread == pytest.approx([2 * 0.25, 0.0, 0.0])  # [1,0,1,1]: sd 0.5, n 4
    (dots,) = [c for c in ax.collections if isinstance(c, PathCollection)]
    ys = sorted(float(y) for _, y in dots.get_offsets())
    assert ys == sorted(r for rs in REWARDS.values() for r in rs if r is not None)  # infra errors not zeros
    assert len({float(x) for x, _ in dots.get_offsets()}) == len(ys)  # spread out, none hidden
    assert all(line.get_linestyle() == "None" for line in ax.lines if isinstance(line, Line2D))  # no joins
    assert [t.get_text() for t in ax.get_xticklabels()] == list(REWARDS)
    assert task_rewards(episodes())["b__y-2"].infra_errors == 1


def test_learning_curve_only_over_policy_versions():
    fig = reward_figure(episodes(versions=True))
    _tasks, curve = fig.axes
    (line,) = [line for line in curve.lines if line.get_linestyle() != "None"]
    assert list(line.get_xdata()) == [0, 1, 2, 3]  # versions, in order
    assert list(line.get_ydata()) == pytest.approx([2 / 3, 0.0, 0.5, 1.0])
    assert curve.get_xlabel() == "policy version"


def test_write_report_writes_the_pngs_and_the_numbers(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    sink = JsonlSink(run / "episodes.jsonl")
    for ep in episodes():
        sink.write(ep)
    sink.close()
    out = write_report(run)
    assert all((run / name).stat().st_size > 0 for name in ("reward.png", "time_breakdown.png"))
    assert out["reward_per_task"]["a__x-1"] == {"mean": 0.75, "sem": 0.25, "n": 4, "infra_errors": 0}
    assert out["reward_per_task"]["b__y-2"]["infra_errors"] == 1 and out["reward_per_version"] == {}
    json.dumps(out)
