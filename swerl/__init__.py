"""swerl: reinforcement learning on software-engineering tasks in real sandboxes."""

__version__ = "0.1.0"

GYMNASIUM_IDS = {"swerl/SWE-v0": "swerl.env.swe_env:SWEEnv"}
"""Gymnasium id -> entry point. ``_swerl_gymnasium.SPECS`` (the hook that registers them when
Gymnasium is imported, without importing swerl) repeats them; a test holds the two equal."""

try:  # bootstrap runs before dependencies are installed
    from gymnasium.envs.registration import register, registry
except ImportError:  # pragma: no cover
    pass
else:
    for _id, _entry_point in GYMNASIUM_IDS.items():
        if _id not in registry:
            register(id=_id, entry_point=_entry_point)
