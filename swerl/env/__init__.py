"""The Gymnasium environment: ``gymnasium.make("swerl/SWE-v0", tasks=..., backend=...)``."""

from swerl.env.swe_env import Limits, SWEEnv

__all__ = ["Limits", "SWEEnv"]
