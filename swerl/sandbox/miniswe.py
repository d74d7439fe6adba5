"""mini-swe-agent's Environment on any swerl sandbox: a drop-in for its DockerEnvironment.

mini-swe-agent builds environments from keyword config alone
(``get_environment({"environment_class": "swerl.sandbox.miniswe.MiniSweEnvironment",
"image": ..., ...})``), so this adapter takes the keys of mini's
``DockerEnvironmentConfig`` — ``image``, ``cwd`` ("/"), ``timeout`` (30), ``env``,
``forward_env``, ``container_timeout``, ``interpreter`` (``bash -lc``), ``executable``,
``run_args``, ``pull_timeout`` — creates and owns a sandbox on any swerl backend
(``backend: docker | enroot | kubernetes``), or drives one it is given
(``sandbox=``). Results are mini's: ``{"output", "returncode", "exception_info"}``
(plus ``extra`` on failures), a first output line ``COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT``
raises ``Submitted``, a timeout is ``returncode -1`` with
``extra.exception_type == "TimeoutExpired"``.

Deliberate differences from mini's DockerEnvironment, all for running untrusted code:

- No network unless asked (``run_args: [--network, bridge]``); memory, CPU and pids
  limits (``SandboxConfig``'s defaults, or ``--memory``/``--cpus``/``--pids-limit``);
  capabilities dropped but for the few an agent needs as root; no host environment
  unless ``forward_env`` names it.
- Output beyond ``SandboxConfig.output_cap`` (1 MiB) keeps its head and tail; a
  command writing more than ``max_output`` (64 MiB) is killed. ``exception_info`` says
  so, and says when the command took the command server down and the sandbox was
  restarted (both ``returncode -1``).
- A timeout kills the command's whole process group, not just the client.
- ``run_args`` are read, not passed to a CLI: the options with a swerl equivalent
  are mapped, any other is a ConfigError naming it. ``executable`` must be docker:
  swerl talks to the daemon's API (``DOCKER_HOST`` picks the daemon). Images are never
  pulled, so ``pull_timeout`` is unused. Other unknown keys are ignored with a warning,
  as mini's configs ignore them.
- ``cleanup()`` removes the sandbox before it returns (mini's stops it in the
  background); a sandbox passed in is the caller's to close.
"""

from __future__ import annotations

import logging
import os
import platform
import re
import subprocess
import weakref
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from swerl.errors import ConfigError, InfraError, SwerlError
from swerl.sandbox import SandboxConfig, make_sandbox
from swerl.sandbox.base import ExecResult, Sandbox
from swerl.sandbox.interpreter import LOGIN_SHELL, check_interpreter, under_interpreter
from swerl.sandbox.shell import encode_env

SUBMIT_MARKER = "COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"


def _mini() -> Any:
    """mini-swe-agent, imported when first needed (its import prints a banner unless silenced)."""
    os.environ.setdefault("MSWEA_SILENT_STARTUP", "1")
    import minisweagent.exceptions
    import minisweagent.utils.serialize

    return minisweagent


class MiniSweEnvironmentConfig(BaseModel):
    """The keys of mini-swe-agent's DockerEnvironmentConfig, same defaults, plus where to run."""

    model_config = ConfigDict(extra="ignore")

    image: str = ""
    """Image of the sandbox; taken from ``sandbox`` when one is given."""
    cwd: str = "/"
    """Working directory of commands."""
    env: dict[str, str] = {}
    """Environment variables of every command; they win over ``forward_env``."""
    forward_env: list[str] = []
    """Host variables passed to commands when set on the host (read at each command)."""
    timeout: int | float = 30
    """Seconds a command may run."""
    executable: str = Field(default_factory=lambda: os.getenv("MSWEA_DOCKER_EXECUTABLE", "docker"))
    """Only docker: swerl uses the daemon's API, never a CLI."""
    run_args: list[str] = ["--rm"]
    """``docker run`` options; those with a swerl equivalent are mapped (see ``run_args_to_config``)."""
    container_timeout: str = "2h"
    """How long the sandbox may live (``sleep`` syntax: 30s, 10m, 2h, 1d)."""
    pull_timeout: int = 120
    """Unused: swerl never pulls images."""
    interpreter: list[str] = list(LOGIN_SHELL)
    """What runs each command, the command appended (``bash -lc`` reads the image's profile)."""
    backend: str = "docker"
    """swerl backend of the sandbox: docker, enroot or kubernetes."""
    backend_options: dict[str, Any] = {}
    """Keyword arguments of the backend's sandbox class."""
    sandbox_config: dict[str, Any] = {}
    """Other ``SandboxConfig`` fields (``output_cap``, ``max_output``, ``run_id``, ...)."""

    @field_validator("env")
    @classmethod
    def _env_keys(cls, env: dict[str, str]) -> dict[str, str]:
        encode_env(env)  # raises on a name no shell can export, or a NUL byte
        return env

    @field_validator("forward_env")
    @classmethod
    def _forward_keys(cls, names: list[str]) -> list[str]:
        encode_env(dict.fromkeys(names, ""))
        return names

    @field_validator("interpreter")
    @classmethod
    def _interpreter(cls, interpreter: list[str]) -> list[str]:
        return list(check_interpreter(interpreter))


_DURATION = re.compile(r"(\d+(?:\.\d*)?)([smhd]?)\Z")
_SECONDS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_duration(text: str) -> float:
    """Seconds in a ``sleep``-style duration such as ``3s``, ``10m``, ``2h``."""
    m = _DURATION.match(str(text).strip())
    if not m or float(m.group(1)) <= 0:
        raise ConfigError(f"container_timeout {text!r} is not a duration such as 30s, 10m, 2h or 1d")
    return float(m.group(1)) * _SECONDS[m.group(2)]


_NO_OP_FLAGS = {"--rm", "-d", "--detach", "--init"}
"""Already what a swerl sandbox does: removed on cleanup, detached, PID 1 reaps orphans."""
_VALUE_FLAGS = {
    "--network": "network", "--net": "network", "--memory": "memory", "-m": "memory",
    "--memory-swap": "memory_swap", "--cpus": "cpus", "--pids-limit": "pids_limit",
    "--user": "user", "-u": "user", "--env": "env", "-e": "env", "--label": "label",
    "-l": "label", "--cap-add": "cap_add", "--cap-drop": "cap_drop", "--name": "name",
}  # fmt: skip


def _flag_values(run_args: list[str]) -> list[tuple[str, str, str]]:
    """(flag, key, value) for each option of ``run_args``; ConfigError for one swerl lacks."""
    out: list[tuple[str, str, str]] = []
    args = list(run_args)
    while args:
        arg = args.pop(0)
        flag, eq, value = arg.partition("=") if arg.startswith("--") else (arg, "", "")
        if flag in _NO_OP_FLAGS and not eq:
            continue
        if flag not in _VALUE_FLAGS:
            known = ", ".join(sorted(_NO_OP_FLAGS | set(_VALUE_FLAGS)))
            raise ConfigError(f"run_args option {arg!r} has no swerl equivalent; supported: {known}")
        if not eq:
            if not args:
                raise ConfigError(f"run_args option {flag} needs a value")
            value = args.pop(0)
        out.append((flag, _VALUE_FLAGS[flag], value))
    return out


def run_args_to_config(run_args: list[str], base: SandboxConfig) -> tuple[SandboxConfig, dict[str, Any]]:
    """``docker run`` options as swerl sandbox settings: (config, sandbox class keywords)."""
    changes: dict[str, Any] = {}
    env, labels, caps = dict(base.env), dict(base.labels), list(base.cap_add)
    options: dict[str, Any] = {}
    swap = ""
    for flag, key, value in _flag_values(run_args):
        if key == "network":
            if value not in ("none", "bridge", "default"):
                raise ConfigError(
                    f"run_args {flag} {value}: a swerl sandbox has no network (none) or docker's bridge"
                )
            changes["network"] = value != "none"
        elif key in ("memory", "user"):
            changes[key] = value
        elif key == "memory_swap":
            swap = value
        elif key in ("cpus", "pids_limit"):
            try:
                changes[key] = (float if key == "cpus" else int)(value)
            except ValueError:
                raise ConfigError(f"run_args {flag} {value!r} is not a number") from None
        elif key in ("env", "label"):
            k, eq, v = value.partition("=")
            if key == "label":
                labels[k] = v
            elif eq:
                env[k] = v
            elif k in os.environ:  # `-e NAME` passes the host's value, as docker does
                env[k] = os.environ[k]
        elif key == "cap_add":
            caps.append(value.upper().removeprefix("CAP_"))
        elif key == "cap_drop":
            drop = value.upper().removeprefix("CAP_")
            caps = [] if drop == "ALL" else [c for c in caps if c != drop]
        elif key == "name":
            options["name"] = value
    memory = changes.get("memory", base.memory)
    if swap and swap != memory:
        raise ConfigError(f"run_args --memory-swap {swap}: swerl sandboxes have no swap (it equals --memory)")
    try:
        encode_env(env)
    except ValueError as e:
        raise ConfigError(f"run_args: {e}") from None
    return base.replace(**changes, env=env, labels=labels, cap_add=tuple(dict.fromkeys(caps))), options


def _failed(output: str, info: str, exception_type: str, exception: str) -> dict[str, Any]:
    """A result as mini's environments give one for a command that did not finish by itself."""
    extra = {"exception_type": exception_type, "exception": exception}
    return {"output": output, "returncode": -1, "exception_info": info, "extra": extra}


SANDBOX_MAKING_KEYS = (
    "container_timeout",
    "run_args",
    "sandbox_config",
    "backend",
    "backend_options",
    "executable",
)
"""Keys that only shape a sandbox swerl makes, so they do nothing with ``sandbox=``."""


class MiniSweEnvironment:
    """A mini-swe-agent Environment on a swerl sandbox it creates and owns, or is given."""

    def __init__(
        self,
        sandbox: Sandbox | None = None,
        *,
        config_class: type[MiniSweEnvironmentConfig] = MiniSweEnvironmentConfig,
        logger: logging.Logger | None = None,
        **kwargs: Any,
    ) -> None:
        self.logger = logger or logging.getLogger("swerl.miniswe")
        if unknown := sorted(set(kwargs) - set(config_class.model_fields)):
            self.logger.warning("ignoring environment keys swerl does not know: %s", ", ".join(unknown))
        if sandbox is not None:
            if kwargs.get("image", sandbox.image) != sandbox.image:
                raise ConfigError(
                    f"image {kwargs['image']!r} differs from the given sandbox's {sandbox.image!r}"
                )
            kwargs["image"] = sandbox.image
            made = [k for k in SANDBOX_MAKING_KEYS if k in kwargs]
            if made:  # they shape a sandbox swerl makes; a given one is already made
                self.logger.warning(
                    "ignoring %s: the given sandbox is already made (they apply when swerl makes one)",
                    ", ".join(made),
                )
        try:
            self.config = config_class(**kwargs)
        except ValidationError as e:
            raise ConfigError(f"bad mini-swe-agent environment config: {e}") from None
        owned = sandbox is None
        self.sandbox = sandbox or self._new_sandbox()
        self._finalizer = weakref.finalize(self, self.sandbox.close) if owned else None

    def _new_sandbox(self) -> Sandbox:
        cfg = self.config
        if not cfg.image:
            raise ConfigError("MiniSweEnvironment needs an image (or a started sandbox as `sandbox`)")
        if os.path.basename(cfg.executable) != "docker":
            raise ConfigError(
                f"executable {cfg.executable!r}: swerl talks to the Docker daemon's API, never to a CLI; "
                "point DOCKER_HOST at the daemon (a podman socket works) and leave executable as docker"
            )
        try:
            base = SandboxConfig(**cfg.sandbox_config)
        except TypeError as e:
            raise ConfigError(f"sandbox_config: {e}") from None
        sandbox_config, options = run_args_to_config(cfg.run_args, base)
        sandbox_config = sandbox_config.replace(
            workdir=cfg.cwd, timeout=float(cfg.timeout), lifetime=parse_duration(cfg.container_timeout)
        )
        sandbox = make_sandbox(cfg.backend, cfg.image, sandbox_config, **{**cfg.backend_options, **options})
        return sandbox.start()

    @property
    def container_id(self) -> str | None:
        """The backend's id of the sandbox (docker container id, enroot or pod name)."""
        return getattr(self.sandbox, "container_id", None) or getattr(self.sandbox, "name", None)

    # -------------------------------------------------------------- commands
    def _command_env(self) -> dict[str, str]:
        forwarded = {k: v for k in self.config.forward_env if (v := os.environ.get(k)) is not None}
        return {**forwarded, **self.config.env}

    def execute(
        self, action: dict | str, cwd: str = "", *, timeout: int | float | None = None
    ) -> dict[str, Any]:
        """Run one command; never raises for what the command does (only ``Submitted``)."""
        command = action.get("command", "") if isinstance(action, dict) else action
        timeout = timeout or self.config.timeout
        try:
            result = self.sandbox.execute(
                under_interpreter(command, self.config.interpreter),
                cwd=cwd or self.config.cwd,
                timeout=timeout,
                env=self._command_env(),
            )
        except (ValueError, SwerlError) as e:  # ValueError: text no shell can take (a NUL byte)
            why = " (the sandbox failed)" if isinstance(e, InfraError) else ""
            output = _failed(
                "", f"An error occurred while executing the command{why}: {e}", type(e).__name__, str(e)
            )
        else:
            output = self._output(result, command, timeout)
        self._check_finished(output)
        return output

    def _output(self, r: ExecResult, command: str, timeout: float) -> dict[str, Any]:
        note = (
            f" [swerl: the output exceeded {self.sandbox.config.output_cap} bytes; "
            "its head and tail are kept, the middle is dropped]"
            if r.truncated
            else ""
        )
        if r.timed_out:
            e = subprocess.TimeoutExpired([*self.config.interpreter, command], timeout)
            info = f"An error occurred while executing the command: {e} (its whole process group was killed)"
            return _failed(r.output, info + note, type(e).__name__, str(e))
        if r.output_limit:
            info = f"swerl killed the command: it wrote more than {self.sandbox.config.max_output} bytes of output"
            return _failed(r.output, info + note, "OutputLimitExceeded", info)
        if r.killed_by_restart:
            info = (
                "the command took the sandbox's command server down; the sandbox was restarted (files kept)"
            )
            return _failed(r.output, info, "SandboxRestarted", info)
        output: dict[str, Any] = {
            "output": r.output,
            "returncode": r.returncode,
            "exception_info": note.strip(),
        }
        if r.truncated:
            output["extra"] = {"truncated": True}
        return output

    def _check_finished(self, output: dict[str, Any]) -> None:
        lines = output["output"].lstrip().splitlines(keepends=True)
        if lines and lines[0].strip() == SUBMIT_MARKER and output["returncode"] == 0:
            submission = "".join(lines[1:])
            raise _mini().exceptions.Submitted(
                {
                    "role": "exit",
                    "content": submission,
                    "extra": {"exit_status": "Submitted", "submission": submission},
                }
            )

    # ------------------------------------------------------- what mini reads
    def get_template_vars(self, **kwargs: Any) -> dict[str, Any]:
        merge = _mini().utils.serialize.recursive_merge
        return merge(self.config.model_dump(), platform.uname()._asdict(), kwargs)

    def serialize(self) -> dict[str, Any]:
        return {
            "info": {
                "config": {
                    "environment": self.config.model_dump(mode="json"),
                    "environment_type": f"{type(self).__module__}.{type(self).__name__}",
                }
            }
        }

    # -------------------------------------------------------------- lifecycle
    def cleanup(self) -> None:
        """Remove the sandbox if this environment created it. Idempotent."""
        if self._finalizer is not None:
            self._finalizer()

    def __enter__(self) -> MiniSweEnvironment:
        return self

    def __exit__(self, *exc: object) -> None:
        self.cleanup()
