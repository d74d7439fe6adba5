"""The sandbox protocol: one small surface that every backend implements.

A sandbox is an isolated machine where untrusted commands run. Each command is
stateless (a fresh ``bash -c`` in its cwd), as in mini-swe-agent; state lives in
the filesystem. Backends differ only in how the sandbox is started and how the
one long-lived channel to its command server is opened (see ``shell.py``).
"""

from __future__ import annotations

import dataclasses
import os
import socket
import time
import uuid
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from swerl.errors import (
    BackendUnavailable,
    CommandFailed,
    ImageMissing,
    InfraError,
    SandboxClosed,
    SandboxError,
    SwerlError,
)

if TYPE_CHECKING:
    from swerl.sandbox.shell import ShellChannel

__all__ = [
    "BackendUnavailable",
    "ChannelSandbox",
    "CommandFailed",
    "ExecResult",
    "ImageMissing",
    "InfraError",
    "Sandbox",
    "SandboxClosed",
    "SandboxConfig",
    "SandboxError",
    "SwerlError",
    "default_run_id",
]

OWNER_LABEL = "swerl.owner"
RUN_LABEL = "swerl.run"
HOST_LABEL = "swerl.host"
PID_LABEL = "swerl.pid"

# Capabilities an agent needs to work as root on its own repo (install packages,
# chown in builds, kill its own processes). Everything else is dropped.
DEFAULT_CAPS = ("CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "SETGID", "SETUID")


def default_run_id() -> str:
    """A run id unique to this process: labels let a reaper find its sandboxes."""
    return f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:8]}"


def of_run(label: str, run_id: str) -> bool:
    """Whether a sandbox's run id belongs to run ``run_id``: itself or one of its parts.

    A runner labels its actors' sandboxes ``RUN-a1``, ``RUN-a2``, ..., and a trainer
    integration gives each episode or env its own runner ``RUN-<id>``, so every backend's
    reaper finds them all from one id."""
    return label == run_id or label.startswith(f"{run_id}-")


@dataclass(frozen=True)
class ExecResult:
    """What one command did.

    ``returncode`` is the exit status as bash reports it (128+N when killed by
    signal N). On timeout the whole process group was killed with SIGKILL, so
    ``returncode`` is 137 and ``timed_out`` is True. ``output`` is stdout and
    stderr merged in the order they were written, decoded as UTF-8 with
    replacement; ``raw`` holds the exact bytes.
    """

    raw: bytes
    returncode: int
    duration: float
    timed_out: bool = False
    truncated: bool = False
    output_limit: bool = False
    """The command wrote more than ``SandboxConfig.max_output`` bytes and was killed."""
    killed_by_restart: bool = False
    """The command took the command server down with it; the sandbox was restarted."""
    interrupted: bool = False
    """The command's process group was killed by ``Sandbox.interrupt()`` (returncode 137)."""

    @property
    def output(self) -> str:
        return self.raw.decode("utf-8", errors="replace")

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and not (
            self.timed_out or self.output_limit or self.killed_by_restart or self.interrupted
        )

    def check(self, command: str = "") -> ExecResult:
        """Raise CommandFailed unless the command succeeded; return self otherwise."""
        if not self.ok:
            what = "timed out" if self.timed_out else f"exited {self.returncode}"
            what = "was killed for flooding output" if self.output_limit else what
            raise CommandFailed(f"command {what}: {command[:200]!r}\n{self.output[-2000:]}", self)
        return self


@dataclass(frozen=True)
class SandboxConfig:
    """Limits and isolation for untrusted code. Safe by default; all configurable."""

    network: bool = False
    memory: str = "4g"
    cpus: float = 2.0
    pids_limit: int = 1024
    cap_add: tuple[str, ...] = DEFAULT_CAPS
    user: str = "root"
    workdir: str = "/"
    env: dict[str, str] = field(default_factory=dict)
    timeout: float = 120.0
    """Default per-command timeout in seconds (0 means none)."""
    output_cap: int = 1 << 20
    """Bytes of output kept per command; beyond it the head and tail are kept."""
    max_output: int = 64 << 20
    """A command that writes more output than this is killed (an output flood)."""
    max_file_size: int = 1 << 30
    """Largest file a command may write (``ulimit -f``); 0 for no limit."""
    storage_mb: int = 0
    """Size limit of the sandbox's writable layer in MB (0: none). Docker only, on a storage driver
    that supports ``--storage-opt size`` (``swerl.sandbox.docker.storage_limit_refusal``); the
    other backends refuse it in ``make_sandbox``."""
    start_timeout: float = 60.0
    lifetime: float = 6 * 3600.0
    """Seconds the sandbox may live at most: it must outlive any episode."""
    start_gate: int = 8
    """Sandboxes starting at once on this host, over every process (0: no gate). Past a few
    in flight dockerd only gets slower per start; see ``swerl.sandbox.gate``."""
    start_gate_scope: str = ""
    """Which gate: sandboxes of one scope share its slots (empty: one per backend daemon)."""
    run_id: str = field(default_factory=default_run_id)
    labels: dict[str, str] = field(default_factory=dict)

    def replace(self, **changes: object) -> SandboxConfig:
        return dataclasses.replace(self, **changes)  # type: ignore[arg-type]

    def all_labels(self) -> dict[str, str]:
        return {
            OWNER_LABEL: "swerl",
            RUN_LABEL: self.run_id,
            HOST_LABEL: socket.gethostname(),
            PID_LABEL: str(os.getpid()),
            **self.labels,
        }


@runtime_checkable
class Sandbox(Protocol):
    """Where commands run. Backends: docker, enroot, kubernetes."""

    image: str
    config: SandboxConfig

    def start(self) -> Sandbox: ...

    def execute(
        self,
        command: str,
        cwd: str | None = None,
        timeout: float | None = None,
        env: dict[str, str] | None = None,
    ) -> ExecResult: ...

    def read_file(self, path: str) -> bytes: ...

    def write_file(self, path: str, data: bytes, mode: int = 0o644) -> None: ...

    def close(self) -> None: ...

    @property
    def alive(self) -> bool: ...

    def __enter__(self) -> Sandbox: ...

    def __exit__(self, *exc: object) -> None: ...


class ChannelSandbox:
    """What every backend shares: one ShellChannel, opened by ``start()``, closed once.

    A backend says how to start its sandbox and open the channel (``start``), what
    to add to an error (``_state_hint``), and may recover from a dead command server
    (``_recover``). Commands, files, closing and the context manager live here, so
    the backends cannot drift apart on them.
    """

    backend = "abstract"

    def __init__(self, image: str, config: SandboxConfig | None = None) -> None:
        self.image = image
        self.config = config or SandboxConfig()
        self._channel: ShellChannel | None = None
        self._closed = False
        self._finalizer: weakref.finalize | None = None

    # ------------------------------------------------------------- lifecycle
    def start(self) -> ChannelSandbox:
        raise NotImplementedError

    @property
    def describe(self) -> str:
        """How errors name this sandbox."""
        return f"{self.backend} sandbox ({self.image})"

    def _refuse_if_closed(self) -> None:
        if self._closed:
            raise SandboxClosed(f"{self.describe} was closed; make a new one")

    def _own(self, release: Callable[..., object], *args: object) -> None:
        """Release the sandbox's resources exactly once: on close, or when it is collected."""
        self._finalizer = weakref.finalize(self, release, *args)

    @property
    def alive(self) -> bool:
        return bool(self._channel and not self._channel.broken and not self._closed)

    def close(self) -> None:
        """Release the sandbox. Idempotent; safe to call from finally blocks."""
        self._closed = True
        try:
            if self._channel:
                self._channel.quit()
            self._close_transport()
        finally:
            # A transport that broke on the way out must not keep the sandbox alive.
            if self._finalizer is not None:
                finalizer, self._finalizer = self._finalizer, None
                finalizer()

    def _close_transport(self) -> None:
        """Close what carries the channel (a socket, a websocket), if the backend has one."""

    def __enter__(self) -> ChannelSandbox:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -------------------------------------------------------------- commands
    def _live_channel(self) -> ShellChannel:
        if self._closed:
            raise SandboxClosed(f"{self.describe} is closed")
        if self._channel is None:
            self.start()
        assert self._channel is not None
        return self._channel

    def execute(
        self,
        command: str,
        cwd: str | None = None,
        timeout: float | None = None,
        env: dict[str, str] | None = None,
    ) -> ExecResult:
        channel = self._live_channel()
        timeout = self.config.timeout if timeout is None else timeout
        start = time.monotonic()
        try:
            return channel.execute(command, cwd or self.config.workdir, timeout, env)
        except SandboxError as e:
            recovered = self._recover(start)
            if recovered is not None:
                return recovered
            raise SandboxError(f"{e}{self._state_hint()}") from e

    def interrupt(self) -> None:
        """Kill the command running now (its whole process group, SIGKILL), from another thread.

        Its ``execute`` returns 137 with ``interrupted=True``; the sandbox and its files stay.
        The channel has no cancel (the server does not read it while a command runs), so the
        backend writes ``K`` into the server's control fifo from beside it (``_interrupt``: a
        second exec, or the host's view of the sandbox). With no command running, nothing
        happens. Raises ``SandboxError`` when the backend cannot reach the sandbox that way."""
        channel = self._channel
        if channel is None or channel.broken or not channel.server_dir or not channel.server_pid:
            return
        self._interrupt(channel.server_pid, channel.server_dir + "/ctl")

    def _interrupt(self, server_pid: int, ctl: str) -> None:
        """Write the line ``K`` into the fifo ``ctl`` (a path in the sandbox) of the server
        ``server_pid`` (its pid in the sandbox), without the channel."""
        raise SandboxError(f"{self.describe}: this backend cannot interrupt a running command")

    def _recover(self, started: float) -> ExecResult | None:
        """The channel broke during a command begun at ``started`` (monotonic): a result
        if the backend brought the sandbox back, else None (an infra error)."""
        return None

    def _state_hint(self) -> str:
        """What the backend can tell about a sandbox whose channel broke, as ' (...)'."""
        return ""

    def read_file(self, path: str) -> bytes:
        return self._live_channel().read_file(path)

    def write_file(self, path: str, data: bytes, mode: int = 0o644) -> None:
        self._live_channel().write_file(path, bytes(data), mode)
