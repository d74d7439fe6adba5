"""``--backend`` for the benchmarks: Docker always, and the named backend measured beside it."""

from __future__ import annotations

import argparse
import contextlib

from swerl.sandbox import BACKENDS, reap


def add_backend_arg(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--backend",
        default="docker",
        choices=sorted(BACKENDS),
        help="also measure this backend, beside docker in the same run (default: docker only)",
    )


def compared(backend: str) -> list[str]:
    """The backends a run measures, docker first (the reference)."""
    return ["docker"] if backend == "docker" else ["docker", backend]


def reap_all(backends: list[str], run_id: str) -> None:
    """Remove what a benchmark left on each backend, whatever happened."""
    for b in backends:
        with contextlib.suppress(Exception):
            reap(b, run_id)
