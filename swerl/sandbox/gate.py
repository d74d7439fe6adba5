"""A host-wide gate on concurrent sandbox starts, and the per-process fd limit.

A burst of resets (hundreds of envs in several actor processes) would otherwise
ask dockerd to create and start hundreds of containers at once; past a few in
flight it only gets slower per start and calls begin to time out. The gate holds
``width`` slots as lock files under the temp dir, taken with ``flock``: it spans
every process on the host (all actors share one dockerd), and a slot held by a
process that dies is released by the kernel, so a crash never wedges the gate.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import os
import re
import resource
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

from swerl.errors import SandboxError

_POLL = 0.005
_MAX_POLL = 0.05


def _gate_dir(scope: str) -> Path:
    safe = re.sub(r"[^A-Za-z0-9_.-]+", "_", scope) or "default"
    path = Path(tempfile.gettempdir()) / f"swerl-start-gate-{os.getuid()}" / safe
    path.mkdir(parents=True, exist_ok=True)
    return path


@contextlib.contextmanager
def start_slot(width: int, scope: str, timeout: float, what: str = "start a sandbox") -> Iterator[None]:
    """Hold one of ``width`` host-wide slots of ``scope`` while the block runs.

    ``width`` 0 means no gate. Waiting longer than ``timeout`` seconds raises
    SandboxError (an infra error: the episode is retried, never scored).
    """
    if width <= 0:
        yield
        return
    deadline = time.monotonic() + max(0.0, timeout)
    local = _local_gate(scope, width)  # threads of one process queue here, not on the lock files
    if not local.acquire(timeout=max(0.0, timeout)):
        raise _busy(width, scope, timeout, what)
    try:
        fd = _host_slot(_gate_dir(scope), width, deadline)
        if fd is None:
            raise _busy(width, scope, timeout, what)
        try:
            yield
        finally:
            os.close(fd)  # closing the descriptor drops the lock
    finally:
        local.release()


@functools.lru_cache(maxsize=64)
def _local_gate(scope: str, width: int) -> threading.BoundedSemaphore:
    return threading.BoundedSemaphore(width)


def _busy(width: int, scope: str, timeout: float, what: str) -> SandboxError:
    return SandboxError(
        f"could not {what}: all {width} start slots ({scope!r}) stayed busy for {timeout:.0f} s; "
        "the backend is overloaded (raise SandboxConfig.start_timeout or lower the number "
        "of envs resetting at once)"
    )


def _host_slot(root: Path, width: int, deadline: float) -> int | None:
    """The descriptor of one locked slot file of ``root``, or None past ``deadline``."""
    first = os.getpid() % width  # spread processes over the slots so they do not all try slot 0
    delay = _POLL
    while True:
        for i in range(width):
            fd = os.open(root / f"slot-{(first + i) % width}", os.O_RDWR | os.O_CREAT, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                continue
            return fd
        if time.monotonic() >= deadline:
            return None
        time.sleep(delay)
        delay = min(delay * 2, _MAX_POLL)


def raise_fd_limit() -> int:
    """Raise this process's soft RLIMIT_NOFILE to its hard limit (one socket per sandbox
    adds up in an actor hosting hundreds of envs); returns the soft limit now in force."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and soft < hard:
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
            soft = hard
    return soft
