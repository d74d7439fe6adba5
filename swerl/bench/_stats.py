"""Small helpers shared by the benchmarks."""

from __future__ import annotations

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
