"""Joining Ray, shared by every layer that runs work on it (rollouts, task synthesis, eval).

Here, below both ``rollout`` and ``tasks``, so neither imports the other for it.
"""

from __future__ import annotations

import logging
import os


def ensure_ray(address: str | None = None) -> None:
    """Connect to Ray (``address``, or RAY_ADDRESS) or start a local one; once per process."""
    import ray  # lazily: importing ray costs seconds, and most callers of this module's users never need it

    if not ray.is_initialized():
        ray.init(
            address=address or os.environ.get("RAY_ADDRESS") or None,
            ignore_reinit_error=True,
            include_dashboard=False,
            logging_level=logging.WARNING,
        )
