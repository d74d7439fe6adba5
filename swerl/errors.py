"""One exception hierarchy for all of swerl.

The split that matters for RL is between *infrastructure* failures (the sandbox,
the daemon, an image, the harness itself) and everything else. Infrastructure
failures are retried and are never turned into a reward of zero.
"""

from __future__ import annotations


class SwerlError(Exception):
    """Base class of every error swerl raises on purpose."""


class ConfigError(SwerlError, ValueError):
    """Bad input from the user: a config, a task file, an argument."""


class InfraError(SwerlError):
    """The infrastructure failed, not the agent's code. Retry; never score it."""


class SandboxError(InfraError):
    """A sandbox could not be started, died, or its channel broke."""


class BackendUnavailable(SandboxError):
    """The backend itself (dockerd, enroot, the Kubernetes API) cannot be reached."""


class ImageMissing(SandboxError):
    """The image a sandbox needs is not present; the message says how to build it."""


class SandboxClosed(SandboxError):
    """An operation was attempted on a sandbox that is closed."""


class InexactTokens(ConfigError):
    """An episode's tokens are not the ones its model saw and sampled, and the trainer was not told to accept that."""


class PolicyError(InfraError):
    """The model server failed the policy (down, past its timeout, or an answer that is not one)."""


class CommandFailed(SwerlError):
    """A command ran and exited non-zero, and the caller asked for ``check=True``."""

    def __init__(self, message: str, result: object) -> None:
        super().__init__(message)
        self.result = result
