"""swerl: reinforcement learning on software-engineering tasks in real sandboxes."""

__version__ = "0.1.0"

try:  # bootstrap runs before dependencies are installed
    from gymnasium.envs.registration import register, registry
except ImportError:  # pragma: no cover
    pass
else:
    if "swerl/SWE-v0" not in registry:
        register(id="swerl/SWE-v0", entry_point="swerl.env.swe_env:SWEEnv")
