"""What a long run tells its user while it works: elapsed time, ETA, running mean, infra errors.

On a terminal it is a live ``rich`` progress bar with one line per finished episode
above it; piped or logged it degrades to plain lines that carry the same facts, so a
Slurm log or a CI log reads as well as a terminal.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import Any, TextIO

from swerl.episode import Episode


def clock(seconds: float) -> str:
    """``H:MM:SS`` (or ``M:SS`` under an hour)."""
    s = int(max(0.0, seconds))
    h, rem = divmod(s, 3600)
    return f"{h}:{rem // 60:02d}:{rem % 60:02d}" if h else f"{rem // 60}:{rem % 60:02d}"


def episode_line(ep: Episode, width: int = 160) -> str:
    """One episode's outcome; an infra error's cause is on the line, not only in episodes.jsonl."""
    reward = "None" if ep.reward is None else f"{ep.reward:.1f}"
    line = f"{ep.task_id} #{ep.attempt}: {ep.status} reward={reward} ({ep.timings.get('total', 0):.1f} s)"
    if ep.infra_error and ep.error:
        cause = " ".join(ep.error.split())
        line += f" - {cause[:width]}{'...' if len(cause) > width else ''}"
    return line


class RunProgress:
    """Counts episodes as they finish and shows them.

    ``done``: episodes a resumed run already holds (the counter starts after them);
    ``live``: a rich bar (default: when ``stream`` is a terminal); ``quiet``: show nothing.
    """

    def __init__(
        self,
        stream: TextIO | None = None,
        *,
        live: bool | None = None,
        quiet: bool = False,
        write: Callable[[str], None] | None = None,
    ) -> None:
        self.stream = stream or sys.stdout
        self.quiet = quiet
        self.live = (not quiet and self.stream.isatty()) if live is None else live
        self._write = write
        self.total = self.done = self.new = self.errors = 0
        self._rewards: list[float] = []
        self._t0 = time.monotonic()
        self._bar: Any = None
        self._task: Any = None

    # ------------------------------------------------------------ messages
    def message(self, text: str) -> None:
        if self.quiet:
            return
        if self._bar is not None:
            self._bar.console.print(text, markup=False, highlight=False)
        elif self._write is not None:
            self._write(text)
        else:
            print(text, file=self.stream, flush=True)

    # ------------------------------------------------------------ counting
    @property
    def mean(self) -> float | None:
        return sum(self._rewards) / len(self._rewards) if self._rewards else None

    def start(self, total: int, done: int = 0, rewards: list[float] | None = None) -> None:
        """Begin counting ``total`` episodes, ``done`` of them already recorded (their ``rewards``)."""
        self.total, self.done = total, done
        self._rewards = list(rewards or [])
        self._t0 = time.monotonic()
        if not self.live or self.quiet:
            return
        from rich.console import Console
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
            TimeRemainingColumn,
        )

        self._bar = Progress(
            TextColumn("[bold]rollout"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("elapsed"),
            TimeElapsedColumn(),
            TextColumn("ETA"),
            TimeRemainingColumn(),
            TextColumn("{task.fields[stats]}"),
            console=Console(file=self.stream),
            transient=False,
        )
        self._bar.start()
        self._task = self._bar.add_task("rollout", total=total, completed=done, stats=self._stats())

    def _stats(self) -> str:
        mean = "n/a" if self.mean is None else f"{self.mean:.2f}"
        return f"mean reward {mean}, infra errors {self.errors}"

    def eta(self) -> float | None:
        """Seconds left at this run's own rate (resumed episodes do not count toward the rate)."""
        if not self.new:
            return None
        per = (time.monotonic() - self._t0) / self.new
        return per * max(0, self.total - self.done - self.new)

    def episode(self, ep: Episode) -> None:
        self.new += 1
        self.errors += ep.infra_error
        if ep.reward is not None:
            self._rewards.append(ep.reward)
        n = self.done + self.new
        head = f"[{n:>{len(str(self.total))}}/{self.total}] {episode_line(ep)}"
        if self._bar is not None:
            self._bar.update(self._task, completed=n, stats=self._stats())
            self.message(head)
            return
        eta = self.eta()
        self.message(
            f"{head} | {self._stats()} | elapsed {clock(time.monotonic() - self._t0)}"
            f", ETA {'?' if eta is None else clock(eta)}"
        )

    def stop(self) -> None:
        if self._bar is not None:
            self._bar.stop()
            self._bar = None
