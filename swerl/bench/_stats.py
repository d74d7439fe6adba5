"""Small helpers shared by the benchmarks."""

from __future__ import annotations

import os

import numpy as np


def percentiles_ms(samples: list[float]) -> tuple[float, float]:
    """p50 and p95 of samples given in seconds, in milliseconds."""
    arr = np.asarray(samples) * 1000.0
    return float(np.percentile(arr, 50)), float(np.percentile(arr, 95))


def table(header: list[str], rows: list[list[object]]) -> str:
    cells = [header, *[[f"{c:.2f}" if isinstance(c, float) else str(c) for c in r] for r in rows]]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    lines = ["  ".join(c.rjust(w) for c, w in zip(r, widths, strict=True)) for r in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


class LoadWatch:
    """The machine's load average before and after a benchmark, and whether a goal may be claimed.

    These machines are shared and noisy: a ratio measured while other work ran says little,
    so a bench prints the load it ran under and refuses to claim a goal on a busy box.
    """

    def __init__(self, busy_per_cpu: float = 0.75) -> None:
        self.cpus = os.cpu_count() or 1
        self.busy_at = busy_per_cpu * self.cpus
        self.before = os.getloadavg()
        self.after: tuple[float, float, float] | None = None

    def stop(self) -> LoadWatch:
        self.after = os.getloadavg()
        return self

    @property
    def busy(self) -> bool:
        """Busy when the 1-minute load as the bench found it exceeds the threshold.

        Not the load after: on a 2-core box the bench's own work (its sandboxes, the
        peer's ``docker exec`` processes) lifts that past the threshold by itself, and
        a load average cannot tell the bench's share from other work's. Both are printed.
        """
        return self.before[0] > self.busy_at

    def report(self) -> str:
        after = self.after or os.getloadavg()
        fmt = "/".join
        return (
            f"load average before {fmt(f'{x:.2f}' for x in self.before)}, "
            f"after {fmt(f'{x:.2f}' for x in after)} ({self.cpus} cpus)"
        )

    def verdict(self, goal: str, met: bool) -> str:
        """One line on a goal: met, not met, or not claimed because the box was busy."""
        if self.busy:
            return f"goal {goal}: not claimed, the box was busy ({self.report()})"
        return f"goal {goal}: {'met' if met else 'NOT met'}"
