"""Use any swerl sandbox wherever mini-swe-agent expects an Environment.

mini-swe-agent's agents call ``env.execute(action, cwd="", *, timeout=None)`` and
expect ``{"output", "returncode", "exception_info"}``; a first output line of
``COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT`` ends the run with ``Submitted``. This
adapter gives exactly that on top of a swerl sandbox, so its DefaultAgent and
its configs run unchanged against Docker, Enroot or Kubernetes sandboxes.
"""

from __future__ import annotations

import os
import platform
from dataclasses import asdict, dataclass, field
from typing import Any

from swerl.errors import InfraError
from swerl.sandbox.base import Sandbox

SUBMIT_MARKER = "COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"


def _submitted_exception() -> type[Exception]:
    os.environ.setdefault("MSWEA_SILENT_STARTUP", "1")  # the import prints a banner otherwise
    from minisweagent.exceptions import Submitted

    return Submitted


@dataclass
class MiniSweEnvironmentConfig:
    cwd: str = "/testbed"
    timeout: float = 60.0
    env: dict[str, str] = field(default_factory=dict)


class MiniSweEnvironment:
    """A mini-swe-agent Environment backed by a started swerl sandbox."""

    def __init__(self, sandbox: Sandbox, **kwargs: Any) -> None:
        self.sandbox = sandbox
        self.config = MiniSweEnvironmentConfig(**kwargs)

    def execute(self, action: dict | str, cwd: str = "", *, timeout: float | None = None) -> dict[str, Any]:
        command = action.get("command", "") if isinstance(action, dict) else action
        try:
            result = self.sandbox.execute(
                command,
                cwd=cwd or self.config.cwd,
                timeout=timeout or self.config.timeout,
                env=self.config.env,
            )
        except InfraError as e:
            return {
                "output": "",
                "returncode": -1,
                "exception_info": f"The sandbox failed while executing the command: {e}",
                "extra": {"exception_type": type(e).__name__, "exception": str(e)},
            }
        output: dict[str, Any] = {
            "output": result.output,
            "returncode": result.returncode,
            "exception_info": "",
        }
        if result.timed_out:
            output["exception_info"] = (
                f"The command timed out after {timeout or self.config.timeout:g} s and was killed."
            )
        self._check_finished(output)
        return output

    def _check_finished(self, output: dict[str, Any]) -> None:
        lines = output["output"].lstrip().splitlines(keepends=True)
        if lines and lines[0].strip() == SUBMIT_MARKER and output["returncode"] == 0:
            submission = "".join(lines[1:])
            raise _submitted_exception()(
                {
                    "role": "exit",
                    "content": submission,
                    "extra": {"exit_status": "Submitted", "submission": submission},
                }
            )

    def get_template_vars(self, **kwargs: Any) -> dict[str, Any]:
        return {**asdict(self.config), "image": self.sandbox.image, **platform.uname()._asdict(), **kwargs}

    def serialize(self) -> dict[str, Any]:
        return {
            "info": {
                "config": {
                    "environment": asdict(self.config) | {"image": self.sandbox.image},
                    "environment_type": f"{type(self).__module__}.{type(self).__name__}",
                }
            }
        }
