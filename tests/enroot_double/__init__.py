"""Helpers for the enroot CLI test double (the executable ``enroot`` next to this file)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

DOUBLE = Path(__file__).resolve().parent / "enroot"


def use_double(tmp: Path, run_id: str) -> Iterator[Path]:
    """Point the enroot backend at the double and a temp root; remove the run's containers after."""
    from swerl.sandbox.enroot import ENV_BINARY, ENV_ROOT, reap

    saved = {k: os.environ.get(k) for k in (ENV_BINARY, ENV_ROOT)}
    root = tmp / "root"
    os.environ[ENV_BINARY] = str(DOUBLE)
    os.environ[ENV_ROOT] = str(root)
    try:
        yield root
    finally:
        try:
            reap(enroot=str(DOUBLE), root=str(root))
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
