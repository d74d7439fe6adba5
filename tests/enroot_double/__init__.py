"""Helpers for the enroot CLI test double (the executable ``enroot`` next to this file).

``SWERL_ENROOT_REAL=/path/to/enroot`` runs the same tests against a real Enroot instead;
the failure-injection tests need the double and skip then.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

DOUBLE = Path(__file__).resolve().parent / "enroot"
ENV_REAL = "SWERL_ENROOT_REAL"


def enroot_binary() -> str:
    """The real enroot named by $SWERL_ENROOT_REAL, else the double."""
    return os.environ.get(ENV_REAL) or str(DOUBLE)


def use_double(tmp: Path, run_id: str, binary: str = str(DOUBLE)) -> Iterator[Path]:
    """Point the enroot backend at ``binary`` and a temp root; remove the run's sandboxes after."""
    from swerl.sandbox.enroot import ENV_BINARY, ENV_ROOT, reap

    saved = {k: os.environ.get(k) for k in (ENV_BINARY, ENV_ROOT)}
    root = tmp / "root"
    os.environ[ENV_BINARY] = binary
    os.environ[ENV_ROOT] = str(root)
    try:
        yield root
    finally:
        try:
            reap(enroot=binary, root=str(root))
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
